//! Impossible sizes are errors, never panics or aborts (issue #22, item 2).
//!
//! Every case runs in a child process (this test binary re-executed with
//! `STRIDE_IMPOSSIBLE_CASE` naming the case) under a memory limit (`RLIMIT_AS` on the CPU), so a
//! panic, an abort ("memory allocation of N bytes failed") or a kill fails this test with the
//! case's name instead of taking the test run down. Each case must return `Err` of the right
//! kind — `Error::OutOfMemory` when the result (or a temporary) can be described but not
//! allocated, an argument error when the arguments themselves are impossible (a shape whose
//! element count overflows `usize`, a step of 0, a negative size) — and leave its operands
//! unchanged. A random part throws sizes drawn from huge ranges at the same ops, bounded in
//! time (`STRIDE_IMPOSSIBLE_SEED` picks its seed; the failing case is printed).
//!
//! On a machine with a GPU the cases run on `cuda:0` as well (there the child limits
//! `RLIMIT_DATA`, the host heap, since the driver reserves far more address space than any
//! `RLIMIT_AS` that still catches host-side staging would allow).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stride_core::{cuda, DType, Device, Error, PadMode, Result, Tensor};

const CASE_ENV: &str = "STRIDE_IMPOSSIBLE_CASE";
const DEVICE_ENV: &str = "STRIDE_IMPOSSIBLE_DEVICE";
const SEED_ENV: &str = "STRIDE_IMPOSSIBLE_SEED";
/// Head room above the child's address space at start-up: enough for every case that should
/// succeed, far below every case that must fail.
const HEADROOM: u64 = 1536 << 20;

const P31: usize = 1 << 31;
const P40: usize = 1 << 40;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// `Error::OutOfMemory`: the size can be described but not allocated.
    Oom,
    /// An argument error (`Invalid`, `ShapeMismatch`, `IndexOutOfRange`, ...).
    Arg,
}

/// Operands a case made, with their values and versions, checked unchanged after the op.
struct Ctx {
    dev: Device,
    watched: Vec<(Tensor, Vec<f64>, u64)>,
}

impl Ctx {
    /// A small f32 operand `[0, 1, ..., n-1]` on the case's device, watched.
    fn small(&mut self, n: usize) -> Tensor {
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        self.watch(
            Tensor::from_vec(v, [n])
                .unwrap()
                .to_device(&self.dev)
                .unwrap(),
        )
    }
    fn watch(&mut self, t: Tensor) -> Tensor {
        let vals = t.to_f64_vec().unwrap();
        self.watched.push((t.clone(), vals, t.version()));
        t
    }
    /// One zero element of `dtype` expanded (a view, nothing allocated) to `shape`.
    /// (Sizes past `i64::MAX` are refused by `expand`: an argument error.)
    fn huge(&mut self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let one = Tensor::zeros([1], dtype, &self.dev).unwrap();
        let one = self.watch(one);
        let sizes: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
        let r = one.reshape(&vec![1; shape.len()]).unwrap();
        r.expand(&sizes)
    }
}

type Case = (&'static str, Want, fn(&mut Ctx) -> Result<()>);

fn ok<T>(r: Result<T>) -> Result<()> {
    r.map(|_| ())
}

fn cases() -> Vec<Case> {
    vec![
        // ----- creation -----
        ("zeros_2p62_f32", Want::Oom, |c| {
            ok(Tensor::zeros([1usize << 62], DType::F32, &c.dev))
        }),
        ("ones_2p31x2p31_f64", Want::Oom, |c| {
            ok(Tensor::ones([P31, P31], DType::F64, &c.dev))
        }),
        ("zeros_2p40_u8", Want::Oom, |c| {
            ok(Tensor::zeros([P40], DType::U8, &c.dev))
        }),
        ("zeros_usize_max_u8", Want::Arg, |c| {
            ok(Tensor::zeros([usize::MAX], DType::U8, &c.dev))
        }),
        ("zeros_numel_overflow", Want::Arg, |c| {
            ok(Tensor::zeros([P40, P40], DType::F32, &c.dev))
        }),
        ("full_2p40", Want::Oom, |c| {
            ok(Tensor::full([P40], 3.0, DType::F32, &c.dev))
        }),
        ("empty_2p62", Want::Oom, |c| {
            ok(Tensor::empty([1usize << 62], DType::I64, &c.dev))
        }),
        ("arange_0_2p61", Want::Oom, |c| {
            ok(Tensor::arange(0i64, 1i64 << 61, &c.dev))
        }),
        ("arange_0_i64max", Want::Oom, |c| {
            ok(Tensor::arange(0i64, i64::MAX, &c.dev))
        }),
        ("arange_i64min_i64max", Want::Oom, |c| {
            ok(Tensor::arange(i64::MIN, i64::MAX, &c.dev))
        }),
        ("arange_f_1e30", Want::Arg, |c| {
            ok(Tensor::arange(0.0, 1e30, &c.dev))
        }),
        ("arange_step0", Want::Arg, |c| {
            ok(Tensor::arange_step(0i64, 10i64, 0i64, &c.dev))
        }),
        ("arange_f_2p40", Want::Oom, |c| {
            ok(Tensor::arange(0.0, P40 as f64, &c.dev))
        }),
        ("linspace_2p40", Want::Oom, |c| {
            ok(Tensor::linspace(0.0, 1.0, P40, DType::F32, &c.dev))
        }),
        ("linspace_usize_max", Want::Oom, |c| {
            ok(Tensor::linspace(0.0, 1.0, usize::MAX, DType::F64, &c.dev))
        }),
        ("eye_2p20", Want::Oom, |c| {
            ok(Tensor::eye(1 << 20, 1 << 20, DType::F32, &c.dev))
        }),
        ("eye_numel_overflow", Want::Arg, |c| {
            ok(Tensor::eye(P40, P40, DType::F32, &c.dev))
        }),
        ("randn_2p40", Want::Oom, |c| {
            ok(Tensor::randn([P40], DType::F32, &c.dev, None))
        }),
        ("rand_2p62_f64", Want::Oom, |c| {
            ok(Tensor::rand([1usize << 62], DType::F64, &c.dev, None))
        }),
        ("randint_2p40", Want::Oom, |c| {
            ok(Tensor::randint(0, 10, [P40], DType::I64, &c.dev, None))
        }),
        ("randn_numel_overflow", Want::Arg, |c| {
            ok(Tensor::randn([P40, P40], DType::F32, &c.dev, None))
        }),
        ("randperm_2p40", Want::Oom, |c| {
            ok(Tensor::randperm(P40, DType::I64, &c.dev, None))
        }),
        ("randperm_usize_max", Want::Arg, |c| {
            ok(Tensor::randperm(usize::MAX, DType::I64, &c.dev, None))
        }),
        // ----- views, then a copy -----
        ("expand_2p40_contiguous", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40])?.contiguous())
        }),
        ("expand_numel_overflow", Want::Arg, |c| {
            let x = c.small(1);
            ok(x.expand(&[P40 as i64, P40 as i64]))
        }),
        ("expand_2p40_clone", Want::Oom, |c| {
            ok(c.huge(DType::U8, &[P40])?.clone_tensor())
        }),
        ("expand_2p40_to_dtype", Want::Oom, |c| {
            ok(c.huge(DType::U8, &[P40])?.to_dtype(DType::F64))
        }),
        ("expand_2p40_to_vec", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40])?.to_vec::<f32>())
        }),
        ("expand_reshape_copy", Want::Oom, |c| {
            // [2^40, 2] with strides (0, 1): no view can flatten it, so reshape copies
            let x = c.small(2).reshape(&[2, 1])?.expand(&[2, P40 as i64])?;
            ok(x.t()?.reshape(&[-1]))
        }),
        ("reshape_numel_overflow", Want::Arg, |c| {
            let x = c.small(4);
            ok(x.reshape(&[1 << 62, 1 << 62, 0]))
        }),
        ("as_strided_out_of_storage", Want::Arg, |c| {
            let x = c.small(4);
            ok(x.as_strided(&[P40], &[1], 0))
        }),
        ("as_strided_extent_overflow", Want::Arg, |c| {
            let x = c.small(4);
            ok(x.as_strided(&[1 << 62, 4], &[1 << 62, 1], 0))
        }),
        // ----- join / split -----
        ("cat_2p40", Want::Oom, |c| {
            let a = c.huge(DType::F32, &[P40])?;
            ok(Tensor::cat(&[&a, &a], 0))
        }),
        ("cat_numel_overflow", Want::Arg, |c| {
            let a = c.huge(DType::F32, &[1 << 62])?;
            ok(Tensor::cat(&[&a, &a, &a, &a], 0))
        }),
        ("stack_2p40", Want::Oom, |c| {
            let a = c.huge(DType::F32, &[P40])?;
            ok(Tensor::stack(&[&a, &a], 0))
        }),
        ("pad_i64max", Want::Arg, |c| {
            ok(c.small(3).pad(&[i64::MAX, 0], PadMode::constant(0)))
        }),
        ("pad_i64max_both", Want::Arg, |c| {
            ok(c.small(3).pad(&[i64::MAX, i64::MAX], PadMode::constant(0)))
        }),
        ("pad_i64min", Want::Arg, |c| {
            ok(c.small(3).pad(&[i64::MIN, 0], PadMode::constant(0)))
        }),
        ("pad_2p40", Want::Oom, |c| {
            ok(c.small(3).pad(&[P40 as i64, 0], PadMode::constant(0)))
        }),
        ("pad_replicate_2p40", Want::Oom, |c| {
            ok(c.small(3).pad(&[P40 as i64, 1], PadMode::Replicate))
        }),
        ("repeat_2p61", Want::Oom, |c| {
            ok(c.small(2).repeat(&[1 << 61]))
        }),
        ("repeat_numel_overflow", Want::Arg, |c| {
            ok(c.small(2).repeat(&[usize::MAX, 2]))
        }),
        ("tile_2p40", Want::Oom, |c| ok(c.small(2).tile(&[P40]))),
        // element counts that fit usize but not isize: found by the random mix (seeds 12345
        // and 1795652312496810449), a panic in the copy's plan before the fix
        ("repeat_isize_overflow", Want::Arg, |c| {
            ok(c.small(2).repeat(&[i64::MAX as usize]))
        }),
        ("repeat_two_dims_overflow", Want::Arg, |c| {
            ok(c.small(2).repeat(&[2147671769, 5440211696509]))
        }),
        ("repeat_interleave_2p40", Want::Oom, |c| {
            ok(c.small(2).repeat_interleave(P40, None))
        }),
        ("repeat_interleave_overflow", Want::Arg, |c| {
            ok(c.small(2).repeat_interleave(usize::MAX, Some(0)))
        }),
        ("chunk_usize_max_empty", Want::Oom, |c| {
            ok(c.small(0).chunk(usize::MAX, 0))
        }),
        ("chunk_2p40_empty", Want::Oom, |c| {
            ok(c.small(0).chunk(P40, 0))
        }),
        ("chunk_0", Want::Arg, |c| ok(c.small(3).chunk(0, 0))),
        ("split_1_of_2p40", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40])?.split(1, 0))
        }),
        ("unbind_2p40", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40])?.unbind(0))
        }),
        ("split_with_sizes_overflow", Want::Arg, |c| {
            ok(c.small(3).split_with_sizes(&[usize::MAX, 4], 0))
        }),
        // ----- matmul -----
        ("matmul_out_2p40", Want::Oom, |c| {
            let a = c.huge(DType::F32, &[1 << 20, 1])?;
            let b = c.huge(DType::F32, &[1, 1 << 20])?;
            ok(a.matmul(&b))
        }),
        ("matmul_2p31sq_f64", Want::Oom, |c| {
            let a = c.huge(DType::F64, &[P31, 1])?;
            let b = c.huge(DType::F64, &[1, P31])?;
            ok(a.matmul(&b))
        }),
        ("matmul_f16_2p40", Want::Oom, |c| {
            let a = c.huge(DType::F16, &[1 << 20, 1])?;
            let b = c.huge(DType::F16, &[1, 1 << 20])?;
            ok(a.matmul(&b))
        }),
        ("matmul_bf16_2p40", Want::Oom, |c| {
            let a = c.huge(DType::BF16, &[1 << 20, 1])?;
            let b = c.huge(DType::BF16, &[1, 1 << 20])?;
            ok(a.matmul(&b))
        }),
        ("bmm_batch_2p40", Want::Oom, |c| {
            let a = c.huge(DType::F32, &[P40, 1, 1])?;
            ok(a.bmm(&a))
        }),
        ("matmul_numel_overflow", Want::Arg, |c| {
            let a = c.huge(DType::F32, &[1 << 40, 1])?;
            let b = c.huge(DType::F32, &[1, 1 << 40])?;
            ok(a.matmul(&b))
        }),
        // ----- index ops with huge index tensors -----
        ("index_select_2p40", Want::Oom, |c| {
            let x = c.small(4);
            let i = c.huge(DType::I64, &[P40])?;
            ok(x.index_select(0, &i))
        }),
        ("gather_2p40", Want::Oom, |c| {
            let x = c.small(4);
            let i = c.huge(DType::I64, &[P40])?;
            ok(x.gather(0, &i))
        }),
        ("take_2p40", Want::Oom, |c| {
            let x = c.small(4);
            let i = c.huge(DType::I64, &[P40])?;
            ok(x.take(&i))
        }),
        ("embedding_2p40", Want::Oom, |c| {
            let w = c.small(4).reshape(&[2, 2])?;
            let i = c.huge(DType::I64, &[P40])?;
            ok(w.embedding(&i))
        }),
        // on a GPU an index's bounds are checked on the device and reported at the next
        // read (tests/cuda_deferred.rs); sync checks bring the error back to the op here
        ("index_select_huge_value", Want::Arg, |c| {
            let _here = stride_core::sync_checks_here();
            let x = c.small(4);
            let i = Tensor::from_vec(vec![i64::MAX, i64::MIN], [2])?.to_device(&c.dev)?;
            ok(x.index_select(0, &i))
        }),
        ("index_add_huge_value", Want::Arg, |c| {
            let _here = stride_core::sync_checks_here();
            let x = c.small(4);
            let i = Tensor::from_vec(vec![i64::MAX], [1])?.to_device(&c.dev)?;
            let s = c.small(1);
            ok(x.index_add_(0, &i, &s, 1.0))
        }),
        ("sort_2p40", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40])?.sort(0, false, true))
        }),
        ("topk_usize_max", Want::Arg, |c| {
            ok(c.small(4).topk(usize::MAX, 0, true, true))
        }),
        // ----- reductions, scans, elementwise -----
        // sizes impossible on any device (8 GiB results fit a 141 GB H200)
        ("sum_dim_of_2p60", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40, 1 << 20])?.sum_dims(&[1], false))
        }),
        ("cumsum_2p40", Want::Oom, |c| {
            ok(c.huge(DType::F32, &[P40])?.cumsum(0))
        }),
        ("add_2p40", Want::Oom, |c| {
            let a = c.huge(DType::F32, &[P40])?;
            ok(a.add(&a))
        }),
        ("add_broadcast_overflow", Want::Arg, |c| {
            let a = c.huge(DType::F32, &[P40, 1])?;
            let b = c.huge(DType::F32, &[1, P40])?;
            ok(a.add(&b))
        }),
        ("multinomial_2p40", Want::Oom, |c| {
            ok(c.small(4).multinomial(P40, true, None))
        }),
        ("to_device_2p40", Want::Oom, |c| {
            // GPU -> CPU of a huge view (the dense copy fails first); on the CPU, a no-op
            // transfer, then a host copy
            let h = c.huge(DType::F32, &[P40])?.to_device(&Device::Cpu)?;
            ok(h.contiguous())
        }),
        ("to_device_from_cpu_2p40", Want::Oom, |c| {
            // CPU -> the case's device (on a CPU run, a no-op), then a copy there
            let h = c.huge(DType::F32, &[P40])?;
            let h = h.to_device(&Device::Cpu)?.to_device(&c.dev)?;
            ok(h.contiguous())
        }),
    ]
}

// ----- the random part --------------------------------------------------------------------

/// xorshift64*: a small deterministic generator (the seed is printed on failure).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A size from huge ranges (and a few small ones, so that products stay possible).
    fn size(&mut self) -> usize {
        match self.below(8) {
            0 => self.below(4) as usize,
            1 => 1 << self.below(64),
            2 => usize::MAX - self.below(4) as usize,
            3 => i64::MAX as usize - self.below(2) as usize,
            4 => (1usize << 31) + self.below(1 << 20) as usize,
            _ => (self.next() >> self.below(64)) as usize | (1 << 31),
        }
    }
    fn signed(&mut self) -> i64 {
        match self.below(6) {
            0 => self.below(3) as i64,
            1 => i64::MAX - self.below(2) as i64,
            2 => i64::MIN + self.below(2) as i64,
            3 => (self.size() as i64).saturating_abs().wrapping_neg(),
            _ => self.size() as i64,
        }
    }
}

/// One random op with random sizes; `Ok` is fine (a possible size), `Err` must be an
/// `OutOfMemory` or an argument error; a panic or an abort fails.
fn random_case(c: &mut Ctx, rng: &mut Rng) -> (String, Result<()>) {
    let dev = c.dev;
    let dtypes = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::U8,
        DType::Bool,
    ];
    let dt = dtypes[rng.below(dtypes.len() as u64) as usize];
    let nd = 1 + rng.below(3) as usize;
    let shape: Vec<usize> = (0..nd).map(|_| rng.size()).collect();
    let pick = rng.below(12);
    match pick {
        0 => (
            format!("zeros({shape:?}, {dt})"),
            ok(Tensor::zeros(shape, dt, &dev)),
        ),
        1 => (
            format!("ones({shape:?}, {dt})"),
            ok(Tensor::ones(shape, dt, &dev)),
        ),
        2 => {
            let (a, b) = (rng.signed(), rng.signed());
            (format!("arange({a}, {b})"), ok(Tensor::arange(a, b, &dev)))
        }
        3 => {
            let n = rng.size();
            (
                format!("linspace(0, 1, {n})"),
                ok(Tensor::linspace(0.0, 1.0, n, DType::F32, &dev)),
            )
        }
        4 => {
            let p: Vec<i64> = (0..2).map(|_| rng.signed()).collect();
            (
                format!("small(3).pad({p:?})"),
                ok(c.small(3).pad(&p, PadMode::constant(0))),
            )
        }
        5 => {
            let r: Vec<usize> = (0..nd).map(|_| rng.size()).collect();
            (format!("small(2).repeat({r:?})"), ok(c.small(2).repeat(&r)))
        }
        6 => {
            let (n, k) = (rng.below(3) as usize, rng.size());
            (format!("small({n}).chunk({k})"), ok(c.small(n).chunk(k, 0)))
        }
        7 => {
            let r = c.huge(dt, &shape).and_then(|h| h.contiguous());
            (format!("expand({shape:?}, {dt}).contiguous()"), ok(r))
        }
        8 => {
            let n = rng.size();
            (
                format!("randn({n})"),
                ok(Tensor::randn([n], DType::F32, &dev, None)),
            )
        }
        9 => {
            let (m, n) = (rng.size(), rng.size());
            let a = c.huge(DType::F32, &[m, 1]);
            let b = c.huge(DType::F32, &[1, n]);
            let r = a.and_then(|a| b.and_then(|b| a.matmul(&b)));
            (format!("matmul([{m}, 1], [1, {n}])"), ok(r))
        }
        10 => {
            let n = rng.size();
            let x = c.small(4);
            let r = c.huge(DType::I64, &[n]).and_then(|i| x.index_select(0, &i));
            (format!("small(4).index_select(0, [{n}])"), ok(r))
        }
        _ => {
            let r = rng.size();
            (
                format!("small(2).repeat_interleave({r})"),
                ok(c.small(2).repeat_interleave(r, None)),
            )
        }
    }
}

// ----- the child ------------------------------------------------------------------------

fn is_arg_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Invalid { .. }
            | Error::ShapeMismatch { .. }
            | Error::IndexOutOfRange { .. }
            | Error::DimOutOfRange { .. }
            | Error::NotViewable { .. }
            | Error::DataLength { .. }
    )
}

/// Limits the child's memory: its address space on the CPU, its heap on a GPU run.
fn limit_memory(dev: Device) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (resource, now) = if dev.is_cpu() {
        (libc::RLIMIT_AS, kib("VmSize:") << 10)
    } else {
        (libc::RLIMIT_DATA, kib("VmData:") << 10)
    };
    let lim = libc::rlimit {
        rlim_cur: now + HEADROOM,
        rlim_max: now + HEADROOM,
    };
    assert_eq!(unsafe { libc::setrlimit(resource, &lim) }, 0, "setrlimit");
}

fn run_child(case: &str) {
    let dev = match std::env::var(DEVICE_ENV).as_deref() {
        Ok("cuda") => Device::cuda(0).expect("the parent saw a GPU"),
        _ => Device::Cpu,
    };
    // create the context (and the rayon pool) before limiting memory
    let _warm = Tensor::zeros([4], DType::F32, &dev)
        .unwrap()
        .add(&Tensor::zeros([4], DType::F32, &dev).unwrap())
        .unwrap();
    limit_memory(dev);
    let mut ctx = Ctx {
        dev,
        watched: vec![],
    };
    let say = |s: String| {
        println!("{s}");
        std::io::stdout().flush().unwrap();
    };
    if let Some(seed) = case.strip_prefix("random:") {
        let mut rng = Rng(seed.parse::<u64>().unwrap() | 1);
        let start = Instant::now();
        let mut n = 0;
        while n < 400 && start.elapsed() < Duration::from_secs(4) {
            ctx.watched.clear();
            let (what, r) = random_case(&mut ctx, &mut rng);
            say(format!("random case {n}: {what}"));
            match r {
                Ok(()) => {}
                Err(Error::OutOfMemory { .. }) => {}
                Err(e) if is_arg_error(&e) => {}
                Err(e) => panic!("CASE-FAILED: {what}: an unexpected error: {e}"),
            }
            check_unchanged(&ctx, &what);
            n += 1;
        }
        say(format!("CASE-OK: {n} random cases"));
        return;
    }
    let (name, want, f) = cases()
        .into_iter()
        .find(|c| c.0 == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    let r = f(&mut ctx);
    match (&r, want) {
        (Err(Error::OutOfMemory { .. }), Want::Oom) => {}
        (Err(e), Want::Arg) if is_arg_error(e) => {}
        (Err(e), _) => panic!("CASE-FAILED: {name}: wanted {want:?}, got the error: {e}"),
        (Ok(()), _) => panic!("CASE-FAILED: {name}: wanted {want:?}, got Ok"),
    }
    let msg = r.unwrap_err().to_string();
    check_unchanged(&ctx, name);
    if want == Want::Oom {
        assert!(
            msg.contains("out of memory") && msg.contains("bytes"),
            "CASE-FAILED: {name}: the message should say out of memory and the bytes: {msg}"
        );
    }
    say(format!("CASE-OK: {msg}"));
}

fn check_unchanged(ctx: &Ctx, what: &str) {
    for (t, vals, version) in &ctx.watched {
        assert_eq!(
            t.version(),
            *version,
            "CASE-FAILED: {what}: an operand was written"
        );
        assert_eq!(
            &t.to_f64_vec().unwrap(),
            vals,
            "CASE-FAILED: {what}: an operand changed"
        );
    }
}

/// Not a test of its own: the body of one child process (see the module docs).
#[test]
#[ignore = "run by impossible_sizes_are_errors in a child process"]
fn child() {
    if let Ok(case) = std::env::var(CASE_ENV) {
        run_child(&case);
    }
}

// ----- the parent -----------------------------------------------------------------------

/// Runs one case in a child; `None` when it passed, else what happened.
fn spawn(case: &str, dev: &str) -> Option<String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE_ENV, case)
        .env(DEVICE_ENV, dev)
        .env("RAYON_NUM_THREADS", "2")
        .env("MALLOC_ARENA_MAX", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let last = |pat: &str| {
        text.lines()
            .filter(|l| l.contains(pat))
            .last()
            .map(|l| l.trim().to_string())
    };
    use std::os::unix::process::ExitStatusExt;
    let random_at = last("random case").unwrap_or_default();
    match status {
        None => Some(format!("timed out {random_at}")),
        Some(s) if s.success() && text.contains("CASE-OK") => None,
        Some(s) if s.success() => Some(format!("the child ran nothing: {text}")),
        Some(s) => {
            if let Some(sig) = s.signal() {
                let why = last("memory allocation").unwrap_or_default();
                Some(format!("killed by signal {sig} {why} {random_at}"))
            } else if let Some(l) = last("CASE-FAILED") {
                Some(l)
            } else {
                let why = last("panicked at")
                    .map(|l| {
                        let i = text.lines().position(|x| x.trim() == l).unwrap_or(0);
                        format!("{l} {}", text.lines().nth(i + 1).unwrap_or(""))
                    })
                    .unwrap_or(text.clone());
                Some(format!("panicked: {why} {random_at}"))
            }
        }
    }
}

#[test]
fn impossible_sizes_are_errors() {
    let mut devices = vec!["cpu"];
    if cuda::is_available() {
        devices.push("cuda");
    } else if std::env::var("STRIDE_REQUIRE_CUDA").as_deref() == Ok("1") {
        panic!("STRIDE_REQUIRE_CUDA=1 but no CUDA device is available");
    }
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        // a fixed default keeps CI deterministic; `STRIDE_IMPOSSIBLE_SEED=<n>` explores others
        .unwrap_or(12345);
    let only = std::env::var("STRIDE_IMPOSSIBLE_ONLY").ok();
    let mut names: Vec<String> = cases().iter().map(|c| c.0.to_string()).collect();
    names.push(format!("random:{seed}"));
    let start = Instant::now();
    let mut failures = vec![];
    let mut ran = 0;
    for dev in &devices {
        for name in &names {
            if only.as_deref().is_some_and(|o| !name.contains(o)) {
                continue;
            }
            ran += 1;
            if let Some(why) = spawn(name, dev) {
                eprintln!("FAILED {dev} {name}: {why}");
                failures.push(format!("{dev} {name}: {why}"));
            }
        }
    }
    eprintln!(
        "{ran} cases in {:.1} s (random seed {seed}: rerun with {SEED_ENV}={seed})",
        start.elapsed().as_secs_f64()
    );
    assert!(ran > 0, "no case ran");
    assert!(
        failures.is_empty(),
        "{} of {ran} cases crashed or returned the wrong result:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
