//! The server's session cache (spec §7.1): `(kid, client_public) → k`, so a
//! client that reuses its key pair costs one AEAD instead of one X25519.
//!
//! Bounded with two generations: lookups hit the young generation or
//! promote from the old one; when the young generation is full it becomes
//! the old one and the previous old one is emptied whole (its memory is
//! kept for the next young generation). That approximates LRU with O(1)
//! operations and a hard bound of `capacity` entries. Keys are hashed with
//! SipHash-1-3 under a caller-supplied seed, so clients cannot aim for
//! collisions. Entries die with their kid ([`SessionCache::purge`]).
//!
//! A generation keeps its entries in the order they came, and finds them
//! through a small index of 8-byte slots (a 32-bit fingerprint of the hash
//! and the entry's position, open addressing). A cache that turns over (a
//! fresh client key per request, most of them never seen again) thus
//! writes each new entry next to the one before and probes only the index,
//! a sixth of the entries' size: a table of whole entries placed by their
//! hash took a cache and a TLB miss, megabytes apart, for every new
//! session.
//!
//! Each entry also remembers under which ticket key the last ticket for its
//! session went out ([`SessionCache::note_ticket`]), so the server need not
//! seal the same session into a new ticket on every connection of a client
//! that reuses its key (spec §7.2, D29).

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

/// One session in a generation, with its key's hash (never [`DEAD`] for
/// a live entry): the index is built again from the entries without
/// hashing them again.
struct Entry {
    hash: u64,
    kid: KeyId,
    client: [u8; 32],
    hit: Hit,
}

/// The hash of an entry that has left its generation (promoted to the
/// young one); its key is zeroized.
const DEAD: u64 = 0;

impl Entry {
    /// What stays in the place of an entry that has left (its key is
    /// zeroized as the entry is replaced).
    fn dead() -> Self {
        Entry {
            hash: DEAD,
            kid: KeyId([0; 10]),
            client: [0; 32],
            hit: Hit {
                key: SessionKey::from_bytes([0; 32]),
                ticket: None,
            },
        }
    }

    fn is(&self, hash: u64, kid: &KeyId, client: &[u8; 32]) -> bool {
        self.hash == hash && self.kid == *kid && self.client == *client
    }
}

/// One generation: its entries in the order they came, and the index that
/// finds them.
#[derive(Default)]
struct Generation {
    entries: Vec<Entry>,
    /// Open addressing, linear probing; a slot is `fingerprint << 32 |
    /// (position + 1)`, 0 when empty. At most half full.
    index: Vec<u64>,
    /// Entries that have not left (promotion leaves dead ones behind in the
    /// old generation).
    live: usize,
}

impl Generation {
    fn slot(hash: u64, pos: usize) -> u64 {
        (hash & 0xffff_ffff_0000_0000) | (pos as u64 + 1)
    }

    /// The position of the live entry `(kid, client)` of `hash`.
    fn find(&self, hash: u64, kid: &KeyId, client: &[u8; 32]) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let s = self.index[i];
            if s == 0 {
                return None;
            }
            if (s ^ hash) >> 32 == 0 {
                let pos = (s & 0xffff_ffff) as usize - 1;
                if self.entries[pos].is(hash, kid, client) {
                    return Some(pos);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts `pos`, the position of an entry of `hash`, in the index.
    fn index_at(&mut self, hash: u64, pos: usize) {
        let mask = self.index.len() - 1;
        let mut i = hash as usize & mask;
        while self.index[i] != 0 {
            i = (i + 1) & mask;
        }
        self.index[i] = Self::slot(hash, pos);
    }

    /// The index again, at least twice as large as the entries need.
    fn reindex(&mut self, slots: usize) {
        self.index.clear();
        self.index.resize(slots, 0);
        for pos in 0..self.entries.len() {
            let hash = self.entries[pos].hash;
            if hash != DEAD {
                self.index_at(hash, pos);
            }
        }
    }

    /// Appends `e`, which the generation does not hold.
    fn push(&mut self, e: Entry) {
        let n = self.entries.len() + 1;
        if n * 2 > self.index.len() {
            self.reindex((n * 2).next_power_of_two().max(16));
        }
        self.index_at(e.hash, self.entries.len());
        self.entries.push(e);
        self.live += 1;
    }

    /// Takes the entry at `pos` out, leaving a dead one in its place.
    fn take(&mut self, pos: usize) -> Entry {
        self.live -= 1;
        core::mem::replace(&mut self.entries[pos], Entry::dead())
    }

    /// Drops (zeroizes) every entry, keeping the memory.
    fn clear(&mut self) {
        self.entries.clear();
        self.index.fill(0);
        self.live = 0;
    }

    /// Drops (zeroizes) the entries whose kid `keep` rejects, and the dead
    /// ones, and builds the index again.
    fn retain(&mut self, keep: impl Fn(&KeyId) -> bool) {
        self.entries.retain(|e| e.hash != DEAD && keep(&e.kid));
        self.live = self.entries.len();
        let slots = self.index.len();
        self.reindex(slots);
    }
}

/// A bounded cache of session keys.
pub struct SessionCache {
    young: Generation,
    old: Generation,
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
    /// A cache of at most `capacity` entries (at most 2^32); `seed` keys
    /// the hash (draw it from a CSPRNG).
    pub fn new(capacity: usize, seed: [u8; 16]) -> Self {
        SessionCache {
            young: Generation::default(),
            old: Generation::default(),
            half: (capacity / 2).clamp(1, u32::MAX as usize / 2),
            key: SipKey::from_seed(seed),
            hits: 0,
            misses: 0,
        }
    }

    /// SipHash-1-3 of `kid || client`, never [`DEAD`].
    fn hash(&self, kid: &KeyId, client: &KexPublic) -> u64 {
        self.key.hash(&[&kid.0, &client.0]).max(1)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.young.live + self.old.live
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
        if let Some(pos) = self.young.find(hash, kid, &client.0) {
            self.hits += 1;
            return Some(self.young.entries[pos].hit.clone());
        }
        match self.old.find(hash, kid, &client.0) {
            Some(pos) => {
                let e = self.old.take(pos);
                self.hits += 1;
                let hit = e.hit.clone();
                self.insert_young(e);
                Some(hit)
            }
            None => {
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
        let found = match self.young.find(hash, kid, &client.0) {
            Some(pos) => Some(&mut self.young.entries[pos]),
            None => self
                .old
                .find(hash, kid, &client.0)
                .map(|pos| &mut self.old.entries[pos]),
        };
        if let Some(e) = found {
            e.hit.ticket = Some(tid);
        }
    }

    /// Puts `e` in the young generation, replacing an entry of the same
    /// session there; a full young generation first becomes the old one.
    fn insert_young(&mut self, e: Entry) {
        if let Some(pos) = self.young.find(e.hash, &e.kid, &e.client) {
            self.young.entries[pos].hit = e.hit;
            return;
        }
        if self.young.live >= self.half {
            // The old generation's entries go (their keys are zeroized as
            // they drop), and its memory, emptied, takes the new ones: a
            // cache that turns over (a fresh client key per request) keeps
            // its two generations' memory instead of freeing one and
            // growing another from nothing, page by page, every `half`
            // sessions.
            self.old.clear();
            core::mem::swap(&mut self.young, &mut self.old);
        }
        self.young.push(e);
    }

    /// Drops (zeroizes) every entry whose kid `keep` rejects.
    pub fn purge(&mut self, keep: impl Fn(&KeyId) -> bool) {
        self.young.retain(&keep);
        self.old.retain(&keep);
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
