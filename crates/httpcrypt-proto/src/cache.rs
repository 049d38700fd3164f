//! The server's session cache (spec §7.1): `(kid, client_public) → k`, so a
//! client that reuses its key pair costs one AEAD instead of one X25519.
//!
//! Bounded with two generations: lookups hit the young map or promote from
//! the old one; when the young map is full it becomes the old one and the
//! previous old one is dropped whole. That approximates LRU with O(1)
//! operations and a hard bound of `capacity` entries. Keys are hashed with
//! SipHash-1-3 under a caller-supplied seed, so clients cannot aim for
//! collisions. Entries die with their kid ([`SessionCache::purge`]).
//!
//! Each entry also remembers under which ticket key the last ticket for its
//! session went out ([`SessionCache::note_ticket`]), so the server need not
//! seal the same session into a new ticket on every connection of a client
//! that reuses its key (spec §7.2, D29).

use std::collections::HashMap;
use std::hash::BuildHasher;

use siphasher::sip::SipHasher13;

use crate::keys::{KexPublic, KeyId, SessionKey};

/// SipHash-1-3 with a fixed secret key.
#[derive(Clone, Copy)]
struct Keyed(u64, u64);

impl BuildHasher for Keyed {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.0, self.1)
    }
}

/// A cached session, as a lookup returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The session key.
    pub key: SessionKey,
    /// The ticket-key ID of the last ticket issued for this session
    /// ([`SessionCache::note_ticket`]).
    pub ticket: Option<KeyId>,
}

type Map = HashMap<(KeyId, [u8; 32]), Hit, Keyed>;

/// A bounded cache of session keys.
pub struct SessionCache {
    young: Map,
    old: Map,
    half: usize,
    hasher: Keyed,
    hits: u64,
    misses: u64,
}

impl core::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SessionCache")
            .field("len", &self.len())
            .field("capacity", &(self.half * 2))
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish()
    }
}

impl SessionCache {
    /// A cache of at most `capacity` entries; `seed` keys the hash (draw it
    /// from a CSPRNG).
    pub fn new(capacity: usize, seed: [u8; 16]) -> Self {
        let k0 = u64::from_le_bytes(seed[..8].try_into().expect("16-byte seed"));
        let k1 = u64::from_le_bytes(seed[8..].try_into().expect("16-byte seed"));
        let hasher = Keyed(k0, k1);
        SessionCache {
            young: HashMap::with_hasher(hasher),
            old: HashMap::with_hasher(hasher),
            half: (capacity / 2).max(1),
            hasher,
            hits: 0,
            misses: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// The cached key for `(kid, client)`, refreshing its recency.
    pub fn get(&mut self, kid: &KeyId, client: &KexPublic) -> Option<SessionKey> {
        self.lookup(kid, client).map(|h| h.key)
    }

    /// The cached session for `(kid, client)` with its ticket note,
    /// refreshing its recency.
    pub fn lookup(&mut self, kid: &KeyId, client: &KexPublic) -> Option<Hit> {
        let key = (*kid, client.0);
        if let Some(e) = self.young.get(&key) {
            self.hits += 1;
            return Some(e.clone());
        }
        match self.old.remove(&key) {
            Some(e) => {
                self.hits += 1;
                self.insert_young(key, e.clone());
                Some(e)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Caches `k` for `(kid, client)` (with no ticket noted).
    pub fn insert(&mut self, kid: &KeyId, client: &KexPublic, k: SessionKey) {
        self.insert_young(
            (*kid, client.0),
            Hit {
                key: k,
                ticket: None,
            },
        );
    }

    /// Notes that a ticket sealed under ticket key `tid` went out for the
    /// session `(kid, client)`; nothing happens if it is not cached.
    pub fn note_ticket(&mut self, kid: &KeyId, client: &KexPublic, tid: KeyId) {
        let key = (*kid, client.0);
        if let Some(e) = self.young.get_mut(&key).or(self.old.get_mut(&key)) {
            e.ticket = Some(tid);
        }
    }

    fn insert_young(&mut self, key: (KeyId, [u8; 32]), e: Hit) {
        if self.young.len() >= self.half && !self.young.contains_key(&key) {
            // Dropping the old generation zeroizes its keys.
            self.old = std::mem::replace(&mut self.young, HashMap::with_hasher(self.hasher));
        }
        self.young.insert(key, e);
    }

    /// Drops (zeroizes) every entry whose kid `keep` rejects.
    pub fn purge(&mut self, keep: impl Fn(&KeyId) -> bool) {
        self.young.retain(|(kid, _), _| keep(kid));
        self.old.retain(|(kid, _), _| keep(kid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_recency_aware() {
        let mut c = SessionCache::new(4, [1; 16]);
        let kid = KeyId([1; 10]);
        for i in 0..10u8 {
            c.insert(&kid, &KexPublic([i; 32]), SessionKey::from_bytes([i; 32]));
            assert!(c.len() <= 4);
        }
        // The newest entries survive.
        assert_eq!(
            c.get(&kid, &KexPublic([9; 32])),
            Some(SessionKey::from_bytes([9; 32]))
        );
        assert_eq!(c.get(&kid, &KexPublic([0; 32])), None);
        // A hit in the old generation is promoted and outlives a rollover.
        let mut c = SessionCache::new(4, [1; 16]);
        c.insert(&kid, &KexPublic([1; 32]), SessionKey::from_bytes([1; 32]));
        c.insert(&kid, &KexPublic([2; 32]), SessionKey::from_bytes([2; 32]));
        c.insert(&kid, &KexPublic([3; 32]), SessionKey::from_bytes([3; 32])); // rollover: 1, 2 old
        assert!(c.get(&kid, &KexPublic([1; 32])).is_some()); // promoted
        c.insert(&kid, &KexPublic([4; 32]), SessionKey::from_bytes([4; 32])); // rollover
        assert!(c.get(&kid, &KexPublic([1; 32])).is_some());
        assert!(c.get(&kid, &KexPublic([2; 32])).is_none());
        assert_eq!(c.stats().1, 1);
    }

    #[test]
    fn purge_by_kid() {
        let mut c = SessionCache::new(100, [1; 16]);
        c.insert(
            &KeyId([1; 10]),
            &KexPublic([1; 32]),
            SessionKey::from_bytes([1; 32]),
        );
        c.insert(
            &KeyId([2; 10]),
            &KexPublic([1; 32]),
            SessionKey::from_bytes([2; 32]),
        );
        c.purge(|kid| *kid != KeyId([1; 10]));
        assert_eq!(c.len(), 1);
        assert!(c.get(&KeyId([1; 10]), &KexPublic([1; 32])).is_none());
    }

    #[test]
    fn ticket_notes_follow_the_entry() {
        let mut c = SessionCache::new(4, [1; 16]);
        let kid = KeyId([1; 10]);
        let (a, b) = (KexPublic([1; 32]), KexPublic([2; 32]));
        // Not cached: nothing to note.
        c.note_ticket(&kid, &a, KeyId([7; 10]));
        assert_eq!(c.lookup(&kid, &a), None);
        c.insert(&kid, &a, SessionKey::from_bytes([1; 32]));
        assert_eq!(c.lookup(&kid, &a).unwrap().ticket, None);
        c.note_ticket(&kid, &a, KeyId([7; 10]));
        assert_eq!(c.lookup(&kid, &a).unwrap().ticket, Some(KeyId([7; 10])));
        // Only that session's entry carries the note.
        c.insert(&kid, &b, SessionKey::from_bytes([2; 32]));
        assert_eq!(c.lookup(&kid, &b).unwrap().ticket, None);
        // The note survives the move to the old generation and back.
        c.insert(&kid, &KexPublic([3; 32]), SessionKey::from_bytes([3; 32])); // rollover
        let hit = c.lookup(&kid, &a).unwrap();
        assert_eq!(hit.key, SessionKey::from_bytes([1; 32]));
        assert_eq!(hit.ticket, Some(KeyId([7; 10])));
        // A later ticket under another ticket key replaces the note.
        c.note_ticket(&kid, &a, KeyId([8; 10]));
        assert_eq!(c.lookup(&kid, &a).unwrap().ticket, Some(KeyId([8; 10])));
        // Caching the session again starts it without a note.
        c.insert(&kid, &a, SessionKey::from_bytes([1; 32]));
        assert_eq!(c.lookup(&kid, &a).unwrap().ticket, None);
    }
}
