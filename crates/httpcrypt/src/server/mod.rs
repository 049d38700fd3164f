//! [`HttpCryptLayer`]: a tower layer that makes a hyper/axum service speak
//! HTTPCrypt under a mount path. It answers `OPTIONS {mount}/` with the
//! certificates, opens requests record by record, hands the inner request
//! to the wrapped service, and seals its response as it streams (spec §4,
//! §6, §8, §11). Wire logic is `httpcrypt_proto::server`; this is the driver.
//!
//! A request goes through the rooms in order: `admission` judges the
//! outer request at once (route, credential, key agreement or resumption,
//! the defence); `exchange` opens the admitted request, calls the service
//! and `answer` seals what it says; `sessions` holds the session cache
//! and the ticket policy both consult; `config` the settings.

mod admission;
mod answer;
mod config;
mod exchange;
mod hybrid;
mod hybrid_post;
mod service_request;
mod sessions;
mod shared;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use httpcrypt_proto::cache::SessionCache;
use httpcrypt_proto::replay::{self, StrikeRegister};
use rand_core::{OsRng, RngCore};

pub use crate::body::HcBody;
pub use crate::conn::ConnState;
use crate::error::BoxError;
use crate::keys::LiveKeys;
use crate::split::ContentStore;
use crate::strikes::{LocalStrikes, StrikeStore};
pub use config::{Encrypted, OuterFields, Outside, Pq, ServerConfig};

use admission::{admit, outer_http_limits, Admission};
use answer::failure_response;
use exchange::serve_sealed;
pub(crate) use shared::call;
use shared::Shared;

/// The tower layer.
#[derive(Clone)]
pub struct HttpCryptLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HttpCryptLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCryptLayer")
            .field("mount", &self.shared.config.mount)
            .finish_non_exhaustive()
    }
}

/// 16 bytes from the OS's CSPRNG: the seed of a keyed table hash.
fn random_seed() -> [u8; 16] {
    let mut seed = [0u8; 16];
    OsRng.fill_bytes(&mut seed);
    seed
}

impl HttpCryptLayer {
    /// A layer serving with `keys` under `config`.
    pub fn new(keys: LiveKeys, config: ServerConfig) -> Self {
        let window = config.freshness.unwrap_or(replay::DEFAULT_WINDOW);
        let strikes = Arc::new(LocalStrikes::new(StrikeRegister::new(
            window,
            config.strike_capacity,
            random_seed(),
        )));
        Self::with_strikes(keys, config, strikes)
    }

    /// A layer whose strike register is `strikes` (e.g. Redis shared by a fleet).
    pub fn with_strikes(
        keys: LiveKeys,
        config: ServerConfig,
        strikes: Arc<dyn StrikeStore>,
    ) -> Self {
        let cache = (config.session_cache > 0)
            .then(|| Mutex::new(SessionCache::new(config.session_cache, random_seed())));
        let store = config
            .split
            .as_ref()
            .map(|s| Arc::new(ContentStore::new(s.store_bytes)));
        let defence = config.admission.clone().map(crate::defence::Defence::new);
        HttpCryptLayer {
            shared: Arc::new(Shared {
                store,
                strikes,
                cache,
                defence,
                purged: std::sync::atomic::AtomicU64::new(0),
                purge_seen: Mutex::new(shared::PurgeSeen::NEVER),
                session_id_key: httpcrypt_proto::suite::SipKey::from_seed(random_seed()),
                short_keys: std::sync::Mutex::new(httpcrypt_proto::ticket::ShortKeyMemo::new(
                    shared::SHORT_KEY_SLOTS,
                )),
                config,
                keys,
            }),
        }
    }

    /// The split-serving content store, when split serving is on.
    pub fn content_store(&self) -> Option<Arc<ContentStore>> {
        self.shared.store.clone()
    }

    /// The load-aware defence, when configured.
    pub fn defence(&self) -> Option<&crate::defence::Defence> {
        self.shared.defence.as_ref()
    }

    /// The live keys the layer serves with.
    pub fn keys(&self) -> &LiveKeys {
        &self.shared.keys
    }

    /// Sets the metrics gauges from this layer's state now (keys held, key
    /// expiry, next rotation, the defence); called on each scrape.
    pub fn observe_metrics(&self) {
        let now = crate::clock::unix_now();
        let keys = self.keys();
        let (keys_held, newest_not_after) = keys.with(|k| {
            let ks = k.keys();
            (
                ks.len(),
                ks.iter().map(|x| u64::from(x.cert.not_after)).max(),
            )
        });
        crate::metrics::observe(&crate::metrics::Snapshot {
            keys_held,
            newest_not_after,
            seconds_to_rotation: keys.seconds_to_rotation(now),
            defence: self.defence().map(|d| (d.is_on(), d.counts())),
        });
    }

    /// Session-cache (hits, misses) so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        self.shared.cache.as_ref().map_or((0, 0), |c| {
            c.lock().unwrap_or_else(|p| p.into_inner()).stats()
        })
    }
}

impl<S> tower::Layer<S> for HttpCryptLayer {
    type Service = HttpCryptService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpCryptService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`HttpCryptLayer`].
#[derive(Clone)]
pub struct HttpCryptService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for HttpCryptService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCryptService").finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<Request<B>> for HttpCryptService<S>
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
    /// Every failure becomes a response (sealed where a session key exists),
    /// so the layer fits `axum::Router::layer` and `axum::serve`.
    type Error = Infallible;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is awaited per request on a clone (`oneshot`), so an
        // inner error becomes that request's 500 instead of a dead service.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let cfg = &self.shared.config;
        let (parts, body) = req.into_parts();
        if let Some(refusal) = outer_http_limits(&parts, &cfg.limits) {
            return ResponseFuture::Ready { rsp: Some(refusal) };
        }
        // Outside the mount (`Mount::strip`, the test `outer::route`
        // applies): the service's own future, run in place, before the
        // layer builds anything.
        if matches!(cfg.outside, Outside::PassThrough)
            && cfg.mount.strip(parts.uri.path()).is_none()
        {
            crate::metrics::request(crate::metrics::Outcome::Plaintext);
            return ResponseFuture::pass_through(inner, Request::from_parts(parts, body));
        }
        match admit(&self.shared, parts, body) {
            Admission::Answer(rsp) => ResponseFuture::Ready { rsp: Some(rsp) },
            Admission::PassThrough(req) => ResponseFuture::pass_through(inner, req),
            Admission::Content {
                store,
                method,
                rest,
                body,
            } => ResponseFuture::Handled {
                fut: Box::pin(async move {
                    Ok(crate::split::content_response(&store, &method, &rest, body).await)
                }),
            },
            // One allocation for all the state of a sealed request: the
            // future itself, not a block around it (each layer of
            // futures moves the state once more).
            Admission::Sealed(admitted) => ResponseFuture::Handled {
                fut: Box::pin(serve_sealed(self.shared.clone(), inner, admitted)),
            },
            // A hybrid fresh-key POST reads its ciphertext before its
            // agreement: a future of its own, apart from the common one.
            Admission::HybridPost { parts, body, now } => ResponseFuture::Handled {
                fut: Box::pin(hybrid_post::serve_post(
                    self.shared.clone(),
                    inner,
                    parts,
                    body,
                    now,
                )),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`HttpCryptService`]: a request outside the mount runs
    /// the service's own future in place, one the layer answers without
    /// awaiting anything (a refusal, a problem, the key list) is ready at
    /// once, and a sealed request is handled by the layer (boxed).
    // The variants' fields are private in all but name (pin-project-lite
    // takes no doc comments on them).
    #[allow(missing_docs)]
    #[project = ResponseFutureProj]
    pub enum ResponseFuture<S>
    where
        S: tower::Service<Request<HcBody>>,
    {
        /// Passed through to the service.
        PassThrough {
            #[pin]
            call: tower::util::Oneshot<S, Request<HcBody>>,
        },
        /// Answered by the layer without awaiting anything.
        Ready {
            rsp: Option<Response<HcBody>>,
        },
        /// Handled by the layer (boxed).
        Handled {
            fut: BoxFuture<Result<Response<HcBody>, Infallible>>,
        },
    }
}

impl<S> ResponseFuture<S>
where
    S: tower::Service<Request<HcBody>>,
{
    /// The service's own future for a request the layer passes on unchanged.
    fn pass_through<B>(inner: S, req: Request<B>) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        ResponseFuture::PassThrough {
            call: tower::ServiceExt::oneshot(
                inner,
                req.map(|b| b.map_err(Into::into).boxed_unsync()),
            ),
        }
    }
}

impl<S> std::fmt::Debug for ResponseFuture<S>
where
    S: tower::Service<Request<HcBody>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResponseFuture::PassThrough { .. } => "ResponseFuture::PassThrough",
            ResponseFuture::Ready { .. } => "ResponseFuture::Ready",
            ResponseFuture::Handled { .. } => "ResponseFuture::Handled",
        })
    }
}

impl<S, RB> Future for ResponseFuture<S>
where
    S: tower::Service<Request<HcBody>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Output = Result<Response<HcBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::PassThrough { call } => {
                Poll::Ready(Ok(match std::task::ready!(call.poll(cx)) {
                    Ok(rsp) => rsp.map(|b| b.map_err(Into::into).boxed_unsync()),
                    Err(e) => failure_response(&e.into()),
                }))
            }
            ResponseFutureProj::Ready { rsp } => Poll::Ready(Ok(rsp
                .take()
                .expect("ResponseFuture polled after it completed"))),
            ResponseFutureProj::Handled { fut } => fut.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use http::header::{self, HeaderValue};
    use http_body_util::Full;
    use httpcrypt_proto::outer::Mount;

    use crate::body::full;

    /// Outside the mount, a request that passes the outer limits reaches
    /// the service unchanged and its answer comes back as it is (a failing
    /// service: 500); one over a limit is refused before the service sees
    /// it; with `Outside::Refuse` nothing reaches the service.
    #[tokio::test]
    async fn requests_outside_the_mount_pass_through_within_the_outer_limits() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tower::{Layer as _, ServiceExt as _};
        let dir = tempfile::tempdir().expect("a directory");
        let store = crate::keys::KeyStore::create(dir.path(), true).expect("a key store");
        let keys = crate::keys::start(store, Duration::from_secs(3600)).expect("keys");
        let seen = Arc::new(AtomicUsize::new(0));
        let app = {
            let seen = seen.clone();
            tower::service_fn(move |req: Request<HcBody>| {
                seen.fetch_add(1, Ordering::SeqCst);
                async move {
                    if req.uri().path() == "/fail" {
                        return Err(BoxError::from("the application failed"));
                    }
                    let mut r = Response::new(full(format!("{} {}", req.method(), req.uri())));
                    r.headers_mut()
                        .insert("x-app", HeaderValue::from_static("yes"));
                    Ok::<_, BoxError>(r)
                }
            })
        };
        let send = |outside: Outside, req: Request<Full<Bytes>>| {
            let layer = HttpCryptLayer::new(
                keys.clone(),
                ServerConfig {
                    mount: Mount::new("/hc").expect("a mount"),
                    outside,
                    ..Default::default()
                },
            );
            let svc = layer.layer(app.clone());
            async move {
                let rsp = svc.oneshot(req).await.expect("infallible");
                let status = rsp.status().as_u16();
                let app = rsp.headers().contains_key("x-app");
                let body = rsp.into_body().collect().await.expect("a body").to_bytes();
                (status, app, String::from_utf8_lossy(&body).into_owned())
            }
        };
        let get = |target: &str| {
            Request::get(target)
                .header(header::HOST, "example.test")
                .body(Full::new(Bytes::new()))
                .expect("a request")
        };
        let calls = || seen.load(Ordering::SeqCst);

        // Passed through, for the mount's own prefix without its slash too.
        for target in ["/x?a=b", "/hc", "/hcx/y"] {
            let before = calls();
            let (status, app, body) = send(Outside::PassThrough, get(target)).await;
            assert_eq!((status, app), (200, true), "{target}");
            assert_eq!(body, format!("GET {target}"));
            assert_eq!(calls(), before + 1, "{target}");
        }
        // The service's failure is the layer's 500.
        let (status, app, _) = send(Outside::PassThrough, get("/fail")).await;
        assert_eq!((status, app), (500, false));

        // Over a limit: refused, the service not called.
        let before = calls();
        let long = format!("/x/{}", "a".repeat(17 * 1024));
        assert_eq!(send(Outside::PassThrough, get(&long)).await.0, 414);
        let mut big = get("/x");
        big.headers_mut().insert(
            "x-big",
            HeaderValue::from_str(&"v".repeat(70 * 1024)).expect("a value"),
        );
        assert_eq!(send(Outside::PassThrough, big).await.0, 431);
        let mut gzip = get("/x");
        gzip.headers_mut()
            .insert(header::TRANSFER_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(send(Outside::PassThrough, gzip).await.0, 501);
        assert_eq!(calls(), before);

        // Refused outside the mount; under it, the protocol answers.
        let (status, app, _) = send(Outside::Refuse, get("/x")).await;
        assert_eq!((status, app), (404, false));
        let (status, app, _) = send(Outside::PassThrough, get("/hc/")).await;
        assert!(status >= 400 && !app, "{status}");
        assert_eq!(calls(), before);
    }
}
