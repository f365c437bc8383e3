//! Gathers and scatters on the wgpu backend, beyond what the registry checks (`stride check
//! --device wgpu`, stride-check's `tests/wgpu.rs`): index checks that run in shaders and
//! report at the next read (the failing op writes nothing), i64 indices checked whole, the
//! first bad index in logical order, scatters that combine duplicates in the CPU's order, the
//! round trip for axes past llvmpipe's loop budget, and an embedding's forward and backward
//! with no host wait. Each test skips, saying so, without an adapter (`STRIDE_REQUIRE_WGPU=1`
//! makes them mandatory; CI installs Mesa's lavapipe).

mod wgpu_common;
use stride_core::{debug, webgpu, DType, Device, Error, ScatterReduce, Tensor};
use wgpu_common::{bits, gpu};

fn on(d: &Device, t: Tensor) -> Tensor {
    t.to_device(d).unwrap()
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()]).unwrap()
}

/// `n` f32 values `f(k)`, shaped `shape`, on the CPU.
fn values(shape: &[usize], f: impl Fn(usize) -> f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(f).collect::<Vec<f32>>(), shape.to_vec()).unwrap()
}

/// The out-of-range error inside `e` (a deferred one wraps it).
fn out_of_range(e: &Error) -> (i64, usize) {
    match e {
        Error::IndexOutOfRange { index, size, .. } => (*index, *size),
        Error::DeviceCheck { cause, .. } => out_of_range(cause),
        other => panic!("not an index error: {other}"),
    }
}

#[test]
fn index_errors_wait_for_the_next_read_and_the_op_writes_nothing() {
    let Some((d, _turn)) = gpu("index_errors_wait_for_the_next_read_and_the_op_writes_nothing")
    else {
        return;
    };
    let x = on(&d, Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap());
    let out = on(
        &d,
        Tensor::full([2], 9.0, DType::F32, &Device::Cpu).unwrap(),
    );
    let bad = on(&d, i64s(&[0, 7]));
    let before = webgpu::sync_count(0);
    {
        let _no_waits = debug::forbid_sync();
        x.index_select_out(0, &bad, &out).unwrap(); // queued, no verdict yet
    }
    assert_eq!(
        webgpu::sync_count(0),
        before,
        "the check made the host wait"
    );
    assert!(webgpu::pending_checks(0) > 0);
    let err = out.to_vec::<f32>().unwrap_err();
    assert!(matches!(err, Error::DeviceCheck { .. }), "{err}");
    assert_eq!(out_of_range(&err), (7, 3), "{err}");
    assert!(err.to_string().contains("webgpu::take_error"), "{err}");
    assert!(webgpu::check_errors(0).is_err(), "the error is sticky");
    assert_eq!(
        webgpu::pending_checks(0),
        0,
        "a read settles every queued check"
    );
    assert!(webgpu::take_error(0).unwrap().is_some());
    assert!(webgpu::take_error(0).unwrap().is_none());
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        [9.0, 9.0],
        "the failed op wrote"
    );
    // the same for a scatter, and the device goes on working after the error is taken
    let dst = on(&d, Tensor::zeros([3], DType::F32, &Device::Cpu).unwrap());
    let src = on(&d, Tensor::ones([2], DType::F32, &Device::Cpu).unwrap());
    dst.scatter_add_(0, &on(&d, i64s(&[1, -1])), &src).unwrap();
    assert_eq!(out_of_range(&dst.to_vec::<f32>().unwrap_err()), (-1, 3));
    webgpu::take_error(0).unwrap();
    assert_eq!(dst.to_vec::<f32>().unwrap(), [0.0; 3]);
    dst.scatter_add_(0, &on(&d, i64s(&[1, 1])), &src).unwrap();
    assert_eq!(dst.to_vec::<f32>().unwrap(), [0.0, 2.0, 0.0]);
}

#[test]
fn i64_indices_are_checked_whole_and_the_first_bad_one_is_named() {
    let Some((d, _turn)) = gpu("i64_indices_are_checked_whole_and_the_first_bad_one_is_named")
    else {
        return;
    };
    let x = on(&d, values(&[4], |k| k as f32));
    // 2^32 + 1 is index 1 after a narrowing to 32 bits; -2^32 + 2 is index 2 (or -2 wrapped)
    for (index, wraps) in [(1i64 << 32) + 1, -(1i64 << 32) + 2]
        .into_iter()
        .flat_map(|v| [(v, false), (v, true)])
    {
        let ix = on(&d, i64s(&[0, index]));
        let r = if wraps {
            x.take(&ix)
        } else {
            x.index_select(0, &ix)
        };
        let err = match r {
            Ok(y) => y.to_vec::<f32>().unwrap_err(),
            Err(e) => e,
        };
        assert_eq!(out_of_range(&err).0, index, "wrap {wraps}: {err}");
        webgpu::take_error(0).unwrap();
        // at the op itself with sync checks on
        let _here = stride_core::sync_checks_here();
        let r = if wraps {
            x.take(&ix)
        } else {
            x.index_select(0, &ix)
        };
        let err = r.unwrap_err();
        assert!(matches!(err, Error::IndexOutOfRange { .. }), "{err}");
        assert_eq!(out_of_range(&err).0, index);
    }
    // the first bad value in logical order, through a transposed index: logical [[0, 9],
    // [5, 1]] (storage order 0, 5, 9, 1)
    let t = on(&d, Tensor::from_vec(vec![0i32, 5, 9, 1], [2, 2]).unwrap())
        .t()
        .unwrap();
    let src = on(&d, Tensor::ones([2, 4], DType::F32, &Device::Cpu).unwrap());
    let err = src.gather(1, &t).unwrap().to_vec::<f32>().unwrap_err();
    assert_eq!(out_of_range(&err), (9, 4), "{err}");
    webgpu::take_error(0).unwrap();
    let _here = stride_core::sync_checks_here();
    assert_eq!(out_of_range(&src.gather(1, &t).unwrap_err()), (9, 4));
}

#[test]
fn scatters_combine_duplicates_in_the_cpus_order() {
    let Some((d, _turn)) = gpu("scatters_combine_duplicates_in_the_cpus_order") else {
        return;
    };
    let cpu = Device::Cpu;
    // one destination, sources whose sum depends on the order: 1e8 + 1 is 1e8 in f32, so
    // forwards gives 1 and backwards 0
    let vals = [1e8f32, 1.0, -1e8, 1.0, 3.5, -0.25, 7.0];
    let n = vals.len();
    let cases: Vec<(&str, Box<dyn Fn(&Device) -> Tensor>)> = vec![
        (
            "scatter_add f32 into one bin",
            Box::new(move |dev| {
                let src = on(dev, Tensor::from_vec(vals.to_vec(), [n]).unwrap());
                let ix = on(dev, i64s(&vec![2; n]));
                on(dev, Tensor::zeros([4], DType::F32, &cpu).unwrap())
                    .scatter_add(0, &ix, &src)
                    .unwrap()
            }),
        ),
        (
            "scatter f32, the last assignment wins",
            Box::new(move |dev| {
                let src = on(dev, Tensor::from_vec(vals.to_vec(), [n]).unwrap());
                let ix = on(dev, i64s(&[0, 1, 0, 3, 1, 0, 2]));
                on(dev, Tensor::zeros([4], DType::F32, &cpu).unwrap())
                    .scatter(0, &ix, &src)
                    .unwrap()
            }),
        ),
        (
            "index_add f16 with alpha 0.1, rows of a transposed destination",
            Box::new(move |dev| {
                let src = values(&[5, 8], |k| k as f32 * 0.37)
                    .to_dtype(DType::F16)
                    .unwrap();
                let base = on(dev, Tensor::ones([8, 3], DType::F16, &cpu).unwrap());
                let dst = base.t().unwrap();
                dst.index_add_(0, &on(dev, i64s(&[2, 0, 2, 2, 1])), &on(dev, src), 0.1)
                    .unwrap();
                base
            }),
        ),
        (
            "scatter_reduce prod bf16, excluding self",
            Box::new(move |dev| {
                let src = values(&[4, 6], |k| (k + 1) as f32 * 0.71)
                    .to_dtype(DType::BF16)
                    .unwrap();
                let ix = Tensor::from_vec(
                    vec![
                        0i32, 1, 1, 0, 2, 2, 1, 1, 0, 0, 2, 1, 2, 0, 1, 1, 0, 0, 0, 0, 0, 1, 2, 2,
                    ],
                    [4, 6],
                )
                .unwrap();
                on(dev, Tensor::full([3, 6], 5.0, DType::BF16, &cpu).unwrap())
                    .scatter_reduce(0, &on(dev, ix), &on(dev, src), ScatterReduce::Prod, false)
                    .unwrap()
            }),
        ),
        (
            "scatter_reduce amax i64",
            Box::new(move |dev| {
                let v: Vec<i64> = (0..30).map(|k| (k * 7919 % 61) - 30).collect();
                let ix: Vec<i64> = (0..30).map(|k| k * 13 % 5).collect();
                on(dev, Tensor::zeros([5, 3], DType::I64, &cpu).unwrap())
                    .scatter_reduce(
                        0,
                        &on(dev, Tensor::from_vec(ix, [10, 3]).unwrap()),
                        &on(dev, Tensor::from_vec(v, [10, 3]).unwrap()),
                        ScatterReduce::Amax,
                        true,
                    )
                    .unwrap()
            }),
        ),
        (
            "scatter_reduce amin u8 (neighbouring bytes of one word, different invocations)",
            Box::new(move |dev| {
                let v: Vec<u8> = (0..30).map(|k| (k * 7919 % 61) as u8).collect();
                let ix: Vec<i32> = (0..30).map(|k| k * 13 % 5).collect();
                on(dev, Tensor::full([5, 3], 77.0, DType::U8, &cpu).unwrap())
                    .scatter_reduce(
                        0,
                        &on(dev, Tensor::from_vec(ix, [10, 3]).unwrap()),
                        &on(dev, Tensor::from_vec(v, [10, 3]).unwrap()),
                        ScatterReduce::Amin,
                        true,
                    )
                    .unwrap()
            }),
        ),
    ];
    for (name, case) in &cases {
        let want = bits(&case(&cpu));
        // uploads count as host work for `forbid_sync`, so count the device's waits instead
        let before = webgpu::sync_count(0);
        let got = case(&d);
        assert_eq!(webgpu::sync_count(0), before, "{name}: a host wait");
        assert_eq!(bits(&got), want, "{name}");
    }
}

#[test]
fn scatter_axes_past_the_loop_budget_are_round_trips() {
    let Some((d, _turn)) = gpu("scatter_axes_past_the_loop_budget_are_round_trips") else {
        return;
    };
    // 70,000 sources along one axis: one invocation would stop after 65,535 steps on
    // llvmpipe, so this scatter is a counted CPU round trip, and right
    let n = 70_000usize;
    let ix: Vec<i64> = (0..n as i64).map(|k| k % 10).collect();
    let ix = on(&d, Tensor::from_vec(ix, [n]).unwrap());
    let ones = Tensor::ones([n], DType::F32, &d).unwrap();
    let got = Tensor::zeros([10], DType::F32, &d)
        .unwrap()
        .scatter_add(0, &ix, &ones)
        .unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), [7000.0; 10]);
    let _no_waits = debug::forbid_sync();
    let e = Tensor::zeros([10], DType::F32, &d)
        .unwrap()
        .scatter_add(0, &ix, &ones)
        .unwrap_err();
    assert!(matches!(e, Error::HostSync { .. }), "{e}");
}

#[test]
fn an_embedding_trains_without_host_waits() {
    let Some((d, _turn)) = gpu("an_embedding_trains_without_host_waits") else {
        return;
    };
    // forward: a gather of rows; backward: an index_add of the output's gradient into the
    // table, with repeated tokens
    let step = |dev: &Device| {
        let w = values(&[12, 8], |k| (k as f32 * 0.013).sin());
        let w = on(dev, w).requires_grad_(true).unwrap();
        let tokens: Vec<i64> = (0..40).map(|k| k * 7 % 12).collect();
        let tokens = on(dev, Tensor::from_vec(tokens, [5, 8]).unwrap());
        let scale = on(dev, values(&[8], |k| k as f32 + 0.5));
        let before = (dev == &d).then(|| webgpu::sync_count(0));
        {
            let _no_waits = debug::forbid_sync();
            let h = w.embedding(&tokens).unwrap();
            h.mul(&scale).unwrap().sum().unwrap().backward().unwrap();
        }
        if let Some(b) = before {
            assert_eq!(webgpu::sync_count(0), b, "a host wait in the step");
        }
        w.grad().unwrap()
    };
    assert_eq!(bits(&step(&d)), bits(&step(&Device::Cpu)));
}
