//! The layer's settings ([`ServerConfig`]) and what it tells the service
//! beside the inner request ([`Encrypted`], [`OuterFields`]).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use httpcrypt_proto::outer::Mount;
use httpcrypt_proto::{replay, Limits};
use rand_core::{OsRng, RngCore};

use crate::body::DEFAULT_RECORD;

/// What to do with plaintext requests outside the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outside {
    /// Hand them to the wrapped service unchanged.
    PassThrough,
    /// Answer 404.
    Refuse,
}

/// Which key agreements the server takes (spec/hybrid.md H4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pq {
    /// Suite 1 (X25519) only: `OPTIONS {mount}/pq` is 404.
    #[default]
    Off,
    /// Both suites: requests naming a suite-2 key ID take the hybrid
    /// agreement, `OPTIONS {mount}/pq` lists the suite-2 certificates.
    On,
    /// Suite 2 only: a v1 fresh-key request is `hybrid_required`, and
    /// `OPTIONS {mount}/` answers an empty list.
    Only,
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
    /// The hybrid suite (spec/hybrid.md); its keys come from
    /// [`crate::keys::KeyStore::with_hybrid`].
    pub pq: Pq,
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
            pq: Pq::Off,
        }
    }
}

/// Facts about an HTTPCrypt request, put in the inner request's extensions.
#[derive(Debug, Clone)]
pub struct Encrypted {
    /// The key the session ran under: a kex key's ID, or for a hybrid
    /// session its suite-2 key ID (spec/hybrid.md H2).
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
