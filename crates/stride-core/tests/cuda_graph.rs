//! CUDA graphs: a replay computes what eager execution does, the capture's memory stays the
//! graph's, and what a capture cannot record fails loudly. Each test skips, saying so,
//! without a GPU (`STRIDE_REQUIRE_CUDA=1` makes that a failure).

use std::sync::Mutex;
use stride_core::cuda::{self, CudaGraph};
use stride_core::{DType, Device, Error, Tensor};

/// Captures record everything queued on the device's stream, from any test's thread: the
/// tests of this file take turns.
static TURN: Mutex<()> = Mutex::new(());

fn gpu(test: &str) -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    let dev = cuda::require_or_skip(test)?;
    Some((dev, TURN.lock().unwrap_or_else(|e| e.into_inner())))
}

/// A small transformer-like step: matmul (cuBLAS), softmax, a fused norm, an index gather
/// with a device-side check, in-place updates.
fn step(x: &Tensor, w: &Tensor, ids: &Tensor, table: &Tensor) -> stride_core::Result<Tensor> {
    let h = x.matmul(w)?.softmax(-1)?;
    let g = table.index_select(0, ids)?;
    let y = h.add(&g)?.relu()?;
    y.mul(0.5)?.add(&h)
}

#[test]
fn replay_equals_eager_and_follows_its_inputs() {
    let Some((dev, _turn)) = gpu("replay_equals_eager_and_follows_its_inputs") else {
        return;
    };
    let x = Tensor::randn([8, 64], DType::F32, &dev, None).unwrap();
    let w = Tensor::randn([64, 96], DType::F32, &dev, None).unwrap();
    let table = Tensor::randn([10, 96], DType::F32, &dev, None).unwrap();
    let ids = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 9, 2, 6], [8])
        .unwrap()
        .to_device(&dev)
        .unwrap();
    let eager = step(&x, &w, &ids, &table).unwrap();
    let launches = cuda::launch_count(0);
    let (graph, out) = CudaGraph::capture(&dev, || step(&x, &w, &ids, &table)).unwrap();
    // every kernel the capture queued is a node (copies and memsets are nodes too)
    let captured = (cuda::launch_count(0) - launches) as usize;
    assert!(
        graph.node_count().unwrap() >= captured.max(6),
        "{}",
        graph.node_count().unwrap()
    );
    graph.replay().unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), eager.to_vec::<f32>().unwrap());

    // new inputs, written in place: the replay follows them, bit for bit the eager result
    x.copy_(&Tensor::randn([8, 64], DType::F32, &dev, None).unwrap())
        .unwrap();
    ids.copy_(
        &Tensor::from_vec(vec![0i64, 0, 9, 8, 7, 6, 5, 4], [8])
            .unwrap()
            .to_device(&dev)
            .unwrap(),
    )
    .unwrap();
    graph.replay().unwrap();
    let eager = step(&x, &w, &ids, &table).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), eager.to_vec::<f32>().unwrap());
}

#[test]
fn the_capture_memory_is_never_handed_to_eager_work() {
    let Some((dev, _turn)) = gpu("the_capture_memory_is_never_handed_to_eager_work") else {
        return;
    };
    let x = Tensor::randn([256, 256], DType::F32, &dev, None).unwrap();
    // temporaries of the same size class as the eager tensors below, freed inside the capture
    let (graph, out) = CudaGraph::capture(&dev, || {
        let a = x.exp()?;
        let b = a.mul(3.0)?;
        drop(a);
        b.add(1.0)
    })
    .unwrap();
    // eager tensors made now must not share a block with the graph's temporaries
    let eager: Vec<Tensor> = (0..8)
        .map(|k| Tensor::full([256, 256], k as f64, DType::F32, &dev).unwrap())
        .collect();
    graph.replay().unwrap();
    graph.replay().unwrap();
    for (k, t) in eager.iter().enumerate() {
        assert!(
            t.to_vec::<f32>().unwrap().iter().all(|&v| v == k as f32),
            "an eager tensor was overwritten by a replay"
        );
    }
    let want = x.exp().unwrap().mul(3.0).unwrap().add(1.0).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    // the output, dropped, goes back to the graph's pool: a replay may still write it
    drop(out);
    let fresh = Tensor::full([256, 256], 7.0, DType::F32, &dev).unwrap();
    graph.replay().unwrap();
    assert!(fresh.to_vec::<f32>().unwrap().iter().all(|&v| v == 7.0));
}

#[test]
fn a_host_wait_inside_a_capture_is_an_error_and_the_device_stays_usable() {
    let Some((dev, _turn)) =
        gpu("a_host_wait_inside_a_capture_is_an_error_and_the_device_stays_usable")
    else {
        return;
    };
    let x = Tensor::randn([16], DType::F32, &dev, None).unwrap();
    let err = CudaGraph::capture(&dev, || {
        let y = x.exp()?;
        y.to_vec::<f32>()?; // a read: the host would wait
        Ok(y)
    })
    .unwrap_err();
    assert!(matches!(err, Error::HostSync { .. }), "{err}");
    // an upload from host memory is refused too
    let err = CudaGraph::capture(&dev, || {
        Tensor::from_vec(vec![1.0f32; 4], [4])?.to_device(&dev)
    });
    assert!(err.is_err(), "an upload inside a capture must fail");
    let y = x.exp().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(y.len(), 16);
}

#[test]
fn a_failed_check_inside_a_replay_is_reported_at_the_next_read() {
    let Some((dev, _turn)) = gpu("a_failed_check_inside_a_replay_is_reported_at_the_next_read")
    else {
        return;
    };
    let table = Tensor::randn([10, 4], DType::F32, &dev, None).unwrap();
    let ids = Tensor::from_vec(vec![1i64, 2], [2])
        .unwrap()
        .to_device(&dev)
        .unwrap();
    let (graph, out) = CudaGraph::capture(&dev, || table.index_select(0, &ids)).unwrap();
    graph.replay().unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap().len(), 8);
    ids.fill_(12i64).unwrap(); // out of range for 10 rows
    graph.replay().unwrap();
    let err = out.to_vec::<f32>().unwrap_err();
    assert!(matches!(err, Error::DeviceCheck { .. }), "{err}");
    assert!(err.to_string().contains("12"), "{err}");
    assert!(cuda::take_error(0).unwrap().is_some());
    ids.fill_(3i64).unwrap();
    graph.replay().unwrap();
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        table
            .select(0, 3)
            .unwrap()
            .repeat(&[2])
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    );
}

#[test]
fn another_thread_queuing_work_during_a_capture_is_an_error() {
    let Some((dev, _turn)) = gpu("another_thread_queuing_work_during_a_capture_is_an_error") else {
        return;
    };
    let x = Tensor::randn([16], DType::F32, &dev, None).unwrap();
    let (_graph, other) = CudaGraph::capture(&dev, || {
        let y = x.exp()?;
        let other = std::thread::scope(|s| s.spawn(|| x.mul(2.0)).join().unwrap());
        Ok((y, other))
    })
    .unwrap();
    let err = other.1.unwrap_err();
    assert!(err.to_string().contains("capturing a CUDA graph"), "{err}");
}

#[test]
fn graphs_need_a_cuda_device() {
    let err = CudaGraph::capture(&Device::Cpu, || Ok(())).unwrap_err();
    assert!(
        err.to_string().contains("CUDA graphs need a CUDA device"),
        "{err}"
    );
}
