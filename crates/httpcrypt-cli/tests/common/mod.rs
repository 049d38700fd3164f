//! Helpers shared by the end-to-end tests: the built `httpcrypt` binary and
//! the Python upstream as child processes (killed on drop), a counting TCP
//! relay, a raw HTTP/1.1 reader for hostile-input tests, and sealed requests
//! built with the sans-IO core. Everything binds to 127.0.0.1 only, and
//! every wait is bounded.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use httpcrypt::proto::cert::{self, KeyCert};
use httpcrypt::proto::client::{ClientCredential, PreparedRequest};
use httpcrypt::proto::inner::{Field, RequestHead, ResponseHead};
use httpcrypt::proto::outer::{self, Mount};
use httpcrypt::proto::{replay, IdentityPublic, KexSecret, Limits};
use rand_core::{OsRng, RngCore};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_httpcrypt");

/// How long a server may take to start listening.
const START: Duration = Duration::from_secs(30);

/// A child process killed (and reaped) when dropped.
pub struct Proc {
    child: Child,
    name: String,
    log: Arc<Mutex<String>>,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Proc {
    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// A field of `/proc/PID/status` in KiB (e.g. `VmHWM`, `VmRSS`).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// CPU time used so far (user + system, all threads), in clock ticks
    /// (`utime + stime` of `/proc/PID/stat`; USER_HZ is 100 on Linux).
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // The command name may hold spaces; fields resume after its ')'.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of the whole line are 12 and 13 after the name.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    /// Sends the signal `name` (e.g. `TERM`, `HUP`) with kill(1).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {}", self.pid());
    }

    /// Waits up to `timeout` for the process to exit; its status, or None
    /// if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resets the peak RSS (`VmHWM`) to the current RSS; false if refused.
    pub fn reset_peak_rss(&self) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), b"5").is_ok()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} stderr ---\n{}", self.name, self.log());
        }
    }
}

/// Starts `cmd`, collects its stderr, and waits until a line of stdout or
/// stderr yields an address through `find`.
fn spawn_listening(
    mut cmd: Command,
    name: &str,
    find: impl Fn(&str) -> Option<SocketAddr> + Clone + Send + 'static,
) -> Proc {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    clean_env(&mut cmd);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
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
        let (tx, log, find) = (tx.clone(), log.clone(), find.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if let Some(a) = find(&line) {
                    let _ = tx.send(a);
                }
                let mut l = log.lock().unwrap();
                if l.len() < 1 << 20 {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
    }
    let mut proc = Proc {
        child,
        name: name.to_string(),
        log,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    match rx.recv_timeout(START) {
        Ok(a) => proc.addr = a,
        Err(_) => panic!("{name} did not start listening:\n{}", proc.log()),
    }
    proc
}

/// Test processes ignore proxies from the environment.
fn clean_env(cmd: &mut Command) {
    for v in [
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "RUST_LOG",
    ] {
        cmd.env_remove(v);
    }
}

fn httpcrypt_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// `httpcrypt keygen --dir DIR [--static]`; returns the identity key text.
pub fn keygen(dir: &Path, static_key: bool) -> String {
    let mut args = vec!["keygen", "--dir", dir.to_str().unwrap()];
    if static_key {
        args.push("--static");
    }
    let out = run(&args, Duration::from_secs(30));
    assert!(out.status.success(), "keygen failed: {}", out.stderr_text());
    out.stdout_text().trim().to_string()
}

/// `cmd` (the binary with any arguments), once it says where it listens.
pub fn spawn_listening_cmd(cmd: Command) -> Proc {
    spawn_listening(cmd, "httpcrypt", httpcrypt_addr)
}

/// `httpcrypt serve` on a free loopback port.
pub fn serve(keys: &Path, root: &Path, extra: &[&str]) -> Proc {
    serve_env(&[], keys, root, extra)
}

/// `httpcrypt serve` with extra environment variables (e.g. `LD_PRELOAD`
/// of libfaketime: a wrapper process would fork, and its child outlive
/// the guard).
pub fn serve_env(env: &[(&str, &str)], keys: &Path, root: &Path, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.envs(env.iter().copied());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--keys"])
        .arg(keys)
        .arg("--root")
        .arg(root)
        .args(extra);
    spawn_listening(cmd, "httpcrypt serve", httpcrypt_addr)
}

/// `httpcrypt gateway` on a free loopback port.
pub fn gateway(keys: &Path, upstream: SocketAddr, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["gateway", "--listen", "127.0.0.1:0", "--keys"])
        .arg(keys)
        .arg("--upstream")
        .arg(format!("http://{upstream}"))
        .args(extra);
    spawn_listening(cmd, "httpcrypt gateway", httpcrypt_addr)
}

/// `httpcrypt gateway` on a free loopback port with `args` and no key
/// directory (the rspamd profile takes `--keypair` instead).
pub fn gateway_args(upstream: SocketAddr, args: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["gateway", "--listen", "127.0.0.1:0", "--upstream"])
        .arg(format!("http://{upstream}"))
        .args(args);
    spawn_listening(cmd, "httpcrypt gateway", httpcrypt_addr)
}

/// `httpcrypt split-proxy` for `origin` on a free loopback port.
pub fn split_proxy(origin: SocketAddr, cache: &Path, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["split-proxy", "--listen", "127.0.0.1:0", "--origin"])
        .arg(format!("http://{origin}"))
        .arg("--cache-dir")
        .arg(cache)
        .args(extra);
    spawn_listening(cmd, "httpcrypt split-proxy", |line| {
        let rest = line.split("split proxy on http://").nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The Python upstream of `tests/upstream.py` on a free loopback port.
pub fn upstream() -> Proc {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/upstream.py");
    let mut cmd = Command::new("python3");
    cmd.arg("-u").arg(script).arg("0");
    spawn_listening(cmd, "python upstream", |line| {
        let port: u16 = line.strip_prefix("PORT ")?.trim().parse().ok()?;
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    })
}

/// A loopback TCP port the kernel just handed out and freed, for a process
/// that cannot be told to pick one itself: free with overwhelming
/// likelihood if bound at once (take one per process, just before it binds).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A throwaway `redis-server` on a free loopback port: no persistence,
/// killed on drop.
pub fn redis_server() -> Proc {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut cmd = Command::new("redis-server");
    cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
        ])
        .args(["--daemonize", "no", "--logfile", ""]);
    spawn_listening(cmd, "redis-server", move |line| {
        line.contains("Ready to accept connections").then_some(addr)
    })
}

/// Copies a directory tree (a key directory for another fleet instance).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A finished command.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The highest `VmHWM` seen while it ran (polled every 10 ms), KiB.
    pub peak_rss_kib: u64,
}

impl Output {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// The binary with `args`, in an environment without proxies or log filters.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.args(args);
    cmd
}

/// Runs the binary with `args`; kills it after `timeout`.
pub fn run(args: &[&str], timeout: Duration) -> Output {
    run_cmd(command(args), timeout)
}

/// Runs `cmd` to completion, or kills it after `timeout` and panics.
pub fn run_cmd(mut cmd: Command, timeout: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning a command");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_rss_kib = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if let Ok(status) = std::fs::read_to_string(&status_file) {
            let hwm = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak_rss_kib = peak_rss_kib.max(hwm.unwrap_or(0));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
        peak_rss_kib,
    }
}

/// `httpcrypt fetch ARGS…`, bounded to a minute.
pub fn fetch(args: &[&str]) -> Output {
    let mut all = vec!["fetch"];
    all.extend_from_slice(args);
    run(&all, Duration::from_secs(60))
}

/// A TCP relay in front of a server: counts the connections it accepts
/// and records the first bytes each client sends.
pub struct Relay {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    captured: Captured,
    stop: Arc<AtomicBool>,
}

/// Bytes of each connection's client-to-server traffic kept by [`Relay`].
const CAPTURE: usize = 256 * 1024;

/// What a [`Relay`] recorded, one buffer per connection.
type Captured = Arc<Mutex<Vec<Vec<u8>>>>;

impl Relay {
    pub fn new(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let captured = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, c, s) = (accepted.clone(), captured.clone(), stop.clone());
        std::thread::spawn(move || {
            // Bounded: a test opens a handful of connections.
            for conn in listener.incoming().take(256) {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let index = {
                    let mut c = c.lock().unwrap();
                    c.push(Vec::new());
                    c.len() - 1
                };
                a.fetch_add(1, Ordering::SeqCst);
                let (c2, client2, server2) = (
                    c.clone(),
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                );
                std::thread::spawn(move || copy(client, server, Some((c2, index))));
                std::thread::spawn(move || copy(server2, client2, None));
            }
        });
        Relay {
            addr,
            accepted,
            captured,
            stop,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// What the clients sent, per connection (first 256 KiB each).
    pub fn captured(&self) -> Vec<Vec<u8>> {
        self.captured.lock().unwrap().clone()
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream, capture: Option<(Captured, usize)>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((c, i)) = &capture {
            let mut c = c.lock().unwrap();
            let room = CAPTURE.saturating_sub(c[*i].len());
            c[*i].extend_from_slice(&buf[..n.min(room)]);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// An HTTP/1.1 response read off a raw socket.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first field named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as a problem document.
    pub fn problem(&self) -> outer::ProblemDoc {
        assert_eq!(
            self.header("content-type"),
            Some(outer::PROBLEM_TYPE),
            "{self:?}"
        );
        outer::parse_problem(&self.body).unwrap()
    }

    /// The problem's `title`.
    pub fn title(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        v["title"].as_str().unwrap_or_default().to_string()
    }
}

/// A loopback connection with bounded reads and writes.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Reads one response; `None` if the connection closed (or timed out)
/// before a status line.
pub fn read_response(r: &mut BufReader<TcpStream>) -> Option<RawResponse> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).ok()?;
        let l = l.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':')?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let mut rsp = RawResponse {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = rsp.header("content-length") {
        let mut body = vec![0u8; len.parse().ok()?];
        r.read_exact(&mut body).ok()?;
        rsp.body = body;
    } else if rsp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if size == 0 {
                let mut end = String::new();
                r.read_line(&mut end).ok()?;
                break;
            }
            let start = rsp.body.len();
            if start + size > 64 << 20 {
                return None;
            }
            rsp.body.resize(start + size, 0);
            r.read_exact(&mut rsp.body[start..]).ok()?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).ok()?;
        }
    } else if status != 204 && status != 304 {
        r.read_to_end(&mut rsp.body).ok()?;
    }
    Some(rsp)
}

/// Whether the peer closes the connection within `wait` (without sending
/// anything more).
pub fn closes_within(r: &mut BufReader<TcpStream>, wait: Duration) -> bool {
    r.get_ref().set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 1];
    match r.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// Sends `bytes` on a new connection and reads one response.
pub fn exchange(addr: SocketAddr, bytes: &[u8]) -> (RawResponse, BufReader<TcpStream>) {
    let mut s = connect(addr);
    s.write_all(bytes).unwrap();
    let mut r = BufReader::new(s);
    let rsp = read_response(&mut r).expect("a response");
    (rsp, r)
}

/// A request as bytes: request line, fields in order, body.
pub fn wire(method: &str, target: &str, fields: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
    for (n, v) in fields {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// The chunked coding of `body`, in pieces of `piece` bytes.
pub fn chunked(body: &[u8], piece: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for c in body.chunks(piece.max(1)) {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// The server's certificates, by `OPTIONS {mount}/` over a raw socket.
pub fn certs(addr: SocketAddr, mount: &Mount) -> Vec<KeyCert> {
    let host = addr.to_string();
    let (rsp, _) = exchange(
        addr,
        &wire("OPTIONS", &mount.options_path(), &[("Host", &host)], b""),
    );
    assert_eq!(rsp.status, 200, "{rsp:?}");
    assert_eq!(rsp.header("content-type"), Some(outer::CERTS_TYPE));
    cert::parse_cert_list(&rsp.body).unwrap()
}

/// One hand-built HTTPCrypt request (spec §4.1), made with the sans-IO core.
pub struct Sealed {
    pub prepared: PreparedRequest,
    pub mount: Mount,
}

impl Sealed {
    /// A fresh key pair and nonce against the best of `certs`.
    pub fn new(certs: &[KeyCert], identity: Option<&IdentityPublic>, mount: &Mount) -> Sealed {
        let now = httpcrypt::clock::unix_now();
        let cert = cert::choose(certs, now, identity).unwrap();
        let secret = KexSecret::generate(&mut OsRng);
        let mut n0 = [0u8; 24];
        OsRng.fill_bytes(&mut n0);
        let prepared = PreparedRequest::new(
            cert,
            ClientCredential::Key(&secret),
            n0,
            &outer::random_pad(&mut OsRng),
            &outer::random_pad(&mut OsRng),
        )
        .unwrap();
        Sealed {
            prepared,
            mount: mount.clone(),
        }
    }

    /// A new nonce with `credential` (a kept key pair, a ticket) against `cert`.
    pub fn with_credential(
        cert: &KeyCert,
        credential: ClientCredential<'_>,
        mount: &Mount,
    ) -> Sealed {
        let mut n0 = [0u8; 24];
        OsRng.fill_bytes(&mut n0);
        let prepared = PreparedRequest::new(
            cert,
            credential,
            n0,
            &outer::random_pad(&mut OsRng),
            &outer::random_pad(&mut OsRng),
        )
        .unwrap();
        Sealed {
            prepared,
            mount: mount.clone(),
        }
    }

    /// The sealed stream of an inner request with a `Date` of `date` (unix
    /// seconds) and `body` (with its Content-Length).
    pub fn stream(&self, method: &str, target: &str, date: u64, body: &[u8]) -> Vec<u8> {
        self.stream_with(method, target, date, &[], body)
    }

    /// As [`Sealed::stream`], with `fields` after the `Date`.
    pub fn stream_with(
        &self,
        method: &str,
        target: &str,
        date: u64,
        fields: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<u8> {
        let mut head = RequestHead::new(method, target);
        head.fields
            .push(Field::new("Date", replay::format_date(date)));
        for (n, v) in fields {
            head.fields.push(Field::new(*n, *v));
        }
        if !body.is_empty() {
            head.fields
                .push(Field::new("Content-Length", body.len().to_string()));
        }
        self.prepared.seal_message(&head, body, 16 * 1024).unwrap()
    }

    /// The sealed stream of arbitrary inner plaintext.
    pub fn stream_of(&self, plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        httpcrypt::proto::stream::seal_all(self.prepared.sealer(), plaintext, 16 * 1024, &mut out)
            .unwrap();
        out
    }

    /// The nonce path `{mount}/{n0}`.
    pub fn path(&self) -> String {
        self.mount.nonce_path(self.prepared.n0())
    }

    /// The cookie value.
    pub fn cookie(&self) -> &str {
        self.prepared.cookie()
    }

    /// The POST form carrying `stream`, with Content-Length.
    pub fn post(&self, host: &str, stream: &[u8]) -> Vec<u8> {
        let len = stream.len().to_string();
        wire(
            "POST",
            &self.path(),
            &[
                ("Host", host),
                ("Cookie", self.cookie()),
                ("Content-Type", outer::OCTET_STREAM),
                ("Content-Length", &len),
            ],
            stream,
        )
    }

    /// The GET form carrying `stream` in its query.
    pub fn get(&self, host: &str, stream: &[u8]) -> Vec<u8> {
        wire(
            "GET",
            &self.mount.get_target(self.prepared.n0(), stream),
            &[("Host", host), ("Cookie", self.cookie())],
            b"",
        )
    }

    /// Opens a sealed 200 response: the inner head and body.
    pub fn open(&self, rsp: &RawResponse) -> (ResponseHead, Vec<u8>) {
        assert_eq!(rsp.status, 200, "outer status of a sealed answer: {rsp:?}");
        assert_eq!(rsp.header("content-type"), Some(outer::OCTET_STREAM));
        self.prepared
            .open_response(&rsp.body, &Limits::default())
            .unwrap()
    }

    /// Opens a sealed inner problem: (inner status, problem type, title).
    pub fn open_problem(&self, rsp: &RawResponse) -> (u16, String, String) {
        let (head, body) = self.open(rsp);
        let ct = httpcrypt::proto::inner::field(&head.fields, "content-type");
        assert_eq!(ct, Some(outer::PROBLEM_TYPE.as_bytes()), "{head:?}");
        assert!(
            httpcrypt::proto::inner::field(&head.fields, "date").is_some(),
            "inner problems carry the server's Date"
        );
        let p = outer::parse_problem(&body).unwrap();
        assert_eq!(p.status, head.status);
        assert!(p.certs.is_empty(), "no certs inside");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let title = v["title"].as_str().unwrap_or_default().to_string();
        (head.status, p.type_uri, title)
    }
}

/// The repeating test pattern: byte `i` is `i % 251` (as `upstream.py`).
pub fn pattern() -> Vec<u8> {
    (0..251 * 256).map(|i| (i % 251) as u8).collect()
}

/// Writes `len` bytes of the pattern to `path`.
pub fn write_pattern(path: &Path, len: u64) {
    let p = pattern();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut left = len;
    while left > 0 {
        let n = left.min(p.len() as u64) as usize;
        f.write_all(&p[..n]).unwrap();
        left -= n as u64;
    }
    f.flush().unwrap();
}

/// Whether `path` holds exactly `len` bytes of the pattern.
pub fn is_pattern(path: &Path, len: u64) -> bool {
    let p = pattern();
    let mut f = BufReader::with_capacity(1 << 20, std::fs::File::open(path).unwrap());
    if std::fs::metadata(path).unwrap().len() != len {
        return false;
    }
    let mut buf = vec![0u8; p.len()];
    let mut left = len;
    while left > 0 {
        let n = left.min(p.len() as u64) as usize;
        if f.read_exact(&mut buf[..n]).is_err() || buf[..n] != p[..n] {
            return false;
        }
        left -= n as u64;
    }
    true
}

/// SHA-256 of a file, hex, by Python's hashlib (fast in a debug build).
pub fn sha256_file(path: &Path) -> String {
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg("import hashlib,sys;h=hashlib.sha256();f=open(sys.argv[1],'rb')\nfor b in iter(lambda:f.read(1<<20),b''):h.update(b)\nprint(h.hexdigest())")
        .arg(path);
    cmd.stdin(Stdio::null());
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// SHA-256 of bytes, hex.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Bytes that do not compress or repeat (xorshift64*, cheap in a debug build).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}
