//! The exhaustive sweep: every op × form × dtype × layout × every shape of the size sweep.
//! Slow, so ignored by default:
//!
//! ```text
//! cargo test -p stride-check --test full -- --ignored            # every op
//! STRIDE_CHECK_OPS=add,neg cargo test -p stride-check --test full -- --ignored
//! ```
//!
//! (`stride check --full` runs the same.)

use stride_check::{run, Config};

#[test]
#[ignore = "the exhaustive sweep takes long; run with --ignored"]
fn full_sweep_passes_on_cpu() {
    let ops = std::env::var("STRIDE_CHECK_OPS")
        .map(|s| s.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let report = run(&Config {
        full: true,
        ops,
        progress: true,
        ..Config::default()
    });
    println!(
        "{} checks in {:.1} s",
        report.passed() + report.failed(),
        report.elapsed_s
    );
    assert!(report.ok(), "{}", report.table());
}
