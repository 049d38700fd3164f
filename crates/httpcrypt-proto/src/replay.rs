//! Replay defence (spec §8): the freshness check on the inner `Date` and a
//! strike register of `(kid, n0)` whose memory is bounded by rate × window.
//!
//! The register keeps a 64-bit keyed fingerprint per request, with the
//! index of the time bucket it may be forgotten in (`date + W`: after that
//! a replay fails the freshness check anyway). The fingerprints are spread
//! over [`SHARDS`] hash maps by their top byte, so one check probes one
//! map once. Per bucket only a count is kept: a bucket whose time has
//! passed leaves the count of live entries at once, and its entries are
//! judged by their bucket index from then on; they are swept out of the
//! maps one map per check, in a sequential pass, instead of one random
//! removal each. No check ever sweeps more than one map, so no request
//! waits while a whole bucket (hundreds of thousands of entries at high
//! rates) is dropped.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use siphasher::sip::SipHasher13;

use crate::error::{Error, Result};
use crate::keys::KeyId;
use crate::suite::NONCE_LEN;

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

/// The fingerprints are already keyed random values: they are hashed as
/// they are, turned so that neither the table's slot (low bits) nor its
/// control byte (top 7 bits) comes from the top bits, which pick the map
/// and are the same for every entry of one map.
#[derive(Default)]
struct Turned(u64);

impl Hasher for Turned {
    fn finish(&self) -> u64 {
        self.0
    }
    // Only `u64` keys are hashed here (`write_u64`); bytes would be read
    // as one big-endian number.
    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.iter().fold(0u64, |n, b| n << 8 | u64::from(*b));
        self.write_u64(n);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.rotate_right(SHARD_BITS);
    }
}

/// Fingerprint → index (`until / g`, wrapping) of the bucket it is in.
type Shard = HashMap<u64, u32, BuildHasherDefault<Turned>>;

/// Whether bucket index `tag` is at or after the oldest live bucket `cut`.
/// Indices are kept modulo 2^32; live and swept-late entries lie within
/// 2^31 buckets of `cut` (more than 68 years at `g` = 1 s).
fn is_live(tag: u32, cut: u32) -> bool {
    tag.wrapping_sub(cut) < 1 << 31
}

/// A bounded set of `(kid, n0)` seen within the window: a fingerprint map
/// answers "seen?" with a single probe, and the buckets, ordered by when
/// their entries may be forgotten, say how many entries are live and which
/// bucket indices are.
pub struct StrikeRegister {
    window: u64,
    granularity: u64,
    capacity: usize,
    key: (u64, u64),
    shards: Vec<Shard>,
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
        let k0 = u64::from_le_bytes(seed[..8].try_into().expect("16-byte seed"));
        let k1 = u64::from_le_bytes(seed[8..].try_into().expect("16-byte seed"));
        StrikeRegister {
            window,
            granularity: (window / 8).max(1),
            capacity,
            key: (k0, k1),
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
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
        self.shards.iter().map(HashMap::len).sum()
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
            // Nothing is live: empty every map now (their rooms are kept).
            for s in &mut self.shards {
                s.clear();
            }
            self.next_sweep = SHARDS;
        } else {
            self.next_sweep = 0;
        }
    }

    /// Sweeps the next map, if any is left since buckets last expired.
    fn sweep_one(&mut self) {
        if self.next_sweep < SHARDS {
            let cut = self.cut();
            self.shards[self.next_sweep].retain(|_, tag| is_live(*tag, cut));
            self.next_sweep += 1;
        }
    }

    fn fingerprint(&self, kid: &KeyId, n0: &[u8; NONCE_LEN]) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.key.0, self.key.1);
        h.write(&kid.0);
        h.write(n0);
        h.finish()
    }

    /// Records `(kid, n0)` for a request whose `Date` passed the freshness
    /// check; `replay` if it was seen, `overloaded` if the register is full.
    /// A `date` beyond `now + W` (which that check refuses) is kept as if it
    /// were `now + W`.
    pub fn check(&mut self, kid: &KeyId, n0: &[u8; NONCE_LEN], date: u64, now: u64) -> Result<()> {
        self.expire(now);
        self.sweep_one();
        let fp = self.fingerprint(kid, n0);
        let cut = self.cut();
        if self.shards[shard_of(fp)]
            .get(&fp)
            .is_some_and(|&tag| is_live(tag, cut))
        {
            return Err(Error::Replay);
        }
        if self.len() >= self.capacity {
            return Err(Error::Overloaded);
        }
        let forget_after = date
            .min(now.saturating_add(self.window))
            .saturating_add(self.window);
        // Saturating: a date near the end of time must not wrap to an early expiry.
        let until = (forget_after / self.granularity)
            .saturating_add(1)
            .saturating_mul(self.granularity);
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
        let tag = self.index(until);
        self.shards[shard_of(fp)].insert(fp, tag);
        Ok(())
    }

    /// Approximate heap bytes held (for benchmarks and limits).
    pub fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.capacity() * (core::mem::size_of::<(u64, u32)>() + 1))
            .sum::<usize>()
            + self.shards.capacity() * core::mem::size_of::<Shard>()
            + self.buckets.capacity() * core::mem::size_of::<(u64, usize)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut n0 = [0u8; 24];
        for i in 0u32..20_000 {
            n0[..4].copy_from_slice(&i.to_le_bytes());
            r.check(&kid, &n0, 1000, 1000).unwrap();
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
        for i in 0..SHARDS as u32 {
            n0[..4].copy_from_slice(&(1_000_000 + i).to_le_bytes());
            r.check(&kid, &n0, now, now).unwrap();
        }
        assert_eq!(r.len(), 1 + SHARDS);
        assert_eq!(r.stored(), r.len());
        // A swept pair is new again (its Date would fail §8.1 anyway).
        n0[..4].copy_from_slice(&7u32.to_le_bytes());
        r.check(&kid, &n0, now, now).unwrap();
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
