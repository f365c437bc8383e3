//! The rendezvous: a key-value store served by rank 0 over TCP (PyTorch's `TCPStore`). Ranks
//! use it to pass NCCL's unique id, for barriers, and as the transport of the CPU backend's
//! collectives. A rank whose connection drops without saying goodbye is reported to every
//! rank waiting on the store, so a crash stops the others in moments instead of a timeout.

use super::dist_err;
use crate::Result;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const SET: u8 = 1;
const GET: u8 = 2;
const ADD: u8 = 3;
const WAIT_AT_LEAST: u8 = 4;
const HELLO: u8 = 5;
const BYE: u8 = 6;
const WATCH: u8 = 7;

const OK: u8 = 0;
const TIMEOUT: u8 = 1;
const PEER_GONE: u8 = 2;
/// The answer to `WATCH` when the run ended cleanly.
const SHUTDOWN: u8 = 3;

/// Largest value the store accepts (a CPU collective's buffer travels through it).
const MAX_VALUE: u64 = 1 << 34;

#[derive(Default)]
struct State {
    values: HashMap<String, (Vec<u8>, usize)>,
    counters: HashMap<String, i64>,
    /// A rank that disconnected without `BYE`: every waiter fails from then on.
    gone: Option<usize>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// The server, run by rank 0 on threads of its own; stops when dropped.
pub(crate) struct StoreServer {
    shared: Arc<Shared>,
    port: u16,
}

impl StoreServer {
    /// Listens on `addr:port` (port 0: any free port).
    pub fn start(addr: &str, port: u16) -> Result<StoreServer> {
        let op = "rendezvous";
        let listener = TcpListener::bind((addr, port)).map_err(|e| {
            dist_err(
                op,
                Some(0),
                format!("rank 0 cannot listen on {addr}:{port} for the rendezvous: {e} (is another run using this port? set STRIDE_MASTER_PORT)"),
            )
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| dist_err(op, Some(0), e.to_string()))?
            .port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("stride-store".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.lock().shutdown {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let s = s.clone();
                    let _ = std::thread::Builder::new()
                        .name("stride-store-conn".into())
                        .spawn(move || serve(&s, conn));
                }
            })
            .map_err(|e| dist_err(op, Some(0), format!("starting the store thread: {e}")))?;
        Ok(StoreServer { shared, port })
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.changed.notify_all();
        // wake the accept loop so it sees the flag
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Waits until `ready` holds, the deadline passes, or a rank is gone.
    fn wait_for<T>(
        &self,
        timeout: Duration,
        mut ready: impl FnMut(&mut State) -> Option<T>,
    ) -> std::result::Result<T, u8> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if let Some(v) = ready(&mut st) {
                return Ok(v);
            }
            if st.gone.is_some() || st.shutdown {
                return Err(PEER_GONE);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TIMEOUT);
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn read_u64(c: &mut TcpStream) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    c.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_bytes(c: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let n = read_u64(c)?;
    if n > MAX_VALUE {
        return Err(std::io::Error::other(format!("a value of {n} bytes")));
    }
    let mut v = zeroed(n)?;
    c.read_exact(&mut v)?;
    Ok(v)
}

/// `n` zero bytes, or an error where the memory can't be had (never an abort).
fn zeroed(n: u64) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n as usize)
        .map_err(|_| std::io::Error::other(format!("no memory for a value of {n} bytes")))?;
    v.resize(n as usize, 0);
    Ok(v)
}

fn write_frame(c: &mut TcpStream, status: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut m = Vec::with_capacity(9 + payload.len());
    m.push(status);
    m.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    m.extend_from_slice(payload);
    c.write_all(&m)
}

/// One client connection: requests until `BYE` (clean) or a broken connection (the rank is
/// gone: everyone waiting is told).
fn serve(s: &Shared, mut c: TcpStream) {
    let _ = c.set_nodelay(true);
    let mut rank: Option<usize> = None;
    let clean = (|| -> std::io::Result<bool> {
        loop {
            let mut cmd = [0u8; 1];
            c.read_exact(&mut cmd)?;
            match cmd[0] {
                HELLO => rank = Some(read_u64(&mut c)? as usize),
                BYE => {
                    write_frame(&mut c, OK, &[])?;
                    return Ok(true);
                }
                WATCH => {
                    // answered once a rank is gone or the run is over; this connection
                    // closing says nothing about its rank (its own connection does)
                    let _ = read_u64(&mut c)?;
                    while let Err(TIMEOUT) = s.wait_for(Duration::from_secs(3600), |_| None::<()>) {
                    }
                    let code = match s.lock().gone {
                        Some(_) => PEER_GONE,
                        None => SHUTDOWN,
                    };
                    write_frame(&mut c, code, &gone_payload(s))?;
                    return Ok(true);
                }
                SET => {
                    let key = String::from_utf8_lossy(&read_bytes(&mut c)?).into_owned();
                    let reads = read_u64(&mut c)? as usize;
                    let value = read_bytes(&mut c)?;
                    s.lock().values.insert(key, (value, reads.max(1)));
                    s.changed.notify_all();
                    write_frame(&mut c, OK, &[])?;
                }
                GET => {
                    let key = String::from_utf8_lossy(&read_bytes(&mut c)?).into_owned();
                    let timeout = Duration::from_millis(read_u64(&mut c)?);
                    let r = s.wait_for(timeout, |st| {
                        let (v, left) = st.values.get_mut(&key)?;
                        *left -= 1;
                        if *left == 0 {
                            st.values.remove(&key).map(|(v, _)| v)
                        } else {
                            Some(v.clone())
                        }
                    });
                    match r {
                        Ok(v) => write_frame(&mut c, OK, &v)?,
                        Err(code) => write_frame(&mut c, code, &gone_payload(s))?,
                    }
                }
                ADD => {
                    let key = String::from_utf8_lossy(&read_bytes(&mut c)?).into_owned();
                    let delta = read_u64(&mut c)? as i64;
                    let v = {
                        let mut st = s.lock();
                        let e = st.counters.entry(key).or_insert(0);
                        *e += delta;
                        *e
                    };
                    s.changed.notify_all();
                    write_frame(&mut c, OK, &v.to_le_bytes())?;
                }
                WAIT_AT_LEAST => {
                    let key = String::from_utf8_lossy(&read_bytes(&mut c)?).into_owned();
                    let target = read_u64(&mut c)? as i64;
                    let timeout = Duration::from_millis(read_u64(&mut c)?);
                    let r = s.wait_for(timeout, |st| {
                        (st.counters.get(&key).copied().unwrap_or(0) >= target).then_some(())
                    });
                    match r {
                        Ok(()) => write_frame(&mut c, OK, &[])?,
                        Err(code) => write_frame(&mut c, code, &gone_payload(s))?,
                    }
                }
                other => {
                    return Err(std::io::Error::other(format!(
                        "unknown store command {other}"
                    )))
                }
            }
        }
    })()
    .unwrap_or(false);
    if !clean {
        let mut st = s.lock();
        if st.gone.is_none() && !st.shutdown {
            st.gone = Some(rank.unwrap_or(usize::MAX));
        }
        drop(st);
        s.changed.notify_all();
    }
    let _ = c.shutdown(Shutdown::Both);
}

fn gone_payload(s: &Shared) -> Vec<u8> {
    (s.lock().gone.unwrap_or(usize::MAX) as u64)
        .to_le_bytes()
        .to_vec()
}

/// A second connection to the store that learns at once when any rank of the run disconnects
/// without a goodbye (or rank 0's store goes away): what the NCCL watchdog checks, since a
/// collective whose peer died would otherwise wait out the whole timeout.
pub(crate) struct PeerWatch {
    state: Arc<WatchState>,
    conn: TcpStream,
}

struct WatchState {
    gone: Mutex<Option<String>>,
    leaving: std::sync::atomic::AtomicBool,
}

impl PeerWatch {
    /// Connects to `addr:port` and starts listening on a thread of its own.
    pub fn start(addr: &str, port: u16, rank: usize) -> Result<PeerWatch> {
        let op = "rendezvous";
        let io =
            |e: std::io::Error| dist_err(op, Some(rank), format!("watching the other ranks: {e}"));
        let mut conn = TcpStream::connect((addr, port)).map_err(io)?;
        let mut m = vec![WATCH];
        m.extend_from_slice(&(rank as u64).to_le_bytes());
        conn.write_all(&m).map_err(io)?;
        let mut reader = conn.try_clone().map_err(io)?;
        let state = Arc::new(WatchState {
            gone: Mutex::new(None),
            leaving: std::sync::atomic::AtomicBool::new(false),
        });
        let st = state.clone();
        std::thread::Builder::new()
            .name("stride-peer-watch".into())
            .spawn(move || {
                let mut status = [0u8; 1];
                let why = match reader.read_exact(&mut status).and_then(|_| read_bytes(&mut reader)) {
                    Ok(p) if status[0] == PEER_GONE => {
                        let who = p
                            .get(..8)
                            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0xff; 8])) as usize)
                            .filter(|&r| r != usize::MAX)
                            .map_or("a rank".to_string(), |r| format!("rank {r}"));
                        Some(format!("{who} disconnected from the rendezvous (it failed or was killed)"))
                    }
                    Ok(_) => None,
                    Err(_) => Some(
                        "the connection to rank 0's rendezvous was lost: rank 0 has probably failed"
                            .to_string(),
                    ),
                };
                if !st.leaving.load(std::sync::atomic::Ordering::SeqCst) {
                    *st.gone.lock().unwrap_or_else(|e| e.into_inner()) = why;
                }
            })
            .map_err(|e| dist_err(op, Some(rank), format!("starting the peer watch: {e}")))?;
        Ok(PeerWatch { state, conn })
    }

    /// Why the run lost a rank, once it has.
    pub fn gone(&self) -> Option<String> {
        self.state
            .gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for PeerWatch {
    fn drop(&mut self) {
        self.state
            .leaving
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.conn.shutdown(Shutdown::Both);
    }
}

/// A rank's connection to the store.
pub(crate) struct StoreClient {
    conn: Mutex<TcpStream>,
    rank: usize,
    timeout: Duration,
    /// Set once the rank has joined its group: only then does dropping the client say a
    /// clean goodbye. A rank whose joining failed leaves without one, so the ranks waiting
    /// for it hear at once that it is gone instead of waiting out the timeout.
    joined: std::sync::atomic::AtomicBool,
}

impl StoreClient {
    /// Connects to `addr:port`, retrying until `timeout` (rank 0 may not be listening yet).
    pub fn connect(addr: &str, port: u16, rank: usize, timeout: Duration) -> Result<StoreClient> {
        let op = "rendezvous";
        let deadline = Instant::now() + timeout;
        let target = (addr, port)
            .to_socket_addrs()
            .map_err(|e| dist_err(op, Some(rank), format!("resolving {addr}:{port}: {e}")))?
            .next()
            .ok_or_else(|| dist_err(op, Some(rank), format!("{addr}:{port} has no address")))?;
        let mut c = loop {
            match TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
                Ok(c) => break c,
                Err(e) if Instant::now() >= deadline => {
                    return Err(dist_err(
                        op,
                        Some(rank),
                        format!("could not reach rank 0's rendezvous at {addr}:{port} within {timeout:?}: {e} (is rank 0 running? STRIDE_MASTER_ADDR/STRIDE_MASTER_PORT must be the same for every rank)"),
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let _ = c.set_nodelay(true);
        let mut hello = vec![HELLO];
        hello.extend_from_slice(&(rank as u64).to_le_bytes());
        c.write_all(&hello)
            .map_err(|e| dist_err(op, Some(rank), format!("greeting the rendezvous: {e}")))?;
        Ok(StoreClient {
            conn: Mutex::new(c),
            rank,
            timeout,
            joined: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Sends one request and reads the reply frame (status, payload).
    fn request(&self, op: &'static str, msg: &[u8], wait: Duration) -> Result<(u8, Vec<u8>)> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        // the server answers a wait within `wait`; allow it a margin before calling the
        // connection dead
        let _ = c.set_read_timeout(Some(wait + Duration::from_secs(30)));
        let io = |e: std::io::Error| {
            dist_err(
                op,
                Some(self.rank),
                format!(
                    "lost the connection to rank 0's rendezvous ({e}): rank 0 has probably failed"
                ),
            )
        };
        c.write_all(msg).map_err(io)?;
        let mut status = [0u8; 1];
        c.read_exact(&mut status).map_err(io)?;
        let n = read_u64(&mut c).map_err(io)?;
        if n > MAX_VALUE {
            return Err(io(std::io::Error::other("a malformed reply")));
        }
        let mut payload = zeroed(n).map_err(io)?;
        c.read_exact(&mut payload).map_err(io)?;
        Ok((status[0], payload))
    }

    fn check(&self, op: &'static str, what: &str, status: u8, payload: &[u8]) -> Result<()> {
        match status {
            OK => Ok(()),
            TIMEOUT => Err(dist_err(
                op,
                Some(self.rank),
                format!("{what} did not complete within {:?}: another rank is stuck or called a different collective (STRIDE_DIST_TIMEOUT sets the limit, in seconds)", self.timeout),
            )),
            _ => {
                let who = payload
                    .get(..8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0xff; 8])) as usize)
                    .filter(|&r| r != usize::MAX)
                    .map_or("a rank".to_string(), |r| format!("rank {r}"));
                Err(dist_err(
                    op,
                    Some(self.rank),
                    format!("{what} failed: {who} disconnected (it failed or was killed)"),
                ))
            }
        }
    }

    fn frame(cmd: u8, key: &str) -> Vec<u8> {
        let mut m = vec![cmd];
        m.extend_from_slice(&(key.len() as u64).to_le_bytes());
        m.extend_from_slice(key.as_bytes());
        m
    }

    /// Stores `value` under `key`, to be read `reads` times (then dropped).
    pub fn set(&self, op: &'static str, key: &str, value: &[u8], reads: usize) -> Result<()> {
        let mut m = Self::frame(SET, key);
        m.extend_from_slice(&(reads as u64).to_le_bytes());
        m.extend_from_slice(&(value.len() as u64).to_le_bytes());
        m.extend_from_slice(value);
        let (st, p) = self.request(op, &m, Duration::ZERO)?;
        self.check(op, key, st, &p)
    }

    /// The value under `key`, waiting for it to be set.
    pub fn get(&self, op: &'static str, key: &str) -> Result<Vec<u8>> {
        let mut m = Self::frame(GET, key);
        m.extend_from_slice(&(self.timeout.as_millis() as u64).to_le_bytes());
        let (st, p) = self.request(op, &m, self.timeout)?;
        self.check(op, key, st, &p)?;
        Ok(p)
    }

    /// Adds `delta` to the counter `key`; its new value.
    pub fn add(&self, op: &'static str, key: &str, delta: i64) -> Result<i64> {
        let mut m = Self::frame(ADD, key);
        m.extend_from_slice(&(delta as u64).to_le_bytes());
        let (st, p) = self.request(op, &m, Duration::ZERO)?;
        self.check(op, key, st, &p)?;
        Ok(i64::from_le_bytes(
            p.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]),
        ))
    }

    /// Waits until the counter `key` reaches `target`.
    pub fn wait_at_least(&self, op: &'static str, key: &str, target: i64) -> Result<()> {
        let mut m = Self::frame(WAIT_AT_LEAST, key);
        m.extend_from_slice(&(target as u64).to_le_bytes());
        m.extend_from_slice(&(self.timeout.as_millis() as u64).to_le_bytes());
        let (st, p) = self.request(op, &m, self.timeout)?;
        self.check(op, key, st, &p)
    }

    /// Every rank arrives at `key` before any leaves.
    pub fn barrier(&self, op: &'static str, key: &str, world: usize) -> Result<()> {
        self.add(op, key, 1)?;
        self.wait_at_least(op, key, world as i64)
    }
}

impl StoreClient {
    /// This rank has joined its group: leaving from now on is a clean goodbye.
    pub fn mark_joined(&self) {
        self.joined
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for StoreClient {
    fn drop(&mut self) {
        // a clean goodbye: the server must not report this rank as failed
        if self.joined.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = self.request("rendezvous", &[BYE], Duration::from_secs(1));
        }
    }
}
