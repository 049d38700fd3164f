//! Vectors for the DNS forms of spec §6 that `certs.rs` does not cover:
//! the TLSA X.509 certificate (§6.3) and TXT records split into several
//! character-strings (§6.1).
//!
//! Negative TLSA cases are made by decoding the good certificate into
//! `x509-cert` types, changing one field, and re-signing, so each case
//! breaks exactly one rule while the signature still verifies.

use der::asn1::{BitString, ObjectIdentifier};
use der::{Decode, Encode};
use httpcrypt_proto::tlsa;
use httpcrypt_proto::{dns, Error, IdentityKey, KexPublic, KeyCert};
use serde_json::{json, Value};
use x509_cert::certificate::{Certificate, Version};
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::Time;

use super::{bytes, check, hx, Case};

fn identity() -> IdentityKey {
    IdentityKey::from_seed(bytes("tlsa-identity"))
}

fn key_cert(serial: u32, nb: u32, na: u32, kex: &str) -> KeyCert {
    KeyCert::sign(&identity(), serial, nb, na, KexPublic(bytes(kex)))
}

/// Decodes `der`, lets `f` change it, re-signs with `signer` and encodes.
fn mutate(der: &[u8], signer: &IdentityKey, f: impl FnOnce(&mut Certificate)) -> Vec<u8> {
    let mut c = Certificate::from_der(der).expect("generated DER decodes");
    f(&mut c);
    let tbs = c.tbs_certificate.to_der().expect("encodes");
    c.signature = BitString::from_bytes(&signer.sign(&tbs)).expect("bit string");
    c.to_der().expect("encodes")
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let id = identity();
    let id_pub = hx(id.public().to_bytes());

    // Encoding: DER and zone-file RDATA are pinned byte for byte.
    for (i, (serial, nb, na)) in [
        (1u32, 1_700_000_000u32, 1_700_007_260u32),
        (0x8000_0000, 2_524_608_000, u32::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        let c = key_cert(serial, nb, na, &format!("tlsa-kex-{i}"));
        let der = tlsa::encode(&id, &c);
        let t = tlsa::decode(&der).expect("own certificate decodes");
        t.verify(&id.public()).expect("own certificate verifies");
        v.push(Case::ok(
            "tlsa",
            &format!("tlsa-encode-{i}"),
            if i == 0 {
                "X.509 v3 certificate of an X25519 key, signed with Ed25519; UTCTime validity"
            } else {
                "high-bit serial (a leading zero octet) and GeneralizedTime after 2049"
            },
            json!({"identity_seed": hx(bytes::<32>("tlsa-identity")), "serial": serial, "not_before": nb, "not_after": na, "kex_public": hx(c.kex_public.0)}),
            json!({"der": hx(&der), "rdata": tlsa::format_rdata(&der)}),
        ));
    }

    // Reading, with and without a pinned identity.
    let good = key_cert(7, 1_700_000_000, 1_700_007_260, "tlsa-kex-v");
    let der = tlsa::encode(&id, &good);
    let mut read = |name: &str,
                    why: &str,
                    fields: (u8, u8, u8),
                    data: Vec<u8>,
                    pinned: bool,
                    want: Option<Error>| {
        let got = tlsa::parse_record(fields.0, fields.1, fields.2, &data).and_then(|t| {
            if pinned {
                t.verify(&id.public())?;
            }
            Ok(t)
        });
        let mut input: Value = json!({"usage": fields.0, "selector": fields.1, "matching": fields.2, "data": hx(&data)});
        if pinned {
            input["identity_public"] = json!(id_pub);
        }
        match want {
            None => {
                let t = got.expect("positive case");
                v.push(Case::ok(
                    "tlsa_read",
                    name,
                    why,
                    input,
                    json!({"serial": t.serial, "not_before": t.not_before, "not_after": t.not_after, "kex_public": hx(t.kex_public.0)}),
                ));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("tlsa_read", name, why, input, e));
            }
        }
    };
    let dane = (3, 0, 0);
    read(
        "tlsa-read-pinned",
        "signature verifies under the pinned identity",
        dane,
        der.clone(),
        true,
        None,
    );
    read(
        "tlsa-read-opportunistic",
        "opportunistic mode reads the key without an identity",
        dane,
        der.clone(),
        false,
        None,
    );
    let other = IdentityKey::from_seed(bytes("tlsa-other-identity"));
    read(
        "tlsa-read-other-identity",
        "signed by another identity key",
        dane,
        tlsa::encode(&other, &good),
        true,
        Some(Error::BadSignature),
    );
    let mut flipped = der.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    read(
        "tlsa-read-flipped-signature",
        "a bit of the signature",
        dane,
        flipped,
        true,
        Some(Error::BadSignature),
    );
    // The serial's last content octet: covered by the signature.
    let tbs_serial = mutate(&der, &id, |c| {
        c.tbs_certificate.serial_number = SerialNumber::from(8u32)
    });
    let mut unsigned = tbs_serial.clone();
    let sig_start = unsigned.len() - 64;
    unsigned[sig_start..].copy_from_slice(&der[der.len() - 64..]);
    read(
        "tlsa-read-changed-serial",
        "serial changed after signing",
        dane,
        unsigned,
        true,
        Some(Error::BadSignature),
    );
    read(
        "tlsa-read-usage-2",
        "certificate usage 2 (DANE-TA) is not HTTPCrypt's",
        (2, 0, 0),
        der.clone(),
        false,
        Some(Error::BadRecord),
    );
    read(
        "tlsa-read-selector-1",
        "selector 1 (SubjectPublicKeyInfo only) is not used",
        (3, 1, 0),
        der.clone(),
        false,
        Some(Error::BadRecord),
    );
    read(
        "tlsa-read-matching-1",
        "matching type 1 (SHA-256) carries no key",
        (3, 0, 1),
        der.clone(),
        false,
        Some(Error::BadRecord),
    );
    read(
        "tlsa-read-oversize",
        "data above 2048 bytes is refused before parsing",
        dane,
        [der.clone(), vec![0; tlsa::MAX_DER + 1 - der.len()]].concat(),
        false,
        Some(Error::BadRecord),
    );
    read(
        "tlsa-read-truncated",
        "the last byte is missing",
        dane,
        der[..der.len() - 1].to_vec(),
        false,
        Some(Error::BadCertificate),
    );
    read(
        "tlsa-read-trailing",
        "a byte after the certificate",
        dane,
        [der.clone(), vec![0]].concat(),
        false,
        Some(Error::BadCertificate),
    );
    read(
        "tlsa-read-empty",
        "no data",
        dane,
        Vec::new(),
        false,
        Some(Error::BadCertificate),
    );
    let bad = |name: &str, why: &str, f: &dyn Fn(&mut Certificate)| {
        (name.to_string(), why.to_string(), mutate(&der, &id, f))
    };
    let ed25519 = tlsa::ED25519_OID;
    for (name, why, data) in [
        bad("tlsa-read-version-1", "an X.509 v1 certificate", &|c| {
            c.tbs_certificate.version = Version::V1;
            c.tbs_certificate.extensions = None;
        }),
        bad(
            "tlsa-read-ed25519-key",
            "the certified key is Ed25519, not X25519",
            &|c| c.tbs_certificate.subject_public_key_info.algorithm.oid = ed25519,
        ),
        bad("tlsa-read-short-key", "a 31-byte X25519 key", &|c| {
            c.tbs_certificate.subject_public_key_info.subject_public_key =
                BitString::from_bytes(&[1; 31]).expect("bit string")
        }),
        bad(
            "tlsa-read-signature-algorithm",
            "signed with an algorithm other than Ed25519 (here labelled Ed448)",
            &|c| {
                let ed448 = ObjectIdentifier::new_unwrap("1.3.101.113");
                c.signature_algorithm.oid = ed448;
                c.tbs_certificate.signature.oid = ed448;
            },
        ),
        bad(
            "tlsa-read-algorithm-mismatch",
            "the inner and outer signature algorithms differ",
            &|c| c.tbs_certificate.signature.oid = ObjectIdentifier::new_unwrap("1.3.101.113"),
        ),
        bad(
            "tlsa-read-serial-too-large",
            "a serial above 32 bits",
            &|c| c.tbs_certificate.serial_number = SerialNumber::from(1u64 << 32),
        ),
        bad(
            "tlsa-read-after-2106",
            "notAfter beyond the 32-bit unix time range",
            &|c| {
                c.tbs_certificate.validity.not_after = Time::GeneralTime(
                    der::asn1::GeneralizedTime::from_unix_duration(std::time::Duration::from_secs(
                        u64::from(u32::MAX) + 1,
                    ))
                    .expect("time"),
                )
            },
        ),
    ] {
        read(&name, &why, dane, data, true, Some(Error::BadCertificate));
    }
    // keyUsage with an explicit `critical FALSE`, signed over exactly those
    // bytes: DER omits DEFAULT values, and a reader must not re-encode.
    let mut explicit = der.clone();
    let at = explicit
        .windows(3)
        .position(|w| w == [0x01, 0x01, 0xff])
        .expect("critical TRUE in keyUsage");
    explicit[at + 2] = 0x00;
    let tbs_end = 4 + match explicit[5] {
        0x81 => 3 + usize::from(explicit[6]),
        0x82 => 4 + usize::from(u16::from_be_bytes([explicit[6], explicit[7]])),
        l => 2 + usize::from(l),
    };
    let sig = id.sign(&explicit[4..tbs_end]);
    let n = explicit.len();
    explicit[n - 64..].copy_from_slice(&sig);
    read(
        "tlsa-read-explicit-default",
        "critical FALSE written out: not DER, even though the signature covers those bytes",
        dane,
        explicit,
        true,
        Some(Error::BadCertificate),
    );
    let mut short_sig = Certificate::from_der(&der).expect("decodes");
    short_sig.signature = BitString::from_bytes(&[0; 63]).expect("bit string");
    read(
        "tlsa-read-short-signature",
        "a 63-byte signature",
        dane,
        short_sig.to_der().expect("encodes"),
        true,
        Some(Error::BadCertificate),
    );

    // TXT records as character-strings (spec §6.1).
    let mut txt = |name: &str, why: &str, strings: Vec<Vec<u8>>, want: Option<Error>| {
        let joined: Vec<u8> = strings.concat();
        let got = dns::parse_txt(&joined);
        let input = json!({"strings": strings.iter().map(hx).collect::<Vec<_>>()});
        match want {
            None => v.push(Case::ok(
                "txt",
                name,
                why,
                input,
                json!({"cert": hx(got.expect("positive case").encode())}),
            )),
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("txt", name, why, input, e));
            }
        }
    };
    let text = dns::format_txt(&good).into_bytes();
    txt(
        "txt-one-string",
        "one character-string",
        vec![text.clone()],
        None,
    );
    txt(
        "txt-split-strings",
        "the reader joins character-strings before parsing",
        vec![text[..100].to_vec(), text[100..].to_vec()],
        None,
    );
    let mut latin1 = text.clone();
    latin1[20] = 0xe9;
    txt(
        "txt-not-utf8",
        "a byte that is not UTF-8",
        vec![latin1],
        Some(Error::BadRecord),
    );
    let mut plus = text.clone();
    plus[20] = b'+';
    txt(
        "txt-bad-base64",
        "'+' is standard base64, not base64url",
        vec![plus],
        Some(Error::BadBase64),
    );
    txt(
        "txt-space-between-strings",
        "a separator between strings is not part of the form",
        vec![text[..100].to_vec(), b" ".to_vec(), text[100..].to_vec()],
        Some(Error::BadBase64),
    );
    txt(
        "txt-other-record",
        "an unrelated TXT record at the same name (v=spf1)",
        vec![b"v=spf1 -all".to_vec()],
        Some(Error::BadCertificate),
    );
    v
}
