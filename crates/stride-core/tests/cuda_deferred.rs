//! Deferred device errors on CUDA (`cuda::check_errors`): checks that need the data (index
//! ranges, integer division by zero) run on the GPU without the host waiting; a failing op
//! writes nothing and the next read of the device returns the CPU's error for it, naming the
//! operands and the call site, until `cuda::take_error` takes it. And the proof that those
//! checks make no host wait, on every device (the CPU reports the waits a GPU would make).
//!
//! A deferred error belongs to the whole device, so the GPU tests of this file run one at a
//! time (`alone`) and no other test binary makes one on purpose. They skip, saying so,
//! without a GPU.

mod idx_common;

use idx_common::*;
use std::sync::{Mutex, MutexGuard};
use stride_core::backend::index::INDEX_DTYPES;
use stride_core::{cuda, debug, DType, Device, Error, ScatterReduce, Tensor};

fn gpu(test: &str) -> Option<Device> {
    cuda::require_or_skip(test)
}

/// The device to this test alone, with no error left by a test before it (one that failed
/// midway).
fn alone() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if cuda::is_available() {
        let _ = cuda::take_error(0);
    }
    g
}

fn on(t: &Tensor, g: &Device) -> Tensor {
    t.to_device(g).unwrap()
}

#[test]
fn out_of_range_indices_are_deferred_errors_naming_the_first_and_write_nothing() {
    let Some(g) =
        gpu("out_of_range_indices_are_deferred_errors_naming_the_first_and_write_nothing")
    else {
        return;
    };
    let _alone = alone();
    let x = tensor(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[3, 4],
        DType::F32,
    );
    for idt in INDEX_DTYPES {
        // two bad values: the first in logical order is named (7, not 9)
        let bad = ints(&[0, 1, 7, 2, 9], &[5], idt);
        let gi = ints(&[0, 1, 2, 1, 2, 9, 2, 3], &[2, 4], idt);
        let gi_t = ints(&[0, 1, 2, 5, 1, 2, 2, 3], &[4, 2], idt).t().unwrap();
        let src = tensor(&[1.0; 8], &[2, 4], DType::F32);
        let rows_src = tensor(&[1.0; 20], &[5, 4], DType::F32);
        let take_i = ints(&[3, 12, 1], &[3], idt);
        let emb_i = ints(&[1, 3], &[2], idt);
        let f = |name: &str, t: &Tensor, m: &dyn Fn(&Tensor) -> Tensor| match name {
            "index_select" => t.index_select(1, &m(&bad)),
            "gather" => t.gather(0, &m(&gi)),
            "gather transposed" => t.gather(0, &m(&gi_t)),
            "scatter_" => t.scatter_(0, &m(&gi), &m(&src)),
            "scatter_add_" => t.scatter_add_(0, &m(&gi), &m(&src)),
            "scatter_reduce_" => {
                t.scatter_reduce_(0, &m(&gi), &m(&src), ScatterReduce::Amax, false)
            }
            "index_add_" => t.index_add_(0, &m(&bad), &m(&rows_src), 1i64),
            "take" => t.take(&m(&take_i)),
            _ => t.embedding(&m(&emb_i)),
        };
        let ops = [
            "index_select",
            "gather",
            "gather transposed",
            "scatter_",
            "scatter_add_",
            "scatter_reduce_",
            "index_add_",
            "take",
            "embedding",
        ];
        for name in ops {
            let want = f(name, &x, &|t: &Tensor| t.clone()).unwrap_err();
            let xg = on(&x, &g);
            let before = xg.to_vec::<f32>().unwrap();
            // the op is queued without a wait; its check fails on the device
            let queued = f(name, &xg, &|t: &Tensor| on(t, &g));
            assert!(queued.is_ok(), "{name} {idt}: {:?}", queued.err());
            // the next read returns the CPU's error, with the operands and the call site
            let err = xg.to_vec::<f32>().unwrap_err();
            let stride_core::Error::DeviceCheck { cause, report, .. } = &err else {
                panic!("{name} {idt}: expected a deferred device error, got {err}")
            };
            assert_eq!(cause.to_string(), want.to_string(), "{name} {idt}");
            // the caller: its file and line where the binary has line tables, else its symbol
            assert!(report.contains("cuda_deferred"), "{name} {idt}: {report}");
            assert!(report.contains("index ["), "{name} {idt}: {report}");
            // every read until it is taken
            assert_eq!(cuda::check_errors(0).unwrap_err(), err, "{name} {idt}");
            assert_eq!(cuda::take_error(0).unwrap(), Some(err), "{name} {idt}");
            assert_eq!(cuda::take_error(0).unwrap(), None, "{name} {idt}");
            assert_eq!(
                xg.to_vec::<f32>().unwrap(),
                before,
                "{name} {idt}: nothing written"
            );
        }
    }
    // the check makes no host wait
    let xg = on(&x, &g);
    let ig = on(&ints(&[0, 5], &[2], DType::I64), &g);
    let s0 = cuda::sync_count(0);
    let y = xg.index_select(1, &ig).unwrap();
    assert_eq!(cuda::sync_count(0) - s0, 0, "no wait for the verdict");
    assert!(y.to_vec::<f32>().is_err());
    assert!(cuda::take_error(0).unwrap().is_some());
    // in anomaly mode the error comes at the op, as on the CPU
    {
        let _a = stride_core::debug::detect_anomaly();
        let e = xg.index_select(1, &ig).unwrap_err();
        assert_eq!(
            e,
            x.index_select(1, &ints(&[0, 5], &[2], DType::I64))
                .unwrap_err()
        );
    }
    assert_eq!(
        cuda::take_error(0).unwrap(),
        None,
        "reported at the op, not again"
    );
    // an expanded (stride 0) bad index
    let eb = on(&ints(&[5], &[1, 1], DType::U32), &g)
        .expand(&[2, 4])
        .unwrap();
    xg.scatter_value_(0, &eb, 0.0).unwrap();
    let e = cuda::take_error(0).unwrap().expect("a deferred error");
    assert!(e.to_string().contains('5'), "{e}");
    assert_eq!(xg.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
}

/// The error a read returns after a failed check, and that it goes once taken.
fn take_deferred(what: &str) -> Error {
    let err = cuda::check_errors(0).expect_err(what);
    assert!(matches!(err, Error::DeviceCheck { .. }), "{what}: {err}");
    let taken = cuda::take_error(0).unwrap().expect(what);
    assert_eq!(taken, err, "{what}");
    assert!(cuda::check_errors(0).is_ok(), "{what}: taken");
    err
}

#[test]
fn sorted_scatters_write_nothing_when_an_index_is_bad() {
    // index_add with a long index takes the sorted path (merge sort by destination first)
    let Some(g) = gpu("sorted_scatters_write_nothing_when_an_index_is_bad") else {
        return;
    };
    let _alone = alone();
    let rows = 200usize;
    let x = on(
        &Tensor::zeros([8, 3], DType::F32, &Device::Cpu).unwrap(),
        &g,
    );
    let mut idx: Vec<i64> = (0..rows as i64).map(|i| i % 8).collect();
    idx[150] = 8;
    let idx = on(&ints(&idx, &[rows], DType::I64), &g);
    let src = on(&tensor(&vec![1.0; rows * 3], &[rows, 3], DType::F32), &g);
    x.index_add_(0, &idx, &src, 1i64).unwrap();
    let err = take_deferred("index_add_ with a bad index");
    let Error::DeviceCheck { cause, .. } = &err else {
        unreachable!()
    };
    assert!(
        matches!(
            **cause,
            Error::IndexOutOfRange {
                index: 8,
                size: 8,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![0.0; 24], "nothing written");
    // and the device computes correctly again
    let ok = on(
        &ints(
            &(0..rows as i64).map(|i| i % 8).collect::<Vec<_>>(),
            &[rows],
            DType::I64,
        ),
        &g,
    );
    x.index_add_(0, &ok, &src, 1i64).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![25.0; 24]);
}

#[test]
fn integer_division_by_zero_is_deferred_and_writes_nothing() {
    let Some(g) = gpu("integer_division_by_zero_is_deferred_and_writes_nothing") else {
        return;
    };
    let _alone = alone();
    let a_cpu = Tensor::from_vec(vec![5i32, 7, 9, 11], [2, 2]).unwrap();
    let z_cpu = Tensor::from_vec(vec![1i32, 0, 2, 3], [2, 2]).unwrap();
    let n_cpu = Tensor::from_vec(vec![1i32, -1, 2, 0], [2, 2]).unwrap();
    let (a, z, n) = (on(&a_cpu, &g), on(&z_cpu, &g), on(&n_cpu, &g));
    let at = a.t().unwrap(); // a transposed destination: written through its strides
    let cases: Vec<(&str, Box<dyn Fn() -> stride_core::Result<Tensor>>, Error)> = vec![
        (
            "floor_divide_",
            Box::new(|| at.floor_divide_(&z)),
            a_cpu.t().unwrap().floor_divide_(&z_cpu).unwrap_err(),
        ),
        (
            "remainder",
            Box::new(|| a.remainder(&z)),
            a_cpu.remainder(&z_cpu).unwrap_err(),
        ),
        (
            "pow_",
            Box::new(|| a.pow_(&n)),
            a_cpu.pow_(&n_cpu).unwrap_err(),
        ),
    ];
    for (name, f, want) in &cases {
        f().unwrap_or_else(|e| panic!("{name}: queued, not refused: {e}"));
        let err = take_deferred(name);
        let Error::DeviceCheck { cause, report, .. } = &err else {
            unreachable!()
        };
        assert_eq!(**cause, *want, "{name}: the CPU's error");
        assert!(report.contains("cuda_deferred"), "{name}: {report}");
        assert_eq!(
            a.to_vec::<i32>().unwrap(),
            [5, 7, 9, 11],
            "{name}: nothing written"
        );
    }
    // valid divisors: the gated copy writes through the transposed destination
    let d = on(&Tensor::from_vec(vec![2i32, 3, 4, 5], [2, 2]).unwrap(), &g);
    at.floor_divide_(&d).unwrap();
    let d_cpu = Tensor::from_vec(vec![2i32, 3, 4, 5], [2, 2]).unwrap();
    a_cpu.t().unwrap().floor_divide_(&d_cpu).unwrap();
    assert_eq!(a.to_vec::<i32>().unwrap(), a_cpu.to_vec::<i32>().unwrap());
}

#[test]
fn the_first_failure_is_reported_and_later_ops_still_run() {
    let Some(g) = gpu("the_first_failure_is_reported_and_later_ops_still_run") else {
        return;
    };
    let _alone = alone();
    let x = on(&tensor(&[1.0, 2.0, 3.0], &[3], DType::F32), &g);
    let bad1 = on(&ints(&[3], &[1], DType::I64), &g);
    let bad2 = on(&ints(&[-9], &[1], DType::I64), &g);
    let _ = x.index_select(0, &bad1).unwrap();
    let _ = x.index_select(0, &bad2).unwrap();
    let y = x.mul(2.0).unwrap();
    let err = take_deferred("two bad ops");
    assert!(err.to_string().contains("index 3 "), "the first one: {err}");
    assert_eq!(y.to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0]);
}

#[test]
fn finished_checks_are_forgotten_without_a_wait() {
    let Some(g) = gpu("finished_checks_are_forgotten_without_a_wait") else {
        return;
    };
    let _alone = alone();
    let x = on(&tensor(&[1.0, 2.0, 3.0], &[3], DType::F32), &g);
    let i = on(&ints(&[2, 0], &[2], DType::I64), &g);
    for _ in 0..2000 {
        let _ = x.index_select(0, &i).unwrap();
    }
    cuda::synchronize(0).unwrap();
    assert_eq!(cuda::pending_checks(0), 0);
}

/// A gather, a scatter, an embedding and an integer division make no host wait: a step
/// built of them runs under `forbid_sync` on every device (the CPU reports the waits a GPU
/// would make, so this runs in CI too).
#[test]
fn index_ops_and_integer_division_make_no_host_wait() {
    let mut devices = vec![Device::Cpu];
    if let Some(g) = gpu("index_ops_and_integer_division_make_no_host_wait (cuda half)") {
        devices.push(g);
    }
    let _alone = alone();
    for dev in devices {
        let x = on(
            &tensor(
                &(0..12).map(f64::from).collect::<Vec<_>>(),
                &[3, 4],
                DType::F32,
            ),
            &dev,
        );
        let i = on(&ints(&[2, 0, 1], &[3], DType::I64), &dev);
        let a = on(&Tensor::from_vec(vec![7i64, 9, 11], [3]).unwrap(), &dev);
        let cols = on(&ints(&[3, 0], &[1, 2], DType::I64), &dev)
            .expand(&[3, 2])
            .unwrap();
        let rows = i.unsqueeze(1).unwrap().expand(&[3, 4]).unwrap();
        let before = cuda::sync_count(0);
        let y = {
            let _g = debug::forbid_sync();
            let y = x.index_select(0, &i).unwrap();
            let y = y.scatter_add(0, &rows, &x).unwrap();
            let e = x.embedding(&i).unwrap();
            let q = a.floor_divide(&i.add(1i64).unwrap()).unwrap();
            let c = x.gather(1, &cols).unwrap();
            y.add(&e)
                .unwrap()
                .add(&c.sum().unwrap())
                .unwrap()
                .add(&q.sum().unwrap())
                .unwrap()
        };
        if !dev.is_cpu() {
            assert_eq!(cuda::sync_count(0), before, "{dev}: no wait");
        }
        assert_eq!(y.shape(), &[3, 4]);
    }
}

/// In anomaly mode (and with `set_sync_checks`), a GPU reports the wait it makes for the
/// verdict, as the CPU does: the same program reports the same waits on every device.
#[test]
fn sync_checks_report_the_wait_on_every_device() {
    let mut devices = vec![Device::Cpu];
    if let Some(g) = gpu("sync_checks_report_the_wait_on_every_device (cuda half)") {
        devices.push(g);
    }
    let _alone = alone();
    for dev in devices {
        let x = on(&tensor(&[1.0, 2.0, 3.0], &[3], DType::F32), &dev);
        let i = on(&ints(&[2, 0], &[2], DType::I64), &dev);
        let _a = debug::detect_anomaly();
        let _g = debug::forbid_sync();
        let err = x.index_select(0, &i).unwrap_err();
        assert!(
            err.to_string().contains("index range check"),
            "{dev}: {err}"
        );
    }
}
