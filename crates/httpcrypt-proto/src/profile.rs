//! Request profiles (spec §4.5). Profile 1 is the contract's v1. Profile 2
//! ("compact") carries the request time in the nonce, binds the outer `Host`
//! into record 0 instead of repeating it inside, sends a 16-byte response
//! random instead of a 24-byte response nonce, and leaves out inner fields
//! that repeat what the outer message already says. A key announces it with
//! certificate version 2; a request shows it by its 33-character nonce
//! segment (`2` + the 32 characters of `b64u(n0)`).

use rand_core::CryptoRngCore;

use crate::error::{Error, Result};
use crate::suite::NONCE_LEN;

/// Which request profile an exchange uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Profile {
    /// The contract's layout (certificate version 1).
    #[default]
    V1,
    /// Profile 2, compact (certificate version 2, spec §4.5).
    Compact,
}

impl Profile {
    /// The number the vectors and the certificate's version byte use.
    pub fn number(self) -> u8 {
        match self {
            Profile::V1 => 1,
            Profile::Compact => 2,
        }
    }

    /// Bytes before the response stream: v1's response nonce, or profile
    /// 2's response random.
    pub fn response_prefix_len(self) -> usize {
        match self {
            Profile::V1 => NONCE_LEN,
            Profile::Compact => RESPONSE_RANDOM_LEN,
        }
    }

    /// A fresh request nonce: 24 random bytes (v1), or the send time `now`
    /// and 19 random bytes ([`compact_n0`]).
    pub fn request_n0(self, now: u64, rng: &mut impl CryptoRngCore) -> [u8; NONCE_LEN] {
        match self {
            Profile::V1 => {
                let mut n0 = [0u8; NONCE_LEN];
                rng.fill_bytes(&mut n0);
                n0
            }
            Profile::Compact => compact_n0(now, rng),
        }
    }

    /// Whether an inner response leaves out `Content-Length`: profile 2
    /// does when head and body travel in one record of at most
    /// `record_size` bytes (spec §4.5); v1 never does.
    pub fn omits_content_length(self, head_len: usize, body_len: u64, record_size: usize) -> bool {
        self == Profile::Compact && head_len as u64 + body_len <= record_size.max(1) as u64
    }
}

/// The character that starts a profile-2 nonce segment.
pub const COMPACT_MARK: u8 = b'2';
/// Bytes of the response random of profile 2.
pub const RESPONSE_RANDOM_LEN: usize = 16;
/// Bytes of the send time at the start of a profile-2 request nonce.
pub const TIME_LEN: usize = 5;
/// The longest `Host` a profile-2 request can bind (its length is a u16).
pub const MAX_BOUND_HOST: usize = u16::MAX as usize;
/// What precedes the response random in a profile-2 response nonce.
const RESPONSE_NONCE_PREFIX: [u8; NONCE_LEN - RESPONSE_RANDOM_LEN] = [0xff; 8];

/// A profile-2 request nonce: `u40(now) || 19 random bytes`.
pub fn compact_n0(now: u64, rng: &mut impl CryptoRngCore) -> [u8; NONCE_LEN] {
    let mut n0 = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut n0[TIME_LEN..]);
    n0[..TIME_LEN].copy_from_slice(&now.to_be_bytes()[8 - TIME_LEN..]);
    n0
}

/// The send time in a profile-2 request nonce.
pub fn nonce_time(n0: &[u8; NONCE_LEN]) -> u64 {
    let mut b = [0u8; 8];
    b[8 - TIME_LEN..].copy_from_slice(&n0[..TIME_LEN]);
    u64::from_be_bytes(b)
}

/// The freshness check of a profile-2 request (spec §4.5, §8.1): the time in
/// `n0` must lie within `window` seconds of `now` (both ends included), else
/// `stale`. Returns the time.
pub fn check_nonce_time(n0: &[u8; NONCE_LEN], now: u64, window: u64) -> Result<u64> {
    crate::replay::check_window(nonce_time(n0), now, window)
}

/// The stream nonce of a profile-2 response: `ff × 8 || random`.
pub fn response_n0(random: &[u8; RESPONSE_RANDOM_LEN]) -> [u8; NONCE_LEN] {
    let mut n0 = [0u8; NONCE_LEN];
    n0[..RESPONSE_NONCE_PREFIX.len()].copy_from_slice(&RESPONSE_NONCE_PREFIX);
    n0[RESPONSE_NONCE_PREFIX.len()..].copy_from_slice(random);
    n0
}

/// The bound `Host` of a profile-2 request: `u16(len) || host`, refused
/// above 65535 bytes (`bad_host`, [`check_bound_host`]).
pub fn bound_host(host: &[u8]) -> Result<Vec<u8>> {
    let len = check_bound_host(host)?;
    let mut v = Vec::with_capacity(2 + host.len());
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(host);
    Ok(v)
}

/// The length prefix of a bindable `Host`; `bad_host` above 65535 bytes.
pub fn check_bound_host(host: &[u8]) -> Result<u16> {
    u16::try_from(host.len()).map_err(|_| Error::BadHost)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(u8);
    impl rand_core::RngCore for Counter {
        fn next_u32(&mut self) -> u32 {
            rand_core::impls::next_u32_via_fill(self)
        }
        fn next_u64(&mut self) -> u64 {
            rand_core::impls::next_u64_via_fill(self)
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            for b in dest {
                self.0 = self.0.wrapping_add(1);
                *b = self.0;
            }
        }
        fn try_fill_bytes(
            &mut self,
            dest: &mut [u8],
        ) -> core::result::Result<(), rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }
    impl rand_core::CryptoRng for Counter {}

    #[test]
    fn nonce_layout() {
        let n0 = compact_n0(0x01_0203_0405, &mut Counter(0));
        assert_eq!(&n0[..5], &[1, 2, 3, 4, 5]);
        assert_eq!(&n0[5..8], &[1, 2, 3]);
        assert_eq!(nonce_time(&n0), 0x01_0203_0405);
        let now = 1_700_000_000;
        let n0 = compact_n0(now, &mut Counter(0));
        assert_eq!(n0[0], 0);
        assert_eq!(check_nonce_time(&n0, now + 60, 60), Ok(now));
        assert_eq!(check_nonce_time(&n0, now - 60, 60), Ok(now));
        assert_eq!(check_nonce_time(&n0, now + 61, 60), Err(Error::Stale));
        assert_eq!(check_nonce_time(&n0, now - 61, 60), Err(Error::Stale));
    }

    #[test]
    fn response_nonce_and_host() {
        let n0 = response_n0(&[7; 16]);
        assert_eq!(&n0[..8], &[0xff; 8]);
        assert_eq!(&n0[8..], &[7; 16]);
        assert_eq!(bound_host(b"a:1").unwrap(), b"\x00\x03a:1");
        assert!(bound_host(&vec![b'a'; 65535]).is_ok());
        assert_eq!(bound_host(&vec![b'a'; 65536]), Err(Error::BadHost));
        assert_eq!(check_bound_host(b"a:1"), Ok(3));
    }

    #[test]
    fn per_profile_rules() {
        let now = 1_700_000_000;
        assert_eq!(
            Profile::Compact.request_n0(now, &mut Counter(0)),
            compact_n0(now, &mut Counter(0))
        );
        let v1 = Profile::V1.request_n0(now, &mut Counter(0));
        assert_eq!(&v1[..3], &[1, 2, 3], "v1: all 24 bytes random");
        // One record of at most 16 KiB holds head and body: no Content-Length.
        assert!(Profile::Compact.omits_content_length(100, 16_284, 16_384));
        assert!(!Profile::Compact.omits_content_length(100, 16_285, 16_384));
        assert!(!Profile::V1.omits_content_length(100, 0, 16_384));
    }
}
