//! Fused pointwise ops on CUDA (kernels/pointwise.cu; the math and operand order:
//! `backend/pointwise.rs`): one launch, every operand walked through its layout.

use super::launch::{arg, dptr, launch_cfg, walk_layouts, Str, BLOCK, MAXD};
use super::source::{float_modules, float_preamble, tag};
use crate::backend::pointwise::{GateActivation, Pointwise};
use crate::backend::View;
use crate::{DType, Result};

const COMMON: &str = include_str!("kernels/common.cuh");
const POINTWISE: &str = include_str!("kernels/pointwise.cu");

/// Positions each thread takes (`PER` in pointwise.cu).
const PER: u64 = 4;

/// The pointwise module of float dtype `t` (`pointwise_<t>`).
pub(crate) fn pointwise_module(t: DType) -> String {
    format!("{COMMON}{}{POINTWISE}", float_preamble(t))
}

/// Every pointwise module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    float_modules("pointwise", pointwise_module)
}

/// Up to six operands' base addresses (`Ptrs6`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Ptrs6([u64; 6]);

/// Up to six operands' offsets and strides (`Strs6`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Strs6([Str; 6]);

/// See [`crate::backend::pointwise::pointwise`].
pub(crate) fn pointwise(p: Pointwise, i: &[View], o: &[View]) -> Result<()> {
    let views: Vec<&View> = o.iter().chain(i).collect();
    let t = o[0].dtype;
    let (dev, _) = dptr(&o[0])?;
    let mut ptrs = [0u64; 6];
    for (k, v) in views.iter().enumerate() {
        ptrs[k] = dptr(v)?.1;
    }
    let op = p.name();
    let shape = o[0].layout.shape();
    let unused = Str {
        off: 0,
        st: [0; MAXD],
    };
    // six operands planned together (a missing one is a copy of output 0's layout, unused
    // by the kernel), so that every kernel takes the same argument structs
    let strides: [&[usize]; 6] =
        std::array::from_fn(|k| views.get(k).unwrap_or(&views[0]).layout.strides());
    let offsets: [usize; 6] =
        std::array::from_fn(|k| views.get(k).unwrap_or(&views[0]).layout.offset());
    let w = walk_layouts::<6>(op, shape, strides, offsets)?;
    let mut strs = Strs6(w.strs);
    for s in strs.0.iter_mut().skip(views.len()) {
        *s = unused;
    }
    if w.n <= 0 {
        return Ok(());
    }
    let narrow = (w.n < i32::MAX as i64) as i32;
    let sizes: Vec<usize> = views.iter().map(|v| v.dtype.size_in_bytes()).collect();
    let vec = vectorised(&w.geo, &strs.0[..views.len()], &ptrs[..views.len()], &sizes) as i32;
    let (kernel, flag): (&'static str, i32) = match p {
        // the loader adds the `k_` of the kernels' names
        Pointwise::Rotary { inverse } => ("rotary", inverse as i32),
        Pointwise::Gated(a) => ("gated", act(a)),
        Pointwise::GatedBackward(a) => ("gated_backward", act(a)),
    };
    let module = format!("pointwise_{}", tag(t));
    let f = dev.function(&module, kernel, || pointwise_module(t))?;
    let ptrs = Ptrs6(ptrs);
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&narrow),
        arg(&vec),
        arg(&ptrs),
        arg(&strs),
        arg(&flag),
    ];
    let blocks = (w.n as u64).div_ceil(PER * BLOCK as u64);
    let blocks = u32::try_from(blocks).map_err(|_| {
        crate::Error::invalid(
            op,
            format!("{} elements are more than one launch covers", w.n),
        )
    })?;
    // SAFETY: the arguments match the kernel's (Geo, i64, int, int, Ptrs6, Strs6, int); every
    // operand was checked to lie inside its storage (backend/pointwise.rs)
    unsafe { launch_cfg(&dev, &f, op, (blocks, 1, 1), (BLOCK, 1, 1), 0, &mut args) }
}

/// Whether every operand's runs along the innermost dim can be read [`PER`] elements at a
/// time with one aligned vector access (`vec` in pointwise.cu): unit inner strides (a
/// broadcast operand's 0 does not qualify), an inner length, every other stride and every
/// offset a multiple of [`PER`], and base addresses aligned to [`PER`] elements.
fn vectorised(geo: &super::launch::Geo, strs: &[Str], ptrs: &[u64], sizes: &[usize]) -> bool {
    let nd = geo.ndim as usize;
    let per = PER as i64;
    nd > 0
        && geo.size[nd - 1] % per == 0
        && strs.iter().zip(ptrs).zip(sizes).all(|((s, &p), &size)| {
            s.st[nd - 1] == 1
                && s.off % per == 0
                && s.st[..nd - 1].iter().all(|&x| x % per == 0)
                && p % (PER * size as u64) == 0
        })
}

/// The kernels' activation code.
fn act(a: GateActivation) -> i32 {
    match a {
        GateActivation::Silu => 0,
        GateActivation::Gelu => 1,
        GateActivation::GeluTanh => 2,
    }
}
