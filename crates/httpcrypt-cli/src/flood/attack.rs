//! Attack modes that speak HTTPCrypt's outer HTTP/1.1: junk and valid
//! fresh-key requests and huge header sections, pipelined on raw
//! connections from many source addresses, answering admission challenges
//! when told to (`--obey`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use httpcrypt::proto::admission::{self, AdmitCookie};
use httpcrypt::proto::{b64, outer, KexSecret};
use rand_core::{OsRng, RngCore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{connect_from, source_addr, FloodArgs, FloodMode, Pace, Tally};

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
pub(super) async fn attack(
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
