//! `Tensor::attention_with_kv_cache` (attention of new tokens over a key/value cache whose
//! length is read on the device): the cache writes are exactly `Tensor::rotary`'s bits (keys)
//! and the new values; the output is the f64 attention of the rotated queries over the
//! written cache within an error bound; a bad length is an error (at the call on the CPU, at
//! the next read on CUDA) that writes nothing; bad operands are refused. Lengths on both
//! sides of the CUDA kernel's key chunk (256) and of one key per row, rows whose keys the CUDA
//! kernel splits over many blocks (a short row in a long cache, where most splits are empty,
//! beside a long one; one split per 32 keys of a full cache; the most splits, 256), head widths on both sides of
//! each of the kernel's widths (32 · 1, 2, 4, 8, 16 features), grouped-query heads,
//! left padding, partial rotary of both styles, several new tokens, the model's layouts (queries
//! a permuted view of a projection, caches a permuted `(B, Cap, Hk, E)` buffer). Every float
//! dtype on the CPU and CUDA (skipped, saying so, without a GPU — mandatory under
//! STRIDE_REQUIRE_CUDA=1).
//!
//! Bound per output element (the attention tests' forward bound, `tests/attention.rs`, without
//! the half kernels' rounding of the weights: this kernel keeps them in the compute dtype):
//! `u·|o| + tiny + (δ + γ(S))·Σ_j p_j·(|v_j| + |o|)`, `δ = 2·max_j(γ(E)·scale·Σ|q||k_j| +
//! 4·uc·|s_j|) + γ(S + 8)` (the scores, then the exponentials, the chunks' rescales and the
//! normaliser).

mod rounding;

use rounding::{compute_unit, host, tiny, unit, within};
use stride_core::{cuda, debug, DType, Device, Generator, KvCacheStep, RotaryStyle, Tensor};

#[derive(Clone, Debug)]
struct Case {
    b: usize,
    hq: usize,
    hk: usize,
    l: usize,
    cap: usize,
    e: usize,
    ev: usize,
    /// Positions already in each row.
    len: Vec<i64>,
    /// Each row's first visible key (left padding), if any.
    start: Option<Vec<i64>>,
    /// The rotary style and rotated features `R`.
    rotary: Option<(RotaryStyle, usize)>,
    /// Queries a permuted view of a `(B, L, Hq, E)` projection and caches permuted
    /// `(B, Cap, Hk, E)` buffers (the model's layouts), else contiguous.
    model_layout: bool,
}

fn case(b: usize, l: usize, len: usize, cap: usize) -> Case {
    Case {
        b,
        hq: 4,
        hk: 2,
        l,
        cap,
        e: 16,
        ev: 16,
        len: vec![len as i64; b],
        start: None,
        rotary: Some((RotaryStyle::Interleaved, 16)),
        model_layout: false,
    }
}

fn cases() -> Vec<Case> {
    let mut all = vec![
        case(1, 1, 0, 8),
        case(1, 1, 5, 8),
        case(2, 3, 4, 8),
        case(1, 1, 255, 260),
        case(1, 1, 256, 260),
        case(1, 2, 257, 300),
        case(1, 1, 600, 601),
        case(1, 1, 40, 2048),
    ];
    all.push(Case {
        len: vec![3, 900],
        ..case(2, 1, 0, 1024)
    });
    // the most splits a row takes (256: 4 rows, a cache of 256 spans of 32 keys)
    all.push(case(1, 1, 8000, 8192));
    // heads on both sides of the CUDA kernels' widths (32 · 1, 2, 4, 8, 16 features)
    for (e, ev) in [(40, 33), (128, 96), (256, 200), (512, 300)] {
        all.push(Case {
            e,
            ev,
            rotary: Some((RotaryStyle::HalfSplit, e)),
            ..case(1, 1, 40, 64)
        });
    }
    // left padding (one row sees nothing of its padding), ragged lengths, half-split partial
    // rotary, values wider than keys, multi-query heads, model layouts
    all.push(Case {
        start: Some(vec![0, 3, 9]),
        len: vec![4, 6, 8],
        ..case(3, 1, 0, 12)
    });
    all.push(Case {
        rotary: Some((RotaryStyle::HalfSplit, 8)),
        ev: 24,
        ..case(2, 2, 7, 16)
    });
    all.push(Case {
        hq: 6,
        hk: 1,
        rotary: None,
        ..case(1, 1, 40, 64)
    });
    all.push(Case {
        model_layout: true,
        hq: 9,
        hk: 3,
        e: 64,
        ev: 64,
        rotary: Some((RotaryStyle::Interleaved, 64)),
        ..case(2, 1, 130, 200)
    });
    all
}

fn normal(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(
        shape.to_vec(),
        DType::F64,
        &Device::Cpu,
        Some(&Generator::new(seed)),
    )
    .unwrap()
    .to_dtype(dtype)
    .unwrap()
}

/// `(B, H, N, E)` values stored as `(B, N, H, E)` when `permuted`.
fn laid_out(t: &Tensor, permuted: bool) -> Tensor {
    if !permuted {
        return t.contiguous().unwrap();
    }
    t.permute(&[0, 2, 1, 3])
        .unwrap()
        .contiguous()
        .unwrap()
        .permute(&[0, 2, 1, 3])
        .unwrap()
}

/// The rotary tables `(P, R/2)` of base 10000 in f32 (f64 for f64).
fn tables(c: &Case, dtype: DType) -> Option<(Tensor, Tensor, RotaryStyle)> {
    let (style, r) = c.rotary?;
    let p = c.cap + 3;
    let cd = if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let mut cs = vec![];
    let mut sn = vec![];
    for pos in 0..p {
        for i in 0..r / 2 {
            let th = pos as f64 * 10000f64.powf(-2.0 * i as f64 / r as f64);
            cs.push(th.cos());
            sn.push(th.sin());
        }
    }
    let t = |v: Vec<f64>| {
        Tensor::from_vec(v, [p, r / 2])
            .unwrap()
            .to_dtype(cd)
            .unwrap()
    };
    Some((t(cs), t(sn), style))
}

/// Row `b`'s position of new token `i`, as the op defines it.
fn position(c: &Case, b: usize, i: usize) -> i64 {
    let s = c.start.as_ref().map_or(0, |s| s[b].max(0));
    (c.len[b] + i as i64 - s).max(0)
}

/// `x (B, H, L, E)` rotated per row by the composed `Tensor::rotary`.
fn rotated(c: &Case, x: &Tensor, t: &Option<(Tensor, Tensor, RotaryStyle)>) -> Tensor {
    let Some((cs, sn, style)) = t else {
        return x.clone();
    };
    let pos: Vec<i64> = (0..c.b)
        .flat_map(|b| (0..c.l).map(move |i| (b, i)))
        .map(|(b, i)| position(c, b, i))
        .collect();
    let idx = Tensor::from_vec(pos, [c.b * c.l]).unwrap();
    let half = cs.shape()[1] as i64;
    let rows = |t: &Tensor| {
        t.index_select(0, &idx)
            .unwrap()
            .reshape(&[c.b as i64, 1, c.l as i64, half])
            .unwrap()
    };
    x.rotary(&rows(cs), &rows(sn), *style).unwrap()
}

struct Inputs {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kc: Tensor,
    vc: Tensor,
}

fn inputs(c: &Case, dtype: DType, seed: u64) -> Inputs {
    Inputs {
        q: normal(&[c.b, c.hq, c.l, c.e], seed, dtype),
        k: normal(&[c.b, c.hk, c.l, c.e], seed + 1, dtype),
        v: normal(&[c.b, c.hk, c.l, c.ev], seed + 2, dtype),
        kc: normal(&[c.b, c.hk, c.cap, c.e], seed + 3, dtype),
        vc: normal(&[c.b, c.hk, c.cap, c.ev], seed + 4, dtype),
    }
}

/// The caches after the step, by composed ops on the CPU.
fn written(c: &Case, x: &Inputs, t: &Option<(Tensor, Tensor, RotaryStyle)>) -> (Tensor, Tensor) {
    let (kc, vc) = (x.kc.clone_tensor().unwrap(), x.vc.clone_tensor().unwrap());
    let kr = rotated(c, &x.k, t);
    for b in 0..c.b {
        let at = |cache: &Tensor| {
            cache
                .narrow(0, b as i64, 1)
                .unwrap()
                .narrow(2, c.len[b], c.l)
                .unwrap()
        };
        at(&kc).copy_(&kr.narrow(0, b as i64, 1).unwrap()).unwrap();
        at(&vc).copy_(&x.v.narrow(0, b as i64, 1).unwrap()).unwrap();
    }
    (kc, vc)
}

/// The f64 attention of `q` over the written caches and its bound.
#[allow(clippy::needless_range_loop)]
fn reference(c: &Case, dtype: DType, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (u, uc, tn) = (unit(dtype), compute_unit(dtype), tiny(dtype));
    let gam = |n: usize| n as f64 * uc / (1.0 - n as f64 * uc);
    let (e, ev, cap, grp) = (c.e, c.ev, c.cap, c.hq / c.hk);
    let scale = 1.0 / (e as f64).sqrt();
    let mut out = vec![0.0; c.b * c.hq * c.l * ev];
    let mut bound = vec![0.0; out.len()];
    for b in 0..c.b {
        let first = c.start.as_ref().map_or(0, |s| s[b].max(0)) as usize;
        for h in 0..c.hq {
            let hh = h / grp;
            for i in 0..c.l {
                let qi = &q[((b * c.hq + h) * c.l + i) * e..][..e];
                let end = c.len[b] as usize + i + 1;
                let keys: Vec<(usize, f64, f64)> = (first..end)
                    .map(|j| {
                        let kj = &k[((b * c.hk + hh) * cap + j) * e..][..e];
                        let s = scale * qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>();
                        let a: f64 = qi.iter().zip(kj).map(|(x, y)| (x * y).abs()).sum();
                        (j, s, gam(e) * scale * a + 4.0 * uc * s.abs())
                    })
                    .collect();
                if keys.is_empty() {
                    continue; // zeros, bound zero
                }
                let m = keys.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = keys.iter().map(|x| (x.1 - m).exp()).sum();
                let s = keys.len();
                let delta = 2.0 * keys.iter().map(|x| x.2).fold(0.0, f64::max) + gam(s + 8);
                let row = ((b * c.hq + h) * c.l + i) * ev;
                let vj = |j: usize| &v[((b * c.hk + hh) * cap + j) * ev..][..ev];
                for cc in 0..ev {
                    let o: f64 = keys.iter().map(|x| (x.1 - m).exp() / z * vj(x.0)[cc]).sum();
                    let spread: f64 = keys
                        .iter()
                        .map(|x| (x.1 - m).exp() / z * (vj(x.0)[cc].abs() + o.abs()))
                        .sum();
                    out[row + cc] = o;
                    bound[row + cc] = u * o.abs() + tn + (delta + gam(s)) * spread;
                }
            }
        }
    }
    (out, bound)
}

fn run(dev: &Device, dtype: DType, c: &Case, seed: u64) {
    let what = format!("{c:?} {dtype} on {dev}");
    let x = inputs(c, dtype, seed);
    let t = tables(c, dtype);
    let (want_k, want_v) = written(c, &x, &t);
    let q_rot = rotated(c, &x.q, &t);
    let on = |t: &Tensor, permuted: bool| laid_out(&t.to_device(dev).unwrap(), permuted);
    let ml = c.model_layout;
    let (q, k, v) = (on(&x.q, ml), on(&x.k, ml), on(&x.v, ml));
    let (kc, vc) = (on(&x.kc, ml), on(&x.vc, ml));
    let len = Tensor::from_vec(c.len.clone(), [c.b])
        .unwrap()
        .to_device(dev)
        .unwrap();
    let start = c.start.as_ref().map(|s| {
        Tensor::from_vec(s.clone(), [c.b, 1, 1, 1])
            .unwrap()
            .to_device(dev)
            .unwrap()
    });
    let tdev = t
        .as_ref()
        .map(|(a, b, s)| (a.to_device(dev).unwrap(), b.to_device(dev).unwrap(), *s));
    let step = KvCacheStep {
        k_cache: &kc,
        v_cache: &vc,
        k: &k,
        v: &v,
        len: &len,
        start: start.as_ref(),
        rotary: tdev.as_ref().map(|(a, b, s)| (a, b, *s)),
        scale: None,
    };
    let o = {
        // no host wait: the length is read on the device
        let _g = (!dev.is_cpu()).then(debug::forbid_sync);
        q.attention_with_kv_cache(&step).unwrap()
    };
    assert_eq!(o.shape(), &[c.b, c.hq, c.l, c.ev], "{what}");
    assert_eq!(
        host(&kc),
        host(&want_k),
        "{what}: key cache (the rotary's bits)"
    );
    assert_eq!(host(&vc), host(&want_v), "{what}: value cache");
    let (want, bound) = reference(c, dtype, &host(&q_rot), &host(&want_k), &host(&want_v));
    within(&what, &host(&o), &want, &bound);
    // the same bits again (fixed summation order), from the same starting cache
    let (kc2, vc2) = (on(&x.kc, ml), on(&x.vc, ml));
    let again = q
        .attention_with_kv_cache(&KvCacheStep {
            k_cache: &kc2,
            v_cache: &vc2,
            ..step
        })
        .unwrap();
    assert_eq!(host(&again), host(&o), "{what}: run to run");
}

const DTYPES: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

#[test]
fn cached_attention_matches_the_composed_ops_on_the_cpu() {
    for (n, c) in cases().iter().enumerate() {
        for dtype in DTYPES {
            run(&Device::Cpu, dtype, c, 100 + n as u64);
        }
    }
}

#[test]
fn cached_attention_matches_the_composed_ops_on_cuda() {
    let Some(dev) = cuda::require_or_skip("cached_attention_matches_the_composed_ops_on_cuda")
    else {
        return;
    };
    for (n, c) in cases().iter().enumerate() {
        for dtype in DTYPES {
            run(&dev, dtype, c, 100 + n as u64);
        }
    }
}

/// A length that leaves no room is an error that writes nothing.
fn bad_length(dev: &Device) {
    let c = case(1, 2, 0, 8);
    let x = inputs(&c, DType::F32, 7);
    let (kc, vc) = (x.kc.to_device(dev).unwrap(), x.vc.to_device(dev).unwrap());
    let before = host(&kc);
    let (q, k, v) = (
        x.q.to_device(dev).unwrap(),
        x.k.to_device(dev).unwrap(),
        x.v.to_device(dev).unwrap(),
    );
    for bad in [7i64, -1, 100] {
        let len = Tensor::from_vec(vec![bad], [1])
            .unwrap()
            .to_device(dev)
            .unwrap();
        let step = KvCacheStep {
            k_cache: &kc,
            v_cache: &vc,
            k: &k,
            v: &v,
            len: &len,
            start: None,
            rotary: None,
            scale: None,
        };
        let err = match (q.attention_with_kv_cache(&step), dev) {
            (Err(e), _) => e,
            // CUDA: reported at the next read of the device
            (Ok(_), Device::Cuda(o)) => {
                let e = cuda::synchronize(*o).expect_err("a bad length must be reported");
                cuda::take_error(*o).unwrap();
                e
            }
            (Ok(_), Device::Cpu | Device::Wgpu(_)) => {
                panic!("a bad length {bad} must be refused")
            }
        };
        let msg = err.to_string();
        assert!(msg.contains(&format!("cache length {bad}")), "{msg}");
        assert_eq!(
            host(&kc),
            before,
            "a failed step must leave the cache as it was"
        );
    }
}

#[test]
fn a_bad_length_is_an_error_that_writes_nothing() {
    bad_length(&Device::Cpu);
    if let Some(dev) = cuda::require_or_skip("a_bad_length_is_an_error_that_writes_nothing") {
        bad_length(&dev);
    }
}

#[test]
fn bad_operands_are_refused() {
    let c = case(1, 1, 2, 8);
    let x = inputs(&c, DType::F32, 3);
    let len = Tensor::from_vec(vec![2i64], [1]).unwrap();
    let ok = KvCacheStep {
        k_cache: &x.kc,
        v_cache: &x.vc,
        k: &x.k,
        v: &x.v,
        len: &len,
        start: None,
        rotary: None,
        scale: None,
    };
    assert!(x.q.attention_with_kv_cache(&ok).is_ok());
    let refused = |step: KvCacheStep, q: &Tensor, why: &str| {
        let e = q.attention_with_kv_cache(&step).expect_err(why).to_string();
        assert!(e.contains("attention_with_kv_cache"), "{why}: {e}");
    };
    let f16 = x.kc.to_dtype(DType::F16).unwrap();
    refused(
        KvCacheStep {
            k_cache: &f16,
            ..ok
        },
        &x.q,
        "a cache of another dtype",
    );
    let short = x.kc.narrow(2, 0, 4).unwrap().contiguous().unwrap();
    refused(
        KvCacheStep {
            k_cache: &short,
            ..ok
        },
        &x.q,
        "caches of different capacities",
    );
    let exp_base = Tensor::zeros([1, 1, 8, 16], DType::F32, &Device::Cpu)
        .unwrap()
        .expand(&[1, 2, 8, 16])
        .unwrap();
    refused(
        KvCacheStep {
            k_cache: &exp_base,
            ..ok
        },
        &x.q,
        "an expanded cache",
    );
    let alias = x.kc.narrow(2, 0, 1).unwrap();
    refused(
        KvCacheStep { k: &alias, ..ok },
        &x.q,
        "new keys inside the cache",
    );
    let f_len = Tensor::from_vec(vec![2.0f32], [1]).unwrap();
    refused(KvCacheStep { len: &f_len, ..ok }, &x.q, "a float length");
    let q3 = normal(&[1, 3, 1, 16], 5, DType::F32);
    refused(ok, &q3, "query heads not a multiple of the kv heads");
    let small = Tensor::zeros([4, 8], DType::F32, &Device::Cpu).unwrap();
    refused(
        KvCacheStep {
            rotary: Some((&small, &small, RotaryStyle::Interleaved)),
            ..ok
        },
        &x.q,
        "rotary tables shorter than the capacity",
    );
    let w = x.q.detach().requires_grad_(true).unwrap();
    refused(ok, &w, "a query that requires grad");
    let _g = stride_core::autograd::no_grad();
    assert!(w.attention_with_kv_cache(&ok).is_ok(), "fine under no_grad");
}
