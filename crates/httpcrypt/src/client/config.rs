//! The client's settings ([`ClientConfig`]) and what it reports of an
//! exchange ([`OuterExchange`]).

use std::sync::Arc;

use http::{Method, StatusCode, Uri};
use httpcrypt_proto::client::{Pq, ShortPolicy, Suite};
use httpcrypt_proto::outer::Mount;
use httpcrypt_proto::{IdentityPublic, Limits};

use super::discovery::{Discovery, ProvenanceSource};
use crate::body::DEFAULT_RECORD;
use crate::connect::{Resolve, Tfo};

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
    /// Also use the GET form for a fresh hybrid request when it fits. Off
    /// by default: base64url makes the 1,088-byte ML-KEM ciphertext 363
    /// bytes longer in the request line than in a POST body
    /// (spec/hybrid.md H3).
    pub hybrid_get_form: bool,
    /// Present tickets the server issued.
    pub tickets: bool,
    /// Ask for short tickets (spec §7.3) and present them, asking for a new
    /// one as the policy says; `None` takes the v1 tickets the server
    /// issues unasked (§7.2). Only with `tickets`.
    pub short_tickets: Option<ShortPolicy>,
    /// This client sends one request and keeps nothing for later (a
    /// command-line fetch): it presents and asks for no ticket, and a safe
    /// request declines one (`Ticket: none`, spec §7.3), so the answer
    /// carries no ticket the client could never present. Off by default.
    pub one_shot: bool,
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
    /// [`crate::error::Error::NoIdentity`].
    pub require_identity: bool,
    /// Resolves host names for connections (e.g. through the same DNS
    /// server as discovery); `None` uses the system resolver.
    pub resolver: Option<Arc<dyn Resolve>>,
    /// TCP Fast Open for new connections (spec/asap.md §5).
    pub tfo: Tfo,
    /// ASAP mode: the provenance certificate to present on requests
    /// (outer `Httpcrypt-Provenance` field), e.g. `asap::AsapDiscovery`.
    pub provenance: Option<Arc<dyn ProvenanceSource>>,
    /// Longest wait for a TCP connection (to the server or the proxy);
    /// `None`: the system's.
    pub connect_timeout: Option<std::time::Duration>,
    /// Suite 2, the hybrid X25519 + ML-KEM-768 agreement (spec/hybrid.md
    /// H5): `Off` (v1 only), `Prefer` (suite 2 when offered; an origin seen
    /// with it stays pinned to it), `Require`.
    pub pq: Pq,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            mount: Mount::default(),
            identity: None,
            proxy: None,
            key_policy: KeyPolicy::FreshPerRequest,
            get_form: true,
            hybrid_get_form: false,
            tickets: true,
            short_tickets: Some(ShortPolicy::default()),
            compact: true,
            record_size: DEFAULT_RECORD,
            limits: Limits::default(),
            discovery: None,
            options_fallback: true,
            require_identity: false,
            resolver: None,
            tfo: Tfo::Off,
            provenance: None,
            connect_timeout: None,
            pq: Pq::Off,
            one_shot: false,
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
    /// The key agreement of the answered request: suite 2 for a fresh
    /// hybrid request and for a ticket of a hybrid session.
    pub suite: Suite,
}

impl OuterExchange {
    /// What the answered request's cookie carried (a public key, a v1 or a
    /// short ticket), from its first pair; `None` without a cookie.
    pub fn credential_form(&self) -> Option<httpcrypt_proto::outer::CookieForm> {
        let cookie = self.request_headers.get(http::header::COOKIE)?;
        httpcrypt_proto::outer::CookieForm::of_field(cookie.as_bytes())
    }
}
