//! Products with block-quantized weights on the CPU, the llama.cpp way.
//!
//! A [`QMatrix`] keeps a weight matrix as GGUF blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
//! Q5_K, Q6_K) and multiplies activations by it without dequantizing it: each activation
//! row is quantized once to 8-bit blocks ([`Q8Row`], in the [`ActFormat`] the weight type
//! pairs with), and each output is a sum over blocks of an **exact integer dot product**
//! times the blocks' scales.
//!
//! ```
//! use stride_gguf::GgmlType;
//! use stride_quant::QMatrix;
//!
//! let (rows, cols) = (8, 256);
//! let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
//! let q = QMatrix::quantize(GgmlType::Q4_0, rows, cols, &w)?;
//!
//! let m = 3; // three activation rows
//! let x: Vec<f32> = (0..m * cols).map(|i| ((i * 11 % 23) as f32 - 11.0) / 11.0).collect();
//! let mut y = vec![0f32; m * rows];
//! q.matmul(&x, m, &mut y)?;
//!
//! // close to the f32 product with the dequantized weights
//! let wd = q.dequantize()?;
//! let y00: f32 = (0..cols).map(|k| x[k] * wd[k]).sum();
//! assert!((y[0] - y00).abs() < 0.05 * (0..cols).map(|k| (x[k] * wd[k]).abs()).sum::<f32>());
//! # Ok::<(), stride_quant::QuantError>(())
//! ```
//!
//! # What a product computes
//!
//! For weight row `w` and activation row `x`, with `a = Q8(x)` its quantized form, the
//! kernels compute `Σ_e deq(w)_e · deq(a)_e` — the exact dot product of the dequantized
//! weights and the dequantized activations — as a sum of per-block terms:
//!
//! | weights | activations | terms of block `b` |
//! |---------|-------------|--------------------|
//! | Q8_0, Q4_0, Q5_0 | Q8_0 | `(d_w·d_x) · Σ q_w q_x` |
//! | Q4_1, Q5_1 | Q8_1 | `(d_w·d_x) · Σ q_w q_x`, then `m_w · s_x` |
//! | Q4_K, Q5_K | Q8_K | `(d·d8) · Σ_j sc_j Σ q q8`, then `−(dmin·d8) · Σ_j m_j Σ q8` |
//! | Q6_K | Q8_K | `(d·d8) · Σ_g sc_g Σ q q8` |
//!
//! The integer sums are exact (`i32`), as in ggml. Each term is added by one fused
//! multiply-add into accumulation lane `b % 8`, and the eight lanes are summed in a fixed
//! tree (`accum.rs`). **The portable and the AVX2 kernels perform these same operations in
//! the same order, so they give the same bits**, on every machine and with any number of
//! threads; [`Isa`] selects between them (`STRIDE_QUANT_SIMD=off` forces the portable one).
//! With several activation rows and a 32-value block type, [`QMatrix::matmul`] runs a tile
//! kernel that unpacks each weight block once for up to four rows; each output still gets
//! exactly these operations, so the same bits.
//!
//! # Error bound
//!
//! Let `T = Σ |t|` over the individual terms above (for the 32-value types each term's
//! scale product is exact — two f16 — and the fma rounds only the sum; for the K-quants
//! `d·d8` and the conversion of the integer sum to `f32` add two roundings), `k` the
//! largest number of terms added into one lane (`⌈n_blocks / 8⌉`, twice that with a
//! minimum term) and `u = 2⁻²⁴`. Then each lane is a recursive sum of `k` rounded terms
//! and the tree adds three more roundings, so (Higham, *Accuracy and Stability*, §4.2)
//!
//! `|ŷ − y| ≤ γ_n · T`, `γ_n = n·u / (1 − n·u)`, `n = k + 3` (`k + 5` for the K-quants),
//!
//! where `y` is the exact dot product of the dequantized operands. Against the `f32`
//! product with the *unquantized* activations the activation quantization adds
//! `Σ_e |w_e| · |x_e − deq(a)_e|`, at most `≈ 0.57·d_x` per value for Q8_0/Q8_1 (half a
//! step, plus the f16 rounding of `d`) and `0.5·d` for Q8_K. The tests hold the kernels to
//! both bounds.
//!
//! # Deviations from ggml
//!
//! - Q8_1's block sum is `d_x · Σq` in `f32` from the f16-rounded `d_x` (exact), where
//!   ggml stores it rounded to f16.
//! - ggml's SIMD kernels accumulate per-lane partial sums of a block in `f32`, so its
//!   scalar and SIMD results differ in rounding; here they agree bit for bit.
//! - A non-finite activation makes every output of its row NaN (ggml's results there are
//!   unspecified).
//!
//! # On CUDA
//!
//! [`QMatrix::to_device`] copies the blocks to a GPU as a [`DeviceQMatrix`], whose products
//! run stride-core's CUDA kernels (`stride_core::cuda::quant`; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
//! They perform the operations above in the same order — the activation rounding on the
//! device, `__dp4a` integer sums, one `fmaf` per term into lane `b % 8`, the same tree — so a
//! CUDA product has the bits of the CPU's and the bound above holds for it unchanged.

#![forbid(unsafe_op_in_unsafe_fn)]

mod accum;
mod device;
mod dot;
mod dot_k;
mod dot_q4;
mod dot_q5;
mod dot_q8;
mod error;
mod isa;
mod matmul;
mod q8;
mod qmatrix;

pub use device::DeviceQMatrix;
pub use error::{QuantError, Result};
pub use isa::Isa;
pub use q8::{ActFormat, Q8Row};
pub use qmatrix::QMatrix;
