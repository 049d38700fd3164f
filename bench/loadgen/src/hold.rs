//! `loadgen hold`: opens many connections to a server, brings each into one
//! state (connected and silent, kept alive after one plaintext or sealed
//! answer, or halfway through a request head), then holds them until its
//! standard input closes, so that `bench/scale` can read what the serving
//! process spends per held connection.
//!
//! The setup uses the generator's HTTP/1.1 code and HTTPCrypt client
//! (`http1`, `hc`), with a bounded number of connections in setup at once;
//! the buffers of a setup are dropped before the hold, so a held connection
//! costs this process only its socket. Prints one JSON line when every
//! connection is set up (or failed), and one when the hold ends, saying how
//! many connections the server closed meanwhile. On exit the connections are
//! reset (linger 0), which leaves no TIME_WAIT behind.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

use crate::hc::{HcClient, KeyMode};
use crate::http1::{self, Buffers, CountSink};

/// What a connection has done when it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HoldState {
    /// Connected, no byte sent.
    Idle,
    /// One plaintext GET answered; the connection stays open (keep-alive).
    Keepalive,
    /// One sealed GET answered, presenting a ticket (the default client).
    Ticket,
    /// One sealed GET answered under a reused client key (session cache).
    Cached,
    /// The first half of a plaintext request head sent, the rest never.
    Half,
}

#[derive(clap::Args)]
pub struct HoldArgs {
    /// Server address.
    #[arg(long)]
    addr: SocketAddr,
    /// Connections to open and hold.
    #[arg(long)]
    conns: usize,
    /// The state each connection is held in.
    #[arg(long, value_enum)]
    state: HoldState,
    /// Path of the file fetched by the answered states.
    #[arg(long, default_value = "/100b")]
    path: String,
    /// HTTPCrypt mount path.
    #[arg(long, default_value = "/hc")]
    mount: String,
    /// Local address to connect from (repeatable; used in turn): each has
    /// its own range of ephemeral ports.
    #[arg(long = "source")]
    sources: Vec<IpAddr>,
    /// Connections in setup at once.
    #[arg(long, default_value_t = 64)]
    parallel: usize,
    /// Seconds the whole setup may take; connections not set up by then
    /// count as failed.
    #[arg(long, default_value_t = 120.0, value_parser = crate::positive)]
    setup_timeout: f64,
    /// Seconds of holding at most; the hold also ends when stdin closes.
    #[arg(long, default_value_t = 300.0, value_parser = crate::positive)]
    max_hold: f64,
}

/// The request head whose first half the `half` state sends: the fields
/// of a typical browser GET.
fn half_head(path: &str, host: &str) -> Vec<u8> {
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) \
         Gecko/20100101 Firefox/128.0\r\nAccept: text/html,application/xhtml+xml,*/*;q=0.8\r\n\
         Accept-Language: en-GB,en;q=0.5\r\nAccept-Encoding: gzip, deflate\r\n\r\n"
    );
    let mut b = head.into_bytes();
    b.truncate(b.len() / 2);
    b
}

struct Setup {
    addr: SocketAddr,
    host: String,
    path: String,
    state: HoldState,
    client: Option<HcClient>,
    half: Vec<u8>,
}

impl Setup {
    async fn connect(&self, source: Option<IpAddr>) -> Result<TcpStream> {
        let socket = match self.addr {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        if let Some(ip) = source {
            socket
                .bind(SocketAddr::new(ip, 0))
                .with_context(|| format!("binding to {ip}"))?;
        }
        let tcp = tokio::time::timeout(Duration::from_secs(10), socket.connect(self.addr))
            .await
            .context("connect timed out")?
            .context("connect")?;
        tcp.set_nodelay(true)?;
        Ok(tcp)
    }

    /// One connection, brought into the state to hold.
    async fn one(&self, source: Option<IpAddr>) -> Result<TcpStream> {
        let mut tcp = self.connect(source).await?;
        match self.state {
            HoldState::Idle => {}
            HoldState::Half => tcp.write_all(&self.half).await?,
            HoldState::Keepalive => {
                let req = format!("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", self.path, self.host);
                let mut bufs = Buffers::default();
                let reply =
                    http1::exchange(&mut tcp, req.as_bytes(), &mut bufs, &mut CountSink(0)).await?;
                if reply.status != 200 || reply.close {
                    bail!("status {} (close: {})", reply.status, reply.close);
                }
            }
            HoldState::Ticket | HoldState::Cached => {
                let client = self.client.as_ref().context("no HTTPCrypt client")?;
                let mut req = Vec::new();
                let pending = client.request(&self.path, false, &mut req)?;
                let (reply, _) = client
                    .exchange(&mut tcp, &req, &mut Buffers::default(), pending)
                    .await?;
                if reply.status != 200 || reply.close {
                    bail!("outer status {} (close: {})", reply.status, reply.close);
                }
            }
        }
        Ok(tcp)
    }
}

pub fn run(a: HoldArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(hold(a))
}

async fn hold(a: HoldArgs) -> Result<()> {
    let host = a.addr.to_string();
    let client = match a.state {
        HoldState::Ticket | HoldState::Cached => {
            let certs = crate::fetch_certs(a.addr, &host, &a.mount).await?;
            let mode = if a.state == HoldState::Ticket {
                KeyMode::Ticket
            } else {
                KeyMode::Reuse
            };
            let c = HcClient::new(&certs, &a.mount, &host, mode)?;
            if mode == KeyMode::Ticket {
                // The ticket comes with a first answer, on a connection of
                // its own that is not held.
                let mut tcp = TcpStream::connect(a.addr).await?;
                let mut req = Vec::new();
                let pending = c.request(&a.path, true, &mut req)?;
                c.exchange(&mut tcp, &req, &mut Buffers::default(), pending)
                    .await
                    .context("the request that fetches the ticket")?;
            }
            Some(c)
        }
        _ => None,
    };
    let setup = Arc::new(Setup {
        addr: a.addr,
        half: half_head(&a.path, &host),
        host,
        path: a.path.clone(),
        state: a.state,
        client,
    });

    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(a.setup_timeout);
    let mut held: Vec<TcpStream> = Vec::with_capacity(a.conns);
    let mut failed = 0usize;
    let mut first_error: Option<String> = None;
    let mut tasks = JoinSet::new();
    let mut next = 0usize;
    let parallel = a.parallel.max(1);
    while next < a.conns || !tasks.is_empty() {
        while next < a.conns && tasks.len() < parallel {
            let s = Arc::clone(&setup);
            let source = (!a.sources.is_empty()).then(|| a.sources[next % a.sources.len()]);
            tasks.spawn(async move { s.one(source).await });
            next += 1;
        }
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(Ok(Ok(tcp)))) => held.push(tcp),
            Ok(Some(Ok(Err(e)))) => {
                failed += 1;
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
            Ok(Some(Err(e))) => {
                failed += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
            Ok(None) => {}
            Err(_) => {
                // Out of time: what is still in setup and what never
                // started counts as failed.
                failed += tasks.len() + (a.conns - next);
                first_error.get_or_insert_with(|| "setup timed out".into());
                tasks.abort_all();
                break;
            }
        }
    }
    drop(tasks);
    println!(
        "{}",
        json!({
            "event": "ready",
            "state": format!("{:?}", a.state).to_lowercase(),
            "held": held.len(),
            "failed": failed,
            "first_error": first_error,
            "setup_s": started.elapsed().as_secs_f64(),
        })
    );

    // Hold until stdin closes (read on a thread of its own: the runtime
    // has no stdin driver) or the longest hold has passed.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 64];
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        let _ = tx.send(());
    });
    let _ = tokio::time::timeout(Duration::from_secs_f64(a.max_hold), rx).await;

    // A connection the server closed reads as end of stream (or reset).
    let mut closed = 0usize;
    let mut buf = [0u8; 1];
    for tcp in &held {
        match tcp.try_read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => closed += 1,
        }
        let _ = tcp.set_zero_linger();
    }
    println!(
        "{}",
        json!({"event": "released", "held": held.len(), "closed_by_server": closed})
    );
    drop(held);
    Ok(())
}
