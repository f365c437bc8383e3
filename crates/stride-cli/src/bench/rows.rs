//! The rows of `stride bench cpu`: what each measures, its bytes and flops (for the floor) and
//! its target. Row ids match `scripts/bench_numpy.py`.

use super::measure::median_time;
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
    pub seconds: f64,
    /// Minimum bytes the op must move (logical elements read + written).
    pub bytes: f64,
    pub flops: f64,
    pub targets: Vec<Target>,
}

pub struct Sizes {
    pub matmul: Vec<usize>,
    pub add: usize,
    pub side: usize,
    pub reps: usize,
    pub warmup: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                matmul: vec![64, 128],
                add: 1 << 20,
                side: 512,
                reps: 3,
                warmup: 1,
            }
        } else {
            Sizes {
                matmul: vec![256, 1024, 2048],
                add: 1 << 24,
                side: 4096,
                reps: 7,
                warmup: 2,
            }
        }
    }
}

fn err(e: Error) -> String {
    e.to_string()
}

/// Times `op` after checking once that it succeeds (a failing op is an error, not a time).
fn time(
    s: &Sizes,
    reps: usize,
    op: impl Fn() -> Result<Tensor>,
) -> std::result::Result<f64, String> {
    op().map_err(err)?;
    Ok(median_time(reps, s.warmup, || {
        std::hint::black_box(op().ok());
    }))
}

pub fn run_all(s: &Sizes, mut progress: impl FnMut(&str)) -> std::result::Result<Vec<Row>, String> {
    let cpu = Device::Cpu;
    let f32 = DType::F32;
    let mut rows = vec![];
    let mut push = |rows: &mut Vec<Row>,
                    id: String,
                    name: String,
                    seconds: f64,
                    bytes: usize,
                    flops: f64,
                    targets: Vec<Target>| {
        progress(&name);
        rows.push(Row {
            id,
            name,
            seconds,
            bytes: bytes as f64,
            flops,
            targets,
        });
    };

    // matrix products: plain, and both operands transposed views (no copy)
    for &n in &s.matmul {
        let a = Tensor::full([n, n], 0.5, f32, &cpu).map_err(err)?;
        let b = Tensor::full([n, n], 0.25, f32, &cpu).map_err(err)?;
        let (at, bt) = (a.t().map_err(err)?, b.t().map_err(err)?);
        let reps = s.reps * if n <= 256 { 8 } else { 1 };
        let flops = 2.0 * (n * n * n) as f64;
        let plain = format!("matmul_f32_{n}");
        let t = time(s, reps, || a.matmul(&b))?;
        push(
            &mut rows,
            plain.clone(),
            format!("matmul f32 {n}x{n}x{n}"),
            t,
            3 * n * n * 4,
            flops,
            vec![Target::WithinOfNumpy(1.25)],
        );
        let t = time(s, reps, || at.matmul(&bt))?;
        push(
            &mut rows,
            format!("matmul_f32_{n}_tt"),
            format!("matmul f32 {n}, a.t() @ b.t()"),
            t,
            3 * n * n * 4,
            flops,
            vec![
                Target::WithinOfNumpy(1.25),
                Target::WithinOfRow(plain.clone(), 1.1),
            ],
        );
    }

    // a large elementwise add: new result, and into a preallocated output
    let n = s.add;
    let a = Tensor::full([n], 1.5, f32, &cpu).map_err(err)?;
    let b = Tensor::full([n], 2.5, f32, &cpu).map_err(err)?;
    let c = Tensor::full([n], 0.0, f32, &cpu).map_err(err)?;
    let t = time(s, s.reps, || a.add(&b))?;
    push(
        &mut rows,
        "add_f32".into(),
        format!("add f32 {}M (new result)", n >> 20),
        t,
        3 * n * 4,
        0.0,
        vec![Target::BandwidthOfNumpy(0.8)],
    );
    let t = time(s, s.reps, || a.add_out(&b, &c))?;
    push(
        &mut rows,
        "add_out_f32".into(),
        format!("add_out f32 {}M (preallocated)", n >> 20),
        t,
        3 * n * 4,
        0.0,
        vec![Target::BandwidthOfNumpy(0.8)],
    );
    drop((a, b, c));

    // transposing copy
    let side = s.side;
    let e = side * side;
    let x = Tensor::full([side, side], 1.0, f32, &cpu).map_err(err)?;
    let xt = x.t().map_err(err)?;
    let t = time(s, s.reps, || xt.contiguous())?;
    push(
        &mut rows,
        "contiguous_t".into(),
        format!("contiguous() of {side}x{side} f32 .t()"),
        t,
        2 * e * 4,
        0.0,
        vec![Target::FasterThanNumpy(4.0)],
    );

    // memory-bound ops on non-contiguous operands, beside their contiguous baselines
    let y = Tensor::full([side, side], 2.0, f32, &cpu).map_err(err)?;
    let yt = y.t().map_err(err)?;
    let wide = Tensor::full([side, 2 * side], 3.0, f32, &cpu).map_err(err)?;
    let stepped = wide.slice(1, 0, i64::MAX, 2).map_err(err)?;
    let bin = 3 * e * 4;
    let un = 2 * e * 4;
    let t = time(s, s.reps, || x.add(&y))?;
    push(
        &mut rows,
        "add_2d".into(),
        format!("add {side}x{side} contiguous"),
        t,
        bin,
        0.0,
        vec![Target::BandwidthOfNumpy(0.8)],
    );
    let t = time(s, s.reps, || xt.add(&yt))?;
    push(
        &mut rows,
        "add_both_t".into(),
        "add, both operands .t()".into(),
        t,
        bin,
        0.0,
        vec![Target::WithinOfRow("add_2d".into(), 2.0)],
    );
    let t = time(s, s.reps, || xt.add(&y))?;
    push(
        &mut rows,
        "add_one_t".into(),
        "add, a.t() + b (mixed order)".into(),
        t,
        bin,
        0.0,
        vec![Target::WithinOfRow("add_2d".into(), 2.0)],
    );
    let t = time(s, s.reps, || stepped.add(&y))?;
    push(
        &mut rows,
        "add_step".into(),
        "add, a[:, ::2] + b".into(),
        t,
        bin,
        0.0,
        vec![Target::WithinOfRow("add_2d".into(), 2.0)],
    );
    let t = time(s, s.reps, || x.neg())?;
    push(
        &mut rows,
        "neg_2d".into(),
        format!("neg {side}x{side} contiguous"),
        t,
        un,
        0.0,
        vec![],
    );
    let t = time(s, s.reps, || xt.neg())?;
    push(
        &mut rows,
        "neg_t".into(),
        "neg of .t()".into(),
        t,
        un,
        0.0,
        vec![Target::WithinOfRow("neg_2d".into(), 2.0)],
    );
    let w = Tensor::full([side, side], 1.0, f32, &cpu).map_err(err)?;
    let wt = w.t().map_err(err)?;
    let g = Tensor::full([side, side], 1.0, f32, &cpu).map_err(err)?;
    let t = time(s, s.reps, || w.mul_(&g))?;
    push(
        &mut rows,
        "mul_2d".into(),
        format!("mul_ {side}x{side} contiguous"),
        t,
        bin,
        0.0,
        vec![],
    );
    let t = time(s, s.reps, || wt.mul_(&g))?;
    push(
        &mut rows,
        "mul_t".into(),
        "mul_ into w.t(), other row-major".into(),
        t,
        bin,
        0.0,
        vec![Target::WithinOfRow("mul_2d".into(), 2.0)],
    );
    Ok(rows)
}
