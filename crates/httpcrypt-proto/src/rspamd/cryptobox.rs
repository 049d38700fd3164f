//! The rspamd cryptobox (profile "Cryptography"): the shared key `nm` and
//! the body format `nonce(24) || tag(16) || ct`.
//!
//! ```text
//! nm      = HChaCha20(X25519(clamp(own_secret), peer_public), 0^16)
//! polykey = XChaCha20(nm, nonce) keystream block 0, bytes 0..32
//! ct      = plaintext XOR XChaCha20(nm, nonce) keystream from byte 64
//! tag     = Poly1305(polykey, ct)
//! ```
//!
//! The ciphertext bytes equal IETF XChaCha20-Poly1305's; the tag does not
//! (it covers the ciphertext alone: no AD, no padding, no lengths), so no
//! AEAD crate computes it and it is assembled here from XChaCha20 and
//! Poly1305.

use chacha20::cipher::{KeyIvInit, StreamCipher};
use chacha20::XChaCha20;
use poly1305::universal_hash::KeyInit;
use poly1305::Poly1305;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::keys::{KexPublic, KexSecret};
use crate::suite::hchacha20;

/// Nonce length.
pub const NONCE_LEN: usize = 24;
/// Tag length.
pub const TAG_LEN: usize = 16;
/// Bytes a sealed body adds to its plaintext: nonce and tag.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// The key shared by the two ends of one exchange (rspamd's `nm`): it seals
/// the request and the response. Zeroized on drop, never printed.
pub struct Nm(Zeroizing<[u8; 32]>);

impl Nm {
    /// `HChaCha20(X25519(own, peer), 0^16)`. The secret is clamped by X25519;
    /// an all-zero X25519 output (small-order peer key) is
    /// [`Error::SmallOrder`] (rspamd itself does not check).
    pub fn derive(own: &KexSecret, peer: &KexPublic) -> Result<Nm> {
        let shared = own.agree_raw(peer)?;
        Ok(Nm(hchacha20(&shared, &[0u8; 16])))
    }

    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Nm {
        Nm(Zeroizing::new(bytes))
    }

    /// The raw key bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The cipher positioned at byte 64 and the Poly1305 key from block 0.
    fn start(&self, nonce: &[u8; NONCE_LEN]) -> (XChaCha20, Poly1305) {
        let mut cipher = XChaCha20::new(self.0.as_ref().into(), nonce.into());
        let mut block0 = Zeroizing::new([0u8; 64]);
        cipher.apply_keystream(&mut block0[..]);
        let mac = Poly1305::new(block0[..32].into());
        (cipher, mac)
    }

    /// Appends `nonce || tag || ct` for `plaintext` to `out`.
    ///
    /// The nonce must never repeat under one `Nm`; draw it from a CSPRNG.
    /// Fails only with [`Error::BodyTooLarge`] past XChaCha20's 256 GiB.
    pub fn seal(&self, nonce: &[u8; NONCE_LEN], plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        out.reserve(OVERHEAD + plaintext.len());
        out.extend_from_slice(nonce);
        out.extend_from_slice(&[0u8; TAG_LEN]);
        out.extend_from_slice(plaintext);
        let (cipher, mac) = self.start(nonce);
        match seal_in_place(cipher, mac, &mut out[start..]) {
            Ok(()) => Ok(()),
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }

    /// Verifies and decrypts a body `nonce || tag || ct`.
    ///
    /// The tag is checked, in constant time, before anything is decrypted.
    /// A body shorter than 40 bytes is [`Error::Truncated`]; any other
    /// failure is [`Error::Integrity`].
    pub fn open(&self, body: &[u8]) -> Result<Vec<u8>> {
        if body.len() < OVERHEAD {
            return Err(Error::Truncated);
        }
        let (nonce, rest) = body.split_at(NONCE_LEN);
        let (tag, ct) = rest.split_at(TAG_LEN);
        let nonce: &[u8; NONCE_LEN] = nonce.try_into().map_err(|_| Error::Truncated)?;
        let (mut cipher, mac) = self.start(nonce);
        let expected = mac.compute_unpadded(ct);
        if !bool::from(expected.as_slice().ct_eq(tag)) {
            return Err(Error::Integrity);
        }
        let mut plaintext = ct.to_vec();
        cipher
            .try_apply_keystream(&mut plaintext)
            .map_err(|_| Error::Integrity)?;
        Ok(plaintext)
    }
}

/// Encrypts `body[40..]` in place and writes the tag to `body[24..40]`.
fn seal_in_place(mut cipher: XChaCha20, mac: Poly1305, body: &mut [u8]) -> Result<()> {
    let (head, ct) = body.split_at_mut(OVERHEAD);
    cipher
        .try_apply_keystream(ct)
        .map_err(|_| Error::BodyTooLarge)?;
    let tag = mac.compute_unpadded(ct);
    head[NONCE_LEN..].copy_from_slice(&tag);
    Ok(())
}

impl core::fmt::Debug for Nm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Nm(..)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chacha20poly1305::aead::Aead;

    fn nm() -> Nm {
        let a = KexSecret::from_bytes([0x11; 32]);
        let b = KexSecret::from_bytes([0x22; 32]);
        Nm::derive(&a, b.public()).unwrap()
    }

    #[test]
    fn both_ends_derive_the_same_nm() {
        let a = KexSecret::from_bytes([0x11; 32]);
        let b = KexSecret::from_bytes([0x22; 32]);
        let ab = Nm::derive(&a, b.public()).unwrap();
        let ba = Nm::derive(&b, a.public()).unwrap();
        assert_eq!(ab.as_bytes(), ba.as_bytes());
        // Clamped and unclamped forms of a secret are the same key.
        let mut clamped = [0x11u8; 32];
        clamped[0] &= 248;
        clamped[31] = (clamped[31] & 127) | 64;
        let c = Nm::derive(&KexSecret::from_bytes(clamped), b.public()).unwrap();
        assert_eq!(c.as_bytes(), ab.as_bytes());
    }

    #[test]
    fn nm_is_hchacha_of_the_x25519_output() {
        // RFC 7748 §6.1 key pair; nm = HChaCha20(shared, 0^16).
        let a: [u8; 32] =
            hex::decode("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
                .unwrap()
                .try_into()
                .unwrap();
        let b: [u8; 32] =
            hex::decode("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
                .unwrap()
                .try_into()
                .unwrap();
        let nm = Nm::derive(&KexSecret::from_bytes(a), &KexPublic(b)).unwrap();
        let shared: [u8; 32] =
            hex::decode("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
                .unwrap()
                .try_into()
                .unwrap();
        assert_eq!(nm.as_bytes(), &*hchacha20(&shared, &[0; 16]));
    }

    #[test]
    fn small_order_peer() {
        let a = KexSecret::from_bytes([0x11; 32]);
        assert_eq!(
            Nm::derive(&a, &KexPublic([0; 32])).err(),
            Some(Error::SmallOrder)
        );
        let mut one = [0u8; 32];
        one[0] = 1;
        assert_eq!(
            Nm::derive(&a, &KexPublic(one)).err(),
            Some(Error::SmallOrder)
        );
    }

    #[test]
    fn ciphertext_is_xchacha20poly1305s_but_the_tag_is_not() {
        let nm = nm();
        let nonce = [0x5a; 24];
        for len in [0usize, 1, 15, 16, 17, 63, 64, 65, 200] {
            let msg: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut body = Vec::new();
            nm.seal(&nonce, &msg, &mut body).unwrap();
            assert_eq!(body.len(), OVERHEAD + len);
            assert_eq!(body[..24], nonce);
            let reference = chacha20poly1305::XChaCha20Poly1305::new(nm.as_bytes().into())
                .encrypt((&nonce).into(), &msg[..])
                .unwrap();
            assert_eq!(body[OVERHEAD..], reference[..len]);
            assert_ne!(body[24..40], reference[len..]);
            // The tag is unpadded Poly1305 of the ciphertext under block 0.
            let mut block0 = [0u8; 64];
            XChaCha20::new(nm.as_bytes().into(), (&nonce).into()).apply_keystream(&mut block0);
            let tag = Poly1305::new(block0[..32].into()).compute_unpadded(&body[OVERHEAD..]);
            assert_eq!(body[24..40], tag[..]);
            assert_eq!(nm.open(&body).unwrap(), msg);
        }
    }

    #[test]
    fn seal_appends() {
        let mut out = b"head".to_vec();
        nm().seal(&[1; 24], b"x", &mut out).unwrap();
        assert_eq!(&out[..4], b"head");
        assert_eq!(nm().open(&out[4..]).unwrap(), b"x");
    }

    #[test]
    fn every_flipped_bit_fails() {
        let nm = nm();
        let mut body = Vec::new();
        nm.seal(&[7; 24], b"GET /stat HTTP/1.0\r\n\r\n", &mut body)
            .unwrap();
        for i in 0..body.len() {
            for bit in 0..8 {
                let mut b = body.clone();
                b[i] ^= 1 << bit;
                assert_eq!(nm.open(&b), Err(Error::Integrity), "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn truncation_and_trailing_bytes_fail() {
        let nm = nm();
        let mut body = Vec::new();
        nm.seal(&[7; 24], b"hello", &mut body).unwrap();
        for cut in 0..body.len() {
            let want = if cut < OVERHEAD {
                Error::Truncated
            } else {
                Error::Integrity
            };
            assert_eq!(nm.open(&body[..cut]), Err(want), "cut {cut}");
        }
        let mut long = body.clone();
        long.push(0);
        assert_eq!(nm.open(&long), Err(Error::Integrity));
        let other = Nm::from_bytes([9; 32]);
        assert_eq!(other.open(&body), Err(Error::Integrity));
    }

    #[test]
    fn debug_prints_no_key() {
        let nm = Nm::from_bytes([0xab; 32]);
        let s = format!("{nm:?}");
        assert!(!s.contains("ab") && !s.contains("171"), "{s}");
    }
}
