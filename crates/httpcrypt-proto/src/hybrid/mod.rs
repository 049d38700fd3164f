//! Suite 2, the hybrid key agreement (spec/hybrid.md): X25519 and
//! ML-KEM-768 (FIPS 203) joined by X-Wing's combiner, so that a session key
//! stays secret while either problem stays hard.
//!
//! - this file: the ML-KEM keys ([`KemSecret`], [`KemPublic`] and its
//!   `hck1 ` text), the combiner and both sides of the agreement
//!   ([`decapsulate`] for the server, [`Encapsulation`] for the client);
//! - [`cert`]: suite-2 certificates ([`HybridCert`]), lists holding both
//!   suites, the eleven-address AAAA form;
//! - [`exchange`]: one hybrid request from each side, composed from the v1
//!   accept and prepare paths with the hybrid session key.
//!
//! ML-KEM itself comes from libraries: key generation from the 64-byte seed
//! `d || z` and encapsulation with caller-supplied randomness from RustCrypto
//! `ml-kem`, decapsulation from `aws-lc-rs` (its expanded 2,400-byte key is
//! made from the seed once per key). X25519 is v1's; SHA3 and SHAKE are the
//! `sha3` crate's. The glue written here is the combiner (one SHA3-256) and
//! the seed expansion of the X-Wing draft's test vectors (SHAKE-256).

pub mod cert;
pub mod exchange;

use aws_lc_rs::kem::{AlgorithmId, DecapsulationKey, ML_KEM_768};
use ml_kem::array::Array;
use ml_kem::kem::KeyExport as _;
#[allow(deprecated)]
use ml_kem::ExpandedKeyEncoding as _;
use rand_core::CryptoRngCore;
use sha3::digest::{ExtendableOutput, Update, XofReader};
use zeroize::{Zeroize, Zeroizing};

use crate::b64;
use crate::error::{Error, Result};
use crate::keys::{KexPublic, KexSecret, SessionKey};
use crate::suite::sha3_256;

pub use cert::{AnyCert, HybridCert};
pub use exchange::{HybridKeys, HybridRequest, HybridServerKey};

/// Length of an ML-KEM-768 ciphertext (`ct_M`).
pub const CIPHERTEXT_LEN: usize = 1088;
/// Length of an ML-KEM-768 encapsulation key (`ek_M`).
pub const ENCAPSULATION_KEY_LEN: usize = 1184;
/// Length of an ML-KEM seed `d || z` (FIPS 203 `KeyGen_internal` inputs).
pub const KEM_SEED_LEN: usize = 64;
/// Length of the FIPS 203 expanded decapsulation key of ML-KEM-768.
pub const EXPANDED_KEY_LEN: usize = 2400;
/// X-Wing's label, the six ASCII characters `\.//^\`.
pub const XWING_LABEL: &[u8; 6] = b"\\.//^\\";
/// Prefix of the encapsulation key text.
pub const KEM_TEXT_PREFIX: &str = "hck1 ";
/// Length of the encapsulation key text (1,584 characters).
pub const KEM_TEXT_LEN: usize = KEM_TEXT_PREFIX.len() + b64::encoded_len(ENCAPSULATION_KEY_LEN);

/// `SHA3-256(ek_M)`: what a suite-2 certificate signs in place of the
/// 1,184-byte key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KemHash(pub [u8; 32]);

impl core::fmt::Debug for KemHash {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KemHash({})", b64::encode(&self.0))
    }
}

type MlKemEk = ml_kem::ml_kem_768::EncapsulationKey;

/// An ML-KEM-768 encapsulation key, checked (FIPS 203 §7.2 modulus check)
/// and with its hash computed once.
#[derive(Clone)]
pub struct KemPublic {
    bytes: Box<[u8; ENCAPSULATION_KEY_LEN]>,
    hash: KemHash,
    key: Box<MlKemEk>,
}

impl KemPublic {
    /// The 1,184 key bytes; another length, or a key that fails the
    /// modulus check, is `bad_certificate`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let array: [u8; ENCAPSULATION_KEY_LEN] =
            bytes.try_into().map_err(|_| Error::BadCertificate)?;
        let key = MlKemEk::new(&Array::from(array)).map_err(|_| Error::BadCertificate)?;
        Ok(KemPublic {
            hash: KemHash(sha3_256(&[&array])),
            bytes: Box::new(array),
            key: Box::new(key),
        })
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8; ENCAPSULATION_KEY_LEN] {
        &self.bytes
    }

    /// `SHA3-256(ek_M)`.
    pub fn hash(&self) -> KemHash {
        self.hash
    }

    /// `hck1 {b64u(ek_M)}` (spec/hybrid.md H2).
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(KEM_TEXT_LEN);
        s.push_str(KEM_TEXT_PREFIX);
        b64::encode_to(&self.bytes[..], &mut s);
        s
    }

    /// Parses the text form exactly: the prefix (else `bad_certificate`),
    /// canonical base64url (else `bad_base64`), 1,184 bytes (else
    /// `bad_certificate`).
    pub fn from_text(text: &str) -> Result<Self> {
        let body = text
            .strip_prefix(KEM_TEXT_PREFIX)
            .ok_or(Error::BadCertificate)?;
        Self::from_bytes(&b64::decode(body.as_bytes())?)
    }

    /// `kem_mismatch` unless this is the key `cert` signs the hash of.
    pub fn check(&self, cert: &HybridCert) -> Result<()> {
        if self.hash == cert.kem_hash {
            Ok(())
        } else {
            Err(Error::KemMismatch)
        }
    }

    /// ML-KEM-768 encapsulation with the 32 random bytes `m` (FIPS 203
    /// `Encaps_internal`): the ciphertext and the shared secret.
    pub fn encapsulate_with(
        &self,
        m: &[u8; 32],
    ) -> (Box<[u8; CIPHERTEXT_LEN]>, Zeroizing<[u8; 32]>) {
        let (ct, mut ss) = self.key.encapsulate_deterministic(&Array::from(*m));
        let mut ct_out = Box::new([0u8; CIPHERTEXT_LEN]);
        ct_out.copy_from_slice(ct.as_slice());
        let mut ss_out = Zeroizing::new([0u8; 32]);
        ss_out.copy_from_slice(ss.as_slice());
        ss.as_mut_slice().zeroize();
        (ct_out, ss_out)
    }
}

impl core::fmt::Debug for KemPublic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KemPublic({:?})", self.hash)
    }
}

impl PartialEq for KemPublic {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for KemPublic {}

/// A server's ML-KEM-768 key pair, made from its 64-byte seed `d || z`.
/// It may outlive several kex keys (spec/hybrid.md H4), so servers share it
/// (`Arc`) between the [`HybridServerKey`]s that name it.
pub struct KemSecret {
    seed: Zeroizing<[u8; KEM_SEED_LEN]>,
    dk: DecapsulationKey<AlgorithmId>,
    public: KemPublic,
}

impl KemSecret {
    /// The key pair of `seed` (FIPS 203 `KeyGen_internal(d, z)`).
    pub fn from_seed(seed: [u8; KEM_SEED_LEN]) -> Self {
        let seed = Zeroizing::new(seed);
        let ml = ml_kem::ml_kem_768::DecapsulationKey::from_seed(Array::from(*seed));
        #[allow(deprecated)]
        let mut expanded = ml.to_expanded_bytes();
        let dk = DecapsulationKey::new(&ML_KEM_768, expanded.as_slice())
            .expect("an expanded ML-KEM-768 key made from a seed has the algorithm's size");
        expanded.as_mut_slice().zeroize();
        let public = KemPublic::from_bytes(ml.encapsulation_key().to_bytes().as_slice())
            .expect("a key made from a seed passes the modulus check");
        KemSecret { seed, dk, public }
    }

    /// A fresh key pair from the caller's RNG.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut seed = Zeroizing::new([0u8; KEM_SEED_LEN]);
        rng.fill_bytes(&mut seed[..]);
        Self::from_seed(*seed)
    }

    /// The seed, for storage.
    pub fn to_seed(&self) -> Zeroizing<[u8; KEM_SEED_LEN]> {
        self.seed.clone()
    }

    /// The encapsulation key.
    pub fn public(&self) -> &KemPublic {
        &self.public
    }

    /// ML-KEM-768 decapsulation of exactly 1,088 bytes (`bad_ciphertext`
    /// otherwise). A ciphertext made for another key yields an unrelated
    /// secret (implicit rejection), never an error.
    pub fn decapsulate(&self, ct: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        if ct.len() != CIPHERTEXT_LEN {
            return Err(Error::BadCiphertext);
        }
        let ss = self
            .dk
            .decapsulate(ct.into())
            .map_err(|_| Error::BadCiphertext)?;
        let mut out = Zeroizing::new([0u8; 32]);
        if ss.as_ref().len() != 32 {
            return Err(Error::BadCiphertext);
        }
        out.copy_from_slice(ss.as_ref());
        Ok(out)
    }
}

impl core::fmt::Debug for KemSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KemSecret({:?})", self.public.hash)
    }
}

/// X-Wing's combiner: `SHA3-256(ss_M || ss_X || ct_X || pk_X || XWingLabel)`
/// (spec/hybrid.md H1).
pub fn combine(ss_m: &[u8; 32], ss_x: &[u8; 32], ct_x: &KexPublic, pk_x: &KexPublic) -> SessionKey {
    let mut k = sha3_256(&[ss_m, ss_x, &ct_x.0, &pk_x.0, XWING_LABEL]);
    let key = SessionKey::from_bytes(k);
    k.zeroize();
    key
}

/// The server's half of the agreement: the ciphertext's length first
/// (`bad_ciphertext`), then X25519 with the client's key `ct_x`
/// (`small_order` on an all-zero result), then ML-KEM decapsulation and
/// the combiner.
pub fn decapsulate(
    kex: &KexSecret,
    kem: &KemSecret,
    ct_x: &KexPublic,
    ct_m: &[u8],
) -> Result<SessionKey> {
    if ct_m.len() < CIPHERTEXT_LEN {
        return Err(Error::BadCiphertext);
    }
    let ss_x = kex.agree_raw(ct_x)?;
    let ss_m = kem.decapsulate(&ct_m[..CIPHERTEXT_LEN])?;
    Ok(combine(&ss_m, &ss_x, ct_x, kex.public()))
}

/// The client's half of one hybrid agreement: its X25519 public key (the
/// cookie value, `ct_X`), the ML-KEM ciphertext (the first bytes of the
/// body) and the session key.
pub struct Encapsulation {
    /// `ct_X`, the client's X25519 public key.
    pub ct_x: KexPublic,
    /// `ct_M`, the ML-KEM ciphertext.
    pub ct_m: Box<[u8; CIPHERTEXT_LEN]>,
    key: SessionKey,
}

impl Encapsulation {
    /// Encapsulates to the verified certificate `cert` and its key text
    /// `ek` (`kem_mismatch` when they do not belong together), with the
    /// client's X25519 key `client` (fresh per request) and ML-KEM
    /// randomness from `rng`.
    pub fn new(
        cert: &HybridCert,
        ek: &KemPublic,
        client: &KexSecret,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Self> {
        ek.check(cert)?;
        let mut m = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut m[..]);
        let (ct_m, ss_m) = ek.encapsulate_with(&m);
        Self::from_parts(&cert.kex_public, client, ct_m, &ss_m)
    }

    /// The deterministic form: an explicit ML-KEM encapsulation
    /// `(ct_m, ss_m)` (as test vectors state it), combined with X25519
    /// between `client` and the server's `kex_public` (`small_order` on an
    /// all-zero result).
    pub fn from_parts(
        kex_public: &KexPublic,
        client: &KexSecret,
        ct_m: Box<[u8; CIPHERTEXT_LEN]>,
        ss_m: &[u8; 32],
    ) -> Result<Self> {
        let ss_x = client.agree_raw(kex_public)?;
        let ct_x = *client.public();
        let key = combine(ss_m, &ss_x, &ct_x, kex_public);
        Ok(Encapsulation { ct_x, ct_m, key })
    }

    /// The session key `k`.
    pub fn session_key(&self) -> &SessionKey {
        &self.key
    }
}

impl core::fmt::Debug for Encapsulation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Encapsulation({:?})", self.ct_x)
    }
}

/// The X-Wing draft's key generation from a 32-byte seed, which this
/// protocol does not use (its two halves are kept apart, spec/hybrid.md
/// H1) but which its test vectors need: `SHAKE-256(seed)`, the first 64
/// bytes the ML-KEM seed, the next 32 the X25519 secret.
pub fn xwing_expand_seed(seed: &[u8; 32]) -> (KemSecret, KexSecret) {
    let mut xof = sha3::Shake256::default();
    xof.update(seed);
    let mut reader = xof.finalize_xof();
    let mut kem_seed = Zeroizing::new([0u8; KEM_SEED_LEN]);
    reader.read(&mut kem_seed[..]);
    let mut x = Zeroizing::new([0u8; 32]);
    reader.read(&mut x[..]);
    (KemSecret::from_seed(*kem_seed), KexSecret::from_bytes(*x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_meets_in_the_middle() {
        let kem = KemSecret::from_seed([7; 64]);
        let kex = KexSecret::from_bytes([8; 32]);
        let client = KexSecret::from_bytes([9; 32]);
        let (ct_m, ss_m) = kem.public().encapsulate_with(&[1; 32]);
        let e = Encapsulation::from_parts(kex.public(), &client, ct_m, &ss_m).unwrap();
        let k = decapsulate(&kex, &kem, &e.ct_x, &e.ct_m[..]).unwrap();
        assert_eq!(&k, e.session_key());
        // Another ML-KEM key decapsulates to another secret (implicit rejection).
        let other = KemSecret::from_seed([6; 64]);
        assert_ne!(decapsulate(&kex, &other, &e.ct_x, &e.ct_m[..]).unwrap(), k);
        assert_eq!(
            decapsulate(&kex, &kem, &e.ct_x, &e.ct_m[..1087]).err(),
            Some(Error::BadCiphertext)
        );
        assert_eq!(
            decapsulate(&kex, &kem, &KexPublic([0; 32]), &e.ct_m[..]).err(),
            Some(Error::SmallOrder)
        );
        assert!(!format!("{kem:?}{e:?}").contains("0707"));
    }

    #[test]
    fn get_form_counts_the_ciphertext() {
        let m = crate::outer::Mount::new("/hc").unwrap();
        assert!(HybridRequest::fits_get_form(&m, 200));
        assert!(!HybridRequest::fits_get_form(&m, 400));
        assert!(crate::client::fits_get_form(&m, 400));
    }

    #[test]
    fn key_text_round_trip() {
        let kem = KemSecret::from_seed([3; 64]);
        let t = kem.public().to_text();
        assert_eq!(t.len(), KEM_TEXT_LEN);
        assert_eq!(KEM_TEXT_LEN, 1584);
        assert_eq!(KemPublic::from_text(&t).unwrap(), *kem.public());
        assert_eq!(
            KemPublic::from_text(&format!(
                "{KEM_TEXT_PREFIX}{}",
                b64::encode(&kem.public().as_bytes()[1..])
            ))
            .err(),
            Some(Error::BadCertificate)
        );
        assert_eq!(
            KemPublic::from_text(&t[1..]).err(),
            Some(Error::BadCertificate)
        );
        // A coefficient of q = 3329 (0x0d01) fails the modulus check.
        let mut bad = *kem.public().as_bytes();
        bad[0] = 0x01;
        bad[1] = 0x0d;
        assert_eq!(
            KemPublic::from_bytes(&bad).err(),
            Some(Error::BadCertificate)
        );
    }
}
