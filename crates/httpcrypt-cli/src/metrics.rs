//! `--metrics ADDR`: the Prometheus text format at `/metrics` and a health
//! check at `/healthz`, on a listener of their own (keep it on loopback or
//! an internal network: it is plain HTTP and unauthenticated).
//!
//! The library counts through the `metrics` facade (key agreements, cache
//! and ticket hits, rejections by reason, rotations, key expiry, open
//! connections); the access log ([`crate::access`]) adds the per-request
//! counts and the duration histogram. Without `--metrics` no recorder is
//! installed and every count is a no-op.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Seconds: from a cached GET on loopback to a slow upstream.
const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Counts one answered request: `key` is how the session key was had
/// (none: plaintext), `status` the inner status (the outer one for
/// answers the layer gave itself), `complete` whether the whole body went
/// out.
pub fn request(key: Option<&'static str>, status: u16, bytes: u64, secs: f64, complete: bool) {
    let class = match (complete, status) {
        (false, _) => "aborted",
        (_, 100..=199) => "1xx",
        (_, 200..=299) => "2xx",
        (_, 300..=399) => "3xx",
        (_, 400..=499) => "4xx",
        _ => "5xx",
    };
    let key = key.unwrap_or("plain");
    metrics::counter!("httpcrypt_requests_total", "outcome" => class, "key" => key).increment(1);
    metrics::counter!("httpcrypt_response_body_bytes_total").increment(bytes);
    metrics::histogram!("httpcrypt_request_duration_seconds").record(secs);
}

/// Whether the server is draining (then `/healthz` answers 503, so a load
/// balancer stops sending new clients).
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<AtomicBool>);

impl Health {
    /// Marks the server as draining.
    pub fn draining(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Installs the recorder and serves `/metrics` and `/healthz` on `addr`.
pub async fn start(
    addr: SocketAddr,
    health: Health,
    keys: httpcrypt::keystore::LiveKeys,
) -> Result<SocketAddr> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("httpcrypt_request_duration_seconds".into()),
            DURATION_BUCKETS,
        )
        .context("histogram buckets")?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    describe();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding --metrics {addr}"))?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (handle, health, keys) = (handle.clone(), health.clone(), keys.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    if req.uri().path() == "/metrics" {
                        httpcrypt::stats::keys(&keys, httpcrypt::keystore::unix_now());
                    }
                    let rsp = answer(&req, &handle, &health);
                    async move { Ok::<_, std::convert::Infallible>(rsp) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    eprintln!("httpcrypt: metrics on http://{local}/metrics");
    Ok(local)
}

fn answer<B>(
    req: &Request<B>,
    handle: &PrometheusHandle,
    health: &Health,
) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match req.uri().path() {
        "/metrics" => {
            handle.run_upkeep();
            (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                handle.render(),
            )
        }
        "/healthz" if health.0.load(Ordering::Relaxed) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "draining\n".to_string(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut rsp = Response::new(Full::new(Bytes::from(body)));
    *rsp.status_mut() = status;
    rsp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    rsp
}

fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        "httpcrypt_requests_total",
        "Requests answered, by outcome (inner status class, or aborted) and key (fresh, cache, ticket, plain)"
    );
    describe_counter!(
        "httpcrypt_response_body_bytes_total",
        Unit::Bytes,
        "Outer answer body bytes sent"
    );
    describe_histogram!(
        "httpcrypt_request_duration_seconds",
        Unit::Seconds,
        "From the request head to the end of the answer's body"
    );
    httpcrypt::stats::describe();
}
