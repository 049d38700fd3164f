//! rspamd base32 (profile "Keys and text encoding"): the text form of rspamd
//! keys, key IDs and the `Key` header.
//!
//! The alphabet is z-base-32's, but the bit order is not: the input is read as
//! the little-endian integer `N = Σ in[i]·256^i` and character `j` is
//! `alphabet[(N >> 5j) & 31]`, for `ceil(8n/5)` characters, without padding.
//!
//! Decoding is strict where rspamd's own encoder leaves no choice:
//! - lowercase only, no padding, no whitespace;
//! - [`decode`] accepts only the lengths the encoder produces (`ceil(8n/5)`),
//!   and the unused high bits of the last character must be zero;
//! - [`decode_key`] also accepts the 51-character form of a 32-byte key that
//!   rspamd accepts (255 bits: the missing top bit of byte 31 is zero, which
//!   X25519 ignores anyway). rspamd's decoder turns leftover bits into one more
//!   byte; 51 characters is the only case where that yields a whole key.
//!
//! rspamd itself silently drops non-zero leftover bits; we refuse them so that
//! every byte string has exactly one accepted text form per length.

use crate::error::{Error, Result};

/// The rspamd base32 alphabet.
pub const ALPHABET: &[u8; 32] = b"ybndrfg8ejkmcpqxot1uwisza345h769";

/// Length of the text form of a 32-byte key.
pub const KEY_TEXT_LEN: usize = 52;

/// Character value, or 0xff for characters outside the alphabet.
const VALUES: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 32 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Number of characters [`encode`] produces for `n` bytes: `ceil(8n/5)`.
pub const fn encoded_len(n: usize) -> usize {
    // Written to avoid overflowing `8 * n`.
    (n / 5) * 8 + ((n % 5) * 8).div_ceil(5)
}

/// Encodes `bytes` in rspamd base32.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(encoded_len(bytes.len()));
    encode_to(bytes, &mut out);
    out
}

/// Appends the rspamd base32 form of `bytes` to `out`.
pub fn encode_to(bytes: &[u8], out: &mut String) {
    out.reserve(encoded_len(bytes.len()));
    let mut acc: u16 = 0;
    let mut bits = 0u32;
    for &b in bytes {
        acc |= u16::from(b) << bits;
        bits += 8;
        while bits >= 5 {
            out.push(char::from(ALPHABET[usize::from(acc & 31)]));
            acc >>= 5;
            bits -= 5;
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[usize::from(acc & 31)]));
    }
}

/// Decodes text that [`encode`] could have produced.
///
/// Refuses ([`Error::BadBase32`]) a character outside the alphabet
/// (uppercase included), a length that is not `ceil(8n/5)` for some `n`, and
/// non-zero unused bits in the last character.
pub fn decode(text: &[u8]) -> Result<Vec<u8>> {
    let len = text.len();
    let n = (len / 8) * 5 + (len % 8) * 5 / 8;
    if encoded_len(n) != len {
        return Err(Error::BadBase32);
    }
    let mut out = vec![0u8; n];
    decode_into(text, &mut out)?;
    Ok(out)
}

/// Decodes exactly `N` bytes from their canonical `ceil(8N/5)`-character form.
pub fn decode_array<const N: usize>(text: &[u8]) -> Result<[u8; N]> {
    if text.len() != encoded_len(N) {
        return Err(Error::BadBase32);
    }
    let mut out = [0u8; N];
    decode_into(text, &mut out)?;
    Ok(out)
}

/// Decodes a 32-byte key from its 52-character form, or from the
/// 51-character form rspamd also accepts (see the module documentation).
pub fn decode_key(text: &[u8]) -> Result<[u8; 32]> {
    if text.len() != KEY_TEXT_LEN && text.len() != KEY_TEXT_LEN - 1 {
        return Err(Error::BadBase32);
    }
    let mut out = [0u8; 32];
    decode_into(text, &mut out)?;
    Ok(out)
}

/// Fills `out` from `text`, least significant bit first. Bits left over after
/// the last whole byte become one more byte if exactly one is missing (as in
/// rspamd); any bits beyond `out` must be zero.
fn decode_into(text: &[u8], out: &mut [u8]) -> Result<()> {
    let mut acc: u16 = 0;
    let mut bits = 0u32;
    let mut i = 0;
    for &c in text {
        let v = VALUES[usize::from(c)];
        if v == 0xff {
            return Err(Error::BadBase32);
        }
        acc |= u16::from(v) << bits;
        bits += 5;
        if bits >= 8 {
            *out.get_mut(i).ok_or(Error::BadBase32)? = acc as u8;
            i += 1;
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 && i + 1 == out.len() {
        out[i] = acc as u8;
        i += 1;
        acc = 0;
    }
    if i != out.len() || acc != 0 {
        return Err(Error::BadBase32);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The spec's formula, computed with a big little-endian integer.
    fn reference_encode(bytes: &[u8]) -> String {
        let n_chars = (8 * bytes.len()).div_ceil(5);
        (0..n_chars)
            .map(|j| {
                let mut v = 0u8;
                for k in 0..5 {
                    let bit = 5 * j + k;
                    if bit < 8 * bytes.len() && bytes[bit / 8] >> (bit % 8) & 1 == 1 {
                        v |= 1 << k;
                    }
                }
                char::from(ALPHABET[usize::from(v)])
            })
            .collect()
    }

    #[test]
    fn worked_examples() {
        assert_eq!(encode(&[1]), "by");
        assert_eq!(encode(b"hello world"), "em3ags7py376g3tprd");
        let seq: Vec<u8> = (0u8..32).collect();
        let text = "yeyroboyfobqyrrbkanaogabxyrnbjcnwefctmyd3ogsbqwd6a8y";
        assert_eq!(encode(&seq), text);
        assert_eq!(decode(b"by").unwrap(), [1]);
        assert_eq!(decode(b"em3ags7py376g3tprd").unwrap(), b"hello world");
        assert_eq!(decode(text.as_bytes()).unwrap(), seq);
        assert_eq!(decode_key(text.as_bytes()).unwrap().to_vec(), seq);
        assert_eq!(encode(&[]), "");
        assert_eq!(decode(b"").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn lengths() {
        assert_eq!(encoded_len(32), 52);
        assert_eq!(encoded_len(5), 8);
        assert_eq!(encoded_len(64), 103);
        for n in 0..200 {
            assert_eq!(encoded_len(n), (8 * n).div_ceil(5));
        }
    }

    #[test]
    fn round_trips_and_matches_the_formula() {
        let mut x = 0x1234_5678u32;
        for n in 0..100 {
            let bytes: Vec<u8> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            let text = encode(&bytes);
            assert_eq!(text, reference_encode(&bytes));
            assert_eq!(decode(text.as_bytes()).unwrap(), bytes);
        }
        for n in [0xffu8, 0x80, 0x7f] {
            let bytes = [n; 32];
            assert_eq!(
                decode_array::<32>(encode(&bytes).as_bytes()).unwrap(),
                bytes
            );
        }
    }

    #[test]
    fn refuses_foreign_characters_and_uppercase() {
        let good = encode(&[0xa5; 32]);
        let upper = good.to_uppercase();
        assert_eq!(decode(upper.as_bytes()), Err(Error::BadBase32));
        assert_eq!(decode_key(upper.as_bytes()), Err(Error::BadBase32));
        for bad in [b'0', b'2', b'l', b'v', b'Y', b'=', b' ', b'\n', 0x80, 0] {
            let mut t = good.clone().into_bytes();
            t[7] = bad;
            assert_eq!(decode(&t), Err(Error::BadBase32), "{bad:#x}");
            assert_eq!(decode_key(&t), Err(Error::BadBase32), "{bad:#x}");
        }
    }

    #[test]
    fn refuses_lengths_the_encoder_never_produces() {
        for len in 0..120usize {
            let text = vec![b'y'; len];
            let canonical = (0..=len).any(|n| encoded_len(n) == len);
            assert_eq!(decode(&text).is_ok(), canonical, "{len}");
            assert_eq!(decode_key(&text).is_ok(), len == 51 || len == 52, "{len}");
            assert_eq!(decode_array::<5>(&text).is_ok(), len == 8, "{len}");
        }
    }

    #[test]
    fn refuses_non_zero_leftover_bits() {
        // Two characters carry one byte and 2 unused bits (bits 8 and 9).
        assert_eq!(decode(b"br"), Ok(vec![0x81])); // 'r' = 4: bit 7
        assert_eq!(decode(b"be"), Err(Error::BadBase32)); // 'e' = 8: bit 8
        assert_eq!(decode(b"bo"), Err(Error::BadBase32)); // 'o' = 16: bit 9
                                                          // 32 bytes: the last character carries 1 data bit and 4 unused bits.
        let mut t = encode(&[0xff; 32]).into_bytes();
        assert_eq!(t[51], ALPHABET[1]);
        for &c in &ALPHABET[2..] {
            t[51] = c;
            assert_eq!(decode(&t), Err(Error::BadBase32));
            assert_eq!(decode_key(&t), Err(Error::BadBase32));
        }
    }

    #[test]
    fn key_in_51_characters() {
        // rspamd accepts a 51-character public key: the 255 bits it carries
        // are the key with its top bit clear.
        let mut key = [0xa7u8; 32];
        key[31] &= 0x7f;
        let text = encode(&key);
        assert_eq!(text.as_bytes()[51], b'y');
        assert_eq!(decode_key(&text.as_bytes()[..51]).unwrap(), key);
        assert_eq!(decode_key(text.as_bytes()).unwrap(), key);
        assert_eq!(decode(&text.as_bytes()[..51]), Err(Error::BadBase32));
        assert_eq!(decode_key(&text.as_bytes()[..50]), Err(Error::BadBase32));
    }
}
