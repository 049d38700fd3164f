//! The client's suite-2 decisions (spec/hybrid.md H4, H5), without IO:
//! the mode ([`Pq`]), the keys a suite-2 answer makes usable
//! ([`HybridKey`]), the encapsulation keys learnt by hash ([`KemCache`]),
//! and what a client keeps per server for suite 2 ([`PqState`]: the keys,
//! the pin, whether the last discovery found none).
//!
//! - `off`: v1 only (the default; nothing here runs).
//! - `prefer`: look for suite 2 first (`OPTIONS {mount}/pq`, or the DNS
//!   forms), use it when found, else v1. A usable suite-2 certificate pins
//!   the origin to suite 2 until its `not_after`: a later discovery
//!   offering only suite 1 is `hybrid_downgrade`.
//! - `require`: suite 2 or `hybrid_downgrade`.

use std::sync::Arc;

use crate::cert::DiscoveredKey;
use crate::error::{Error, Result};
use crate::hybrid::cert::{self, AnyCert, CertList, HybridCert};
use crate::hybrid::{KemHash, KemPublic, KEM_TEXT_PREFIX};
use crate::keys::{IdentityPublic, KexPublic, KeyId};
use crate::outer::Mount;
use crate::profile::Profile;

/// Encapsulation keys a client remembers per server. Each is 1,184 bytes
/// and a server makes a new one every `K` kex rotations (spec/hybrid.md
/// H4), so a few cover the keys any held certificate names.
pub const KEM_CACHE_LIMIT: usize = 8;

/// Which suites a client uses (spec/hybrid.md H5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pq {
    /// v1 only.
    #[default]
    Off,
    /// Suite 2 when the server offers it (and always once pinned), else v1.
    Prefer,
    /// Suite 2 or nothing.
    Require,
}

impl Pq {
    /// `off`, `prefer` or `require`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Pq::Off => "off",
            Pq::Prefer => "prefer",
            Pq::Require => "require",
        }
    }

    /// Parses `off`, `prefer` or `require`.
    pub fn parse(text: &str) -> Option<Self> {
        [Pq::Off, Pq::Prefer, Pq::Require]
            .into_iter()
            .find(|m| m.as_str() == text)
    }
}

/// The key agreement of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Suite {
    /// Suite 1: X25519 (spec §2).
    #[default]
    Classical,
    /// Suite 2: X25519 + ML-KEM-768 (spec/hybrid.md).
    Hybrid,
}

impl Suite {
    /// The suite byte of its certificates: 1 or 2.
    pub fn number(&self) -> u8 {
        match self {
            Suite::Classical => 1,
            Suite::Hybrid => 2,
        }
    }
}

/// A suite-2 key a client may use: a certificate that passed the checks of
/// the client's mode, and the encapsulation key whose hash it signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridKey {
    /// The certificate.
    pub cert: HybridCert,
    /// The encapsulation key (`kem_mismatch` was ruled out when it was paired).
    pub kem: Arc<KemPublic>,
}

impl HybridKey {
    /// Pairs a checked certificate with its key text (`kem_mismatch`
    /// unless the certificate signs this key's hash).
    pub fn new(cert: HybridCert, kem: Arc<KemPublic>) -> Result<Self> {
        kem.check(&cert)?;
        Ok(HybridKey { cert, kem })
    }

    /// Whether `now` lies in the certificate's validity.
    pub fn is_valid_at(&self, now: u64) -> bool {
        self.cert.is_valid_at(now)
    }

    /// The suite-2 key ID.
    pub fn kid(&self) -> KeyId {
        self.cert.kid()
    }
}

/// The key a request goes to: a v1 key, or a suite-2 key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKey {
    /// Suite 1.
    Classical(DiscoveredKey),
    /// Suite 2.
    Hybrid(HybridKey),
}

impl ServerKey {
    /// Its suite.
    pub fn suite(&self) -> Suite {
        match self {
            ServerKey::Classical(_) => Suite::Classical,
            ServerKey::Hybrid(_) => Suite::Hybrid,
        }
    }

    /// The server's X25519 key.
    pub fn kex_public(&self) -> &KexPublic {
        match self {
            ServerKey::Classical(k) => &k.kex_public,
            ServerKey::Hybrid(k) => &k.cert.kex_public,
        }
    }

    /// The request profile a request to this key uses when the client
    /// takes profile 2 where announced: what the certificate announces, in
    /// either suite (spec/hybrid.md H3).
    pub fn profile(&self) -> Profile {
        match self {
            ServerKey::Classical(k) => k.profile,
            ServerKey::Hybrid(k) => k.cert.profile,
        }
    }
}

/// Encapsulation keys by `SHA3-256(ek_M)`. The hash a certificate signs is
/// what makes a key text trustworthy, so texts from any answer may be kept.
#[derive(Debug, Clone, Default)]
pub struct KemCache {
    keys: Vec<Arc<KemPublic>>,
}

impl KemCache {
    /// Remembers `kem` (the oldest is forgotten past [`KEM_CACHE_LIMIT`]).
    pub fn add(&mut self, kem: KemPublic) {
        self.keys.retain(|k| k.hash() != kem.hash());
        self.keys.push(Arc::new(kem));
        if self.keys.len() > KEM_CACHE_LIMIT {
            self.keys.remove(0);
        }
    }

    /// The key whose hash is `hash`, if known.
    pub fn get(&self, hash: &KemHash) -> Option<Arc<KemPublic>> {
        self.keys.iter().find(|k| k.hash() == *hash).cloned()
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// `{mount}/pq`: where `OPTIONS` answers with the suite-2 list
/// (spec/hybrid.md H4).
pub fn pq_path(mount: &Mount) -> String {
    format!("{}/pq", mount.as_str())
}

/// The `hybrid_certs` member of an `unknown-key` problem (spec/hybrid.md
/// H3): text lines, empty when absent or not a problem document.
pub fn parse_hybrid_certs(problem: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(problem) else {
        return Vec::new();
    };
    v.get("hybrid_certs")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads certificate and key text lines one at a time, as the `certs` of
/// an `unknown-key` problem are read: a line that does not parse is
/// skipped, not fatal.
pub fn parse_lines(lines: &[String]) -> CertList {
    let mut list = CertList::default();
    for l in lines {
        if l.starts_with(KEM_TEXT_PREFIX) {
            if let Ok(k) = KemPublic::from_text(l) {
                list.kems.push(k);
            }
        } else if let Ok(c) = AnyCert::from_text(l) {
            list.certs.push(c);
        }
    }
    list
}

/// What a client keeps about one server for suite 2.
#[derive(Debug, Default)]
pub struct PqState {
    keys: Vec<HybridKey>,
    fetched: u64,
    max_age: u64,
    kems: KemCache,
    /// Suite 2 is pinned through this second (spec/hybrid.md H5).
    pin_until: u64,
    /// The last discovery found no suite 2: `prefer` uses v1 keys until the
    /// next discovery.
    absent: bool,
}

impl PqState {
    /// Whether a request to this server must be suite 2 at `now`.
    pub fn pinned(&self, pq: Pq, now: u64) -> bool {
        match pq {
            Pq::Off => false,
            Pq::Prefer => now <= self.pin_until,
            Pq::Require => true,
        }
    }

    /// The last second of the pin (0: never pinned).
    pub fn pin_until(&self) -> u64 {
        self.pin_until
    }

    /// Whether the last discovery found no suite 2.
    pub fn absent(&self) -> bool {
        self.absent
    }

    /// The suite-2 keys held.
    pub fn keys(&self) -> &[HybridKey] {
        &self.keys
    }

    /// The encapsulation keys learnt.
    pub fn kems(&self) -> &KemCache {
        &self.kems
    }

    /// The suite-2 key to use at `now`, if the held keys are fresh and one
    /// is valid: highest serial, then the later `not_before`.
    pub fn fresh_key(&self, now: u64) -> Option<&HybridKey> {
        let fresh = self.max_age == 0 || now < self.fetched.saturating_add(self.max_age);
        if !fresh {
            return None;
        }
        self.keys
            .iter()
            .filter(|k| k.is_valid_at(now))
            .max_by_key(|k| (k.cert.serial, k.cert.not_before))
    }

    /// Takes suite-2 certificates and key texts learnt anywhere (an
    /// `OPTIONS {mount}/pq` answer, DNS, an `unknown-key` problem): keeps
    /// the key texts, then the certificates valid at `now`, verifying under
    /// `identity` in authenticated mode (none count under
    /// `require_identity` without one), whose key text is known. Usable
    /// keys replace the held ones (reusable for `max_age` seconds, 0: until
    /// none is valid) and pin the origin through their `not_after`.
    ///
    /// Returns the key to use, or `None`; `bad_signature` when valid
    /// certificates were offered and none verified.
    pub fn took_certs(
        &mut self,
        certs: impl IntoIterator<Item = HybridCert>,
        kems: impl IntoIterator<Item = KemPublic>,
        identity: Option<&IdentityPublic>,
        require_identity: bool,
        max_age: u64,
        now: u64,
    ) -> Result<Option<HybridKey>> {
        for k in kems {
            self.kems.add(k);
        }
        let mut keys = Vec::new();
        let mut unsigned = false;
        for c in certs.into_iter().filter(|c| c.is_valid_at(now)) {
            match identity {
                Some(id) if c.verify(id).is_err() => {
                    unsigned = true;
                    continue;
                }
                None if require_identity => continue,
                _ => {}
            }
            if let Some(kem) = self.kems.get(&c.kem_hash) {
                keys.push(HybridKey { cert: c, kem });
            }
        }
        if keys.is_empty() {
            return if unsigned {
                Err(Error::BadSignature)
            } else {
                Ok(None)
            };
        }
        let last = keys
            .iter()
            .map(|k| u64::from(k.cert.not_after))
            .max()
            .unwrap_or(0);
        self.pin_until = self.pin_until.max(last);
        self.keys = keys;
        self.fetched = now;
        self.max_age = max_age;
        self.absent = false;
        Ok(self.fresh_key(now).cloned())
    }

    /// Takes the answer to `OPTIONS {mount}/pq` (spec/hybrid.md H4): a 200
    /// with a list holding usable suite-2 certificates gives the key to
    /// use; anything else (a 404, another status, a list without suite 2,
    /// a body that is no list, as from a server that answers every path
    /// alike) means the server offers none, judged by
    /// [`PqState::took_none`]. Nothing an attacker gains: it could as well
    /// answer 404, and a pinned origin refuses either.
    #[allow(clippy::too_many_arguments)]
    pub fn took_answer(
        &mut self,
        pq: Pq,
        status: u16,
        body: &[u8],
        identity: Option<&IdentityPublic>,
        require_identity: bool,
        max_age: u64,
        now: u64,
    ) -> Result<Option<HybridKey>> {
        if let (200, Ok(list)) = (status, cert::parse_cert_list(body)) {
            let certs: Vec<HybridCert> = list.hybrid().cloned().collect();
            if let Some(k) =
                self.took_certs(certs, list.kems, identity, require_identity, max_age, now)?
            {
                return Ok(Some(k));
            }
        }
        self.took_none(pq, now).map(|()| None)
    }

    /// Discovery found no usable suite-2 key: `hybrid_downgrade` when the
    /// origin is pinned (or suite 2 required); otherwise v1 it is, until
    /// the next discovery.
    pub fn took_none(&mut self, pq: Pq, now: u64) -> Result<()> {
        if self.pinned(pq, now) {
            return Err(Error::HybridDowngrade);
        }
        self.absent = true;
        Ok(())
    }

    /// Whether v1 keys may be used at `now` (`hybrid_downgrade` when the
    /// origin is pinned to suite 2 or suite 2 is required).
    pub fn allows_classical(&self, pq: Pq, now: u64) -> Result<()> {
        if self.pinned(pq, now) {
            Err(Error::HybridDowngrade)
        } else {
            Ok(())
        }
    }

    /// Takes the suite-2 lines of an `unknown-key` problem (its
    /// `hybrid_certs`, each read on its own). Returns whether they settle
    /// the retry: usable keys were taken, or there are none while the
    /// origin is pinned (the keys are then dropped, so the next attempt
    /// discovers suite 2 again). `false`: take the problem's v1 `certs`.
    pub fn took_unknown_key(
        &mut self,
        pq: Pq,
        lines: &[String],
        identity: Option<&IdentityPublic>,
        require_identity: bool,
        now: u64,
    ) -> bool {
        let list = parse_lines(lines);
        let certs: Vec<HybridCert> = list.hybrid().cloned().collect();
        match self.took_certs(certs, list.kems, identity, require_identity, 0, now) {
            Ok(Some(_)) => true,
            _ if self.pinned(pq, now) => {
                self.keys.clear();
                true
            }
            _ => {
                self.keys.clear();
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hybrid::cert::format_cert_list;
    use crate::hybrid::KemSecret;
    use crate::keys::IdentityKey;

    const NOW: u64 = 1_700_000_000;

    fn hybrid(id: &IdentityKey, serial: u32, kem: &KemSecret, until: u64) -> HybridCert {
        HybridCert::sign(
            id,
            Profile::V1,
            serial,
            (NOW - 60) as u32,
            until as u32,
            KexPublic([serial as u8; 32]),
            kem.public().hash(),
        )
    }

    #[test]
    fn modes_parse() {
        for m in [Pq::Off, Pq::Prefer, Pq::Require] {
            assert_eq!(Pq::parse(m.as_str()), Some(m));
        }
        assert_eq!(Pq::parse("on"), None);
        assert_eq!(Pq::default(), Pq::Off);
        assert_eq!(pq_path(&Mount::new("/hc/").unwrap()), "/hc/pq");
        assert_eq!(pq_path(&Mount::default()), "/pq");
    }

    #[test]
    fn an_answer_with_suite_2_pins_the_origin() {
        let id = IdentityKey::from_seed([1; 32]);
        let kem = KemSecret::from_seed([2; 64]);
        let c = hybrid(&id, 3, &kem, NOW + 3600);
        let body = format_cert_list(std::slice::from_ref(&c), &[kem.public()]);
        let mut s = PqState::default();
        assert!(!s.pinned(Pq::Prefer, NOW));
        let k = s
            .took_answer(Pq::Prefer, 200, body.as_bytes(), None, false, 60, NOW)
            .unwrap()
            .unwrap();
        assert_eq!(k.cert, c);
        assert_eq!(s.pin_until(), NOW + 3600);
        assert!(s.pinned(Pq::Prefer, NOW + 3600));
        assert!(!s.pinned(Pq::Prefer, NOW + 3601));
        assert!(!s.pinned(Pq::Off, NOW));
        assert_eq!(s.fresh_key(NOW + 59).map(|k| k.cert.serial), Some(3));
        assert!(s.fresh_key(NOW + 60).is_none(), "max-age spent");
        // Pinned: a later discovery without suite 2 is a downgrade.
        assert_eq!(
            s.took_answer(Pq::Prefer, 404, b"", None, false, 60, NOW + 100),
            Err(Error::HybridDowngrade)
        );
        assert_eq!(
            s.allows_classical(Pq::Prefer, NOW + 100),
            Err(Error::HybridDowngrade)
        );
        // After the pin, prefer falls back.
        assert_eq!(
            s.took_answer(Pq::Prefer, 404, b"", None, false, 60, NOW + 4000),
            Ok(None)
        );
        assert!(s.absent());
        assert!(s.allows_classical(Pq::Prefer, NOW + 4000).is_ok());
    }

    #[test]
    fn not_found_is_a_fallback_for_prefer_and_a_downgrade_for_require() {
        let mut s = PqState::default();
        assert_eq!(
            s.took_answer(Pq::Prefer, 404, b"", None, false, 0, NOW),
            Ok(None)
        );
        assert!(s.absent());
        let mut s = PqState::default();
        assert_eq!(
            s.took_answer(Pq::Require, 404, b"", None, false, 0, NOW),
            Err(Error::HybridDowngrade)
        );
        assert_eq!(
            s.allows_classical(Pq::Require, NOW),
            Err(Error::HybridDowngrade)
        );
        // A list of v1 certificates only offers no suite 2 either.
        let id = IdentityKey::from_seed([1; 32]);
        let v1 = crate::cert::KeyCert::sign(&id, 1, 0, u32::MAX, KexPublic([9; 32]));
        let body = format!("{}\n", v1.to_text());
        assert_eq!(
            s.took_answer(Pq::Require, 200, body.as_bytes(), None, false, 0, NOW),
            Err(Error::HybridDowngrade)
        );
        // A 200 that is no list offers no suite 2 either.
        assert_eq!(
            s.took_answer(Pq::Prefer, 200, b"<html>", None, false, 0, NOW),
            Ok(None)
        );
    }

    #[test]
    fn certificates_need_their_key_text_and_the_identity() {
        let id = IdentityKey::from_seed([1; 32]);
        let other = IdentityKey::from_seed([3; 32]);
        let kem = KemSecret::from_seed([2; 64]);
        let c = hybrid(&id, 4, &kem, NOW + 3600);
        let mut s = PqState::default();
        // No key text known: nothing usable, no pin.
        assert_eq!(s.took_certs([c.clone()], [], None, false, 0, NOW), Ok(None));
        assert_eq!(s.pin_until(), 0);
        // The key text from elsewhere (DNS) completes it.
        assert!(s
            .took_certs([c.clone()], [kem.public().clone()], None, false, 0, NOW)
            .unwrap()
            .is_some());
        // Later certificates naming the cached hash need no text.
        let c2 = hybrid(&id, 5, &kem, NOW + 7200);
        assert_eq!(
            s.took_certs([c2.clone()], [], Some(&id.public()), false, 0, NOW)
                .unwrap()
                .map(|k| k.cert.serial),
            Some(5)
        );
        assert_eq!(s.pin_until(), NOW + 7200);
        assert_eq!(
            s.took_certs([c2.clone()], [], Some(&other.public()), false, 0, NOW),
            Err(Error::BadSignature)
        );
        assert_eq!(
            s.took_certs([c2.clone()], [], None, true, 0, NOW),
            Ok(None),
            "authenticated mode without an identity counts none"
        );
        // Expired certificates count for nothing.
        let old = hybrid(&id, 6, &kem, NOW - 1);
        assert_eq!(s.took_certs([old], [], None, false, 0, NOW), Ok(None));
        // A key text of another key does not pair.
        let wrong = KemSecret::from_seed([8; 64]);
        assert_eq!(
            HybridKey::new(c, Arc::new(wrong.public().clone())).err(),
            Some(Error::KemMismatch)
        );
    }

    #[test]
    fn unknown_key_takes_hybrid_certs() {
        let id = IdentityKey::from_seed([1; 32]);
        let kem = KemSecret::from_seed([2; 64]);
        let c = hybrid(&id, 7, &kem, NOW + 3600);
        let body = serde_json::json!({
            "type": "urn:httpcrypt:unknown-key", "title": "t", "status": 404,
            "certs": [], "hybrid_certs": [c.to_text(), "garbage", kem.public().to_text()],
        })
        .to_string();
        let lines = parse_hybrid_certs(body.as_bytes());
        assert_eq!(lines.len(), 3);
        assert!(parse_hybrid_certs(b"{}").is_empty());
        assert!(parse_hybrid_certs(b"no json").is_empty());
        let mut s = PqState::default();
        assert!(s.took_unknown_key(Pq::Prefer, &lines, None, false, NOW));
        assert_eq!(s.fresh_key(NOW).map(|k| k.cert.serial), Some(7));
        // Nothing usable while pinned: settled, keys dropped to rediscover.
        assert!(s.took_unknown_key(Pq::Prefer, &[], None, false, NOW));
        assert!(s.keys().is_empty());
        // Nothing usable and not pinned: the v1 certs are taken instead.
        let mut s = PqState::default();
        assert!(!s.took_unknown_key(Pq::Prefer, &[], None, false, NOW));
    }

    #[test]
    fn the_kem_cache_is_bounded_and_keyed_by_hash() {
        let mut cache = KemCache::default();
        let first = KemSecret::from_seed([0; 64]);
        cache.add(first.public().clone());
        cache.add(first.public().clone());
        assert_eq!(cache.len(), 1);
        for i in 1..=KEM_CACHE_LIMIT as u8 {
            cache.add(KemSecret::from_seed([i; 64]).public().clone());
        }
        assert_eq!(cache.len(), KEM_CACHE_LIMIT);
        assert!(
            cache.get(&first.public().hash()).is_none(),
            "oldest forgotten"
        );
    }
}
