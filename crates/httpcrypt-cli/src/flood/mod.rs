//! `httpcrypt flood`: load against a server on loopback, for the flood
//! benchmark and tests. Attacker modes speak raw HTTP/1.1 from many
//! 127.x.y.z source addresses (one /24 each); probe modes are the real
//! [`httpcrypt::Client`] and measure what legitimate clients get. Every run
//! is bounded by `--duration` and `--max-requests`. Prints one JSON line.
//! Also: the `serve` options of the load-aware defence (spec §14).
//!
//! Where each part lives: the arguments, pacing, tally and report here; the
//! defence's `serve` options in `defence.rs`; the probes in `probe.rs`; the
//! HTTPCrypt-shaped attacks in `attack.rs`; replayed first flights and slow
//! heads in `connections.rs`.

mod attack;
mod connections;
mod defence;
mod probe;

pub use defence::DefenceOpts;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use httpcrypt::proto::outer;
use tokio::net::{TcpSocket, TcpStream};

use attack::attack;
use connections::{replay, slow_heads};
use probe::probe;

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

async fn connect_from(src: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(src, 0))?;
    let s = sock.connect(to).await?;
    s.set_nodelay(true)?;
    Ok(s)
}
