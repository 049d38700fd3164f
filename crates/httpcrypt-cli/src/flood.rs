//! `httpcrypt flood`: load against a server on loopback, for the flood
//! benchmark and tests. Attacker modes speak raw HTTP/1.1 from many
//! 127.x.y.z source addresses (one /24 each); probe modes are the real
//! [`httpcrypt::Client`] and measure what legitimate clients get. Every run
//! is bounded by `--duration` and `--max-requests`. Prints one JSON line.
//! Also: the `serve` options of the load-aware defence (spec §14).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use httpcrypt::proto::admission::{self, AdmitCookie};
use httpcrypt::proto::{b64, outer, KexSecret};
use rand_core::{OsRng, RngCore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// `serve`/`gateway` options of the load-aware defence (spec §14).
#[derive(Args, Clone, Debug)]
pub struct DefenceOpts {
    /// The defence in front of the key agreement: `auto` switches it on by
    /// itself when the demand for key agreements passes the threshold.
    #[arg(long, value_enum, default_value = "auto")]
    pub defence: DefenceMode,
    /// Key agreements asked for per second above which the defence switches on.
    #[arg(long, default_value_t = 2000)]
    pub defence_threshold: u32,
    /// Key agreements per second one source prefix may have under pressure.
    #[arg(long, default_value_t = 200)]
    pub prefix_rate: u32,
    /// Burst of a source prefix's budget.
    #[arg(long, default_value_t = 400)]
    pub prefix_burst: u32,
    /// IPv4 prefix length of a budget.
    #[arg(long, default_value_t = 24)]
    pub v4_prefix: u8,
    /// IPv6 prefix length of a budget.
    #[arg(long, default_value_t = 64)]
    pub v6_prefix: u8,
    /// Highest puzzle difficulty in bits (0: cookie only, no puzzle).
    #[arg(long, default_value_t = 16)]
    pub max_difficulty: u8,
}

/// Whether the defence runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DefenceMode {
    /// On under load, off while idle.
    Auto,
    /// Never.
    Off,
}

impl DefenceOpts {
    /// The layer's setting.
    pub fn config(&self) -> Option<admission::AdmissionConfig> {
        (self.defence == DefenceMode::Auto).then(|| admission::AdmissionConfig {
            threshold: self.defence_threshold.max(1),
            prefix_rate: self.prefix_rate.max(1),
            prefix_burst: self.prefix_burst.max(1),
            v4_prefix: self.v4_prefix.min(32),
            v6_prefix: self.v6_prefix.min(128),
            max_difficulty: self.max_difficulty.min(admission::MAX_DIFFICULTY),
            ..Default::default()
        })
    }
}

/// What `flood` sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FloodMode {
    /// Fresh-key requests of the right shape with a random client key and a
    /// junk body: each forces an X25519 unless the defence stops it.
    Junk,
    /// Valid fresh-key requests (the attacker pays its own X25519 too).
    Valid,
    /// Connections that send a request head one byte per second.
    SlowHead,
    /// Requests with ~100 KiB of header fields.
    HugeHeader,
    /// New connections that send the bytes of `--payload` (a captured TLS
    /// ClientHello), wait for the server's first flight and close: a TLS
    /// handshake flood in which the attacker does no cryptography at all.
    Replay,
    /// Probe: legitimate new clients (a fresh key per request, no ticket).
    LegitNew,
    /// Probe: a legitimate returning client (ticket after one warm-up request).
    LegitReturning,
}

/// `httpcrypt flood` arguments.
#[derive(Args, Debug)]
pub struct FloodArgs {
    /// Server URL, e.g. http://127.0.0.1:8080/
    pub url: http::Uri,
    /// What to send.
    #[arg(long, value_enum)]
    pub mode: FloodMode,
    /// The server's mount path.
    #[arg(long, default_value = "")]
    pub mount: String,
    /// Path of the inner GET (probe and valid modes).
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Requests per second (0: as fast as the connections go).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Stop after this many requests.
    #[arg(long, default_value_t = 10_000_000)]
    pub max_requests: u64,
    /// Concurrent connections (attacks) or requests in flight (probes).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Distinct source addresses, each in its own /24 of 127.16.0.0/12
    /// (attacks only; probes connect from the default address).
    #[arg(long, default_value_t = 64)]
    pub sources: u32,
    /// Attacker answers admission challenges (echoes cookies, solves puzzles).
    #[arg(long)]
    pub obey: bool,
    /// Bytes to send in `replay` mode.
    #[arg(long)]
    pub payload: Option<std::path::PathBuf>,
    /// Seconds one probe request may take before it counts as failed.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
}

/// The `i`-th attacker source: 127.(16 + i/254 % 200).(i % 254 + 1).7.
pub fn source_addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        16 + ((i / 254) % 200) as u8,
        (i % 254 + 1) as u8,
        7,
    ))
}

/// Paces requests at `rate` per second across tasks, within a deadline and
/// a request count.
struct Pace {
    start: Instant,
    deadline: Instant,
    interval: Option<Duration>,
    issued: AtomicU64,
    max: u64,
}

impl Pace {
    /// Claims the next slot and waits for it; `false` when the run is over.
    async fn next(&self) -> bool {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        if n >= self.max {
            return false;
        }
        if let Some(iv) = self.interval {
            let at = self.start + iv.mul_f64(n as f64);
            if at >= self.deadline {
                return false;
            }
            tokio::time::sleep_until(at.into()).await;
        }
        Instant::now() < self.deadline
    }
}

#[derive(Default)]
struct Tally {
    statuses: BTreeMap<String, u64>,
    latencies_us: Vec<u64>,
    ok: u64,
    failed: u64,
    sent: u64,
}

impl Tally {
    fn status(&mut self, s: &str) {
        *self.statuses.entry(s.to_string()).or_default() += 1;
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

/// Runs `httpcrypt flood`.
pub async fn run(a: FloodArgs) -> Result<i32> {
    let authority = a
        .url
        .authority()
        .context("URL needs a host")?
        .as_str()
        .to_string();
    let addr: SocketAddr = tokio::net::lookup_host(&authority)
        .await?
        .next()
        .context("no address for the host")?;
    if !addr.ip().is_loopback() {
        bail!("flood only targets loopback addresses (127.0.0.0/8, ::1)");
    }
    let duration = Duration::from_secs_f64(a.duration.clamp(0.1, 3600.0));
    let start = Instant::now();
    let pace = Arc::new(Pace {
        start,
        deadline: start + duration,
        interval: (a.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / a.rate)),
        issued: AtomicU64::new(0),
        max: a.max_requests,
    });
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mount = outer::Mount::new(&a.mount)?;
    match a.mode {
        FloodMode::LegitNew | FloodMode::LegitReturning => {
            probe(&a, &authority, mount, pace.clone(), tally.clone()).await?
        }
        FloodMode::SlowHead => slow_heads(&a, addr, pace.clone(), tally.clone()).await,
        FloodMode::Replay => {
            let path = a
                .payload
                .as_ref()
                .context("--mode replay needs --payload")?;
            let payload = Arc::new(std::fs::read(path).context("reading --payload")?);
            replay(&a, addr, payload, pace.clone(), tally.clone()).await
        }
        _ => attack(&a, addr, &authority, mount, pace.clone(), tally.clone()).await?,
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut t = std::mem::take(&mut *tally.lock().unwrap_or_else(|p| p.into_inner()));
    t.latencies_us.sort_unstable();
    let out = serde_json::json!({
        "mode": format!("{:?}", a.mode).to_lowercase(),
        "elapsed_s": elapsed,
        "sent": t.sent,
        "ok": t.ok,
        "failed": t.failed,
        "rate": t.sent as f64 / elapsed.max(1e-9),
        "success_rate": if t.sent > 0 { t.ok as f64 / t.sent as f64 } else { 0.0 },
        "p50_ms": pct(&t.latencies_us, 0.5),
        "p99_ms": pct(&t.latencies_us, 0.99),
        "max_ms": pct(&t.latencies_us, 1.0),
        "statuses": t.statuses,
    });
    println!("{out}");
    Ok(0)
}

/// Legitimate clients through [`httpcrypt::Client`], which obeys the
/// defence's answers by itself. Latency is measured per call, retries included.
async fn probe(
    a: &FloodArgs,
    authority: &str,
    mount: outer::Mount,
    pace: Arc<Pace>,
    tally: Arc<Mutex<Tally>>,
) -> Result<()> {
    let returning = a.mode == FloodMode::LegitReturning;
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
        mount,
        key_policy: if returning {
            httpcrypt::KeyPolicy::ReusePerHost
        } else {
            httpcrypt::KeyPolicy::FreshPerRequest
        },
        tickets: returning,
        get_form: true,
        ..Default::default()
    });
    let url = format!("http://{authority}{}", a.path);
    let get = |c: httpcrypt::Client, url: String| async move {
        let req = http::Request::get(url.as_str()).body(bytes::Bytes::new())?;
        let rsp = c.send(req).await?;
        let status = rsp.status();
        http_body_util::BodyExt::collect(rsp.into_body())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::Ok(status)
    };
    let timeout = Duration::from_secs_f64(a.timeout.clamp(0.1, 60.0));
    // Keys (and for returning clients the ticket) before the clock starts;
    // under a flood this may fail, and the first measured requests redo it.
    let _ = tokio::time::timeout(timeout, get(client.clone(), url.clone())).await;
    let inflight = Arc::new(tokio::sync::Semaphore::new(a.connections.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    while pace.next().await {
        let permit = inflight.clone().acquire_owned().await?;
        let (c, url, tally) = (client.clone(), url.clone(), tally.clone());
        tasks.spawn(async move {
            let t0 = Instant::now();
            let r = tokio::time::timeout(timeout, get(c, url)).await;
            let us = t0.elapsed().as_micros() as u64;
            let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
            t.sent += 1;
            match r {
                Ok(Ok(s)) if s.is_success() => {
                    t.ok += 1;
                    t.latencies_us.push(us);
                    t.status(s.as_str());
                }
                Ok(Ok(s)) => {
                    t.failed += 1;
                    t.status(s.as_str());
                }
                Ok(Err(e)) => {
                    t.failed += 1;
                    let kind = e
                        .downcast_ref::<httpcrypt::Error>()
                        .map_or_else(|| "error".to_string(), |e| format!("error: {e}"));
                    t.status(&kind);
                }
                Err(_) => {
                    t.failed += 1;
                    t.status("timeout");
                }
            }
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    // In-flight requests finish within their timeout.
    while tasks.join_next().await.is_some() {}
    Ok(())
}

async fn connect_from(src: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(src, 0))?;
    let s = sock.connect(to).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// The kid to put in junk cookies, and the server's key for valid requests.
async fn server_key(
    authority: &str,
    mount: &outer::Mount,
) -> Result<httpcrypt::proto::DiscoveredKey> {
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
        mount: mount.clone(),
        ..Default::default()
    });
    let certs = client.refresh_certs("http", authority).await?;
    let now = httpcrypt::clock::unix_now();
    let c = httpcrypt::proto::cert::choose(&certs, now, None)?;
    Ok(httpcrypt::proto::DiscoveredKey::from(c))
}

/// One attack request's bytes.
fn attack_request(
    mode: FloodMode,
    key: &httpcrypt::proto::DiscoveredKey,
    mount: &outer::Mount,
    host: &str,
    admit: Option<&AdmitCookie>,
) -> Result<(Vec<u8>, Option<[u8; 24]>)> {
    let mut n0 = [0u8; 24];
    OsRng.fill_bytes(&mut n0);
    let echo = |n0: &[u8; 24]| -> Option<String> {
        let c = admit?;
        let s = admission::solve_puzzle(c, n0, OsRng.next_u64(), 1 << 30)?;
        Some(format!(
            "; {}={}",
            admission::ADMIT_COOKIE,
            admission::format_echo(c, &s)
        ))
    };
    match mode {
        FloodMode::Junk => {
            let mut public = [0u8; 32];
            OsRng.fill_bytes(&mut public);
            let mut body = [0u8; 64];
            OsRng.fill_bytes(&mut body);
            let cookie = format!(
                "{}={}{}",
                key.kid().to_b64(),
                b64::encode(&public),
                echo(&n0).unwrap_or_default()
            );
            let mut out = format!(
                "POST {} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                mount.nonce_path(&n0),
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(&body);
            Ok((out, Some(n0)))
        }
        FloodMode::Valid => {
            let secret = KexSecret::generate(&mut OsRng);
            let p = httpcrypt::proto::client::PreparedRequest::for_key(
                &key.kex_public,
                httpcrypt::proto::client::ClientCredential::Key(&secret),
                n0,
                "",
                "",
            )?;
            let mut head = httpcrypt::proto::inner::RequestHead::new("GET", "/");
            head.fields
                .push(httpcrypt::proto::inner::Field::new("Host", host));
            head.fields.push(httpcrypt::proto::inner::Field::new(
                "Date",
                httpcrypt::proto::replay::format_date(httpcrypt::clock::unix_now()),
            ));
            let stream = p.seal_message(&head, b"", 16_384)?;
            let mut out = p.encode_outer(outer::Form::Post, mount, host, &stream);
            if let Some(e) = echo(&n0) {
                // Append the echo to the Cookie line of the canonical head.
                let text = String::from_utf8_lossy(&out).into_owned();
                let cookie_line = format!("Cookie: {}", p.cookie());
                out = text
                    .replacen(&cookie_line, &format!("{cookie_line}{e}"), 1)
                    .into_bytes();
            }
            Ok((out, Some(n0)))
        }
        _ => {
            // Huge header section: 13 fields of 8 KiB, above every limit.
            let mut out = format!("GET {} HTTP/1.1\r\nHost: {host}\r\n", mount.nonce_path(&n0));
            let filler = "x".repeat(8 * 1024);
            for i in 0..13 {
                out.push_str(&format!("X-Filler-{i}: {filler}\r\n"));
            }
            out.push_str("\r\n");
            Ok((out.into_bytes(), None))
        }
    }
}

/// Reads one response; returns (status, problem type of a 429, keep-alive).
async fn read_response(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> Result<(u16, Option<Vec<u8>>, bool)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(n) = r.parse(buf)? {
            let status = r.code.unwrap_or(0);
            let mut len = 0usize;
            let mut close = false;
            for h in r.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    len = std::str::from_utf8(h.value)?.trim().parse()?;
                } else if h.name.eq_ignore_ascii_case("connection")
                    && h.value.eq_ignore_ascii_case(b"close")
                {
                    close = true;
                }
            }
            if len > 16 << 20 {
                bail!("response body too large");
            }
            while buf.len() < n + len {
                let mut chunk = [0u8; 16 * 1024];
                let k = s.read(&mut chunk).await?;
                if k == 0 {
                    bail!("closed inside a body");
                }
                buf.extend_from_slice(&chunk[..k]);
            }
            let body = (status == 429).then(|| buf[n..n + len].to_vec());
            buf.drain(..n + len);
            return Ok((status, body, !close));
        }
        if buf.len() > 256 * 1024 {
            bail!("response head too large");
        }
        let mut chunk = [0u8; 16 * 1024];
        let k = s.read(&mut chunk).await?;
        if k == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..k]);
    }
}

/// Requests one attack connection may have unanswered (pipelined).
const WINDOW: u64 = 64;

/// Raw attack connections. Each keeps one source address and pipelines up
/// to [`WINDOW`] requests, paced by `--rate` rather than by the answers, so
/// the offered load does not fall when the server slows down (a closed loop
/// would flood only as fast as the server answers). A reader per connection
/// counts the answers; the connection is reopened when the server closes it.
async fn attack(
    a: &FloodArgs,
    addr: SocketAddr,
    authority: &str,
    mount: outer::Mount,
    pace: Arc<Pace>,
    tally: Arc<Mutex<Tally>>,
) -> Result<()> {
    let key = server_key(authority, &mount).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..a.connections.max(1) {
        let src = source_addr(i as u32 % a.sources.max(1));
        let (pace, tally, mount, host, key) = (
            pace.clone(),
            tally.clone(),
            mount.clone(),
            authority.to_string(),
            key,
        );
        let (mode, obey) = (a.mode, a.obey);
        tasks.spawn(async move {
            let admit: Arc<Mutex<Option<AdmitCookie>>> = Arc::new(Mutex::new(None));
            let mut pending: Option<Vec<u8>> = None;
            'conn: while Instant::now() < pace.deadline {
                let s = match connect_from(src, addr).await {
                    Ok(s) => s,
                    Err(_) => {
                        {
                            let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                            t.failed += 1;
                            t.status("connect_error");
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let (mut rd, mut wr) = s.into_split();
                let answered = Arc::new(AtomicU64::new(0));
                let reader = {
                    let (tally, admit, answered) = (tally.clone(), admit.clone(), answered.clone());
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        loop {
                            let r = read_response(&mut rd, &mut buf).await;
                            answered.fetch_add(1, Ordering::Relaxed);
                            let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                            match r {
                                Ok((status, body, keep)) => {
                                    t.status(&status.to_string());
                                    if status == 200 {
                                        t.ok += 1;
                                    } else {
                                        t.failed += 1;
                                    }
                                    if obey {
                                        if let Some(Ok(admission::Refusal::Admission(c))) =
                                            body.map(|b| admission::parse_refusal(&b))
                                        {
                                            *admit.lock().unwrap_or_else(|p| p.into_inner()) =
                                                Some(c);
                                        }
                                    }
                                    if !keep {
                                        return;
                                    }
                                }
                                Err(_) => return,
                            }
                        }
                    })
                };
                let mut written = 0u64;
                loop {
                    if reader.is_finished() {
                        continue 'conn;
                    }
                    if written >= answered.load(Ordering::Relaxed) + WINDOW {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        if Instant::now() >= pace.deadline {
                            break;
                        }
                        continue;
                    }
                    let req = match pending.take() {
                        Some(r) => r,
                        None => {
                            if !pace.next().await {
                                break;
                            }
                            let cookie = *admit.lock().unwrap_or_else(|p| p.into_inner());
                            match attack_request(mode, &key, &mount, &host, cookie.as_ref()) {
                                Ok((r, _)) => r,
                                Err(_) => continue,
                            }
                        }
                    };
                    if wr.write_all(&req).await.is_err() {
                        // Sent again on the next connection.
                        pending = Some(req);
                        continue 'conn;
                    }
                    written += 1;
                    tally.lock().unwrap_or_else(|p| p.into_inner()).sent += 1;
                }
                // The run is over: give the last answers a moment, then stop.
                let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                break;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Replayed first flights on new connections, one at a time per task.
async fn replay(
    a: &FloodArgs,
    addr: SocketAddr,
    payload: Arc<Vec<u8>>,
    pace: Arc<Pace>,
    tally: Arc<Mutex<Tally>>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..a.connections.max(1) {
        let src = source_addr(i as u32 % a.sources.max(1));
        let (pace, tally, payload) = (pace.clone(), tally.clone(), payload.clone());
        tasks.spawn(async move {
            while pace.next().await {
                let t0 = Instant::now();
                let answered = async {
                    let mut s = connect_from(src, addr).await?;
                    s.write_all(&payload).await?;
                    let mut b = [0u8; 4096];
                    let n = s.read(&mut b).await?;
                    std::io::Result::Ok(n > 0)
                };
                let r = tokio::time::timeout(Duration::from_secs(2), answered).await;
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                t.sent += 1;
                match r {
                    Ok(Ok(true)) => {
                        t.ok += 1;
                        t.latencies_us.push(t0.elapsed().as_micros() as u64);
                        t.status("answered");
                    }
                    Ok(Ok(false)) => {
                        t.failed += 1;
                        t.status("closed");
                    }
                    Ok(Err(_)) => {
                        t.failed += 1;
                        t.status("error");
                    }
                    Err(_) => {
                        t.failed += 1;
                        t.status("timeout");
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Slow heads: each connection sends a request head one byte per second,
/// until the server closes it or the run ends. Counts connections opened
/// and closed by the server.
async fn slow_heads(a: &FloodArgs, addr: SocketAddr, pace: Arc<Pace>, tally: Arc<Mutex<Tally>>) {
    let mut tasks = tokio::task::JoinSet::new();
    let deadline = pace.deadline;
    for i in 0..a.connections.max(1) {
        let src = source_addr(i as u32 % a.sources.max(1));
        let (pace, tally) = (pace.clone(), tally.clone());
        tasks.spawn(async move {
            while pace.next().await {
                let t0 = Instant::now();
                let Ok(mut s) = connect_from(src, addr).await else {
                    {
                        let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                        t.sent += 1;
                        t.failed += 1;
                        t.status("connect_error");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let head =
                    b"POST /AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\nX-Slow: ";
                let mut closed = s.write_all(head).await.is_err();
                let mut probe = [0u8; 512];
                while !closed && Instant::now() < deadline {
                    tokio::select! {
                        r = s.read(&mut probe) => closed = !matches!(r, Ok(n) if n > 0) || closed,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {
                            closed = s.write_all(b"a").await.is_err();
                        }
                    }
                }
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                t.sent += 1;
                t.latencies_us.push(t0.elapsed().as_micros() as u64);
                t.status(if closed {
                    "closed_by_server"
                } else {
                    "held_to_end"
                });
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}
