//! Where a client finds a server's keys before asking the server itself:
//! the [`Discovery`] hook (DNS, ASAP) and what it reports, and the
//! [`ProvenanceSource`] hook for ASAP's provenance certificates. The
//! implementations live in `dns/` and `asap/`.

use std::future::Future;
use std::pin::Pin;

use httpcrypt_proto::cert::DiscoveredKey;
use httpcrypt_proto::hybrid::{HybridCert, KemPublic};
use httpcrypt_proto::IdentityPublic;

use crate::error::Error;

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
    /// The `certs` (or `hybrid_certs`) of an `unknown-key` problem (spec §4.4).
    UnknownKey,
    /// `OPTIONS {mount}/pq` (spec/hybrid.md H4).
    PqOptions,
    /// TXT at `_httpcrypt-pq.{host}` (spec/hybrid.md H4).
    DnsPqTxt,
    /// The eleven AAAA records at `_httpcrypt-pq.{host}` (spec/hybrid.md H4).
    DnsPqAaaa,
}

impl KeySource {
    /// A short name: `dns-txt`, `dns-aaaa`, `dns-tlsa`, `options`,
    /// `unknown-key`, `options-pq`, `dns-pq-txt`, `dns-pq-aaaa`.
    pub fn as_str(&self) -> &'static str {
        match self {
            KeySource::DnsTxt => "dns-txt",
            KeySource::DnsAaaa => "dns-aaaa",
            KeySource::DnsTlsa => "dns-tlsa",
            KeySource::Options => "options",
            KeySource::UnknownKey => "unknown-key",
            KeySource::PqOptions => "options-pq",
            KeySource::DnsPqTxt => "dns-pq-txt",
            KeySource::DnsPqAaaa => "dns-pq-aaaa",
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

/// What a [`Discovery`] found of suite 2 for a host (spec/hybrid.md H4).
#[derive(Debug, Clone, Default)]
pub struct HybridDiscovered {
    /// Suite-2 certificates as found; the client checks them (validity,
    /// the identity in force, a known key text) before use.
    pub certs: Vec<HybridCert>,
    /// Encapsulation key texts found (TXT at `_httpcrypt-kem.{host}`).
    pub kems: Vec<KemPublic>,
    /// The form the certificates came in; `None` when `certs` is empty.
    pub source: Option<KeySource>,
    /// Seconds the answer may be reused (the records' remaining TTL).
    pub ttl: u64,
    /// Why methods failed, for logs.
    pub detail: String,
}

/// A source of keys for an authority (`host[:port]`), used before falling
/// back to `OPTIONS`. DNS discovery (`dns::DnsDiscovery`) plugs in here.
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

    /// Suite-2 certificates and key texts for `authority` (asked before
    /// `OPTIONS {mount}/pq` when the client wants suite 2). Nothing by
    /// default.
    fn discover_hybrid<'a>(
        &'a self,
        authority: &'a str,
    ) -> BoxFuture<'a, Result<HybridDiscovered, Error>> {
        let _ = authority;
        Box::pin(async { Ok(HybridDiscovered::default()) })
    }

    /// Drops what the discovery keeps for `authority`: the server answered
    /// `unknown-key` to a key it found (spec §6.4.1). Nothing by default.
    fn forget(&self, authority: &str) {
        let _ = authority;
    }
}

/// Where the client finds the provenance certificate to present on the
/// first request to an authority (the outer `Httpcrypt-Provenance` field,
/// spec/asap.md).
pub trait ProvenanceSource: Send + Sync + std::fmt::Debug {
    /// A certificate (text form) still valid at `now` for `authority`, if any.
    fn certificate(&self, authority: &str, now: u64) -> Option<String>;
}
