//! `loadgen`: the end-to-end benchmark tool of `bench/`.
//!
//! - `loadgen run`: one load generator for plain HTTP, TLS (rustls client)
//!   and HTTPCrypt (sans-IO core), with the same event loop and HTTP/1.1
//!   code for all three; prints one JSON result.
//! - `loadgen serve-tls`: the rustls TLS 1.3 baseline server.
//! - `loadgen hold`: many connections held in one state, for the memory
//!   per connection of `bench/scale`.
//! - `loadgen delay`: the NFQUEUE delay of the round-trip experiment.
//!
//! `bench/run` drives all of it; `bench/REPORT.md` explains the method.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

mod delay;
mod floor;
mod hc;
mod hcpq;
mod hold;
mod http1;
mod io;
mod load;
mod replay;
mod requests;
mod server;
mod sink;
mod tls;

#[derive(Parser)]
#[command(
    name = "loadgen",
    about = "HTTP / TLS / HTTPCrypt load generator of bench/"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate load and print a JSON result.
    Run(RunArgs),
    /// The rustls TLS 1.3 baseline server (static files).
    ServeTls(server::ServeTlsArgs),
    /// What the protocol alone costs per request on this core (X25519, the
    /// exchange's cryptography, the sans-IO core), as JSON.
    Floor(floor::FloorArgs),
    /// Seal requests ahead of time and write them as raw HTTP/1.1, for
    /// another load generator to send (`bench/crosscheck`); prints JSON.
    Requests(requests::RequestsArgs),
    /// Open many connections, bring each into one state (idle, kept alive
    /// after an answer, half a request head) and hold them until stdin
    /// closes (`bench/scale`); prints JSON lines.
    Hold(hold::HoldArgs),
    /// Fetch a list of URLs in turn through one `httpcrypt::Client` (keys,
    /// tickets and connections kept across them, as one browser would);
    /// prints JSON (`bench/split`'s one-client trace replay).
    Replay(replay::ReplayArgs),
    /// Delay NFQUEUE'd packets by a fixed time (round-trip experiment).
    Delay {
        /// Queue number of the iptables NFQUEUE rule.
        #[arg(long, default_value_t = 0)]
        queue: u16,
        /// One-way delay in milliseconds (RTT = 2 × this).
        #[arg(long, default_value_t = 25.0)]
        ms: f64,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtoArg {
    Plain,
    Tls,
    Hc,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// A new TCP connection (and handshake) for every request.
    Newconn,
    /// Requests one after another on long-lived connections.
    Keepalive,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KeyArg {
    Fresh,
    Reuse,
    Ticket,
    /// Suite 2 (X25519 + ML-KEM-768): a fresh key and encapsulation per request.
    Hybrid,
    /// Suite 2, then the ticket of the first (hybrid) answer.
    HybridTicket,
}

impl KeyArg {
    fn mode(self) -> hc::KeyMode {
        match self {
            KeyArg::Fresh | KeyArg::Hybrid => hc::KeyMode::Fresh,
            KeyArg::Reuse => hc::KeyMode::Reuse,
            KeyArg::Ticket | KeyArg::HybridTicket => hc::KeyMode::Ticket,
        }
    }

    /// The suite-2 mode, `None` for suite 1.
    fn pq(self) -> Option<hcpq::PqMode> {
        match self {
            KeyArg::Hybrid => Some(hcpq::PqMode::Fresh),
            KeyArg::HybridTicket => Some(hcpq::PqMode::Ticket),
            _ => None,
        }
    }
}

#[derive(clap::Args)]
struct RunArgs {
    #[arg(long, value_enum)]
    proto: ProtoArg,
    /// Server address.
    #[arg(long)]
    addr: SocketAddr,
    /// Path of the file to fetch.
    #[arg(long)]
    path: String,
    /// Expected payload length (responses of another length are errors).
    #[arg(long)]
    expect_len: Option<u64>,
    #[arg(long, value_enum, default_value = "newconn")]
    mode: ModeArg,
    /// Concurrent connections.
    #[arg(long, default_value_t = 50)]
    conns: usize,
    /// Event-loop threads (1: a single-threaded loop).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seconds of warm-up before the measurement window.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Seconds of measurement (with --count: the longest it may take).
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Stop after this many requests instead (no warm-up).
    #[arg(long)]
    count: Option<u64>,
    /// Start requests at this rate (per second, all connections together,
    /// at most --conns in flight) instead of each connection's next request
    /// as soon as its last is answered: every configuration at one load.
    #[arg(long, value_parser = positive)]
    rate: Option<f64>,
    /// TLS: resume sessions (tickets or IDs, whatever the server offers).
    #[arg(long)]
    tls_resume: bool,
    /// TLS: offer the X25519MLKEM768 hybrid group first (with X25519 and
    /// P-256 after it, as rustls' default provider offers them).
    #[arg(long)]
    tls_pq: bool,
    /// HTTPCrypt mount path.
    #[arg(long, default_value = "/hc")]
    mount: String,
    /// HTTPCrypt client keys.
    #[arg(long, value_enum, default_value = "fresh")]
    keys: KeyArg,
    /// Suite 2: also send a fresh hybrid request in the GET form where it
    /// fits (the default is a POST, as the Rust client's: the query's
    /// base64url costs a third more bytes).
    #[arg(long)]
    pq_get: bool,
    /// Server processes whose CPU time is measured (repeat for several).
    #[arg(long = "cpu-pid")]
    cpu_pids: Vec<u32>,
    /// A label copied into the result.
    #[arg(long, default_value = "")]
    label: String,
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::ServeTls(a) => server::run(a),
        Cmd::Floor(a) => floor::run(a),
        Cmd::Requests(a) => requests::run(a),
        Cmd::Hold(a) => hold::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Delay { queue, ms } => delay::run(queue, Duration::from_secs_f64(ms / 1e3)),
    };
    if let Err(e) = r {
        eprintln!("loadgen: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: RunArgs) -> Result<()> {
    let rt = if a.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(a.threads)
            .enable_all()
            .build()?
    };
    let out = rt.block_on(run_async(&a))?;
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

async fn run_async(a: &RunArgs) -> Result<serde_json::Value> {
    let host = a.addr.to_string();
    let proto = match a.proto {
        ProtoArg::Plain => load::Proto::Plain,
        ProtoArg::Tls => load::Proto::Tls(tokio_rustls::TlsConnector::from(tls::client_config(
            a.tls_resume,
            a.tls_pq,
        )?)),
        ProtoArg::Hc if a.keys.pq().is_some() => {
            let mount = httpcrypt_proto::outer::Mount::new(&a.mount)?;
            let path = httpcrypt_proto::client::pq::pq_path(&mount);
            let list = fetch_options(a.addr, &host, &path).await?;
            let mode = a.keys.pq().context("suite-2 mode")?;
            load::Proto::HcPq(Arc::new(hcpq::HcPqClient::new(
                &list, &a.mount, &host, mode, a.pq_get,
            )?))
        }
        ProtoArg::Hc => {
            let certs = fetch_certs(a.addr, &host, &a.mount).await?;
            load::Proto::Hc(Arc::new(hc::HcClient::new(
                &certs,
                &a.mount,
                &host,
                a.keys.mode(),
            )?))
        }
    };
    let settings = load::Settings {
        addr: a.addr,
        host,
        path: a.path.clone(),
        expect_len: a.expect_len,
        new_conn: a.mode == ModeArg::Newconn,
        conns: a.conns,
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(a.duration),
        count: a.count,
        cpu_pids: a.cpu_pids.clone(),
        rate: a.rate,
    };
    let mut out = load::run(proto, settings).await?;
    if let Some(o) = out.as_object_mut() {
        o.insert("label".into(), a.label.clone().into());
        o.insert(
            "mode".into(),
            if a.mode == ModeArg::Newconn {
                "newconn"
            } else {
                "keepalive"
            }
            .into(),
        );
        o.insert("conns".into(), a.conns.into());
        o.insert("offered_rate".into(), a.rate.into());
        o.insert("path".into(), a.path.clone().into());
    }
    Ok(out)
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("{s}: not a positive number")),
    }
}

/// `OPTIONS {mount}/` over plain HTTP: the server's certificate list (what
/// a client would otherwise find in the DNS). Not part of any measurement.
async fn fetch_certs(addr: SocketAddr, host: &str, mount: &str) -> Result<Vec<u8>> {
    let mount = httpcrypt_proto::outer::Mount::new(mount)?;
    fetch_options(addr, host, &mount.options_path()).await
}

/// `OPTIONS {path}` over plain HTTP: the body of its 200 answer (for
/// `{mount}/pq`, the suite-2 certificates and encapsulation keys).
async fn fetch_options(addr: SocketAddr, host: &str, path: &str) -> Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let req = format!("OPTIONS {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    tcp.read_to_end(&mut buf).await?;
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("no response to OPTIONS");
    };
    if !buf.starts_with(b"HTTP/1.1 200") {
        bail!("OPTIONS {path}: {}", String::from_utf8_lossy(&buf[..end]));
    }
    Ok(buf[end + 4..].to_vec())
}
