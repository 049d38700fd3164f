//! ML-KEM encapsulation key texts (spec/hybrid.md H2): `KemPublic::from_text`
//! on the input as text and `KemPublic::from_bytes` on the raw input.
//!
//! Asserts: errors come from the parser's own set; only 1,184-byte keys
//! that pass the FIPS 203 modulus check parse; a parsed key re-formats to
//! the same text and bytes; `check` against the fixture certificate fails
//! with `kem_mismatch` unless the hashes match; encapsulation to any parsed
//! key works and the X-Wing agreement from it is deterministic.

#![no_main]

use httpcrypt_fuzz::assert_errors;
use httpcrypt_fuzz::hybrid_fixture;
use httpcrypt_proto::hybrid::{Encapsulation, KemPublic, ENCAPSULATION_KEY_LEN};
use httpcrypt_proto::keys::KexSecret;
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (cert, _) = hybrid_fixture();
    if let Ok(text) = std::str::from_utf8(data) {
        let k = KemPublic::from_text(text);
        assert_errors(&k, &[Error::BadCertificate, Error::BadBase64]);
        if let Ok(k) = &k {
            assert_eq!(k.to_text(), text, "from_text/to_text");
        }
    }
    let k = KemPublic::from_bytes(data);
    assert_errors(&k, &[Error::BadCertificate]);
    if let Ok(k) = &k {
        assert_eq!(data.len(), ENCAPSULATION_KEY_LEN);
        assert_eq!(&k.as_bytes()[..], data);
        let c = k.check(&cert);
        assert_errors(&c, &[Error::KemMismatch]);
        assert_eq!(c.is_ok(), k.hash() == cert.kem_hash);
        let client = KexSecret::from_bytes([9; 32]);
        let (ct, ss) = k.encapsulate_with(&[3; 32]);
        let (ct2, ss2) = k.encapsulate_with(&[3; 32]);
        assert_eq!(
            (ct.clone(), *ss),
            (ct2, *ss2),
            "encapsulation is deterministic"
        );
        let e = Encapsulation::from_parts(&cert.kex_public, &client, ct, &ss);
        assert!(e.is_ok(), "the fixture kex key has no small order");
    }
});
