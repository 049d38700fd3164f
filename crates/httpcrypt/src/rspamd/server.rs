//! [`RspamdLayer`]: the server end of the rspamd profile as a tower layer
//! (profile "Request", "Response", "Errors").
//!
//! A request with a decodable `Key` field is opened with the keyring, its
//! inner request goes to the wrapped service, and the service's whole
//! response comes back sealed in one body, `Connection: close`. A request
//! without `Key`, or with a `Key` value holding no `=`, is plaintext, as
//! rspamd 3.4 treats it: passed to the service unchanged, unless the layer
//! is `encrypted_only`. Errors follow the last column of the profile's
//! error table: where rspamd closes silently we answer as v1 does
//! (`spec/rspamd-profile.md` §5).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use httpcrypt_proto::inner::Field;
use httpcrypt_proto::rspamd::message;
use httpcrypt_proto::rspamd::server::response_fields;
use httpcrypt_proto::rspamd::{KeyHeader, Keyring, Responder};
use httpcrypt_proto::{outer, Limits};
use rand_core::OsRng;

use crate::body::{full, HcBody};
use crate::error::BoxError;
use crate::server::call;

/// Settings of an [`RspamdLayer`].
#[derive(Debug, Clone)]
pub struct RspamdConfig {
    /// `max_body` bounds the sealed request body and the service's
    /// response body (each is held whole: the profile seals one message in
    /// one box); the inner limits bound the inner request head.
    pub limits: Limits,
    /// Longest wait for a whole request body.
    pub body_timeout: Duration,
    /// Refuse plaintext requests (rspamd's own `encrypted_only`) instead of
    /// passing them to the service.
    pub encrypted_only: bool,
    /// The service's `Host` when the inner request carries none (rspamc
    /// sends none): the profile authenticates no outer field, so the outer
    /// `Host` never reaches the service (v1 spec §4.3, erratum E1).
    pub authority: Option<HeaderValue>,
    /// Outer fields passed on apart from the request, unauthenticated, as
    /// [`crate::server::OuterFields`] (as [`crate::ServerConfig::pass_outer`]).
    pub pass_outer: Vec<HeaderName>,
}

impl Default for RspamdConfig {
    fn default() -> Self {
        RspamdConfig {
            limits: Limits::default(),
            body_timeout: Duration::from_secs(30),
            encrypted_only: false,
            authority: None,
            pass_outer: Vec::new(),
        }
    }
}

/// Makes a service answer `rspamc --key` (see the module text).
#[derive(Clone)]
pub struct RspamdLayer {
    shared: Arc<Shared>,
}

struct Shared {
    keys: Keyring,
    config: RspamdConfig,
}

impl std::fmt::Debug for RspamdLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RspamdLayer")
            .field("keys", &self.shared.keys)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl RspamdLayer {
    /// A layer answering for the keys in `keys`.
    pub fn new(keys: Keyring, config: RspamdConfig) -> Self {
        RspamdLayer {
            shared: Arc::new(Shared { keys, config }),
        }
    }
}

impl<S> tower::Layer<S> for RspamdLayer {
    type Service = RspamdService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RspamdService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`RspamdLayer`].
#[derive(Clone)]
pub struct RspamdService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for RspamdService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RspamdService").finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<Request<B>> for RspamdService<S>
where
    S: tower::Service<Request<HcBody>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<HcBody>;
    /// Every failure becomes a response, as with the v1 layer.
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<HcBody>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        Box::pin(async move { Ok(handle(&shared, inner, req).await) })
    }
}

async fn handle<S, B, RB>(shared: &Shared, inner: S, req: Request<B>) -> Response<HcBody>
where
    S: tower::Service<Request<HcBody>, Response = Response<RB>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let cfg = &shared.config;
    let key = match req.headers().get(KeyHeader::NAME) {
        None => None,
        Some(v) => match KeyHeader::parse(v.as_bytes()) {
            Ok(k) => k,
            Err(e) => return outer_problem(&e),
        },
    };
    let Some(key) = key else {
        if cfg.encrypted_only {
            return plain(
                StatusCode::BAD_REQUEST,
                "plaintext request refused: this server takes encrypted requests only (rspamc --key)\n",
            );
        }
        let req = req.map(|b| b.map_err(Into::into).boxed_unsync());
        return match call(inner, req).await {
            Ok(rsp) => rsp.map(|b| b.map_err(Into::into).boxed_unsync()),
            Err(e) => {
                tracing::warn!(error = %e.into(), "service failed");
                plain(StatusCode::BAD_GATEWAY, "service failed\n")
            }
        };
    };

    // The sealed body, whole (profile §2: one box per message).
    let (parts, body) = req.into_parts();
    let announced = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > cfg.limits.max_body as u64 + 40) {
        return outer_problem(&httpcrypt_proto::Error::BodyTooLarge);
    }
    let collected = tokio::time::timeout(
        cfg.body_timeout,
        Limited::new(body, cfg.limits.max_body + 40).collect(),
    )
    .await;
    let sealed = match collected {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return outer_problem(&httpcrypt_proto::Error::BodyTooLarge)
        }
        Ok(Err(_)) => return plain(StatusCode::BAD_REQUEST, "request body failed\n"),
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "request body timed out\n"),
    };
    let (plaintext, responder) = match shared.keys.open_request(&key, &sealed) {
        Ok(opened) => opened,
        Err(e @ (httpcrypt_proto::Error::Truncated | httpcrypt_proto::Error::Integrity)) => {
            // The key is known, so the answer can be sealed (profile §5).
            tracing::debug!(code = e.code(), "sealed body did not open");
            return match shared.keys.responder(&key) {
                Ok(r) => sealed_problem(r, &e),
                Err(e) => outer_problem(&e),
            };
        }
        Err(e) => {
            tracing::debug!(code = e.code(), "refused rspamd request");
            return outer_problem(&e);
        }
    };
    let plaintext = zeroize::Zeroizing::new(plaintext);
    let request = match message::Request::decode(&plaintext, &cfg.limits) {
        Ok(r) => r,
        Err(e) => return sealed_problem(responder, &e),
    };
    drop(plaintext);

    let mut forward = Request::new(full(request.body));
    *forward.method_mut() = match http::Method::from_bytes(request.method.as_bytes()) {
        Ok(m) => m,
        Err(_) => return sealed_problem(responder, &httpcrypt_proto::Error::MalformedInner),
    };
    *forward.uri_mut() = match request.target.parse() {
        Ok(u) => u,
        Err(_) => return sealed_problem(responder, &httpcrypt_proto::Error::MalformedInner),
    };
    for f in &request.fields {
        if message::FRAMING.iter().any(|n| f.is(n)) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(f.name.as_bytes()),
            HeaderValue::from_bytes(&f.value),
        ) {
            forward.headers_mut().append(n, v);
        }
    }
    // The service's request is the inner one alone (erratum E1): `Host`
    // from inside or from the configuration, allow-listed outer fields apart.
    if !forward.headers().contains_key(header::HOST) {
        if let Some(h) = &cfg.authority {
            forward.headers_mut().insert(header::HOST, h.clone());
        }
    }
    forward.extensions_mut().extend(parts.extensions);
    if !cfg.pass_outer.is_empty() {
        let passed = crate::server::OuterFields::select(&parts.headers, &cfg.pass_outer);
        forward.extensions_mut().insert(passed);
    }

    let rsp = match call(inner, forward).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e.into(), "service failed");
            return sealed_text(responder, StatusCode::BAD_GATEWAY, "service failed\n");
        }
    };
    let (rparts, rbody) = rsp.into_parts();
    let body = match Limited::new(rbody, cfg.limits.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::warn!(error = %e, "service response failed or exceeded the body limit");
            return sealed_text(
                responder,
                StatusCode::BAD_GATEWAY,
                "service response failed\n",
            );
        }
    };
    let answer = message::Response {
        status: rparts.status.as_u16(),
        reason: rparts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .to_string(),
        fields: rparts
            .headers
            .iter()
            .map(|(n, v)| Field::new(n.as_str(), v.as_bytes()))
            .collect(),
        body: body.to_vec(),
    };
    seal(responder, &answer)
}

/// The outer 200 carrying `answer` sealed (profile §4).
fn seal(responder: Responder, answer: &message::Response) -> Response<HcBody> {
    let mut plaintext = zeroize::Zeroizing::new(Vec::new());
    if answer.encode(&mut plaintext).is_err() {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "unencodable response\n");
    }
    let mut body = Vec::with_capacity(plaintext.len() + 40);
    if responder
        .seal_body(&mut OsRng, &plaintext, &mut body)
        .is_err()
    {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n");
    }
    let fields = response_fields(body.len());
    let mut r = Response::new(full(body));
    for (name, value) in fields {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            r.headers_mut().insert(n, v);
        }
    }
    r
}

/// A sealed inner problem document (v1 §4.4 types; profile §5).
fn sealed_problem(responder: Responder, err: &httpcrypt_proto::Error) -> Response<HcBody> {
    let (status, doc) = outer::format_problem(err, &[]).unwrap_or((500, "{}".to_string()));
    let answer = message::Response {
        status,
        reason: reason(status),
        fields: vec![Field::new("Content-Type", outer::PROBLEM_TYPE)],
        body: doc.into_bytes(),
    };
    seal(responder, &answer)
}

fn sealed_text(responder: Responder, status: StatusCode, text: &str) -> Response<HcBody> {
    let answer = message::Response {
        status: status.as_u16(),
        reason: reason(status.as_u16()),
        fields: vec![Field::new("Content-Type", "text/plain")],
        body: text.as_bytes().to_vec(),
    };
    seal(responder, &answer)
}

fn reason(status: u16) -> String {
    StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Unknown")
        .to_string()
}

/// Plaintext answers close the connection, as rspamd's always do.
fn plain(status: StatusCode, body: &'static str) -> Response<HcBody> {
    let mut r = crate::body::plain(status, body);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// An outer (plaintext) problem: no session key exists to seal it with.
/// A `Key` value that does not decode (`bad_key_header`, a code of the
/// profile with no v1 problem of its own) is `malformed`, as the profile's
/// error table says.
fn outer_problem(err: &httpcrypt_proto::Error) -> Response<HcBody> {
    let (status, doc) = outer::format_problem(err, &[]).unwrap_or_else(|| {
        let doc = serde_json::json!({
            "type": httpcrypt_proto::error::problem_type::MALFORMED,
            "title": err.to_string(),
            "status": 400,
        });
        (400, doc.to_string())
    });
    let mut r = Response::new(full(doc));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(outer::PROBLEM_TYPE),
    );
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
