//! The TLSA form of a key certificate (spec §6.3): `tlsa::decode` and
//! `tlsa::parse_record` on fuzz bytes read as DER.
//!
//! Input: `usage u8 | selector u8 | matching u8 | DER`.
//!
//! Asserts: errors are `bad_record` (oversize, or a record other than
//! `3 0 0`) or `bad_certificate`; `parse_record` with `3 0 0` is `decode`;
//! the key and validity of a decoded certificate are consistent; and the
//! signature covers exactly the input's `TBSCertificate` bytes: re-signing
//! the input's TBS with the fixture identity and splicing the signature in
//! gives a certificate that decodes to the same statement and verifies
//! (the core re-encodes the TBS it parsed and relies on DER being canonical).

#![no_main]

use httpcrypt_fuzz::{assert_errors, identity, Input};
use httpcrypt_proto::tlsa::{self, MATCHING_FULL, SELECTOR_FULL, USAGE_DANE_EE};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

/// Splits one DER TLV off the front of `b`: (whole TLV, content, rest).
fn tlv(b: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers do not occur in a certificate's outer layers
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (l, r) = rest.split_at(n);
        rest = r;
        l.iter().fold(0usize, |acc, x| (acc << 8) | usize::from(*x))
    };
    if rest.len() < len {
        return None;
    }
    let header = b.len() - rest.len();
    Some((&b[..header + len], &rest[..len], &rest[len..]))
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let (usage, selector, matching) = (input.u8(), input.u8(), input.u8());
    let der = input.rest();

    let d = tlsa::decode(der);
    assert_errors(&d, &[Error::BadRecord, Error::BadCertificate]);
    if der.len() > tlsa::MAX_DER {
        assert_eq!(d, Err(Error::BadRecord));
    }
    let r = tlsa::parse_record(usage, selector, matching, der);
    if (usage, selector, matching) == (USAGE_DANE_EE, SELECTOR_FULL, MATCHING_FULL) {
        assert_eq!(r, d, "parse_record 3 0 0 is decode");
    } else {
        assert_eq!(r, Err(Error::BadRecord), "only 3 0 0 records are read");
    }
    let rdata = tlsa::format_rdata(der);
    assert_eq!(rdata.len(), 6 + 2 * der.len());
    assert!(rdata.starts_with("3 0 0 "));

    let Ok(cert) = d else { return };
    let key = cert.key();
    assert_eq!(
        (key.serial, key.not_before, key.not_after, key.kex_public),
        (
            cert.serial,
            cert.not_before,
            cert.not_after,
            cert.kex_public
        )
    );
    for now in [
        0,
        u64::from(cert.not_before),
        u64::from(cert.not_after),
        u64::from(u32::MAX) + 1,
    ] {
        assert_eq!(cert.is_valid_at(now), key.is_valid_at(now));
    }
    let id = identity();
    assert_errors(&cert.verify(&id.public()), &[Error::BadSignature]);

    // The signed bytes are the input's TBSCertificate, byte for byte.
    let (_, outer, trailing) = tlv(der).expect("a decoded certificate is one TLV");
    assert!(trailing.is_empty(), "decode accepted trailing bytes");
    let (tbs, _, _) = tlv(outer).expect("a certificate starts with its TBS");
    let mut resigned = der.to_vec();
    let at = resigned.len() - 64;
    resigned[at..].copy_from_slice(&id.sign(tbs));
    let again = tlsa::decode(&resigned).expect("only the signature changed");
    assert_eq!(again.key(), key);
    assert_eq!(
        again.verify(&id.public()),
        Ok(()),
        "the signature does not cover the input's TBSCertificate"
    );
});
