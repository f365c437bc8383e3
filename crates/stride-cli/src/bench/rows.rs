//! The rows of `stride bench cpu`: what each measures, its bytes and flops (for the floor) and
//! its target. Row ids match `scripts/bench_numpy.py`.

use super::measure::{interleaved, Sampling, Stats};
use super::peer::Peer;
use stride::prelude::*;

/// What a row is judged against.
#[derive(Debug, Clone)]
pub enum Target {
    /// stride's time at most `f` × NumPy's time.
    WithinOfNumpy(f64),
    /// stride's bytes/s at least `f` × NumPy's bytes/s.
    BandwidthOfNumpy(f64),
    /// stride at least `f` × faster than NumPy.
    FasterThanNumpy(f64),
    /// stride's time at most `f` × the time of stride's row `id` (its contiguous baseline).
    WithinOfRow(String, f64),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::WithinOfNumpy(f) => format!("<= {f}x NumPy time"),
            Target::BandwidthOfNumpy(f) => format!(">= {:.0}% NumPy GB/s", f * 100.0),
            Target::FasterThanNumpy(f) => format!(">= {f}x faster than NumPy"),
            Target::WithinOfRow(id, f) => format!("<= {f}x {id}"),
        }
    }
}

pub struct Row {
    pub id: String,
    pub name: String,
    pub stride: Stats,
    /// The peer's times for the same row: `None` without a peer, `Err` when it failed.
    pub numpy: Option<std::result::Result<Stats, String>>,
    /// Minimum bytes the op must move (logical elements read + written).
    pub bytes: f64,
    pub flops: f64,
    pub targets: Vec<Target>,
}

pub struct Sizes {
    pub matmul: Vec<usize>,
    pub add: usize,
    pub side: usize,
    pub sampling: Sampling,
}

impl Sizes {
    pub fn new(quick: bool, budget: Option<f64>) -> Sizes {
        let gap = std::time::Duration::from_millis(if quick { 0 } else { 100 });
        if quick {
            Sizes {
                matmul: vec![64, 128],
                add: 1 << 20,
                side: 512,
                sampling: Sampling {
                    budget: budget.unwrap_or(0.005),
                    min_samples: 3,
                    max_samples: 20,
                    min_rounds: 2,
                    warmup: 1,
                    gap,
                },
            }
        } else {
            Sizes {
                matmul: vec![256, 1024, 2048],
                add: 1 << 24,
                side: 4096,
                sampling: Sampling {
                    budget: budget.unwrap_or(1.0),
                    min_samples: 20,
                    max_samples: 2000,
                    min_rounds: 10,
                    warmup: 3,
                    gap,
                },
            }
        }
    }
}

fn err(e: Error) -> String {
    e.to_string()
}

/// Runs the rows, each timed interleaved with the peer's same row (see
/// [`super::measure::interleaved`]).
struct Runner<'a> {
    sampling: Sampling,
    peer: Option<&'a mut Peer>,
    only: &'a [String],
    progress: &'a mut dyn FnMut(&str),
    rows: Vec<Row>,
}

impl Runner<'_> {
    fn wanted(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| id.contains(o.as_str()))
    }

    /// Times `op` (after checking once that it succeeds: a failing op is an error, not a
    /// time) beside the peer's row `id`, and records the row.
    fn row(
        &mut self,
        id: &str,
        name: String,
        bytes: usize,
        flops: f64,
        targets: Vec<Target>,
        op: impl Fn() -> Result<Tensor>,
    ) -> std::result::Result<(), String> {
        if !self.wanted(id) {
            return Ok(());
        }
        (self.progress)(&name);
        op().map_err(err)?;
        let mut ask = self
            .peer
            .as_deref_mut()
            .map(|p| move |reps: usize| p.time(id, reps));
        let (stride, numpy) = interleaved(
            &self.sampling,
            || {
                std::hint::black_box(op().ok());
            },
            ask.as_mut()
                .map(|f| f as &mut dyn FnMut(usize) -> std::result::Result<Vec<f64>, String>),
        );
        if let Some(p) = self.peer.as_deref_mut() {
            p.drop_row(id);
        }
        self.rows.push(Row {
            id: id.to_string(),
            name,
            stride,
            numpy,
            bytes: bytes as f64,
            flops,
            targets,
        });
        Ok(())
    }
}

pub fn run_all(
    s: &Sizes,
    peer: Option<&mut Peer>,
    only: &[String],
    progress: &mut dyn FnMut(&str),
) -> std::result::Result<Vec<Row>, String> {
    let cpu = Device::Cpu;
    let f32 = DType::F32;
    let mut r = Runner {
        sampling: s.sampling,
        peer,
        only,
        progress,
        rows: vec![],
    };

    // matrix products: plain, and both operands transposed views (no copy)
    for &n in &s.matmul {
        let a = Tensor::full([n, n], 0.5, f32, &cpu).map_err(err)?;
        let b = Tensor::full([n, n], 0.25, f32, &cpu).map_err(err)?;
        let (at, bt) = (a.t().map_err(err)?, b.t().map_err(err)?);
        let flops = 2.0 * (n * n * n) as f64;
        let plain = format!("matmul_f32_{n}");
        let bytes = 3 * n * n * 4;
        r.row(
            &plain,
            format!("matmul f32 {n}x{n}x{n}"),
            bytes,
            flops,
            vec![Target::WithinOfNumpy(1.25)],
            || a.matmul(&b),
        )?;
        r.row(
            &format!("matmul_f32_{n}_tt"),
            format!("matmul f32 {n}, a.t() @ b.t()"),
            bytes,
            flops,
            vec![
                Target::WithinOfNumpy(1.25),
                Target::WithinOfRow(plain.clone(), 1.1),
            ],
            || at.matmul(&bt),
        )?;
        // the same product into a preallocated output: the difference to the plain row is
        // the cost of a fresh result (allocation and first touch of its pages)
        let c = Tensor::full([n, n], 0.0, f32, &cpu).map_err(err)?;
        r.row(
            &format!("matmul_f32_{n}_out"),
            format!("matmul_out f32 {n} (preallocated)"),
            bytes,
            flops,
            vec![Target::WithinOfNumpy(1.25)],
            || a.matmul_out(&b, &c),
        )?;
    }

    // a large elementwise add: new result, and into a preallocated output
    let n = s.add;
    let a = Tensor::full([n], 1.5, f32, &cpu).map_err(err)?;
    let b = Tensor::full([n], 2.5, f32, &cpu).map_err(err)?;
    let c = Tensor::full([n], 0.0, f32, &cpu).map_err(err)?;
    r.row(
        "add_f32",
        format!("add f32 {}M (new result)", n >> 20),
        3 * n * 4,
        0.0,
        vec![Target::BandwidthOfNumpy(0.8)],
        || a.add(&b),
    )?;
    r.row(
        "add_out_f32",
        format!("add_out f32 {}M (preallocated)", n >> 20),
        3 * n * 4,
        0.0,
        vec![Target::BandwidthOfNumpy(0.8)],
        || a.add_out(&b, &c),
    )?;
    drop((a, b, c));

    // transposing copy
    let side = s.side;
    let e = side * side;
    let x = Tensor::full([side, side], 1.0, f32, &cpu).map_err(err)?;
    let xt = x.t().map_err(err)?;
    r.row(
        "contiguous_t",
        format!("contiguous() of {side}x{side} f32 .t()"),
        2 * e * 4,
        0.0,
        vec![Target::FasterThanNumpy(4.0)],
        || xt.contiguous(),
    )?;

    // memory-bound ops on non-contiguous operands, beside their contiguous baselines
    let y = Tensor::full([side, side], 2.0, f32, &cpu).map_err(err)?;
    let yt = y.t().map_err(err)?;
    let wide = Tensor::full([side, 2 * side], 3.0, f32, &cpu).map_err(err)?;
    let stepped = wide.slice(1, 0, i64::MAX, 2).map_err(err)?;
    let bin = 3 * e * 4;
    let un = 2 * e * 4;
    let vs = |id: &str| vec![Target::WithinOfRow(id.into(), 2.0)];
    r.row(
        "add_2d",
        format!("add {side}x{side} contiguous"),
        bin,
        0.0,
        vec![Target::BandwidthOfNumpy(0.8)],
        || x.add(&y),
    )?;
    r.row(
        "add_both_t",
        "add, both operands .t()".into(),
        bin,
        0.0,
        vs("add_2d"),
        || xt.add(&yt),
    )?;
    r.row(
        "add_one_t",
        "add, a.t() + b (mixed order)".into(),
        bin,
        0.0,
        vs("add_2d"),
        || xt.add(&y),
    )?;
    r.row(
        "add_step",
        "add, a[:, ::2] + b".into(),
        bin,
        0.0,
        vs("add_2d"),
        || stepped.add(&y),
    )?;
    r.row(
        "neg_2d",
        format!("neg {side}x{side} contiguous"),
        un,
        0.0,
        vec![],
        || x.neg(),
    )?;
    r.row("neg_t", "neg of .t()".into(), un, 0.0, vs("neg_2d"), || {
        xt.neg()
    })?;
    // in place, multiplying by ones so the values stay put run after run
    let w = Tensor::full([side, side], 1.0, f32, &cpu).map_err(err)?;
    let wt = w.t().map_err(err)?;
    r.row(
        "mul_2d",
        format!("mul_ {side}x{side} contiguous"),
        bin,
        0.0,
        vec![],
        || w.mul_(&x),
    )?;
    r.row(
        "mul_t",
        "mul_ into w.t(), other row-major".into(),
        bin,
        0.0,
        vs("mul_2d"),
        || wt.mul_(&x),
    )?;
    // a ternary op: new result over contiguous and transposed operands, and in place
    let ter = 4 * e * 4;
    r.row(
        "addcmul_2d",
        format!("addcmul {side}x{side} contiguous"),
        ter,
        0.0,
        vec![],
        || x.addcmul(&y, &w, 0.5),
    )?;
    r.row(
        "addcmul_t",
        "addcmul, all operands .t()".into(),
        ter,
        0.0,
        vs("addcmul_2d"),
        || xt.addcmul(&yt, &wt, 0.5),
    )?;
    // adding 0·x·y so the values stay put run after run
    r.row(
        "addcmul_inplace",
        format!("addcmul_ {side}x{side} contiguous"),
        ter,
        0.0,
        vec![],
        || w.addcmul_(&x, &y, 0.0),
    )?;
    Ok(r.rows)
}
