//! Replay defence (spec §8): the freshness check on the inner `Date` and a
//! strike register of `(kid, n0)` whose memory is bounded by rate × window.
//!
//! The register keeps a 64-bit keyed fingerprint per request, with the
//! index of the time bucket it may be forgotten in (`date + W`: after that
//! a replay fails the freshness check anyway). The fingerprints are spread
//! over [`SHARDS`] maps by their top byte, each an array of one 64-bit word
//! per entry (`table`), so one check reads one run of neighbouring words.
//! Per bucket only a count is kept: a bucket whose time has passed leaves
//! the count of live entries at once, and its entries are judged by their
//! bucket index from then on; they are swept out of the maps one map per
//! check, in a sequential pass, instead of one random removal each. No
//! check sweeps more than one map, so no request waits while a whole bucket
//! (hundreds of thousands of entries at high rates) is dropped; only after
//! a quiet spell long enough for 64 buckets to expire between two sweeps
//! (few entries left) does one check sweep them all.

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::keys::KeyId;
use crate::suite::{SipKey, NONCE_LEN};

mod table;

/// Default freshness window W in seconds.
pub const DEFAULT_WINDOW: u64 = 60;

/// Checks an inner `Date` value against `now` (unix seconds): a missing
/// field is `stale`, an unparseable one `bad_date`, and `|Date − now| ≤ W`
/// passes (spec §11). Returns the date in unix seconds.
pub fn check_date(value: Option<&[u8]>, now: u64, window: u64) -> Result<u64> {
    let value = value.ok_or(Error::Stale)?;
    check_window(parse_date_cached(value)?, now, window)
}

/// The freshness rule of both request profiles: a request time `t` passes
/// when `|t − now| ≤ window`, else `stale`. Returns `t`.
pub fn check_window(t: u64, now: u64, window: u64) -> Result<u64> {
    if t.abs_diff(now) > window {
        return Err(Error::Stale);
    }
    Ok(t)
}

fn parse_date(value: &[u8]) -> Result<u64> {
    let text = std::str::from_utf8(value).map_err(|_| Error::BadDate)?;
    let t = httpdate::parse_http_date(text.trim()).map_err(|_| Error::BadDate)?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| Error::BadDate)?
        .as_secs())
}

/// Longest date text the per-thread cache keeps (an IMF-fixdate is 29).
const CACHED_DATE_MAX: usize = 32;

/// [`parse_date`] remembering the last date text parsed on this thread:
/// requests of the same second carry the same text.
fn parse_date_cached(value: &[u8]) -> Result<u64> {
    type Last = ([u8; CACHED_DATE_MAX], usize, u64);
    thread_local! {
        static LAST: std::cell::Cell<Option<Last>> = const { std::cell::Cell::new(None) };
    }
    if value.len() > CACHED_DATE_MAX {
        return parse_date(value);
    }
    if let Some((text, len, date)) = LAST.get() {
        if text[..len] == *value {
            return Ok(date);
        }
    }
    let date = parse_date(value)?;
    let mut text = [0u8; CACHED_DATE_MAX];
    text[..value.len()].copy_from_slice(value);
    LAST.set(Some((text, value.len(), date)));
    Ok(date)
}

/// Formats unix seconds as an IMF-fixdate.
pub fn format_date(unix: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix))
}

/// Calls `f` with the IMF-fixdate of `unix`, formatted once per second and
/// thread (an answer's `Date` is the same for every answer of that second).
pub fn with_date<R>(unix: u64, f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((0, String::new())) };
    }
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != unix || d.1.is_empty() {
            *d = (unix, format_date(unix));
        }
        f(&d.1)
    })
}

/// Bits of a fingerprint (its top ones) that pick its map.
const SHARD_BITS: u32 = 8;

/// Number of fingerprint maps.
pub const SHARDS: usize = 1 << SHARD_BITS;

/// The map of fingerprint `fp`.
fn shard_of(fp: u64) -> usize {
    (fp >> (u64::BITS - SHARD_BITS)) as usize
}

/// A bounded set of `(kid, n0)` seen within the window: a fingerprint map
/// answers "seen?" with a single probe, and the buckets, ordered by when
/// their entries may be forgotten, say how many entries are live and which
/// bucket indices are.
pub struct StrikeRegister {
    window: u64,
    granularity: u64,
    capacity: usize,
    key: SipKey,
    shards: Vec<table::Map>,
    /// The next map to sweep since buckets last expired; [`SHARDS`] when
    /// all are swept.
    next_sweep: usize,
    /// `(until, entries)` per live bucket, ordered by `until`.
    buckets: VecDeque<(u64, usize)>,
}

impl core::fmt::Debug for StrikeRegister {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StrikeRegister")
            .field("window", &self.window)
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl StrikeRegister {
    /// A register for window `window` seconds holding at most `capacity`
    /// entries. `seed` keys the fingerprints (draw it from a CSPRNG).
    pub fn new(window: u64, capacity: usize, seed: [u8; 16]) -> Self {
        StrikeRegister {
            window,
            granularity: (window / 8).max(1),
            capacity,
            key: SipKey::from_seed(seed),
            shards: (0..SHARDS).map(|_| table::Map::default()).collect(),
            next_sweep: SHARDS,
            buckets: VecDeque::new(),
        }
    }

    /// Entries currently held (live: their bucket's time has not passed).
    pub fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.1).sum()
    }

    /// Whether the register is empty.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Entries still in the maps, live or waiting to be swept.
    #[cfg(test)]
    fn stored(&self) -> usize {
        self.shards.iter().map(table::Map::used).sum()
    }

    fn index(&self, until: u64) -> u32 {
        // Wrapping on purpose: indices are compared modulo 2^32.
        (until / self.granularity) as u32
    }

    /// Index of the oldest live bucket (entries below it are stale).
    fn cut(&self) -> u32 {
        self.buckets.front().map_or(0, |b| self.index(b.0))
    }

    /// Forgets the entries that can no longer be replayed at `now`: their
    /// buckets leave the live count at once, and their fingerprints are
    /// swept from the maps over the next [`SHARDS`] checks.
    pub fn expire(&mut self, now: u64) {
        let before = self.buckets.len();
        while self.buckets.front().is_some_and(|b| b.0 < now) {
            self.buckets.pop_front();
        }
        if self.buckets.len() == before {
            return;
        }
        if self.buckets.is_empty() {
            // Nothing is live: empty every map now and give its memory back.
            for s in &mut self.shards {
                s.clear();
            }
            self.next_sweep = SHARDS;
            return;
        }
        self.next_sweep = 0;
        // A quiet server's sweeps may not have reached every map for a
        // long time: those are swept now (`table`, on the bucket byte).
        let cut = self.cut();
        for s in &mut self.shards {
            if s.lags(cut) {
                s.sweep(cut);
            }
        }
    }

    /// Sweeps the next map, if any is left since buckets last expired.
    fn sweep_one(&mut self) {
        if self.next_sweep < SHARDS {
            let cut = self.cut();
            self.shards[self.next_sweep].sweep(cut);
            self.next_sweep += 1;
        }
    }

    fn fingerprint(&self, kid: &KeyId, n0: &[u8; NONCE_LEN]) -> u64 {
        self.key.hash(&[&kid.0, n0])
    }

    /// Records `(kid, n0)` for a request whose `Date` passed the freshness
    /// check; `replay` if it was seen, `overloaded` if the register is full.
    /// A `date` beyond `now + W` (which that check refuses) is kept as if it
    /// were `now + W`.
    pub fn check(&mut self, kid: &KeyId, n0: &[u8; NONCE_LEN], date: u64, now: u64) -> Result<()> {
        self.expire(now);
        self.sweep_one();
        let fp = self.fingerprint(kid, n0);
        let forget_after = date
            .min(now.saturating_add(self.window))
            .saturating_add(self.window);
        // Saturating: a date near the end of time must not wrap to an early expiry.
        let until = (forget_after / self.granularity)
            .saturating_add(1)
            .saturating_mul(self.granularity);
        let tag = self.index(until);
        // An empty register's maps are empty too: its cut becomes this
        // entry's bucket.
        let cut = if self.buckets.is_empty() {
            tag
        } else {
            self.cut()
        };
        let w = table::word(fp, tag as u8);
        let shard = shard_of(fp);
        let table::Probe::Vacant(slot, empty) = self.shards[shard].probe(w, cut) else {
            return Err(Error::Replay);
        };
        if self.len() >= self.capacity {
            return Err(Error::Overloaded);
        }
        // Most requests carry a current date: look for their bucket from the back.
        let at = self
            .buckets
            .iter()
            .rposition(|b| b.0 <= until)
            .map_or(0, |i| i + 1);
        if at > 0 && self.buckets[at - 1].0 == until {
            self.buckets[at - 1].1 += 1;
        } else {
            // At the front when the clock went back: an older bucket than
            // any live one, which lowers the cut.
            self.buckets.insert(at, (until, 1));
        }
        // A stale entry of the same fingerprint, not yet swept, is replaced.
        self.shards[shard].fill(slot, empty, w);
        Ok(())
    }

    /// Where a check of `(kid, n0)` will start reading, if the map it
    /// falls in holds anything: a caller that has other work to do first
    /// (opening the request) may prefetch it, so that the check does not
    /// wait for memory. Only an address; nothing is read or changed.
    pub fn check_start(&self, kid: &KeyId, n0: &[u8; NONCE_LEN]) -> Option<*const u64> {
        let fp = self.fingerprint(kid, n0);
        self.shards[shard_of(fp)].start(fp)
    }

    /// Approximate heap bytes held (for benchmarks and limits).
    pub fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(table::Map::memory_bytes)
            .sum::<usize>()
            + self.shards.capacity() * core::mem::size_of::<table::Map>()
            + self.buckets.capacity() * core::mem::size_of::<(u64, usize)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nonce whose first bytes are `i` (little-endian), the rest zero.
    fn n0_of(i: u64) -> [u8; 24] {
        let mut n0 = [0u8; 24];
        n0[..8].copy_from_slice(&i.to_le_bytes());
        n0
    }

    #[test]
    fn dates() {
        let now = 1_700_000_000;
        let d = format_date(now);
        assert_eq!(check_date(Some(d.as_bytes()), now + 60, 60), Ok(now));
        assert_eq!(check_date(Some(d.as_bytes()), now - 60, 60), Ok(now));
        assert_eq!(
            check_date(Some(d.as_bytes()), now + 61, 60),
            Err(Error::Stale)
        );
        assert_eq!(check_date(None, now, 60), Err(Error::Stale));
        assert_eq!(check_date(Some(b"yesterday"), now, 60), Err(Error::BadDate));
        // The per-thread cache answers the same text the same way, and never
        // a neighbour's: other texts, a prefix, a longer text.
        for _ in 0..2 {
            assert_eq!(check_date(Some(d.as_bytes()), now, 60), Ok(now));
            let next = format_date(now + 1);
            assert_eq!(check_date(Some(next.as_bytes()), now, 60), Ok(now + 1));
            assert_eq!(
                check_date(Some(&d.as_bytes()[..28]), now, 60),
                Err(Error::BadDate)
            );
            assert_eq!(check_date(Some(b"yesterday"), now, 60), Err(Error::BadDate));
            let long = format!("{d}   x");
            assert_eq!(
                check_date(Some(long.as_bytes()), now, 60),
                Err(Error::BadDate)
            );
        }
    }

    #[test]
    fn strikes_expire_with_the_window() {
        let mut r = StrikeRegister::new(60, 3, [7; 16]);
        let kid = KeyId([1; 10]);
        r.check(&kid, &[1; 24], 1000, 1000).unwrap();
        assert_eq!(r.check(&kid, &[1; 24], 1000, 1050), Err(Error::Replay));
        r.check(&KeyId([2; 10]), &[1; 24], 1000, 1000).unwrap();
        r.check(&kid, &[2; 24], 1000, 1000).unwrap();
        assert_eq!(r.check(&kid, &[3; 24], 1000, 1000), Err(Error::Overloaded));
        // After date + W (+ bucket rounding) the entries are gone; a replay
        // then fails the freshness check instead.
        r.expire(1000 + 60 + 8);
        assert_eq!(r.len(), 0);
        r.check(&kid, &[1; 24], 1070, 1070).unwrap();
    }

    #[test]
    fn expired_entries_are_swept_a_map_per_check() {
        let mut r = StrikeRegister::new(60, 1 << 20, [5; 16]);
        let kid = KeyId([3; 10]);
        for i in 0..20_000 {
            r.check(&kid, &n0_of(i), 1000, 1000).unwrap();
        }
        // One entry that outlives the others keeps the register from
        // emptying at once (which clears every map in one go).
        r.check(&kid, &[0xff; 24], 1060, 1060).unwrap();
        assert_eq!((r.len(), r.stored()), (20_001, 20_001));
        // The first bucket's time has passed: it leaves the count at once,
        // and its fingerprints leave the maps over the next SHARDS checks.
        let now = 1000 + 60 + 8;
        r.expire(now);
        assert_eq!(r.len(), 1);
        assert_eq!(r.stored(), 20_001);
        for i in 0..SHARDS as u64 {
            r.check(&kid, &n0_of(1_000_000 + i), now, now).unwrap();
        }
        assert_eq!(r.len(), 1 + SHARDS);
        assert_eq!(r.stored(), r.len());
        // Swept in place: the live entries behind swept words in their
        // probe runs are still found.
        assert_eq!(r.check(&kid, &[0xff; 24], now, now), Err(Error::Replay));
        for i in 0..SHARDS as u64 {
            assert_eq!(
                r.check(&kid, &n0_of(1_000_000 + i), now, now),
                Err(Error::Replay)
            );
        }
        // A swept pair is new again (its Date would fail §8.1 anyway).
        r.check(&kid, &n0_of(7), now, now).unwrap();
        // Not yet swept: a stale entry neither refuses nor counts.
        let mut r = StrikeRegister::new(60, 2, [5; 16]);
        r.check(&kid, &[1; 24], 1000, 1000).unwrap();
        r.check(&kid, &[2; 24], 1060, 1060).unwrap();
        r.expire(now);
        assert_eq!((r.len(), r.stored()), (1, 2));
        r.check(&kid, &[1; 24], now, now).unwrap();
        assert_eq!(r.check(&kid, &[1; 24], now, now), Err(Error::Replay));
        assert_eq!(r.check(&kid, &[3; 24], now, now), Err(Error::Overloaded));
    }

    #[test]
    fn every_held_pair_is_a_replay_as_the_maps_grow() {
        let mut r = StrikeRegister::new(60, 1 << 20, [9; 16]);
        let kid = KeyId([4; 10]);
        for i in 0..100_000 {
            r.check(&kid, &n0_of(i), 1000, 1000).unwrap();
        }
        assert_eq!((r.len(), r.stored()), (100_000, 100_000));
        for i in 0..100_000 {
            assert_eq!(r.check(&kid, &n0_of(i), 1000, 1001), Err(Error::Replay));
        }
        // About 16 bytes an entry at this load (8 per word, 0.35–0.7 full).
        let per_entry = r.memory_bytes() / r.len();
        assert!((11..=24).contains(&per_entry), "{per_entry} bytes an entry");
    }

    #[test]
    fn a_check_starts_where_the_prefetch_address_points() {
        let mut r = StrikeRegister::new(60, 16, [2; 16]);
        let kid = KeyId([6; 10]);
        assert_eq!(r.check_start(&kid, &[1; 24]), None);
        r.check(&kid, &[1; 24], 1000, 1000).unwrap();
        let fp = r.fingerprint(&kid, &[1; 24]);
        let map = &r.shards[shard_of(fp)];
        let at = r.check_start(&kid, &[1; 24]).expect("its map holds a word");
        // The word of the pair is the one there (the map is far from full).
        assert!(map.holds_at(at, fp));
    }

    #[test]
    fn a_quiet_server_never_takes_a_stale_pair_for_a_live_one() {
        // One request per bucket for 600 buckets (the bucket byte wraps
        // twice): the cursor's sweeps reach only the first maps, so the
        // others are swept when they lag; an old pair is new again, and
        // the maps hold no more than the live entries and the last lag's.
        let w = 60;
        let g = w / 8;
        let mut r = StrikeRegister::new(w, 1 << 10, [1; 16]);
        let kid = KeyId([5; 10]);
        let t0 = 1_000_000;
        for k in 0..600u64 {
            let now = t0 + k * g;
            r.expire(now);
            r.check(&kid, &n0_of(k), now, now).unwrap();
            assert!(r.len() <= 20, "{} live", r.len());
            assert!(r.stored() <= 20 + 64 + 2, "{} stored", r.stored());
            if k >= 40 {
                // A pair from 40 buckets back: long stale, never a replay.
                let old = n0_of(k - 40);
                r.check(&kid, &old, now, now).unwrap();
                assert_eq!(r.check(&kid, &old, now, now), Err(Error::Replay));
            }
        }
    }

    #[test]
    fn a_date_beyond_the_window_is_kept_as_its_edge() {
        let mut r = StrikeRegister::new(60, 10, [5; 16]);
        let kid = KeyId([3; 10]);
        r.check(&kid, &[1; 24], 1_000_000, 1000).unwrap();
        // Kept until now + 2W (rounded up to the bucket), not date + W.
        assert_eq!(
            r.check(&kid, &[1; 24], 1000, 1000 + 120),
            Err(Error::Replay)
        );
        r.expire(1000 + 120 + 8);
        assert!(r.is_empty());
    }

    #[test]
    fn dates_near_the_end_of_time_do_not_wrap() {
        let mut r = StrikeRegister::new(60, 1, [0; 16]);
        r.check(&KeyId([0; 10]), &[0; 24], u64::MAX - 60, u64::MAX)
            .unwrap();
        assert_eq!(
            r.check(&KeyId([0; 10]), &[0; 24], u64::MAX - 60, u64::MAX),
            Err(Error::Replay)
        );
        let mut r = StrikeRegister::new(5, 10, [0; 16]);
        r.check(&KeyId([0; 10]), &[0; 24], u64::MAX, u64::MAX)
            .unwrap();
        assert_eq!(
            r.check(&KeyId([0; 10]), &[0; 24], u64::MAX, u64::MAX),
            Err(Error::Replay)
        );
    }
}
