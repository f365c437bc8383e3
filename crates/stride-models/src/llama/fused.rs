//! Projections that read the same input, computed as one product: q/k/v after the attention
//! norm, gate/up after the feed-forward norm — one launch where there were three or two
//! (a decode step is bound by its number of kernels, not its bytes).
//!
//! Dense matrices are concatenated once, at load, into one `(Σ out, in)` matrix, and each
//! layer's own weights become row views of it (no second copy). Quantized matrices keep their
//! blocks and go through [`LinearWeight::forward_many`] (one launch on CUDA).

use super::LinearWeight;
use stride_core::{Result, Tensor};

/// Weights that share an input: the concatenated dense matrix when every part is dense.
pub(crate) struct FusedProjection {
    dense: Option<Tensor>,
    /// Each part's output features, in order.
    widths: Vec<usize>,
}

impl FusedProjection {
    /// Fuses `parts` (each `(out_i, in)`, one input width): dense ones are concatenated and
    /// replaced by row views of the result.
    pub(crate) fn fuse(parts: &mut [&mut LinearWeight]) -> Result<FusedProjection> {
        let widths = parts.iter().map(|w| w.shape()[0]).collect();
        let dense: Option<Vec<Tensor>> = parts
            .iter()
            .map(|w| match w {
                LinearWeight::Dense(t) => Some(t.detach()),
                _ => None,
            })
            .collect();
        let Some(dense) = dense.filter(|d| d.len() > 1) else {
            return Ok(FusedProjection {
                dense: None,
                widths,
            });
        };
        let all = Tensor::cat(&dense.iter().collect::<Vec<_>>(), 0)?;
        let mut at = 0i64;
        for (w, t) in parts.iter_mut().zip(&dense) {
            let n = t.shape()[0];
            **w = LinearWeight::Dense(all.narrow(0, at, n)?);
            at += n as i64;
        }
        Ok(FusedProjection {
            dense: Some(all),
            widths,
        })
    }

    /// `x · Wᵢᵀ` for each part (`parts` the weights this was made from, in order): views of
    /// one product for dense weights, else [`LinearWeight::forward_many`].
    pub(crate) fn forward(&self, parts: &[&LinearWeight], x: &Tensor) -> Result<Vec<Tensor>> {
        let Some(w) = &self.dense else {
            return LinearWeight::forward_many(parts, x);
        };
        let y = x.matmul(&w.t()?)?;
        let mut at = 0i64;
        self.widths
            .iter()
            .map(|&n| {
                let part = y.narrow(-1, at, n);
                at += n as i64;
                part
            })
            .collect()
    }
}
