//! A collective that never completes — its peer rank never calls it, as when a rank dies or
//! takes another branch — ends in an error within `STRIDE_DIST_TIMEOUT`, not a hang: on two
//! GPUs the watchdog aborts the NCCL communicator and the read that waited returns the error
//! (and so does every later read: what the GPU computed after is not to be trusted; this is
//! why this test has a process of its own). On the CPU the store reports the timeout.
//! Skipped, saying so, without two GPUs for the CUDA case.

use std::time::{Duration, Instant};
use stride_core::distributed::{run_threads, ReduceOp};
use stride_core::{cuda, DType, Device, Tensor};

#[test]
fn a_collective_without_its_peer_is_an_error_not_a_hang() {
    // one variable for the whole process: both cases use it
    std::env::set_var("STRIDE_DIST_TIMEOUT", "3");
    // the CPU: rank 1 never joins the all-reduce; it waits at a barrier rank 0 never reaches
    // until rank 0's error (a timeout of the store's wait) has been returned
    let t0 = Instant::now();
    let out = run_threads(&[Device::Cpu, Device::Cpu], |g| {
        if g.rank() == 0 {
            let t = Tensor::ones([4], DType::F32, &Device::Cpu)?;
            let e = g
                .all_reduce_(&t, ReduceOp::Sum)
                .err()
                .map(|e| e.to_string());
            Ok(e)
        } else {
            std::thread::sleep(Duration::from_secs(5));
            Ok(None)
        }
    });
    let e = out[0]
        .as_ref()
        .expect("rank 0")
        .clone()
        .expect("rank 0's all-reduce must fail");
    assert!(e.contains("did not complete within"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(30));

    let Some(gpus) = cuda::require_gpus_or_skip(
        "a_collective_without_its_peer_is_an_error_not_a_hang (CUDA)",
        2,
    ) else {
        return;
    };
    let t0 = Instant::now();
    // rank 1 keeps its communicator until rank 0 is done (tearing it down while rank 0
    // waits in a collective on it is another matter than a rank that never calls one)
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let out = run_threads(&gpus, move |g| {
        if g.rank() == 0 {
            let t = Tensor::ones([1 << 20], DType::F32, &g.device())?;
            g.all_reduce_(&t, ReduceOp::Sum)?.wait()?;
            // the read waits for the collective, which waits for rank 1 forever
            let e = t.to_vec::<f32>().err().map(|e| e.to_string());
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(e)
        } else {
            while !done.load(std::sync::atomic::Ordering::SeqCst)
                && t0.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(None)
        }
    });
    let e = out[0]
        .as_ref()
        .expect("rank 0")
        .clone()
        .expect("the read after a stuck collective must fail");
    assert!(
        e.contains("did not finish within") && e.contains("aborted"),
        "{e}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t0.elapsed()
    );
}
