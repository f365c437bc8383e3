//! Products with GGUF block-quantized weights on CUDA (kernels/quant.cu): `y = x · Wᵀ` with
//! `W` held as GGUF blocks in device memory (a `u8` tensor), for the crates that own the
//! quantized weight types (`stride-quant`'s `DeviceQMatrix`). Two forms ([`QuantPath`]):
//!
//! - **Decode, one launch** (`m ≤ 8` rows, [`FUSED_MAX_ROWS`]): `qmvf_<fmt>_<R>` — every
//!   thread block rounds the activation rows to Q8_0/Q8_1 blocks in shared memory, reading
//!   `x` where it lies (any strides, f32/f16/bf16: no copy, no cast), then its warps take
//!   output features grid-stride, a warp per feature and `R ∈ {1, 2, 4, 8}` rows per warp,
//!   and write `y` in `x`'s dtype. Several weights sharing one input (a layer's q/k/v, its
//!   gate/up) are one launch ([`quantized_matmul_many`]). A single product with a dense f32
//!   input still takes the two launches by default, which measured faster in a CUDA graph
//!   ([`QuantPath::Auto`]). Rounding the rows again in every
//!   thread block costs little next to the weights (the grid is a few blocks per SM) and
//!   saves the launch — a decode step is bound by its number of kernels.
//! - **Prefill, two launches** (any `m`): `q8_quantize` rounds each row of `x` (made `f32` and
//!   contiguous first) into a global scratch, a warp per 32-value block; then `qmv_<fmt>_<R>`
//!   per weight, a warp per output feature (`m > 8` runs `R = 8` over a grid of row groups).
//!
//! Both decode each weight block once in registers for the `R` rows and take exact integer
//! dot products with `__dp4a`; they share the rounding (`q8_block`) and the product of one
//! weight row (`qmv_row`) of the source.
//!
//! **The CPU's bits.** Both forms perform `stride-quant`'s CPU operations in its order (the
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
const COMMON: &str = include_str!("kernels/common.cuh");
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

/// The kernels' source (after common.cuh). `STRIDE_QUANT_MUTANT` (read once; for testing the
/// tests, never set otherwise) swaps in a deliberately broken variant ([`mutant`]), so that
/// the checks of `stride-quant/tests/cuda.rs` can be seen to fail.
fn source() -> String {
    static MUTANT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let m = MUTANT.get_or_init(|| std::env::var("STRIDE_QUANT_MUTANT").ok());
    let body = m
        .as_deref()
        .and_then(mutant)
        .unwrap_or_else(|| SOURCE.to_string());
    format!("{COMMON}{body}")
}

/// The broken variants of the kernels: `skip_last` drops each row's last block (fails the
/// error bound), `lane_order` sums the eight lanes in another tree (within the bound, but not
/// the CPU's bits), `fused_block` makes the one-launch kernel round each activation block
/// from its neighbour's values (the block index off by one; the two-launch path is intact),
/// `swiglu_plain` makes the SwiGLU rounding kernel drop the silu (`g · u`).
fn mutant(name: &str) -> Option<String> {
    let (from, to) = match name {
        "skip_last" => ("if (c + src < nb) {", "if (c + src < nb - 1) {"),
        "lane_order" => (
            "__shfl_down_sync(FULL, l, 4);\n        l = l + __shfl_down_sync(FULL, l, 2);",
            "__shfl_down_sync(FULL, l, 2);\n        l = l + __shfl_down_sync(FULL, l, 4);",
        ),
        "fused_block" => (
            "return ld_x(x, xdt, o + (i64)(b * 32 + lane) * es);",
            "return ld_x(x, xdt, o + (i64)(((b + 1) % nb) * 32 + lane) * es);",
        ),
        "swiglu_plain" => (
            "xv * sigmoid(xv) * u[b * 32 + lane]",
            "xv * u[b * 32 + lane]",
        ),
        _ => return None,
    };
    Some(SOURCE.replace(from, to))
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

/// Most activation rows of the one-launch kernel ([`QuantPath::Fused`]).
pub const FUSED_MAX_ROWS: usize = 8;

/// Most weights of one fused launch (`QMAXW` in kernels/quant.cu); more take more launches.
const FUSED_MAX_WEIGHTS: usize = 8;

/// Shared memory of a fused launch is at most this (the default limit of a block without an
/// opt-in): `m · k` i8 values and two `f32` per block and row.
const FUSED_MAX_SHARED: usize = 48 << 10;

/// Warps per block of the fused kernel (its `__launch_bounds__(256)`).
const FUSED_WARPS: usize = 8;

/// The kernels of each format: `[two-launch product, fused product]` by rows per warp
/// (1, 2, 4, 8).
fn kernel_names(format: BlockFormat) -> [[&'static str; 4]; 2] {
    match format {
        BlockFormat::Q4_0 => [
            ["qmv_q4_0_1", "qmv_q4_0_2", "qmv_q4_0_4", "qmv_q4_0_8"],
            ["qmvf_q4_0_1", "qmvf_q4_0_2", "qmvf_q4_0_4", "qmvf_q4_0_8"],
        ],
        BlockFormat::Q4_1 => [
            ["qmv_q4_1_1", "qmv_q4_1_2", "qmv_q4_1_4", "qmv_q4_1_8"],
            ["qmvf_q4_1_1", "qmvf_q4_1_2", "qmvf_q4_1_4", "qmvf_q4_1_8"],
        ],
        BlockFormat::Q5_0 => [
            ["qmv_q5_0_1", "qmv_q5_0_2", "qmv_q5_0_4", "qmv_q5_0_8"],
            ["qmvf_q5_0_1", "qmvf_q5_0_2", "qmvf_q5_0_4", "qmvf_q5_0_8"],
        ],
        BlockFormat::Q5_1 => [
            ["qmv_q5_1_1", "qmv_q5_1_2", "qmv_q5_1_4", "qmv_q5_1_8"],
            ["qmvf_q5_1_1", "qmvf_q5_1_2", "qmvf_q5_1_4", "qmvf_q5_1_8"],
        ],
        BlockFormat::Q8_0 => [
            ["qmv_q8_0_1", "qmv_q8_0_2", "qmv_q8_0_4", "qmv_q8_0_8"],
            ["qmvf_q8_0_1", "qmvf_q8_0_2", "qmvf_q8_0_4", "qmvf_q8_0_8"],
        ],
    }
}

/// Which kernels compute a product. Every path gives the same bits (those of
/// `stride_quant::QMatrix::matmul`); they differ in launches and speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum QuantPath {
    /// [`QuantPath::Fused`] where it applies (at most [`FUSED_MAX_ROWS`] rows whose Q8 form
    /// fits 48 KiB of shared memory, `m · k · 5/4` bytes) and pays: for several weights, or
    /// an input that is not a contiguous `f32` matrix (which the two launches would copy or
    /// cast first). Else [`QuantPath::TwoLaunch`]: measured on an H100 in a CUDA graph, one
    /// dense f32 product by the two launches takes 3.2–4.5 µs (SmolLM2's shapes), the fused
    /// kernel 4.0–7.3 µs, while a layer's q/k/v in one fused launch take 4.3 µs against
    /// 10.0 µs as three two-launch products.
    #[default]
    Auto,
    /// One launch per block format of the weights (up to 8 weights a launch): every thread
    /// block rounds the activation rows itself, read in place from the input's layout and
    /// dtype, and the output is written in the input's dtype. Decode (`m ≤ 8`) only: more
    /// rows, or rows too long for shared memory, are an error.
    Fused,
    /// The activations made `f32` and contiguous (a copy where they are not), rounded to Q8
    /// blocks once by one launch, then one product launch per weight (and a cast for
    /// f16/bf16 inputs). Any number of rows.
    TwoLaunch,
}

/// `y = x · Wᵀ` on CUDA: `x` is `[..., k]` (f32, f16 or bf16, any layout) on a CUDA device,
/// `blocks` the `n × k` weight `W` as GGUF blocks of `format` — a contiguous `u8` tensor of
/// `n · k / 32 · block_bytes` elements on the same device — and `y` is `[..., n]` in `x`'s
/// dtype. Half-precision inputs are widened to f32 (exactly) and the result rounded once.
///
/// What it computes: each row of `x` rounded to Q8_0 blocks (Q8_1 for Q4_1/Q5_1), exact
/// integer block dot products, `f32` scale products and sums — bit for bit what
/// `stride_quant::QMatrix::matmul` computes on the CPU (see the module documentation). Up to
/// 8 rows of a non-contiguous or half-precision `x` it is one launch that reads `x` where it
/// lies; [`QuantPath::Auto`] says when.
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
    quantized_matmul_with(x, blocks, format, n, k, QuantPath::Auto)
}

/// [`quantized_matmul`] by the kernels of `path` (for comparisons and benchmarks: every path
/// gives the same bits).
pub fn quantized_matmul_with(
    x: &Tensor,
    blocks: &Tensor,
    format: BlockFormat,
    n: usize,
    k: usize,
    path: QuantPath,
) -> Result<Tensor> {
    let mut ys = many(
        "cuda::quantized_matmul",
        x,
        None,
        &[(blocks, format, n)],
        k,
        path,
    )?;
    ys.pop().ok_or_else(|| {
        Error::invalid(
            "cuda::quantized_matmul",
            "no output for one weight (a stride bug)",
        )
    })
}

/// `y = swiglu(gate, up) · Wᵀ` on CUDA: the SwiGLU MLP's down projection with the gated
/// activation `silu(gate) · up` computed by the kernel that rounds the activations, so it
/// costs no launch of its own. `gate` and `up` are `[..., k]` of one shape on `blocks`'
/// device; the rest is [`quantized_matmul`]'s.
///
/// The bits of `quantized_matmul(&gate.swiglu(up)?, ..)` (and so of the CPU's product of the
/// CPU's SwiGLU): f32 inputs take the fused rounding, others the composed ops.
///
/// Errors: `gate` and `up` of different shapes, dtypes or devices, and those of
/// [`quantized_matmul`].
///
/// ```
/// use stride_core::cuda::{self, quant::{quantized_matmul, quantized_matmul_swiglu, BlockFormat}};
/// use stride_core::{DType, Tensor};
/// if let Some(gpu) = cuda::require_or_skip("doc: quantized_matmul_swiglu") {
///     let mut w = vec![0x00u8, 0x3c]; // a 1 × 32 Q8_0 weight: scale 1.0, values 0..32
///     w.extend((0..32).map(|i| i as u8));
///     let blocks = Tensor::from_vec(w, [34])?.to_device(&gpu)?;
///     let g = Tensor::from_vec((0..64).map(|i| i as f32 / 16.0 - 2.0).collect::<Vec<_>>(), [2, 32])?
///         .to_device(&gpu)?;
///     let u = Tensor::ones([2, 32], DType::F32, &gpu)?;
///     let y = quantized_matmul_swiglu(&g, &u, &blocks, BlockFormat::Q8_0, 1, 32)?;
///     let want = quantized_matmul(&g.swiglu(&u)?, &blocks, BlockFormat::Q8_0, 1, 32)?;
///     assert_eq!(y.to_vec::<f32>()?, want.to_vec::<f32>()?); // the same bits
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn quantized_matmul_swiglu(
    gate: &Tensor,
    up: &Tensor,
    blocks: &Tensor,
    format: BlockFormat,
    n: usize,
    k: usize,
) -> Result<Tensor> {
    const OP: &str = "cuda::quantized_matmul_swiglu";
    if gate.shape() != up.shape() || gate.dtype() != up.dtype() || gate.device() != up.device() {
        return Err(Error::invalid(
            OP,
            format!(
                "gate is {} {:?} on {} but up is {} {:?} on {}; the SwiGLU's halves must match",
                gate.dtype(),
                gate.shape(),
                gate.device(),
                up.dtype(),
                up.shape(),
                up.device()
            ),
        ));
    }
    if gate.dtype() != DType::F32 || gate.requires_grad() || up.requires_grad() {
        return quantized_matmul(&gate.swiglu(up)?, blocks, format, n, k);
    }
    let mut ys = many(
        OP,
        gate,
        Some(up),
        &[(blocks, format, n)],
        k,
        QuantPath::TwoLaunch,
    )?;
    ys.pop()
        .ok_or_else(|| Error::invalid(OP, "no output for one weight (a stride bug)"))
}

/// Several products with one input: `ys[i] = x · W_iᵀ` for `weights[i] = (blocks, format,
/// n_i)`, each `W_i` an `n_i × k` matrix as [`quantized_matmul`] takes it, each `ys[i]`
/// `[..., n_i]` in `x`'s dtype — the bits of one [`quantized_matmul`] per weight. The formats
/// may differ.
///
/// Up to 8 rows, `x` is rounded to Q8 blocks inside the product kernel and the weights of one
/// format share one launch (up to 8 weights a launch): a layer's q/k/v projections are one
/// launch, not six. With more rows the activations are rounded once and each weight takes
/// one product launch.
///
/// Errors: those of [`quantized_matmul`], naming the weight at fault.
///
/// ```
/// use stride_core::cuda::{self, quant::{quantized_matmul_many, BlockFormat}};
/// use stride_core::{DType, Tensor};
/// if let Some(gpu) = cuda::require_or_skip("doc: quantized_matmul_many") {
///     // Q8_0 blocks of scale 1.0 (f16 0x3c00): one row of 1s, two rows of 2s
///     let block = |v: u8| [vec![0x00u8, 0x3c], vec![v; 32]].concat();
///     let w1 = Tensor::from_vec(block(1), [34])?.to_device(&gpu)?;
///     let w2 = Tensor::from_vec([block(2), block(2)].concat(), [68])?.to_device(&gpu)?;
///     let x = Tensor::ones([1, 32], DType::F32, &gpu)?;
///     let ys = quantized_matmul_many(
///         &x,
///         &[(&w1, BlockFormat::Q8_0, 1), (&w2, BlockFormat::Q8_0, 2)],
///         32,
///     )?;
///     assert_eq!(ys[0].to_vec::<f32>()?, [32.0]);
///     assert_eq!(ys[1].to_vec::<f32>()?, [64.0, 64.0]);
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn quantized_matmul_many(
    x: &Tensor,
    weights: &[(&Tensor, BlockFormat, usize)],
    k: usize,
) -> Result<Vec<Tensor>> {
    many(
        "cuda::quantized_matmul_many",
        x,
        None,
        weights,
        k,
        QuantPath::Auto,
    )
}

/// [`quantized_matmul_many`] by the kernels of `path`.
pub fn quantized_matmul_many_with(
    x: &Tensor,
    weights: &[(&Tensor, BlockFormat, usize)],
    k: usize,
    path: QuantPath,
) -> Result<Vec<Tensor>> {
    many("cuda::quantized_matmul_many", x, None, weights, k, path)
}

/// The fused kernel's description of the weights of one launch (`QMany` in
/// kernels/quant.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct QMany {
    w: [u64; FUSED_MAX_WEIGHTS],
    y: [u64; FUSED_MAX_WEIGHTS],
    f0: [i64; FUSED_MAX_WEIGHTS + 1],
    count: i32,
}

/// The element offsets of the input's rows (`QRows` in kernels/quant.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct QRows {
    off: [i64; FUSED_MAX_ROWS],
}

/// Shared memory of a fused launch over `m` rows of `nb` blocks: `m · 32 · nb` i8 values,
/// then `m · nb` scales and `m · nb` sums (`f32`).
fn fused_shared(m: usize, nb: usize) -> Option<usize> {
    m.checked_mul(nb)?.checked_mul(32 + 8)
}

/// The products of `x` — or, with `up`, of `swiglu(x, up)` (both f32, one shape; two
/// launches whatever the path) — by each weight.
fn many(
    op: &'static str,
    x: &Tensor,
    up: Option<&Tensor>,
    weights: &[(&Tensor, BlockFormat, usize)],
    k: usize,
    path: QuantPath,
) -> Result<Vec<Tensor>> {
    let Device::Cuda(ordinal) = x.device() else {
        return Err(Error::invalid(
            op,
            format!(
                "the input is on {}; the CUDA quantized product needs it on the weight's device",
                x.device()
            ),
        ));
    };
    if !matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
            hint: "; quantized products take f32, f16 or bf16 activations".into(),
        });
    }
    if !k.is_multiple_of(BlockFormat::BLOCK) {
        return Err(Error::invalid(
            op,
            format!(
                "k = {k} is not a whole number of {}-value blocks",
                BlockFormat::BLOCK
            ),
        ));
    }
    let nb = k / BlockFormat::BLOCK;
    if x.dim() == 0 || x.shape()[x.dim() - 1] != k {
        let ns: Vec<String> = weights.iter().map(|w| w.2.to_string()).collect();
        return Err(Error::invalid(
            op,
            format!(
                "the input has shape {:?}; a {} × {k} weight needs [..., {k}]",
                x.shape(),
                if ns.is_empty() {
                    "n".into()
                } else {
                    ns.join("/")
                }
            ),
        ));
    }
    if nb > i32::MAX as usize - 64 {
        return Err(Error::invalid(
            op,
            format!("k = {k} is past the kernels' limit of 2³¹ − 65 blocks a row"),
        ));
    }
    for (i, &(blocks, format, n)) in weights.iter().enumerate() {
        let which = if weights.len() > 1 {
            format!("weight {i}: ")
        } else {
            String::new()
        };
        if blocks.device() != x.device() {
            return Err(Error::invalid(
                op,
                format!(
                    "{which}the input is on {} but the weight blocks are on {}; move one to the other's device",
                    x.device(),
                    blocks.device()
                ),
            ));
        }
        let want = n
            .checked_mul(nb)
            .and_then(|b| b.checked_mul(format.block_bytes()));
        if blocks.dtype() != DType::U8 || !blocks.is_contiguous() || Some(blocks.numel()) != want {
            return Err(Error::invalid(
                op,
                format!(
                    "{which}the weight blocks must be a contiguous u8 tensor of {n} × {nb} {} blocks ({} bytes), but they are {} {:?} (contiguous: {})",
                    format.name(),
                    want.map_or("too many".to_string(), |b| b.to_string()),
                    blocks.dtype(),
                    blocks.shape(),
                    blocks.is_contiguous()
                ),
            ));
        }
        if n > i32::MAX as usize {
            return Err(Error::invalid(
                op,
                format!("{which}n = {n} output features is past the kernels' grid"),
            ));
        }
    }
    let m = x.numel().checked_div(k).unwrap_or(0);
    let lead = &x.shape()[..x.dim() - 1];
    let out_shape = |n: usize| -> Vec<usize> {
        let mut s = lead.to_vec();
        s.push(n);
        s
    };
    if m == 0 || k == 0 {
        // k = 0: every output is an empty sum
        return weights
            .iter()
            .map(|w| Tensor::zeros(out_shape(w.2).as_slice(), x.dtype(), &x.device()))
            .collect();
    }
    let fits = m <= FUSED_MAX_ROWS && fused_shared(m, nb).is_some_and(|b| b <= FUSED_MAX_SHARED);
    let plain = weights.iter().filter(|w| w.2 > 0).count() <= 1
        && x.dtype() == DType::F32
        && x.is_contiguous();
    let fused = match path {
        _ if up.is_some() => false,
        QuantPath::Auto => fits && !plain,
        QuantPath::Fused if fits => true,
        QuantPath::Fused => {
            return Err(Error::invalid(
                op,
                format!(
                    "the fused kernel takes at most {FUSED_MAX_ROWS} rows whose Q8 form fits {} KiB of shared memory (m · k · 5/4 bytes), but the input has {m} rows of {k}; use QuantPath::Auto",
                    FUSED_MAX_SHARED >> 10
                ),
            ))
        }
        QuantPath::TwoLaunch => false,
    };
    let dev = super::device::get(ordinal)?;
    let mut ys: Vec<Option<Tensor>> = vec![None; weights.len()];
    if fused {
        // one launch per format and up to FUSED_MAX_WEIGHTS weights, in the callers' order
        let mut formats: Vec<BlockFormat> = Vec::new();
        for w in weights {
            if w.2 > 0 && !formats.contains(&w.1) {
                formats.push(w.1);
            }
        }
        for format in formats {
            let idx: Vec<usize> = (0..weights.len())
                .filter(|&i| weights[i].1 == format && weights[i].2 > 0)
                .collect();
            for group in idx.chunks(FUSED_MAX_WEIGHTS) {
                let outs = fused_launch(op, &dev, x, weights, group, format, nb, m)?;
                for (&i, y) in group.iter().zip(outs) {
                    ys[i] = Some(y);
                }
            }
        }
    } else {
        two_launch(op, &dev, x, up, weights, nb, m, &mut ys)?;
    }
    weights
        .iter()
        .zip(ys)
        .map(|(w, y)| match y {
            Some(y) => y.reshape(&out_shape(w.2).iter().map(|&v| v as i64).collect::<Vec<_>>()),
            None => Tensor::zeros(out_shape(w.2).as_slice(), x.dtype(), &x.device()),
        })
        .collect()
}

/// Blocks per SM of a fused kernel with `shared` bytes of shared memory, asked of the driver
/// once per (device, kernel, size).
fn fused_blocks_per_sm(
    dev: &super::device::CudaDevice,
    f: &cudarc::driver::CudaFunction,
    kernel: &'static str,
    shared: usize,
) -> Result<u32> {
    type Key = (usize, &'static str, usize);
    static CACHE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<Key, u32>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let Device::Cuda(ordinal) = dev.device() else {
        return Ok(1);
    };
    let key = (ordinal, kernel, shared);
    if let Some(&b) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(b);
    }
    dev.bind()?;
    let b = f
        .occupancy_max_active_blocks_per_multiprocessor((FUSED_WARPS * 32) as u32, shared, None)
        .map_err(|e| dev.err(&format!("occupancy of kernel {kernel}"), e))?
        .max(1);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, b);
    Ok(b)
}

/// One fused launch: the weights `group` (indices into `weights`, all of `format`, each with
/// `n > 0`), `m ≤ 8` rows of `nb` blocks. Returns their `[m, n]` outputs in `x`'s dtype.
#[allow(clippy::too_many_arguments)]
fn fused_launch(
    op: &'static str,
    dev: &super::device::CudaDevice,
    x: &Tensor,
    weights: &[(&Tensor, BlockFormat, usize)],
    group: &[usize],
    format: BlockFormat,
    nb: usize,
    m: usize,
) -> Result<Vec<Tensor>> {
    let device = x.device();
    // each row's first element, from the leading dims' strides: the kernel reads x in place
    let d = x.dim();
    let (lead, lead_st) = (&x.shape()[..d - 1], &x.stride()[..d - 1]);
    let mut rows = QRows { off: [0; 8] };
    for (r, off) in rows.off.iter_mut().enumerate().take(m) {
        let (mut i, mut o) = (r, 0usize);
        for (&size, &st) in lead.iter().zip(lead_st).rev() {
            o += (i % size) * st;
            i /= size;
        }
        *off = o as i64;
    }
    let es = x.stride()[d - 1] as i64;
    let (px, _) = element_ptr(&x.view_ref())?;
    let dt: i32 = match x.dtype() {
        DType::F32 => 0,
        DType::F16 => 1,
        _ => 2,
    };
    let mut q = QMany {
        w: [0; FUSED_MAX_WEIGHTS],
        y: [0; FUSED_MAX_WEIGHTS],
        f0: [0; FUSED_MAX_WEIGHTS + 1],
        count: group.len() as i32,
    };
    let mut outs = Vec::with_capacity(group.len());
    let mut total = 0i64;
    for (j, &i) in group.iter().enumerate() {
        let (blocks, _, n) = weights[i];
        let y = Tensor::alloc_for_overwrite(
            &[m, n],
            crate::layout::contiguous_strides(&[m, n]),
            x.dtype(),
            &device,
        )?;
        q.w[j] = element_ptr(&blocks.view_ref())?.0;
        q.y[j] = element_ptr(&y.view_ref())?.0;
        q.f0[j] = total;
        total += n as i64;
        outs.push(y);
    }
    for f in &mut q.f0[group.len()..] {
        *f = total;
    }
    let r = rows_per_warp(m);
    let kernel = kernel_names(format)[1][r.trailing_zeros() as usize];
    debug_assert!(kernel.contains(format.tag()));
    let f = dev.function(MODULE, kernel, source)?;
    let shared = fused_shared(m, nb).unwrap_or(usize::MAX);
    let per_sm = fused_blocks_per_sm(dev, &f, kernel, shared)?;
    let grid = (total as u64)
        .div_ceil(FUSED_WARPS as u64)
        .min(dev.sm_count as u64 * per_sm as u64)
        .max(1) as u32;
    let (nb_i, m_i) = (nb as i32, m as i32);
    let mut args = [
        arg(&q),
        arg(&total),
        arg(&nb_i),
        arg(&px),
        arg(&dt),
        arg(&rows),
        arg(&es),
        arg(&m_i),
        arg(&dt),
    ];
    // SAFETY: the arguments match k_qmvf_*'s parameters; every weight holds its n × nb
    // blocks (checked by the caller), every output m × n elements of x's dtype, and x's m
    // rows of nb · 32 elements are addressed through its own layout (in bounds of its storage,
    // as every view is)
    unsafe {
        launch_cfg(
            dev,
            &f,
            op,
            (grid, 1, 1),
            ((FUSED_WARPS * 32) as u32, 1, 1),
            shared as u32,
            &mut args,
        )?
    };
    Ok(outs)
}

/// The two-launch path: `x` (or `swiglu(x, up)`, computed by the rounding kernel) made dense
/// f32 and rounded once (with the block sums when a weight has a minimum), then one product
/// launch per weight; outputs into `ys`.
#[allow(clippy::too_many_arguments)]
fn two_launch(
    op: &'static str,
    dev: &super::device::CudaDevice,
    x: &Tensor,
    up: Option<&Tensor>,
    weights: &[(&Tensor, BlockFormat, usize)],
    nb: usize,
    m: usize,
    ys: &mut [Option<Tensor>],
) -> Result<()> {
    if weights.iter().all(|w| w.2 == 0) {
        return Ok(());
    }
    // the kernels read dense f32 rows
    let xf = x.to_dtype(DType::F32)?.contiguous()?;
    let total = m
        .checked_mul(nb)
        .filter(|&b| b <= i64::MAX as usize / 32)
        .ok_or_else(|| Error::invalid(op, format!("{m} rows × {nb} blocks overflow")))?;
    let device = x.device();
    // scratch the first kernel writes in full
    let scratch = |len: usize, dt: DType| Tensor::alloc_for_overwrite(&[len], vec![1], dt, &device);
    let qs = scratch(total * 32, DType::I8)?;
    let d = scratch(total, DType::F32)?;
    let s = weights
        .iter()
        .any(|w| w.1.has_min())
        .then(|| scratch(total, DType::F32))
        .transpose()?;
    let (px, _) = element_ptr(&xf.view_ref())?;
    let (pq, _) = element_ptr(&qs.view_ref())?;
    let (pd, _) = element_ptr(&d.view_ref())?;
    let ps = match &s {
        Some(s) => element_ptr(&s.view_ref())?.0,
        None => 0u64,
    };

    // 1. the activations, a warp per block
    let blocks_i = total as i64;
    let grid = (total.div_ceil(8) as u64)
        .min(dev.sm_count as u64 * 64)
        .max(1) as u32;
    match up {
        None => {
            let f = dev.function(MODULE, "q8_quantize", source)?;
            let mut args = [arg(&px), arg(&blocks_i), arg(&pq), arg(&pd), arg(&ps)];
            // SAFETY: the arguments match k_q8_quantize's parameters; every buffer holds
            // `total` blocks (x: 32·total f32, qs: 32·total i8, d and s: total f32)
            unsafe { launch_cfg(dev, &f, op, (grid, 1, 1), (256, 1, 1), 0, &mut args)? };
        }
        Some(up) => {
            let uf = up.contiguous()?; // f32, x's shape (checked by the caller)
            let (pu, _) = element_ptr(&uf.view_ref())?;
            let f = dev.function(MODULE, "q8_quantize_swiglu", source)?;
            let mut args = [
                arg(&px),
                arg(&pu),
                arg(&blocks_i),
                arg(&pq),
                arg(&pd),
                arg(&ps),
            ];
            // SAFETY: as above, with up: 32·total f32 like x
            unsafe { launch_cfg(dev, &f, op, (grid, 1, 1), (256, 1, 1), 0, &mut args)? };
        }
    }

    // 2. the products
    let r = rows_per_warp(m);
    for (&(blocks, format, n), out) in weights.iter().zip(ys.iter_mut()) {
        if n == 0 {
            continue;
        }
        let kernel = kernel_names(format)[0][r.trailing_zeros() as usize];
        debug_assert!(kernel.contains(format.tag()));
        let f = dev.function(MODULE, kernel, source)?;
        let y = Tensor::alloc_for_overwrite(
            &[m, n],
            crate::layout::contiguous_strides(&[m, n]),
            DType::F32,
            &device,
        )?;
        let (pw, _) = element_ptr(&blocks.view_ref())?;
        let (py, _) = element_ptr(&y.view_ref())?;
        let (n_i, nb_i, m_i) = (n as i64, nb as i32, m as i64);
        let gx = n.div_ceil(WARPS);
        let gy = m.div_ceil(r).min(65535);
        if gx > u32::MAX as usize {
            return Err(Error::invalid(
                op,
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
        // by the caller), the activations m × nb (with sums wherever a format reads them),
        // y m × n f32
        unsafe {
            launch_cfg(
                dev,
                &f,
                op,
                (gx as u32, gy as u32, 1),
                ((WARPS * 32) as u32, 1, 1),
                0,
                &mut args,
            )?
        };
        *out = Some(if x.dtype() == DType::F32 {
            y
        } else {
            y.to_dtype(x.dtype())?
        });
    }
    // the scratch is freed into the stream-ordered cache: later work on this stream reuses it
    // only after these kernels
    drop((qs, d, s, xf));
    Ok(())
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
        let mutants: Vec<String> = ["skip_last", "lane_order", "fused_block"]
            .iter()
            .map(|m| mutant(m).unwrap())
            .collect();
        // the mutants of `source()` really differ from the kernels
        assert!(mutants.iter().all(|m| m != SOURCE));
        assert!(mutant("no such mutant").is_none());
        for (i, src) in std::iter::once(SOURCE.to_string())
            .chain(mutants)
            .enumerate()
        {
            if let Err(e) =
                super::super::compile::compile_source(MODULE, &format!("{COMMON}{src}"), "sm_90")
            {
                panic!("the quant module (variant {i}: 0 the kernels, then the mutants) does not compile: {e}");
            }
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
