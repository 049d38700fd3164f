//! [`RspamdClient`]: one rspamd-profile exchange per request, as
//! `rspamc --key` makes it (profile "Request", "Response"): a fresh client
//! key pair and one connection per request, the whole inner request sealed
//! into one body, the whole inner response opened before anything is
//! returned.
//!
//! rspamd's scan worker answers a request it cannot decrypt (unknown key,
//! bad tag) by closing the connection without a byte, and its controller by
//! a plaintext 500; both become errors here ([`Error::NoAnswer`],
//! [`Error::RefusedText`]), as does every response that does not open.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use httpcrypt_proto::inner::Field;
use httpcrypt_proto::rspamd::client::{request_fields, REQUEST_TARGET};
use httpcrypt_proto::rspamd::message;
use httpcrypt_proto::rspamd::Client as Exchange;
use httpcrypt_proto::{outer, KexPublic, Limits};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use rand_core::OsRng;

use crate::connect::Connector;
use crate::error::{BoxError, Error};

/// Settings of an [`RspamdClient`].
#[derive(Debug, Clone)]
pub struct RspamdClientConfig {
    /// HTTP forward proxy (`http://host:port`).
    pub proxy: Option<Uri>,
    /// Longest wait for the whole exchange.
    pub timeout: Duration,
    /// Limits on the (hostile) response: `max_body` bounds the outer body,
    /// the inner limits its head.
    pub limits: Limits,
}

impl Default for RspamdClientConfig {
    fn default() -> Self {
        RspamdClientConfig {
            proxy: None,
            timeout: Duration::from_secs(60),
            limits: Limits::default(),
        }
    }
}

/// A client of the rspamd profile, bound to one server key.
#[derive(Clone)]
pub struct RspamdClient {
    http: HyperClient<Connector, Full<Bytes>>,
    server: KexPublic,
    config: RspamdClientConfig,
}

impl std::fmt::Debug for RspamdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RspamdClient")
            .field(
                "server",
                &httpcrypt_proto::rspamd::keys::public_to_base32(&self.server),
            )
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RspamdClient {
    /// A client for the server whose public key is `server` (what
    /// `rspamc --key` takes).
    pub fn new(server: KexPublic, config: RspamdClientConfig) -> Self {
        let http = HyperClient::builder(TokioExecutor::new())
            // Field names as the profile writes them (rspamd does not care,
            // but a capture then matches `format_request_head` byte for byte).
            .http1_title_case_headers(true)
            .pool_max_idle_per_host(0)
            .build(Connector::new(config.proxy.clone()));
        RspamdClient {
            http,
            server,
            config,
        }
    }

    /// Sends `req` (absolute URI `http://host[:port]/path`, inner method,
    /// fields and body) sealed to the server key and returns the opened
    /// inner response. Nothing unauthenticated is ever returned: every
    /// answer that is not a sealed 200 which opens is an error.
    pub async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, Error> {
        match tokio::time::timeout(self.config.timeout, self.exchange(req)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout),
        }
    }

    async fn exchange(&self, req: Request<Bytes>) -> Result<Response<Bytes>, Error> {
        let (parts, body) = req.into_parts();
        if parts.uri.scheme_str().is_some_and(|s| s != "http") {
            return Err(Error::Config(
                "the rspamd profile runs over plain http".into(),
            ));
        }
        let authority = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| Error::Config("the request URI needs a host".into()))?;

        // The inner request: the caller's method, target and fields.
        let mut fields: Vec<Field> = parts
            .headers
            .iter()
            .map(|(n, v)| Field::new(n.as_str(), v.as_bytes()))
            .collect();
        if !parts.headers.contains_key(header::HOST) {
            fields.insert(0, Field::new("Host", authority.as_str()));
        }
        let inner = message::Request {
            method: parts.method.as_str().to_string(),
            target: parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string(),
            fields,
            body: body.to_vec(),
        };
        let mut plain = zeroize::Zeroizing::new(Vec::new());
        inner.encode(&mut plain)?;
        let mut sealed = Vec::with_capacity(plain.len() + 40);
        let (exchange, key) = Exchange::seal_body(&mut OsRng, &self.server, &plain, &mut sealed)?;

        // The outer request: the profile's fields in the profile's order.
        let uri: Uri = format!("http://{authority}{REQUEST_TARGET}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
        let fields = request_fields(&authority, &key, sealed.len())?;
        let mut outer_req = Request::post(uri)
            .body(Full::new(Bytes::from(sealed)))
            .map_err(|e| Error::Config(e.to_string()))?;
        for (name, value) in fields {
            outer_req.headers_mut().insert(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| Error::Config(e.to_string()))?,
                HeaderValue::from_str(&value).map_err(|e| Error::Config(e.to_string()))?,
            );
        }

        let rsp = self.http.request(outer_req).await.map_err(no_answer)?;
        let (rparts, rbody) = rsp.into_parts();
        if rparts.status != StatusCode::OK {
            // Unauthenticated: reported, never returned as data.
            let body = Limited::new(rbody, 64 * 1024)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let problem = rparts
                .headers
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes() == outer::PROBLEM_TYPE.as_bytes())
                .then(|| outer::parse_problem(&body).ok())
                .flatten();
            return Err(match problem {
                Some(p) => Error::Refused {
                    status: rparts.status.as_u16(),
                    type_uri: p.type_uri,
                },
                None => Error::RefusedText {
                    status: rparts.status.as_u16(),
                    text: first_line(&body),
                },
            });
        }
        let body = Limited::new(rbody, self.config.limits.max_body.saturating_add(40))
            .collect()
            .await
            .map_err(no_answer_box)?
            .to_bytes();
        let opened = zeroize::Zeroizing::new(exchange.open_response(&body)?);
        let inner = message::Response::decode(&opened, &self.config.limits)?;
        let mut out = Response::new(Bytes::from(inner.body));
        *out.status_mut() = StatusCode::from_u16(inner.status)
            .map_err(|_| httpcrypt_proto::Error::MalformedInner)?;
        for f in &inner.fields {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(f.name.as_bytes()),
                HeaderValue::from_bytes(&f.value),
            ) {
                out.headers_mut().append(n, v);
            }
        }
        Ok(out)
    }
}

/// A connection closed before any response is what rspamd's scan worker
/// does when it cannot decrypt; other failures stay transport errors.
fn no_answer(e: hyper_util::client::legacy::Error) -> Error {
    if !e.is_connect() && closed_early(&e) {
        Error::NoAnswer
    } else {
        Error::from(e)
    }
}

fn no_answer_box(e: BoxError) -> Error {
    if closed_early(e.as_ref()) {
        Error::NoAnswer
    } else {
        Error::Transport(e)
    }
}

fn closed_early(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                return true;
            }
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            ) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// The first line of a plaintext refusal, printable characters only, at
/// most 200 of them (it is attacker-controlled text for a terminal).
fn first_line(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}
