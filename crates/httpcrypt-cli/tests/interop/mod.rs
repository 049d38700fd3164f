//! Helpers for the interoperability tests (`rspamd.rs`, `proxies.rs`,
//! `hostile.rs`): external daemons started from configurations in temporary
//! directories and stopped by PID, the rule that a missing binary skips a
//! test only outside CI, free loopback ports, a relay that records both
//! directions and watches them for marker strings, HTTP/1.1 message
//! splitting for recorded bytes, and a search of files for a marker.
//! Everything binds to 127.0.0.1 and every wait is bounded.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a binary is: `PATH`, then the sbin directories (daemons live
/// there and `PATH` often lacks them).
pub fn find_bin(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether all of `bins` are installed. A missing one skips the test with a
/// message when `CI` is unset, and fails it when `CI` is set: CI must run
/// every interop test (`scripts/install-test-deps.sh` installs them).
pub fn require(test: &str, bins: &[&str]) -> bool {
    let missing: Vec<&str> = bins
        .iter()
        .copied()
        .filter(|b| find_bin(b).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{test}: {missing:?} not installed, and CI is set: a missing binary is a failure \
             there (run scripts/install-test-deps.sh)"
        );
    }
    eprintln!(
        "SKIPPED {test}: {missing:?} not installed (scripts/install-test-deps.sh installs it; \
         with CI set this would fail)"
    );
    false
}

/// A loopback port that was free a moment ago (for daemons that cannot be
/// told to pick one themselves).
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free loopback ports: every listener is held until all are
/// read, so two of them cannot be the same port (one free port at a time
/// can come back twice).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: [TcpListener; N] = std::array::from_fn(|_| TcpListener::bind("127.0.0.1:0").unwrap());
    held.map(|l| l.local_addr().unwrap().port())
}

/// Waits until `addr` accepts TCP connections.
pub fn wait_port(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// `/proc/PID/stat` field 22 (start time), to recognise a PID later.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every process below `pid`, with its start time.
fn descendants(pid: u32) -> Vec<(u32, u64)> {
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().copied().filter(|&c| parent_of(c) == Some(p)));
        i += 1;
    }
    found
        .into_iter()
        .skip(1)
        .filter_map(|p| Some((p, start_time(p)?)))
        .collect()
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// How [`Daemon`] knows a daemon is ready.
#[derive(Clone, Copy)]
enum Ready {
    /// It accepts connections on this address.
    Port(SocketAddr),
    /// A line of its output names its address.
    Line(fn(&str) -> Option<SocketAddr>),
}

/// An external daemon: its output is collected, and on drop it gets SIGTERM,
/// then SIGKILL after 3 s; helper processes it forked are killed by PID too.
pub struct Daemon {
    child: Child,
    name: String,
    log: Arc<Mutex<String>>,
    /// Where it listens.
    pub addr: SocketAddr,
    cleanup: Vec<Box<dyn FnOnce() + Send>>,
}

impl Daemon {
    /// Starts `cmd` and waits (up to `timeout`) until `addr` accepts
    /// connections; panics with its output if it exits or never listens.
    pub fn start(cmd: Command, name: &str, addr: SocketAddr, timeout: Duration) -> Daemon {
        Daemon::spawn(cmd, name, Ready::Port(addr), timeout)
    }

    /// Starts `cmd` and waits until a line of its output names the address
    /// it listens on (`find`).
    pub fn announced(
        cmd: Command,
        name: &str,
        find: fn(&str) -> Option<SocketAddr>,
        timeout: Duration,
    ) -> Daemon {
        Daemon::spawn(cmd, name, Ready::Line(find), timeout)
    }

    fn spawn(mut cmd: Command, name: &str, ready: Ready, timeout: Duration) -> Daemon {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for v in ["HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"] {
            cmd.env_remove(v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let (log, tx) = (log.clone(), tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Ready::Line(find) = ready {
                        if let Some(a) = find(&line) {
                            let _ = tx.send(a);
                        }
                    }
                    let mut l = log.lock().unwrap();
                    if l.len() < 4 << 20 {
                        l.push_str(&line);
                        l.push('\n');
                    }
                }
            });
        }
        let mut d = Daemon {
            child,
            name: name.to_string(),
            log,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            cleanup: Vec::new(),
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = d.child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                panic!("{name} exited ({status}) before listening:\n{}", d.log());
            }
            match ready {
                Ready::Port(addr) => {
                    if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                        d.addr = addr;
                        break;
                    }
                }
                Ready::Line(_) => {
                    if let Ok(addr) = rx.recv_timeout(Duration::from_millis(50)) {
                        d.addr = addr;
                        break;
                    }
                }
            }
            if Instant::now() > deadline {
                panic!("{name} did not listen within {timeout:?}:\n{}", d.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Runs `f` after the daemon has stopped (e.g. to remove shared memory).
    pub fn on_stop(&mut self, f: impl FnOnce() + Send + 'static) {
        self.cleanup.push(Box::new(f));
    }

    /// Stops it now (see the type's description).
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            for f in self.cleanup.drain(..) {
                f();
            }
            return;
        }
        let helpers = descendants(self.pid());
        signal(self.pid(), "-TERM");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Forked helpers (rspamd workers, varnish's child, squid's helpers)
        // normally follow their parent; any that did not is killed by PID,
        // after checking the PID still names the same process.
        for (pid, started) in helpers {
            if start_time(pid) == Some(started) {
                signal(pid, "-KILL");
            }
        }
        for f in self.cleanup.drain(..) {
            f();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_inner();
        if std::thread::panicking() {
            let log = self.log();
            let tail = &log[log.len().saturating_sub(8000)..];
            eprintln!("--- {} output (tail) ---\n{tail}", self.name);
        }
    }
}

/// Bytes of each direction of each connection that a [`Tap`] keeps.
const TAP_KEEP: usize = 1 << 20;

/// Which way bytes flowed through a [`Tap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

#[derive(Default)]
struct TapState {
    connections: AtomicUsize,
    /// Per connection: the first `TAP_KEEP` bytes up and down.
    kept: Mutex<Vec<[Vec<u8>; 2]>>,
    bytes: [AtomicU64; 2],
    needles: Vec<Vec<u8>>,
    hits: Mutex<Vec<(usize, Way)>>,
}

/// A TCP relay in front of `target` that records both directions (the
/// first MiB of each, per connection) and scans every byte, however much,
/// for its needles.
pub struct Tap {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<TapState>,
    stop: Arc<AtomicBool>,
}

impl Tap {
    /// A relay to `target` watching for `needles`.
    pub fn new(target: SocketAddr, needles: &[&[u8]]) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(TapState {
            needles: needles.iter().map(|n| n.to_vec()).collect(),
            ..Default::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().take(4096) {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let index = {
                    let mut k = st.kept.lock().unwrap();
                    k.push([Vec::new(), Vec::new()]);
                    k.len() - 1
                };
                st.connections.fetch_add(1, Ordering::SeqCst);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (a, b) = (st.clone(), st.clone());
                std::thread::spawn(move || pump(client, server, a, index, Way::Up));
                std::thread::spawn(move || pump(s2, c2, b, index, Way::Down));
            }
        });
        Tap { addr, state, stop }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Bytes relayed one way, in total.
    pub fn bytes(&self, way: Way) -> u64 {
        self.state.bytes[way as usize].load(Ordering::SeqCst)
    }

    /// The kept bytes of every connection, one way.
    pub fn kept(&self, way: Way) -> Vec<Vec<u8>> {
        self.state
            .kept
            .lock()
            .unwrap()
            .iter()
            .map(|k| k[way as usize].clone())
            .collect()
    }

    /// The needles seen so far, by index, with their direction.
    pub fn hits(&self) -> Vec<(usize, Way)> {
        self.state.hits.lock().unwrap().clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, st: Arc<TapState>, index: usize, way: Way) {
    let longest = st.needles.iter().map(Vec::len).max().unwrap_or(1);
    let mut window: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        st.bytes[way as usize].fetch_add(n as u64, Ordering::SeqCst);
        {
            let mut k = st.kept.lock().unwrap();
            let kept = &mut k[index][way as usize];
            let room = TAP_KEEP.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..n.min(room)]);
        }
        // Needles may straddle reads: search the previous tail plus this read.
        window.extend_from_slice(chunk);
        let view = String::from_utf8_lossy(&window);
        for (i, needle) in st.needles.iter().enumerate() {
            let found = match std::str::from_utf8(needle) {
                Ok(n) if n.is_ascii() => view.contains(n),
                _ => contains(&window, needle),
            };
            if found {
                st.hits.lock().unwrap().push((i, way));
            }
        }
        let keep = longest.saturating_sub(1).min(window.len());
        window.drain(..window.len() - keep);
        if to.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Whether `needle` occurs in `hay`.
///
/// The search runs in the standard library's `str::contains` (optimised
/// even in a debug build, which matters for 50 MiB streams): a lossy UTF-8
/// view keeps every ASCII byte in place, so an ASCII needle is found exactly
/// where it occurs, and a replacement character never forms part of one.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    match std::str::from_utf8(needle) {
        Ok(n) if n.is_ascii() && !n.is_empty() => String::from_utf8_lossy(hay).contains(n),
        _ => !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle),
    }
}

/// The files under `dir` (recursively) that contain `needle`, and how many
/// files were read.
pub fn files_containing(dir: &Path, needle: &[u8]) -> (Vec<PathBuf>, usize) {
    let mut found = Vec::new();
    let mut read = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                if let Ok(bytes) = std::fs::read(e.path()) {
                    read += 1;
                    if contains(&bytes, needle) {
                        found.push(e.path());
                    }
                }
            }
        }
    }
    (found, read)
}

/// One HTTP/1.1 message found in recorded bytes.
#[derive(Debug, Clone)]
pub struct Message {
    /// Start line and fields, as text.
    pub head: String,
    /// The body, de-chunked; possibly cut short where the recording ended.
    pub body: Vec<u8>,
}

impl Message {
    /// The value of the first field `name` (case-insensitive).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    /// The status code of a response.
    pub fn status(&self) -> Option<u16> {
        self.head.split_whitespace().nth(1)?.parse().ok()
    }
}

/// Splits recorded bytes of one connection into messages (requests when
/// `requests`, else responses), using Content-Length or chunked framing;
/// a response without either runs to the end. Stops at the first message
/// the recording cut short.
pub fn split_messages(bytes: &[u8], requests: bool) -> Vec<Message> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(end) = bytes[at..].windows(4).position(|w| w == b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&bytes[at..at + end]).into_owned();
        at += end + 4;
        let mut m = Message {
            head,
            body: Vec::new(),
        };
        let is_chunked = m
            .field("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        if is_chunked {
            loop {
                let Some(eol) = bytes[at..].windows(2).position(|w| w == b"\r\n") else {
                    out.push(m);
                    return out;
                };
                let size_text = String::from_utf8_lossy(&bytes[at..at + eol]).into_owned();
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .unwrap_or(0);
                at += eol + 2;
                if size == 0 {
                    // Trailer section: up to the blank line.
                    match bytes[at..].windows(2).position(|w| w == b"\r\n") {
                        Some(p) => at += p + 2,
                        None => at = bytes.len(),
                    }
                    break;
                }
                let take = size.min(bytes.len() - at);
                m.body.extend_from_slice(&bytes[at..at + take]);
                if take < size {
                    out.push(m);
                    return out;
                }
                at += size + 2;
            }
        } else if let Some(len) = m
            .field("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            let take = len.min(bytes.len() - at);
            m.body.extend_from_slice(&bytes[at..at + take]);
            at += take;
            if take < len {
                out.push(m);
                return out;
            }
        } else if !requests && !matches!(m.status(), Some(204 | 304)) {
            m.body.extend_from_slice(&bytes[at..]);
            at = bytes.len();
        }
        out.push(m);
    }
    out
}

/// A random marker: `HCMARK` and 20 hex digits, which no ciphertext or
/// encoding of it will contain by chance.
pub fn marker(tag: &str) -> String {
    let mut b = [0u8; 10];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("HCMARK{tag}{hex}")
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn httpcrypt_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// `httpcrypt ARGS --listen 127.0.0.1:0`, ready once it prints its address.
pub fn httpcrypt(args: &[&str], name: &str) -> Daemon {
    let mut cmd = Command::new(crate::common::BIN);
    cmd.args(args)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG");
    Daemon::announced(cmd, name, httpcrypt_addr, Duration::from_secs(30))
}

/// `httpcrypt gateway ARGS --upstream http://UPSTREAM`.
pub fn gateway(args: &[&str], upstream: SocketAddr) -> Daemon {
    let up = format!("http://{upstream}");
    let mut all = vec!["gateway", "--upstream", up.as_str()];
    all.extend_from_slice(args);
    httpcrypt(&all, "httpcrypt gateway")
}
