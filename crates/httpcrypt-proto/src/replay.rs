//! Replay defence (spec §8): the freshness check on the inner `Date` and a
//! strike register of `(kid, n0)` whose memory is bounded by rate × window.
//!
//! The register keeps a 64-bit keyed fingerprint per request in time
//! buckets keyed by when the entry may be forgotten (`date + W`: after that
//! a replay fails the freshness check anyway). Buckets are dropped whole as
//! time passes, so expiry costs nothing per entry.

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
    let text = std::str::from_utf8(value).map_err(|_| Error::BadDate)?;
    let t = httpdate::parse_http_date(text.trim()).map_err(|_| Error::BadDate)?;
    let date = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| Error::BadDate)?
        .as_secs();
    if date.abs_diff(now) > window {
        return Err(Error::Stale);
    }
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
    seen: HashSet<u64, BuildHasherDefault<PassThrough>>,
}

/// A bounded, time-bucketed set of `(kid, n0)` seen within the window.
pub struct StrikeRegister {
    window: u64,
    granularity: u64,
    capacity: usize,
    len: usize,
    key: (u64, u64),
    buckets: VecDeque<Bucket>,
}

impl core::fmt::Debug for StrikeRegister {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StrikeRegister")
            .field("window", &self.window)
            .field("len", &self.len)
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
            len: 0,
            key: (k0, k1),
            buckets: VecDeque::new(),
        }
    }

    /// Entries currently held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the register is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops buckets whose entries can no longer be replayed at `now`.
    pub fn expire(&mut self, now: u64) {
        while self.buckets.front().is_some_and(|b| b.until < now) {
            if let Some(b) = self.buckets.pop_front() {
                self.len -= b.seen.len();
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
        if self.buckets.iter().any(|b| b.seen.contains(&fp)) {
            return Err(Error::Replay);
        }
        if self.len >= self.capacity {
            return Err(Error::Overloaded);
        }
        let forget_after = date.saturating_add(self.window);
        // Saturating: a date near the end of time must not wrap to an early expiry.
        let until = (forget_after / self.granularity)
            .saturating_add(1)
            .saturating_mul(self.granularity);
        let idx = match self.buckets.iter().position(|b| b.until >= until) {
            Some(i) if self.buckets[i].until == until => i,
            Some(i) => {
                self.buckets.insert(
                    i,
                    Bucket {
                        until,
                        seen: HashSet::default(),
                    },
                );
                i
            }
            None => {
                self.buckets.push_back(Bucket {
                    until,
                    seen: HashSet::default(),
                });
                self.buckets.len() - 1
            }
        };
        self.buckets[idx].seen.insert(fp);
        self.len += 1;
        Ok(())
    }

    /// Approximate heap bytes held (for benchmarks and limits).
    pub fn memory_bytes(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| {
                b.seen.capacity() * (core::mem::size_of::<u64>() + 1)
                    + core::mem::size_of::<Bucket>()
            })
            .sum()
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
