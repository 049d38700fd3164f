//! The server's session cache (spec §7.1): `(kid, client_public) → k`, so a
//! client that reuses its key pair costs one AEAD instead of one X25519.
//!
//! Bounded with two generations: lookups hit the young map or promote from
//! the old one; when the young map is full it becomes the old one and the
//! previous old one is emptied whole (its table is kept for the next young
//! generation). That approximates LRU with O(1) operations and a hard bound
//! of `capacity` entries. Keys are hashed with SipHash-1-3 under a
//! caller-supplied seed, so clients cannot aim for collisions. Entries die with their kid ([`SessionCache::purge`]).
//!
//! Each entry also remembers under which ticket key the last ticket for its
//! session went out ([`SessionCache::note_ticket`]), so the server need not
//! seal the same session into a new ticket on every connection of a client
//! that reuses its key (spec §7.2, D29).

use hashbrown::HashTable;

use crate::keys::{KexPublic, KeyId, SessionKey};
use crate::suite::SipKey;

/// A cached session, as a lookup returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The session key.
    pub key: SessionKey,
    /// The ticket-key ID of the last ticket issued for this session
    /// ([`SessionCache::note_ticket`]).
    pub ticket: Option<KeyId>,
}

/// One session in a generation, with its key's hash: a lookup hashes
/// `(kid, client)` once for both generations, and a table that grows or a
/// promotion moves entries without hashing them again.
struct Entry {
    hash: u64,
    kid: KeyId,
    client: [u8; 32],
    hit: Hit,
}

/// The test a probe applies to the entries whose hash it meets.
fn is<'a>(hash: u64, kid: &'a KeyId, client: &'a [u8; 32]) -> impl Fn(&Entry) -> bool + 'a {
    move |e| e.hash == hash && e.kid == *kid && e.client == *client
}

/// A bounded cache of session keys.
pub struct SessionCache {
    young: HashTable<Entry>,
    old: HashTable<Entry>,
    half: usize,
    key: SipKey,
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
        SessionCache {
            young: HashTable::new(),
            old: HashTable::new(),
            half: (capacity / 2).max(1),
            key: SipKey::from_seed(seed),
            hits: 0,
            misses: 0,
        }
    }

    /// SipHash-1-3 of `kid || client`.
    fn hash(&self, kid: &KeyId, client: &KexPublic) -> u64 {
        self.key.hash(&[&kid.0, &client.0])
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
        let hash = self.hash(kid, client);
        if let Some(e) = self.young.find(hash, is(hash, kid, &client.0)) {
            self.hits += 1;
            return Some(e.hit.clone());
        }
        match self.old.find_entry(hash, is(hash, kid, &client.0)) {
            Ok(found) => {
                let (e, _) = found.remove();
                self.hits += 1;
                let hit = e.hit.clone();
                self.insert_young(e);
                Some(hit)
            }
            Err(_) => {
                self.misses += 1;
                None
            }
        }
    }

    /// Caches `k` for `(kid, client)` (with no ticket noted).
    pub fn insert(&mut self, kid: &KeyId, client: &KexPublic, k: SessionKey) {
        let hash = self.hash(kid, client);
        self.insert_young(Entry {
            hash,
            kid: *kid,
            client: client.0,
            hit: Hit {
                key: k,
                ticket: None,
            },
        });
    }

    /// Notes that a ticket sealed under ticket key `tid` went out for the
    /// session `(kid, client)`; nothing happens if it is not cached.
    pub fn note_ticket(&mut self, kid: &KeyId, client: &KexPublic, tid: KeyId) {
        let hash = self.hash(kid, client);
        let found = match self.young.find_mut(hash, is(hash, kid, &client.0)) {
            Some(e) => Some(e),
            None => self.old.find_mut(hash, is(hash, kid, &client.0)),
        };
        if let Some(e) = found {
            e.hit.ticket = Some(tid);
        }
    }

    /// Puts `e` in the young generation, replacing an entry of the same
    /// session there; a full young generation first becomes the old one.
    fn insert_young(&mut self, e: Entry) {
        if let Some(held) = self.young.find_mut(e.hash, is(e.hash, &e.kid, &e.client)) {
            held.hit = e.hit;
            return;
        }
        if self.young.len() >= self.half {
            // The old generation's entries go (their keys are zeroized as
            // they drop), and its table, emptied, takes the new ones: a
            // cache that turns over (a fresh client key per request) keeps
            // its two tables instead of freeing one and growing another
            // from nothing, page by page, every `half` sessions.
            self.old.clear();
            std::mem::swap(&mut self.young, &mut self.old);
        }
        self.young.insert_unique(e.hash, e, |e| e.hash);
    }

    /// Drops (zeroizes) every entry whose kid `keep` rejects.
    pub fn purge(&mut self, keep: impl Fn(&KeyId) -> bool) {
        self.young.retain(|e| keep(&e.kid));
        self.old.retain(|e| keep(&e.kid));
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

    /// The entry size spec §14.6 states (the session cache's memory bound).
    #[test]
    fn an_entry_is_96_bytes() {
        assert_eq!(core::mem::size_of::<Entry>(), 96);
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

    /// The two generations as plain maps: what the cache must answer after
    /// any sequence of operations.
    #[derive(Default)]
    struct Model {
        young: std::collections::HashMap<(u8, u8), (u8, Option<u8>)>,
        old: std::collections::HashMap<(u8, u8), (u8, Option<u8>)>,
    }

    impl Model {
        fn put(&mut self, half: usize, k: (u8, u8), v: (u8, Option<u8>)) {
            if self.young.len() >= half && !self.young.contains_key(&k) {
                self.old = std::mem::take(&mut self.young);
            }
            self.young.insert(k, v);
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u8, u8),
        Lookup(u8, u8),
        Note(u8, u8, u8),
        Purge(u8),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..3u8, 0..12u8, any::<u8>()).prop_map(|(a, b, v)| Op::Insert(a, b, v)),
            (0..3u8, 0..12u8).prop_map(|(a, b)| Op::Lookup(a, b)),
            (0..3u8, 0..12u8, any::<u8>()).prop_map(|(a, b, t)| Op::Note(a, b, t)),
            (0..3u8).prop_map(Op::Purge),
        ]
    }

    proptest::proptest! {
        /// Any sequence of operations on a small cache answers as the two
        /// generations would: same hits, same keys, same ticket notes, same
        /// size, never above the capacity.
        #[test]
        fn behaves_as_two_generations(
            capacity in 1usize..10,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let mut c = SessionCache::new(capacity, [7; 16]);
            let mut m = Model::default();
            let half = (capacity / 2).max(1);
            let kid = |a: u8| KeyId([a; 10]);
            let client = |b: u8| KexPublic([b; 32]);
            for op in ops {
                match op {
                    Op::Insert(a, b, v) => {
                        c.insert(&kid(a), &client(b), SessionKey::from_bytes([v; 32]));
                        m.put(half, (a, b), (v, None));
                    }
                    Op::Lookup(a, b) => {
                        let got = c.lookup(&kid(a), &client(b));
                        let want = match m.young.get(&(a, b)) {
                            Some(v) => Some(*v),
                            None => m.old.remove(&(a, b)).inspect(|v| m.put(half, (a, b), *v)),
                        };
                        let want = want.map(|(v, t)| Hit {
                            key: SessionKey::from_bytes([v; 32]),
                            ticket: t.map(kid),
                        });
                        proptest::prop_assert_eq!(got, want);
                    }
                    Op::Note(a, b, t) => {
                        c.note_ticket(&kid(a), &client(b), kid(t));
                        if let Some(e) = m.young.get_mut(&(a, b)).or(m.old.get_mut(&(a, b))) {
                            e.1 = Some(t);
                        }
                    }
                    Op::Purge(a) => {
                        c.purge(|k| *k != kid(a));
                        m.young.retain(|k, _| k.0 != a);
                        m.old.retain(|k, _| k.0 != a);
                    }
                }
                proptest::prop_assert_eq!(c.len(), m.young.len() + m.old.len());
                proptest::prop_assert!(c.len() <= 2 * half);
            }
        }
    }
}
