//! Probe modes: legitimate clients through [`httpcrypt::Client`], new or
//! returning, measuring what they get while an attack runs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use httpcrypt::proto::outer;

use super::{FloodArgs, FloodMode, Pace, Tally};

/// Legitimate clients through [`httpcrypt::Client`], which obeys the
/// defence's answers by itself. Latency is measured per call, retries included.
pub(super) async fn probe(
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
