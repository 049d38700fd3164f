//! Pre-sealed HTTPCrypt requests for an independent load generator
//! (`bench/crosscheck` drives them with wrk): every request is sealed
//! once, here, with the same client code as `loadgen run`, and written
//! out as raw HTTP/1.1; the other client only sends the bytes. Each request
//! has its own nonce and a current inner `Date`, so none is a replay and
//! all of them stay fresh for the server's window (60 s by default).
//!
//! Before writing, the generator fetches the same file twice over one new
//! connection with requests of the same kind and reports the outer body
//! lengths of those verified answers (the first answer on a connection may
//! carry a ticket, later ones not): the other client can then tell an
//! answer of the expected kind from a sealed refusal, which it cannot open.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::hc::{HcClient, KeyMode};
use crate::http1::Buffers;

#[derive(clap::Args)]
pub struct RequestsArgs {
    /// Server address (`httpcrypt serve`).
    #[arg(long)]
    addr: SocketAddr,
    /// Path of the file to fetch.
    #[arg(long)]
    path: String,
    /// HTTPCrypt mount path.
    #[arg(long, default_value = "/hc")]
    mount: String,
    /// HTTPCrypt client keys (as `loadgen run --keys`).
    #[arg(long, value_enum, default_value = "fresh")]
    keys: crate::KeyArg,
    /// How many requests to write.
    #[arg(long)]
    count: u64,
    /// Ask for the connection to close after each answer (a new connection
    /// per request).
    #[arg(long)]
    close: bool,
    /// Where to write the requests, one after another.
    #[arg(long)]
    out: std::path::PathBuf,
}

/// One verified exchange on `io`: outer and inner status 200. Returns the
/// outer body length and the payload length.
async fn verified<S>(io: &mut S, c: &HcClient, path: &str, close: bool) -> Result<(u64, u64)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut req = Vec::new();
    let pending = c.request(path, close, &mut req)?;
    let (reply, outer) = c
        .exchange(io, &req, &mut Buffers::default(), pending)
        .await
        .context("verification request")?;
    if reply.status != 200 {
        bail!("verification request: outer status {}", reply.status);
    }
    Ok((outer, reply.payload))
}

/// Writes the requests and prints what the answers will look like.
pub fn run(a: RequestsArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(write(&a))?;
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

async fn write(a: &RequestsArgs) -> Result<serde_json::Value> {
    let host = a.addr.to_string();
    let certs = crate::fetch_certs(a.addr, &host, &a.mount).await?;
    let mode = a.keys.mode();
    let client = Arc::new(HcClient::new(&certs, &a.mount, &host, mode)?);
    let connect = || async {
        tokio::net::TcpStream::connect(a.addr)
            .await
            .with_context(|| format!("connecting to {}", a.addr))
    };
    // A ticket client takes its ticket from a first answer, as `run` does.
    if mode == KeyMode::Ticket {
        verified(&mut connect().await?, &client, &a.path, true).await?;
    }
    // The answers the written requests will get: on a new connection, and
    // after the first on a kept-alive one.
    // Written requests present the ticket held and never ask for a new
    // one (no answer to them is read here).
    client.stop_asking();
    let mut io = connect().await?;
    let (first, payload) = verified(&mut io, &client, &a.path, false).await?;
    let (later, _) = verified(&mut io, &client, &a.path, true).await?;
    let file =
        std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let mut req = Vec::with_capacity(1024);
    let mut bytes = 0u64;
    for _ in 0..a.count {
        client.request(&a.path, a.close, &mut req)?;
        w.write_all(&req)?;
        bytes += req.len() as u64;
    }
    w.flush()?;
    // Either may come back on either kind of connection: a cache hit, say,
    // gets a ticket only on the first connection of its key.
    let mut lengths = vec![first, later];
    lengths.dedup();
    Ok(json!({
        "count": a.count,
        "request_bytes": bytes as f64 / a.count.max(1) as f64,
        "payload": payload,
        "outer_body_lengths": lengths,
    }))
}
