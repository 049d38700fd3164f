//! `--metrics ADDR` of `serve` and `gateway`: a listener of its own (kept
//! off the public address, as with nginx's `stub_status` or Caddy's admin
//! endpoint) that answers `GET /metrics` in the Prometheus text exposition
//! format (0.0.4) and `GET /healthz` with 200 `ok` while the server serves,
//! 503 `draining` once it stops accepting.
//!
//! The series are the library's (`httpcrypt::metrics`), recorded by
//! `metrics-exporter-prometheus` without its own HTTP listener: this one is
//! a plain hyper HTTP/1.1 server on the same runtime.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Content type of the Prometheus text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often histograms are drained into their buckets when nobody
/// scrapes (the exporter's own default), so their memory stays bounded.
const UPKEEP: Duration = Duration::from_secs(5);

/// The running metrics listener; dropping it stops it.
pub struct Endpoint {
    draining: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Endpoint {
    /// From now on `/healthz` answers 503: the server is draining.
    pub fn draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Installs the Prometheus recorder, enables the library's series and
/// serves them on `addr`; `None` when `addr` is (metrics off: nothing is
/// installed, and the server's counting points stay a branch each).
pub async fn start(
    addr: Option<SocketAddr>,
    layer: &httpcrypt::HttpCryptLayer,
) -> Result<Option<Endpoint>> {
    let Some(addr) = addr else { return Ok(None) };
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(httpcrypt::metrics::DURATION.to_string()),
            httpcrypt::metrics::DURATION_BUCKETS,
        )
        .context("histogram buckets")?
        .build_recorder();
    let handle = recorder.handle();
    ::metrics::set_global_recorder(recorder)
        .map_err(|_| anyhow::anyhow!("a metrics recorder is already installed"))?;
    httpcrypt::metrics::enable();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))?;
    eprintln!(
        "httpcrypt: metrics on http://{}/metrics",
        listener.local_addr()?
    );
    let draining = Arc::new(AtomicBool::new(false));
    let upkeep = tokio::spawn({
        let handle = handle.clone();
        async move {
            let mut every = tokio::time::interval(UPKEEP);
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        }
    });
    let state = Arc::new(State {
        handle,
        layer: layer.clone(),
        draining: draining.clone(),
    });
    let serving = tokio::spawn(accept_loop(listener, state));
    Ok(Some(Endpoint {
        draining,
        tasks: vec![upkeep, serving],
    }))
}

struct State {
    handle: PrometheusHandle,
    layer: httpcrypt::HttpCryptLayer,
    draining: Arc<AtomicBool>,
}

async fn accept_loop(listener: tokio::net::TcpListener, state: Arc<State>) {
    // Scrapers are few: a small bound keeps a flood off this port cheap.
    let permits = Arc::new(tokio::sync::Semaphore::new(64));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let rsp = answer(&state, &req);
                async move { Ok::<_, std::convert::Infallible>(rsp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            // A scrape is short; a connection held open longer is dropped.
            let _ = tokio::time::timeout(Duration::from_secs(60), conn).await;
            drop(permit);
        });
    }
}

fn answer<B>(state: &State, req: &Request<B>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, ctype: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(ctype),
        );
        r.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        );
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            state.layer.observe_metrics();
            reply(StatusCode::OK, TEXT_FORMAT, state.handle.render())
        }
        "/healthz" if state.draining.load(Ordering::Relaxed) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "draining\n".into(),
        ),
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/healthz` turns to 503 once the server drains; `/metrics` keeps
    /// answering meanwhile (a last scrape sees the drain).
    #[test]
    fn health_follows_the_drain() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        // A layer needs a runtime for its key store; none is started here.
        let _guard = rt.enter();
        let state = State {
            handle: PrometheusBuilder::new().build_recorder().handle(),
            layer: httpcrypt::HttpCryptLayer::new(
                httpcrypt::keys::LiveKeys::new(),
                httpcrypt::ServerConfig::default(),
            ),
            draining: Arc::new(AtomicBool::new(false)),
        };
        let get = |path: &str| {
            let req = Request::get(path).body(()).expect("a request");
            answer(&state, &req).status()
        };
        assert_eq!(get("/healthz"), StatusCode::OK);
        assert_eq!(get("/metrics"), StatusCode::OK);
        assert_eq!(get("/other"), StatusCode::NOT_FOUND);
        let endpoint = Endpoint {
            draining: state.draining.clone(),
            tasks: Vec::new(),
        };
        endpoint.draining();
        assert_eq!(get("/healthz"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(get("/metrics"), StatusCode::OK);
        let post = Request::post("/healthz").body(()).expect("a request");
        assert_eq!(
            answer(&state, &post).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
