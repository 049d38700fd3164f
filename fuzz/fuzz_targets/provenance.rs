//! ASAP provenance certificates (spec/asap.md §2, §4): `provenance::verify`,
//! `decode_unverified` and `ProvenanceKey::parse` on fuzz bytes. The gate
//! runs `verify` on the `Httpcrypt-Provenance` field of SYN data, before
//! any handshake, so it must never panic on what a spoofer sends.
//!
//! Input: `mode u8 | peer [u8; 16] | now u64 | issued u64 | lifetime u32 |
//! flip u16 | rest`. Mode bit 0: `rest` is the certificate text; else a
//! certificate issued by the fixture key for the input's fields is checked
//! whole, and with the byte at `flip` changed. Bit 1: `peer` is IPv4
//! (its first four bytes).
//!
//! Asserts: errors come from the documented set; an accepted certificate
//! names the peer and the server, is valid at `now`, and is exactly what
//! the key issues for its claims; `decode_unverified` agrees with `verify`;
//! a changed byte never verifies; a parsed provenance key formats back to
//! the same key.

#![no_main]

use std::net::IpAddr;

use httpcrypt_fuzz::{assert_errors, Input};
use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
use httpcrypt_proto::{b64, Error};
use libfuzzer_sys::fuzz_target;

const VERIFY_ERRORS: &[Error] = &[
    Error::BadCertificate,
    Error::BadBase64,
    Error::Truncated,
    Error::TrailingData,
    Error::UnknownKey,
    Error::BadSignature,
    Error::NotValid,
    Error::WrongAddress,
    Error::WrongServer,
];

fuzz_target!(|data: &[u8]| {
    let key = ProvenanceKey::from_parts([1, 2, 3, 4], [7; 32]);
    let server = ServerId([9; 8]);
    let mut input = Input::new(data);
    let mode = input.u8();
    let raw: [u8; 16] = input.array();
    let peer = if mode & 2 != 0 {
        IpAddr::from([raw[0], raw[1], raw[2], raw[3]])
    } else {
        IpAddr::from(raw)
    };
    let now = input.u64();
    let issued = input.u64();
    let lifetime = input.u32();
    let flip = usize::from(input.u16());
    let rest = input.rest();

    let check = |text: &[u8]| -> Result<provenance::Claims, Error> {
        let v = provenance::verify(text, std::slice::from_ref(&key), peer, server, now);
        assert_errors(&v, VERIFY_ERRORS);
        if let Ok(bytes) = b64::decode(text) {
            let u = provenance::decode_unverified(&bytes);
            assert_errors(
                &u,
                &[Error::BadCertificate, Error::Truncated, Error::TrailingData],
            );
            if let Ok(c) = &v {
                assert_eq!(u.as_ref(), Ok(c), "decode_unverified disagrees with verify");
                let again = provenance::issue(&key, c.address, c.server, c.issued, c.lifetime);
                assert_eq!(
                    again, bytes,
                    "an accepted certificate is what the key issues"
                );
            }
        }
        if let Ok(c) = &v {
            assert_eq!(c.address, provenance::canonical(peer));
            assert_eq!(c.server, server);
            assert!(c.issued <= now.saturating_add(provenance::MAX_SKEW) && now <= c.expires());
        }
        v
    };

    if mode & 1 != 0 {
        let _ = check(rest);
        if let Ok(text) = std::str::from_utf8(rest) {
            let k = ProvenanceKey::parse(text);
            assert_errors(&k, &[Error::BadKeypair, Error::BadBase64]);
            if let Ok(k) = k {
                let again = ProvenanceKey::parse(&k.format()).expect("a formatted key parses");
                assert_eq!(again.id(), k.id());
                assert_eq!(again.format().as_str(), k.format().as_str());
            }
        }
        return;
    }
    let bytes = provenance::issue(&key, peer, server, issued, lifetime);
    let text = b64::encode(&bytes);
    let whole = check(text.as_bytes());
    let fresh = issued <= now.saturating_add(provenance::MAX_SKEW)
        && now <= issued.saturating_add(u64::from(lifetime.min(provenance::MAX_LIFETIME)));
    assert_eq!(whole.is_ok(), fresh, "{whole:?}");
    let mut changed = bytes.clone();
    let at = flip % changed.len();
    changed[at] ^= 1 << (flip / changed.len() % 8);
    let v = check(b64::encode(&changed).as_bytes());
    assert!(v.is_err(), "a changed certificate verified");
});
