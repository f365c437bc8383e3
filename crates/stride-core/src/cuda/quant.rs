//! Products with GGUF block-quantized weights on CUDA (kernels/quant.cu): `y = x · Wᵀ` with
//! `W` held as GGUF blocks in device memory (a `u8` tensor), for the crates that own the
//! quantized weight types (`stride-quant`'s `DeviceQMatrix`). Two launches per product:
//!
//! 1. `q8_quantize`: each row of `x` (made `f32` and contiguous first) rounded to Q8_0 blocks
//!    (Q8_1 for weights with a minimum), a warp per 32-value block;
//! 2. `qmv_<fmt>_<R>`: a warp per output feature and `R ∈ {1, 2, 4, 8}` activation rows per
//!    warp (the weight block decoded once in registers for the `R` rows; `m > 8` runs `R = 8`
//!    over a grid of row groups), exact integer dot products with `__dp4a`.
//!
//! **The CPU's bits.** Both kernels perform `stride-quant`'s CPU operations in its order (the
//! reference activation rounding; exact integer block sums; each block's terms added by one
//! fused multiply-add into lane `b % 8`, block after block; the eight lanes summed in the
//! CPU's fixed tree), so a CUDA product equals `QMatrix::matmul`'s bit for bit, and the error
//! bound `stride_quant` documents holds unchanged. The tests compare bits.
//!
//! Formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ([`BlockFormat`]). The K-quants have no CUDA kernel
//! yet; the callers refuse them with an error naming the type.

use super::launch::{arg, element_ptr, launch_cfg};
use crate::{DType, Device, Error, Result, Tensor};

const SOURCE: &str = include_str!("kernels/quant.cu");
const MODULE: &str = "quant";

/// Warps per block of the product kernel (its `__launch_bounds__(128)`).
const WARPS: usize = 4;

/// A GGUF block format the CUDA kernels read: 32 values per block.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlockFormat {
    /// f16 `d`, 16 bytes of nibbles: `d · (q − 8)`.
    Q4_0,
    /// f16 `d`, f16 `m`, 16 bytes of nibbles: `d · q + m`.
    Q4_1,
    /// f16 `d`, 32 fifth bits, 16 bytes of nibbles: `d · (q − 16)`.
    Q5_0,
    /// f16 `d`, f16 `m`, 32 fifth bits, 16 bytes of nibbles: `d · q + m`.
    Q5_1,
    /// f16 `d`, 32 signed bytes: `d · q`.
    Q8_0,
}

impl BlockFormat {
    /// Every format with a CUDA kernel.
    pub const ALL: [BlockFormat; 5] = [
        BlockFormat::Q4_0,
        BlockFormat::Q4_1,
        BlockFormat::Q5_0,
        BlockFormat::Q5_1,
        BlockFormat::Q8_0,
    ];

    /// Values per block (32 for every format here).
    pub const BLOCK: usize = 32;

    /// Bytes per block.
    ///
    /// ```
    /// use stride_core::cuda::quant::BlockFormat;
    /// assert_eq!(BlockFormat::Q4_1.block_bytes(), 20);
    /// ```
    pub fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Q4_0 => 18,
            BlockFormat::Q4_1 => 20,
            BlockFormat::Q5_0 => 22,
            BlockFormat::Q5_1 => 24,
            BlockFormat::Q8_0 => 34,
        }
    }

    /// The GGUF name (`"Q4_1"`).
    pub fn name(self) -> &'static str {
        match self {
            BlockFormat::Q4_0 => "Q4_0",
            BlockFormat::Q4_1 => "Q4_1",
            BlockFormat::Q5_0 => "Q5_0",
            BlockFormat::Q5_1 => "Q5_1",
            BlockFormat::Q8_0 => "Q8_0",
        }
    }

    /// The format named `name` (`"Q4_1"`, as GGUF writes it), if it has a CUDA kernel.
    ///
    /// ```
    /// use stride_core::cuda::quant::BlockFormat;
    /// assert_eq!(BlockFormat::from_name("Q8_0"), Some(BlockFormat::Q8_0));
    /// assert_eq!(BlockFormat::from_name("Q6_K"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<BlockFormat> {
        BlockFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether blocks carry a minimum (paired with Q8_1 activations and their block sums).
    fn has_min(self) -> bool {
        matches!(self, BlockFormat::Q4_1 | BlockFormat::Q5_1)
    }

    fn tag(self) -> &'static str {
        match self {
            BlockFormat::Q4_0 => "q4_0",
            BlockFormat::Q4_1 => "q4_1",
            BlockFormat::Q5_0 => "q5_0",
            BlockFormat::Q5_1 => "q5_1",
            BlockFormat::Q8_0 => "q8_0",
        }
    }
}

/// The kernel module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    vec![(MODULE.to_string(), source())]
}

/// The kernels' source. `STRIDE_QUANT_MUTANT` (read once; for testing the tests, never set
/// otherwise) swaps in a deliberately broken variant, so that the checks of
/// `stride-quant/tests/cuda.rs` can be seen to fail: `skip_last` drops each row's last block
/// (fails the error bound), `lane_order` sums the eight lanes in another tree (within the
/// bound, but not the CPU's bits).
fn source() -> String {
    static MUTANT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let m = MUTANT.get_or_init(|| std::env::var("STRIDE_QUANT_MUTANT").ok());
    match m.as_deref() {
        Some("skip_last") => SOURCE.replace("if (c + src < nb) {", "if (c + src < nb - 1) {"),
        Some("lane_order") => SOURCE.replace(
            "__shfl_down_sync(FULL, l, 4);\n            l = l + __shfl_down_sync(FULL, l, 2);",
            "__shfl_down_sync(FULL, l, 2);\n            l = l + __shfl_down_sync(FULL, l, 4);",
        ),
        _ => SOURCE.to_string(),
    }
}

/// Activation rows per warp for `m` rows: the smallest of 1, 2, 4, 8 that holds them all,
/// else 8.
fn rows_per_warp(m: usize) -> usize {
    match m {
        0..=1 => 1,
        2 => 2,
        3..=4 => 4,
        _ => 8,
    }
}

/// `y = x · Wᵀ` on CUDA: `x` is `[..., k]` (f32, f16 or bf16, any layout) on a CUDA device,
/// `blocks` the `n × k` weight `W` as GGUF blocks of `format` — a contiguous `u8` tensor of
/// `n · k / 32 · block_bytes` elements on the same device — and `y` is `[..., n]` in `x`'s
/// dtype. Half-precision inputs are widened to f32 (exactly) and the result rounded once.
///
/// What it computes: each row of `x` rounded to Q8_0 blocks (Q8_1 for Q4_1/Q5_1), exact
/// integer block dot products, `f32` scale products and sums — bit for bit what
/// `stride_quant::QMatrix::matmul` computes on the CPU (see the module documentation).
///
/// Errors: `x` not on CUDA or not on `blocks`' device, a dtype other than f32/f16/bf16, `k`
/// not a whole number of blocks or not `x`'s last dim, `blocks` of the wrong dtype, size or
/// layout, sizes past the kernels' `i32` block counts.
///
/// ```
/// use stride_core::cuda::{self, quant::{quantized_matmul, BlockFormat}};
/// use stride_core::{DType, Tensor};
/// if let Some(gpu) = cuda::require_or_skip("doc: quantized_matmul") {
///     // a 1 × 32 Q8_0 weight: scale 1.0 (f16 0x3c00), values 0..32
///     let mut w = vec![0x00u8, 0x3c];
///     w.extend((0..32).map(|i| i as u8));
///     let blocks = Tensor::from_vec(w, [34])?.to_device(&gpu)?;
///     let x = Tensor::ones([2, 32], DType::F32, &gpu)?;
///     let y = quantized_matmul(&x, &blocks, BlockFormat::Q8_0, 1, 32)?;
///     assert_eq!(y.to_vec::<f32>()?, [496.0, 496.0]);
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn quantized_matmul(
    x: &Tensor,
    blocks: &Tensor,
    format: BlockFormat,
    n: usize,
    k: usize,
) -> Result<Tensor> {
    const OP: &str = "cuda::quantized_matmul";
    let Device::Cuda(ordinal) = x.device() else {
        return Err(Error::invalid(
            OP,
            format!(
                "the input is on {}; the CUDA quantized product needs it on the weight's device",
                x.device()
            ),
        ));
    };
    if blocks.device() != x.device() {
        return Err(Error::invalid(
            OP,
            format!(
                "the input is on {} but the weight blocks are on {}; move one to the other's device",
                x.device(),
                blocks.device()
            ),
        ));
    }
    if !matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: x.dtype(),
            hint: "; quantized products take f32, f16 or bf16 activations".into(),
        });
    }
    if !k.is_multiple_of(BlockFormat::BLOCK) {
        return Err(Error::invalid(
            OP,
            format!(
                "k = {k} is not a whole number of {}-value {} blocks",
                BlockFormat::BLOCK,
                format.name()
            ),
        ));
    }
    if x.dim() == 0 || x.shape()[x.dim() - 1] != k {
        return Err(Error::invalid(
            OP,
            format!(
                "the input has shape {:?}; a {n} × {k} weight needs [..., {k}]",
                x.shape()
            ),
        ));
    }
    let nb = k / BlockFormat::BLOCK;
    let want = n
        .checked_mul(nb)
        .and_then(|b| b.checked_mul(format.block_bytes()));
    if blocks.dtype() != DType::U8 || !blocks.is_contiguous() || Some(blocks.numel()) != want {
        return Err(Error::invalid(
            OP,
            format!(
                "the weight blocks must be a contiguous u8 tensor of {n} × {nb} {} blocks ({} bytes), but they are {} {:?} (contiguous: {})",
                format.name(),
                want.map_or("too many".to_string(), |b| b.to_string()),
                blocks.dtype(),
                blocks.shape(),
                blocks.is_contiguous()
            ),
        ));
    }
    if nb > i32::MAX as usize - 64 {
        return Err(Error::invalid(
            OP,
            format!("k = {k} is past the kernels' limit of 2³¹ − 65 blocks a row"),
        ));
    }
    let m = x.numel() / k.max(1);
    let mut out_shape = x.shape().to_vec();
    *out_shape.last_mut().expect("dim ≥ 1") = n;
    if m == 0 || n == 0 || k == 0 {
        // k = 0: every output is an empty sum
        return Tensor::zeros(out_shape.as_slice(), x.dtype(), &x.device());
    }
    let dev = super::device::get(ordinal)?;
    // the kernels read dense f32 rows
    let xf = x.to_dtype(DType::F32)?.contiguous()?;
    let total = m
        .checked_mul(nb)
        .filter(|&b| b <= i64::MAX as usize / 32)
        .ok_or_else(|| Error::invalid(OP, format!("{m} rows × {nb} blocks overflow")))?;
    let device = x.device();
    // scratch the first kernel writes in full
    let scratch = |len: usize, dt: DType| Tensor::alloc_for_overwrite(&[len], vec![1], dt, &device);
    let qs = scratch(total * 32, DType::I8)?;
    let d = scratch(total, DType::F32)?;
    let s = format
        .has_min()
        .then(|| scratch(total, DType::F32))
        .transpose()?;
    let y = Tensor::alloc_for_overwrite(
        &[m, n],
        crate::layout::contiguous_strides(&[m, n]),
        DType::F32,
        &device,
    )?;
    let (px, _) = element_ptr(&xf.view_ref())?;
    let (pq, _) = element_ptr(&qs.view_ref())?;
    let (pd, _) = element_ptr(&d.view_ref())?;
    let ps = match &s {
        Some(s) => element_ptr(&s.view_ref())?.0,
        None => 0u64,
    };
    let (pw, _) = element_ptr(&blocks.view_ref())?;
    let (py, _) = element_ptr(&y.view_ref())?;

    // 1. the activations, a warp per block
    let f = dev.function(MODULE, "q8_quantize", source)?;
    let blocks_i = total as i64;
    let grid = (total.div_ceil(8) as u64)
        .min(dev.sm_count as u64 * 64)
        .max(1) as u32;
    let mut args = [arg(&px), arg(&blocks_i), arg(&pq), arg(&pd), arg(&ps)];
    // SAFETY: the arguments match k_q8_quantize's parameters; every buffer holds `total`
    // blocks (x: 32·total f32, qs: 32·total i8, d and s: total f32)
    unsafe { launch_cfg(&dev, &f, OP, (grid, 1, 1), (256, 1, 1), 0, &mut args)? };

    // 2. the product
    let r = rows_per_warp(m);
    let kernel: &'static str = match (format, r) {
        (BlockFormat::Q4_0, 1) => "qmv_q4_0_1",
        (BlockFormat::Q4_0, 2) => "qmv_q4_0_2",
        (BlockFormat::Q4_0, 4) => "qmv_q4_0_4",
        (BlockFormat::Q4_0, _) => "qmv_q4_0_8",
        (BlockFormat::Q4_1, 1) => "qmv_q4_1_1",
        (BlockFormat::Q4_1, 2) => "qmv_q4_1_2",
        (BlockFormat::Q4_1, 4) => "qmv_q4_1_4",
        (BlockFormat::Q4_1, _) => "qmv_q4_1_8",
        (BlockFormat::Q5_0, 1) => "qmv_q5_0_1",
        (BlockFormat::Q5_0, 2) => "qmv_q5_0_2",
        (BlockFormat::Q5_0, 4) => "qmv_q5_0_4",
        (BlockFormat::Q5_0, _) => "qmv_q5_0_8",
        (BlockFormat::Q5_1, 1) => "qmv_q5_1_1",
        (BlockFormat::Q5_1, 2) => "qmv_q5_1_2",
        (BlockFormat::Q5_1, 4) => "qmv_q5_1_4",
        (BlockFormat::Q5_1, _) => "qmv_q5_1_8",
        (BlockFormat::Q8_0, 1) => "qmv_q8_0_1",
        (BlockFormat::Q8_0, 2) => "qmv_q8_0_2",
        (BlockFormat::Q8_0, 4) => "qmv_q8_0_4",
        (BlockFormat::Q8_0, _) => "qmv_q8_0_8",
    };
    debug_assert!(kernel.contains(format.tag()));
    let f = dev.function(MODULE, kernel, source)?;
    let (n_i, nb_i, m_i) = (n as i64, nb as i32, m as i64);
    let gx = n.div_ceil(WARPS);
    let gy = m.div_ceil(r).min(65535);
    if gx > u32::MAX as usize {
        return Err(Error::invalid(
            OP,
            format!("n = {n} output features is past the kernel's grid"),
        ));
    }
    let mut args = [
        arg(&pw),
        arg(&n_i),
        arg(&nb_i),
        arg(&pq),
        arg(&pd),
        arg(&ps),
        arg(&m_i),
        arg(&py),
    ];
    // SAFETY: the arguments match k_qmv_*'s parameters; W holds n × nb blocks (checked
    // above), the activations m × nb, y m × n f32
    unsafe {
        launch_cfg(
            &dev,
            &f,
            OP,
            (gx as u32, gy as u32, 1),
            ((WARPS * 32) as u32, 1, 1),
            0,
            &mut args,
        )?
    };
    // the scratch is freed into the stream-ordered cache: later work on this stream reuses it
    // only after these kernels
    drop((qs, d, s, xf));
    let y = y.reshape(&out_shape.iter().map(|&v| v as i64).collect::<Vec<_>>())?;
    if x.dtype() == DType::F32 {
        Ok(y)
    } else {
        y.to_dtype(x.dtype())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_per_warp_covers_every_m() {
        assert_eq!(
            (1..=9).map(rows_per_warp).collect::<Vec<_>>(),
            [1, 2, 4, 4, 8, 8, 8, 8, 8]
        );
    }

    /// The module compiles with NVRTC (no GPU needed; skipped, saying so, without libnvrtc).
    #[test]
    fn quant_module_compiles() {
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!(
                "quant_module_compiles: skipped (libnvrtc not found; point LD_LIBRARY_PATH at one)"
            );
            return;
        }
        let mutants = [
            SOURCE.replace("if (c + src < nb) {", "if (c + src < nb - 1) {"),
            SOURCE.replace(
                "__shfl_down_sync(FULL, l, 4);\n            l = l + __shfl_down_sync(FULL, l, 2);",
                "__shfl_down_sync(FULL, l, 2);\n            l = l + __shfl_down_sync(FULL, l, 4);",
            ),
        ];
        // the mutants of `source()` really differ from the kernels
        assert!(mutants.iter().all(|m| m != SOURCE));
        if let Err(e) = super::super::compile::compile_source(MODULE, SOURCE, "sm_90") {
            panic!("the quant module does not compile: {e}");
        }
    }

    #[test]
    fn refuses_cpu_inputs_with_a_message() {
        let x = Tensor::ones([2, 32], DType::F32, &Device::Cpu).unwrap();
        let w = Tensor::from_vec(vec![0u8; 34], [34]).unwrap();
        let e = quantized_matmul(&x, &w, BlockFormat::Q8_0, 1, 32).unwrap_err();
        assert!(
            e.to_string().contains("needs it on the weight's device"),
            "{e}"
        );
    }
}
