//! Probe for tuning matrix products: interleaved best/median of matmul variants.
//!
//! `cargo run --release -p stride-core --example gemm_probe -- N ROUNDS PER VARIANTS`, with
//! VARIANTS a comma list of: mm, mm_out, tt, tt_out, tn (a.t()@b), nt (a@b.t()), tt_cb
//! (a.t()@b.t().contiguous(), the copy timed), tt_cab (both operands made contiguous first),
//! copyb (that copy alone), tt_colmajor (a.t()@b.t() into a column-major temp, then
//! contiguous), alloc, or `g[tt]:LHS_MT:RHS:THREADING` (gemm called
//! directly with those packing/threading thresholds).
use std::time::Instant;
use stride_core::{DType, Device, Tensor};

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2])
}

unsafe fn g(n: usize, d: *mut f32, a: *const f32, b: *const f32, tt: bool) {
    let (ars, acs, brs, bcs) = if tt {
        (1, n as isize, 1, n as isize)
    } else {
        (n as isize, 1, n as isize, 1)
    };
    gemm::gemm::<f32>(
        n,
        n,
        n,
        d,
        1,
        n as isize,
        false,
        a,
        acs,
        ars,
        b,
        bcs,
        brs,
        0.0,
        1.0,
        false,
        false,
        false,
        gemm::Parallelism::Rayon(rayon::current_num_threads()),
    );
}

fn minflt() -> i64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u.ru_minflt
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[1].parse().unwrap();
    let rounds: usize = args[2].parse().unwrap();
    let per: usize = args[3].parse().unwrap();
    let which: Vec<String> = args[4].split(',').map(|s| s.to_string()).collect();
    let cpu = Device::Cpu;
    let a = Tensor::full([n, n], 0.5, DType::F32, &cpu).unwrap();
    let b = Tensor::full([n, n], 0.25, DType::F32, &cpu).unwrap();
    let c = Tensor::full([n, n], 0.0, DType::F32, &cpu).unwrap();
    let (at, bt) = (a.t().unwrap(), b.t().unwrap());
    let av = vec![0.5f32; n * n];
    let bv = vec![0.25f32; n * n];
    let mut cv = vec![0.0f32; n * n];
    let flops = 2.0 * (n * n * n) as f64;
    let mut res: Vec<Vec<f64>> = vec![vec![]; which.len()];
    let mut flt: Vec<i64> = vec![0; which.len()];
    let pool = rayon::ThreadPoolBuilder::new().build().unwrap();
    let _ = pool;
    for r in 0..rounds + 1 {
        for (i, w) in which.iter().enumerate() {
            let mut f = || -> () {
                match w.as_str() {
                    "mm" => {
                        std::hint::black_box(a.matmul(&b).unwrap());
                    }
                    "mm_out" => {
                        a.matmul_out(&b, &c).unwrap();
                    }
                    "tt" => {
                        std::hint::black_box(at.matmul(&bt).unwrap());
                    }
                    "tn" => {
                        std::hint::black_box(at.matmul(&b).unwrap());
                    }
                    "nt" => {
                        std::hint::black_box(a.matmul(&bt).unwrap());
                    }
                    "tt_cb" => {
                        std::hint::black_box(at.matmul(&bt.contiguous().unwrap()).unwrap());
                    }
                    "tt_cab" => {
                        let (ac, bc) = (at.contiguous().unwrap(), bt.contiguous().unwrap());
                        std::hint::black_box(ac.matmul(&bc).unwrap());
                    }
                    "copyb" => {
                        std::hint::black_box(bt.contiguous().unwrap());
                    }
                    "tt_out" => {
                        at.matmul_out(&bt, &c).unwrap();
                    }
                    "tt_colmajor" => {
                        let tmp = Tensor::empty([n, n], DType::F32, &cpu).unwrap();
                        at.matmul_out(&bt, &tmp.t().unwrap()).unwrap();
                        std::hint::black_box(tmp.t().unwrap().contiguous().unwrap());
                    }
                    "alloc" => {
                        std::hint::black_box(Tensor::zeros([n, n], DType::F32, &cpu).unwrap());
                    }
                    s => {
                        // direct gemm on a rayon pool thread, with knobs: g[_tt]:lhsmt:rhs:thr
                        let p: Vec<&str> = s.split(':').collect();
                        let tt = p[0] == "gtt";
                        gemm::set_lhs_packing_threshold_multi_thread(
                            p.get(1).map_or(16, |x| x.parse().unwrap()),
                        );
                        gemm::set_rhs_packing_threshold(
                            p.get(2).map_or(128, |x| x.parse().unwrap()),
                        );
                        gemm::set_threading_threshold(
                            p.get(3).map_or(48 * 48 * 256, |x| x.parse().unwrap()),
                        );
                        let (pa, pb, pc) = (
                            av.as_ptr() as usize,
                            bv.as_ptr() as usize,
                            cv.as_mut_ptr() as usize,
                        );
                        rayon::scope(|sc| {
                            sc.spawn(|_| unsafe {
                                g(n, pc as *mut f32, pa as *const f32, pb as *const f32, tt)
                            })
                        });
                        gemm::set_lhs_packing_threshold_multi_thread(16);
                        gemm::set_rhs_packing_threshold(128);
                        gemm::set_threading_threshold(48 * 48 * 256);
                    }
                }
            };
            for _ in 0..per {
                let f0 = minflt();
                let t = Instant::now();
                f();
                let dt = t.elapsed().as_secs_f64();
                if r > 0 {
                    res[i].push(dt);
                    flt[i] += minflt() - f0;
                }
            }
        }
    }
    for (i, w) in which.iter().enumerate() {
        let (best, med) = stats(res[i].clone());
        println!("{n:5} {w:16} best {:9.1} us ({:5.0} GF/s)  median {:9.1} us ({:5.0} GF/s) minflt/run {}", best * 1e6, flops / best / 1e9, med * 1e6, flops / med / 1e9, flt[i] / res[i].len() as i64);
    }
}
