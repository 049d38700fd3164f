//! Suite-2 certificates and key texts, the eleven-address AAAA form, and
//! certificate lists of both suites.

use httpcrypt_proto::hybrid::cert::{self as hcert, HybridCert};
use httpcrypt_proto::hybrid::{self, KemPublic, KemSecret};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::{b64, Error, IdentityKey, KexSecret, KeyCert};
use serde_json::json;

use super::{NA, NB};
use crate::vectors::{bytes, check, hx, Case};

pub(super) fn cert_cases() -> Vec<Case> {
    let mut v = Vec::new();
    let id_seed: [u8; 32] = bytes("hybrid-cert-identity");
    let id = IdentityKey::from_seed(id_seed);
    let kex = KexSecret::from_bytes(bytes("hybrid-cert-kex"));
    let kem_seed: [u8; 64] = bytes("hybrid-cert-kem-seed");
    let kem = KemSecret::from_seed(kem_seed);
    for (n, profile) in [(0, Profile::V1), (1, Profile::Compact)] {
        let c = HybridCert::sign(
            &id,
            profile,
            7 + n,
            NB,
            NA,
            *kex.public(),
            kem.public().hash(),
        );
        v.push(Case::ok(
            "hybrid_cert",
            &format!("hybrid-cert-sign-{n}"),
            "a suite-2 certificate: the kem_hash is signed, the key ID names the pair",
            json!({"identity_seed": hx(id_seed), "version": profile.number(), "serial": c.serial, "not_before": NB, "not_after": NA, "kex_public": hx(kex.public().0), "kem_seed": hx(kem_seed)}),
            json!({
                "cert": hx(c.encode()),
                "text": c.to_text(),
                "kid": hx(c.kid().0),
                "kem_hash": hx(c.kem_hash.0),
                "kem_text": kem.public().to_text(),
                "aaaa": hcert::format_aaaa(&c).iter().map(hx).collect::<Vec<_>>(),
            }),
        ));
    }
    let c = HybridCert::sign(
        &id,
        Profile::V1,
        7,
        NB,
        NA,
        *kex.public(),
        kem.public().hash(),
    );
    let idp = hx(id.public().to_bytes());
    let verify = |name: &str,
                  why: &str,
                  text: &str,
                  kem_text: Option<&str>,
                  want: Result<(), Error>| {
        let mut input = json!({"text": text, "identity_public": idp});
        if let Some(k) = kem_text {
            input["kem_text"] = json!(k);
        }
        let got = httpcrypt_proto::hybrid::AnyCert::from_text(text).and_then(|a| {
            a.verify(&id.public())?;
            match (a, kem_text) {
                (httpcrypt_proto::hybrid::AnyCert::Hybrid(h), Some(k)) => {
                    KemPublic::from_text(k)?.check(&h)?;
                    Ok(h)
                }
                (httpcrypt_proto::hybrid::AnyCert::Hybrid(h), None) => Ok(h),
                _ => Err(Error::BadCertificate),
            }
        });
        match want {
            Ok(()) => {
                let h = got.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                Case::ok(
                    "hybrid_cert_verify",
                    name,
                    why,
                    input,
                    json!({"version": h.profile.number(), "serial": h.serial, "not_before": h.not_before, "not_after": h.not_after, "kex_public": hx(h.kex_public.0), "kem_hash": hx(h.kem_hash.0), "kid": hx(h.kid().0)}),
                )
            }
            Err(e) => {
                check(name, got, &e);
                Case::err("hybrid_cert_verify", name, why, input, e)
            }
        }
    };
    let text = c.to_text();
    let kem_text = kem.public().to_text();
    v.push(verify(
        "hybrid-cert-verify-ok",
        "a suite-2 certificate and its key text",
        &text,
        Some(&kem_text),
        Ok(()),
    ));
    let b = c.encode();
    let mut stripped = [&b[..46], &b[78..]].concat();
    stripped[1] = 1;
    let stripped_text = format!("hc1 {}", b64::encode(&stripped));
    v.push(verify(
        "hybrid-cert-stripped",
        "the suite-2 certificate turned into a 118-byte suite-1 one with the same signature",
        &stripped_text,
        None,
        Err(Error::BadSignature),
    ));
    let mut flipped = b;
    flipped[50] ^= 1;
    v.push(verify(
        "hybrid-cert-flipped-kem-hash",
        "a flipped bit of kem_hash breaks the signature",
        &format!("hc1 {}", b64::encode(&flipped)),
        None,
        Err(Error::BadSignature),
    ));
    v.push(verify(
        "hybrid-cert-suite-2-short",
        "suite byte 2 on 118 bytes: the length does not match the suite",
        &format!("hc1 {}", b64::encode(&b[..118])),
        None,
        Err(Error::BadCertificate),
    ));
    let mut long_v1 = KeyCert::sign(&id, 7, NB, NA, *kex.public())
        .encode()
        .to_vec();
    long_v1.extend_from_slice(&[0; 32]);
    v.push(verify(
        "hybrid-cert-suite-1-long",
        "suite byte 1 on 150 bytes: the length does not match the suite",
        &format!("hc1 {}", b64::encode(&long_v1)),
        None,
        Err(Error::BadCertificate),
    ));
    let mut suite3 = b;
    suite3[1] = 3;
    v.push(verify(
        "hybrid-cert-suite-3",
        "an unknown suite",
        &format!("hc1 {}", b64::encode(&suite3)),
        None,
        Err(Error::BadCertificate),
    ));
    v.push(verify(
        "hybrid-cert-bad-base64",
        "a certificate text with a character outside base64url",
        &format!("{}+", &text[..text.len() - 1]),
        None,
        Err(Error::BadBase64),
    ));
    let other = KemSecret::from_seed(bytes("hybrid-cert-other-kem"));
    v.push(verify(
        "hybrid-cert-kem-mismatch",
        "the key text of another ML-KEM key",
        &text,
        Some(&other.public().to_text()),
        Err(Error::KemMismatch),
    ));
    v.push(verify(
        "hybrid-cert-kem-short",
        "a key text of 1,183 bytes",
        &text,
        Some(&format!(
            "hck1 {}",
            b64::encode(&kem.public().as_bytes()[1..])
        )),
        Err(Error::BadCertificate),
    ));
    v.push(verify(
        "hybrid-cert-kem-bad-base64",
        "a key text with a character outside base64url",
        &text,
        Some(&format!("{}=", &kem_text[..kem_text.len() - 1])),
        Err(Error::BadBase64),
    ));
    v.push(verify(
        "hybrid-cert-kem-prefix",
        "a key text without its prefix",
        &text,
        Some(&kem_text[5..]),
        Err(Error::BadCertificate),
    ));
    let mut modulus = *kem.public().as_bytes();
    modulus[0] = 0x01;
    modulus[1] = 0x0d;
    v.push(verify(
        "hybrid-cert-kem-modulus",
        "a key whose first coefficient is q = 3329 fails the FIPS 203 modulus check",
        &text,
        Some(&format!("hck1 {}", b64::encode(&modulus))),
        Err(Error::BadCertificate),
    ));

    // AAAA.
    let set = hcert::format_aaaa(&c);
    let aaaa = |name: &str, why: &str, addrs: Vec<[u8; 16]>, want: Result<(), Error>| {
        let got = hcert::parse_aaaa(&addrs);
        let input = json!({"addrs": addrs.iter().map(hx).collect::<Vec<_>>()});
        match want {
            Ok(()) => Case::ok(
                "hybrid_aaaa",
                name,
                why,
                input,
                json!({"cert": hx(got.unwrap().encode())}),
            ),
            Err(e) => {
                check(name, got, &e);
                Case::err("hybrid_aaaa", name, why, input, e)
            }
        }
    };
    let mut shuffled = set.to_vec();
    shuffled.rotate_left(4);
    shuffled.swap(0, 7);
    v.push(aaaa(
        "hybrid-aaaa-shuffled",
        "eleven addresses in any order",
        shuffled.clone(),
        Ok(()),
    ));
    v.push(aaaa(
        "hybrid-aaaa-missing-chunk",
        "ten addresses",
        shuffled[..10].to_vec(),
        Err(Error::BadRecord),
    ));
    let mut dup = shuffled.clone();
    dup[1] = dup[0];
    v.push(aaaa(
        "hybrid-aaaa-duplicate-order",
        "an order field twice",
        dup,
        Err(Error::BadRecord),
    ));
    let mut pad = set.to_vec();
    pad[10][15] = 1;
    v.push(aaaa(
        "hybrid-aaaa-nonzero-padding",
        "a padding byte that is not zero",
        pad,
        Err(Error::BadRecord),
    ));
    let mut nine = set.to_vec();
    nine.truncate(9);
    v.push(aaaa(
        "hybrid-aaaa-suite-1-count",
        "nine addresses are the suite-1 form",
        nine,
        Err(Error::BadRecord),
    ));

    // Lists of both suites.
    let v1 = KeyCert::sign(&id, 7, NB, NA, *kex.public());
    let list = |name: &str, why: &str, body: String, want: Result<(), Error>| {
        let got = hcert::parse_cert_list(body.as_bytes());
        let input = json!({"body": body});
        match want {
            Ok(()) => {
                let l = got.unwrap();
                Case::ok(
                    "hybrid_cert_list",
                    name,
                    why,
                    input,
                    json!({
                        "certs": l.certs.iter().map(|c| json!({"suite": match c { hybrid::AnyCert::Classical(_) => 1, hybrid::AnyCert::Hybrid(_) => 2 }, "kid": hx(c.kid().0)})).collect::<Vec<_>>(),
                        "kem_hashes": l.kems.iter().map(|k| hx(k.hash().0)).collect::<Vec<_>>(),
                    }),
                )
            }
            Err(e) => {
                check(name, got, &e);
                Case::err("hybrid_cert_list", name, why, input, e)
            }
        }
    };
    v.push(list(
        "hybrid-cert-list-pq",
        "the OPTIONS {mount}/pq answer: the suite-2 certificate, then its key text",
        hcert::format_cert_list(std::slice::from_ref(&c), &[kem.public()]),
        Ok(()),
    ));
    v.push(list(
        "hybrid-cert-list-both-suites",
        "a list with a suite-1 and a suite-2 certificate, CRLF and a blank line",
        format!(
            "{}\r\n\r\n{}\r\n{}\r\n",
            v1.to_text(),
            c.to_text(),
            kem_text
        ),
        Ok(()),
    ));
    v.push(list(
        "hybrid-cert-list-bad-key-line",
        "a key text line that does not parse refuses the whole list",
        format!("{}\n{}\n", c.to_text(), &kem_text[..kem_text.len() - 4]),
        Err(Error::BadBase64),
    ));
    v.push(list(
        "hybrid-cert-list-bad-line",
        "a line that is neither a certificate nor a key text",
        format!("{}\nhello\n", c.to_text()),
        Err(Error::BadCertificate),
    ));
    v
}
