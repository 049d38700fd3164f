//! The load loop: N connection tasks on one event loop (tokio), each
//! either opening a new TCP connection per request or keeping one alive,
//! all speaking through [`crate::http1::exchange`]. A sampler opens and
//! closes the measurement window after a warm-up and reads the server's CPU
//! time (`/proc/PID/stat`, utime and stime) at both ends; the result gives
//! the total and the user-space and kernel parts per request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::hc::{HcClient, Pending};
use crate::hcpq::{HcPqClient, PqPending};
use crate::http1::{self, Buffers, CountSink, Reply};
use crate::io::{Counters, Counting};

/// Which protocol the generator speaks.
#[derive(Clone)]
pub enum Proto {
    Plain,
    Tls(TlsConnector),
    Hc(Arc<HcClient>),
    /// Suite 2: X25519 + ML-KEM-768 (spec/hybrid.md).
    HcPq(Arc<HcPqClient>),
}

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
    pub expect_len: Option<u64>,
    pub new_conn: bool,
    pub conns: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub count: Option<u64>,
    pub cpu_pids: Vec<u32>,
    /// Requests per second, all connections together; `None`: each
    /// connection sends its next request as soon as the last is answered.
    pub rate: Option<f64>,
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const DONE: u8 = 2;

struct Shared {
    /// Open loop (`Settings::rate`): when the schedule started and the
    /// number of the next request in it.
    pace: Option<(Instant, f64)>,
    slots: AtomicU64,
    phase: AtomicU8,
    counted: AtomicU64,
    stop: AtomicBool,
    first_error: Mutex<Option<String>>,
}

/// Statistics of one task, merged at the end.
struct Stats {
    latency: Histogram<u64>,
    ttfb: Histogram<u64>,
    requests: u64,
    errors: u64,
    bytes: Counters,
    payload: u64,
    flights_min: u32,
    flights_max: u32,
    flights_sum: u64,
    /// Version, cipher suite and key exchange group of the first handshake.
    tls: Option<(String, String, String)>,
    resumed: u64,
}

impl Stats {
    fn new() -> Self {
        Stats {
            latency: hist(),
            ttfb: hist(),
            requests: 0,
            errors: 0,
            bytes: Counters::default(),
            payload: 0,
            flights_min: u32::MAX,
            flights_max: 0,
            flights_sum: 0,
            tls: None,
            resumed: 0,
        }
    }

    fn record(&mut self, latency: Duration, ttfb: Duration, bytes: Counters, payload: u64) {
        let _ = self.latency.record(latency.as_micros().max(1) as u64);
        let _ = self.ttfb.record(ttfb.as_micros().max(1) as u64);
        self.requests += 1;
        self.bytes.written += bytes.written;
        self.bytes.read += bytes.read;
        self.payload += payload;
        self.flights_min = self.flights_min.min(bytes.flights);
        self.flights_max = self.flights_max.max(bytes.flights);
        self.flights_sum += u64::from(bytes.flights);
    }

    fn merge(&mut self, o: Stats) {
        let _ = self.latency.add(&o.latency);
        let _ = self.ttfb.add(&o.ttfb);
        self.requests += o.requests;
        self.errors += o.errors;
        self.bytes.written += o.bytes.written;
        self.bytes.read += o.bytes.read;
        self.payload += o.payload;
        self.flights_min = self.flights_min.min(o.flights_min);
        self.flights_max = self.flights_max.max(o.flights_max);
        self.flights_sum += o.flights_sum;
        self.tls = self.tls.take().or(o.tls);
        self.resumed += o.resumed;
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

/// CPU ticks of a set of processes (all threads): user and system time
/// (`utime`, `stime` of `/proc/PID/stat`).
#[derive(Clone, Copy, Default)]
struct Ticks {
    user: u64,
    sys: u64,
}

impl Ticks {
    fn total(self) -> u64 {
        self.user + self.sys
    }

    /// Ticks from `self` (earlier) to `later`.
    fn until(self, later: Ticks) -> Ticks {
        Ticks {
            user: later.user.saturating_sub(self.user),
            sys: later.sys.saturating_sub(self.sys),
        }
    }
}

/// CPU ticks of the processes in `pids`.
fn cpu_ticks(pids: &[u32]) -> Ticks {
    pids.iter()
        .map(|p| proc_ticks(&format!("/proc/{p}/stat")))
        .fold(Ticks::default(), |a, t| Ticks {
            user: a.user + t.user,
            sys: a.sys + t.sys,
        })
}

fn proc_ticks(path: &str) -> Ticks {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ticks::default();
    };
    // Fields after the command name (which may contain spaces) start at 3.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 2..]) else {
        return Ticks::default();
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let num = |i: usize| {
        f.get(i - 3)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ticks {
        user: num(14),
        sys: num(15),
    }
}

/// Linux reports /proc times in USER_HZ, which is 100 on every mainstream
/// architecture (the kernel scales its own precise accounting to it).
const TICK_US: f64 = 10_000.0;

/// Runs the load and returns the result document.
pub async fn run(proto: Proto, s: Settings) -> Result<Value> {
    let shared = Arc::new(Shared {
        pace: s.rate.map(|r| (Instant::now(), r)),
        slots: AtomicU64::new(0),
        phase: AtomicU8::new(if s.count.is_some() { MEASURE } else { WARMUP }),
        counted: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        first_error: Mutex::new(None),
    });
    let started = Instant::now();
    let (mut t_s, mut cpu_s, mut self_s) = (
        started,
        cpu_ticks(&s.cpu_pids),
        proc_ticks("/proc/self/stat"),
    );
    let mut tasks = Vec::new();
    for _ in 0..s.conns.max(1) {
        let (proto, s, shared) = (proto.clone(), s.clone(), shared.clone());
        tasks.push(tokio::spawn(async move { task(proto, s, shared).await }));
    }
    let (t_e, cpu_e, self_e);
    if s.count.is_none() {
        tokio::time::sleep(s.warmup).await;
        cpu_s = cpu_ticks(&s.cpu_pids);
        self_s = proc_ticks("/proc/self/stat");
        t_s = Instant::now();
        shared.phase.store(MEASURE, Ordering::SeqCst);
        tokio::time::sleep(s.duration).await;
        shared.phase.store(DONE, Ordering::SeqCst);
        t_e = Instant::now();
        cpu_e = cpu_ticks(&s.cpu_pids);
        self_e = proc_ticks("/proc/self/stat");
        shared.stop.store(true, Ordering::SeqCst);
    } else {
        // Count-bounded: wait for the tasks, with the duration as a cap.
        let deadline = started + s.duration;
        while !shared.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        shared.stop.store(true, Ordering::SeqCst);
        t_e = Instant::now();
        cpu_e = cpu_ticks(&s.cpu_pids);
        self_e = proc_ticks("/proc/self/stat");
    }
    let mut all = Stats::new();
    for t in tasks {
        // A task stuck on a dead connection is abandoned after a grace period.
        match tokio::time::timeout(Duration::from_secs(5), t).await {
            Ok(Ok(st)) => all.merge(st),
            Ok(Err(e)) => bail!("task failed: {e}"),
            Err(_) => {}
        }
    }
    let elapsed = (t_e - t_s).as_secs_f64();
    let server = cpu_s.until(cpu_e);
    let n = all.requests.max(1) as f64;
    let first_error = shared
        .first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let q = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    let cdf: Vec<Value> = (0..=200)
        .map(|i| f64::from(i) / 200.0)
        .chain([0.995, 0.999])
        .map(|p| json!([q(&all.latency, p), p]))
        .collect();
    let lat = |h: &Histogram<u64>| {
        json!({
            "p50": q(h, 0.5), "p90": q(h, 0.9), "p99": q(h, 0.99), "p999": q(h, 0.999),
            "min": h.min(), "max": h.max(), "mean": h.mean(),
        })
    };
    Ok(json!({
        "requests": all.requests,
        "errors": all.errors,
        "first_error": first_error,
        "elapsed_s": elapsed,
        "rps": all.requests as f64 / elapsed.max(1e-9),
        "server_cpu_us_per_req": server.total() as f64 * TICK_US / n,
        "server_user_us_per_req": server.user as f64 * TICK_US / n,
        "server_sys_us_per_req": server.sys as f64 * TICK_US / n,
        "server_cpu_util": server.total() as f64 * TICK_US / 1e6 / elapsed.max(1e-9),
        "client_cpu_us_per_req": self_s.until(self_e).total() as f64 * TICK_US / n,
        "latency_us": lat(&all.latency),
        "ttfb_us": lat(&all.ttfb),
        "latency_cdf": cdf,
        "bytes_per_req": {
            "written": all.bytes.written as f64 / n,
            "read": all.bytes.read as f64 / n,
            "total": all.bytes.total() as f64 / n,
        },
        "payload_per_req": all.payload as f64 / n,
        "flights": {
            "min": if all.requests > 0 { all.flights_min } else { 0 },
            "max": all.flights_max,
            "mean": all.flights_sum as f64 / n,
        },
        "tls": all.tls.map(|(v, c, g)| json!({"version": v, "suite": c, "group": g})),
        "resumed_fraction": all.resumed as f64 / n,
    }))
}

async fn task(proto: Proto, s: Settings, shared: Arc<Shared>) -> Stats {
    let mut st = Stats::new();
    let mut bufs = Buffers::default();
    let mut req = Vec::with_capacity(2048);
    let mut conn: Option<Conn> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        if let Some((start, rate)) = shared.pace {
            // Request k of the schedule starts at start + k / rate, on
            // whichever connection is free then; a late one starts at once.
            let k = shared.slots.fetch_add(1, Ordering::Relaxed);
            let at = start + Duration::from_secs_f64(k as f64 / rate);
            tokio::time::sleep_until(at.into()).await;
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
        }
        let t0 = Instant::now();
        let r = if s.new_conn {
            one_new_conn(&proto, &s, &mut bufs, &mut req, &mut st).await
        } else {
            one_keep_alive(&proto, &s, &mut conn, &mut bufs, &mut req, &mut st).await
        };
        let measuring = shared.phase.load(Ordering::Relaxed) == MEASURE;
        match r {
            Ok((reply, bytes, payload)) => {
                if measuring {
                    st.record(reply.done - t0, reply.first_byte - t0, bytes, payload);
                    let c = shared.counted.fetch_add(1, Ordering::Relaxed) + 1;
                    if s.count.is_some_and(|limit| c >= limit) {
                        shared.stop.store(true, Ordering::SeqCst);
                    }
                }
            }
            Err(e) => {
                conn = None;
                if measuring {
                    st.errors += 1;
                }
                {
                    let mut slot = shared.first_error.lock().unwrap_or_else(|p| p.into_inner());
                    if slot.is_none() {
                        *slot = Some(format!("{e:#}"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    st
}

type Outcome = (Reply, Counters, u64);

async fn connect(addr: SocketAddr) -> Result<Counting> {
    let tcp = TcpStream::connect(addr).await.context("connect")?;
    tcp.set_nodelay(true)?;
    Ok(Counting::new(tcp))
}

fn plain_request(s: &Settings, close: bool, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(format!("GET {} HTTP/1.1\r\nHost: {}\r\n", s.path, s.host).as_bytes());
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A request written out and ready to send, and what reads its answer.
enum Prepared<'a> {
    Plain,
    Hc(&'a HcClient, Pending),
    HcPq(&'a HcPqClient, PqPending),
}

/// Writes the protocol's request into `req`: for HTTPCrypt, sealed (with
/// the X25519 of a fresh key), the way `httpcrypt::Client` seals it before
/// its connection is open.
fn prepare<'a>(
    proto: &'a Proto,
    s: &Settings,
    close: bool,
    req: &mut Vec<u8>,
) -> Result<Prepared<'a>> {
    Ok(match proto {
        Proto::Plain | Proto::Tls(_) => {
            plain_request(s, close, req);
            Prepared::Plain
        }
        Proto::Hc(c) => Prepared::Hc(c, c.request(&s.path, close, req)?),
        Proto::HcPq(c) => Prepared::HcPq(c, c.request(&s.path, close, req)?),
    })
}

/// One request/response on `io`, with the protocol's request and sink.
async fn request_on<S>(
    io: &mut S,
    proto: &Proto,
    s: &Settings,
    close: bool,
    bufs: &mut Buffers,
    req: &mut Vec<u8>,
) -> Result<(Reply, u64)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let prepared = prepare(proto, s, close, req)?;
    send_on(io, s, prepared, bufs, req).await
}

/// Sends a prepared request on `io` and reads its answer.
async fn send_on<S>(
    io: &mut S,
    s: &Settings,
    prepared: Prepared<'_>,
    bufs: &mut Buffers,
    req: &[u8],
) -> Result<(Reply, u64)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let reply = match prepared {
        Prepared::Hc(c, pending) => c.exchange(io, req, bufs, pending).await?.0,
        Prepared::HcPq(c, pending) => c.exchange(io, req, bufs, pending).await?.0,
        Prepared::Plain => http1::exchange(io, req, bufs, &mut CountSink::default()).await?,
    };
    let payload = reply.payload;
    if reply.status != 200 {
        bail!("status {}", reply.status);
    }
    if let Some(want) = s.expect_len {
        if payload != want {
            bail!("payload {payload} bytes, expected {want}");
        }
    }
    Ok((reply, payload))
}

fn note_tls(st: &mut Stats, c: &rustls::ClientConnection) {
    if st.tls.is_none() {
        st.tls = Some((
            format!("{:?}", c.protocol_version()),
            c.negotiated_cipher_suite()
                .map_or_else(String::new, |s| format!("{:?}", s.suite())),
            c.negotiated_key_exchange_group()
                .map_or_else(String::new, |g| format!("{:?}", g.name())),
        ));
    }
    if c.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        st.resumed += 1;
    }
}

async fn one_new_conn(
    proto: &Proto,
    s: &Settings,
    bufs: &mut Buffers,
    req: &mut Vec<u8>,
    st: &mut Stats,
) -> Result<Outcome> {
    // The request is ready before the connection opens, as with a real
    // client: an HTTPCrypt client needs nothing from the server to seal it,
    // and a server that finds the request waiting when it accepts does not
    // go back to epoll for it.
    let prepared = prepare(proto, s, true, req)?;
    let mut io = connect(s.addr).await?;
    match proto {
        Proto::Tls(connector) => {
            let mut tls = connector
                .connect(crate::tls::server_name(), io)
                .await
                .context("TLS handshake")?;
            let (reply, payload) = send_on(&mut tls, s, prepared, bufs, req).await?;
            http1::drain_to_close(&mut tls, bufs).await;
            note_tls(st, tls.get_ref().1);
            Ok((reply, tls.get_ref().0.counters(), payload))
        }
        _ => {
            let (reply, payload) = send_on(&mut io, s, prepared, bufs, req).await?;
            http1::drain_to_close(&mut io, bufs).await;
            Ok((reply, io.counters(), payload))
        }
    }
}

enum Conn {
    Plain(Counting),
    Tls(Box<tokio_rustls::client::TlsStream<Counting>>),
}

async fn one_keep_alive(
    proto: &Proto,
    s: &Settings,
    conn: &mut Option<Conn>,
    bufs: &mut Buffers,
    req: &mut Vec<u8>,
    st: &mut Stats,
) -> Result<Outcome> {
    if conn.is_none() {
        let io = connect(s.addr).await?;
        *conn = Some(match proto {
            Proto::Tls(connector) => {
                let tls = connector
                    .connect(crate::tls::server_name(), io)
                    .await
                    .context("TLS handshake")?;
                note_tls(st, tls.get_ref().1);
                Conn::Tls(Box::new(tls))
            }
            _ => Conn::Plain(io),
        });
    }
    let c = conn.as_mut().context("connection")?;
    let (before, r) = match c {
        Conn::Plain(io) => {
            let before = io.counters();
            (before, request_on(io, proto, s, false, bufs, req).await)
        }
        Conn::Tls(tls) => {
            let before = tls.get_ref().0.counters();
            (
                before,
                request_on(tls.as_mut(), proto, s, false, bufs, req).await,
            )
        }
    };
    let (reply, payload) = r?;
    let after = match c {
        Conn::Plain(io) => io.counters(),
        Conn::Tls(tls) => tls.get_ref().0.counters(),
    };
    if reply.close {
        *conn = None;
    }
    Ok((reply, after.minus(&before), payload))
}
