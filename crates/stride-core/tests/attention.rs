//! `Tensor::attention` (the fused attention kernels) against the same math in f64 from the
//! rounded inputs, within error bounds: the output and the gradients of q, k and v. Lengths on
//! both sides of the kernels' tiles (CUDA: 64 query rows a block — 128 forward up to head dim
//! 64 — key tiles of 64 forward and 32 in `dq` (64 up to head dim 64), query tiles of 16 in
//! `dk`/`dv` (32 up to head dim 64); CPU: blocks of 64), head dims that are and are
//! not a multiple of the tensor-core k step (16), grouped-query and multi-query heads, causal
//! masks of both alignments (bottom-right with more queries than keys: rows with no key),
//! bool and additive masks with fully masked rows, large logits (~1e4), permuted views of one
//! fused QKV projection and transposed operands; decode-shaped calls (a few queries over up to
//! 1,000 keys) whose CUDA forward splits the keys. Every float dtype on the CPU; f16 and bf16 on
//! CUDA (skipped, saying so, without a GPU — mandatory under STRIDE_REQUIRE_CUDA=1).
//!
//! Bounds, per element, with `u` the result dtype's unit roundoff (`ur = u` for f16/bf16,
//! whose probabilities and score gradients the CUDA kernels round to the input dtype before
//! the tensor-core products; 0 otherwise), `uc` the compute dtype's, `γ(n) = n·uc/(1 − n·uc)`,
//! `p` the exact probabilities:
//! - a score `s_ij` carries `γ(E)·scale·Σ|q||k| + 4·uc·|s_ij|` (the dot product, the scale,
//!   the log2 units); a probability is relative to two scores (its own and the max/lse), plus
//!   `γ(S + 8)` for the exponentials and the normaliser: `δ_i = 2·max_j(score error) + γ(S + 8)`;
//! - `o`: `u·|o| + (2·ur + δ_i + γ(S))·Σ_j p_ij·(|v_j| + |o_i|)` (the weights are renormalised
//!   by the rounded sum, hence `|v_j| + |o_i|` and `2·ur`);
//! - `ds_ij = p_ij·(dp_ij − D_i)`: `p_ij·((δ_i + ur)·|dp_ij − D_i| + γ(E)·Σ|do_i||v_j| + ΔD_i)
//!   + (ur + uc)·|ds_ij|`, `ΔD_i = Σ|do_i|·(o's bound) + γ(E)·Σ|do_i||o_i|` (D is computed
//!   from the stored, rounded `o`);
//! - `dq = scale·Σ_j ds_ij k_j`: `u·|dq| + scale·Σ_j (Δds_ij + γ(S)·|ds_ij|)·|k_j|`; `dk`
//!   likewise over the group's query rows (`γ(G·L)`); `dv = Σ_i p_ij do_i`:
//!   `u·|dv| + Σ_i p_ij·(δ_i + ur + γ(G·L))·|do_i|`.
//!
//! A row with no visible key must give exactly zero (its bound is zero). Dropping the
//! rescaling of the running sum, a key tile, the mask, or `D` from the backward moves results
//! by far more than these bounds (checked by mutating the kernels).

mod rounding;

use rounding::{compute_unit, host, tiny, unit, within};
use stride_core::{cuda, DType, Device, Generator, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mask {
    None,
    /// Random bool (L, S) mask with query row 1 fully masked.
    Bool,
    /// Additive (L, S) mask in [-3, 3] with some −∞, and query row 1 all −∞.
    Additive,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Contiguous,
    /// q, k, v as permuted views of one (B, L, 3, H, E) projection (needs Hq = Hk, L = S).
    FusedQkv,
    /// Each operand stored (B, H, E, L) and seen through a transpose (head dim not dense).
    Transposed,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    hq: usize,
    hk: usize,
    l: usize,
    s: usize,
    e: usize,
    causal: Option<i64>,
    mask: Mask,
    layout: Layout,
    /// Standard deviation of q and k (large: logits near 1e4).
    mag: f64,
    scale: f64,
}

impl Case {
    fn new(b: usize, hq: usize, hk: usize, l: usize, s: usize, e: usize) -> Case {
        Case {
            b,
            hq,
            hk,
            l,
            s,
            e,
            causal: None,
            mask: Mask::None,
            layout: Layout::Contiguous,
            mag: 1.0,
            scale: 1.0 / (e as f64).sqrt(),
        }
    }
    fn causal(self, off: i64) -> Case {
        Case {
            causal: Some(off),
            ..self
        }
    }
    fn mask(self, mask: Mask) -> Case {
        Case { mask, ..self }
    }
    fn layout(self, layout: Layout) -> Case {
        Case { layout, ..self }
    }
}

fn normal(shape: &[usize], seed: u64, sd: f64) -> Tensor {
    Tensor::randn(
        shape.to_vec(),
        DType::F64,
        &Device::Cpu,
        Some(&Generator::new(seed)),
    )
    .unwrap()
    .mul(sd)
    .unwrap()
}

/// A `(B, H, N, E)` operand of `dtype` on `dev` in the case's layout.
fn operand(c: &Case, dev: &Device, dtype: DType, h: usize, n: usize, seed: u64, sd: f64) -> Tensor {
    let t = match c.layout {
        Layout::Transposed => normal(&[c.b, h, c.e, n], seed, sd)
            .to_dtype(dtype)
            .unwrap()
            .to_device(dev)
            .unwrap()
            .transpose(2, 3)
            .unwrap(),
        _ => normal(&[c.b, h, n, c.e], seed, sd)
            .to_dtype(dtype)
            .unwrap()
            .to_device(dev)
            .unwrap(),
    };
    t.requires_grad_(true).unwrap()
}

fn mask_tensor(c: &Case, dev: &Device, seed: u64) -> Option<Tensor> {
    let (l, s) = (c.l, c.s);
    let u = normal(&[l, s], seed, 1.0).to_vec::<f64>().unwrap();
    match c.mask {
        Mask::None => None,
        Mask::Bool => {
            let m: Vec<bool> = (0..l * s).map(|n| n / s != 1 && u[n] > -0.5).collect();
            Some(Tensor::from_vec(m, [l, s]).unwrap().to_device(dev).unwrap())
        }
        Mask::Additive => {
            let m: Vec<f32> = (0..l * s)
                .map(|n| {
                    if n / s == 1 || u[n] < -1.2 {
                        f32::NEG_INFINITY
                    } else {
                        (u[n] * 1.5) as f32
                    }
                })
                .collect();
            Some(Tensor::from_vec(m, [l, s]).unwrap().to_device(dev).unwrap())
        }
    }
}

/// The exact results and their bounds (see the module docs).
struct Want {
    o: (Vec<f64>, Vec<f64>),
    dq: (Vec<f64>, Vec<f64>),
    dk: (Vec<f64>, Vec<f64>),
    dv: (Vec<f64>, Vec<f64>),
}

#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn reference(
    c: &Case,
    dtype: DType,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    g: &[f64],
    mask: Option<&[f64]>,
) -> Want {
    let (b_, hq, hk, l, s, e) = (c.b, c.hq, c.hk, c.l, c.s, c.e);
    let grp = hq / hk;
    let (u, uc, tn) = (unit(dtype), compute_unit(dtype), tiny(dtype));
    let ur = if matches!(dtype, DType::F16 | DType::BF16) {
        u
    } else {
        0.0
    };
    let gam = |n: usize| n as f64 * uc / (1.0 - n as f64 * uc);
    let qi = |b: usize, h: usize, i: usize| &q[((b * hq + h) * l + i) * e..][..e];
    let gi = |b: usize, h: usize, i: usize| &g[((b * hq + h) * l + i) * e..][..e];
    let kj = |b: usize, h: usize, j: usize| &k[((b * hk + h) * s + j) * e..][..e];
    let vj = |b: usize, h: usize, j: usize| &v[((b * hk + h) * s + j) * e..][..e];
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let adot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum::<f64>();
    let nq = b_ * hq * l * e;
    let nk = b_ * hk * s * e;
    let mut w = Want {
        o: (vec![0.0; nq], vec![0.0; nq]),
        dq: (vec![0.0; nq], vec![0.0; nq]),
        dk: (vec![0.0; nk], vec![0.0; nk]),
        dv: (vec![0.0; nk], vec![0.0; nk]),
    };
    for b in 0..b_ {
        for h in 0..hq {
            let hh = h / grp;
            for i in 0..l {
                // scores and their errors; None where masked
                let mut sc: Vec<Option<(f64, f64)>> = vec![None; s];
                for (j, slot) in sc.iter_mut().enumerate() {
                    if c.causal.is_some_and(|off| j as i64 > i as i64 + off) {
                        continue;
                    }
                    let mut x = c.scale * dot(qi(b, h, i), kj(b, hh, j));
                    if let Some(m) = mask {
                        let mv = m[i * s + j];
                        if mv == f64::NEG_INFINITY || c.mask == Mask::Bool && mv == 0.0 {
                            continue;
                        }
                        if c.mask == Mask::Additive {
                            x += mv;
                        }
                    }
                    let err =
                        gam(e) * c.scale * adot(qi(b, h, i), kj(b, hh, j)) + 4.0 * uc * x.abs();
                    *slot = Some((x, err));
                }
                let live: Vec<(usize, f64, f64)> = sc
                    .iter()
                    .enumerate()
                    .filter_map(|(j, x)| x.map(|(v, e)| (j, v, e)))
                    .collect();
                let row = ((b * hq + h) * l + i) * e;
                if live.is_empty() {
                    continue; // zeros, bound zero
                }
                let m = live.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = live.iter().map(|x| (x.1 - m).exp()).sum();
                let p: Vec<(usize, f64)> =
                    live.iter().map(|x| (x.0, (x.1 - m).exp() / z)).collect();
                let delta = 2.0 * live.iter().map(|x| x.2).fold(0.0, f64::max) + gam(s + 8);
                let mut o = vec![0.0; e];
                for &(j, pj) in &p {
                    for (oc, vc) in o.iter_mut().zip(vj(b, hh, j)) {
                        *oc += pj * vc;
                    }
                }
                let mut bo = vec![0.0; e];
                for cc in 0..e {
                    let spread: f64 = p
                        .iter()
                        .map(|&(j, pj)| pj * (vj(b, hh, j)[cc].abs() + o[cc].abs()))
                        .sum();
                    bo[cc] = u * o[cc].abs() + tn + (2.0 * ur + delta + gam(s)) * spread;
                    w.o.0[row + cc] = o[cc];
                    w.o.1[row + cc] = bo[cc];
                }
                // backward
                let gr = gi(b, h, i);
                let dd = dot(gr, &o);
                let d_err = gr.iter().zip(&bo).map(|(x, y)| x.abs() * y).sum::<f64>()
                    + gam(e) * adot(gr, &o);
                for &(j, pj) in &p {
                    let dp = dot(gr, vj(b, hh, j));
                    let ds = pj * (dp - dd);
                    let ds_err = pj
                        * ((delta + ur) * (dp - dd).abs()
                            + gam(e) * adot(gr, vj(b, hh, j))
                            + d_err)
                        + (ur + uc) * ds.abs();
                    let kr = ((b * hk + hh) * s + j) * e;
                    for cc in 0..e {
                        w.dq.0[row + cc] += c.scale * ds * kj(b, hh, j)[cc];
                        w.dq.1[row + cc] +=
                            c.scale * (ds_err + gam(s) * ds.abs()) * kj(b, hh, j)[cc].abs();
                        w.dk.0[kr + cc] += c.scale * ds * qi(b, h, i)[cc];
                        w.dk.1[kr + cc] +=
                            c.scale * (ds_err + gam(grp * l) * ds.abs()) * qi(b, h, i)[cc].abs();
                        w.dv.0[kr + cc] += pj * gr[cc];
                        w.dv.1[kr + cc] += pj * (delta + ur + gam(grp * l)) * gr[cc].abs();
                    }
                }
            }
        }
    }
    for (want, bound) in [&mut w.dq, &mut w.dk, &mut w.dv] {
        for (x, bd) in want.iter().zip(bound.iter_mut()) {
            *bd += (u + 2.0 * uc) * x.abs() + tn;
        }
    }
    w
}

fn run(dev: &Device, dtype: DType, c: Case, seed: u64) {
    let what = format!("{c:?} {dtype} on {dev}");
    let (q, k, v) = match c.layout {
        Layout::FusedQkv => {
            assert!(c.hq == c.hk && c.l == c.s);
            let qkv = normal(&[c.b, c.l, 3, c.hq, c.e], seed, c.mag)
                .to_dtype(dtype)
                .unwrap()
                .to_device(dev)
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            let pick = |n: i64| qkv.select(2, n).unwrap().permute(&[0, 2, 1, 3]).unwrap();
            (pick(0), pick(1), pick(2))
        }
        _ => (
            operand(&c, dev, dtype, c.hq, c.l, seed, c.mag),
            operand(&c, dev, dtype, c.hk, c.s, seed + 1, c.mag),
            operand(&c, dev, dtype, c.hk, c.s, seed + 2, 1.0),
        ),
    };
    let g = normal(&[c.b, c.hq, c.l, c.e], seed + 3, 1.0)
        .to_dtype(dtype)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let mask = mask_tensor(&c, dev, seed + 4);
    let y = q
        .attention(&k, &v, mask.as_ref(), c.causal, c.scale)
        .unwrap();
    assert_eq!(y.dtype(), dtype, "{what}");
    assert_eq!(y.shape(), &[c.b, c.hq, c.l, c.e], "{what}");
    let (dq, dk, dv) = {
        let grads =
            stride_core::autograd::grad(&[&y], &[&q, &k, &v], Some(&[&g]), Default::default())
                .unwrap();
        (
            grads[0].clone().unwrap(),
            grads[1].clone().unwrap(),
            grads[2].clone().unwrap(),
        )
    };
    let mask_host = mask.as_ref().map(host);
    let w = reference(
        &c,
        dtype,
        &host(&q),
        &host(&k),
        &host(&v),
        &host(&g),
        mask_host.as_deref(),
    );
    within(&format!("o of {what}"), &host(&y), &w.o.0, &w.o.1);
    within(&format!("dq of {what}"), &host(&dq), &w.dq.0, &w.dq.1);
    within(&format!("dk of {what}"), &host(&dk), &w.dk.0, &w.dk.1);
    within(&format!("dv of {what}"), &host(&dv), &w.dv.0, &w.dv.1);
}

/// The sweep: small cases everywhere, the tile-crossing lengths and large head dims when `big`.
fn cases(big: bool) -> Vec<Case> {
    let mut all = vec![
        Case::new(1, 2, 2, 17, 17, 8),
        Case::new(2, 4, 2, 65, 33, 16).causal(0),
        Case::new(1, 2, 1, 40, 17, 24).causal(17 - 40), // bottom-right, L > S: rows with no key
        Case::new(1, 2, 2, 20, 63, 16).mask(Mask::Bool),
        Case::new(1, 1, 1, 9, 70, 32).mask(Mask::Additive),
        Case::new(1, 2, 2, 33, 33, 16)
            .layout(Layout::FusedQkv)
            .causal(0),
        Case::new(1, 2, 1, 19, 21, 8).layout(Layout::Transposed),
        Case {
            mag: 30.0,
            scale: 1.0,
            ..Case::new(1, 1, 1, 16, 24, 16) // logits near 1e4
        },
        Case::new(1, 8, 2, 1, 70, 64).causal(69), // one decode query over a cache
    ];
    if big {
        all.extend([
            Case::new(1, 2, 2, 130, 257, 64).causal(257 - 130),
            Case::new(1, 1, 1, 257, 255, 128),
            Case::new(1, 2, 1, 129, 129, 72).causal(0).mask(Mask::Bool),
            Case::new(2, 2, 2, 64, 64, 128).layout(Layout::FusedQkv),
            Case::new(1, 4, 4, 65, 127, 96).mask(Mask::Additive),
            // few query rows over many keys: the forward splits the keys (FlashDecoding)
            Case::new(1, 4, 2, 1, 1000, 64).causal(999),
            Case::new(2, 2, 2, 3, 513, 128).mask(Mask::Bool),
            Case::new(1, 1, 1, 5, 700, 32)
                .causal(695)
                .mask(Mask::Additive),
            Case::new(1, 1, 1, 1, 1, 8),
            Case::new(1, 2, 2, 255, 1, 16),
        ]);
    }
    all
}

#[test]
fn fused_attention_matches_the_f64_math_on_the_cpu() {
    for (n, c) in cases(false).into_iter().enumerate() {
        for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
            run(&Device::Cpu, dtype, c, 100 + n as u64);
        }
    }
}

#[test]
fn fused_attention_matches_the_f64_math_on_cuda() {
    let Some(dev) = cuda::require_or_skip("fused_attention_matches_the_f64_math_on_cuda") else {
        return;
    };
    for (n, c) in cases(true).into_iter().enumerate() {
        for dtype in [DType::F16, DType::BF16] {
            run(&dev, dtype, c, 100 + n as u64);
        }
    }
    // a training step's attention makes no host wait
    let q = Tensor::randn([2, 4, 96, 64], DType::BF16, &dev, None)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let kv = Tensor::randn([2, 2, 96, 64], DType::BF16, &dev, None)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    {
        let _no_waits = stride_core::debug::forbid_sync();
        let y = q.attention(&kv, &kv, None, Some(0), 0.125).unwrap();
        y.sum().unwrap().backward().unwrap();
    }
    assert!(q.grad().is_some() && kv.grad().is_some());
    // no atomics: a second backward gives the same bits (8 query heads per key/value head)
    let c = Case::new(2, 16, 2, 300, 300, 64).causal(0);
    let grads = || {
        let q = operand(&c, &dev, DType::BF16, 16, 300, 7, 1.0);
        let kv = operand(&c, &dev, DType::BF16, 2, 300, 8, 1.0);
        let y = q
            .attention(&kv, &kv, None, Some(0), 0.125)
            .unwrap()
            .sum()
            .unwrap();
        let g = stride_core::autograd::grad(&[&y], &[&q, &kv], None, Default::default()).unwrap();
        (host(g[0].as_ref().unwrap()), host(g[1].as_ref().unwrap()))
    };
    assert!(grads() == grads(), "two CUDA backward passes differ");
    // f32 has no CUDA kernel: an error that says what runs
    let q32 = Tensor::zeros([1, 1, 4, 8], DType::F32, &dev).unwrap();
    let err = q32
        .attention(&q32, &q32, None, None, 1.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("f16/bf16"), "{err}");
}

#[test]
fn the_backward_is_deterministic_and_double_backward_is_composed() {
    let dev = Device::Cpu;
    let c = Case::new(1, 2, 1, 6, 7, 4).causal(1);
    let q = operand(&c, &dev, DType::F64, 2, 6, 1, 1.0);
    let k = operand(&c, &dev, DType::F64, 1, 7, 2, 1.0);
    let v = operand(&c, &dev, DType::F64, 1, 7, 3, 1.0);
    let f = |x: &[Tensor]| x[0].attention(&x[1], &x[2], None, Some(1), 0.3);
    let inputs = [q.clone(), k.clone(), v.clone()];
    stride_core::autograd::gradcheck(f, &inputs, Default::default()).unwrap();
    stride_core::autograd::gradgradcheck(f, &inputs, Default::default()).unwrap();
    let grads = || {
        let c = Case::new(1, 2, 1, 70, 70, 8);
        let q = operand(&c, &dev, DType::F32, 2, 70, 1, 1.0);
        let kv = operand(&c, &dev, DType::F32, 1, 70, 2, 1.0);
        let y = q
            .attention(&kv, &kv, None, Some(0), 0.3)
            .unwrap()
            .sum()
            .unwrap();
        let g = stride_core::autograd::grad(&[&y], &[&q, &kv], None, Default::default()).unwrap();
        (host(g[0].as_ref().unwrap()), host(g[1].as_ref().unwrap()))
    };
    assert_eq!(grads(), grads(), "two runs give the same bits");
}

#[test]
fn attention_refuses_bad_operands_with_errors() {
    let dev = Device::Cpu;
    let q = Tensor::zeros([1, 3, 4, 8], DType::F32, &dev).unwrap();
    let k = Tensor::zeros([1, 2, 5, 8], DType::F32, &dev).unwrap();
    let err = q
        .attention(&k, &k, None, None, 1.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("multiple"), "{err}");
    let k3 = Tensor::zeros([2, 5, 8], DType::F32, &dev).unwrap();
    assert!(q.attention(&k3, &k3, None, None, 1.0).is_err());
    let kh = Tensor::zeros([1, 3, 5, 8], DType::F16, &dev).unwrap();
    assert!(q.attention(&kh, &kh, None, None, 1.0).is_err());
    let kk = Tensor::zeros([1, 3, 5, 8], DType::F32, &dev).unwrap();
    let bad_mask = Tensor::zeros([4, 6], DType::Bool, &dev).unwrap();
    assert!(q.attention(&kk, &kk, Some(&bad_mask), None, 1.0).is_err());
    let int_mask = Tensor::zeros([4, 5], DType::I64, &dev).unwrap();
    assert!(q.attention(&kk, &kk, Some(&int_mask), None, 1.0).is_err());
    assert!(q.attention(&kk, &kk, None, None, f64::NAN).is_err());
    let trained = Tensor::zeros([4, 5], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let err = q
        .attention(&kk, &kk, Some(&trained), None, 1.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("requires grad"), "{err}");
    let _ng = stride_core::autograd::no_grad();
    assert!(q.attention(&kk, &kk, Some(&trained), None, 1.0).is_ok());
}

/// Sums over nothing: rows with no keys give zeros, and with no queries the keys' and values'
/// gradients are zeros — the outputs of such shapes are zero-filled, not left for a kernel
/// with nothing to write (on CUDA outputs are otherwise not filled before the kernel).
fn empty_sums(dev: &Device) {
    // the dtypes the device's fused kernel takes (CUDA refuses f32: see `attention_supported`)
    let dtypes = match dev {
        Device::Cpu => vec![DType::F32, DType::BF16],
        _ => vec![DType::BF16, DType::F16],
    };
    for dtype in dtypes {
        let t = |shape: [usize; 4]| {
            Tensor::ones(shape, dtype, dev)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        };
        // no keys
        let (q, k, v) = (t([1, 2, 3, 8]), t([1, 2, 0, 8]), t([1, 2, 0, 8]));
        let y = q.attention(&k, &v, None, None, 0.5).unwrap();
        assert!(host(&y).iter().all(|x| *x == 0.0), "{dtype} on {dev}: {y}");
        let g = stride_core::autograd::grad(&[&y.sum().unwrap()], &[&q], None, Default::default())
            .unwrap();
        assert!(
            host(g[0].as_ref().unwrap()).iter().all(|x| *x == 0.0),
            "dq, {dtype} on {dev}"
        );
        // no queries
        let (q, k, v) = (t([1, 2, 0, 8]), t([1, 2, 5, 8]), t([1, 2, 5, 8]));
        let y = q.attention(&k, &v, None, None, 0.5).unwrap();
        let g =
            stride_core::autograd::grad(&[&y.sum().unwrap()], &[&k, &v], None, Default::default())
                .unwrap();
        for (what, gi) in ["dk", "dv"].iter().zip(&g) {
            assert!(
                host(gi.as_ref().unwrap()).iter().all(|x| *x == 0.0),
                "{what}, {dtype} on {dev}"
            );
        }
    }
}

#[test]
fn attention_over_no_keys_or_no_queries_is_zeros() {
    empty_sums(&Device::Cpu);
    if let Some(dev) =
        stride_core::cuda::require_or_skip("attention_over_no_keys_or_no_queries_is_zeros")
    {
        empty_sums(&dev);
    }
}
