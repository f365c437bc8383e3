//! The conformance matrix on the wgpu backend (Mesa's lavapipe in CI): the families whose
//! kernels are WGSL — elementwise unary, binary and ternary ops, copies and casts, creation,
//! views, matrix products and random draws (against the CPU's draws of the same seed) — over
//! every layout and dtype, with zero failures. Skips, saying so, without an
//! adapter (`STRIDE_REQUIRE_WGPU=1` makes it mandatory). The whole registry, including the
//! families that still run as CPU round trips: `stride check --device wgpu`.

use stride_check::{registry, run, Config, Family};

#[test]
fn sampled_elementwise_matrix_passes_on_wgpu() {
    let Some(device) = stride_core::webgpu::require_or_skip("conformance on wgpu") else {
        return;
    };
    let families = [
        Family::Unary,
        Family::Binary,
        Family::Ternary,
        Family::Copy,
        Family::Creation,
        Family::View,
        Family::Matmul,
        Family::Random,
    ];
    let ops: Vec<String> = registry::all()
        .iter()
        .filter(|o| families.contains(&o.family))
        .map(|o| o.name.to_string())
        .collect();
    let report = run(&Config {
        device,
        ops: ops.clone(),
        progress: std::env::var("STRIDE_CHECK_PROGRESS").is_ok(),
        ..Config::default()
    });
    println!("{}", report.table().lines().next().unwrap_or_default());
    let failures: Vec<String> = report
        .failures()
        .iter()
        .map(|(k, f)| format!("[{} {} {} {}] {f}", k.op, k.form.name(), k.layout, k.dtype))
        .collect();
    assert!(
        failures.is_empty(),
        "{} failing rows on {device}:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert_eq!(report.not_implemented_total(), 0);
    // it ran what it claims: every selected op checked at least one result
    for name in &ops {
        let o = registry::select(name)[0];
        assert!(
            o.forms().iter().any(|&f| report.ran(o.name, f)),
            "{name} checked nothing on {device}"
        );
    }
}
