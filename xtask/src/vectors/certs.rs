//! Vectors for key certificates and their DNS forms (spec §5, §6).

use httpcrypt_proto::cert::{self, KeyCert};
use httpcrypt_proto::dns;
use httpcrypt_proto::{b64, Error, IdentityKey, KexPublic};
use serde_json::json;

use super::{bytes, check, hx, Case};

/// The output of a `cert` case: the certificate in every form.
pub(crate) fn cert_output(c: &KeyCert, id: &IdentityKey) -> serde_json::Value {
    json!({
        "cert": hx(c.encode()),
        "text": c.to_text(),
        "kid": hx(c.kid().0),
        "signer": hx(c.signer),
        "identity_public": hx(id.public().to_bytes()),
        "aaaa": dns::format_aaaa(c).iter().map(hx).collect::<Vec<_>>(),
        "identity_txt": dns::format_identity_txt(&id.public()),
    })
}

fn sign(seed: &str, serial: u32, nb: u32, na: u32, kex: &str) -> KeyCert {
    KeyCert::sign(
        &IdentityKey::from_seed(bytes(seed)),
        serial,
        nb,
        na,
        KexPublic(bytes(kex)),
    )
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let id = IdentityKey::from_seed(bytes("cert-identity"));
    let other = IdentityKey::from_seed(bytes("cert-other-identity"));
    for (i, (serial, nb, na)) in [
        (1u32, 1_700_000_000u32, 1_700_007_260u32),
        (0xfffffffe, 0, u32::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        let c = sign("cert-identity", serial, nb, na, &format!("cert-kex-{i}"));
        c.verify(&id.public()).unwrap();
        let aaaa = dns::format_aaaa(&c);
        assert_eq!(dns::parse_aaaa(&aaaa).unwrap(), c);
        v.push(Case::ok(
            "cert",
            &format!("cert-sign-{i}"),
            "certificate bytes, text form, AAAA chunk set and identity TXT",
            json!({"identity_seed": hx(bytes::<32>("cert-identity")), "serial": serial, "not_before": nb, "not_after": na, "kex_public": hx(c.kex_public.0)}),
            cert_output(&c, &id),
        ));
    }

    // Verification.
    let good = sign("cert-identity", 7, 100, 200, "cert-kex-v");
    let mut verify = |name: &str,
                      why: &str,
                      text: String,
                      identity: &IdentityKey,
                      want: Option<Error>| {
        let got = KeyCert::from_text(&text).and_then(|c| c.verify(&identity.public()).map(|()| c));
        let input = json!({"text": text, "identity_public": hx(identity.public().to_bytes())});
        match want {
            None => {
                let c = got.unwrap();
                v.push(Case::ok("cert_verify", name, why, input, json!({"version": c.profile.number(), "serial": c.serial, "not_before": c.not_before, "not_after": c.not_after, "kex_public": hx(c.kex_public.0)})));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("cert_verify", name, why, input, e));
            }
        }
    };
    let text = good.to_text();
    let raw = good.encode();
    let retext = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = raw.to_vec();
        f(&mut b);
        format!("hc1 {}", b64::encode(&b))
    };
    verify(
        "cert-verify-ok",
        "signed by the pinned identity",
        text.clone(),
        &id,
        None,
    );
    verify(
        "cert-verify-other-identity",
        "signed by someone else",
        text.clone(),
        &other,
        Some(Error::BadSignature),
    );
    verify(
        "cert-verify-flipped-serial",
        "the serial is covered by the signature",
        retext(&|b| b[5] ^= 1),
        &id,
        Some(Error::BadSignature),
    );
    verify(
        "cert-verify-flipped-key",
        "the key is covered by the signature",
        retext(&|b| b[20] ^= 1),
        &id,
        Some(Error::BadSignature),
    );
    verify(
        "cert-verify-flipped-signature",
        "a signature bit",
        retext(&|b| b[100] ^= 1),
        &id,
        Some(Error::BadSignature),
    );
    verify(
        "cert-verify-flipped-signer",
        "the signer ID names another key",
        retext(&|b| b[50] ^= 1),
        &id,
        Some(Error::BadSignature),
    );
    verify(
        "cert-verify-version",
        "version 3 is unknown (1 is v1, 2 announces profile 2)",
        retext(&|b| b[0] = 3),
        &id,
        Some(Error::BadCertificate),
    );
    verify(
        "cert-verify-version-0",
        "version 0 is unknown",
        retext(&|b| b[0] = 0),
        &id,
        Some(Error::BadCertificate),
    );
    verify(
        "cert-verify-suite",
        "suite 2 is unknown",
        retext(&|b| b[1] = 2),
        &id,
        Some(Error::BadCertificate),
    );
    verify(
        "cert-verify-short",
        "117 bytes",
        retext(&|b| b.truncate(117)),
        &id,
        Some(Error::BadCertificate),
    );
    verify(
        "cert-verify-long",
        "119 bytes",
        retext(&|b| b.push(0)),
        &id,
        Some(Error::BadCertificate),
    );
    verify(
        "cert-verify-prefix",
        "the text form starts with 'hc1 '",
        text.replacen("hc1 ", "hc2 ", 1),
        &id,
        Some(Error::BadCertificate),
    );
    verify(
        "cert-verify-bad-base64",
        "a character outside base64url",
        text.replacen('A', "+", 1).replacen("hc1+", "hc1 ", 1),
        &id,
        Some(Error::BadBase64),
    );
    verify(
        "cert-verify-padded",
        "padding is refused",
        format!("{text}=="),
        &id,
        Some(Error::BadBase64),
    );

    // Choosing among certificates.
    let certs = [
        sign("cert-identity", 1, 0, 100, "k1"),
        sign("cert-identity", 2, 50, 150, "k2"),
        sign("cert-identity", 3, 120, 300, "k3"),
        sign("cert-other-identity", 9, 0, 1000, "k9"),
    ];
    let lines: Vec<String> = certs.iter().map(KeyCert::to_text).collect();
    let mut choose = |name: &str, why: &str, now: u64, pinned: bool, want: Result<u32, Error>| {
        let got = cert::choose(&certs, now, pinned.then(|| id.public()).as_ref()).map(|c| c.serial);
        let mut input = json!({"lines": lines, "now": now});
        if pinned {
            input["identity_public"] = json!(hx(id.public().to_bytes()));
        }
        match want {
            Ok(s) => {
                assert_eq!(got, Ok(s), "{name}");
                v.push(Case::ok(
                    "cert_choose",
                    name,
                    why,
                    input,
                    json!({"serial": s}),
                ));
            }
            Err(e) => {
                check(name, got, &e);
                v.push(Case::err("cert_choose", name, why, input, e));
            }
        }
    };
    choose(
        "choose-highest-serial-opportunistic",
        "without a pinned identity any valid certificate counts",
        60,
        false,
        Ok(9),
    );
    choose(
        "choose-highest-serial-pinned",
        "with a pinned identity only its certificates count",
        60,
        true,
        Ok(2),
    );
    choose(
        "choose-edge-not-after",
        "not_after is inclusive",
        150,
        true,
        Ok(3),
    );
    choose(
        "choose-edge-not-before",
        "not_before is inclusive",
        120,
        true,
        Ok(3),
    );
    choose(
        "choose-none-valid",
        "every certificate has expired",
        1001,
        false,
        Err(Error::NotValid),
    );
    let tie = [
        sign("cert-identity", 5, 10, 100, "t1"),
        sign("cert-identity", 5, 20, 100, "t2"),
    ];
    let got = cert::choose(&tie, 30, None).map(|c| c.not_before);
    assert_eq!(got, Ok(20));
    v.push(Case::ok(
        "cert_choose",
        "choose-equal-serials",
        "on equal serials the later not_before wins",
        json!({"lines": tie.iter().map(KeyCert::to_text).collect::<Vec<_>>(), "now": 30}),
        json!({"serial": 5, "not_before": 20}),
    ));

    // The OPTIONS body.
    let body = cert::format_cert_list(&certs[..2]);
    v.push(Case::ok(
        "cert_list",
        "cert-list-lf",
        "one line per certificate, LF",
        json!({"body": body}),
        json!({"serials": [1, 2]}),
    ));
    let crlf = format!("\r\n{}\r\n", body.replace('\n', "\r\n"));
    assert_eq!(cert::parse_cert_list(crlf.as_bytes()).unwrap().len(), 2);
    v.push(Case::ok(
        "cert_list",
        "cert-list-crlf-blank",
        "CRLF line ends and blank lines are accepted",
        json!({"body": crlf}),
        json!({"serials": [1, 2]}),
    ));
    let bad = format!("{body}hc1 AAAA\n");
    check(
        "cert-list-bad-line",
        cert::parse_cert_list(bad.as_bytes()),
        &Error::BadCertificate,
    );
    v.push(Case::err(
        "cert_list",
        "cert-list-bad-line",
        "a line that is not a certificate",
        json!({"body": bad}),
        Error::BadCertificate,
    ));

    // AAAA sets.
    let aaaa = dns::format_aaaa(&good);
    let mut aaaa_case = |name: &str, why: &str, addrs: Vec<[u8; 16]>, want: Option<Error>| {
        let got = dns::parse_aaaa(&addrs);
        let input = json!({"addrs": addrs.iter().map(hx).collect::<Vec<_>>()});
        match want {
            None => {
                assert_eq!(got.as_ref().ok(), Some(&good), "{name}");
                v.push(Case::ok(
                    "aaaa",
                    name,
                    why,
                    input,
                    json!({"cert": hx(good.encode())}),
                ));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("aaaa", name, why, input, e));
            }
        }
    };
    let mut shuffled = aaaa.to_vec();
    shuffled.rotate_left(4);
    shuffled.swap(0, 7);
    aaaa_case("aaaa-in-order", "nine chunks in order", aaaa.to_vec(), None);
    aaaa_case(
        "aaaa-shuffled",
        "resolvers shuffle RRsets; the order field restores it",
        shuffled.clone(),
        None,
    );
    aaaa_case(
        "aaaa-missing-chunk",
        "eight chunks",
        aaaa[..8].to_vec(),
        Some(Error::BadRecord),
    );
    aaaa_case(
        "aaaa-extra-chunk",
        "ten addresses",
        [aaaa.to_vec(), vec![aaaa[0]]].concat(),
        Some(Error::BadRecord),
    );
    let mut dup = aaaa.to_vec();
    dup[3] = dup[2];
    aaaa_case(
        "aaaa-duplicate-order",
        "two chunks claim one position",
        dup,
        Some(Error::BadRecord),
    );
    let mut prefix = aaaa.to_vec();
    prefix[1][0] = 0xfc;
    aaaa_case(
        "aaaa-wrong-prefix",
        "the 12-bit prefix is fd0",
        prefix,
        Some(Error::BadRecord),
    );
    let mut order = aaaa.to_vec();
    order[1][1] = 0x09;
    aaaa_case(
        "aaaa-order-out-of-range",
        "order field 9 does not exist",
        order,
        Some(Error::BadRecord),
    );
    let mut pad = aaaa.to_vec();
    pad[8][15] = 1;
    aaaa_case(
        "aaaa-nonzero-padding",
        "the 8 padding bytes must be zero",
        pad,
        Some(Error::BadRecord),
    );
    let mut ver = aaaa.to_vec();
    ver[0][2] = 9;
    aaaa_case(
        "aaaa-bad-version",
        "the reassembled certificate must decode",
        ver,
        Some(Error::BadCertificate),
    );

    // Identity TXT.
    let mut idtxt = |name: &str, why: &str, text: String, want: Option<Error>| {
        let got = dns::parse_identity_txt(text.as_bytes());
        let input = json!({"text": text});
        match want {
            None => v.push(Case::ok(
                "identity_txt",
                name,
                why,
                input,
                json!({"identity_public": hx(got.unwrap().to_bytes())}),
            )),
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("identity_txt", name, why, input, e));
            }
        }
    };
    let t = dns::format_identity_txt(&id.public());
    idtxt(
        "identity-txt-ok",
        "hc1-id and the base64url key",
        t.clone(),
        None,
    );
    idtxt(
        "identity-txt-prefix",
        "another prefix",
        t.replacen("hc1-id", "hc2-id", 1),
        Some(Error::BadRecord),
    );
    idtxt(
        "identity-txt-short",
        "42 characters of key",
        t[..t.len() - 1].to_string(),
        Some(Error::BadBase64),
    );
    v
}
