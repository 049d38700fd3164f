//! Keys and their IDs (spec §2): X25519 key-exchange keys, the session key
//! derived from them, Ed25519 identity keys.
//!
//! Secret material is zeroized on drop and never printed: `Debug` shows the
//! key ID only.

use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey, X25519};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::b64;
use crate::error::{Error, Result};
use crate::suite::{hchacha20, sha3_256};

/// Length of a key ID (spec §2).
pub const KID_LEN: usize = 10;

/// `SHA3-256(server_kex_public)[0..10]`, or a ticket-key ID of the same shape.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub [u8; KID_LEN]);

impl KeyId {
    /// The key's 14-character base64url form, as used in cookie names.
    pub fn to_b64(&self) -> String {
        b64::encode(&self.0)
    }
}

impl core::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KeyId({})", self.to_b64())
    }
}

/// An X25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KexPublic(pub [u8; 32]);

impl KexPublic {
    /// The key ID of this key (spec §2).
    pub fn kid(&self) -> KeyId {
        let h = sha3_256(&[&self.0]);
        KeyId(h[..KID_LEN].try_into().expect("hash is longer than an ID"))
    }
}

impl core::fmt::Debug for KexPublic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KexPublic({})", b64::encode(&self.0))
    }
}

/// A reusable X25519 secret key (a server's rotating key, or a client's key
/// pair reused per host).
pub struct KexSecret {
    bytes: Zeroizing<[u8; 32]>,
    key: PrivateKey,
    public: KexPublic,
}

impl KexSecret {
    /// A key from 32 secret bytes (clamped by X25519 itself).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        let bytes = Zeroizing::new(bytes);
        let key = PrivateKey::from_private_key(&X25519, &bytes[..])
            .expect("any 32 bytes are an X25519 secret");
        let public = key
            .compute_public_key()
            .expect("X25519 public key computation cannot fail");
        let public = KexPublic(
            public
                .as_ref()
                .try_into()
                .expect("an X25519 public key is 32 bytes"),
        );
        KexSecret { bytes, key, public }
    }

    /// A fresh key from the caller's RNG.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut b = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut b[..]);
        Self::from_bytes(*b)
    }

    /// The secret bytes, for storage.
    pub fn to_bytes(&self) -> Zeroizing<[u8; 32]> {
        self.bytes.clone()
    }

    /// The public key.
    pub fn public(&self) -> &KexPublic {
        &self.public
    }

    /// The key ID of the public key.
    pub fn kid(&self) -> KeyId {
        self.public.kid()
    }

    /// Raw X25519 with `peer`; refuses an all-zero output (spec §1).
    pub fn agree_raw(&self, peer: &KexPublic) -> Result<Zeroizing<[u8; 32]>> {
        agreement::agree(
            &self.key,
            UnparsedPublicKey::new(&X25519, &peer.0),
            Error::SmallOrder,
            |shared| {
                let mut out = Zeroizing::new([0u8; 32]);
                if shared.len() != 32 {
                    return Err(Error::SmallOrder);
                }
                out.copy_from_slice(shared);
                if bool::from(out.ct_eq(&[0u8; 32])) {
                    return Err(Error::SmallOrder);
                }
                Ok(out)
            },
        )
    }

    /// The session key `k = HChaCha20(X25519(self, peer), 0^16)` (spec §2).
    pub fn session_key(&self, peer: &KexPublic) -> Result<SessionKey> {
        let shared = self.agree_raw(peer)?;
        Ok(SessionKey::from_shared(&shared))
    }
}

impl core::fmt::Debug for KexSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KexSecret({:?})", self.kid())
    }
}

/// The symmetric key shared by client and server for one key pairing.
#[derive(Clone)]
pub struct SessionKey(Zeroizing<[u8; 32]>);

impl SessionKey {
    /// Wraps raw key bytes (from a ticket or a cache).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        SessionKey(Zeroizing::new(bytes))
    }

    /// The session key of a raw X25519 output, `HChaCha20(shared, 0^16)`
    /// (spec §2).
    pub fn from_shared(shared: &[u8; 32]) -> Self {
        SessionKey(hchacha20(shared, &[0u8; 16]))
    }

    /// The raw key bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl core::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl PartialEq for SessionKey {
    fn eq(&self, other: &Self) -> bool {
        self.0[..].ct_eq(&other.0[..]).into()
    }
}

impl Eq for SessionKey {}

/// Length of a signer ID (spec §5).
pub const SIGNER_LEN: usize = 8;

/// An Ed25519 identity key that signs key certificates (spec §2, §5).
pub struct IdentityKey(SigningKey);

impl IdentityKey {
    /// A key from its 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        IdentityKey(SigningKey::from_bytes(&seed))
    }

    /// A fresh key from the caller's RNG.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut seed[..]);
        Self::from_seed(*seed)
    }

    /// The 32-byte seed, for storage.
    pub fn to_seed(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.0.to_bytes())
    }

    /// The public half.
    pub fn public(&self) -> IdentityPublic {
        IdentityPublic(self.0.verifying_key())
    }

    /// Ed25519 signature over `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.0.sign(msg).to_bytes()
    }

    /// The underlying signing key (for X.509 builders that sign through the
    /// `signature` traits).
    pub fn signing_key(&self) -> &SigningKey {
        &self.0
    }
}

impl core::fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IdentityKey({})", self.public().to_b64())
    }
}

/// An Ed25519 identity public key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IdentityPublic(VerifyingKey);

impl IdentityPublic {
    /// Parses 32 bytes; refuses points that are not valid Ed25519 keys.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<Self> {
        VerifyingKey::from_bytes(bytes)
            .map(IdentityPublic)
            .map_err(|_| Error::BadSignature)
    }

    /// Parses the base64url form.
    pub fn from_b64(text: &str) -> Result<Self> {
        Self::from_bytes(&b64::decode_array::<32>(text.as_bytes())?)
    }

    /// The 32 key bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The base64url form (43 characters).
    pub fn to_b64(&self) -> String {
        b64::encode(self.0.as_bytes())
    }

    /// `SHA3-256(identity_public)[0..8]` (spec §5).
    pub fn signer_id(&self) -> [u8; SIGNER_LEN] {
        sha3_256(&[self.0.as_bytes()])[..SIGNER_LEN]
            .try_into()
            .expect("hash is longer than a signer ID")
    }

    /// Strict Ed25519 verification (no malleable or small-order signatures).
    pub fn verify(&self, msg: &[u8], sig: &[u8; 64]) -> Result<()> {
        let sig = ed25519_dalek::Signature::from_bytes(sig);
        self.0
            .verify_strict(msg, &sig)
            .map_err(|_| Error::BadSignature)
    }

    /// The underlying verifying key.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.0
    }
}

impl core::fmt::Debug for IdentityPublic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IdentityPublic({})", self.to_b64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7748_x25519_and_shared_session_key() {
        // RFC 7748 §6.1
        let a: [u8; 32] =
            hex::decode("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
                .unwrap()
                .try_into()
                .unwrap();
        let b: [u8; 32] =
            hex::decode("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
                .unwrap()
                .try_into()
                .unwrap();
        let a = KexSecret::from_bytes(a);
        let b = KexSecret::from_bytes(b);
        assert_eq!(
            hex::encode(a.public().0),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
        assert_eq!(
            hex::encode(*a.agree_raw(b.public()).unwrap()),
            "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
        );
        assert_eq!(
            a.session_key(b.public()).unwrap(),
            b.session_key(a.public()).unwrap()
        );
        assert!(!format!("{a:?}").contains("77076d"));
    }

    #[test]
    fn small_order_peer_is_refused() {
        let s = KexSecret::from_bytes([3u8; 32]);
        assert_eq!(
            s.session_key(&KexPublic([0u8; 32])).err(),
            Some(Error::SmallOrder)
        );
        let mut one = [0u8; 32];
        one[0] = 1;
        assert_eq!(
            s.session_key(&KexPublic(one)).err(),
            Some(Error::SmallOrder)
        );
    }

    #[test]
    fn identity_sign_verify() {
        let id = IdentityKey::from_seed([5u8; 32]);
        let sig = id.sign(b"msg");
        id.public().verify(b"msg", &sig).unwrap();
        assert_eq!(id.public().verify(b"msh", &sig), Err(Error::BadSignature));
    }
}
