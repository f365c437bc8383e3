//! Every registry entry held to its [`Grad`] (see `stride_check::grad`): `Once`/`Twice`
//! entries are gradchecked (and gradgradchecked) in f64 over their own samples and every
//! registry layout; a `No` entry whose result requires grad fails. Coverage comes from the
//! registry: a new op is gradchecked as soon as its entry says it is differentiable, and an
//! entry that says `No` while the op records a backward fails here.
//!
//! `STRIDE_GRADCHECK_EXHAUSTIVE=1` runs every sample of every layout and base shape, and
//! gradgradchecks in every layout (minutes in a debug build; the default samples one case
//! per layout and takes seconds).

use stride_check::grad::{check_op, run_all, GradConfig};
use stride_check::registry::{self, Arg, Grad, OpInfo};
use stride_core::Tensor;

fn config() -> GradConfig {
    GradConfig {
        exhaustive: std::env::var("STRIDE_GRADCHECK_EXHAUSTIVE").is_ok_and(|v| v == "1"),
        ..GradConfig::default()
    }
}

#[test]
fn every_registry_entry_is_held_to_its_grad() {
    let t = std::time::Instant::now();
    let rep = run_all(&config());
    let (gc, gg) = rep.totals();
    let (no, once, twice) = rep.counts();
    println!(
        "gradcheck sweep: {} entries ({no} No, {once} Once, {twice} Twice); {gc} gradcheck runs, {gg} gradgradcheck runs, {:.1}s",
        rep.ops.len(),
        t.elapsed().as_secs_f64()
    );
    for o in rep.ops.iter().filter(|o| !o.expected_failures.is_empty()) {
        println!(
            "  expected failure {}: {} ({} cases)",
            o.op,
            stride_check::grad::expected_failure(o.op).unwrap_or(""),
            o.expected_failures.len()
        );
    }
    let skipped: usize = rep.ops.iter().map(|o| o.skipped).sum();
    println!("  {skipped} cases skipped (layout refused, or not finite)");
    let failures = rep.failures();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // the registry's differentiable ops did not silently shrink (the old hand-written table
    // covered 130 frontends)
    assert!(once + twice >= 130, "{once} Once + {twice} Twice entries");
    assert!(twice >= 40, "{twice} Twice entries");
}

/// The same sweep on the GPU; skips, saying so, without one. Cases without a kernel there
/// are counted apart (never passed).
#[test]
fn every_registry_entry_is_held_to_its_grad_on_cuda() {
    let Some(device) = stride_core::cuda::require_or_skip("gradcheck sweep on cuda") else {
        return;
    };
    let rep = run_all(&GradConfig { device, ..config() });
    let ni: usize = rep.ops.iter().map(|o| o.not_implemented).sum();
    println!("gradcheck sweep on {device}: {ni} cases without a kernel");
    let failures = rep.failures();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn exp_entry() -> OpInfo {
    registry::find("exp").expect("exp is registered").clone()
}

/// A gradient 10⁻⁵ off (relative) through a zero-valued term: the value is `exp`'s, the
/// recorded derivative `exp(x)·(1 + 10⁻⁵)`.
#[test]
fn a_slightly_wrong_gradient_fails() {
    let op = exp_entry()
        .functional(|a, _| {
            let (x, d) = (a[0].t(), a[0].t().detach());
            x.exp()?.add(&x.sub(&d)?.mul(&d.exp()?.mul(1e-5)?)?)
        })
        .grad(Grad::Once);
    let rep = check_op(&op, &GradConfig::default());
    assert!(rep.gradchecks > 0);
    assert!(
        rep.failures.iter().any(|f| f.contains("Jacobian mismatch")),
        "{:?}",
        rep.failures
    );
    // and the right one passes the same sweep
    let rep = check_op(&exp_entry().grad(Grad::Once), &GradConfig::default());
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
}

/// A right first derivative recorded as a constant (its own derivative lost) passes
/// gradcheck but not gradgradcheck: `Twice` must be earned.
#[test]
fn a_first_derivative_without_its_own_derivative_fails_twice() {
    let cube = |a: &[Arg], _: &_| -> stride_core::Result<Tensor> {
        let (x, d) = (a[0].t(), a[0].t().detach());
        d.mul(&d)?
            .mul(&d)?
            .add(&x.sub(&d)?.mul(&d.mul(&d)?.mul(3.0)?)?)
    };
    let once = check_op(
        &exp_entry().functional(cube).grad(Grad::Once),
        &GradConfig::default(),
    );
    assert!(once.failures.is_empty(), "{:?}", once.failures);
    let twice = check_op(
        &exp_entry().functional(cube).grad(Grad::Twice),
        &GradConfig::default(),
    );
    assert!(
        twice.failures.iter().any(|f| f.contains("gradgradcheck")),
        "{:?}",
        twice.failures
    );
}

/// An entry marked `No` whose op records a backward fails (it would go unchecked), and an
/// entry marked differentiable whose op records none fails too.
#[test]
fn a_wrong_grad_marking_fails_both_ways() {
    let rep = check_op(&exp_entry().grad(Grad::No), &GradConfig::default());
    assert!(
        rep.failures.iter().any(|f| f.contains("marked No")),
        "{:?}",
        rep.failures
    );
    let detached = exp_entry()
        .functional(|a, _| a[0].t().detach().exp())
        .grad(Grad::Once);
    let rep = check_op(&detached, &GradConfig::default());
    assert!(
        !rep.failures.is_empty(),
        "a detached op passed as differentiable"
    );
    // an entry marked differentiable that gives gradcheck nothing to check
    let isnan = registry::find("isnan").unwrap().clone().grad(Grad::Once);
    let rep = check_op(&isnan, &GradConfig::default());
    assert!(!rep.failures.is_empty(), "isnan passed as differentiable");
}
