//! base64url (spec §2) and the X25519 key agreement, small-order points
//! included.

use httpcrypt_proto::keys::{KexPublic, KexSecret};
use httpcrypt_proto::{b64, Error};
use serde_json::json;

use crate::vectors::{bytes, check, hx, Case};

pub(super) fn b64u_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (name, raw) in [
        ("b64u-empty", &b""[..]),
        ("b64u-one", b"\xfb"),
        ("b64u-two", b"\xfb\xff"),
        ("b64u-three", b"\x00\x10\x83"),
    ] {
        let text = b64::encode(raw);
        assert_eq!(b64::decode(text.as_bytes()).unwrap(), raw);
        v.push(Case::ok(
            "b64u",
            name,
            "canonical unpadded base64url",
            json!({"text": text}),
            json!({"hex": hx(raw)}),
        ));
    }
    for (name, text, why) in [
        ("b64u-padding", "-w==", "padding characters are refused"),
        (
            "b64u-standard-alphabet",
            "+/8",
            "characters of the standard alphabet are refused",
        ),
        (
            "b64u-trailing-bits",
            "-_9",
            "non-zero unused trailing bits are refused",
        ),
        (
            "b64u-bad-length",
            "AAAAA",
            "a length of 1 mod 4 cannot occur",
        ),
        ("b64u-space", "AA A", "whitespace is refused"),
    ] {
        check(name, b64::decode(text.as_bytes()), &Error::BadBase64);
        v.push(Case::err(
            "b64u",
            name,
            why,
            json!({"text": text}),
            Error::BadBase64,
        ));
    }
    v
}

pub(super) fn kex_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for i in 0..2 {
        let a = KexSecret::from_bytes(bytes(&format!("kex-a-{i}")));
        let b = KexSecret::from_bytes(bytes(&format!("kex-b-{i}")));
        let shared = a.agree_raw(b.public()).unwrap();
        let k = a.session_key(b.public()).unwrap();
        assert_eq!(k, b.session_key(a.public()).unwrap());
        v.push(Case::ok(
            "kex",
            &format!("kex-agreement-{i}"),
            "X25519 public key, key ID = SHA3-256(public)[0..10], shared secret, k = HChaCha20(shared, 0^16)",
            json!({"secret": hx(*a.to_bytes()), "peer_public": hx(b.public().0)}),
            json!({"public": hx(a.public().0), "kid": hx(a.kid().0), "shared": hx(*shared), "session_key": hx(k.as_bytes())}),
        ));
    }
    // Small-order points (RFC 7748 §6.1 note; the usual blocklist).
    let points: [(&str, &str); 4] = [
        (
            "zero",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ),
        (
            "one",
            "0100000000000000000000000000000000000000000000000000000000000000",
        ),
        (
            "order-8",
            "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
        ),
        (
            "p-minus-1",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        ),
    ];
    let s = KexSecret::from_bytes(bytes("kex-small-order"));
    for (label, p) in points {
        let peer = KexPublic(hex::decode(p).unwrap().try_into().unwrap());
        let name = format!("kex-small-order-{label}");
        check(&name, s.session_key(&peer), &Error::SmallOrder);
        v.push(Case::err(
            "kex",
            &name,
            "an all-zero X25519 output must be refused",
            json!({"secret": hx(*s.to_bytes()), "peer_public": p}),
            Error::SmallOrder,
        ));
    }
    v
}
