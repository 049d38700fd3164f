//! Suite 1 primitives (spec §1): HChaCha20, XChaCha20-Poly1305 built from
//! HChaCha20 and the IETF ChaCha20-Poly1305 of aws-lc-rs (and of OpenSSL for
//! long records, below), SHA3-256.
//!
//! XChaCha20-Poly1305 with nonce `n` is ChaCha20-Poly1305 under the subkey
//! `HChaCha20(k, n[0..16])` with the 12-byte nonce `0^4 || n[16..24]`. The
//! subkey only changes when the first 16 nonce bytes change, which inside a
//! stream of consecutive nonces happens once every 2^64 records, so
//! [`XChaCha`] caches it.
//!
//! Two implementations of the same IETF AEAD: aws-lc's stitched AVX2 code
//! costs little to set up and wins on short records; OpenSSL 3's AVX-512
//! ChaCha20 and Poly1305 win on long ones where the CPU has AVX-512 (on an
//! AVX-512 Xeon, 16 KiB records: 4.5 µs against 6.5, 4 KiB 1.5 against 1.8,
//! 1 KiB 0.84 against 0.57). With the `openssl` feature (the default), a
//! record of [`BULK_MIN`] bytes or more goes to OpenSSL on such a CPU. Both
//! give the same bytes; `tests` check them against RustCrypto's
//! XChaCha20-Poly1305 on either side of the threshold.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use chacha20::cipher::consts::U10;
use sha3::{Digest, Sha3_256};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// AEAD tag length.
pub const TAG_LEN: usize = 16;
/// XChaCha20 nonce length.
pub const NONCE_LEN: usize = 24;

/// HChaCha20 (draft-irtf-cfrg-xchacha-03 §2.2).
pub fn hchacha20(key: &[u8; 32], input: &[u8; 16]) -> Zeroizing<[u8; 32]> {
    let out = chacha20::hchacha::<U10>(key.into(), input.into());
    let mut bytes = Zeroizing::new([0u8; 32]);
    bytes.copy_from_slice(&out);
    bytes
}

/// A secret SipHash-1-3 key: the seeded hash of the server's tables (the
/// strike register's fingerprints, the session cache, the admission
/// budgets), so clients cannot aim for collisions.
#[derive(Clone, Copy)]
pub struct SipKey(u64, u64);

impl SipKey {
    /// The key whose halves are `seed`'s little-endian halves (draw the
    /// seed from a CSPRNG).
    pub fn from_seed(seed: [u8; 16]) -> Self {
        let (k0, k1) = seed.split_at(8);
        SipKey(
            u64::from_le_bytes(k0.try_into().expect("8 bytes")),
            u64::from_le_bytes(k1.try_into().expect("8 bytes")),
        )
    }

    /// SipHash-1-3 of the concatenation of `parts` (one stream: the parts
    /// carry no length prefixes).
    pub fn hash(&self, parts: &[&[u8]]) -> u64 {
        use core::hash::Hasher;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(self.0, self.1);
        for p in parts {
            h.write(p);
        }
        h.finish()
    }
}

impl core::fmt::Debug for SipKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SipKey(..)")
    }
}

/// SHA3-256 over the concatenation of `parts`.
pub fn sha3_256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha3_256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// Records this long or longer (associated data and text together) are
/// sealed and opened by OpenSSL where the CPU has AVX-512 and the `openssl`
/// feature is on (module docs).
pub const BULK_MIN: usize = 4096;

/// XChaCha20-Poly1305 under one key, with the HChaCha20 subkey cached for
/// the last nonce prefix used.
pub struct XChaCha {
    key: Zeroizing<[u8; 32]>,
    prefix: [u8; 16],
    inner: Option<LessSafeKey>,
    /// OpenSSL's context under the same subkey, made at the first long
    /// record (it frees and cleanses the subkey when dropped).
    #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
    bulk: Option<bulk::Bulk>,
}

impl core::fmt::Debug for XChaCha {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("XChaCha(..)")
    }
}

impl XChaCha {
    /// A cipher under `key`.
    pub fn new(key: &[u8; 32]) -> Self {
        XChaCha {
            key: Zeroizing::new(*key),
            prefix: [0; 16],
            inner: None,
            #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
            bulk: None,
        }
    }

    /// Makes the subkey of `nonce`'s prefix the current one: aws-lc's key
    /// at once, OpenSSL's context dropped until a long record wants it.
    fn select(&mut self, nonce: &[u8; NONCE_LEN]) {
        let prefix: [u8; 16] = nonce[..16]
            .try_into()
            .expect("24-byte nonce has a 16-byte prefix");
        if self.inner.is_none() || self.prefix != prefix {
            let sub = hchacha20(&self.key, &prefix);
            let unbound = UnboundKey::new(&CHACHA20_POLY1305, &sub[..])
                .expect("a 32-byte key is valid for ChaCha20-Poly1305");
            self.inner = Some(LessSafeKey::new(unbound));
            self.prefix = prefix;
            #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
            {
                self.bulk = None;
            }
        }
    }

    fn subkey(&mut self, nonce: &[u8; NONCE_LEN]) -> (&LessSafeKey, Nonce) {
        self.select(nonce);
        let key = self.inner.as_ref().expect("subkey was just set");
        (key, Nonce::assume_unique_for_key(ietf_nonce(nonce)))
    }

    /// OpenSSL's context under the current subkey, for a record whose
    /// associated data and text come to `len` bytes (both pass through
    /// Poly1305; a CLEAR record's payload is all associated data), when that
    /// record should go there (module docs).
    #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
    fn bulk_for(&mut self, nonce: &[u8; NONCE_LEN], len: usize) -> Option<&mut bulk::Bulk> {
        if !bulk::wanted(len) {
            return None;
        }
        self.select(nonce);
        if self.bulk.is_none() {
            let sub = hchacha20(&self.key, &self.prefix);
            self.bulk = bulk::Bulk::new(&sub);
        }
        self.bulk.as_mut()
    }

    /// Encrypts `in_out` in place and returns the tag.
    pub fn seal_in_place(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> [u8; TAG_LEN] {
        #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
        if let Some(b) = self.bulk_for(nonce, aad.len() + in_out.len()) {
            return b.seal(&ietf_nonce(nonce), aad, in_out);
        }
        let (key, n) = self.subkey(nonce);
        let tag = key
            .seal_in_place_separate_tag(n, Aad::from(aad), in_out)
            .expect("ChaCha20-Poly1305 sealing cannot fail for in-range lengths");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Verifies `tag` and decrypts `in_out` in place. On failure `in_out`
    /// must not be used (both implementations leave zeros there).
    pub fn open_in_place(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        tag: &[u8; TAG_LEN],
        in_out: &mut [u8],
    ) -> Result<()> {
        #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
        if let Some(b) = self.bulk_for(nonce, aad.len() + in_out.len()) {
            return b.open(&ietf_nonce(nonce), aad, tag, in_out);
        }
        let (key, n) = self.subkey(nonce);
        key.open_in_place_separate_tag(n, Aad::from(aad), tag, in_out)
            .map(|_| ())
            .map_err(|_| Error::Integrity)
    }
}

/// The IETF ChaCha20-Poly1305 nonce of an XChaCha20 nonce: `0^4 || n[16..24]`.
fn ietf_nonce(nonce: &[u8; NONCE_LEN]) -> [u8; 12] {
    let mut n12 = [0u8; 12];
    n12[4..].copy_from_slice(&nonce[16..]);
    n12
}

/// ChaCha20-Poly1305 through OpenSSL's EVP interface, one context per
/// subkey: each record only sets its nonce, so the key schedule and the
/// provider lookup happen once per stream.
#[cfg(all(feature = "openssl", target_arch = "x86_64"))]
mod bulk {
    use openssl::cipher::Cipher;
    use openssl::cipher_ctx::CipherCtx;

    use super::{BULK_MIN, TAG_LEN};
    use crate::error::{Error, Result};

    /// Longest record handed to OpenSSL: its lengths are C `int`s.
    const BULK_MAX: usize = 1 << 30;

    /// Whether a record of `len` bytes goes to OpenSSL: long enough, and a
    /// CPU whose AVX-512 code paths OpenSSL takes (std caches the check).
    pub(super) fn wanted(len: usize) -> bool {
        (BULK_MIN..=BULK_MAX).contains(&len)
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }

    pub(super) struct Bulk(CipherCtx);

    impl Bulk {
        /// A context under `subkey`; `None` when OpenSSL cannot make one
        /// (the caller then stays with aws-lc).
        pub(super) fn new(subkey: &[u8; 32]) -> Option<Bulk> {
            let mut ctx = CipherCtx::new().ok()?;
            ctx.encrypt_init(Some(Cipher::chacha20_poly1305()), Some(subkey), None)
                .ok()?;
            Some(Bulk(ctx))
        }

        pub(super) fn seal(
            &mut self,
            n12: &[u8; 12],
            aad: &[u8],
            in_out: &mut [u8],
        ) -> [u8; TAG_LEN] {
            // Nothing here depends on the input: a failure is OpenSSL's own
            // (out of memory), as with aws-lc's seal above.
            const FAILED: &str =
                "OpenSSL's ChaCha20-Poly1305 sealing cannot fail for in-range lengths";
            let ctx = &mut self.0;
            ctx.encrypt_init(None, None, Some(n12)).expect(FAILED);
            if !aad.is_empty() {
                ctx.cipher_update(aad, None).expect(FAILED);
            }
            let len = in_out.len();
            ctx.cipher_update_inplace(in_out, len).expect(FAILED);
            ctx.cipher_final(&mut []).expect(FAILED);
            let mut tag = [0u8; TAG_LEN];
            ctx.tag(&mut tag).expect(FAILED);
            tag
        }

        pub(super) fn open(
            &mut self,
            n12: &[u8; 12],
            aad: &[u8],
            tag: &[u8; TAG_LEN],
            in_out: &mut [u8],
        ) -> Result<()> {
            let ctx = &mut self.0;
            let ok = ctx.decrypt_init(None, None, Some(n12)).is_ok()
                && ctx.set_tag(tag).is_ok()
                && (aad.is_empty() || ctx.cipher_update(aad, None).is_ok())
                && ctx.cipher_update_inplace(in_out, in_out.len()).is_ok()
                && ctx.cipher_final(&mut []).is_ok();
            if ok {
                Ok(())
            } else {
                // OpenSSL decrypts before it checks the tag: leave nothing
                // of the unverified plaintext behind.
                in_out.fill(0);
                Err(Error::Integrity)
            }
        }
    }
}

/// Adds `i` to a 24-byte nonce read as a big-endian integer, modulo 2^192.
pub fn nonce_add(n0: &[u8; NONCE_LEN], i: u64) -> [u8; NONCE_LEN] {
    let mut out = *n0;
    let mut carry = i as u128;
    for b in out.iter_mut().rev() {
        if carry == 0 {
            break;
        }
        let sum = *b as u128 + (carry & 0xff);
        *b = sum as u8;
        carry = (carry >> 8) + (sum >> 8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s.replace([' ', '\n'], "")).unwrap()
    }

    #[test]
    fn hchacha20_draft_vector() {
        // draft-irtf-cfrg-xchacha-03 §2.2.1
        let key: [u8; 32] =
            unhex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
                .try_into()
                .unwrap();
        let input: [u8; 16] = unhex("000000090000004a0000000031415927")
            .try_into()
            .unwrap();
        assert_eq!(
            hchacha20(&key, &input).to_vec(),
            unhex("82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc")
        );
    }

    #[test]
    fn xchacha_matches_reference_implementation() {
        use chacha20poly1305::aead::{Aead, KeyInit, Payload};
        let key = [7u8; 32];
        let nonce = [9u8; 24];
        let msg = b"attack at dawn, or maybe a bit later".to_vec();
        let aad = b"header";
        let reference = chacha20poly1305::XChaCha20Poly1305::new((&key).into())
            .encrypt((&nonce).into(), Payload { msg: &msg, aad })
            .unwrap();
        let mut buf = msg.clone();
        let mut x = XChaCha::new(&key);
        let tag = x.seal_in_place(&nonce, aad, &mut buf);
        assert_eq!([buf.clone(), tag.to_vec()].concat(), reference);
        x.open_in_place(&nonce, aad, &tag, &mut buf).unwrap();
        assert_eq!(buf, msg);
        let mut bad = tag;
        bad[0] ^= 1;
        assert_eq!(
            x.open_in_place(&nonce, aad, &bad, &mut buf),
            Err(Error::Integrity)
        );
    }

    fn reference_seal(key: &[u8; 32], nonce: &[u8; 24], aad: &[u8], msg: &[u8]) -> Vec<u8> {
        use chacha20poly1305::aead::{Aead, KeyInit, Payload};
        chacha20poly1305::XChaCha20Poly1305::new(key.into())
            .encrypt(nonce.into(), Payload { msg, aad })
            .unwrap()
    }

    /// Records on either side of [`BULK_MIN`] (OpenSSL's side where this CPU
    /// has AVX-512 and the feature is on, aws-lc's otherwise) give
    /// RustCrypto's bytes and refuse every change, in any order of sealing
    /// and opening on one cipher, across a change of the nonce prefix.
    #[test]
    fn long_and_short_records_match_the_reference_and_refuse_changes() {
        let key = [0x42u8; 32];
        let mut x = XChaCha::new(&key);
        let sizes = [
            0,
            100,
            1024,
            BULK_MIN - 1,
            BULK_MIN,
            BULK_MIN + 1,
            16 * 1024,
            70_001,
        ];
        for (i, &len) in sizes.iter().enumerate() {
            // The last: a CLEAR record's shape, its payload in the
            // associated data (spec/split-serving.md).
            let long_aad = vec![0x5a; BULK_MIN + 7];
            for aad in [
                &b""[..],
                &b"outer head and record header"[..],
                &long_aad[..],
            ] {
                let mut nonce = [0u8; 24];
                nonce[0] = (i % 3) as u8; // the prefix changes now and then
                nonce[23] = i as u8;
                let msg: Vec<u8> = (0..len).map(|j| (j * 31 + i) as u8).collect();
                let mut buf = msg.clone();
                let tag = x.seal_in_place(&nonce, aad, &mut buf);
                let want = reference_seal(&key, &nonce, aad, &msg);
                assert_eq!([buf.clone(), tag.to_vec()].concat(), want, "len {len}");

                let mut opened = buf.clone();
                x.open_in_place(&nonce, aad, &tag, &mut opened).unwrap();
                assert_eq!(opened, msg, "len {len}");

                // Opens a copy of `ct` that must be refused; returns what
                // the refusal left in it.
                let mut refused = |nonce: &[u8; 24], aad: &[u8], tag: &[u8; 16], ct: &[u8]| {
                    let mut c = ct.to_vec();
                    assert_eq!(
                        x.open_in_place(nonce, aad, tag, &mut c),
                        Err(Error::Integrity)
                    );
                    c
                };
                let mut bad_tag = tag;
                bad_tag[15] ^= 0x80;
                let left = refused(&nonce, aad, &bad_tag, &buf);
                assert!(
                    left.iter().all(|&b| b == 0),
                    "len {len}: unverified plaintext left"
                );
                if len > 0 {
                    let mut c = buf.clone();
                    c[len / 2] ^= 1;
                    refused(&nonce, aad, &tag, &c);
                }
                refused(&nonce, b"other", &tag, &buf);
                let mut other = nonce;
                other[20] ^= 1;
                refused(&other, aad, &tag, &buf);
                // The cipher is still good after the refusals.
                let mut c = buf.clone();
                x.open_in_place(&nonce, aad, &tag, &mut c).unwrap();
                assert_eq!(c, msg);
            }
        }
    }

    /// OpenSSL's context itself, whatever this CPU has: the same bytes as
    /// the reference, one context for many records and both directions.
    #[cfg(all(feature = "openssl", target_arch = "x86_64"))]
    #[test]
    fn openssl_context_seals_and_opens_like_the_reference() {
        let key = [0x17u8; 32];
        let nonce_prefix = [5u8; 16];
        let mut b = bulk::Bulk::new(&hchacha20(&key, &nonce_prefix)).unwrap();
        for (i, len) in [1usize, 4096, 16 * 1024, 100_000].into_iter().enumerate() {
            let mut nonce = [0u8; 24];
            nonce[..16].copy_from_slice(&nonce_prefix);
            nonce[23] = i as u8;
            let msg = vec![i as u8; len];
            let mut buf = msg.clone();
            let tag = b.seal(&ietf_nonce(&nonce), b"ad", &mut buf);
            assert_eq!(
                [buf.clone(), tag.to_vec()].concat(),
                reference_seal(&key, &nonce, b"ad", &msg)
            );
            let mut bad = tag;
            bad[0] ^= 1;
            let mut c = buf.clone();
            assert_eq!(
                b.open(&ietf_nonce(&nonce), b"ad", &bad, &mut c),
                Err(Error::Integrity)
            );
            assert!(
                c.iter().all(|&x| x == 0),
                "unverified plaintext left behind"
            );
            b.open(&ietf_nonce(&nonce), b"ad", &tag, &mut buf).unwrap();
            assert_eq!(buf, msg);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// Any length up to a long record, any associated data, any one
        /// flipped bit: the reference's bytes, and a refusal of the change
        /// (whichever implementation the length goes to).
        #[test]
        fn any_record_matches_the_reference_and_refuses_a_flipped_bit(
            len in 0usize..(BULK_MIN * 5),
            aad in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            seed in proptest::prelude::any::<u8>(),
            flip in proptest::prelude::any::<u64>(),
        ) {
            let key = [seed; 32];
            let mut nonce = [seed.wrapping_mul(3); 24];
            nonce[23] = seed;
            let msg: Vec<u8> = (0..len).map(|j| (j as u8) ^ seed).collect();
            let mut x = XChaCha::new(&key);
            let mut buf = msg.clone();
            let tag = x.seal_in_place(&nonce, &aad, &mut buf);
            proptest::prop_assert_eq!(
                [buf.clone(), tag.to_vec()].concat(),
                reference_seal(&key, &nonce, &aad, &msg)
            );
            // One bit of the ciphertext, the tag or the associated data.
            let bits = (len + TAG_LEN + aad.len()) as u64 * 8;
            let bit = (flip % bits) as usize;
            let (mut c, mut t, mut a) = (buf.clone(), tag, aad.clone());
            if bit < len * 8 {
                c[bit / 8] ^= 1 << (bit % 8);
            } else if bit < (len + TAG_LEN) * 8 {
                let b = bit - len * 8;
                t[b / 8] ^= 1 << (b % 8);
            } else {
                let b = bit - (len + TAG_LEN) * 8;
                a[b / 8] ^= 1 << (b % 8);
            }
            proptest::prop_assert_eq!(x.open_in_place(&nonce, &a, &t, &mut c), Err(Error::Integrity));
            x.open_in_place(&nonce, &aad, &tag, &mut buf).unwrap();
            proptest::prop_assert_eq!(buf, msg);
        }
    }

    #[test]
    fn nonce_addition_wraps_and_carries() {
        let mut n = [0u8; 24];
        n[23] = 0xff;
        let m = nonce_add(&n, 1);
        assert_eq!(m[22..], [1, 0]);
        assert_eq!(nonce_add(&[0xff; 24], 1), [0u8; 24]);
        let mut n = [0u8; 24];
        n[16..].copy_from_slice(&[0xff; 8]);
        let m = nonce_add(&n, 2);
        assert_eq!(m[15], 1);
        assert_eq!(m[23], 1);
        assert_eq!(nonce_add(&[0xff; 24], u64::MAX)[23], 0xfe);
    }

    /// The parts of a keyed hash form one stream (the strike register's
    /// `kid || n0` and the session cache's `kid || client` rely on it), and
    /// the seed is the key.
    #[test]
    fn sip_key_hashes_its_parts_as_one_stream() {
        let k = SipKey::from_seed([7; 16]);
        let whole = k.hash(&[b"0123456789abcdef0123456789"]);
        assert_eq!(k.hash(&[b"0123456789", b"abcdef0123456789"]), whole);
        assert_eq!(k.hash(&[b"0123456789abcdef", b"", b"0123456789"]), whole);
        assert_ne!(
            SipKey::from_seed([8; 16]).hash(&[b"0123456789abcdef0123456789"]),
            whole
        );
        assert_eq!(format!("{k:?}"), "SipKey(..)");
    }
}
