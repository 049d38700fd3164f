//! The listeners behind `httpcrypt serve` and `httpcrypt gateway`: an
//! HTTP/1.1 accept loop with keep-alive, a header timeout, a bound on
//! concurrent connections and outer size limits (spec §11), plus the two
//! services it usually runs: static files and a reverse proxy.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::error::BoxError;
use crate::server::{ConnKeys, HcBody};

/// Connection-level settings.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// Most connections served at once; further ones wait in the backlog.
    pub max_connections: usize,
    /// Longest wait for a complete request head.
    pub header_timeout: Duration,
    /// Hard limit on an outer head (request line and fields), bytes: above
    /// it hyper answers 431 without calling the service. The finer limits of
    /// spec §11.6 (414, 431) are the layer's, so this sits above their sum.
    pub max_head: usize,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            max_head: 16 * 1024 + 64 * 1024 + 1024,
        }
    }
}

/// Serves `svc` on `listener` until `shutdown` resolves.
pub async fn run<S>(
    listener: TcpListener,
    svc: S,
    opts: ListenOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    S: tower::Service<
            Request<Incoming>,
            Response = Response<HcBody>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            p = permits.clone().acquire_owned() => p.map_err(std::io::Error::other)?,
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let svc = svc.clone();
        let opts = opts.clone();
        tokio::spawn(async move {
            // The layer notes here the key expiry of every request on this
            // connection; once all of them have expired the connection is
            // closed (after any request in flight), so no idle keep-alive
            // connection outlives the keys it was used with (spec §6).
            let conn_keys = ConnKeys::default();
            let noted = conn_keys.clone();
            let hyper_svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(noted.clone());
                svc.clone().oneshot(req)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(opts.header_timeout)
                .keep_alive(true)
                .max_header_size(opts.max_head)
                .max_buf_size(opts.max_head.max(8192));
            let conn = builder.serve_connection(TokioIo::new(stream), hyper_svc);
            tokio::pin!(conn);
            let mut closing = false;
            let result = loop {
                tokio::select! {
                    r = conn.as_mut() => break r,
                    _ = tokio::time::sleep(Duration::from_secs(1)), if !closing => {
                        if conn_keys.expired(crate::keystore::unix_now()) {
                            tracing::debug!(%peer, "closing a connection whose keys expired");
                            conn.as_mut().graceful_shutdown();
                            closing = true;
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// Binds `addr` and logs the bound address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr).await?;
    tracing::info!(addr = %l.local_addr()?, "listening");
    Ok(l)
}

/// A static-file service for `root` (tower-http `ServeDir`).
pub fn static_files(root: &std::path::Path) -> StaticFiles {
    StaticFiles(tower_http::services::ServeDir::new(root).append_index_html_on_directories(true))
}

/// Static files under a root directory.
#[derive(Clone, Debug)]
pub struct StaticFiles(tower_http::services::ServeDir);

impl tower::Service<Request<HcBody>> for StaticFiles {
    type Response = Response<HcBody>;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response<HcBody>, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<HcBody>) -> Self::Future {
        let fut = tower::Service::call(&mut self.0, req);
        Box::pin(async move {
            let rsp = fut.await.map_err(|e| -> BoxError { Box::new(e) })?;
            Ok(rsp.map(|b| b.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync()))
        })
    }
}

/// Fields a proxy must not forward (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A streaming reverse proxy to `upstream` (`http://host:port`): method,
/// target, fields (but hop-by-hop ones), status and bodies of any size pass
/// through unchanged.
#[derive(Clone, Debug)]
pub struct Upstream {
    client: HyperClient<HttpConnector, HcBody>,
    base: Uri,
}

impl Upstream {
    /// A proxy to `base`.
    pub fn new(base: Uri) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        Upstream {
            client: HyperClient::builder(TokioExecutor::new()).build(http),
            base,
        }
    }
}

impl tower::Service<Request<HcBody>> for Upstream {
    type Response = Response<HcBody>;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response<HcBody>, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<HcBody>) -> Self::Future {
        let client = self.client.clone();
        let base = self.base.clone();
        Box::pin(async move {
            let pq = req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            let prefix = base.path().trim_end_matches('/');
            let uri: Uri = format!(
                "{}://{}{}{}",
                base.scheme_str().unwrap_or("http"),
                base.authority().map_or("", |a| a.as_str()),
                prefix,
                pq
            )
            .parse()?;
            *req.uri_mut() = uri;
            strip_hop_by_hop(req.headers_mut());
            let rsp = client.request(req).await?;
            let (mut parts, body) = rsp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(
                parts,
                body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync(),
            ))
        })
    }
}

fn strip_hop_by_hop(h: &mut http::HeaderMap) {
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| {
            v.split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    for n in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(named) {
        h.remove(n.as_str());
    }
}

/// Bytes of a body, for small responses in tests and tools.
pub async fn collect(body: HcBody) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}
