//! Vectors for provenance certificates (spec/asap.md §2–§4), written to
//! `vectors/provenance/` so that runners of the v1 wire format, which do not
//! implement this project extension, do not meet an unknown kind.

use std::net::IpAddr;

use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
use httpcrypt_proto::{b64, Error};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

const KIND: &str = "provenance_verify";

fn key() -> ProvenanceKey {
    ProvenanceKey::from_parts(bytes("pc-key-id"), bytes("pc-key-secret"))
}

fn server() -> ServerId {
    ServerId(bytes("pc-server"))
}

fn input(
    text: &str,
    k: &ProvenanceKey,
    secret: [u8; 32],
    peer: &str,
    srv: ServerId,
    now: u64,
) -> Value {
    json!({
        "key_id": hx(k.id()),
        "secret": hx(secret),
        "text": text,
        "peer": peer,
        "server": hx(srv.0),
        "now": now,
    })
}

fn positive(name: &str, description: &str, addr: &str, peer: &str, now: u64) -> Case {
    let k = key();
    let a: IpAddr = addr.parse().expect("address");
    let text = provenance::issue_text(&k, a, server(), 1_700_000_000, 600);
    let c = provenance::verify(
        text.as_bytes(),
        &[key()],
        peer.parse().expect("peer"),
        server(),
        now,
    )
    .expect("positive case verifies");
    Case::ok(
        KIND,
        name,
        description,
        input(&text, &k, bytes("pc-key-secret"), peer, server(), now),
        json!({
            "hex": hx(b64::decode(text.as_bytes()).expect("b64")),
            "address": c.address.to_string(),
            "issued": c.issued,
            "lifetime": c.lifetime,
        }),
    )
}

fn negative(
    name: &str,
    description: &str,
    text: &str,
    peer: &str,
    srv: ServerId,
    now: u64,
    secret: [u8; 32],
    want: Error,
) -> Case {
    let k = ProvenanceKey::from_parts(key().id(), secret);
    check(
        name,
        provenance::verify(
            text.as_bytes(),
            &[ProvenanceKey::from_parts(key().id(), secret)],
            peer.parse().expect("peer"),
            srv,
            now,
        ),
        &want,
    );
    Case::err(
        KIND,
        name,
        description,
        input(text, &k, secret, peer, srv, now),
        want,
    )
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let t0 = 1_700_000_000;
    v.push(positive(
        "pc-v4",
        "an IPv4 certificate at its issue time",
        "192.0.2.7",
        "192.0.2.7",
        t0,
    ));
    v.push(positive(
        "pc-v4-mapped-peer",
        "the peer as an IPv4-mapped IPv6 address",
        "192.0.2.7",
        "::ffff:192.0.2.7",
        t0 + 600,
    ));
    v.push(positive(
        "pc-v6",
        "an IPv6 certificate, last valid second",
        "2001:db8::7",
        "2001:db8::7",
        t0 + 600,
    ));
    let secret: [u8; 32] = bytes("pc-key-secret");
    let good = provenance::issue_text(&key(), "192.0.2.7".parse().expect("ip"), server(), t0, 600);
    let raw = b64::decode(good.as_bytes()).expect("b64");
    let p = "192.0.2.7";
    v.push(negative(
        "pc-expired",
        "one second after issued + lifetime",
        &good,
        p,
        server(),
        t0 + 601,
        secret,
        Error::NotValid,
    ));
    v.push(negative(
        "pc-future",
        "issued more than 30 s ahead of the verifier's clock",
        &good,
        p,
        server(),
        t0 - 31,
        secret,
        Error::NotValid,
    ));
    v.push(negative(
        "pc-other-address",
        "presented from another address (spoofed source or a moved client)",
        &good,
        "192.0.2.8",
        server(),
        t0,
        secret,
        Error::WrongAddress,
    ));
    v.push(negative(
        "pc-other-server",
        "issued for another server",
        &good,
        p,
        ServerId(bytes("pc-other-server")),
        t0,
        secret,
        Error::WrongServer,
    ));
    v.push(negative(
        "pc-wrong-secret",
        "verified under another secret with the same key ID",
        &good,
        p,
        server(),
        t0,
        bytes("pc-other-secret"),
        Error::BadSignature,
    ));
    let mut other_id = raw.clone();
    other_id[1] ^= 0xff;
    v.push(negative(
        "pc-unknown-key",
        "a key ID the verifier does not hold",
        &b64::encode(&other_id),
        p,
        server(),
        t0,
        secret,
        Error::UnknownKey,
    ));
    for (at, what) in [
        (0usize, "version"),
        (5, "family"),
        (6, "address"),
        (10, "server"),
        (18, "issued"),
        (26, "lifetime"),
        (30, "tag"),
    ] {
        let mut m = raw.clone();
        m[at] ^= 0x01;
        let want = match at {
            0 | 5 => Error::BadCertificate,
            _ => Error::BadSignature,
        };
        v.push(negative(
            &format!("pc-flip-{what}"),
            &format!("one bit of the {what} flipped"),
            &b64::encode(&m),
            p,
            server(),
            t0,
            secret,
            want,
        ));
    }
    for cut in [0usize, 1, 9, 30, 45] {
        v.push(negative(
            &format!("pc-truncated-{cut}"),
            &format!("only the first {cut} bytes"),
            &b64::encode(&raw[..cut]),
            p,
            server(),
            t0,
            secret,
            Error::Truncated,
        ));
    }
    let mut long = raw.clone();
    long.push(0);
    v.push(negative(
        "pc-trailing",
        "one byte after the tag",
        &b64::encode(&long),
        p,
        server(),
        t0,
        secret,
        Error::TrailingData,
    ));
    v.push(negative(
        "pc-bad-base64",
        "padding is not base64url",
        &format!("{good}=="),
        p,
        server(),
        t0,
        secret,
        Error::BadBase64,
    ));
    v.push(negative(
        "pc-too-long",
        "text longer than any certificate",
        &"A".repeat(84),
        p,
        server(),
        t0,
        secret,
        Error::BadCertificate,
    ));
    let mut mapped = Vec::new();
    mapped.extend_from_slice(&raw[..5]);
    mapped.push(6);
    let v6: std::net::Ipv6Addr = "::ffff:192.0.2.7".parse().expect("ip");
    mapped.extend_from_slice(&v6.octets());
    mapped.extend_from_slice(&raw[10..]);
    v.push(negative(
        "pc-mapped-family-6",
        "an IPv4-mapped address sent as family 6",
        &b64::encode(&mapped),
        p,
        server(),
        t0,
        secret,
        Error::BadCertificate,
    ));
    v
}
