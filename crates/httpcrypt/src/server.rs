//! [`HttpCryptLayer`]: a tower layer that makes a hyper/axum service speak
//! HTTPCrypt under a mount path. It answers `OPTIONS {mount}/` with the
//! certificates, opens requests record by record, hands the inner request
//! to the wrapped service, and seals its response as it streams (spec §4,
//! §6, §8, §11). Wire logic is `httpcrypt_proto::server`; this is the driver.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use httpcrypt_proto::cache::SessionCache;
use httpcrypt_proto::inner::{self, Field, Head, PackedRequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Mount};
use httpcrypt_proto::replay::{self, StrikeRegister};
use httpcrypt_proto::server::{self as core, Accept, Accepted, OuterRequest};
use httpcrypt_proto::split;
use httpcrypt_proto::stream::{ResponseKey, Sealer};
use httpcrypt_proto::ticket::{LastOpened, TicketContents, TicketKey, SEALED_TICKET_LEN};
use httpcrypt_proto::{token, Limits, Profile};
use rand_core::{OsRng, RngCore};

use crate::body::{first_frame_room, FailureSlot, OpenBody, SealBody, DEFAULT_RECORD};
use crate::error::{BoxError, Error};
use crate::keystore::{unix_now, LiveKeys};
use crate::split::{ContentStore, SplitSealBody};
use crate::strikes::{LocalStrikes, StrikeStore};

/// Body type of requests handed to the wrapped service and of responses.
pub type HcBody = UnsyncBoxBody<Bytes, BoxError>;

/// What to do with plaintext requests outside the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outside {
    /// Hand them to the wrapped service unchanged.
    PassThrough,
    /// Answer 404.
    Refuse,
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where HTTPCrypt lives.
    pub mount: Mount,
    /// Limits on hostile input.
    pub limits: Limits,
    /// Plaintext requests outside the mount.
    pub outside: Outside,
    /// Record size of sealed responses.
    pub record_size: usize,
    /// Freshness window W in seconds; `None` turns anti-replay off.
    pub freshness: Option<u64>,
    /// Strike register capacity (entries).
    pub strike_capacity: usize,
    /// Issue a ticket in every response.
    pub tickets: bool,
    /// Secret for the `Client-Random`/`Random` token; `None` disables it.
    pub token_secret: Option<[u8; 32]>,
    /// Longest wait for the next piece of a request body.
    pub body_timeout: Duration,
    /// Session cache capacity (entries); 0 turns the cache off (spec §7.1).
    pub session_cache: usize,
    /// Demand a valid `Random` token before side-effecting methods (spec §8):
    /// without one the answer is inner 425 `token-required`, carrying a token.
    pub require_token: bool,
    /// Split serving (spec/split-serving.md): public responses go to a
    /// proxy that asks as stubs; `None` turns it off.
    pub split: Option<crate::split::SplitConfig>,
    /// The load-aware defence in front of the key agreement (spec §14);
    /// `None` turns it off. It stays idle until the demand passes its threshold.
    pub admission: Option<httpcrypt_proto::admission::AdmissionConfig>,
    /// The server's name for the mount: the service's `Host` when the
    /// inner request carries none and no associated data binds the outer
    /// one (spec §4.3, erratum E1). `None`: such a request reaches the
    /// service without `Host`; an unauthenticated outer `Host` never does.
    pub authority: Option<HeaderValue>,
    /// Outer fields the operator passes on (e.g. `X-Forwarded-For` set by a
    /// trusted reverse proxy in front): given to the service apart from its
    /// request, as the [`OuterFields`] extension, and never merged into it.
    /// Empty by default.
    pub pass_outer: Vec<HeaderName>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let mut token = [0u8; 32];
        OsRng.fill_bytes(&mut token);
        ServerConfig {
            mount: Mount::default(),
            limits: Limits::default(),
            outside: Outside::Refuse,
            record_size: DEFAULT_RECORD,
            freshness: Some(replay::DEFAULT_WINDOW),
            strike_capacity: 1 << 22,
            tickets: true,
            token_secret: Some(token),
            body_timeout: Duration::from_secs(30),
            session_cache: 65_536,
            require_token: false,
            split: None,
            admission: Some(httpcrypt_proto::admission::AdmissionConfig::default()),
            authority: None,
            pass_outer: Vec::new(),
        }
    }
}

/// What the layer remembers about one connection, shared between the
/// listener that made it (one per accepted connection, put into every
/// request's extensions) and the layer:
///
/// - the latest key expiry (`not_after`) of the requests it carried: the
///   listener closes the connection once it has passed (spec §6);
/// - the session whose ticket was last issued on it: a ticket is issued
///   once per session and connection, not with every answer (spec §7.2).
#[derive(Debug, Clone, Default)]
pub struct ConnState(Arc<ConnInner>);

#[derive(Debug, Default)]
struct ConnInner {
    not_after: std::sync::atomic::AtomicU64,
    /// The listener's watch over all its connections' expiries.
    watch: Option<Arc<ExpiryWatch>>,
    /// The TCP peer, when the listener knows it.
    peer: Option<std::net::SocketAddr>,
    /// Socket options the listener is to apply before its next write
    /// (`runtime::SockPlan`).
    sock: std::sync::atomic::AtomicU8,
    /// The session of the last ticket issued here, as [`Shared::session_id`].
    ticketed: std::sync::atomic::AtomicU64,
    /// The last ticket opened on this connection.
    opened: Mutex<LastOpened>,
    /// What the connection did, for the listener's deadlines
    /// (`crate::lifecycle`).
    progress: crate::lifecycle::Progress,
    /// Bytes the connection may send before its handshake completes, when
    /// the ASAP gate admitted it early (spec/asap.md §4); 0 otherwise or
    /// once the first answer took it.
    early_room: std::sync::atomic::AtomicUsize,
}

impl ConnState {
    /// The state of a connection accepted by a listener that closes
    /// connections through `watch` once their keys expire.
    pub(crate) fn watched(watch: Arc<ExpiryWatch>, peer: std::net::SocketAddr) -> Self {
        ConnState(Arc::new(ConnInner {
            watch: Some(watch),
            peer: Some(peer),
            ..ConnInner::default()
        }))
    }

    /// Notes a request under a key valid through `not_after`.
    pub fn note(&self, not_after: u64) {
        let before = self
            .0
            .not_after
            .fetch_max(not_after, std::sync::atomic::Ordering::Relaxed);
        if let Some(w) = &self.0.watch {
            w.note(before.max(not_after));
        }
    }

    /// The TCP peer of the connection, when the listener recorded it.
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        self.0.peer
    }

    /// The listener's pending socket options for this connection.
    pub(crate) fn sock(&self) -> &std::sync::atomic::AtomicU8 {
        &self.0.sock
    }

    /// What the connection did, for the listener's deadlines.
    pub(crate) fn progress(&self) -> &crate::lifecycle::Progress {
        &self.0.progress
    }

    /// Notes that the connection may send `bytes` before its handshake
    /// completes (an ASAP early admission).
    pub(crate) fn set_early_room(&self, bytes: usize) {
        self.0
            .early_room
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The early room, for the first answer only: that answer sizes its
    /// records so that its first record (and so its verified head) fits in
    /// what may leave before the handshake.
    fn take_early_room(&self) -> usize {
        self.0
            .early_room
            .swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes this connection's expiry with the listener's watch again
    /// (after the watch woke it early).
    pub(crate) fn renote(&self) {
        let t = self.0.not_after.load(std::sync::atomic::Ordering::Relaxed);
        if let (Some(w), true) = (&self.0.watch, t != 0) {
            w.note(t);
        }
    }

    /// Whether the connection carried HTTPCrypt requests and all their keys
    /// have expired at `now`.
    pub fn expired(&self, now: u64) -> bool {
        match self.0.not_after.load(std::sync::atomic::Ordering::Relaxed) {
            0 => false,
            t => now > t,
        }
    }

    /// Whether an answer to a request of session `session` (a
    /// [`Shared::session_id`]) should carry a new ticket: only if no ticket
    /// for that session went out on this connection yet. Requests on one
    /// connection are linkable anyway, so a second ticket for the same
    /// session adds no unlinkability; a connection shared by several
    /// sessions (a proxy multiplexing its clients) gets a ticket whenever
    /// the session changes.
    fn wants_ticket(&self, session: u64) -> bool {
        self.0.ticketed.load(std::sync::atomic::Ordering::Relaxed) != session
    }

    /// Opens a ticket presented on this connection. A client presents the
    /// same ticket with each request of a keep-alive connection, so the
    /// last one opened is remembered (spec §7.2, D29).
    fn open_ticket(
        &self,
        tk: &TicketKey,
        sealed: &[u8; SEALED_TICKET_LEN],
        now: u64,
    ) -> Result<TicketContents, httpcrypt_proto::Error> {
        self.0
            .opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open(tk, sealed, now)
    }

    /// Records that a ticket for session `session` went out.
    fn ticket_issued(&self, session: u64) {
        self.0
            .ticketed
            .store(session, std::sync::atomic::Ordering::Relaxed);
    }
}

/// When a listener's connections must look at their key expiry (spec §6),
/// without a timer per connection: each connection notes the latest expiry
/// of the keys it carried in its [`ConnState`], and the earliest of those
/// over all connections here; one ticker per listener calls
/// [`ExpiryWatch::tick`] every second, which wakes the connections only once
/// that earliest expiry has passed. A woken connection that is not expired
/// notes its expiry again.
#[derive(Debug)]
pub(crate) struct ExpiryWatch {
    /// The earliest noted expiry (unix seconds); `u64::MAX` when none.
    earliest: std::sync::atomic::AtomicU64,
    notify: tokio::sync::Notify,
    /// Set when the listener drains: every connection is to close once
    /// its request in flight is answered.
    draining: std::sync::atomic::AtomicBool,
}

impl Default for ExpiryWatch {
    fn default() -> Self {
        ExpiryWatch {
            earliest: std::sync::atomic::AtomicU64::new(u64::MAX),
            notify: tokio::sync::Notify::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl ExpiryWatch {
    fn note(&self, not_after: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if not_after < self.earliest.load(Relaxed) {
            self.earliest.fetch_min(not_after, Relaxed);
        }
    }

    /// Wakes every waiting connection if a noted expiry has passed at `now`.
    /// Connections noted meanwhile are among the woken ones (they wait
    /// before they note), so they note again.
    pub(crate) fn tick(&self, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if now > self.earliest.load(Relaxed) {
            self.earliest.store(u64::MAX, Relaxed);
            self.notify.notify_waiters();
        }
    }

    /// Wakes every connection for good: the listener drains, and each
    /// connection closes after the request it is answering, if any.
    pub(crate) fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    /// Whether [`ExpiryWatch::drain`] was called.
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves at the next [`ExpiryWatch::tick`] that wakes connections;
    /// enable it (or poll it) before noting an expiry.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// Facts about an HTTPCrypt request, put in the inner request's extensions.
#[derive(Debug, Clone)]
pub struct Encrypted {
    /// The kex key the session ran under.
    pub kid: httpcrypt_proto::KeyId,
    /// The client came back with a ticket.
    pub resumed: bool,
    /// The client sent its key, and the session key came from the session
    /// cache rather than a key agreement.
    pub cached: bool,
}

/// The outer fields named by [`ServerConfig::pass_outer`] that a sealed
/// request arrived with, put in the inner request's extensions when the
/// list is not empty. They are **not authenticated**: anyone on the path
/// may have added, changed or removed them, so a service trusts one only as
/// far as it trusts whatever sits in front of the server (a reverse proxy
/// of its own that sets `X-Forwarded-For`, say). The request's own fields
/// are the sealed ones alone (spec §4.3, erratum E1).
#[derive(Debug, Clone, Default)]
pub struct OuterFields(pub HeaderMap);

impl OuterFields {
    /// The fields of `outer` named in `names`, every value of each, in order.
    pub fn select(outer: &HeaderMap, names: &[HeaderName]) -> Self {
        let mut passed = HeaderMap::new();
        for name in names {
            for v in outer.get_all(name) {
                passed.append(name.clone(), v.clone());
            }
        }
        OuterFields(passed)
    }
}

struct Shared {
    config: ServerConfig,
    keys: LiveKeys,
    strikes: Arc<dyn StrikeStore>,
    cache: Option<Mutex<SessionCache>>,
    defence: Option<crate::defence::Defence>,
    /// When the cache was last purged of expired kids (unix seconds).
    purged: std::sync::atomic::AtomicU64,
    /// Payloads emitted as stubs (split serving).
    store: Option<Arc<ContentStore>>,
    /// Random SipHash key of [`Shared::session_id`].
    session_id_key: (u64, u64),
}

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

impl HttpCryptLayer {
    /// A layer serving with `keys` under `config`.
    pub fn new(keys: LiveKeys, config: ServerConfig) -> Self {
        let mut seed = [0u8; 16];
        OsRng.fill_bytes(&mut seed);
        let window = config.freshness.unwrap_or(replay::DEFAULT_WINDOW);
        let strikes = Arc::new(LocalStrikes::new(StrikeRegister::new(
            window,
            config.strike_capacity,
            seed,
        )));
        Self::with_strikes(keys, config, strikes)
    }

    /// A layer whose strike register is `strikes` (e.g. Redis shared by a fleet).
    pub fn with_strikes(
        keys: LiveKeys,
        config: ServerConfig,
        strikes: Arc<dyn StrikeStore>,
    ) -> Self {
        let mut seed = [0u8; 16];
        OsRng.fill_bytes(&mut seed);
        let cache = (config.session_cache > 0)
            .then(|| Mutex::new(SessionCache::new(config.session_cache, seed)));
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
                session_id_key: (OsRng.next_u64(), OsRng.next_u64()),
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

    /// Session-cache (hits, misses) so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        self.shared.cache.as_ref().map_or((0, 0), |c| {
            c.lock().unwrap_or_else(|p| p.into_inner()).stats()
        })
    }
}

impl Shared {
    /// A 64-bit name of the session `(kid, k)`, keyed with a secret random
    /// key: comparing names leaks nothing about `k`, and the chance that two
    /// sessions share one is 2^-64 (at worst an answer without a ticket).
    fn session_id(&self, kid: &httpcrypt_proto::KeyId, key: &httpcrypt_proto::SessionKey) -> u64 {
        use std::hash::Hasher;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(
            self.session_id_key.0,
            self.session_id_key.1,
        );
        h.write(&kid.0);
        h.write(key.as_bytes());
        // 0 means "no ticket yet" in ConnState.
        h.finish().max(1)
    }

    /// The session key for a fresh-key request: from the cache, or one X25519.
    /// On a cache hit `held` gets the ticket-key ID of the last ticket issued
    /// for the session ([`SessionCache::note_ticket`]).
    fn derive(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
        held: &mut Held,
    ) -> Result<httpcrypt_proto::SessionKey, httpcrypt_proto::Error> {
        match self.cached(sk, peer, held) {
            Some(k) => Ok(k),
            None => self.agree(sk, peer),
        }
    }

    /// The cached key of the session `(sk.kid, peer)`, if any; `held` gets
    /// the ticket-key ID noted with it.
    fn cached(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
        held: &mut Held,
    ) -> Option<httpcrypt_proto::SessionKey> {
        let hit = self
            .cache
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lookup(&sk.kid, peer)?;
        held.ticket = hit.ticket;
        held.cached = true;
        crate::metrics::request(crate::metrics::Outcome::SessionCache);
        Some(hit.key)
    }

    /// One X25519; its key goes into the cache, if there is one.
    fn agree(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
    ) -> Result<httpcrypt_proto::SessionKey, httpcrypt_proto::Error> {
        crate::metrics::key_agreement();
        let k = sk.secret.session_key(peer)?;
        if let Some(cache) = &self.cache {
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(&sk.kid, peer, k.clone());
        }
        Ok(k)
    }

    /// [`Shared::derive`] behind the defence (spec §14): a cache hit goes
    /// through; a miss is judged first, and a refusal is left in `refused`.
    #[allow(clippy::too_many_arguments)]
    fn derive_admitted(
        &self,
        sk: &core::ServerKey,
        peer: &httpcrypt_proto::KexPublic,
        n0: &[u8; 24],
        addr: std::net::IpAddr,
        cookies: &[&[u8]],
        refused: &mut Option<httpcrypt_proto::admission::Verdict>,
        held: &mut Held,
    ) -> Result<httpcrypt_proto::SessionKey, httpcrypt_proto::Error> {
        use httpcrypt_proto::admission::Verdict;
        let Some(defence) = &self.defence else {
            return self.derive(sk, peer, held);
        };
        if let Some(k) = self.cached(sk, peer, held) {
            return Ok(k);
        }
        // The admission echo is looked for only when the defence judges.
        let echo = httpcrypt_proto::admission::find_echo(cookies.iter().copied());
        match defence.judge(addr, n0, echo) {
            // The cache was asked just above: go straight to the X25519.
            Verdict::Admit => self.agree(sk, peer),
            v => {
                *refused = Some(v);
                Err(match v {
                    Verdict::Busy { .. } => httpcrypt_proto::Error::Busy,
                    _ => httpcrypt_proto::Error::AdmissionRequired,
                })
            }
        }
    }

    /// Notes in the session cache that a ticket under `tid` went out for the
    /// session of `accepted`, when its client sent its public key.
    fn note_ticket(&self, accepted: &Accepted, tid: httpcrypt_proto::KeyId) {
        let (Some(cache), outer::Credential::Key { client_public, .. }) =
            (&self.cache, &accepted.credential)
        else {
            return;
        };
        cache.lock().unwrap_or_else(|p| p.into_inner()).note_ticket(
            &accepted.kid,
            client_public,
            tid,
        );
    }

    /// Drops cached keys of expired kids (at most every few seconds), so a
    /// key's cache entries are zeroized with it (spec §6).
    fn purge_cache(&self, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(cache) = &self.cache else { return };
        if now < self.purged.load(Relaxed) + 5 {
            return;
        }
        self.purged.store(now, Relaxed);
        let live: Vec<httpcrypt_proto::KeyId> = self.keys.with(|k| {
            k.keys()
                .iter()
                .filter(|x| now <= u64::from(x.cert.not_after))
                .map(|x| x.kid)
                .collect()
        });
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .purge(|kid| live.contains(kid));
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

/// The answer when a request fails outside the protocol (slow or broken
/// client, failing application) before a sealed answer was possible.
fn failure_response(e: &BoxError) -> Response<HcBody> {
    match e.downcast_ref::<Error>() {
        Some(Error::Timeout) => plain(StatusCode::REQUEST_TIMEOUT, "request body timed out\n"),
        Some(Error::Transport(_)) => plain(StatusCode::BAD_REQUEST, "request body failed\n"),
        _ => {
            tracing::warn!(error = %e, "service failed");
            plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
        }
    }
}

/// A complete in-memory body.
pub(crate) fn full(b: impl Into<Bytes>) -> HcBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A short plaintext answer.
pub(crate) fn plain(status: StatusCode, body: &'static str) -> Response<HcBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

/// An outer (plaintext) problem response.
fn outer_problem(err: &httpcrypt_proto::Error, certs: &[String]) -> Response<HcBody> {
    crate::metrics::rejected(err.code());
    let (status, doc) = outer::format_problem(err, certs).unwrap_or((400, String::from("{}")));
    let mut r = Response::new(full(doc));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(outer::PROBLEM_TYPE),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn sealed_outer(body: HcBody) -> Response<HcBody> {
    let mut r = Response::new(body);
    outer_fields(r.headers_mut());
    r
}

/// Sets the outer fields of every sealed answer.
fn outer_fields(h: &mut HeaderMap) {
    // Parsed once.
    static FIELDS: std::sync::LazyLock<Vec<(HeaderName, HeaderValue)>> =
        std::sync::LazyLock::new(|| {
            outer::RESPONSE_FIELDS
                .iter()
                .filter_map(|(n, v)| {
                    Some((
                        HeaderName::from_bytes(n.as_bytes()).ok()?,
                        HeaderValue::from_static(v),
                    ))
                })
                .collect()
        });
    for (n, v) in FIELDS.iter() {
        h.insert(n.clone(), v.clone());
    }
}

/// A sealed inner error (spec §4.4): only the client holding `k` can read it.
fn inner_problem(key: ResponseKey, err: &httpcrypt_proto::Error, now: u64) -> Response<HcBody> {
    inner_problem_with(key, err, now, Vec::new())
}

/// [`inner_problem`] in answer to `HEAD`: the problem's head states the
/// document's length and the body stays empty (erratum E2); the status,
/// `Content-Type` and `Date` still say what happened.
fn inner_problem_to_head(
    key: ResponseKey,
    err: &httpcrypt_proto::Error,
    now: u64,
) -> Response<HcBody> {
    let (mut head, body) = core::problem_response(err)
        .unwrap_or_else(|| (ResponseHead::new(500, "Internal Server Error"), Vec::new()));
    head.fields.push(Field::new(
        "Content-Length",
        itoa::Buffer::new().format(body.len()),
    ));
    let n0 = crate::nonce::nonce24();
    let mut out = Vec::new();
    match core::seal_response(key, n0, &head, b"", now, DEFAULT_RECORD, &mut out) {
        Ok(()) => sealed_outer(full(out)),
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
    }
}

/// [`inner_problem`] with extra inner fields (a ticket, a token).
fn inner_problem_with(
    key: ResponseKey,
    err: &httpcrypt_proto::Error,
    now: u64,
    extra: Vec<Field>,
) -> Response<HcBody> {
    crate::metrics::rejected(err.code());
    let (mut head, body) = core::problem_response(err)
        .unwrap_or_else(|| (ResponseHead::new(500, "Internal Server Error"), Vec::new()));
    head.fields.extend(extra);
    let n0 = crate::nonce::nonce24();
    let mut out = Vec::new();
    match core::seal_response(key, n0, &head, &body, now, DEFAULT_RECORD, &mut out) {
        Ok(()) => sealed_outer(full(out)),
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
    }
}

/// The outer HTTP limits of spec §11.6 that hyper leaves to us: request
/// line (414), header section (431), transfer codings other than chunked
/// (501). hyper itself refuses heads beyond the listener's hard limit.
fn outer_http_limits(parts: &http::request::Parts, limits: &Limits) -> Option<Response<HcBody>> {
    let uri = &parts.uri;
    let target = uri.path_and_query().map_or(1, |p| p.as_str().len())
        + uri.scheme_str().map_or(0, |s| s.len() + "://".len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    // method SP target SP "HTTP/1.1"
    let line = parts.method.as_str().len() + 1 + target + 9;
    let refusal = if line > limits.max_request_line {
        Some((StatusCode::URI_TOO_LONG, "request line too long\n"))
    } else if parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum::<usize>()
        > limits.max_header_section
    {
        Some((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header section too large\n",
        ))
    } else {
        let mut codings = parts.headers.get_all(header::TRANSFER_ENCODING).iter();
        match (codings.next(), codings.next()) {
            (None, _) => None,
            (Some(te), None) if te.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked") => None,
            _ => Some((
                StatusCode::NOT_IMPLEMENTED,
                "transfer coding not implemented\n",
            )),
        }
    };
    refusal.map(|(status, text)| {
        crate::metrics::refused(match status {
            StatusCode::URI_TOO_LONG => "request_line_too_long",
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "header_section_too_large",
            _ => "transfer_coding_not_implemented",
        });
        // The body was not read: the connection cannot carry another request.
        let mut r = plain(status, text);
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    })
}

/// What the layer does with a request, decided before anything is awaited.
// Returned once and taken apart at once, on the stack; the large variant is
// the common one, and boxing it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Admission<B> {
    /// Answered at once: a refusal, a problem, OPTIONS, 404, 405.
    Answer(Response<HcBody>),
    /// Outside the mount, for the service as it is.
    PassThrough(Request<B>),
    /// The split-serving content endpoint (spec/split-serving.md §S5).
    Content {
        store: Arc<ContentStore>,
        method: Method,
        rest: String,
        body: B,
    },
    /// A sealed request, admitted: it is opened, served and sealed by
    /// [`serve_sealed`].
    Sealed(Admitted<B>),
}

/// A sealed request that passed the outer checks, with what it was
/// admitted with.
struct Admitted<B> {
    parts: http::request::Parts,
    body: B,
    accepted: Accepted,
    /// The ticket key of the last ticket this session got, on a cache hit.
    held: Held,
    now: u64,
}

/// What the session cache gave a fresh-key request.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// The ticket key of the last ticket issued for the session.
    ticket: Option<httpcrypt_proto::KeyId>,
    /// The session key came from the cache (no X25519).
    cached: bool,
}

/// The outer checks of a request within the outer HTTP limits (route,
/// credential, key agreement or resumption, admission), all synchronous: a
/// request is answered at once or handed on with what it was admitted
/// with, so only a request that really awaits something costs a boxed
/// future.
fn admit<B>(shared: &Shared, parts: http::request::Parts, body: B) -> Admission<B> {
    let cfg = &shared.config;
    let now = unix_now();
    // The dot keeps the content endpoint's paths apart from nonce paths.
    if let Some(store) = &shared.store {
        if let Some(rest) = parts
            .uri
            .path()
            .strip_prefix(cfg.mount.as_str())
            .and_then(|p| p.strip_prefix(split::CONTENT_DIR))
        {
            crate::metrics::request(crate::metrics::Outcome::Content);
            return Admission::Content {
                store: store.clone(),
                rest: rest.to_string(),
                method: parts.method,
                body,
            };
        }
    }
    // Borrowed views of the head: nothing is copied before the cheap checks.
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let host = parts
        .headers
        .get(header::HOST)
        .map(|h| h.as_bytes())
        .or_else(|| parts.uri.authority().map(|a| a.as_str().as_bytes()));
    let content_length = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let chunked = parts.headers.contains_key(header::TRANSFER_ENCODING);
    let outer_req = OuterRequest {
        method: parts.method.as_str(),
        target,
        host,
        cookies: parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .map(|v| v.as_bytes())
            .collect(),
        content_length,
        has_body: chunked || content_length.is_some_and(|l| l > 0),
    };
    let addr = crate::defence::peer_ip(&parts.extensions);
    let mut refused = None;
    // The ticket key of the last ticket this session got, on a cache hit.
    let mut held = Held::default();
    let conn = parts.extensions.get::<ConnState>();
    let decision = shared.keys.with(|keys| {
        core::accept_resuming(
            keys,
            &cfg.mount,
            &outer_req,
            &cfg.limits,
            now,
            |sk, peer, n0| {
                shared.derive_admitted(
                    sk,
                    peer,
                    n0,
                    addr,
                    &outer_req.cookies,
                    &mut refused,
                    &mut held,
                )
            },
            |tk, sealed| match conn {
                Some(c) => c.open_ticket(tk, sealed, now),
                None => tk.open(sealed, now),
            },
        )
    });
    drop(outer_req);
    shared.purge_cache(now);
    let accepted = match decision {
        Err(_) if refused.is_some() => {
            crate::metrics::request(crate::metrics::Outcome::Refused);
            return Admission::Answer(crate::defence::refusal_response(
                &refused.expect("checked just above"),
            ));
        }
        Err(e) => {
            let certs = shared.keys.with(|k| k.cert_lines(now));
            tracing::debug!(code = e.code(), "refused outer request");
            crate::metrics::request(crate::metrics::Outcome::Refused);
            return Admission::Answer(outer_problem(&e, &certs));
        }
        // `call` passes requests outside the mount on before this, by
        // the same test of the path.
        Ok(Accept::Outside) => {
            return match cfg.outside {
                Outside::Refuse => {
                    crate::metrics::refused("not_found");
                    Admission::Answer(plain(StatusCode::NOT_FOUND, "not found\n"))
                }
                Outside::PassThrough => {
                    crate::metrics::request(crate::metrics::Outcome::Plaintext);
                    Admission::PassThrough(Request::from_parts(parts, body))
                }
            };
        }
        Ok(Accept::Options) => {
            crate::metrics::request(crate::metrics::Outcome::Certificates);
            let certs = shared.keys.with(|k| {
                httpcrypt_proto::cert::format_cert_list(
                    &k.certs(now).into_iter().cloned().collect::<Vec<_>>(),
                )
            });
            let mut r = Response::new(full(certs));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(outer::CERTS_TYPE),
            );
            let max_age = shared.keys.seconds_to_rotation(now);
            // Digits only: always a valid field value.
            if let Ok(v) = HeaderValue::from_str(&format!("max-age={max_age}")) {
                r.headers_mut().insert(header::CACHE_CONTROL, v);
            }
            return Admission::Answer(r);
        }
        Ok(Accept::MethodNotAllowed) => {
            crate::metrics::refused("method_not_allowed");
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            return Admission::Answer(r);
        }
        Ok(Accept::NotFound) => {
            crate::metrics::refused("not_found");
            return Admission::Answer(plain(StatusCode::NOT_FOUND, "not found\n"));
        }
        Ok(Accept::Request(a)) => a,
    };
    if matches!(accepted.credential, outer::Credential::Ticket { .. }) {
        crate::metrics::request(crate::metrics::Outcome::Ticket);
    }
    if let Some(conn) = conn {
        if let Some(not_after) = shared
            .keys
            .with(|k| k.key(&accepted.kid, now).map(|sk| sk.cert.not_after))
        {
            conn.note(u64::from(not_after));
        }
    }
    Admission::Sealed(Admitted {
        parts,
        body,
        accepted,
        held,
        now,
    })
}

/// Opens, serves and seals an admitted request; every failure becomes an
/// answer (sealed where the session key allows it).
///
/// The future is boxed once per request, so its size is what each request
/// allocates and copies: an `async` block rather than an `async fn` (which
/// would hold every argument twice), and the opening phase in a block of
/// its own, which ends the inner head's and the outer body's room before
/// the service is awaited. The opened stream lives across two awaits, so
/// it would stay in the part of the future all states share; it is boxed
/// on its own instead (and handed to the service in that box), which keeps
/// the future within glibc's thread cache (1,032 bytes): above it, `malloc`
/// for the future took 483 instructions instead of ≈ 40 (callgrind).
#[allow(clippy::manual_async_fn)] // deliberate: see above
fn serve_sealed<S, B, RB>(
    shared: Arc<Shared>,
    inner: S,
    admitted: Admitted<B>,
) -> impl Future<Output = Result<Response<HcBody>, Infallible>> + Send
where
    S: tower::Service<Request<HcBody>, Response = Response<RB>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    // Taken apart here, outside the block, so that it captures each part
    // once.
    let Admitted {
        mut parts,
        body,
        mut accepted,
        held,
        now,
    } = admitted;
    async move {
        let cfg = &shared.config;
        let (inner_req, slot, extra, ticket_out, split, answers_head, record_size) = {
            let (outer_body, initial) = match accepted.query_stream.take() {
                Some(q) => (None, q),
                None => (Some(body), Vec::new()),
            };
            // A stream given whole is judged before the service runs (below); only
            // one that streams in can fail while the service reads it.
            let slot: Option<FailureSlot> = outer_body.as_ref().map(|_| Arc::new(Mutex::new(None)));
            let mut opened = match OpenBody::new(
                accepted.opener(&cfg.limits),
                inner::Decoder::<PackedRequestHead>::new(cfg.limits),
                outer_body,
                initial,
            ) {
                // Boxed at once (see the doc above: the future's size).
                Ok(o) => Box::new(o),
                Err(Error::Protocol(e)) => {
                    return Ok(inner_problem(accepted.into_response_key(), &e, now))
                }
                Err(e) => return Ok(failure_response(&BoxError::from(e))),
            };
            opened
                .set_idle_timeout(cfg.body_timeout)
                .set_limit(cfg.limits.max_body as u64)
                .set_failure_slot(slot.clone());
            let head = match opened
                .head()
                .await
                .and_then(|h| opened.complete_now().map(|()| h))
            {
                Ok(h) => h,
                Err(Error::Protocol(httpcrypt_proto::Error::BodyTooLarge)) => {
                    return Ok(outer_problem(&httpcrypt_proto::Error::BodyTooLarge, &[]))
                }
                Err(Error::Protocol(e)) => {
                    return Ok(inner_problem(accepted.into_response_key(), &e, now))
                }
                Err(e) => return Ok(failure_response(&BoxError::from(e))),
            };
            // Freshness and replay (spec §8): first error wins after stream and parse.
            if let Some(window) = cfg.freshness {
                let checked = match accepted.check_time(head.field("date"), now, window) {
                    Ok(date) => {
                        match shared
                            .strikes
                            .check_now(&accepted.kid, &accepted.n0, date, now)
                        {
                            Some(r) => r,
                            None => {
                                shared
                                    .strikes
                                    .check(&accepted.kid, &accepted.n0, date, now)
                                    .await
                            }
                        }
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = checked {
                    let key = accepted.into_response_key();
                    return Ok(if head.method() == "HEAD" {
                        inner_problem_to_head(key, &e, now)
                    } else {
                        inner_problem(key, &e, now)
                    });
                }
            }
            let client_random = head
                .field(token::CLIENT_RANDOM_FIELD)
                .map(token::parse_client_random);
            // Extra inner response fields: a ticket and the token.
            let mut extra = Vec::new();
            // The ticket that goes out, if any: its ticket key, and the connection
            // to tell once it has gone out in an answer.
            let mut ticket_out: Option<TicketOut> = None;
            // A session resumed from the cache that got a ticket under the current
            // ticket key on an earlier connection gets none (spec §7.2, D29): its
            // client reuses its key pair, so it is linkable by that anyway, and a new
            // ticket would differ from the one it holds only in its nonce.
            if cfg.tickets
                && (held.ticket.is_none()
                    || held.ticket != shared.keys.with(|k| current_tid(k, now)))
            {
                let conn = parts.extensions.get::<ConnState>();
                let session =
                    conn.map(|_| shared.session_id(&accepted.kid, accepted.session_key()));
                if conn.zip(session).is_none_or(|(c, s)| c.wants_ticket(s)) {
                    if let Some((t, tid)) = issue_ticket(&shared, &accepted, now) {
                        extra.push(Field::new(httpcrypt_proto::ticket::TICKET_FIELD, t));
                        ticket_out = Some(TicketOut {
                            tid,
                            conn: conn.cloned().zip(session),
                        });
                    }
                }
            }
            if let (Some(Ok(cr)), Some(secret)) = (&client_random, cfg.token_secret) {
                extra.push(Field::new(
                    token::RANDOM_FIELD,
                    token::format_random(&secret, accepted.session_key(), cr),
                ));
            }
            if cfg.require_token && !is_safe(head.method()) {
                let valid = cfg.token_secret.is_some_and(|secret| {
                    head.field(token::RANDOM_FIELD).is_some_and(|v| {
                        token::verify_random(&secret, accepted.session_key(), v).is_ok()
                    })
                });
                if !valid {
                    if let Some(t) = &ticket_out {
                        t.gone_out(&shared, &accepted);
                    }
                    return Ok(inner_problem_with(
                        accepted.into_response_key(),
                        &httpcrypt_proto::Error::TokenRequired,
                        now,
                        extra,
                    ));
                }
            }
            let mut split = match (&cfg.split, &shared.store) {
                (Some(sc), Some(store)) => Some(SplitPlan {
                    config: sc,
                    store: store.clone(),
                    asked: false,
                    method: head.method().to_string(),
                    target: head.target().to_string(),
                    credentials: false,
                    mount: cfg.mount.as_str().to_string(),
                }),
                _ => None,
            };
            // The answer to HEAD keeps its length and has no body (E2).
            let answers_head = head.method() == "HEAD";
            // Held across the service's await as 4 bytes, beside the flag
            // above, to keep this future within the thread cache.
            let record_size = u32::try_from(answer_record_size(
                cfg.record_size,
                parts
                    .extensions
                    .get::<ConnState>()
                    .map_or(0, ConnState::take_early_room),
            ))
            .unwrap_or(u32::MAX);
            let inner_req = match build_inner_request(
                &mut parts,
                head,
                opened.boxed_unsync(),
                accepted.bound_host(),
                cfg,
            ) {
                Ok((mut r, split_asked)) => {
                    if let Some(plan) = split.as_mut() {
                        plan.asked = split_asked;
                        plan.credentials = crate::split::carries_credentials(r.headers());
                    }
                    // The facts of the session, next to the outer
                    // request's extensions (build_inner_request).
                    r.extensions_mut().insert(Encrypted {
                        kid: accepted.kid,
                        resumed: matches!(accepted.credential, outer::Credential::Ticket { .. }),
                        cached: held.cached,
                    });
                    r
                }
                Err(e) => return Ok(inner_problem(accepted.into_response_key(), &e, now)),
            };
            (
                inner_req,
                slot,
                extra,
                ticket_out,
                split,
                answers_head,
                record_size,
            )
        };
        let rsp = call(inner, inner_req).await;
        // A body failure is often why the service failed (a gateway's upstream
        // request dies with it): report the protocol error it really is.
        let failure = slot
            .as_ref()
            .and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(e) = failure {
            if e == httpcrypt_proto::Error::BodyTooLarge {
                return Ok(outer_problem(&e, &[]));
            }
            return Ok(inner_problem(accepted.into_response_key(), &e, now));
        }
        let rsp = match rsp {
            Ok(r) => r,
            Err(e) => {
                let e: BoxError = e.into();
                tracing::warn!(error = %e, "service failed on a sealed request");
                let head = ResponseHead::new(500, "Internal Server Error");
                let n0 = crate::nonce::nonce24();
                let mut out = Vec::new();
                return match core::seal_response(
                    accepted.into_response_key(),
                    n0,
                    &head,
                    b"",
                    now,
                    DEFAULT_RECORD,
                    &mut out,
                ) {
                    Ok(()) => Ok(sealed_outer(full(out))),
                    Err(_) => Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n")),
                };
            }
        };
        if let Some(t) = &ticket_out {
            t.gone_out(&shared, &accepted);
        }
        Ok(seal_response(
            record_size as usize,
            accepted.into_response_key(),
            rsp,
            answers_head,
            extra,
            now,
            split,
        ))
    }
}

/// The record size of an answer: the configured one, or, on a connection
/// the ASAP gate admitted before its handshake with `early_room` bytes to
/// send until then, one whose first record fits in that room with the
/// outer head beside it (spec/asap.md §4), so the client can verify the
/// answer's head one round trip early.
fn answer_record_size(configured: usize, early_room: usize) -> usize {
    /// The outer response head and the stream's framing, at most.
    const OUTER: usize = 512;
    /// Records are never made smaller than this.
    const SMALLEST: usize = 256;
    if early_room == 0 {
        return configured;
    }
    configured.min(early_room.saturating_sub(OUTER).max(SMALLEST))
}

/// What the layer needs to decide on, and produce, a split answer.
struct SplitPlan<'a> {
    config: &'a crate::split::SplitConfig,
    store: Arc<ContentStore>,
    /// The outer request carried `Httpcrypt-Split` (it came through a split proxy).
    asked: bool,
    method: String,
    /// The inner request target as sent (§S1 normalises its path).
    target: String,
    /// The request the service saw carried `Cookie` or `Authorization`.
    credentials: bool,
    mount: String,
}

/// Methods without side effects (RFC 9110 §9.2.1), which need no token.
fn is_safe(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

/// The ID of the ticket key new tickets are sealed under.
fn current_tid(keys: &core::ServerKeys, now: u64) -> Option<httpcrypt_proto::KeyId> {
    keys.ticket_key(now).map(|t| t.tid())
}

/// A ticket for the session of `accepted`, and the ID of the ticket key that
/// sealed it.
fn issue_ticket(
    shared: &Shared,
    accepted: &Accepted,
    now: u64,
) -> Option<(String, httpcrypt_proto::KeyId)> {
    shared.keys.with(|keys| {
        let tk = keys.ticket_key(now)?;
        let expiry = keys.key(&accepted.kid, now)?.cert.not_after;
        let n = crate::nonce::nonce24();
        let t = tk.seal(
            &TicketContents {
                key: accepted.session_key().clone(),
                kid: accepted.kid,
                expiry,
            },
            n,
        );
        Some((t.to_field(), tk.tid()))
    })
}

/// A ticket put in an answer (spec §7.2, D29).
struct TicketOut {
    /// The ticket key that sealed it.
    tid: httpcrypt_proto::KeyId,
    /// The connection and session it went out on.
    conn: Option<(ConnState, u64)>,
}

impl TicketOut {
    /// Records, once the answer carrying it is made, that the ticket went
    /// out: on its connection, and in the session cache.
    fn gone_out(&self, shared: &Shared, accepted: &Accepted) {
        if let Some((c, session)) = &self.conn {
            c.ticket_issued(*session);
        }
        shared.note_ticket(accepted, self.tid);
    }
}

/// Builds the request the wrapped service sees from the inner request alone
/// (spec §4.3, erratum E1; the rule is `inner::service_fields`): the inner
/// method, target, fields but the protocol's own, and body; `Host` per
/// `inner::service_host` with `bound` (the outer `Host` the associated data
/// covers) and the configured name. Allow-listed outer fields go apart, as
/// [`OuterFields`]. Says whether the outer request carried
/// `Httpcrypt-Split` (which is for this layer only).
fn build_inner_request(
    parts: &mut http::request::Parts,
    head: PackedRequestHead,
    body: HcBody,
    bound: Option<&[u8]>,
    cfg: &ServerConfig,
) -> Result<(Request<HcBody>, bool), httpcrypt_proto::Error> {
    use httpcrypt_proto::Error::MalformedInner;
    let method = Method::from_bytes(head.method().as_bytes()).map_err(|_| MalformedInner)?;
    // Target and field values are views of the inner head's bytes, not copies.
    let uri = Uri::from_maybe_shared(head.target_bytes()).map_err(|_| MalformedInner)?;
    // §S3.
    let split_asked = parts.headers.contains_key(split::SPLIT_FIELD);
    let outer_passed =
        (!cfg.pass_outer.is_empty()).then(|| OuterFields::select(&parts.headers, &cfg.pass_outer));
    let host = if head.has_field("host") {
        None
    } else {
        inner::service_host(None, bound, cfg.authority.as_ref().map(|v| v.as_bytes()))
            .map(|h| HeaderValue::from_bytes(h).map_err(|_| MalformedInner))
            .transpose()?
    };
    // The outer map is reused for its room only: cleared, then filled with
    // the inner fields.
    let mut headers = std::mem::take(&mut parts.headers);
    headers.clear();
    headers.reserve(head.field_count() + 1);
    if let Some(h) = host {
        headers.append(header::HOST, h);
    }
    for (name, value) in head.shared_fields() {
        if !std::str::from_utf8(name).is_ok_and(inner::is_service_field) {
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|_| MalformedInner)?;
        let value = HeaderValue::from_maybe_shared(value).map_err(|_| MalformedInner)?;
        headers.append(name, value);
    }
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    // The service sees the outer request's extensions (the connection
    // state, say).
    *req.extensions_mut() = std::mem::take(&mut parts.extensions);
    if let Some(passed) = outer_passed {
        req.extensions_mut().insert(passed);
    }
    Ok((req, split_asked))
}

/// Inner response fields that must not travel inside (spec §4.3).
const HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Seals the service's answer `rsp` (to a `HEAD` request when the flag says
/// so) as the outer response.
fn seal_response<RB>(
    record_size: usize,
    key: ResponseKey,
    rsp: Response<RB>,
    answers_head: bool,
    extra: Vec<Field>,
    now: u64,
    split: Option<SplitPlan<'_>>,
) -> Response<HcBody>
where
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let (mut parts, body) = rsp.into_parts();
    // The answer to HEAD, and a 304, state the representation's length and
    // carry no body (erratum E2, spec §4.3): the service's length goes in as
    // it is, and whatever body it gave is dropped.
    let bodiless = inner::is_bodiless_answer(
        if answers_head { "HEAD" } else { "" },
        parts.status.as_u16(),
    );
    let body = if bodiless {
        http_body_util::Either::Left(http_body_util::Empty::<Bytes>::new())
    } else {
        http_body_util::Either::Right(body)
    };
    // A split stream starts with a 24-byte response nonce (§S3), so only v1
    // answers are split; a profile-2 answer goes out whole.
    let v1 = key.profile() == Profile::V1;
    let split = split.filter(|p| {
        v1 && p.asked
            && crate::split::is_public(
                &p.method,
                &p.target,
                p.credentials,
                parts.status,
                &parts.headers,
                &p.config.public,
            )
    });
    let status = parts.status;
    let exact = body.size_hint().exact();
    // A streamed body (a file, say) still has the length the application
    // declared; the client checks it against what arrives (spec §4.3).
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    // The inner head, encoded straight from the response's header map.
    // Room for the head and, when it is small, the body that follows it
    // into the first record (SealBody appends it to this buffer).
    let room = 512 + exact.map_or(0, |e| e.min(record_size as u64) as usize);
    let mut head = inner::ResponseHeadWriter::with_capacity(
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        room,
    );
    let mut has_date = false;
    for (n, v) in parts.headers.iter() {
        if HOP.contains(n)
            || n.as_str() == "keep-alive"
            || n == header::CONTENT_LENGTH
            || n.as_str() == split::PUBLIC_FIELD
            || !inner::is_service_response_field(n.as_str())
        {
            continue;
        }
        has_date |= n == header::DATE;
        head.field(n.as_str(), v.as_bytes());
    }
    let length = if bodiless {
        declared
    } else {
        exact
            .or(declared)
            .filter(|_| status != StatusCode::NO_CONTENT)
    };
    // Profile 2 (spec §4.5) adds no Date to an application's answer, and no
    // Content-Length when head and body go out as one FINAL record.
    let compact = key.profile() == Profile::Compact;
    if let (Some(len), false) = (length, compact) {
        head.field("Content-Length", itoa::Buffer::new().format(len).as_bytes());
    }
    if !has_date && !compact {
        replay::with_date(now, |d| head.field("Date", d.as_bytes()));
    }
    for f in &extra {
        head.field(&f.name, &f.value);
    }
    if let (Some(len), true) = (length, compact) {
        // Only an exact length lays the stream out in full records (SealBody).
        let omit = !bodiless
            && exact.is_some_and(|e| {
                key.profile()
                    .omits_content_length(head.finished_len(), e, record_size)
            });
        if !omit {
            head.field("Content-Length", itoa::Buffer::new().format(len).as_bytes());
        }
    }
    let head_bytes = head.finish();
    let n0 = crate::nonce::nonce24();
    // The nonce starts the first frame SealBody puts out, in this buffer.
    let mut prefix = Vec::with_capacity(first_frame_room(
        key.profile().response_prefix_len(),
        head_bytes.len(),
        exact,
        record_size,
    ));
    let sealer = Sealer::response(key, n0, &mut prefix);
    if let Some(plan) = split {
        return match SplitSealBody::new(
            sealer,
            prefix,
            &head_bytes,
            body,
            plan.config.public_record,
            plan.store,
        ) {
            Ok(b) => split_outer(b.boxed_unsync(), &plan.mount),
            Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
        };
    }
    let sealed = SealBody::new(sealer, prefix, head_bytes, body, record_size);
    // The service's answer becomes the outer one: its header map (cleared)
    // is reused, nothing else of it goes out.
    parts.status = StatusCode::OK;
    parts.version = http::Version::HTTP_11;
    parts.headers.clear();
    parts.extensions.clear();
    let mut r = Response::from_parts(parts, sealed.boxed_unsync());
    outer_fields(r.headers_mut());
    r
}

/// The outer layout of a split answer (§S3).
fn split_outer(body: HcBody, mount: &str) -> Response<HcBody> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(split::SPLIT_TYPE),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&format!("{mount}{}", split::CONTENT_DIR)) {
        h.insert(split::CONTENT_FIELD, v);
    }
    r
}

/// `ServiceExt::oneshot` with its future's `Send` stated, which the
/// compiler cannot infer through the generic services of the layers.
pub(crate) fn call<S, R>(
    svc: S,
    req: R,
) -> impl Future<Output = Result<S::Response, S::Error>> + Send
where
    S: tower::Service<R> + Send,
    S::Future: Send,
    R: Send,
{
    tower::ServiceExt::oneshot(svc, req)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An early-admitted connection's first answer has records that fit
    /// its room beside the outer head; other answers keep the configured
    /// size, and no record is made tiny.
    #[test]
    fn an_early_answer_fits_its_first_record_in_the_room() {
        assert_eq!(answer_record_size(16384, 0), 16384);
        assert_eq!(answer_record_size(16384, 3504), 3504 - 512);
        assert_eq!(answer_record_size(1024, 3504), 1024);
        assert_eq!(answer_record_size(16384, 300), 256);
    }

    /// Outside the mount, a request that passes the outer limits reaches
    /// the service unchanged and its answer comes back as it is (a failing
    /// service: 500); one over a limit is refused before the service sees
    /// it; with `Outside::Refuse` nothing reaches the service.
    #[tokio::test]
    async fn requests_outside_the_mount_pass_through_within_the_outer_limits() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tower::{Layer as _, ServiceExt as _};
        let dir = tempfile::tempdir().expect("a directory");
        let store = crate::keystore::KeyStore::create(dir.path(), true).expect("a key store");
        let keys = crate::keystore::start(store, Duration::from_secs(3600)).expect("keys");
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

    /// The watch wakes waiting connections once, after the earliest noted
    /// expiry has passed, and not before; a connection noted again is
    /// woken again at its own expiry.
    #[tokio::test]
    async fn the_expiry_watch_wakes_once_an_expiry_has_passed() {
        use std::future::Future;
        let watch = Arc::new(ExpiryWatch::default());
        let peer = "127.0.0.1:1".parse().expect("an address");
        let (a, b) = (
            ConnState::watched(watch.clone(), peer),
            ConnState::watched(watch.clone(), peer),
        );
        let woken = |n: &mut std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>| {
            let waker = futures_util::task::noop_waker();
            n.as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
                .is_ready()
        };
        let na = watch.notified();
        let nb = watch.notified();
        tokio::pin!(na, nb);
        na.as_mut().enable();
        nb.as_mut().enable();
        a.note(100);
        b.note(200);
        watch.tick(100);
        assert!(!woken(&mut na) && !woken(&mut nb), "nothing expired at 100");
        watch.tick(101);
        assert!(woken(&mut na) && woken(&mut nb), "a's key expired at 101");
        assert!(a.expired(101) && !b.expired(101));
        // b waits again and notes its expiry again.
        let nb = watch.notified();
        tokio::pin!(nb);
        nb.as_mut().enable();
        b.renote();
        watch.tick(150);
        assert!(!woken(&mut nb), "b's key lives until 200");
        watch.tick(201);
        assert!(woken(&mut nb), "b's key expired at 201");
    }

    /// The future of a sealed request for the static-file service and for
    /// the gateway fits glibc's thread cache, 1,032 bytes: above it every
    /// request's allocation of the future takes the allocator's slow path
    /// (`serve_sealed`).
    #[test]
    fn a_sealed_request_future_fits_the_thread_cache() {
        use crate::runtime::GLIBC_TCACHE_MAX as TCACHE_MAX;
        fn returned_size<F, A, B, C, R>(_: F) -> usize
        where
            F: FnOnce(A, B, C) -> R,
        {
            std::mem::size_of::<R>()
        }
        let files = returned_size(
            serve_sealed::<crate::runtime::StaticFiles, hyper::body::Incoming, HcBody>,
        );
        assert!(
            files <= TCACHE_MAX,
            "the static files' future is {files} bytes"
        );
        let gateway =
            returned_size(serve_sealed::<crate::runtime::Upstream, hyper::body::Incoming, HcBody>);
        assert!(
            gateway <= TCACHE_MAX,
            "the gateway's future is {gateway} bytes"
        );
    }

    /// The request the wrapped service sees is built from the inner head
    /// alone, as `inner::service_fields` says (erratum E1): no outer field
    /// reaches it, whatever its name; allow-listed outer fields arrive
    /// apart, as [`OuterFields`]; `Host` comes from the inner head, else
    /// the bound outer one, else the configured name, else nowhere.
    #[test]
    fn the_inner_request_is_the_inner_head_alone() {
        let outer = || {
            let outer = Request::get("/hc/x")
                .header("Host", "evil.test")
                .header("Cookie", "hc1=abc")
                .header("Authorization", "Basic ZXZpbA==")
                .header("X-HTTP-Method-Override", "DELETE")
                .header("X-Forwarded-For", "6.6.6.6")
                .header("X-Forwarded-For", "7.7.7.7")
                .header("Content-Encoding", "gzip")
                .header("Accept-Language", "en")
                .header(split::SPLIT_FIELD, "1")
                .body(())
                .unwrap();
            outer.into_parts().0
        };
        let build = |fields: &[(&str, &str)], bound: Option<&[u8]>, cfg: &ServerConfig| {
            let mut head = httpcrypt_proto::inner::RequestHead::new("POST", "/api?q=1");
            for (n, v) in fields {
                head.fields.push(Field::new(*n, *v));
            }
            let mut encoded = Vec::new();
            head.encode(&mut encoded);
            let packed = PackedRequestHead::parse(&encoded, &Limits::default()).unwrap();
            let mut parts = outer();
            let (req, split_asked) =
                build_inner_request(&mut parts, packed, full(Vec::new()), bound, cfg).unwrap();
            assert!(split_asked, "the outer request asked for a split answer");
            assert_eq!(req.method(), Method::POST);
            assert_eq!(req.uri(), "/api?q=1");
            let got: Vec<Field> = req
                .headers()
                .iter()
                .map(|(n, v)| Field::new(n.as_str(), v.as_bytes()))
                .collect();
            let want: Vec<Field> = inner::service_fields(
                &head.fields,
                bound,
                cfg.authority.as_ref().map(|v| v.as_bytes()),
            )
            .into_iter()
            .map(|f| Field::new(f.name.to_ascii_lowercase(), f.value))
            .collect();
            assert_eq!(got, want);
            req
        };
        let plain = ServerConfig::default();
        let fields = [
            ("Host", "app.test"),
            ("Accept", "text/plain"),
            ("Date", "Tue, 24 Nov 2026 20:00:00 GMT"),
            ("Client-Random", "x"),
            ("X-Custom", "1"),
        ];
        let req = build(&fields, Some(b"bound.test"), &plain);
        let names: Vec<&str> = req.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["host", "accept", "x-custom"]);
        assert_eq!(req.headers()["host"], "app.test");
        assert!(req.extensions().get::<OuterFields>().is_none());
        // No inner Host: the bound outer one, else the configured name,
        // else none at all.
        let named = ServerConfig {
            authority: Some(HeaderValue::from_static("conf.test")),
            pass_outer: vec![
                HeaderName::from_static("x-forwarded-for"),
                HeaderName::from_static("x-absent"),
            ],
            ..ServerConfig::default()
        };
        let req = build(&fields[1..], Some(b"bound.test"), &named);
        assert_eq!(req.headers()["host"], "bound.test");
        let req = build(&fields[1..], None, &named);
        assert_eq!(req.headers()["host"], "conf.test");
        let passed = &req.extensions().get::<OuterFields>().unwrap().0;
        let xff: Vec<&[u8]> = passed
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(xff, [b"6.6.6.6".as_slice(), b"7.7.7.7"]);
        assert_eq!(passed.len(), 2, "{passed:?}");
        let req = build(&fields[1..], None, &plain);
        assert!(!req.headers().contains_key("host"));
    }
}
