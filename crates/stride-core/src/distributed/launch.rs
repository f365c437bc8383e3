//! [`launch`]: `torchrun`'s job as a library call. The program starts itself once per device;
//! in each copy the same call returns [`Launched::Rank`] with a ready [`ProcessGroup`], and in
//! the starting process it waits for them all and returns [`Launched::Parent`].
//!
//! The launcher (the process that was started by the user, with no rank in its environment)
//! starts one child per device with the same program and arguments and the rank's variables
//! (see the [module docs](super)), forwards `SIGINT` and `SIGTERM` it receives to every child,
//! and, as soon as one child fails, stops the others (`SIGTERM`, then `SIGKILL` after
//! [`LaunchOptions::grace`]) and returns an error naming the rank that failed first.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::env;
use super::{dist_err, ProcessGroup};
use crate::{Device, Result};

/// What [`launch`] returns in each process.
pub enum Launched {
    /// The launcher: every rank has exited successfully (a failing rank is an error instead).
    Parent,
    /// A rank started by the launcher (or by `torchrun`), with its process group ready.
    Rank(ProcessGroup),
}

/// How [`launch_with`] starts the ranks. [`LaunchOptions::new`] gives the defaults; change
/// fields as needed.
///
/// ```
/// use std::time::Duration;
/// use stride_core::distributed::LaunchOptions;
/// use stride_core::Device;
/// let mut o = LaunchOptions::new(&[Device::Cpu, Device::Cpu]);
/// o.grace = Duration::from_secs(1);
/// assert_eq!(o.master_addr, "127.0.0.1");
/// assert_eq!(o.master_port, None);
/// ```
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// One rank per device, rank `i` on `devices[i]`; may repeat a device (several CPU
    /// ranks). Must not be empty.
    pub devices: Vec<Device>,
    /// Where rank 0 serves the rendezvous (`STRIDE_MASTER_ADDR`); default `127.0.0.1`.
    pub master_addr: String,
    /// The rendezvous port (`STRIDE_MASTER_PORT`); `None` (the default) picks a free port on
    /// the loopback interface.
    pub master_port: Option<u16>,
    /// After one rank fails (or a forwarded signal), how long the others get to exit after
    /// `SIGTERM` before `SIGKILL`; default 5 s.
    pub grace: Duration,
    /// The program each rank runs; `None` (the default) runs this program again
    /// ([`std::env::current_exe`]).
    pub program: Option<PathBuf>,
    /// The ranks' arguments (without the program name); `None` (the default) passes this
    /// process's arguments on.
    pub args: Option<Vec<OsString>>,
}

impl LaunchOptions {
    /// The defaults for one rank per device: rendezvous on `127.0.0.1` at a free port, 5 s of
    /// grace, this program with this process's arguments.
    pub fn new(devices: &[Device]) -> LaunchOptions {
        LaunchOptions {
            devices: devices.to_vec(),
            master_addr: "127.0.0.1".to_string(),
            master_port: None,
            grace: Duration::from_secs(5),
            program: None,
            args: None,
        }
    }
}

/// Runs this program once per device, like `torchrun --nproc-per-node`, fork-like: in the
/// process the user started (the launcher) it starts the ranks, waits for them all and
/// returns [`Launched::Parent`]; in each rank the same call returns [`Launched::Rank`] with
/// its [`ProcessGroup`]. Shorthand for [`launch_with`]`(`[`LaunchOptions::new`]`(devices))`,
/// which says what it does in detail.
///
/// Call it early in `main`, before work that only the ranks should do: the launcher reaches
/// the call too, and everything before it runs once in the launcher and once in every rank.
///
/// ```no_run
/// use stride_core::distributed::{self, Launched};
/// use stride_core::Device;
/// fn main() -> stride_core::Result<()> {
///     match distributed::launch(&[Device::Cuda(0), Device::Cuda(1)])? {
///         // every rank has exited with success
///         Launched::Parent => println!("done"),
///         Launched::Rank(group) => {
///             // this process is one rank: train with `group`'s collectives
///             let _ = group;
///         }
///     }
///     Ok(())
/// }
/// ```
pub fn launch(devices: &[Device]) -> Result<Launched> {
    launch_with(LaunchOptions::new(devices))
}

/// [`launch`] with options.
///
/// If this process has a rank in its environment (`STRIDE_RANK`, or `torchrun`'s `RANK`), it
/// is a rank: the call returns [`Launched::Rank`] with [`ProcessGroup::from_env`] at once.
///
/// Otherwise it is the launcher. It starts `o.program` (default: this program) with `o.args`
/// (default: this process's arguments) once per device, rank `i` with `STRIDE_RANK=i`,
/// `STRIDE_WORLD_SIZE`, `STRIDE_LOCAL_RANK=i`, `STRIDE_MASTER_ADDR`, `STRIDE_MASTER_PORT` and
/// `STRIDE_DEVICE` (`cuda:1`, `cpu`), and `NCCL_NVLS_ENABLE=0` unless that is set already
/// (NVLink multicast stays off). Rank 0 keeps stdin; the others get none; all write to this
/// process's stdout and stderr. One line per rank goes to stderr as it starts:
/// `stride launch: rank {i} on {device}: pid {pid}`.
///
/// While they run, `SIGINT` and `SIGTERM` sent to the launcher are forwarded to every rank
/// (the launcher itself keeps running; ranks still running `grace` after the first forwarded
/// signal are killed). When a rank fails (nonzero exit code, or killed by a signal), the
/// others get `SIGTERM`, then `SIGKILL` after `o.grace`, and the call returns
/// [`Error::Distributed`](crate::Error::Distributed) naming the rank that failed first, its
/// device, its pid and how it ended. When all exit with success it returns
/// [`Launched::Parent`].
///
/// Errors: no devices; `master_port: Some(0)`; no free port; the program could not be started
/// (the ranks already started are killed); a rank failed. The launcher is Linux-only.
pub fn launch_with(o: LaunchOptions) -> Result<Launched> {
    if std::env::var_os(env::RANK).is_some() || std::env::var_os("RANK").is_some() {
        return Ok(Launched::Rank(ProcessGroup::from_env()?));
    }
    if o.devices.is_empty() {
        return Err(dist_err(
            "launch",
            None,
            "no devices: pass one device per rank to start (e.g. [Device::Cuda(0), Device::Cuda(1)])",
        ));
    }
    imp::run(o)?;
    Ok(Launched::Parent)
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::LaunchOptions;
    use crate::distributed::dist_err;
    use crate::Result;

    pub(super) fn run(_o: LaunchOptions) -> Result<()> {
        Err(dist_err(
            "launch",
            None,
            "starting ranks is supported on Linux only; start the processes yourself (e.g. with torchrun) and set STRIDE_RANK, STRIDE_WORLD_SIZE, STRIDE_MASTER_ADDR, STRIDE_MASTER_PORT",
        ))
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::OsString;
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use super::env;
    use super::LaunchOptions;
    use crate::distributed::dist_err;
    use crate::{Device, Result};

    const POLL: Duration = Duration::from_millis(20);
    /// After a rank fails, how long the launcher watches for others before naming the cause.
    const SETTLE: Duration = Duration::from_millis(300);

    /// The last signal (SIGINT or SIGTERM) the launcher received.
    static LAST_SIGNAL: AtomicUsize = AtomicUsize::new(0);
    /// How many such signals it has received: each launch forwards those it has not seen.
    static SIGNAL_COUNT: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn on_signal(sig: libc::c_int) {
        // async-signal-safe: atomics only
        LAST_SIGNAL.store(sig as usize, Ordering::SeqCst);
        SIGNAL_COUNT.fetch_add(1, Ordering::SeqCst);
    }

    const FORWARDED: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

    /// The handlers in place before the first of the launches now running installed ours,
    /// and how many launches are running (several threads may launch at once).
    struct Handlers {
        users: usize,
        previous: Vec<(libc::c_int, libc::sigaction)>,
    }

    static HANDLERS: Mutex<Handlers> = Mutex::new(Handlers {
        users: 0,
        previous: Vec::new(),
    });

    /// Our SIGINT/SIGTERM handlers while alive; the previous ones are back when the last
    /// launch running drops its guard.
    struct SignalGuard;

    impl SignalGuard {
        fn install() -> SignalGuard {
            let mut h = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
            if h.users == 0 {
                h.previous.clear();
                for &sig in &FORWARDED {
                    // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, empty flags); the
                    // handler only touches atomics, so it is async-signal-safe.
                    unsafe {
                        let mut new: libc::sigaction = std::mem::zeroed();
                        new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                        new.sa_flags = libc::SA_RESTART;
                        libc::sigemptyset(&mut new.sa_mask);
                        let mut old: libc::sigaction = std::mem::zeroed();
                        if libc::sigaction(sig, &new, &mut old) == 0 {
                            h.previous.push((sig, old));
                        }
                    }
                }
            }
            h.users += 1;
            SignalGuard
        }
    }

    impl Drop for SignalGuard {
        fn drop(&mut self) {
            let mut h = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
            h.users = h.users.saturating_sub(1);
            if h.users == 0 {
                for (sig, old) in h.previous.drain(..) {
                    // SAFETY: restores the action sigaction gave us for this signal.
                    unsafe {
                        libc::sigaction(sig, &old, std::ptr::null_mut());
                    }
                }
            }
        }
    }

    enum State {
        Running,
        Exited(ExitStatus),
        /// `try_wait` failed: the child was killed and reaped (as far as possible).
        Lost(String),
    }

    struct Rank {
        device: Device,
        pid: u32,
        child: Child,
        state: State,
    }

    impl Rank {
        fn running(&self) -> bool {
            matches!(self.state, State::Running)
        }
        /// Sends `sig` to a child not reaped yet (so its pid is still ours).
        fn signal(&self, sig: libc::c_int) {
            if self.running() {
                if let Ok(pid) = libc::pid_t::try_from(self.pid) {
                    // SAFETY: plain syscall; the pid is our unreaped child.
                    unsafe {
                        libc::kill(pid, sig);
                    }
                }
            }
        }
        /// Polls once; `Some((description, killed by a signal))` when it has just ended with
        /// failure.
        fn poll(&mut self) -> Option<(String, bool)> {
            if !self.running() {
                return None;
            }
            match self.child.try_wait() {
                Ok(None) => None,
                Ok(Some(st)) => {
                    self.state = State::Exited(st);
                    (!st.success()).then(|| (describe(st), st.signal().is_some()))
                }
                Err(e) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let what = format!("could not be waited on ({e})");
                    self.state = State::Lost(what.clone());
                    Some((what, false))
                }
            }
        }
        /// SIGKILL and reap.
        fn kill_and_reap(&mut self) {
            if self.running() {
                self.signal(libc::SIGKILL);
                self.state = match self.child.wait() {
                    Ok(st) => State::Exited(st),
                    Err(e) => State::Lost(format!("could not be waited on ({e})")),
                };
            }
        }
    }

    /// The children started; whatever is still running when this is dropped (an error, a
    /// panic) is killed and reaped, so no rank outlives its launcher's call.
    struct Ranks(Vec<Rank>);

    impl Drop for Ranks {
        fn drop(&mut self) {
            for r in &mut self.0 {
                r.kill_and_reap();
            }
        }
    }

    fn signal_name(sig: i32) -> Option<&'static str> {
        Some(match sig {
            libc::SIGHUP => "SIGHUP",
            libc::SIGINT => "SIGINT",
            libc::SIGQUIT => "SIGQUIT",
            libc::SIGILL => "SIGILL",
            libc::SIGTRAP => "SIGTRAP",
            libc::SIGABRT => "SIGABRT",
            libc::SIGBUS => "SIGBUS",
            libc::SIGFPE => "SIGFPE",
            libc::SIGKILL => "SIGKILL",
            libc::SIGUSR1 => "SIGUSR1",
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGUSR2 => "SIGUSR2",
            libc::SIGPIPE => "SIGPIPE",
            libc::SIGALRM => "SIGALRM",
            libc::SIGTERM => "SIGTERM",
            libc::SIGXCPU => "SIGXCPU",
            libc::SIGXFSZ => "SIGXFSZ",
            libc::SIGSYS => "SIGSYS",
            _ => return None,
        })
    }

    fn describe_signal(sig: i32) -> String {
        match signal_name(sig) {
            Some(n) => format!("signal {sig} ({n})"),
            None => format!("signal {sig}"),
        }
    }

    /// "exit code 3", "killed by signal 9 (SIGKILL)".
    fn describe(st: ExitStatus) -> String {
        if let Some(code) = st.code() {
            format!("exit code {code}")
        } else if let Some(sig) = st.signal() {
            let core = if st.core_dumped() {
                ", core dumped"
            } else {
                ""
            };
            format!("killed by {}{core}", describe_signal(sig))
        } else {
            format!("{st}")
        }
    }

    fn free_port() -> Result<u16> {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| {
            dist_err(
                "launch",
                None,
                format!("could not find a free port for the rendezvous on 127.0.0.1 ({e}); set LaunchOptions::master_port"),
            )
        })?;
        let port = l.local_addr().map(|a| a.port()).map_err(|e| {
            dist_err(
                "launch",
                None,
                format!("could not read the free port bound on 127.0.0.1 ({e}); set LaunchOptions::master_port"),
            )
        })?;
        Ok(port)
    }

    fn say(line: &str) {
        // not eprintln!: a closed stderr must not panic the launcher
        let _ = writeln!(std::io::stderr(), "{line}");
    }

    pub(super) fn run(o: LaunchOptions) -> Result<()> {
        let n = o.devices.len();
        let port = match o.master_port {
            Some(0) => return Err(dist_err(
                "launch",
                None,
                "master_port 0 is not a port the ranks can meet at; use None to pick a free one",
            )),
            Some(p) => p,
            None => free_port()?,
        };
        let program = match &o.program {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(|e| {
                dist_err(
                    "launch",
                    None,
                    format!("could not find this program to start it again ({e}); set LaunchOptions::program"),
                )
            })?,
        };
        let args: Vec<OsString> = match &o.args {
            Some(a) => a.clone(),
            None => std::env::args_os().skip(1).collect(),
        };
        let set_nvls = std::env::var_os("NCCL_NVLS_ENABLE").is_none();
        let set_connect = std::env::var_os(crate::distributed::nccl::RUNTIME_CONNECT).is_none();

        // Handlers first, so that a signal arriving while the ranks start is forwarded too.
        let _signals = SignalGuard::install();
        let mut seen = SIGNAL_COUNT.load(Ordering::SeqCst);

        let mut ranks = Ranks(Vec::with_capacity(n));
        for (i, &device) in o.devices.iter().enumerate() {
            let mut cmd = Command::new(&program);
            cmd.args(&args)
                .env(env::RANK, i.to_string())
                .env(env::WORLD_SIZE, n.to_string())
                .env(env::LOCAL_RANK, i.to_string())
                .env(env::MASTER_ADDR, &o.master_addr)
                .env(env::MASTER_PORT, port.to_string())
                .env(env::DEVICE, device.to_string())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit());
            if set_nvls {
                cmd.env("NCCL_NVLS_ENABLE", "0");
            }
            if set_connect {
                // connections made at init, where every rank is present (see nccl.rs)
                cmd.env(crate::distributed::nccl::RUNTIME_CONNECT, "0");
            }
            if i > 0 {
                cmd.stdin(Stdio::null());
            }
            match cmd.spawn() {
                Ok(child) => {
                    let pid = child.id();
                    say(&format!("stride launch: rank {i} on {device}: pid {pid}"));
                    ranks.0.push(Rank {
                        device,
                        pid,
                        child,
                        state: State::Running,
                    });
                }
                Err(e) => {
                    let started = ranks.0.len();
                    drop(ranks); // kills and reaps those started
                    return Err(dist_err(
                        "launch",
                        Some(i),
                        format!(
                            "could not start {} for rank {i} on {device} ({e}){}",
                            program.display(),
                            if started > 0 {
                                format!("; the {started} rank(s) already started were killed")
                            } else {
                                String::new()
                            }
                        ),
                    ));
                }
            }
        }

        // (rank, how it ended): the cause reported
        let mut failure: Option<(usize, String)> = None;
        // every rank that failed on its own, in the order seen: (rank, how, by a signal)
        let mut failed: Vec<(usize, String, bool)> = vec![];
        // after the first failure, how long to watch for others before stopping the rest:
        // a rank killed from outside takes its peers down with errors of their own (a lost
        // connection) within moments, and the killed one is the cause to name
        let mut settle_until: Option<Instant> = None;
        let mut forwarded: Option<i32> = None;
        // when the ranks still running get SIGKILL
        let mut kill_at: Option<Instant> = None;
        let mut terminated = 0usize;
        let mut killed = 0usize;
        loop {
            let count = SIGNAL_COUNT.load(Ordering::SeqCst);
            if count != seen {
                seen = count;
                let sig = LAST_SIGNAL.load(Ordering::SeqCst) as libc::c_int;
                if sig != 0 {
                    for r in &ranks.0 {
                        r.signal(sig);
                    }
                    forwarded.get_or_insert(sig);
                    let at = Instant::now() + o.grace;
                    kill_at.get_or_insert(at);
                }
            }
            for (i, r) in ranks.0.iter_mut().enumerate() {
                if let Some((how, by_signal)) = r.poll() {
                    if terminated == 0 && forwarded.is_none() {
                        failed.push((i, how, by_signal));
                        settle_until.get_or_insert(Instant::now() + SETTLE);
                    } else if failure.is_none() {
                        failure = Some((i, how));
                    }
                }
            }
            // the cause: the first rank killed by a signal, else the first to fail
            if failure.is_none() && !failed.is_empty() {
                let settled = settle_until.is_some_and(|t| Instant::now() >= t)
                    || ranks.0.iter().all(|r| !r.running());
                if settled {
                    let pick = failed.iter().find(|f| f.2).unwrap_or(&failed[0]);
                    let mut how = pick.1.clone();
                    let others: Vec<String> = failed
                        .iter()
                        .filter(|f| f.0 != pick.0)
                        .map(|f| format!("rank {} also failed ({})", f.0, f.1))
                        .collect();
                    if !others.is_empty() {
                        how = format!("{how}; {}", others.join(", "));
                    }
                    failure = Some((pick.0, how));
                }
            }
            if ranks.0.iter().all(|r| !r.running()) {
                break;
            }
            if failure.is_some() && terminated == 0 {
                for r in ranks.0.iter().filter(|r| r.running()) {
                    r.signal(libc::SIGTERM);
                    terminated += 1;
                }
                let at = Instant::now() + o.grace;
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
            }
            if kill_at.is_some_and(|k| Instant::now() >= k) {
                for r in ranks.0.iter_mut() {
                    if r.running() {
                        killed += 1;
                        r.kill_and_reap();
                    }
                }
                // a rank that had not failed before is killed now; report it if none had
                if failure.is_none() {
                    if let Some((i, r)) = ranks
                        .0
                        .iter()
                        .enumerate()
                        .find(|(_, r)| !matches!(r.state, State::Exited(st) if st.success()))
                    {
                        failure = Some((
                            i,
                            match &r.state {
                                State::Exited(st) => describe(*st),
                                State::Lost(w) => w.clone(),
                                State::Running => "still running".to_string(),
                            },
                        ));
                    }
                }
                break;
            }
            std::thread::sleep(POLL);
        }

        let Some((i, how)) = failure else {
            return Ok(());
        };
        let r = &ranks.0[i];
        let grace = o.grace.as_secs_f64();
        let stopped = if terminated == 0 && killed == 0 {
            "the other ranks had already ended".to_string()
        } else if terminated == 0 {
            format!("the other ranks were stopped ({killed} killed with SIGKILL)")
        } else if killed == 0 {
            format!(
                "the other ranks were stopped ({terminated} sent SIGTERM, all ended within the grace of {grace} s)"
            )
        } else {
            format!(
                "the other ranks were stopped ({terminated} sent SIGTERM; {killed} still running after {grace} s, killed with SIGKILL)"
            )
        };
        let signal = match forwarded {
            Some(sig) => format!(
                "; the launcher had received {} and forwarded it to every rank",
                describe_signal(sig)
            ),
            None => String::new(),
        };
        Err(dist_err(
            "launch",
            Some(i),
            format!(
                "rank {i} of {n} on {} (pid {}) failed: {how}; {stopped}{signal}",
                r.device, r.pid
            ),
        ))
    }
}
