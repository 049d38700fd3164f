//! [`Client`]: HTTPCrypt over hyper. Finds the server's keys (a
//! [`Discovery`] hook such as DNS, then `OPTIONS {mount}/`), encrypts the
//! very first request, streams bodies both ways, and retries once on
//! `unknown-key` and once on `stale` (spec §11), and up to three times on
//! the load-aware defence's `admission` and `busy` answers (spec §14). It never hands
//! unauthenticated bytes to its caller: a non-200 outer answer is an error.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use httpcrypt_proto::cert::{self, DiscoveredKey, KeyCert};
use httpcrypt_proto::client::{fits_get_form_for, ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Mount};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::ticket::Ticket;
use httpcrypt_proto::token;
use httpcrypt_proto::{replay, IdentityPublic, KexSecret, Limits, SessionKey};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use rand_core::{OsRng, RngCore};

use crate::body::{OpenBody, SealBody, DEFAULT_RECORD};
use crate::clock::unix_now;
use crate::connect::Connector;
use crate::error::{from_box, BoxError, Error};

type OuterBody = UnsyncBoxBody<Bytes, BoxError>;
/// The body of a decrypted response.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;
/// A boxed, sendable future (the [`Discovery`] hook returns one).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where the keys of a host came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// TXT at `_httpcrypt.{host}` (spec §6.1).
    DnsTxt,
    /// The AAAA chunk set at `_httpcrypt.{host}` (spec §6.2).
    DnsAaaa,
    /// TLSA at `_{port}._tcp.{host}` (spec §6.3).
    DnsTlsa,
    /// `OPTIONS {mount}/` (spec §6.5).
    Options,
    /// The `certs` of an `unknown-key` problem (spec §4.4).
    UnknownKey,
}

impl KeySource {
    /// A short name: `dns-txt`, `dns-aaaa`, `dns-tlsa`, `options`, `unknown-key`.
    pub fn as_str(&self) -> &'static str {
        match self {
            KeySource::DnsTxt => "dns-txt",
            KeySource::DnsAaaa => "dns-aaaa",
            KeySource::DnsTlsa => "dns-tlsa",
            KeySource::Options => "options",
            KeySource::UnknownKey => "unknown-key",
        }
    }
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a [`Discovery`] found for a host.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    /// Usable keys, already checked for the client's mode: in
    /// authenticated mode every one verified under `identity`. Empty when
    /// nothing usable was found (the client then falls back to `OPTIONS`).
    pub keys: Vec<DiscoveredKey>,
    /// The form they came in; `None` when `keys` is empty.
    pub source: Option<KeySource>,
    /// Seconds the answer may be reused (the records' remaining TTL).
    pub ttl: u64,
    /// The identity the keys were checked under: the pinned one, or one
    /// whose `_httpcrypt-id` record the resolver validated with DNSSEC
    /// (spec §6.4). The client then verifies its `OPTIONS` fallback and
    /// `unknown-key` certificates under it too.
    pub identity: Option<IdentityPublic>,
    /// Why methods failed or were skipped, for error messages and logs.
    pub detail: String,
}

/// A source of keys for an authority (`host[:port]`), used before falling
/// back to `OPTIONS`. DNS discovery ([`crate::dns::DnsDiscovery`]) plugs in here.
pub trait Discovery: Send + Sync + std::fmt::Debug {
    /// Keys for `authority`. `pinned` is the client's configured identity
    /// (authenticated mode); the discovery must return only keys that
    /// verified under it, or under a DNSSEC-validated identity it reports in
    /// [`Discovered::identity`]. An error means the lookup itself failed.
    fn discover<'a>(
        &'a self,
        authority: &'a str,
        pinned: Option<&'a IdentityPublic>,
    ) -> BoxFuture<'a, Result<Discovered, Error>>;

    /// Drops what the discovery keeps for `authority`: the server answered
    /// `unknown-key` to a key it found (spec §6.4.1). Nothing by default.
    fn forget(&self, authority: &str) {
        let _ = authority;
    }
}

/// Which client key pair a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPolicy {
    /// A fresh key pair for every request (unlinkable requests).
    FreshPerRequest,
    /// One key pair per host, so the server's session cache applies.
    ReusePerHost,
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server's mount path.
    pub mount: Mount,
    /// Authenticated mode: certificates must be signed by this identity.
    pub identity: Option<IdentityPublic>,
    /// HTTP forward proxy (`http://host:port`).
    pub proxy: Option<Uri>,
    /// Key-pair policy.
    pub key_policy: KeyPolicy,
    /// Use the GET form when the whole request fits in the request line.
    pub get_form: bool,
    /// Present tickets the server issued.
    pub tickets: bool,
    /// Use request profile 2 with keys whose certificate announces it
    /// (spec §4.5); `false` keeps every request in the v1 layout.
    pub compact: bool,
    /// Record size for request bodies.
    pub record_size: usize,
    /// Limits on the server's (hostile) responses.
    pub limits: Limits,
    /// Key discovery tried before `OPTIONS`.
    pub discovery: Option<Arc<dyn Discovery>>,
    /// Fall back to `OPTIONS {mount}/` when discovery finds nothing usable.
    pub options_fallback: bool,
    /// Authenticated mode without a pinned `identity`: keys count only when
    /// they verify under an identity the discovery validated with DNSSEC
    /// (spec §6.4, §6.7); without one every request fails with
    /// [`Error::NoIdentity`].
    pub require_identity: bool,
    /// Resolves host names for connections (e.g. through the same DNS
    /// server as discovery); `None` uses the system resolver.
    pub resolver: Option<Arc<dyn crate::connect::Resolve>>,
    /// TCP Fast Open for new connections (spec/asap.md §5).
    pub tfo: crate::asap::Tfo,
    /// ASAP mode: the provenance certificate to present on requests
    /// (outer `Httpcrypt-Provenance` field), e.g. [`crate::asap::AsapDiscovery`].
    pub provenance: Option<Arc<dyn crate::asap::ProvenanceSource>>,
    /// Longest wait for a TCP connection (to the server or the proxy);
    /// `None`: the system's.
    pub connect_timeout: Option<std::time::Duration>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            mount: Mount::default(),
            identity: None,
            proxy: None,
            key_policy: KeyPolicy::FreshPerRequest,
            get_form: true,
            tickets: true,
            compact: true,
            record_size: DEFAULT_RECORD,
            limits: Limits::default(),
            discovery: None,
            options_fallback: true,
            require_identity: false,
            resolver: None,
            tfo: crate::asap::Tfo::Off,
            provenance: None,
            connect_timeout: None,
        }
    }
}

/// What a middlebox saw of the last exchange, attached to responses.
#[derive(Debug, Clone)]
pub struct OuterExchange {
    /// Outer request method.
    pub method: Method,
    /// Outer request target as sent.
    pub uri: Uri,
    /// Outer request fields.
    pub request_headers: http::HeaderMap,
    /// Outer response status.
    pub status: StatusCode,
    /// Outer response fields.
    pub response_headers: http::HeaderMap,
    /// Requests sent for this call (2 after a retry).
    pub attempts: u32,
}

#[derive(Default)]
struct HostState {
    keys: Vec<DiscoveredKey>,
    source: Option<KeySource>,
    /// A DNSSEC-validated identity learnt by discovery (the pinned one,
    /// if any, lives in the configuration and takes precedence).
    identity: Option<IdentityPublic>,
    fetched: u64,
    max_age: u64,
    key: Option<Arc<KexSecret>>,
    ticket: Option<(Ticket, SessionKey)>,
    /// The last `Random` token the server gave, and the session key it is bound to.
    token: Option<(Vec<u8>, SessionKey)>,
    clock_offset: i64,
    /// The last admission cookie the server issued (spec §14) and when
    /// (unix seconds): echoed on fresh-key requests while it is young.
    admit: Option<(httpcrypt_proto::admission::AdmitCookie, u64)>,
}

/// An HTTPCrypt client. Cheap to clone; clones share connections and caches.
#[derive(Clone)]
pub struct Client {
    http: HyperClient<Connector, OuterBody>,
    config: Arc<ClientConfig>,
    hosts: Arc<Mutex<HashMap<String, HostState>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

enum Outcome {
    Done(Response<ResponseBody>),
    RetryUnknownKey,
    RetryStale,
    RetryToken,
    /// Outer 429 `admission`: the cookie is stored; send again with the echo.
    RetryAdmission,
    /// Outer 429 `busy`: wait this many seconds, then send again.
    RetryBusy(u64),
}

/// Most admission challenges and busy answers one call follows (spec §14.5).
const ADMISSION_RETRIES: u32 = 3;
/// Longest wait a busy answer can impose on one retry.
const MAX_BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a client keeps echoing a cookie (the server accepts it for at
/// least one full cookie period, 30 s by default).
const ADMIT_REUSE_SECS: u64 = 25;

/// The `hc1-admit` pair for request nonce `n0`: the puzzle is solved off
/// the async workers (it can take tens of milliseconds at high difficulty).
async fn admit_pair(
    cookie: httpcrypt_proto::admission::AdmitCookie,
    n0: [u8; 24],
) -> Result<String, Error> {
    use httpcrypt_proto::admission;
    let d = cookie.difficulty();
    if d > admission::MAX_DIFFICULTY {
        return Err(httpcrypt_proto::Error::BadAdmission.into());
    }
    let start = OsRng.next_u64();
    // 2^(d+6) tries fail with probability about e^-64.
    let tries = 1u64 << (u32::from(d) + 6).min(40);
    let solution = if d == 0 {
        Some([0u8; admission::SOLUTION_LEN])
    } else {
        tokio::task::spawn_blocking(move || admission::solve_puzzle(&cookie, &n0, start, tries))
            .await
            .map_err(|e| Error::Config(e.to_string()))?
    };
    let solution = solution.ok_or(httpcrypt_proto::Error::BadAdmission)?;
    Ok(format!(
        "{}={}",
        admission::ADMIT_COOKIE,
        admission::format_echo(&cookie, &solution)
    ))
}

/// Reads a whole body of at most `limit` bytes. (A hand-written loop: the
/// `Limited` + `collect` combinators make the caller's future unusable
/// with `tokio::spawn` through a higher-ranked `From` bound.)
async fn read_limited<B>(mut body: B, limit: usize) -> Result<Bytes, Error>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| from_box(e.into()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(httpcrypt_proto::Error::BodyTooLarge.into());
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}

/// Methods a client may resend after a lost connection (RFC 9110 §9.2.2).
fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Whether a transport error is a connection that closed before any answer.
fn closed_before_answer(e: &Error) -> bool {
    let Error::Transport(b) = e else { return false };
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(b.as_ref());
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        // A pooled connection the server closed while idle (its header
        // timeout) answers the request written on it with a reset.
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cur = err.source();
    }
    false
}

/// Methods that may change state: they carry `Client-Random`, and a token
/// when the server demands one (spec §8).
fn is_unsafe(m: &Method) -> bool {
    !matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

impl Client {
    /// A client with `config`.
    pub fn new(config: ClientConfig) -> Self {
        let http = HyperClient::builder(TokioExecutor::new()).build(
            Connector::new(config.proxy.clone())
                .with_resolver(config.resolver.clone())
                .with_tfo(config.tfo)
                .with_connect_timeout(config.connect_timeout),
        );
        Client {
            http,
            config: Arc::new(config),
            hosts: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn host<R>(&self, authority: &str, f: impl FnOnce(&mut HostState) -> R) -> R {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        f(hosts.entry(authority.to_string()).or_default())
    }

    /// The identity keys of `authority` must verify under, if any: the
    /// pinned one, else one discovery validated with DNSSEC.
    fn identity_for(&self, authority: &str) -> Option<IdentityPublic> {
        self.config
            .identity
            .or_else(|| self.host(authority, |h| h.identity))
    }

    /// Where the cached keys of `authority` came from.
    pub fn key_source(&self, authority: &str) -> Option<KeySource> {
        self.host(authority, |h| h.source)
    }

    /// The keys cached for `authority`.
    pub fn cached_keys(&self, authority: &str) -> Vec<DiscoveredKey> {
        self.host(authority, |h| h.keys.clone())
    }

    /// Finds the keys of `authority`: the discovery hook first (DNS: TXT,
    /// AAAA, TLSA), then, unless turned off, `OPTIONS {mount}/`. Checks them
    /// in authenticated mode and caches them for the records' TTL or the
    /// `max-age`.
    pub async fn refresh_keys(
        &self,
        scheme: &str,
        authority: &str,
    ) -> Result<(Vec<DiscoveredKey>, KeySource), Error> {
        let now = unix_now();
        if let Some(d) = &self.config.discovery {
            // The identity in force (pinned, or validated with DNSSEC on an
            // earlier lookup) binds this lookup too, also when its own
            // `_httpcrypt-id` query fails (spec §6.4).
            let identity = self.identity_for(authority);
            let why = match d.discover(authority, identity.as_ref()).await {
                Ok(found) => {
                    if identity.is_none() && found.identity.is_some() {
                        self.host(authority, |h| h.identity = found.identity);
                    }
                    // Keys checked under no identity do not count in
                    // authenticated mode, nor keys checked under another
                    // identity than the one in force.
                    let other =
                        identity.is_some() && found.identity.is_some_and(|f| identity != Some(f));
                    let trusted =
                        !other && (!self.config.require_identity || found.identity.is_some());
                    match (found.source, cert::choose_key(&found.keys, now)) {
                        (Some(source), Ok(_)) if trusted => {
                            self.host(authority, |h| {
                                h.keys = found.keys.clone();
                                h.source = Some(source);
                                h.fetched = now;
                                h.max_age = found.ttl.max(1);
                            });
                            return Ok((found.keys, source));
                        }
                        _ => found.detail,
                    }
                }
                Err(e) => e.to_string(),
            };
            tracing::debug!(%authority, reason = %why, "DNS discovery found no usable key");
            if self.config.require_identity && self.identity_for(authority).is_none() {
                return Err(Error::NoIdentity(Some(why)));
            }
            if !self.config.options_fallback {
                return Err(Error::Dns(format!("{authority}: {why}")));
            }
        }
        if self.config.require_identity && self.identity_for(authority).is_none() {
            return Err(Error::NoIdentity(None));
        }
        let certs = self.refresh_certs(scheme, authority).await?;
        Ok((
            certs.iter().map(DiscoveredKey::from).collect(),
            KeySource::Options,
        ))
    }

    /// Fetches the certificates of `authority` by `OPTIONS {mount}/` only,
    /// checks them in authenticated mode (pinned or DNSSEC-learnt
    /// identity), and caches them.
    pub async fn refresh_certs(
        &self,
        scheme: &str,
        authority: &str,
    ) -> Result<Vec<KeyCert>, Error> {
        let now = unix_now();
        let uri: Uri = format!("{scheme}://{authority}{}", self.config.mount.options_path())
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
        let req = Request::builder()
            .method(Method::OPTIONS)
            .uri(uri)
            .body(Empty::new().map_err(|never| match never {}).boxed_unsync())
            .map_err(|e| Error::Config(e.to_string()))?;
        let rsp = self.http.request(req).await?;
        if rsp.status() != StatusCode::OK {
            return Err(Error::Refused {
                status: rsp.status().as_u16(),
                type_uri: String::new(),
            });
        }
        let max_age = rsp
            .headers()
            .get(header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.split(',')
                    .find_map(|d| d.trim().strip_prefix("max-age=")?.parse().ok())
            })
            // max-age=0 (a rotation is due) means "ask again soon", not "keep
            // forever" as a missing max-age does (spec §6.5, §6.6).
            .map_or(0, |age: u64| age.max(1));
        let body = read_limited(rsp.into_body(), 64 * 1024).await?;
        let certs = cert::parse_cert_list(&body)?;
        let identity = self.identity_for(authority);
        if identity.is_none() && self.config.require_identity {
            return Err(Error::NoIdentity(None));
        }
        // `bad_signature` when valid certificates exist but none verifies.
        cert::choose(&certs, now, identity.as_ref())?;
        // Authenticated mode keeps only certificates the identity signed.
        let certs: Vec<KeyCert> = match &identity {
            Some(id) => certs.into_iter().filter(|c| c.verify(id).is_ok()).collect(),
            None => certs,
        };
        self.host(authority, |h| {
            h.keys = certs.iter().map(DiscoveredKey::from).collect();
            h.source = Some(KeySource::Options);
            h.fetched = now;
            h.max_age = max_age;
        });
        Ok(certs)
    }

    async fn current_key(&self, scheme: &str, authority: &str) -> Result<DiscoveredKey, Error> {
        let now = unix_now();
        let cached = self.host(authority, |h| {
            let fresh = h.max_age == 0 || now < h.fetched + h.max_age;
            if fresh {
                cert::choose_key(&h.keys, now).ok().copied()
            } else {
                None
            }
        });
        if let Some(k) = cached {
            return Ok(k);
        }
        let (keys, _) = self.refresh_keys(scheme, authority).await?;
        Ok(*cert::choose_key(&keys, now)?)
    }

    /// Sends a request whose body is in memory; retries once on
    /// `unknown-key` and once on `stale`. `req`'s URI is the inner target,
    /// absolute (`http://host[:port]/path?query`).
    pub async fn send(&self, req: Request<Bytes>) -> Result<Response<ResponseBody>, Error> {
        let (parts, body) = req.into_parts();
        let mut retried_key = false;
        let mut retried_stale = false;
        let mut retried_token = false;
        let mut retried_conn = false;
        let mut admission_retries = 0;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let b = Full::new(body.clone())
                .map_err(|never| match never {})
                .boxed_unsync();
            let r = Request::from_parts(parts.clone(), b);
            let outcome = match self.send_once(r, attempts, retried_stale).await {
                // A pooled connection the peer (often a proxy) closed after
                // its last answer: seal the request afresh on a new one.
                // Only for idempotent methods, and only once.
                Err(e)
                    if !retried_conn
                        && is_idempotent(&parts.method)
                        && closed_before_answer(&e) =>
                {
                    retried_conn = true;
                    continue;
                }
                other => other?,
            };
            match outcome {
                Outcome::Done(rsp) => return Ok(rsp),
                Outcome::RetryUnknownKey if !retried_key => retried_key = true,
                Outcome::RetryStale if !retried_stale => retried_stale = true,
                Outcome::RetryToken if !retried_token => retried_token = true,
                Outcome::RetryAdmission if admission_retries < ADMISSION_RETRIES => {
                    admission_retries += 1
                }
                Outcome::RetryBusy(secs) if admission_retries < ADMISSION_RETRIES => {
                    admission_retries += 1;
                    tokio::time::sleep(std::time::Duration::from_secs(secs).min(MAX_BUSY_WAIT))
                        .await;
                }
                Outcome::RetryAdmission => {
                    return Err(httpcrypt_proto::Error::AdmissionRequired.into())
                }
                Outcome::RetryBusy(_) => return Err(httpcrypt_proto::Error::Busy.into()),
                Outcome::RetryUnknownKey => return Err(httpcrypt_proto::Error::UnknownKey.into()),
                Outcome::RetryStale => return Err(httpcrypt_proto::Error::Stale.into()),
                Outcome::RetryToken => return Err(httpcrypt_proto::Error::TokenRequired.into()),
            }
        }
    }

    /// Sends a request with a streaming body. No retry is possible once the
    /// body has been consumed, so `unknown-key` and `stale` are errors
    /// (certificates and clock offset are refreshed for the next request).
    pub async fn send_streaming<B>(&self, req: Request<B>) -> Result<Response<ResponseBody>, Error>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let req = req.map(|b| b.map_err(Into::into).boxed_unsync());
        match self.send_once(req, 1, false).await? {
            Outcome::Done(rsp) => Ok(rsp),
            Outcome::RetryUnknownKey => Err(httpcrypt_proto::Error::UnknownKey.into()),
            Outcome::RetryStale => Err(httpcrypt_proto::Error::Stale.into()),
            Outcome::RetryToken => Err(httpcrypt_proto::Error::TokenRequired.into()),
            Outcome::RetryAdmission => Err(httpcrypt_proto::Error::AdmissionRequired.into()),
            Outcome::RetryBusy(_) => Err(httpcrypt_proto::Error::Busy.into()),
        }
    }

    /// One attempt. `own_date`: after a `stale` answer the client's
    /// corrected clock replaces any `Date` the caller set.
    async fn send_once(
        &self,
        req: Request<OuterBody>,
        attempts: u32,
        own_date: bool,
    ) -> Result<Outcome, Error> {
        let (parts, body) = req.into_parts();
        let scheme = parts.uri.scheme_str().unwrap_or("http").to_string();
        if scheme != "http" {
            return Err(Error::Config(format!(
                "HTTPCrypt runs over plain http, not {scheme}"
            )));
        }
        let authority = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| Error::Config("the request URI needs a host".into()))?;
        let server_key = self.current_key(&scheme, &authority).await?;
        let now = unix_now();

        // Credential: a ticket for this kid, or a key pair per the policy.
        let (ticket, reused, offset) = self.host(&authority, |h| {
            let ticket = if self.config.tickets {
                h.ticket.clone()
            } else {
                None
            };
            if self.config.key_policy == KeyPolicy::ReusePerHost && h.key.is_none() {
                h.key = Some(Arc::new(KexSecret::generate(&mut OsRng)));
            }
            (ticket, h.key.clone(), h.clock_offset)
        });
        let fresh;
        let key: &KexSecret = match &reused {
            Some(k) => k,
            None => {
                fresh = KexSecret::generate(&mut OsRng);
                &fresh
            }
        };
        let cred = match &ticket {
            Some((t, k)) => ClientCredential::Ticket(t, k),
            None => ClientCredential::Key(key),
        };
        // Profile 2 (spec §4.5) when the key announces it: the corrected
        // time goes into the nonce, the Host into record 0's associated data.
        let profile = if self.config.compact {
            server_key.profile
        } else {
            Profile::V1
        };
        let compact = profile == Profile::Compact;
        let n0 = profile.request_n0(
            now.saturating_add_signed(offset),
            &mut crate::nonce::ThreadRng,
        );
        let mut prepared = PreparedRequest::for_key(
            &server_key.kex_public,
            cred,
            n0,
            &outer::random_pad_for(profile, &mut crate::nonce::ThreadRng),
            &outer::random_pad_for(profile, &mut crate::nonce::ThreadRng),
        )?;
        if compact {
            prepared = prepared.compact(&authority)?;
        }

        // Inner head: the target, the caller's fields, Host and a corrected
        // Date (profile 2: neither, unless the caller set them).
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut head = RequestHead::new(parts.method.as_str(), target);
        let mut has_host = false;
        for (n, v) in &parts.headers {
            if inner::FORBIDDEN.contains(&n.as_str())
                || n == header::CONTENT_LENGTH
                || (own_date && n == header::DATE)
            {
                continue;
            }
            has_host |= n == header::HOST;
            head.fields.push(Field::new(n.as_str(), v.as_bytes()));
        }
        if !has_host && !compact {
            head.fields
                .insert(0, Field::new("Host", authority.as_str()));
        }
        if !compact && (own_date || !parts.headers.contains_key(header::DATE)) {
            head.fields.push(Field::new(
                "Date",
                replay::format_date(now.saturating_add_signed(offset)),
            ));
        }
        let exact = body.size_hint().exact();
        if let Some(len) = exact {
            if len > 0 || parts.method == Method::POST || parts.method == Method::PUT {
                head.fields
                    .push(Field::new("Content-Length", len.to_string()));
            }
        }
        if is_unsafe(&parts.method) {
            // A token the server issued under this very session key proves
            // an earlier round trip; a fresh Client-Random asks for the next.
            let token = self.host(&authority, |h| h.token.clone());
            if let Some((value, k)) = token {
                if k == *prepared.session_key() {
                    head.fields.push(Field::new(token::RANDOM_FIELD, value));
                }
            }
            let cr = crate::nonce::nonce24();
            head.fields.push(Field::new(
                token::CLIENT_RANDOM_FIELD,
                httpcrypt_proto::b64::encode(&cr),
            ));
        }
        let mut head_bytes = Vec::new();
        head.encode(&mut head_bytes);

        let host_value =
            HeaderValue::from_str(&authority).map_err(|e| Error::Config(e.to_string()))?;
        // Under load the server wants its admission cookie back on a fresh
        // key agreement (spec §14); tickets skip the defence.
        let admit = match (&ticket, self.host(&authority, |h| h.admit)) {
            (None, Some((c, at))) if now < at + ADMIT_REUSE_SECS => {
                Some(admit_pair(c, *prepared.n0()).await?)
            }
            _ => None,
        };
        let cookie = match admit {
            Some(pair) => HeaderValue::from_str(&format!("{}; {pair}", prepared.cookie())),
            None => HeaderValue::from_str(prepared.cookie()),
        }
        .map_err(|e| Error::Config(e.to_string()))?;
        let use_get = self.config.get_form
            && exact.is_some_and(|l| {
                fits_get_form_for(
                    profile,
                    &self.config.mount,
                    head_bytes.len() + l as usize + 64,
                )
            });
        let mut outer_req = if use_get {
            let plain = read_limited(body, 4096).await?;
            let mut all = head_bytes;
            all.extend_from_slice(&plain);
            let mut stream = Vec::new();
            httpcrypt_proto::stream::seal_all(
                prepared.sealer(),
                &all,
                all.len().max(1),
                &mut stream,
            )?;
            let path = prepared.get_target(&self.config.mount, &stream);
            let mut r = Request::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
            *r.method_mut() = Method::GET;
            *r.uri_mut() = format!("{scheme}://{authority}{path}")
                .parse()
                .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
            r
        } else {
            let sealed = SealBody::new(
                prepared.sealer(),
                Vec::new(),
                head_bytes,
                body,
                self.config.record_size,
            );
            let mut r = Request::new(sealed.boxed_unsync());
            *r.method_mut() = Method::POST;
            let path = prepared.nonce_path(&self.config.mount);
            *r.uri_mut() = format!("{scheme}://{authority}{path}")
                .parse()
                .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(outer::OCTET_STREAM),
            );
            r
        };
        let h = outer_req.headers_mut();
        h.insert(header::HOST, host_value);
        h.insert(header::COOKIE, cookie);
        if let Some(pc) = self
            .config
            .provenance
            .as_ref()
            .and_then(|p| p.certificate(&authority, now))
        {
            if let Ok(v) = HeaderValue::from_str(&pc) {
                h.insert(httpcrypt_proto::provenance::FIELD, v);
            }
        }
        let sent_method = outer_req.method().clone();
        let sent_uri = outer_req.uri().clone();
        let sent_headers = outer_req.headers().clone();

        let rsp = self.http.request(outer_req).await?;
        let (rparts, rbody) = rsp.into_parts();
        if rparts.status != StatusCode::OK {
            // Unauthenticated: only hints for a retry, never data.
            let body = read_limited(rbody, 64 * 1024).await.unwrap_or_default();
            let problem = outer::parse_problem(&body).ok();
            let type_uri = problem
                .as_ref()
                .map(|p| p.type_uri.clone())
                .unwrap_or_default();
            if type_uri == httpcrypt_proto::error::problem_type::UNKNOWN_KEY {
                let certs: Vec<KeyCert> = problem
                    .map(|p| {
                        p.certs
                            .iter()
                            .filter_map(|l| KeyCert::from_text(l).ok())
                            .collect()
                    })
                    .unwrap_or_default();
                let identity = self.identity_for(&authority);
                let certs: Vec<KeyCert> = match &identity {
                    Some(id) => certs.into_iter().filter(|c| c.verify(id).is_ok()).collect(),
                    None if self.config.require_identity => Vec::new(),
                    None => certs,
                };
                let usable = cert::choose(&certs, unix_now(), identity.as_ref()).is_ok();
                self.host(&authority, |h| {
                    h.ticket = None;
                    if usable {
                        h.keys = certs.iter().map(DiscoveredKey::from).collect();
                        h.source = Some(KeySource::UnknownKey);
                        h.fetched = unix_now();
                    } else {
                        // Stale keys: the retry goes through discovery again.
                        h.keys.clear();
                    }
                });
                // So do the discovery's cached answers (spec §6.4.1).
                if let Some(d) = &self.config.discovery {
                    d.forget(&authority);
                }
                return Ok(Outcome::RetryUnknownKey);
            }
            if rparts.status == StatusCode::TOO_MANY_REQUESTS {
                use httpcrypt_proto::admission::{parse_refusal, Refusal};
                match parse_refusal(&body) {
                    Ok(Refusal::Admission(c)) => {
                        let at = unix_now();
                        self.host(&authority, |h| h.admit = Some((c, at)));
                        return Ok(Outcome::RetryAdmission);
                    }
                    Ok(Refusal::Busy(secs)) => return Ok(Outcome::RetryBusy(secs)),
                    Err(_) => {}
                }
            }
            return Err(Error::Refused {
                status: rparts.status.as_u16(),
                type_uri,
            });
        }
        let opener = prepared.response_opener(&self.config.limits);
        let mut opened = OpenBody::new(
            opener,
            // The answer to HEAD has no body (erratum E2).
            inner::ResponseDecoder::answering(parts.method.as_str(), self.config.limits),
            Some(rbody),
            Vec::new(),
        )?;
        let inner_head: ResponseHead = opened.head().await?;

        if let Some(t) = inner::field(&inner_head.fields, httpcrypt_proto::ticket::TICKET_FIELD) {
            if let Ok(t) = Ticket::from_field(t) {
                let k = prepared.session_key().clone();
                self.host(&authority, |h| h.ticket = Some((t, k)));
            }
        }
        if let Some(r) = inner::field(&inner_head.fields, token::RANDOM_FIELD) {
            let k = prepared.session_key().clone();
            let r = r.to_vec();
            self.host(&authority, |h| h.token = Some((r, k)));
        }
        let mut body: ResponseBody = opened.boxed_unsync();
        if inner_head.status == 425 {
            // Read the (small, authenticated) problem to tell stale from replay.
            let bytes = read_limited(body, 64 * 1024).await?;
            let p = outer::parse_problem(&bytes).ok();
            // A problem in answer to HEAD has no document (erratum E2): it
            // counts as stale, since retrying a safe request once is
            // harmless and the server's Date is in the head.
            let head_problem = parts.method == Method::HEAD
                && inner::field(&inner_head.fields, "content-type")
                    == Some(outer::PROBLEM_TYPE.as_bytes());
            if head_problem
                || p.as_ref()
                    .is_some_and(|p| p.type_uri == httpcrypt_proto::error::problem_type::STALE)
            {
                if let Ok(server) =
                    replay::check_date(inner::field(&inner_head.fields, "date"), 0, u64::MAX)
                {
                    let local = unix_now() as i64;
                    self.host(&authority, |h| h.clock_offset = server as i64 - local);
                }
                return Ok(Outcome::RetryStale);
            }
            if p.as_ref()
                .is_some_and(|p| p.type_uri == httpcrypt_proto::error::problem_type::TOKEN_REQUIRED)
            {
                // The answer carried a token (and a ticket, so the retry runs
                // under the same session key the token is bound to).
                return Ok(Outcome::RetryToken);
            }
            body = Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync();
        }
        let mut out = Response::new(body);
        *out.status_mut() = StatusCode::from_u16(inner_head.status)
            .map_err(|_| httpcrypt_proto::Error::MalformedInner)?;
        // The ticket and the token are for this client (kept above), not
        // for its caller: what the caller gets is the application's answer.
        for f in inner_head
            .fields
            .iter()
            .filter(|f| !f.is(httpcrypt_proto::ticket::TICKET_FIELD) && !f.is(token::RANDOM_FIELD))
        {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(f.name.as_bytes()),
                HeaderValue::from_bytes(&f.value),
            ) {
                out.headers_mut().append(n, v);
            }
        }
        out.extensions_mut().insert(OuterExchange {
            method: sent_method,
            uri: sent_uri,
            request_headers: sent_headers,
            status: rparts.status,
            response_headers: rparts.headers,
            attempts,
        });
        Ok(Outcome::Done(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connection error")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn transport(kind: std::io::ErrorKind) -> Error {
        Error::Transport(Box::new(Wrapped(std::io::Error::from(kind))))
    }

    #[test]
    fn a_reset_or_broken_pipe_counts_as_closed_before_the_answer() {
        use std::io::ErrorKind::*;
        for k in [ConnectionReset, ConnectionAborted, BrokenPipe] {
            assert!(closed_before_answer(&transport(k)), "{k:?}");
        }
        for k in [ConnectionRefused, TimedOut, InvalidData] {
            assert!(!closed_before_answer(&transport(k)), "{k:?}");
        }
        assert!(!closed_before_answer(&Error::Config("x".into())));
    }
}
