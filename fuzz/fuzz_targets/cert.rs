//! Key certificates and their DNS forms (spec §5, §6): `KeyCert::decode`,
//! `KeyCert::from_text`, `cert::parse_cert_list`, `dns::parse_txt`,
//! `dns::parse_identity_txt`, `dns::parse_aaaa` (the input read as 16-byte
//! addresses), all on the same input, plus `cert::choose` on a parsed list.
//!
//! Asserts: errors come from each parser's own set; every canonical form
//! re-encodes byte for byte (`encode`, `to_text`, `format_txt`,
//! `format_identity_txt`, `format_aaaa` sorted by the order field); a cert
//! list re-formats to a list that parses to the same certificates, one per
//! non-blank line; `choose` picks a valid certificate with the highest
//! (serial, not_before), and verification under the fixture identity holds
//! only for certificates naming its signer.

#![no_main]

use httpcrypt_fuzz::{assert_errors, identity, NOW};
use httpcrypt_proto::cert::{self, KeyCert, CERT_LEN};
use httpcrypt_proto::dns;
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let id = identity().public();

    let c = KeyCert::decode(data);
    assert_errors(&c, &[Error::BadCertificate]);
    // Version 1, or 2 for request profile 2 (spec §4.5, D28); suite 1.
    assert_eq!(
        c.is_ok(),
        data.len() == CERT_LEN && matches!(data[..2], [1 | 2, 1]),
        "decode accepts exactly versions 1 and 2, suite 1"
    );
    if let Ok(c) = &c {
        assert_eq!(c.encode()[..], data[..], "decode/encode");
        let v = c.verify(&id);
        assert_errors(&v, &[Error::BadSignature]);
        if v.is_ok() {
            assert_eq!(c.signer, id.signer_id());
        }
    }

    if let Ok(text) = std::str::from_utf8(data) {
        let t = KeyCert::from_text(text);
        assert_errors(&t, &[Error::BadCertificate, Error::BadBase64]);
        if let Ok(c) = &t {
            assert_eq!(c.to_text(), text, "from_text/to_text");
        }
    }

    let list = cert::parse_cert_list(data);
    assert_errors(&list, &[Error::BadCertificate, Error::BadBase64]);
    if let Ok(certs) = &list {
        let lines = data
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty() && *l != b"\r")
            .count();
        assert_eq!(certs.len(), lines, "one certificate per non-blank line");
        let formatted = cert::format_cert_list(certs);
        assert_eq!(
            cert::parse_cert_list(formatted.as_bytes()).as_ref(),
            Ok(certs)
        );
        for now in [NOW, 0, u64::from(u32::MAX) + 1] {
            let chosen = cert::choose(certs, now, None);
            assert_errors(&chosen, &[Error::NotValid]);
            if let Ok(best) = chosen {
                assert!(best.is_valid_at(now));
                let key = (best.serial, best.not_before);
                assert!(certs
                    .iter()
                    .filter(|c| c.is_valid_at(now))
                    .all(|c| (c.serial, c.not_before) <= key));
            } else {
                assert!(!certs.iter().any(|c| c.is_valid_at(now)));
            }
            let signed = cert::choose(certs, now, Some(&id));
            assert_errors(&signed, &[Error::NotValid, Error::BadSignature]);
            if let Ok(best) = signed {
                assert!(best.verify(&id).is_ok() && best.is_valid_at(now));
            }
        }
    }

    let txt = dns::parse_txt(data);
    assert_errors(
        &txt,
        &[Error::BadRecord, Error::BadCertificate, Error::BadBase64],
    );
    if let Ok(c) = &txt {
        assert_eq!(dns::format_txt(c).as_bytes(), data, "parse_txt/format_txt");
    }

    let ident = dns::parse_identity_txt(data);
    assert_errors(
        &ident,
        &[Error::BadRecord, Error::BadBase64, Error::BadSignature],
    );
    if let Ok(p) = &ident {
        assert_eq!(dns::format_identity_txt(p).as_bytes(), data, "identity TXT");
    }

    let addrs: Vec<[u8; 16]> = data
        .chunks_exact(16)
        .map(|a| a.try_into().expect("16-byte chunk"))
        .collect();
    let aaaa = dns::parse_aaaa(&addrs);
    assert_errors(&aaaa, &[Error::BadRecord, Error::BadCertificate]);
    if let Ok(c) = &aaaa {
        let mut sorted = addrs.clone();
        sorted.sort_by_key(|a| a[1]);
        assert_eq!(
            dns::format_aaaa(c).to_vec(),
            sorted,
            "parse_aaaa/format_aaaa"
        );
    }
});
