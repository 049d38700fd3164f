//! Connection floods that need no HTTPCrypt: replayed first flights (a TLS
//! ClientHello) and slow request heads.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{connect_from, source_addr, FloodArgs, Pace, Tally};

/// Replayed first flights on new connections, one at a time per task.
pub(super) async fn replay(
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
pub(super) async fn slow_heads(
    a: &FloodArgs,
    addr: SocketAddr,
    pace: Arc<Pace>,
    tally: Arc<Mutex<Tally>>,
) {
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
