//! Registry-style gradcheck: every differentiable op is declared once (a closure and its
//! inputs), and each entry is gradchecked in f64 with its inputs in several layouts
//! (contiguous, transposed, stepped slice, offset into a larger buffer, expanded from a
//! smaller leaf) and with a non-contiguous incoming gradient; a subset is gradgradchecked.
//!
//! Adding an op is one line in `table()`. `every_differentiable_frontend_has_an_entry` scans
//! the op frontends' sources for `pub fn`s and fails for any that is neither in the table nor
//! in `NOT_DIFFERENTIABLE`, so a new frontend cannot silently skip its gradcheck.
//!
//! Every entry runs in all 5 layouts (gradgradcheck in 2); the sweep takes about a second.
//! `sweep(false)` samples 3 layouts per entry, should the table ever grow too slow.

use std::collections::BTreeSet;
use stride_core::autograd::{gradcheck, gradgradcheck, GradcheckOptions};
use stride_core::{DType, Device, Indexing, MemoryFormat, PadMode, Result, ScatterReduce, Tensor};

#[derive(Clone, Copy, Debug)]
enum Dom {
    /// ±[0.25, 2]: distinct, away from 0 and from (half-)integers
    Any,
    /// [0.25, 2]
    Pos,
    /// ±[0.1, 0.9]
    Unit,
    /// like `Any` with every third element exactly 0
    Zeros,
}

#[derive(Clone)]
enum In {
    F(Vec<usize>, Dom),
    I(Vec<usize>, Vec<i64>),
    B(Vec<usize>, Vec<bool>),
}

type Op = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

struct Entry {
    name: &'static str,
    ins: Vec<In>,
    f: Op,
    gg: bool,
    expand: bool,
    /// Options of this entry when the defaults' error bound does not apply (a real cast).
    opts: Option<GradcheckOptions>,
}

impl Entry {
    fn opts(mut self, o: GradcheckOptions) -> Self {
        self.opts = Some(o);
        self
    }
    fn gg(mut self) -> Self {
        self.gg = true;
        self
    }
    fn no_expand(mut self) -> Self {
        self.expand = false;
        self
    }
}

fn e(name: &'static str, ins: Vec<In>, f: impl Fn(&[Tensor]) -> Result<Tensor> + 'static) -> Entry {
    Entry {
        name,
        ins,
        f: Box::new(f),
        gg: false,
        expand: true,
        opts: None,
    }
}

/// Gradcheck options for `f64 → f32 → f64` inside the function: each evaluation of
/// `y = 2·f64(f32(x))` is off from `2x` by at most `2·u32·|x|` (`u32 = 2⁻²⁴`), so the central
/// difference is off by at most `2·u32·(|x| + ε)·2 / 2ε` = `2.4·10⁻⁴` for `|x| ≤ 2`,
/// `ε = 10⁻³` (a larger step than the default's: the f32 staircase must not dominate;
/// `y` is linear, so there is no truncation error). `atol = 2.5·10⁻⁴` is that bound.
fn cast_opts() -> GradcheckOptions {
    let eps = 1e-3;
    let u32_ = f32::EPSILON as f64 / 2.0;
    GradcheckOptions {
        eps,
        atol: 2.0 * u32_ * (2.0 + eps) * 2.0 / (2.0 * eps) * 1.05,
        rtol: 0.0,
        ..GradcheckOptions::default()
    }
}
fn f(s: &[usize]) -> In {
    In::F(s.to_vec(), Dom::Any)
}
fn fd(s: &[usize], d: Dom) -> In {
    In::F(s.to_vec(), d)
}
fn ix(s: &[usize], v: &[i64]) -> In {
    In::I(s.to_vec(), v.to_vec())
}
fn mk(s: &[usize], v: &[u8]) -> In {
    In::B(s.to_vec(), v.iter().map(|&b| b != 0).collect())
}

fn pair(x: &[Tensor], g: impl Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Tensor> {
    g(&x[0], &x[1])
}

#[rustfmt::skip]
fn table() -> Vec<Entry> {
    use Dom::*;
    let s = ScatterReduce::Sum;
    let _ = s;
    vec![
        // ---- elementwise, unary
        e("neg", vec![f(&[3, 4])], |x| x[0].neg()).gg(),
        e("abs", vec![f(&[3, 4])], |x| x[0].abs()).gg(),
        e("sign", vec![f(&[3, 4])], |x| x[0].sign()),
        e("exp", vec![f(&[3, 4])], |x| x[0].exp()).gg(),
        e("exp2", vec![f(&[3, 4])], |x| x[0].exp2()),
        e("log", vec![fd(&[3, 4], Pos)], |x| x[0].log()).gg(),
        e("log2", vec![fd(&[3, 4], Pos)], |x| x[0].log2()),
        e("log1p", vec![fd(&[3, 4], Pos)], |x| x[0].log1p()),
        e("expm1", vec![f(&[3, 4])], |x| x[0].expm1()),
        e("sqrt", vec![fd(&[3, 4], Pos)], |x| x[0].sqrt()).gg(),
        e("rsqrt", vec![fd(&[3, 4], Pos)], |x| x[0].rsqrt()),
        e("reciprocal", vec![f(&[3, 4])], |x| x[0].reciprocal()).gg(),
        e("square", vec![f(&[3, 4])], |x| x[0].square()).gg(),
        e("sin", vec![f(&[3, 4])], |x| x[0].sin()).gg(),
        e("cos", vec![f(&[3, 4])], |x| x[0].cos()),
        e("tan", vec![fd(&[3, 4], Unit)], |x| x[0].tan()),
        e("tanh", vec![f(&[3, 4])], |x| x[0].tanh()).gg(),
        e("sigmoid", vec![f(&[3, 4])], |x| x[0].sigmoid()).gg(),
        e("relu", vec![f(&[3, 4])], |x| x[0].relu()),
        e("gelu", vec![f(&[3, 4])], |x| x[0].gelu()).gg(),
        e("gelu_tanh", vec![f(&[3, 4])], |x| x[0].gelu_tanh()),
        e("silu", vec![f(&[3, 4])], |x| x[0].silu()).gg(),
        e("softplus", vec![f(&[3, 4])], |x| x[0].softplus()),
        e("floor", vec![f(&[3, 4])], |x| x[0].floor()),
        e("ceil", vec![f(&[3, 4])], |x| x[0].ceil()),
        e("round", vec![f(&[3, 4])], |x| x[0].round()),
        e("trunc", vec![f(&[3, 4])], |x| x[0].trunc()),
        e("erf", vec![f(&[3, 4])], |x| x[0].erf()),
        // ---- elementwise, binary (with broadcasting and scalars)
        e("add", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.add(b))).gg(),
        e("add/broadcast", vec![f(&[3, 4]), f(&[4])], |x| pair(x, |a, b| a.add(b))),
        e("add/scalar", vec![f(&[3, 4])], |x| x[0].add(2.5)),
        e("sub", vec![f(&[2, 3, 2]), f(&[3, 1])], |x| pair(x, |a, b| a.sub(b))).gg(),
        e("mul", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.mul(b))).gg(),
        e("mul/broadcast", vec![f(&[2, 1, 3]), f(&[4, 1])], |x| pair(x, |a, b| a.mul(b))),
        e("div", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.div(b))).gg(),
        e("floor_divide", vec![f(&[3, 4]), fd(&[3, 4], Pos)], |x| pair(x, |a, b| a.floor_divide(b))),
        e("remainder", vec![f(&[3, 4]), fd(&[3, 4], Pos)], |x| pair(x, |a, b| a.remainder(b))),
        e("pow", vec![fd(&[3, 4], Pos), f(&[3, 4])], |x| pair(x, |a, b| a.pow(b))).gg(),
        e("pow/scalar", vec![f(&[3, 4])], |x| x[0].pow(3.0)),
        e("maximum", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.maximum(b))),
        e("minimum", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.minimum(b))),
        e("atan2", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.atan2(b))),
        e("clamp_min", vec![f(&[3, 4]), f(&[3, 4])], |x| pair(x, |a, b| a.clamp_min(b))),
        e("clamp_max", vec![f(&[3, 4])], |x| x[0].clamp_max(0.6)),
        // ---- elementwise, ternary
        e("where_cond", vec![mk(&[3, 4], &[1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0]), f(&[3, 4]), f(&[4])],
            |x| x[0].where_cond(&x[1], &x[2])).gg(),
        e("lerp", vec![f(&[3, 4]), f(&[3, 4]), fd(&[3, 4], Unit)], |x| x[0].lerp(&x[1], &x[2])),
        e("addcmul", vec![f(&[3, 4]), f(&[3, 4]), f(&[4])], |x| x[0].addcmul(&x[1], &x[2], 0.5)),
        e("addcdiv", vec![f(&[3, 4]), f(&[3, 4]), fd(&[3, 4], Pos)], |x| x[0].addcdiv(&x[1], &x[2], 0.5)),
        e("clamp", vec![f(&[3, 4])], |x| x[0].clamp(-0.7, 0.9)),
        e("clamp/tensors", vec![f(&[3, 4]), fd(&[3, 4], Unit), fd(&[4], Pos)],
            |x| x[0].clamp(&x[1], &x[1].add(&x[2])?)),
        // a real round trip through f32: the gradient must come back to f64 unchanged
        e("to_dtype", vec![f(&[3, 4])], |x| x[0].to_dtype(DType::F32)?.to_dtype(DType::F64)?.mul(2.0))
            .opts(cast_opts()),
        // ---- reductions, scans, softmax
        e("sum", vec![f(&[3, 4])], |x| x[0].sum()).gg(),
        e("sum_dims", vec![f(&[2, 3, 2])], |x| x[0].sum_dims(&[0, 2], false)).gg(),
        e("sum_dims/keepdim", vec![f(&[3, 4])], |x| x[0].sum_dims(&[1], true)),
        e("mean", vec![f(&[3, 4])], |x| x[0].mean()).gg(),
        e("mean_dims", vec![f(&[3, 4])], |x| x[0].mean_dims(&[-1], false)).gg(),
        e("prod", vec![f(&[3, 3])], |x| x[0].prod()).gg(),
        e("prod_dims", vec![f(&[3, 4])], |x| x[0].prod_dims(&[1], false)).gg(),
        e("prod_dims/zeros", vec![fd(&[4, 3], Zeros)], |x| x[0].prod_dims(&[0], true)),
        e("max", vec![f(&[3, 4])], |x| x[0].max()),
        e("min", vec![f(&[3, 4])], |x| x[0].min()),
        e("amax", vec![f(&[3, 4])], |x| x[0].amax(&[1], false)).gg(),
        e("amin", vec![f(&[3, 4])], |x| x[0].amin(&[0], true)),
        e("max_dim", vec![f(&[3, 4])], |x| Ok(x[0].max_dim(1, false)?.0)),
        e("min_dim", vec![f(&[3, 4])], |x| Ok(x[0].min_dim(0, true)?.0)),
        e("var", vec![f(&[3, 4])], |x| x[0].var(&[1], 1.0, false)).gg(),
        e("std", vec![f(&[3, 4])], |x| x[0].std(&[1], 1.0, true)).gg(),
        e("norm", vec![f(&[3, 4])], |x| x[0].norm(2.0, &[1], false)).gg(),
        e("norm/p1", vec![f(&[3, 4])], |x| x[0].norm(1.0, &[0], false)),
        e("norm/p3", vec![f(&[3, 4])], |x| x[0].norm(3.0, &[1], true)),
        e("norm_all", vec![f(&[3, 4])], |x| x[0].norm_all(2.0)),
        e("logsumexp", vec![f(&[3, 4])], |x| x[0].logsumexp(&[1], false)).gg(),
        e("cumsum", vec![f(&[3, 4])], |x| x[0].cumsum(1)).gg(),
        e("cumprod", vec![f(&[3, 4])], |x| x[0].cumprod(1)).gg(),
        e("cumprod/zeros", vec![fd(&[3, 4], Zeros)], |x| x[0].cumprod(1)),
        e("cumprod/zeros_dim0", vec![fd(&[4, 3], Zeros)], |x| x[0].cumprod(0)),
        e("softmax", vec![f(&[3, 4])], |x| x[0].softmax(1)).gg(),
        e("log_softmax", vec![f(&[3, 4])], |x| x[0].log_softmax(0)).gg(),
        // ---- matmul family
        e("matmul", vec![f(&[3, 4]), f(&[4, 2])], |x| pair(x, |a, b| a.matmul(b))).gg(),
        e("matmul/vec_mat", vec![f(&[4]), f(&[4, 3])], |x| pair(x, |a, b| a.matmul(b))),
        e("matmul/mat_vec", vec![f(&[3, 4]), f(&[4])], |x| pair(x, |a, b| a.matmul(b))),
        e("matmul/batched_broadcast", vec![f(&[2, 3, 4]), f(&[4, 2])], |x| pair(x, |a, b| a.matmul(b))).gg(),
        e("mm", vec![f(&[3, 4]), f(&[4, 2])], |x| pair(x, |a, b| a.mm(b))).gg(),
        e("bmm", vec![f(&[2, 3, 2]), f(&[2, 2, 3])], |x| pair(x, |a, b| a.bmm(b))).gg(),
        e("dot", vec![f(&[5]), f(&[5])], |x| pair(x, |a, b| a.dot(b))).gg(),
        e("outer", vec![f(&[3]), f(&[4])], |x| pair(x, |a, b| a.outer(b))).gg(),
        e("einsum", vec![f(&[3, 4]), f(&[4, 2])], |x| Tensor::einsum("ij,jk->ik", &[&x[0], &x[1]])).gg(),
        e("einsum/batched", vec![f(&[2, 3, 2]), f(&[2, 2, 3])], |x| Tensor::einsum("bij,bjk->bik", &[&x[0], &x[1]])),
        e("einsum/trace_like", vec![f(&[3, 3])], |x| Tensor::einsum("ii->i", &[&x[0]])),
        // ---- views and copies
        e("view", vec![f(&[3, 4])], |x| x[0].contiguous()?.view(&[2, 6])),
        e("reshape", vec![f(&[3, 4])], |x| x[0].reshape(&[4, 3])),
        e("transpose", vec![f(&[2, 3, 2])], |x| x[0].transpose(0, 2)),
        e("t", vec![f(&[3, 4])], |x| x[0].t()),
        e("permute", vec![f(&[2, 3, 2])], |x| x[0].permute(&[2, 0, 1])),
        e("slice", vec![f(&[5, 4])], |x| x[0].slice(0, 1, i64::MAX, 2)),
        e("narrow", vec![f(&[3, 4])], |x| x[0].narrow(1, 1, 2)),
        e("select", vec![f(&[3, 4])], |x| x[0].select(1, -1)),
        e("expand", vec![f(&[3, 1])], |x| x[0].expand(&[2, 3, 4])),
        e("broadcast_to", vec![f(&[4])], |x| x[0].broadcast_to([3, 4])),
        e("squeeze", vec![f(&[3, 1, 2])], |x| x[0].squeeze(1)),
        e("squeeze_all", vec![f(&[1, 3, 1])], |x| x[0].squeeze_all()),
        e("unsqueeze", vec![f(&[3, 4])], |x| x[0].unsqueeze(1)),
        e("flatten", vec![f(&[2, 3, 2])], |x| x[0].flatten(0, 1)),
        e("unflatten", vec![f(&[3, 4])], |x| x[0].contiguous()?.unflatten(1, &[2, 2])),
        e("diagonal", vec![f(&[3, 4])], |x| x[0].diagonal(1, 0, 1)),
        e("as_strided", vec![f(&[3, 4])], |x| {
            let (s, o) = (x[0].stride().to_vec(), x[0].storage_offset());
            x[0].as_strided(&[2, 2], &[s[0], s[1]], o + s[1])
        }).no_expand(),
        e("as_strided/overlapping", vec![f(&[3, 4])], |x| {
            let (s, o) = (x[0].stride().to_vec(), x[0].storage_offset());
            x[0].as_strided(&[3, 2], &[s[1], s[1]], o)
        }).no_expand(),
        e("contiguous", vec![f(&[3, 4])], |x| x[0].contiguous()?.mul(1.5)),
        e("clone_tensor", vec![f(&[3, 4])], |x| x[0].clone_tensor()),
        e("clone_with", vec![f(&[3, 4])], |x| x[0].clone_with(MemoryFormat::Contiguous)),
        // ---- index family
        e("index_select", vec![f(&[4, 3]), ix(&[3], &[2, 0, 2])], |x| x[0].index_select(0, &x[1])).gg(),
        e("index_select/dim1", vec![f(&[3, 4]), ix(&[2], &[3, 1])], |x| x[0].index_select(1, &x[1])),
        e("gather", vec![f(&[3, 4]), ix(&[3, 2], &[0, 3, 1, 1, 2, 0])], |x| x[0].gather(1, &x[1])).gg(),
        e("take", vec![f(&[3, 4]), ix(&[2, 2], &[0, -1, 5, 5])], |x| x[0].take(&x[1])),
        e("index", vec![f(&[3, 4]), ix(&[2, 2], &[-1, 0, 1, 1])], |x| x[0].index(1, &x[1])),
        e("embedding", vec![f(&[4, 3]), ix(&[2, 3], &[1, 3, 1, 0, 0, 2])], |x| x[0].embedding(&x[1])),
        e("index_mask", vec![f(&[3, 4]), mk(&[3], &[1, 0, 1])], |x| x[0].index_mask(&x[1])),
        e("scatter", vec![f(&[3, 4]), ix(&[2, 3], &[1, 0, 3, 2, 3, 0]), f(&[2, 4])], |x| x[0].scatter(1, &x[1], &x[2])),
        e("scatter_value", vec![f(&[3, 4]), ix(&[2, 2], &[1, 0, 3, 3])], |x| x[0].scatter_value(1, &x[1], 0.5)),
        e("scatter_add", vec![f(&[3, 4]), ix(&[2, 3], &[1, 1, 3, 2, 2, 0]), f(&[2, 4])], |x| x[0].scatter_add(1, &x[1], &x[2])).gg(),
        e("scatter_reduce/sum", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 2])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Sum, true)),
        e("scatter_reduce/sum_exclude", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 2])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Sum, false)),
        e("scatter_reduce/mean", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 3])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Mean, true)),
        e("scatter_reduce/mean_exclude", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 2])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Mean, false)),
        e("scatter_reduce/prod", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 2])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Prod, true)),
        e("scatter_reduce/prod_zeros", vec![fd(&[3, 4], Zeros), ix(&[3, 3], &[1, 1, 1, 0, 0, 3, 2, 1, 2]), fd(&[3, 3], Zeros)],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Prod, true)),
        e("scatter_reduce/prod_exclude", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), fd(&[3, 2], Zeros)],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Prod, false)),
        e("scatter_reduce/amax", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 2])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Amax, true)),
        e("scatter_reduce/amin_exclude", vec![f(&[3, 4]), ix(&[3, 2], &[1, 1, 0, 0, 2, 1]), f(&[3, 2])],
            |x| x[0].scatter_reduce(1, &x[1], &x[2], ScatterReduce::Amin, false)),
        e("index_add", vec![f(&[4, 3]), ix(&[3], &[2, 0, 2]), f(&[3, 3])], |x| x[0].index_add(0, &x[1], &x[2], 2.0)).gg(),
        e("index_copy", vec![f(&[4, 3]), ix(&[2], &[2, 0]), f(&[4, 2])], |x| x[0].index_copy(1, &x[1], &x[2])),
        e("index_fill", vec![f(&[4, 3]), ix(&[2], &[-1, 1])], |x| x[0].index_fill(0, &x[1], 0.25)),
        e("index_fill/tensor_value", vec![f(&[4, 3]), ix(&[3], &[2, 0, 2]), f(&[])], |x| x[0].index_fill(1, &x[1], &x[2])),
        e("masked_fill", vec![f(&[3, 4]), mk(&[4], &[1, 0, 0, 1])], |x| x[0].masked_fill(&x[1], -0.5)),
        e("masked_fill/tensor_value", vec![f(&[3, 4]), mk(&[3, 1], &[1, 0, 1]), f(&[])], |x| x[0].masked_fill(&x[1], &x[2])),
        e("masked_select", vec![f(&[3, 4]), mk(&[4], &[1, 0, 1, 1])], |x| x[0].masked_select(&x[1])).gg(),
        e("masked_select/broadcast_self", vec![f(&[4]), mk(&[2, 4], &[1, 0, 1, 1, 0, 1, 1, 0])], |x| x[0].masked_select(&x[1])),
        e("masked_scatter", vec![f(&[3, 4]), mk(&[3, 4], &[1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0]), f(&[2, 4])],
            |x| x[0].masked_scatter(&x[1], &x[2])),
        // ---- sort family (values through their indices)
        e("sort", vec![f(&[3, 4])], |x| Ok(x[0].sort(1, false, true)?.0)),
        e("sort/descending_dim0", vec![f(&[3, 4])], |x| Ok(x[0].sort(0, true, true)?.0)),
        e("topk", vec![f(&[3, 4])], |x| Ok(x[0].topk(2, 1, true, true)?.0)),
        e("topk/smallest", vec![f(&[4, 3])], |x| Ok(x[0].topk(3, 0, false, true)?.0)),
        e("kthvalue", vec![f(&[3, 4])], |x| Ok(x[0].kthvalue(2, 1, false)?.0)),
        e("median", vec![f(&[3, 3])], |x| x[0].median()),
        e("median_dim", vec![f(&[3, 4])], |x| Ok(x[0].median_dim(0, true)?.0)),
        // ---- join family
        e("cat", vec![f(&[2, 3]), f(&[1, 3]), f(&[2, 3])], |x| Tensor::cat(&[&x[0], &x[1], &x[2]], 0)).gg(),
        e("cat/dim1", vec![f(&[3, 2]), f(&[3, 1])], |x| Tensor::cat(&[&x[0], &x[1]], -1)),
        e("stack", vec![f(&[3, 2]), f(&[3, 2])], |x| Tensor::stack(&[&x[0], &x[1]], 1)),
        e("split", vec![f(&[5, 3])], |x| { let p = x[0].split(2, 0)?; Tensor::cat(&[&p[2], &p[0].mul(2.0)?], 0) }),
        e("split_with_sizes", vec![f(&[3, 5])], |x| { let p = x[0].split_with_sizes(&[1, 3, 1], 1)?; p[1].mul(&p[0]) }),
        e("chunk", vec![f(&[4, 3])], |x| { let p = x[0].chunk(2, 0)?; p[1].sub(&p[0].mul(3.0)?) }),
        e("unbind", vec![f(&[3, 4])], |x| { let p = x[0].unbind(0)?; Tensor::stack(&[&p[2], &p[0]], 0) }),
        e("repeat", vec![f(&[2, 3])], |x| x[0].repeat(&[2, 1, 2])),
        e("tile", vec![f(&[2, 3])], |x| x[0].tile(&[3])),
        e("repeat_interleave", vec![f(&[2, 3])], |x| x[0].repeat_interleave(2, Some(1))),
        e("repeat_interleave/flat", vec![f(&[2, 3])], |x| x[0].repeat_interleave(2, None)),
        e("repeat_interleave_tensor", vec![f(&[3, 2]), ix(&[3], &[2, 0, 3])], |x| x[0].repeat_interleave_tensor(&x[1], Some(0))),
        e("flip", vec![f(&[3, 4])], |x| x[0].flip(&[0, 1])),
        e("roll", vec![f(&[3, 4])], |x| x[0].roll(&[1, -3], &[0, 1])),
        e("roll/flat", vec![f(&[3, 4])], |x| x[0].roll(&[5], &[])),
        e("tril", vec![f(&[3, 4])], |x| x[0].tril(0)),
        e("triu", vec![f(&[2, 3, 3])], |x| x[0].triu(1)),
        e("pad", vec![f(&[3, 4])], |x| x[0].pad(&[1, 2, 0, 1], PadMode::constant(0.5))),
        e("pad/crop", vec![f(&[3, 4])], |x| x[0].pad(&[-1, 2, 1, -2], PadMode::constant(0.0))),
        e("pad/reflect", vec![f(&[3, 4])], |x| x[0].pad(&[2, 3, 1, 2], PadMode::Reflect)),
        e("pad/replicate", vec![f(&[3, 4])], |x| x[0].pad(&[2, 1, 3, 1], PadMode::Replicate)),
        e("pad/circular", vec![f(&[3, 4])], |x| x[0].pad(&[2, 4, 3, 1], PadMode::Circular)),
        e("meshgrid", vec![f(&[3]), f(&[4])], |x| {
            let g = Tensor::meshgrid(&[&x[0], &x[1]], Indexing::Xy)?;
            g[0].mul(&g[1].add(1.0)?)
        }),
    ]
}

/// The names every entry stands for (`name/variant` counts for `name`).
fn covered(t: &[Entry]) -> BTreeSet<&'static str> {
    t.iter()
        .map(|e| e.name.split('/').next().unwrap())
        .collect()
}

/// Frontends with no derivative (integer/bool results, random sampling, in-place/out forms
/// are covered through their functional op) and non-op helpers.
const NOT_DIFFERENTIABLE: &[&str] = &[
    // a dtype rule and a wrapper: their gradients are those of the ops they compose
    "compute_dtype",
    "in_compute_dtype",
    "isnan",
    "isinf",
    "isfinite",
    "logical_not",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "argmax",
    "argmin",
    "all",
    "any",
    "all_dims",
    "any_dims",
    "count_nonzero",
    "nonzero",
    "argsort",
    "unique",
    "searchsorted",
    "bincount",
    "histc",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "bernoulli",
    "bernoulli_scalar",
    "dropout_mask",
    "dropout_mask_bool",
    "randperm",
    "multinomial",
    // helpers that are not tensor ops
    "name",
    "constant",
    "new",
    "keepdim_layout",
];

/// Every `pub fn` of the op frontends (and the macro-generated elementwise ops), without
/// their in-place (`_`) and `_out` forms.
fn frontends() -> BTreeSet<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut files: Vec<String> = std::fs::read_dir(format!("{root}/ops"))
        .expect("src/ops")
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    files.push(format!("{root}/view.rs"));
    let mut names = BTreeSet::new();
    for p in files {
        let src = std::fs::read_to_string(&p).unwrap();
        for line in src.lines() {
            let l = line.trim_start();
            let name = if let Some(rest) = l.strip_prefix("pub fn ") {
                rest.split(|c: char| c == '(' || c == '<').next()
            } else if !l.starts_with("use ") && (l.contains("_out;") || l.contains("_out (")) {
                // `Exp: exp, exp_, exp_out;` / `lerp, lerp_, lerp_out (end, weight) => …;`
                let l = l.split(": ").last().unwrap_or(l);
                l.split(',').next().map(str::trim)
            } else {
                None
            };
            if let Some(n) = name {
                if n.starts_with('$') || n.is_empty() {
                    continue;
                }
                if !n.ends_with('_') && !n.ends_with("_out") {
                    names.insert(n.to_string());
                }
            }
        }
    }
    names
}

#[test]
fn every_differentiable_frontend_has_an_entry() {
    let t = table();
    let cov = covered(&t);
    let missing: Vec<String> = frontends()
        .into_iter()
        .filter(|n| !cov.contains(n.as_str()) && !NOT_DIFFERENTIABLE.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "differentiable frontends without a gradcheck entry in tests/gradcheck_all.rs: {missing:?} (add an entry, or list it in NOT_DIFFERENTIABLE)"
    );
    let all = frontends();
    let stale: Vec<&str> = cov
        .iter()
        .copied()
        .filter(|n| !all.contains(*n) && *n != "to_dtype")
        .collect();
    assert!(
        stale.is_empty(),
        "entries for ops that no longer exist: {stale:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// inputs and layouts

fn values(n: usize, dom: Dom, salt: usize) -> Vec<f64> {
    // distinct magnitudes, shuffled by a fixed generator
    let mut v: Vec<f64> = (0..n)
        .map(|k| {
            let m =
                0.25 + 1.75 * (k as f64 + 0.5) / n.max(1) as f64 + 0.0371 + 0.0013 * salt as f64;
            match dom {
                Dom::Pos => m,
                Dom::Any | Dom::Zeros => {
                    if k % 2 == 0 {
                        m
                    } else {
                        -m
                    }
                }
                Dom::Unit => (if k % 2 == 0 { m } else { -m }) * 0.45,
            }
        })
        .collect();
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ (salt as u64 * 0x1234_5678);
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    if let Dom::Zeros = dom {
        for (k, x) in v.iter_mut().enumerate() {
            if k % 3 == 1 {
                *x = 0.0;
            }
        }
    }
    v
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lay {
    Contiguous,
    Transposed,
    Stepped,
    Offset,
    Expanded,
}
const LAYOUTS: [Lay; 5] = [
    Lay::Contiguous,
    Lay::Transposed,
    Lay::Stepped,
    Lay::Offset,
    Lay::Expanded,
];

/// `c` (contiguous) re-laid out as `lay` (same logical values).
fn relayout(c: &Tensor, lay: Lay) -> Result<Tensor> {
    let shape = c.shape().to_vec();
    let nd = shape.len();
    Ok(match lay {
        Lay::Contiguous | Lay::Expanded => c.clone(),
        Lay::Transposed if nd >= 2 => {
            let rev: Vec<i64> = (0..nd as i64).rev().collect();
            c.permute(&rev)?.contiguous()?.permute(&rev)?
        }
        Lay::Transposed | Lay::Stepped if nd >= 1 => {
            let mut big = shape.clone();
            big[nd - 1] *= 2;
            let b = Tensor::zeros(big, c.dtype(), &c.device())?;
            let v = b.slice(nd as i64 - 1, 0, i64::MAX, 2)?;
            v.copy_(c)?;
            v
        }
        _ => {
            let n = c.numel();
            let b = Tensor::zeros([n + 5], c.dtype(), &c.device())?;
            let s: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
            let v = b.narrow(0, 5, n)?.view(&s)?;
            v.copy_(c)?;
            v
        }
    })
}

/// The leaves for one run (passed to gradcheck) and, per input, whether the op sees it
/// expanded from its leaf (dim `k` of the leaf is 1).
fn make_inputs(
    ins: &[In],
    lay: Lay,
    salt: usize,
    dev: Device,
) -> Result<(Vec<Tensor>, Vec<Option<Vec<usize>>>)> {
    let mut leaves = vec![];
    let mut expand = vec![];
    for (i, inp) in ins.iter().enumerate() {
        match inp {
            In::F(shape, dom) => {
                let k = shape.iter().position(|&s| s > 1);
                if let (Lay::Expanded, Some(k)) = (lay, k) {
                    let mut small = shape.clone();
                    small[k] = 1;
                    let n: usize = small.iter().product();
                    let t = Tensor::from_vec(values(n, *dom, salt + i), small)?.to_device(&dev)?;
                    leaves.push(t.requires_grad_(true)?);
                    expand.push(Some(shape.clone()));
                } else {
                    let n: usize = shape.iter().product();
                    let c = Tensor::from_vec(values(n, *dom, salt + i), shape.clone())?
                        .to_device(&dev)?;
                    leaves.push(relayout(&c, lay)?.requires_grad_(true)?);
                    expand.push(None);
                }
            }
            In::I(shape, v) => {
                let c = Tensor::from_vec(v.clone(), shape.clone())?.to_device(&dev)?;
                leaves.push(relayout(&c, lay)?);
                expand.push(None);
            }
            In::B(shape, v) => {
                let c = Tensor::from_vec(v.clone(), shape.clone())?.to_device(&dev)?;
                leaves.push(relayout(&c, lay)?);
                expand.push(None);
            }
        }
    }
    Ok((leaves, expand))
}

/// The op's output re-viewed so that the gradient flowing into it is non-contiguous: a
/// transpose for ≥ 2 dims, one half of a stack (a stride-2 gradient) for 1 dim.
fn noncontiguous_grad(y: Tensor) -> Result<Tensor> {
    match y.dim() {
        0 => Ok(y),
        1 => Tensor::stack(&[&y, &y.zeros_like(MemoryFormat::Contiguous)?], 1),
        n => y.transpose(0, n as i64 - 1),
    }
}

fn check_entry(
    e: &Entry,
    lay: Lay,
    salt: usize,
    opts: GradcheckOptions,
    dev: Device,
) -> Result<()> {
    if lay == Lay::Expanded && !e.expand {
        return Ok(());
    }
    let (leaves, expand) = make_inputs(&e.ins, lay, salt, dev)?;
    let nc = lay != Lay::Contiguous;
    let run = |xs: &[Tensor]| -> Result<Tensor> {
        let xs: Vec<Tensor> = xs
            .iter()
            .zip(&expand)
            .map(|(x, ex)| match ex {
                Some(s) => x.expand(&s.iter().map(|&v| v as i64).collect::<Vec<_>>()),
                None => Ok(x.clone()),
            })
            .collect::<Result<_>>()?;
        let y = (e.f)(&xs)?;
        if nc {
            noncontiguous_grad(y)
        } else {
            Ok(y)
        }
    };
    gradcheck(run, &leaves, e.opts.unwrap_or(opts))
}

/// Runs the table on `dev`; on a device without a kernel for some op, those entries are
/// counted and listed apart (`Error::NotImplemented`), never passed.
fn sweep(exhaustive: bool, dev: Device) {
    let t = table();
    let opts = GradcheckOptions::default();
    let mut failures = vec![];
    let mut not_implemented = BTreeSet::new();
    let mut record = |what: String, r: Result<()>| match r {
        Ok(()) => {}
        Err(stride_core::Error::NotImplemented { op, .. }) => {
            not_implemented.insert(op);
        }
        Err(err) => failures.push(format!("{what}: {err}")),
    };
    let (mut runs, mut gg_runs) = (0usize, 0usize);
    for (i, e) in t.iter().enumerate() {
        let lays: Vec<Lay> = if exhaustive {
            LAYOUTS.to_vec()
        } else {
            // contiguous always, and two of the other four, rotating with the entry
            vec![LAYOUTS[0], LAYOUTS[1 + i % 4], LAYOUTS[1 + (i + 2) % 4]]
        };
        for lay in lays {
            if lay == Lay::Expanded && !e.expand {
                continue;
            }
            runs += 1;
            record(
                format!("{} [{lay:?}]", e.name),
                check_entry(e, lay, i, opts, dev),
            );
        }
        if e.gg {
            let g_lays: &[Lay] = if exhaustive {
                &[Lay::Contiguous, Lay::Transposed]
            } else {
                &[Lay::Transposed]
            };
            for &lay in g_lays {
                gg_runs += 1;
                let r = make_inputs(&e.ins, lay, i, dev).and_then(|(leaves, _)| {
                    gradgradcheck(|xs| (e.f)(xs), &leaves, e.opts.unwrap_or(opts))
                });
                record(format!("{} [gradgrad {lay:?}]", e.name), r);
            }
        }
    }
    println!(
        "gradcheck_all on {dev}: {} entries covering {} ops; {runs} gradcheck runs, {gg_runs} gradgradcheck runs, {} failures",
        t.len(),
        covered(&t).len(),
        failures.len()
    );
    if !not_implemented.is_empty() {
        println!(
            "gradcheck_all on {dev}: runs skipped because an op has no kernel on this device: {not_implemented:?}"
        );
    }
    assert!(
        dev != Device::Cpu || not_implemented.is_empty(),
        "the CPU has every kernel"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(covered(&t).len() >= 120, "the table shrank");
}

#[test]
fn gradcheck_every_op_over_every_layout() {
    sweep(true, Device::Cpu);
}

#[test]
fn sampled_sweep_runs() {
    // the cheaper variant stays compiled and correct
    sweep(false, Device::Cpu);
}

/// The same table on the GPU (f64 kernels, every layout); skips, saying so, without one.
#[test]
fn gradcheck_every_op_on_cuda() {
    let Some(device) = stride_core::cuda::require_or_skip("gradcheck_every_op_on_cuda") else {
        return;
    };
    sweep(true, device);
}

#[test]
fn incoming_gradient_layout_does_not_matter() -> Result<()> {
    // the same backward with a contiguous and a transposed incoming gradient
    let x = Tensor::from_vec(values(12, Dom::Any, 3), [3, 4])?.requires_grad_(true)?;
    let idx = Tensor::from_vec(vec![2i64, 0, 2, 1], [4])?;
    let gc = Tensor::from_vec(values(12, Dom::Any, 9), [4, 3])?;
    let gt = gc.t()?.contiguous()?.t()?;
    assert!(!gt.is_contiguous());
    let mut got = vec![];
    for g in [&gc, &gt] {
        let y = x.index_select(0, &idx)?.matmul(&x.t()?)?.roll(&[1], &[0])?;
        let r = stride_core::autograd::grad(&[&y], &[&x], Some(&[g]), Default::default())?;
        got.push(r[0].as_ref().unwrap().to_vec::<f64>()?);
    }
    for (a, b) in got[0].iter().zip(&got[1]) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    let _ = Device::Cpu;
    Ok(())
}

/// Backward through real casts: the gradient of `to_dtype` is the incoming gradient cast back
/// to the input's dtype (PyTorch), exactly — through f32, f16 and bf16 from an f64 leaf, and
/// from an f32 leaf through f64 — and it has the leaf's dtype.
#[test]
fn backward_through_real_casts() -> Result<()> {
    let vals = values(12, Dom::Any, 5);
    for mid in [DType::F32, DType::F16, DType::BF16] {
        let x = Tensor::from_vec(vals.clone(), [3, 4])?.requires_grad_(true)?;
        let y = x.to_dtype(mid)?.mul(3.0)?.to_dtype(DType::F64)?.sum()?;
        let g = stride_core::autograd::grad(&[&y], &[&x], None, Default::default())?;
        let g = g[0].clone().expect("x gets a gradient");
        assert_eq!(g.dtype(), DType::F64, "through {mid}");
        assert_eq!(g.to_vec::<f64>()?, vec![3.0; 12], "through {mid}");
    }
    // an f32 leaf through f64: d/dx Σ x² = 2x, computed in f64 and cast back to f32
    let v32: Vec<f32> = vals.iter().map(|&v| v as f32).collect();
    let x = Tensor::from_vec(v32.clone(), [3, 4])?.requires_grad_(true)?;
    let y = x.to_dtype(DType::F64)?.square()?.sum()?;
    let g = stride_core::autograd::grad(&[&y], &[&x], None, Default::default())?;
    let g = g[0].clone().expect("x gets a gradient");
    assert_eq!(g.dtype(), DType::F32);
    let want: Vec<f32> = v32.iter().map(|&v| (2.0 * v as f64) as f32).collect();
    assert_eq!(g.to_vec::<f32>()?, want);

    // the gradcheck of the real cast fails for a gradient 1 % off (a check that can fail):
    // forward value 2·f64(f32(x)), gradient 2.02
    let x = Tensor::from_vec(vals, [3, 4])?.requires_grad_(true)?;
    let wrong = |xs: &[Tensor]| {
        xs[0]
            .to_dtype(DType::F32)?
            .to_dtype(DType::F64)?
            .mul(2.0)?
            .add(&xs[0].sub(&xs[0].detach())?.mul(0.02)?)
    };
    let err = gradcheck(wrong, &[x.clone()], cast_opts())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Jacobian mismatch"), "{err}");
    let right = |xs: &[Tensor]| xs[0].to_dtype(DType::F32)?.to_dtype(DType::F64)?.mul(2.0);
    gradcheck(right, &[x], cast_opts())
}

/// The tightened default tolerance catches what the old one (`atol 10⁻⁵, rtol 10⁻³`) let
/// through — a gradient off by 10⁻⁵ relative — and gradgradcheck's random projections catch
/// a first derivative that is right in value but wrong in its own derivative.
#[test]
fn default_tolerances_catch_small_gradient_errors() -> Result<()> {
    let x = Tensor::from_vec(values(6, Dom::Pos, 2), [2, 3])?.requires_grad_(true)?;
    // value x·eˣ; recorded gradient (1 + x)·eˣ·(1 + 10⁻⁵), through a zero-valued term
    let off = |xs: &[Tensor]| {
        let (x, d) = (&xs[0], xs[0].detach());
        let slope = d.exp()?.mul(&d.add(1.0)?)?.mul(1e-5)?;
        x.mul(&x.exp()?)?.add(&x.sub(&d)?.mul(&slope)?)
    };
    let err = gradcheck(off, &[x.clone()], GradcheckOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Jacobian mismatch"), "{err}");
    let old = GradcheckOptions {
        eps: 1e-6,
        atol: 1e-5,
        rtol: 1e-3,
        rounding: 0.0,
    };
    assert!(
        gradcheck(off, &[x.clone()], old).is_ok(),
        "the old tolerance passed it"
    );
    gradcheck(
        |xs: &[Tensor]| xs[0].mul(&xs[0].exp()?),
        &[x.clone()],
        GradcheckOptions::default(),
    )?;

    // x³ with the right first derivative 3x² recorded as a constant (its own derivative,
    // 6x, is lost): gradcheck passes, gradgradcheck must not
    let detached = |xs: &[Tensor]| {
        let (x, d) = (&xs[0], xs[0].detach());
        d.mul(&d)?
            .mul(&d)?
            .add(&x.sub(&d)?.mul(&d.mul(&d)?.mul(3.0)?)?)
    };
    gradcheck(detached, &[x.clone()], GradcheckOptions::default())?;
    let err = gradgradcheck(detached, &[x.clone()], GradcheckOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("projection 0"), "{err}");
    gradgradcheck(
        |xs: &[Tensor]| xs[0].mul(&xs[0])?.mul(&xs[0]),
        &[x],
        GradcheckOptions::default(),
    )
}
