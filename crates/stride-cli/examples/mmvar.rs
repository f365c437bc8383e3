// scratch: matmul variants timing (not committed)
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
    if std::env::var("IN_POOL").is_ok() {
        rayon::scope(|s| s.spawn(|_| main2()));
    } else {
        main2()
    }
}
fn main2() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    for &n in &args {
        let a = Tensor::full([n, n], 0.5, DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::full([n, n], 0.25, DType::F32, &Device::Cpu).unwrap();
        let (at, bt) = (a.t().unwrap(), b.t().unwrap());
        let reps = if n <= 512 { 41 } else { 5 };
        let fl = 2.0 * (n * n * n) as f64 / 1e9;
        for (name, x, y) in [
            ("nn", &a, &b),
            ("tn", &at, &b),
            ("nt", &a, &bt),
            ("tt", &at, &bt),
        ] {
            let (t, c) = med(
                || {
                    std::hint::black_box(x.matmul(y).unwrap());
                },
                reps,
            );
            println!(
                "{n} {name}: best wall {:.3} ms {:.0} GF/s | median cpu {:.3} ms {:.0} GF/s/cpu",
                t * 1e3,
                fl / t,
                c * 1e3,
                fl / c
            );
        }
    }
}
