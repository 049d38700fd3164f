//! Replay defence (spec §8): the freshness check on the inner `Date` and a
//! strike register of `(kid, n0)` whose memory is bounded by rate × window.
//!
//! The register keeps a 64-bit keyed fingerprint per request in one hash
//! set (a single probe per request) and lists each in a time bucket keyed
//! by when it may be forgotten (`date + W`: after that a replay fails the
//! freshness check anyway). As time passes, whole buckets expire and their
//! entries leave the set.

use std::collections::{HashSet, VecDeque};
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

/// The fingerprints are already keyed random values: hash them as they are.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

struct Bucket {
    /// Entries here may be forgotten once `now > until`.
    until: u64,
    fingerprints: Vec<u64>,
}

/// A bounded set of `(kid, n0)` seen within the window: one hash set
/// answers "seen?" with a single probe, and the entries are also listed in
/// buckets ordered by when they may be forgotten, so expiry removes exactly
/// the entries whose time has passed.
pub struct StrikeRegister {
    window: u64,
    granularity: u64,
    capacity: usize,
    key: (u64, u64),
    seen: HashSet<u64, BuildHasherDefault<PassThrough>>,
    buckets: VecDeque<Bucket>,
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
            seen: HashSet::default(),
            buckets: VecDeque::new(),
        }
    }

    /// Entries currently held.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether the register is empty.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Drops the entries that can no longer be replayed at `now`.
    pub fn expire(&mut self, now: u64) {
        while self.buckets.front().is_some_and(|b| b.until < now) {
            if let Some(b) = self.buckets.pop_front() {
                for fp in &b.fingerprints {
                    self.seen.remove(fp);
                }
            }
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
    pub fn check(&mut self, kid: &KeyId, n0: &[u8; NONCE_LEN], date: u64, now: u64) -> Result<()> {
        self.expire(now);
        let fp = self.fingerprint(kid, n0);
        if self.seen.contains(&fp) {
            return Err(Error::Replay);
        }
        if self.seen.len() >= self.capacity {
            return Err(Error::Overloaded);
        }
        let forget_after = date.saturating_add(self.window);
        // Saturating: a date near the end of time must not wrap to an early expiry.
        let until = (forget_after / self.granularity)
            .saturating_add(1)
            .saturating_mul(self.granularity);
        // Most requests carry a current date: look for their bucket from the back.
        let at = self
            .buckets
            .iter()
            .rposition(|b| b.until <= until)
            .map_or(0, |i| i + 1);
        let idx = if at > 0 && self.buckets[at - 1].until == until {
            at - 1
        } else {
            self.buckets.insert(
                at,
                Bucket {
                    until,
                    fingerprints: Vec::new(),
                },
            );
            at
        };
        self.buckets[idx].fingerprints.push(fp);
        self.seen.insert(fp);
        Ok(())
    }

    /// Approximate heap bytes held (for benchmarks and limits).
    pub fn memory_bytes(&self) -> usize {
        self.seen.capacity() * (core::mem::size_of::<u64>() + 1)
            + self
                .buckets
                .iter()
                .map(|b| {
                    b.fingerprints.capacity() * core::mem::size_of::<u64>()
                        + core::mem::size_of::<Bucket>()
                })
                .sum::<usize>()
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
