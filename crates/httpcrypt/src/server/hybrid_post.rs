//! A hybrid fresh-key POST (spec/hybrid.md H3): its agreement needs the
//! 1,088-byte ML-KEM ciphertext at the start of the body, so it runs in a
//! boxed future of its own that reads the ciphertext first, then judges the
//! request and serves it as any sealed request.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use httpcrypt_proto::hybrid::{self as proto_hybrid, CIPHERTEXT_LEN};
use httpcrypt_proto::server::Accept;

use super::admission::{decided, outer_request, Admission};
use super::answer::failure_response;
use super::config::ServerConfig;
use super::exchange::serve_sealed;
use super::hybrid;
use super::sessions::{Held, LayerAgreement};
use super::shared::Shared;
use crate::body::{plain, HcBody};
use crate::error::{BoxError, Error};

/// A hybrid fresh-key POST: reads the ciphertext (within the body's idle
/// timeout and the outer body limit), judges the request with it, and
/// serves it as any sealed request, its body's bytes beyond the ciphertext
/// fed first.
pub(super) async fn serve_post<S, B, RB>(
    shared: Arc<Shared>,
    inner: S,
    parts: http::request::Parts,
    body: B,
    now: u64,
) -> Result<Response<HcBody>, Infallible>
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
    let mut body = Box::pin(body);
    let too_large = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|l| l > cfg.limits.max_body as u64);
    let mut prefix = Vec::new();
    if !too_large {
        if let Err(e) = read_prefix(&mut body, &mut prefix, cfg).await {
            return Ok(match e {
                Error::Protocol(p) => hybrid::outer_problem(&shared, &p, now),
                e => failure_response(&BoxError::from(e)),
            });
        }
    }
    let admission = {
        let outer_req = outer_request(&parts);
        let mut agreement = LayerAgreement {
            shared: &shared,
            ext: &parts.extensions,
            held: Held::default(),
            refused: None,
        };
        let decision = shared.keys.with_hybrid(|h| {
            proto_hybrid::exchange::accept_with(
                h,
                &cfg.mount,
                &outer_req,
                &prefix,
                &cfg.limits,
                now,
                &mut agreement,
            )
        });
        hybrid::count(&decision);
        let offset = match &decision {
            Ok(Accept::Request(a)) => proto_hybrid::exchange::stream_offset(a),
            _ => 0,
        };
        drop(outer_req);
        let LayerAgreement { held, refused, .. } = agreement;
        let rest = prefix.split_off(offset.min(prefix.len()));
        let body = Prefixed {
            prefix: (!rest.is_empty()).then(|| Bytes::from(rest)),
            inner: body,
        };
        decided(&shared, parts, body, decision, held, refused, now)
    };
    match admission {
        Admission::Answer(r) => Ok(r),
        Admission::Sealed(admitted) => serve_sealed(shared.clone(), inner, admitted).await,
        // Only a POST under the mount comes here.
        _ => Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")),
    }
}

/// Reads the body into `prefix` until it holds the ciphertext or the body
/// ends: each frame within the body's idle timeout, all of it within the
/// outer body limit.
async fn read_prefix<B>(
    body: &mut Pin<Box<B>>,
    prefix: &mut Vec<u8>,
    cfg: &ServerConfig,
) -> Result<(), Error>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    while prefix.len() < CIPHERTEXT_LEN {
        let frame = match tokio::time::timeout(cfg.body_timeout, body.frame()).await {
            Err(_) => return Err(Error::Timeout),
            Ok(None) => return Ok(()),
            Ok(Some(Err(e))) => return Err(Error::Transport(e.into())),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            prefix.extend_from_slice(&data);
        }
        if prefix.len() > cfg.limits.max_body {
            return Err(Error::Protocol(httpcrypt_proto::Error::BodyTooLarge));
        }
    }
    Ok(())
}

/// A body whose first bytes were read already: `prefix`, then the rest.
struct Prefixed<B> {
    prefix: Option<Bytes>,
    inner: Pin<Box<B>>,
}

impl<B> Body for Prefixed<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(p) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        self.inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let extra = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + extra);
        if let Some(u) = inner.upper() {
            hint.set_upper(u + extra);
        }
        hint
    }
}
