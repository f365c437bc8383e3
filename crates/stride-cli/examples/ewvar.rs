// scratch: elementwise variants timing (not committed)
use std::time::Instant;
use stride::prelude::*;
#[repr(C)]
struct Ts {
    s: i64,
    ns: i64,
}
extern "C" {
    fn clock_gettime(c: i32, t: *mut Ts) -> i32;
}
fn cpu() -> f64 {
    let mut t = Ts { s: 0, ns: 0 };
    unsafe { clock_gettime(2, &mut t) };
    t.s as f64 + t.ns as f64 * 1e-9
}
fn med(mut f: impl FnMut(), reps: usize) -> (f64, f64) {
    f();
    let mut v: Vec<(f64, f64)> = (0..reps)
        .map(|_| {
            let (t, c) = (Instant::now(), cpu());
            f();
            (t.elapsed().as_secs_f64(), cpu() - c)
        })
        .collect();
    let mut w: Vec<f64> = v.iter().map(|x| x.0).collect();
    w.sort_by(|a, b| a.total_cmp(b));
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    (w[0], v[reps / 2].1)
}
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(4096);
    let filt: String = std::env::args().nth(2).unwrap_or_default();
    let reps: usize = std::env::args()
        .nth(3)
        .map(|s| s.parse().unwrap())
        .unwrap_or(5);
    let x = Tensor::full([n, n], 1.0, DType::F32, &Device::Cpu).unwrap();
    let y = Tensor::full([n, n], 2.0, DType::F32, &Device::Cpu).unwrap();
    let o = Tensor::full([n, n], 2.0, DType::F32, &Device::Cpu).unwrap();
    let ot = Tensor::full([n, n], 2.0, DType::F32, &Device::Cpu)
        .unwrap()
        .t()
        .unwrap();
    let xt = x.t().unwrap();
    let wide = Tensor::full([n, 2 * n], 3.0, DType::F32, &Device::Cpu).unwrap();
    let st = wide.slice(1, 0, i64::MAX, 2).unwrap();
    let cases: Vec<(&str, Box<dyn Fn()>)> = vec![
        (
            "add new",
            Box::new(|| {
                std::hint::black_box(x.add(&y).unwrap());
            }),
        ),
        (
            "add_out",
            Box::new(|| {
                std::hint::black_box(x.add_out(&y, &o).unwrap());
            }),
        ),
        (
            "add_out a.t()+b into o.t()",
            Box::new(|| {
                std::hint::black_box(xt.add_out(&y, &ot).unwrap());
            }),
        ),
        (
            "add_out a.t()+b into o",
            Box::new(|| {
                std::hint::black_box(xt.add_out(&y, &o).unwrap());
            }),
        ),
        (
            "add_out step into o",
            Box::new(|| {
                std::hint::black_box(st.add_out(&y, &o).unwrap());
            }),
        ),
        (
            "copy t into o (contig out)",
            Box::new(|| {
                std::hint::black_box(xt.mul_out(1.0, &o).unwrap());
            }),
        ),
        (
            "contiguous()",
            Box::new(|| {
                std::hint::black_box(xt.contiguous().unwrap());
            }),
        ),
        (
            "mul_ o",
            Box::new(|| {
                std::hint::black_box(o.mul_(&y).unwrap());
            }),
        ),
        (
            "mul_ ot by y",
            Box::new(|| {
                std::hint::black_box(ot.mul_(&y).unwrap());
            }),
        ),
    ];
    let sel: Vec<&(&str, Box<dyn Fn()>)> = cases
        .iter()
        .filter(|c| c.0.contains(filt.as_str()))
        .collect();
    let mut best = vec![1e9f64; sel.len()];
    for _ in 0..reps {
        for (i, (_, f)) in sel.iter().enumerate() {
            let t = Instant::now();
            f();
            best[i] = best[i].min(t.elapsed().as_secs_f64());
        }
    }
    for (i, (name, _)) in sel.iter().enumerate() {
        println!("{name:32}: best {:7.2} ms", best[i] * 1e3);
    }
}
