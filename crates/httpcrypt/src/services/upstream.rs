//! The gateway's reverse proxy to its upstream: method, target, fields (but
//! hop-by-hop ones) and bodies pass through; the client's address is added
//! as the operator chose; allow-listed outer fields travel under a prefix
//! (erratum E1).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::strip_hop_by_hop;
use crate::body::HcBody;
use crate::conn::ConnState;
use crate::error::BoxError;

/// A streaming reverse proxy to `upstream` (`http://host:port`): method,
/// target, fields (but hop-by-hop ones), status and bodies of any size pass
/// through unchanged.
///
/// Cloning it is one reference count: the layer holds a clone in every
/// sealed request's future, which stays within glibc's thread cache only
/// while the service is small (the hyper client alone is not).
#[derive(Clone, Debug)]
pub struct Upstream {
    inner: Arc<UpstreamInner>,
}

#[derive(Debug)]
struct UpstreamInner {
    client: HyperClient<HttpConnector, HcBody>,
    base: Uri,
    /// Lower-case prefix of the allow-listed outer fields (see
    /// [`Upstream::with_outer_prefix`]).
    outer_prefix: String,
    opts: UpstreamOptions,
}

/// Which fields tell the upstream who the client is (the TCP peer of the
/// gateway). Fields of these names a client sent are removed first: only
/// the gateway's word reaches the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Forwarded {
    /// None (and none passed on from the client).
    None,
    /// `X-Forwarded-For` and `X-Forwarded-Proto`, as most proxies send.
    #[default]
    Xff,
    /// `Forwarded` (RFC 7239).
    Forwarded,
    /// Both kinds.
    Both,
}

/// How [`Upstream`] treats its upstream.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// Longest wait for the connection and the answer's head; past it the
    /// client gets 504.
    pub timeout: Duration,
    /// Idle keep-alive connections kept to the upstream.
    pub pool_idle: usize,
    /// How long an idle upstream connection is kept.
    pub pool_idle_timeout: Duration,
    /// The client fields added for the upstream.
    pub forwarded: Forwarded,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        UpstreamOptions {
            timeout: Duration::from_secs(60),
            pool_idle: 32,
            pool_idle_timeout: Duration::from_secs(90),
            forwarded: Forwarded::Xff,
        }
    }
}

impl Upstream {
    /// A proxy to `base`.
    pub fn new(base: Uri) -> Self {
        Self::with_options(base, UpstreamOptions::default())
    }

    /// A proxy to `base` with `opts`.
    pub fn with_options(base: Uri, opts: UpstreamOptions) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(opts.timeout));
        Upstream {
            inner: Arc::new(UpstreamInner {
                client: HyperClient::builder(TokioExecutor::new())
                    .pool_max_idle_per_host(opts.pool_idle)
                    .pool_idle_timeout(opts.pool_idle_timeout)
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .build(http),
                base,
                outer_prefix: httpcrypt_proto::inner::DEFAULT_OUTER_PREFIX.to_ascii_lowercase(),
                opts,
            }),
        }
    }

    /// The same proxy handing the request's [`crate::server::OuterFields`]
    /// (the outer fields the operator allow-listed, unauthenticated) to the
    /// upstream as `{prefix}{name}`, never under their own names (erratum
    /// E1); default `Httpcrypt-Outer-`. Inner fields starting with the
    /// prefix are dropped whether or not any outer field is passed: a
    /// client must not be able to say what the proxy in front said. An
    /// empty prefix means the default: outer fields never travel under
    /// their own names.
    pub fn with_outer_prefix(self, prefix: &str) -> Self {
        let prefix = match prefix {
            "" => httpcrypt_proto::inner::DEFAULT_OUTER_PREFIX,
            p => p,
        };
        let inner = UpstreamInner {
            client: self.inner.client.clone(),
            base: self.inner.base.clone(),
            outer_prefix: prefix.to_ascii_lowercase(),
            opts: self.inner.opts.clone(),
        };
        Upstream {
            inner: Arc::new(inner),
        }
    }
}

/// Adds the client fields of `how` for the TCP peer `peer` (spec: none;
/// this is the gateway's convention, as nginx's and Caddy's).
fn add_forwarded(h: &mut http::HeaderMap, how: Forwarded, peer: Option<SocketAddr>) {
    for name in [
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "forwarded",
    ] {
        h.remove(name);
    }
    let Some(peer) = peer else { return };
    let ip = peer.ip();
    if matches!(how, Forwarded::Xff | Forwarded::Both) {
        if let Ok(v) = http::HeaderValue::from_str(&ip.to_string()) {
            h.insert("x-forwarded-for", v);
        }
        h.insert("x-forwarded-proto", http::HeaderValue::from_static("http"));
    }
    if matches!(how, Forwarded::Forwarded | Forwarded::Both) {
        let node = match ip {
            std::net::IpAddr::V4(v4) => v4.to_string(),
            std::net::IpAddr::V6(v6) => format!("\"[{v6}]\""),
        };
        if let Ok(v) = http::HeaderValue::from_str(&format!("for={node};proto=http")) {
            h.insert(header::FORWARDED, v);
        }
    }
}

/// The gateway's own answer when the upstream fails: an RFC 9457 problem
/// document (`about:blank`, the status's reason as title), as nginx and
/// Caddy answer 502 and 504. The detail does not name the upstream (the
/// log does).
fn gateway_problem(status: http::StatusCode, detail: &str) -> Response<HcBody> {
    let doc = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Bad Gateway"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut r = Response::new(
        http_body_util::Full::new(Bytes::from(doc.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    r
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
        let up = self.inner.clone();
        Box::pin(async move {
            let base = &up.base;
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
            pass_outer(&mut req, &up.outer_prefix);
            let peer = req
                .extensions()
                .get::<ConnState>()
                .and_then(ConnState::peer);
            add_forwarded(req.headers_mut(), up.opts.forwarded, peer);
            let rsp = match tokio::time::timeout(up.opts.timeout, up.client.request(req)).await {
                Ok(Ok(rsp)) => rsp,
                Ok(Err(e)) => {
                    // The connect timeout is an io::Error a few sources down.
                    let mut cause = std::error::Error::source(&e);
                    let mut timed_out = false;
                    for _ in 0..8 {
                        let Some(c) = cause else { break };
                        timed_out |= c
                            .downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
                        cause = c.source();
                    }
                    tracing::warn!(upstream = %base, error = %crate::error::Chain(&e), "upstream request failed");
                    return Ok(if timed_out {
                        gateway_problem(
                            http::StatusCode::GATEWAY_TIMEOUT,
                            "the upstream service did not answer in time",
                        )
                    } else {
                        gateway_problem(
                            http::StatusCode::BAD_GATEWAY,
                            "the upstream service could not be reached or failed",
                        )
                    });
                }
                Err(_) => {
                    tracing::warn!(upstream = %base, timeout_s = up.opts.timeout.as_secs_f64(), "upstream timed out");
                    return Ok(gateway_problem(
                        http::StatusCode::GATEWAY_TIMEOUT,
                        "the upstream service did not answer in time",
                    ));
                }
            };
            let (mut parts, body) = rsp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(
                parts,
                body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync(),
            ))
        })
    }
}

/// Drops the request's fields named `{prefix}…` and adds its allow-listed
/// outer fields (the [`crate::server::OuterFields`] extension) under that
/// prefix; `prefix` is lower case.
fn pass_outer(req: &mut Request<HcBody>, prefix: &str) {
    let forged: Vec<http::HeaderName> = req
        .headers()
        .keys()
        .filter(|n| n.as_str().starts_with(prefix))
        .cloned()
        .collect();
    for n in forged {
        req.headers_mut().remove(n);
    }
    let Some(crate::server::OuterFields(outer)) = req.extensions_mut().remove() else {
        return;
    };
    for (n, v) in &outer {
        if let Ok(name) = http::HeaderName::from_bytes(format!("{prefix}{n}").as_bytes()) {
            req.headers_mut().append(name, v.clone());
        }
    }
}
