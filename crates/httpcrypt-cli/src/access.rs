//! The access log of `serve` and `gateway`: one line per request at info
//! level (target `httpcrypt::access`), text or JSON as the rest of the log.
//!
//! Two wrappers cooperate: [`Outer`] around the HTTPCrypt layer sees the
//! outer request (peer, outer method and path, outer status, bytes sent,
//! duration); [`Inner`] inside it sees what the layer opened (the inner
//! method and target, how the session key was had, the inner status) and
//! notes it in a slot the outer request carries in its extensions (the
//! layer hands those to the inner request). The inner method and target
//! are logged only with `--log-targets`: the outer path is random and says
//! nothing, the inner target is what the encryption hides. Nothing secret
//! is logged: no field values, no cookies, no keys.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use httpcrypt::body::HcBody;
use httpcrypt::conn::ConnState;
use httpcrypt::server::Encrypted;
use httpcrypt::BoxError;

/// What the access log records.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Log the inner method and target (`--log-targets`).
    pub targets: bool,
}

/// Facts the inner side notes for the outer side's line.
#[derive(Debug, Default)]
struct Facts {
    /// `fresh` (a key agreement), `cache` (session cache) or `ticket`;
    /// none for a plaintext request.
    key: Option<&'static str>,
    inner_method: Option<String>,
    inner_target: Option<String>,
    inner_status: Option<u16>,
}

#[derive(Debug, Clone, Default)]
struct Slot(Arc<Mutex<Facts>>);

impl Slot {
    fn with<R>(&self, f: impl FnOnce(&mut Facts) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn inner_status(&self, status: u16) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .inner_status = Some(status);
    }
}

/// The wrapper around the layered service (see the module doc).
#[derive(Debug, Clone)]
pub struct Outer<S> {
    inner: S,
}

impl<S> Outer<S> {
    /// Logs every request `inner` answers.
    pub fn new(inner: S) -> Self {
        Outer { inner }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<Request<B>> for Outer<S>
where
    S: tower::Service<Request<B>, Response = Response<HcBody>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<HcBody>;
    type Error = Infallible;
    type Future =
        futures_util::future::Either<S::Future, BoxFuture<Result<Response<HcBody>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // Off (the default `--log warn`): no allocation, no clock read.
        if !tracing::enabled!(target: "httpcrypt::access", tracing::Level::INFO) {
            return futures_util::future::Either::Left(self.inner.call(req));
        }
        let start = Instant::now();
        let slot = Slot::default();
        req.extensions_mut().insert(slot.clone());
        let peer = req
            .extensions()
            .get::<ConnState>()
            .and_then(ConnState::peer)
            .map_or_else(|| "-".to_string(), |p| p.to_string());
        let method = req.method().to_string();
        // The outer path only: its query may be a whole sealed request.
        let mut path = req.uri().path().to_string();
        if path.len() > 80 {
            let mut cut = 80;
            while !path.is_char_boundary(cut) {
                cut -= 1;
            }
            path.truncate(cut);
            path.push('…');
        }
        let fut = self.inner.call(req);
        futures_util::future::Either::Right(Box::pin(async move {
            let rsp = fut.await?;
            let line = Line {
                start,
                peer,
                method,
                path,
                status: rsp.status().as_u16(),
                slot,
                bytes: 0,
            };
            Ok(rsp.map(|body| {
                Counted {
                    body,
                    line: Some(line),
                }
                .boxed_unsync()
            }))
        }))
    }
}

/// One request's line, written when its answer's body ends (or is dropped:
/// the client left).
struct Line {
    start: Instant,
    peer: String,
    method: String,
    path: String,
    status: u16,
    slot: Slot,
    bytes: u64,
}

impl Line {
    fn write(self, complete: bool) {
        let secs = self.start.elapsed().as_secs_f64();
        let facts = self.slot.with(std::mem::take);
        let encrypted = facts.key.is_some();
        tracing::info!(
            target: "httpcrypt::access",
            peer = %self.peer,
            method = %self.method,
            path = %self.path,
            status = self.status,
            encrypted,
            key = facts.key.unwrap_or("-"),
            inner_method = facts.inner_method.as_deref().unwrap_or("-"),
            inner_target = facts.inner_target.as_deref().unwrap_or("-"),
            inner_status = facts.inner_status.map_or_else(|| "-".to_string(), |s| s.to_string()),
            bytes = self.bytes,
            duration_ms = (secs * 1e6).round() / 1e3,
            complete,
            "request"
        );
    }
}

pin_project_lite::pin_project! {
    /// The answer's body, counting the bytes that go out.
    struct Counted {
        #[pin]
        body: HcBody,
        line: Option<Line>,
    }

    impl PinnedDrop for Counted {
        fn drop(this: Pin<&mut Self>) {
            if let Some(line) = this.project().line.take() {
                line.write(false);
            }
        }
    }
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let r = std::task::ready!(this.body.as_mut().poll_frame(cx));
        match &r {
            Some(Ok(f)) => {
                if let (Some(d), Some(line)) = (f.data_ref(), this.line.as_mut()) {
                    line.bytes += d.len() as u64;
                }
                // hyper stops polling a body that says it has ended.
                if this.body.is_end_stream() {
                    if let Some(line) = this.line.take() {
                        line.write(true);
                    }
                }
            }
            None => {
                if let Some(line) = this.line.take() {
                    line.write(true);
                }
            }
            Some(Err(_)) => {
                if let Some(line) = this.line.take() {
                    line.write(false);
                }
            }
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The wrapper around the application, inside the layer (see the module doc).
#[derive(Debug, Clone)]
pub struct Inner<S> {
    inner: S,
    opts: Options,
}

impl<S> Inner<S> {
    /// Notes the inner side of every request `inner` answers.
    pub fn new(inner: S, opts: Options) -> Self {
        Inner { inner, opts }
    }
}

impl<S> tower::Service<Request<HcBody>> for Inner<S>
where
    S: tower::Service<Request<HcBody>, Response = Response<HcBody>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<HcBody>;
    type Error = BoxError;
    type Future =
        futures_util::future::Either<S::Future, BoxFuture<Result<Response<HcBody>, BoxError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<HcBody>) -> Self::Future {
        let Some(slot) = req.extensions().get::<Slot>().cloned() else {
            // The access log is off.
            return futures_util::future::Either::Left(self.inner.call(req));
        };
        {
            let slot = &slot;
            let key = req.extensions().get::<Encrypted>().map(|e| {
                if e.resumed {
                    "ticket"
                } else if e.cached {
                    "cache"
                } else {
                    "fresh"
                }
            });
            let targets = self.opts.targets;
            slot.with(|f| {
                f.key = key;
                if targets {
                    f.inner_method = Some(req.method().to_string());
                    f.inner_target = Some(
                        req.uri()
                            .path_and_query()
                            .map_or("/", |p| p.as_str())
                            .to_string(),
                    );
                }
            });
        }
        let fut = self.inner.call(req);
        // A combinator, not an async block: an async block over a generic
        // future with this body type trips rustc's higher-ranked `Send` check.
        futures_util::future::Either::Right(Box::pin(futures_util::FutureExt::map(fut, move |r| {
            if let Ok(rsp) = &r {
                slot.inner_status(rsp.status().as_u16());
            }
            r
        })))
    }
}
