//! The conformance matrix on the wgpu backend (Mesa's lavapipe in CI): the families whose
//! kernels are WGSL — elementwise unary, binary and ternary ops, copies and casts, creation,
//! views, matrix products and random draws (against the CPU's draws of the same seed) — and
//! the reductions and scans whose primitive is WGSL, and a sample of the gathers, scatters and
//! sorts, over every layout and dtype, with zero failures.
//! Skips, saying so, without an adapter (`STRIDE_REQUIRE_WGPU=1` makes it mandatory). The
//! whole registry, including the families that still run as CPU round trips (and the
//! composed reductions: var, std, norm, logsumexp): `stride check --device wgpu`.

use stride_check::{registry, run, Config, Family};

#[test]
fn sampled_elementwise_matrix_passes_on_wgpu() {
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
    passes_on_wgpu("conformance on wgpu", &ops);
}

#[test]
fn sampled_reduction_matrix_passes_on_wgpu() {
    let ops: Vec<String> = [
        "sum",
        "mean",
        "prod",
        "amax",
        "amin",
        "max.all",
        "min.all",
        "max_dim",
        "min_dim",
        "all",
        "any",
        "count_nonzero",
        "argmax",
        "argmin",
        "cumsum",
        "cumprod",
    ]
    .map(String::from)
    .into();
    passes_on_wgpu("reductions on wgpu", &ops);
}

#[test]
fn sampled_index_and_sort_matrix_passes_on_wgpu() {
    // the gather, scatter and sort kernels (top-k is a sort and a copy: left to
    // `stride check --device wgpu`, it takes minutes on lavapipe)
    let ops: Vec<String> = [
        "index_select",
        "gather",
        "embedding",
        "scatter_add",
        "scatter_reduce",
        "index_add",
        "sort",
    ]
    .map(String::from)
    .into();
    passes_on_wgpu("indexing and sorting on wgpu", &ops);
}

/// Runs `ops` on `wgpu:0`: zero failures, nothing unimplemented, every op checked.
fn passes_on_wgpu(test: &str, ops: &[String]) {
    let Some(device) = stride_core::webgpu::require_or_skip(test) else {
        return;
    };
    let report = run(&Config {
        device,
        ops: ops.to_vec(),
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
    for name in ops {
        let o = registry::select(name)[0];
        assert!(
            o.forms().iter().any(|&f| report.ran(o.name, f)),
            "{name} checked nothing on {device}"
        );
    }
}
