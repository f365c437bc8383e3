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

/// Runs `peer_death_child` of this test binary as rank `rank` of 2 on `device`.
fn spawn_rank(rank: usize, device: &str, port: u16) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["peer_death_child", "--exact", "--ignored", "--nocapture"])
        .env("STRIDE_RANK", rank.to_string())
        .env("STRIDE_WORLD_SIZE", "2")
        .env("STRIDE_LOCAL_RANK", rank.to_string())
        .env("STRIDE_MASTER_ADDR", "127.0.0.1")
        .env("STRIDE_MASTER_PORT", port.to_string())
        .env("STRIDE_DEVICE", device)
        // far beyond the test's limit: only hearing of the dead rank can end it in time
        .env("STRIDE_DIST_TIMEOUT", "300")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A rank process that dies (exits without leaving its group) while the other waits in a
/// collective: the survivor's wait ends within seconds in an error naming the dead rank, long
/// before the timeout — on the CPU through the rendezvous store's waits, on GPUs through the
/// NCCL watchdog, which hears of the lost connection from the store.
fn a_dead_rank_case(devices: [&str; 2]) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t0 = Instant::now();
    let r0 = spawn_rank(0, devices[0], port);
    let r1 = spawn_rank(1, devices[1], port);
    let o1 = r1.wait_with_output().unwrap();
    assert_eq!(
        o1.status.code(),
        Some(3),
        "rank 1 exits as the test made it"
    );
    let o0 = r0.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o0.stdout);
    assert!(o0.status.success(), "rank 0: {out}");
    assert!(out.contains("SURVIVOR-OK"), "rank 0 did not report: {out}");
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_dead_rank_ends_the_others_wait_on_the_cpu() {
    a_dead_rank_case(["cpu", "cpu"]);
}

#[test]
fn a_dead_rank_ends_the_others_wait_on_gpus() {
    if cuda::require_gpus_or_skip("a_dead_rank_ends_the_others_wait_on_gpus", 2).is_none() {
        return;
    }
    a_dead_rank_case(["cuda:0", "cuda:1"]);
}

/// One rank of [`a_dead_rank_case`] (run only as its child process).
#[test]
#[ignore = "a child process of a_dead_rank_ends_the_others_wait_*"]
fn peer_death_child() {
    if std::env::var_os("STRIDE_RANK").is_none() {
        return;
    }
    let g = stride_core::distributed::ProcessGroup::from_env().expect("joining the group");
    if g.rank() == 1 {
        // rank 0 is in its all-reduce by now; die without a goodbye
        std::thread::sleep(Duration::from_millis(500));
        std::process::exit(3);
    }
    let t0 = Instant::now();
    let t = Tensor::ones([1 << 20], DType::F32, &g.device()).unwrap();
    // on the CPU the collective itself fails; on CUDA it is queued and the read fails
    let e = match g.all_reduce_(&t, ReduceOp::Sum) {
        Err(e) => e.to_string(),
        Ok(w) => {
            w.wait().unwrap();
            t.to_vec::<f32>()
                .expect_err("a read after a collective with a dead peer")
                .to_string()
        }
    };
    assert!(e.contains("rank 1 disconnected"), "{e}");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    println!("SURVIVOR-OK ({:?}): {e}", t0.elapsed());
}
