//! Shared by the CLI tests: where the `stride` binary is.

use std::path::PathBuf;

/// The `stride` binary cargo built for these tests, or `$STRIDE_BIN` when set; on a machine
/// where the tests were carried without their build tree (the GPU machine: `.gpu/`), the
/// packed `.gpu/stride` next to the test binaries.
pub fn stride_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("STRIDE_BIN") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_stride"));
    if built.exists() {
        return built;
    }
    let packed = PathBuf::from(".gpu/stride");
    if packed.exists() {
        return packed;
    }
    built
}
