//! `distributed::launch_with` as a process launcher, with `/bin/sh` as the ranks' program (no
//! process group is made: the launcher's side only).
//!
//! `launch_with` treats a process with `STRIDE_RANK` or `RANK` in its environment as a rank,
//! so nothing here sets them in the test process; the tests that need a launcher to be
//! signalled, or a rank's environment, run this test binary again as a child (`helper`).
#![cfg(target_os = "linux")]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stride_core::distributed::{launch_with, LaunchOptions, Launched};
use stride_core::{Device, Error};

const HELPER: &str = "STRIDE_LAUNCH_TEST_HELPER";

fn no_rank_here() {
    assert!(
        std::env::var_os("STRIDE_RANK").is_none() && std::env::var_os("RANK").is_none(),
        "run these tests without STRIDE_RANK / RANK in the environment: launch_with would take the test process for a rank"
    );
}

/// Options for `/bin/sh -c script sh extra...` on `devices`.
fn sh(devices: &[Device], script: &str, extra: &[&Path]) -> LaunchOptions {
    let mut o = LaunchOptions::new(devices);
    o.program = Some(PathBuf::from("/bin/sh"));
    let mut args: Vec<OsString> = vec!["-c".into(), script.into(), "sh".into()];
    args.extend(extra.iter().map(|p| p.as_os_str().to_owned()));
    o.args = Some(args);
    o.grace = Duration::from_secs(2);
    o
}

fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!(
        "stride-launch-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn distributed(e: Error) -> (&'static str, Option<usize>, String) {
    match e {
        Error::Distributed { op, rank, msg } => (op, rank, msg),
        other => panic!("expected Error::Distributed, got {other:?}"),
    }
}

fn alive(pid: u32) -> bool {
    // reaped children leave /proc; a zombie would still be there, so check its state too
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// pids written by the ranks into `dir/pid.<rank>`.
fn pids(dir: &Path) -> Vec<(String, u32)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(rank) = name.strip_prefix("pid.") {
            let pid = std::fs::read_to_string(e.path()).unwrap();
            v.push((rank.to_string(), pid.trim().parse().unwrap()));
        }
    }
    v
}

#[test]
fn all_ranks_succeed_gives_parent() {
    no_rank_here();
    let r = launch_with(sh(&[Device::Cpu; 3], "exit 0", &[])).unwrap();
    assert!(matches!(r, Launched::Parent));
}

#[test]
fn one_rank_is_allowed() {
    no_rank_here();
    let r = launch_with(sh(&[Device::Cpu], "exit 0", &[])).unwrap();
    assert!(matches!(r, Launched::Parent));
}

#[test]
fn no_devices_is_an_error() {
    no_rank_here();
    let (op, rank, msg) = distributed(launch_with(sh(&[], "exit 0", &[])).err().unwrap());
    assert_eq!((op, rank), ("launch", None));
    assert!(msg.contains("no devices"), "{msg}");
}

#[test]
fn a_failing_rank_stops_the_others() {
    no_rank_here();
    let dir = temp_dir("fail");
    // the others record their pid (then become `sleep`); rank 1 gives them time, then fails
    let script = r#"if [ "$STRIDE_RANK" = 1 ]; then sleep 0.3; exit 3; fi
echo $$ > "$1/pid.$STRIDE_RANK"; exec sleep 30"#;
    let t = Instant::now();
    let e = launch_with(sh(&[Device::Cpu; 4], script, &[&dir]))
        .err()
        .expect("rank 1 fails");
    let elapsed = t.elapsed();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    let (op, rank, msg) = distributed(e);
    assert_eq!((op, rank), ("launch", Some(1)), "{msg}");
    assert!(msg.contains("rank 1"), "{msg}");
    assert!(msg.contains("exit code 3"), "{msg}");
    assert!(msg.contains("cpu"), "{msg}");
    assert!(msg.contains("pid"), "{msg}");
    assert!(msg.contains("stopped"), "{msg}");
    let p = pids(&dir);
    assert_eq!(
        p.len(),
        3,
        "ranks 0, 2, 3 should have written their pids: {p:?}"
    );
    for (rank, pid) in p {
        assert!(!alive(pid), "rank {rank} (pid {pid}) is still running");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_rank_killed_by_a_signal_is_reported() {
    no_rank_here();
    let script = r#"if [ "$STRIDE_RANK" = 0 ]; then kill -9 $$; fi; exec sleep 30"#;
    let t = Instant::now();
    let e = launch_with(sh(&[Device::Cpu; 2], script, &[]))
        .err()
        .expect("rank 0 is killed");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let (op, rank, msg) = distributed(e);
    assert_eq!((op, rank), ("launch", Some(0)), "{msg}");
    assert!(msg.contains("rank 0"), "{msg}");
    assert!(msg.contains("signal 9"), "{msg}");
    assert!(msg.contains("SIGKILL"), "{msg}");
}

#[test]
fn a_rank_that_ignores_sigterm_is_killed_after_the_grace() {
    no_rank_here();
    let dir = temp_dir("grace");
    // rank 1 ignores SIGTERM (the shell's trap) and loops; it must be killed after the grace
    let script = r#"if [ "$STRIDE_RANK" = 0 ]; then sleep 0.2; exit 5; fi
trap '' TERM; echo $$ > "$1/pid.$STRIDE_RANK"; while :; do sleep 0.05; done"#;
    let mut o = sh(&[Device::Cpu; 2], script, &[&dir]);
    o.grace = Duration::from_millis(500);
    let t = Instant::now();
    let (_, rank, msg) = distributed(launch_with(o).err().expect("rank 0 fails"));
    let elapsed = t.elapsed();
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(rank, Some(0), "{msg}");
    assert!(msg.contains("exit code 5"), "{msg}");
    assert!(msg.contains("1 still running"), "{msg}");
    assert!(msg.contains("killed with SIGKILL"), "{msg}");
    for (rank, pid) in pids(&dir) {
        assert!(!alive(pid), "rank {rank} (pid {pid}) is still running");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ranks_get_the_environment_contract() {
    no_rank_here();
    let dir = temp_dir("env");
    let script = r#"stdin=tty; if [ "$STRIDE_RANK" != 0 ]; then if read x; then stdin=data; else stdin=eof; fi; fi
echo "$STRIDE_RANK $STRIDE_WORLD_SIZE $STRIDE_LOCAL_RANK $STRIDE_DEVICE $STRIDE_MASTER_ADDR $STRIDE_MASTER_PORT ${NCCL_NVLS_ENABLE-unset} $stdin" > "$1/rank.$STRIDE_RANK""#;
    let devices = [Device::Cpu, Device::Cuda(1), Device::Cuda(0)];
    let r = launch_with(sh(&devices, script, &[&dir])).unwrap();
    assert!(matches!(r, Launched::Parent));
    let nvls = std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "0".into());
    let mut port = None;
    for (i, d) in devices.iter().enumerate() {
        let line = std::fs::read_to_string(dir.join(format!("rank.{i}"))).unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 8, "{line:?}");
        assert_eq!(f[0], i.to_string(), "rank: {line:?}");
        assert_eq!(f[1], "3", "world size: {line:?}");
        assert_eq!(f[2], i.to_string(), "local rank: {line:?}");
        assert_eq!(f[3], d.to_string(), "device: {line:?}");
        assert_eq!(f[4], "127.0.0.1", "master addr: {line:?}");
        let p: u16 = f[5].parse().unwrap();
        assert_ne!(p, 0);
        assert_eq!(*port.get_or_insert(p), p, "every rank gets the same port");
        assert_eq!(f[6], nvls, "NCCL_NVLS_ENABLE: {line:?}");
        if i > 0 {
            assert_eq!(f[7], "eof", "stdin of rank {i}: {line:?}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn given_address_and_port_are_passed_on() {
    no_rank_here();
    let dir = temp_dir("port");
    let script = r#"echo "$STRIDE_MASTER_ADDR $STRIDE_MASTER_PORT" > "$1/rank.$STRIDE_RANK""#;
    let mut o = sh(&[Device::Cpu; 2], script, &[&dir]);
    o.master_addr = "10.1.2.3".into();
    o.master_port = Some(29517);
    assert!(matches!(launch_with(o).unwrap(), Launched::Parent));
    for i in 0..2 {
        let line = std::fs::read_to_string(dir.join(format!("rank.{i}"))).unwrap();
        assert_eq!(line.trim(), "10.1.2.3 29517");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_unknown_program_is_an_error() {
    no_rank_here();
    let mut o = LaunchOptions::new(&[Device::Cpu, Device::Cpu]);
    o.program = Some(PathBuf::from("/nonexistent/stride-no-such-program"));
    o.args = Some(vec![]);
    let (op, rank, msg) = distributed(launch_with(o).err().expect("cannot start"));
    assert_eq!((op, rank), ("launch", Some(0)), "{msg}");
    assert!(msg.contains("/nonexistent/stride-no-such-program"), "{msg}");
}

/// Runs this test binary's `helper` test in a child process with `HELPER=mode`.
fn run_helper(mode: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "helper",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HELPER, mode)
    .env_remove("STRIDE_RANK")
    .env_remove("RANK")
    .stdin(Stdio::null());
    c
}

/// Not a test by itself: what the tests below run in a child process.
#[test]
#[ignore]
fn helper() {
    match std::env::var(HELPER).as_deref() {
        // a launcher of two sleeping ranks, to be sent SIGTERM by the test
        Ok("launcher") => {
            let before = sigterm_handler();
            let mut o = sh(&[Device::Cpu; 2], "exec sleep 30", &[]);
            o.grace = Duration::from_secs(2);
            let r = launch_with(o);
            assert_eq!(sigterm_handler(), before, "the SIGTERM handler is restored");
            match r {
                Ok(_) => println!("helper: Parent"),
                Err(e) => println!("helper: error: {e}"),
            }
        }
        // a process with a (bad) rank in its environment: launch_with takes it for a rank
        Ok("rank") => {
            let mut o = sh(&[Device::Cpu; 2], "echo started >&2", &[]);
            o.grace = Duration::from_secs(1);
            match launch_with(o) {
                Ok(Launched::Parent) => println!("helper: Parent"),
                Ok(Launched::Rank(_)) => println!("helper: Rank"),
                Err(e) => println!("helper: error: {e}"),
            }
        }
        _ => {}
    }
}

fn sigterm_handler() -> usize {
    // SAFETY: queries the current action only
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(
            libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old),
            0
        );
        old.sa_sigaction
    }
}

#[test]
fn sigterm_to_the_launcher_is_forwarded_to_every_rank() {
    no_rank_here();
    let t = Instant::now();
    let mut child = run_helper("launcher")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let launcher = child.id();
    // the launcher's "stride launch: rank i on cpu: pid P" lines, read in a thread
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let _ = tx.send(line);
        }
    });
    let mut ranks = Vec::new();
    while ranks.len() < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the launcher prints one line per rank");
        if let Some(rest) = line.strip_prefix("stride launch: rank ") {
            let pid: u32 = rest.rsplit_once("pid ").unwrap().1.parse().unwrap();
            assert!(rest.contains(" on cpu: "), "{line}");
            ranks.push(pid);
        }
    }
    for &pid in &ranks {
        assert!(alive(pid));
    }
    // SAFETY: plain syscall to our own child
    assert_eq!(
        unsafe { libc::kill(launcher as libc::pid_t, libc::SIGTERM) },
        0
    );
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the launcher survives the signal: {:?}\n{stdout}",
        out.status
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(stdout.contains("helper: error: launch (rank "), "{stdout}");
    assert!(stdout.contains("killed by signal 15 (SIGTERM)"), "{stdout}");
    assert!(stdout.contains("forwarded"), "{stdout}");
    for pid in ranks {
        assert!(!alive(pid), "pid {pid} is still running");
    }
}

#[test]
fn a_process_with_a_rank_does_not_launch() {
    no_rank_here();
    let out = run_helper("rank")
        .env("STRIDE_RANK", "not-a-number")
        .env("STRIDE_WORLD_SIZE", "2")
        .env("STRIDE_MASTER_PORT", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("helper: error: "), "{stdout}");
    assert!(stdout.contains("not-a-number"), "{stdout}");
    assert!(!stderr.contains("stride launch:"), "{stderr}");
    assert!(!stderr.contains("started"), "{stderr}");
}
