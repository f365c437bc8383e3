//! The mixture-of-experts feed-forward of a [`super::Gpt`] block ([`super::MoeConfig`]):
//! a softmax router, top-k choices renormalised, and every expert's SwiGLU in two grouped
//! matrix products over the tokens sorted by expert — all on the device, with no host wait
//! and no per-expert loop.
//!
//! ```text
//! p = softmax(router(x))                 (N, E) in f32
//! w, e = topk(p, K);  w /= Σ w           each token's K experts and their weights
//! order = argsort(e, stable)             the N·K (token, choice) pairs sorted by expert
//! offs = cumsum(counts(e))               each expert's end in that order
//! h = swiglu(x[token(order)] ·g w_in)    ·g: Tensor::grouped_matmul over offs
//! y = Σ_choices w · (h ·g w_out)         added back to each token (index_add, in f32)
//! ```

use super::config::MoeConfig;
use std::sync::Mutex;
use stride_core::autograd::no_grad;
use stride_core::distributed::{ProcessGroup, ReduceOp};
use stride_core::{DType, Generator, Result, Tensor};
use stride_nn::{init, Factory, Linear, Mode, Module, Parameter, Visitor};

/// The router's two losses of one call, as 0-d tensors in f32 (f64 for an f64 model; see
/// [`MoeConfig`]).
pub(crate) struct RouterLosses {
    pub aux: Tensor,
    pub z: Tensor,
}

/// One block's mixture of experts.
pub(crate) struct MoeLayer {
    cfg: MoeConfig,
    router: Linear,
    /// `(E, dim, 2·F)`: each expert's gate projection, then its up projection.
    w_in: Parameter,
    /// `(E, F, dim)`.
    w_out: Parameter,
    /// Tokens routed to each expert by training-mode calls since the last
    /// [`MoeLayer::take_load`] (i64, on the device; choices dropped by the capacity are not
    /// counted).
    load: Tensor,
    /// Data-parallel training: the ranks whose routing counts are summed, so the balance
    /// loss sees the whole global batch (as one process would) and the load counts every
    /// rank's tokens.
    group: Mutex<Option<ProcessGroup>>,
    mode: Mode,
}

impl MoeLayer {
    /// Router and experts initialised `N(0, std)`, the expert output projections
    /// `N(0, resid_std)` (as the dense MLP's `down`).
    pub fn new(
        cfg: &MoeConfig,
        dim: usize,
        std: f64,
        resid_std: f64,
        f: &Factory,
        gen: &Generator,
    ) -> Result<MoeLayer> {
        let (e, h) = (cfg.experts, cfg.expert_ffn_dim);
        let router = Linear::new_with(dim, e, false, f)?;
        init::normal_(&router.weight.tensor(), 0.0, std, Some(gen))?;
        let w_in = Tensor::zeros([e, dim, 2 * h], f.dtype, &f.device)?;
        init::normal_(&w_in, 0.0, std, Some(gen))?;
        let w_out = Tensor::zeros([e, h, dim], f.dtype, &f.device)?;
        init::normal_(&w_out, 0.0, resid_std, Some(gen))?;
        Ok(MoeLayer {
            cfg: cfg.clone(),
            router,
            w_in: Parameter::new(w_in)?,
            w_out: Parameter::new(w_out)?,
            load: Tensor::zeros([e], DType::I64, &f.device)?,
            group: Mutex::new(None),
            mode: Mode::default(),
        })
    }

    /// The layer's output for `x (…, dim)` and the router's losses.
    pub fn run(&self, x: &Tensor) -> Result<(Tensor, RouterLosses)> {
        let c = &self.cfg;
        let (ne, k) = (c.experts as i64, c.top_k as i64);
        let shape = x.shape().to_vec();
        let dim = *shape.last().unwrap_or(&0) as i64;
        let x2 = x.reshape(&[-1, dim])?;
        let n = x2.shape()[0] as i64;
        let dev = x.device();

        // the router's softmax in f32 at least (a bf16 logit has 3 significant digits)
        let logits = self.router.forward(&x2)?;
        let logits = match logits.dtype() {
            DType::F64 => logits,
            _ => logits.to_dtype(DType::F32)?,
        };
        let probs = logits.softmax(-1)?;
        let (top_p, top_e) = probs.topk(c.top_k, -1, true, true)?;
        let weights = top_p.div(&top_p.sum_dims(&[-1], true)?)?;

        // the (token, choice) pairs sorted by expert, and each expert's share of them
        let (order, token, offs, counts, keep, ranks) = {
            let _ng = no_grad();
            let experts = top_e.reshape(&[-1])?;
            let order = experts.argsort(0, false, true)?;
            let token = order.floor_divide(k)?;
            let ids = Tensor::arange(0i64, ne, &dev)?;
            let counts = experts
                .unsqueeze(1)?
                .eq(&ids.unsqueeze(0)?)?
                .sum_dims(&[0], false)?;
            let offs = counts.cumsum(0)?;
            let (keep, mut routed) = match c.capacity_factor {
                None => (None, counts.clone()),
                Some(cf) => {
                    let cap = (cf * (n * k) as f64 / ne as f64).ceil() as i64;
                    // a pair's rank within its expert: its sorted position past the expert's start
                    let starts = offs.sub(&counts)?;
                    let sorted = experts.index_select(0, &order)?;
                    let rank = Tensor::arange(0i64, n * k, &dev)?
                        .sub(&starts.index_select(0, &sorted)?)?;
                    // each expert keeps its first `cap` pairs
                    (Some(rank.lt(cap)?), counts.clamp_max(cap)?)
                }
            };
            // training with data parallelism: the counts over every rank's tokens (one
            // collective, queued on the device); the routing itself stays local, and so does
            // everything in eval mode (a rank may evaluate or sample alone)
            let group = match self.is_training() {
                true => self.group.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                false => None,
            };
            let global = match &group {
                Some(g) if g.world_size() > 1 => {
                    let both = Tensor::stack(&[&counts, &routed], 0)?;
                    g.all_reduce_(&both, ReduceOp::Sum)?.wait()?;
                    routed = both.select(0, 1)?;
                    Some(both.select(0, 0)?)
                }
                _ => None,
            };
            if self.is_training() {
                self.load.add_(&routed)?;
            }
            let ranks = group.map_or(1, |g| g.world_size()) as i64;
            (
                order,
                token,
                offs,
                global.unwrap_or_else(|| counts.clone()),
                keep,
                ranks,
            )
        };

        // every expert's SwiGLU over its tokens, in two grouped products
        let xs = x2.index_select(0, &token)?;
        let gu = xs.grouped_matmul(&self.w_in.tensor(), &offs)?;
        let h = c.expert_ffn_dim as i64;
        let act = gu
            .narrow(1, 0, h as usize)?
            .swiglu(&gu.narrow(1, h, h as usize)?)?;
        let ys = act.grouped_matmul(&self.w_out.tensor(), &offs)?;
        let mut w = weights.reshape(&[-1])?.index_select(0, &order)?;
        if let Some(keep) = &keep {
            w = w.mul(&keep.to_dtype(w.dtype())?)?;
        }
        // each token's K outputs weighted and summed in the router's dtype (f32 at least):
        // a half-precision sum would round at every addition
        let ys = ys.to_dtype(w.dtype())?.mul(&w.unsqueeze(1)?)?;
        let out = Tensor::zeros([n as usize, dim as usize], ys.dtype(), &dev)?
            .index_add(0, &token, &ys, 1.0)?;

        // Switch's balance loss and ST-MoE's z-loss, in f32
        let share = counts
            .to_dtype(logits.dtype())?
            .div((ranks * n * k) as f64)?;
        let aux = share
            .mul(&probs.mean_dims(&[0], false)?)?
            .sum()?
            .mul(ne as f64)?;
        let z = logits.logsumexp(&[-1], false)?.square()?.mean()?;
        Ok((
            out.reshape(&shape.iter().map(|&s| s as i64).collect::<Vec<_>>())?,
            RouterLosses { aux, z },
        ))
    }

    /// Sums the routing counts over `group`'s ranks from now on (`None`: this process's own).
    pub fn set_group(&self, group: Option<ProcessGroup>) {
        *self.group.lock().unwrap_or_else(|e| e.into_inner()) = group;
    }

    /// Tokens routed to each expert since the last call (a host read), and restarts the
    /// count.
    pub fn take_load(&self) -> Result<Vec<i64>> {
        let v = self.load.to_vec::<i64>()?;
        self.load.fill_(0i64)?;
        Ok(v)
    }
}

impl Module for MoeLayer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.run(x)?.0)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("router", &self.router);
        v.parameter("w_in", &self.w_in);
        v.parameter("w_out", &self.w_out);
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stride_core::Device;

    /// The layer token by token in f64: each token's top-k experts by probability (lower
    /// index first on ties), weights renormalised, each expert's SwiGLU; with a capacity,
    /// the pairs past it (in token order, per expert) dropped.
    fn naive(layer: &MoeLayer, x: &Tensor) -> Vec<f64> {
        let c = &layer.cfg;
        let (e, k, h) = (c.experts, c.top_k, c.expert_ffn_dim);
        let dim = x.shape()[1];
        let xs = x.to_f64_vec().unwrap();
        let r = layer.router.weight.tensor().to_f64_vec().unwrap(); // (E, dim)
        let wi = layer.w_in.tensor().to_f64_vec().unwrap(); // (E, dim, 2h)
        let wo = layer.w_out.tensor().to_f64_vec().unwrap(); // (E, h, dim)
        let n = x.shape()[0];
        let cap = c
            .capacity_factor
            .map(|f| (f * (n * k) as f64 / e as f64).ceil() as usize);
        let mut taken = vec![0usize; e];
        // choices in (token, rank) order; the stable sort by expert keeps that order per expert
        let mut out = vec![0.0; n * dim];
        let mut picks = vec![];
        for t in 0..n {
            let row = &xs[t * dim..(t + 1) * dim];
            let logits: Vec<f64> = (0..e)
                .map(|j| (0..dim).map(|d| row[d] * r[j * dim + d]).sum())
                .collect();
            let m = logits.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
            let p: Vec<f64> = logits.iter().map(|l| (l - m).exp() / z).collect();
            let mut idx: Vec<usize> = (0..e).collect();
            idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
            let top = &idx[..k];
            let s: f64 = top.iter().map(|&j| p[j]).sum();
            for &j in top {
                picks.push((t, j, p[j] / s));
            }
        }
        // capacity: per expert, the first `cap` pairs in token order
        let mut sorted = picks.clone();
        sorted.sort_by_key(|&(t, j, _)| (j, t));
        let mut kept = std::collections::HashSet::new();
        for &(t, j, _) in &sorted {
            if cap.is_none_or(|c| taken[j] < c) {
                taken[j] += 1;
                kept.insert((t, j));
            }
        }
        for &(t, j, w) in &picks {
            if !kept.contains(&(t, j)) {
                continue;
            }
            let row = &xs[t * dim..(t + 1) * dim];
            let proj = |col: usize| -> f64 {
                (0..dim)
                    .map(|d| row[d] * wi[(j * dim + d) * 2 * h + col])
                    .sum()
            };
            let act: Vec<f64> = (0..h)
                .map(|f| {
                    let (g, u) = (proj(f), proj(h + f));
                    g / (1.0 + (-g).exp()) * u
                })
                .collect();
            for d in 0..dim {
                let y: f64 = (0..h).map(|f| act[f] * wo[(j * h + f) * dim + d]).sum();
                out[t * dim + d] += w * y;
            }
        }
        out
    }

    fn layer(cfg: MoeConfig) -> MoeLayer {
        let f = Factory {
            dtype: DType::F64,
            device: Device::Cpu,
            generator: None,
        };
        let gen = Generator::new(7);
        // wide initialisations: routing far from ties, outputs far from zero
        MoeLayer::new(&cfg, 6, 0.5, 0.5, &f, &gen).unwrap()
    }

    #[test]
    fn matches_a_token_by_token_reference() {
        let x = Tensor::randn(
            [2, 9, 6],
            DType::F64,
            &Device::Cpu,
            Some(&Generator::new(3)),
        )
        .unwrap();
        for cap in [None, Some(0.5), Some(1.0)] {
            let mut cfg = MoeConfig::new(4, 2, 5);
            cfg.capacity_factor = cap;
            let l = layer(cfg);
            let (y, losses) = l.run(&x).unwrap();
            assert_eq!(y.shape(), &[2, 9, 6]);
            let want = naive(&l, &x.reshape(&[18, 6]).unwrap());
            for (a, b) in y.to_f64_vec().unwrap().iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                    "capacity {cap:?}: {a} vs {b}"
                );
            }
            // a perfectly even load would give 1; z-loss is a mean of squares
            let aux = losses.aux.item::<f64>().unwrap();
            assert!(aux > 0.0 && aux.is_finite(), "{aux}");
            assert!(losses.z.item::<f64>().unwrap() >= 0.0);
        }
        // a too-small capacity drops choices: the layer differs from the dropless one
        let mut cfg = MoeConfig::new(4, 2, 5);
        cfg.capacity_factor = Some(0.25);
        let dropped = layer(cfg).run(&x).unwrap().0.to_f64_vec().unwrap();
        let full = layer(MoeConfig::new(4, 2, 5))
            .run(&x)
            .unwrap()
            .0
            .to_f64_vec()
            .unwrap();
        assert_ne!(dropped, full);
    }

    #[test]
    fn load_counts_training_calls_only() {
        let l = layer(MoeConfig::new(4, 2, 5));
        let x = Tensor::randn([5, 6], DType::F64, &Device::Cpu, Some(&Generator::new(4))).unwrap();
        l.train(false);
        l.run(&x).unwrap();
        assert_eq!(l.take_load().unwrap(), vec![0; 4]);
        l.train(true);
        l.run(&x).unwrap();
        l.run(&x).unwrap();
        let load = l.take_load().unwrap();
        assert_eq!(load.iter().sum::<i64>(), 2 * 5 * 2, "{load:?}");
        assert_eq!(
            l.take_load().unwrap(),
            vec![0; 4],
            "read restarts the count"
        );
        // with a capacity, dropped choices are not counted
        let mut cfg = MoeConfig::new(4, 2, 5);
        cfg.capacity_factor = Some(0.25);
        let l = layer(cfg);
        l.train(true);
        l.run(&x).unwrap();
        let load = l.take_load().unwrap();
        assert!(
            load.iter().all(|&n| n <= 2),
            "capacity ⌈0.25·10/4⌉ = 1... {load:?}"
        );
    }
}
