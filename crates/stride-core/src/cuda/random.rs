//! Random fills on CUDA (kernels/random.cu): the CPU's Philox stream and the same mapping from
//! words to elements (see [`crate::random`]), so `manual_seed(s)` then `randn` gives the same
//! bits on both devices. Box–Muller runs the CPU's `libm` algorithms (kernels/libm.cuh), not
//! CUDA's own `log`/`sincos`, which differ from them in the last bit now and then.

use super::launch::{arg, dptr, launch, walk_layouts};
use super::source::{ctype, tag};
use crate::backend::common::random::uniform_cap;
use crate::backend::{RandomDist, View};
use crate::layout::contiguous_strides;
use crate::{with_dtype, DType, Element, Result};

const COMMON: &str = include_str!("kernels/common.cuh");
const LIBM: &str = include_str!("kernels/libm.cuh");
const RANDOM: &str = include_str!("kernels/random.cu");

/// The random-fill module of dtype `t`.
pub(crate) fn module_source(t: DType) -> String {
    format!(
        "{COMMON}{LIBM}\n// ---- random fill for {}\ntypedef {} T;\n{RANDOM}",
        tag(t),
        ctype(t)
    )
}

/// Fills `dst` (through its layout) with `dist` drawn from the stream `(seed, offset)`.
pub(crate) fn random(dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()> {
    let (dev, po) = dptr(&dst)?;
    let l = dst.layout;
    let logical = contiguous_strides(l.shape());
    let w = walk_layouts(
        "random",
        l.shape(),
        [l.strides(), &logical],
        [l.offset(), 0],
    )?;
    let t = dst.dtype;
    let module = format!("random_{}", tag(t));
    let f = dev.function(&module, "random", || module_source(t))?;
    let (mut a, mut b, mut cap, mut ilow, mut irange) = (0.0f64, 0.0f64, 0.0f64, 0i64, 0u64);
    let code: i32 = match dist {
        RandomDist::Uniform { low, high } => {
            (a, b) = (low, high);
            cap = with_dtype!(t, T => uniform_cap::<T>(low, high).to_f64());
            0
        }
        RandomDist::Normal { mean, std } => {
            (a, b) = (mean, std);
            1
        }
        RandomDist::RandInt { low, high } => {
            // high − low < 2⁶⁴ for any low < high in i64
            (ilow, irange) = (low, (high as i128 - low as i128) as u64);
            2
        }
        RandomDist::Bernoulli { p, value } => {
            (a, b) = (p, value);
            3
        }
        RandomDist::Bits64 => 4,
    };
    let wide = (t == DType::F64) as i32;
    let [so, sl] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&po),
        arg(&so),
        arg(&sl),
        arg(&code),
        arg(&a),
        arg(&b),
        arg(&cap),
        arg(&ilow),
        arg(&irange),
        arg(&seed),
        arg(&offset),
        arg(&wide),
    ];
    unsafe { launch(&dev, &f, "random", w.n, &mut args) }
}

/// Every random module's (name, source): for warmup and the compile test.
pub(crate) fn all_modules() -> Vec<(String, String)> {
    DType::ALL
        .iter()
        .map(|&t| (format!("random_{}", tag(t)), module_source(t)))
        .collect()
}
