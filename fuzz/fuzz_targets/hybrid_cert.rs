//! Suite-2 certificates and their forms (spec/hybrid.md H2, H4):
//! `HybridCert::decode`, `AnyCert::decode` and `AnyCert::from_text`,
//! `hybrid::cert::parse_cert_list` (both suites and key texts) and
//! `hybrid::cert::parse_aaaa` (the input read as 16-byte addresses), all on
//! the same input.
//!
//! Asserts: errors come from each parser's own set; `AnyCert` dispatches on
//! the suite byte and takes exactly 118 bytes for suite 1 and 150 for suite
//! 2; every canonical form re-encodes byte for byte; a parsed list has one
//! entry per non-blank line; verification under the fixture identity holds
//! only for certificates naming its signer.

#![no_main]

use httpcrypt_fuzz::{assert_errors, identity};
use httpcrypt_proto::cert::CERT_LEN;
use httpcrypt_proto::hybrid::cert::{self as hcert, HybridCert, HYBRID_CERT_LEN};
use httpcrypt_proto::hybrid::AnyCert;
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let id = identity().public();

    let h = HybridCert::decode(data);
    assert_errors(&h, &[Error::BadCertificate]);
    assert_eq!(
        h.is_ok(),
        data.len() == HYBRID_CERT_LEN && matches!(data[..2], [1 | 2, 2]),
        "decode accepts exactly versions 1 and 2, suite 2, 150 bytes"
    );
    if let Ok(c) = &h {
        assert_eq!(c.encode()[..], data[..], "decode/encode");
        let v = c.verify(&id);
        assert_errors(&v, &[Error::BadSignature]);
        if v.is_ok() {
            assert_eq!(c.signer, id.signer_id());
        }
    }

    let any = AnyCert::decode(data);
    assert_errors(&any, &[Error::BadCertificate]);
    match &any {
        Ok(AnyCert::Classical(c)) => {
            assert_eq!(data.len(), CERT_LEN);
            assert_eq!(c.encode()[..], data[..]);
        }
        Ok(AnyCert::Hybrid(c)) => {
            assert_eq!(data.len(), HYBRID_CERT_LEN);
            assert_eq!(c.encode()[..], data[..]);
        }
        Err(_) => {}
    }

    if let Ok(text) = std::str::from_utf8(data) {
        let t = AnyCert::from_text(text);
        assert_errors(&t, &[Error::BadCertificate, Error::BadBase64]);
        if let Ok(c) = &t {
            assert_eq!(c.to_text(), text, "from_text/to_text");
        }
    }

    let list = hcert::parse_cert_list(data);
    assert_errors(&list, &[Error::BadCertificate, Error::BadBase64]);
    if let Ok(l) = &list {
        let lines = data
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty() && *l != b"\r")
            .count();
        assert_eq!(l.certs.len() + l.kems.len(), lines, "one entry per line");
        for c in l.hybrid() {
            if let Some(k) = l.kem_for(c) {
                assert_eq!(k.check(c), Ok(()));
            }
        }
    }

    let addrs: Vec<[u8; 16]> = data
        .chunks_exact(16)
        .map(|a| a.try_into().expect("16-byte chunk"))
        .collect();
    let aaaa = hcert::parse_aaaa(&addrs);
    assert_errors(&aaaa, &[Error::BadRecord, Error::BadCertificate]);
    if let Ok(c) = &aaaa {
        let mut sorted = addrs.clone();
        sorted.sort_by_key(|a| a[1]);
        assert_eq!(hcert::format_aaaa(c).to_vec(), sorted, "parse/format");
    }
});
