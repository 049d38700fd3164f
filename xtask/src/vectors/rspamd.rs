//! Vectors for the rspamd compatibility profile (`spec/rspamd-profile.md`),
//! including requests captured from a real `rspamc --key` of rspamd 3.4.

use httpcrypt_proto::rspamd::{base32, keypair, Client, KeyHeader, Keyring};
use httpcrypt_proto::{Error, KexPublic, KexSecret};
use serde_json::json;

use super::{bytes, check, hx, Case};

/// A key pair printed by `rspamadm keypair` (rspamd 3.4, Debian 12).
const REAL_KEYPAIR: &str = "keypair {\n    encoding = \"base32\";\n    id = \"r898uxxzyq5idq4zqdgzo8riqab6dw9gfhfx4ah75nhmt6axf7huxpuh3qrzxiqgmj6kqi1gj7mt95uywgbd568umbsdx3g5799b64n\";\n    algorithm = \"curve25519\";\n    type = \"kex\";\n    pubkey = \"w56geq9r183janamgckjcgafyewzwttf1wgdbhhipigynh99nr1y\";\n    privkey = \"yousub68a7xnpt7mhjfxfb5m9mhite5q9ejsurfdqjjn7txg58hy\";\n}\n";

/// `rspamc --key w56geq9r… stat`, captured on loopback: Key value and body.
const CAPTURED_STAT: (&str, &str) = (
    "r898uxxz=6ekmz95961ppkpnwp446cb8718ytytweeuukn4hoo19mpz1t5xqy",
    "1d8ca637cce7556fd903f2b96c3c5c5124d271f484b5e55da6cd8515dec061ee119e53f6340b31c3743df40e1e49e430258481d414e7e7e560b4645d8372f53cc7d1497800804cd9eaf71c894170860338dfabd49314e6a0c0c5aff7bf0fad4ecfec2dc80ccb7e5a520906def389aa17ea884791e362",
);

/// `rspamc --key w56geq9r… symbols msg.eml`, captured on loopback.
const CAPTURED_SYMBOLS: (&str, &str) = (
    "r898uxxz=55cgz31xeqd5ikrg3cpfwgutxyerpqfx8njx6sa6ed1mafwfjcny",
    "d243619257aed70fff46ef479dd7f00164ec29dde377b408de11844d8a8e677329cb42226b24f8598fbe60858303b9cb1b7fbb7f99e6a090a12543c0e1126ed5fe616dded26ac414c234f12b1eab183a6b5678eb8578b54e46916e8ca46a63143eca2aa4ab07fd75984e94e79930ef237867b85d5826a84f7abf9d77b13ae8aa609d1520546925cf2926c5c69f5faf4a9481643ce290d8107d768c054ae8c9e2c4e53539ddcc7ae71e5f358b9cce97cceb1bf9d8291e23e86b2f9617d3cb9ab1acf3ff6e73cd8e813744cc067ef232f129898ad31d0fcc408582621bb4e81ece8b25318391c6d55d1cd1a887ddb5ab",
);

fn open_case(
    name: &str,
    why: &str,
    keypair_text: &str,
    header: &str,
    body: &[u8],
    want: Option<Error>,
) -> Case {
    let server = keypair::parse(keypair_text).expect("keypair parses");
    let ring: Keyring = std::iter::once(server).collect();
    let got = KeyHeader::parse(header.as_bytes())
        .and_then(|h| h.ok_or(Error::BadKeyHeader))
        .and_then(|h| ring.open_request(&h, body).map(|(inner, _)| inner));
    let input = json!({"keypair": keypair_text, "key_header": header, "body": hx(body)});
    match want {
        None => Case::ok(
            "rspamd_open",
            name,
            why,
            input,
            json!({"inner": hx(got.unwrap_or_else(|e| panic!("{name}: {e:?}")))}),
        ),
        Some(e) => {
            check(name, got, &e);
            Case::err("rspamd_open", name, why, input, e)
        }
    }
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Base32: the profile's worked examples, then key-sized inputs.
    let seq: Vec<u8> = (0u8..32).collect();
    for (name, raw) in [
        ("rspamd-b32-one", vec![1u8]),
        ("rspamd-b32-hello", b"hello world".to_vec()),
        ("rspamd-b32-sequence", seq.clone()),
        ("rspamd-b32-key-id", bytes::<5>("rspamd-b32").to_vec()),
    ] {
        let text = base32::encode(&raw);
        assert_eq!(base32::decode(text.as_bytes()).unwrap(), raw);
        v.push(Case::ok(
            "rspamd_base32",
            name,
            "rspamd base32, least significant bit first",
            json!({"hex": hx(&raw)}),
            json!({"text": text}),
        ));
    }
    assert_eq!(base32::encode(b"hello world"), "em3ags7py376g3tprd");
    assert_eq!(
        base32::encode(&seq),
        "yeyroboyfobqyrrbkanaogabxyrnbjcnwefctmyd3ogsbqwd6a8y"
    );
    for (name, text, why) in [
        (
            "rspamd-b32-uppercase",
            "EM3AGS7PY376G3TPRD",
            "decoding is lower-case only",
        ),
        (
            "rspamd-b32-bad-char",
            "em3ags7py376g3tpr0",
            "0 is not in the alphabet",
        ),
        (
            "rspamd-b32-bad-char-l",
            "em3ags7py376g3tprl",
            "l is not in the alphabet",
        ),
        (
            "rspamd-b32-bad-length",
            "em3",
            "no byte string encodes to 3 characters",
        ),
        ("rspamd-b32-leftover-bits", "ye", "non-zero unused bits"),
    ] {
        check(name, base32::decode(text.as_bytes()), &Error::BadBase32);
        v.push(Case::err(
            "rspamd_base32_decode",
            name,
            why,
            json!({"text": text}),
            Error::BadBase32,
        ));
    }

    // Key IDs and the Key header.
    let server = keypair::parse(REAL_KEYPAIR).unwrap();
    let id = httpcrypt_proto::rspamd::KeyId::of(server.public());
    v.push(Case::ok(
        "rspamd_key_id",
        "rspamd-key-id-real",
        "key ID = BLAKE2b-512(public key), checked against rspamadm's own output",
        json!({"pubkey": "w56geq9r183janamgckjcgafyewzwttf1wgdbhhipigynh99nr1y"}),
        json!({"id": id.to_base32(), "short_id": id.short().to_base32()}),
    ));
    let mut header = |name: &str, why: &str, value: &str, want: Result<bool, Error>| {
        let got = KeyHeader::parse(value.as_bytes());
        let input = json!({"value": value});
        match want {
            Ok(encrypted) => {
                let out = match got.unwrap() {
                    Some(h) => {
                        json!({"encrypted": true, "short_id": hx(h.short_id.0), "client_public": hx(h.client.0)})
                    }
                    None => json!({"encrypted": false}),
                };
                assert_eq!(out["encrypted"], encrypted);
                v.push(Case::ok("rspamd_key_header", name, why, input, out));
            }
            Err(e) => {
                check(name, got, &e);
                v.push(Case::err("rspamd_key_header", name, why, input, e));
            }
        }
    };
    header(
        "rspamd-header-captured",
        "the Key value rspamc sent",
        CAPTURED_STAT.0,
        Ok(true),
    );
    header(
        "rspamd-header-no-equals",
        "without '=' the request is plaintext",
        "r898uxxz",
        Ok(false),
    );
    header(
        "rspamd-header-bad-id",
        "the ID is not base32",
        "R898UXXZ=6ekmz95961ppkpnwp446cb8718ytytweeuukn4hoo19mpz1t5xqy",
        Err(Error::BadKeyHeader),
    );
    header(
        "rspamd-header-short-key",
        "a 20-character public key",
        "r898uxxz=6ekmz95961ppkpnwp446",
        Err(Error::BadKeyHeader),
    );
    header(
        "rspamd-header-empty-key",
        "nothing after '='",
        "r898uxxz=",
        Err(Error::BadKeyHeader),
    );

    // Keypair files.
    let mut kp = |name: &str, why: &str, text: String, want: Option<Error>| {
        let got = keypair::parse(&text);
        let input = json!({"text": text});
        match want {
            None => {
                let k = got.unwrap();
                v.push(Case::ok(
                    "rspamd_keypair",
                    name,
                    why,
                    input,
                    json!({"pubkey": httpcrypt_proto::rspamd::keys::public_to_base32(k.public())}),
                ));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("rspamd_keypair", name, why, input, e));
            }
        }
    };
    kp(
        "rspamd-keypair-real",
        "printed by rspamadm keypair",
        REAL_KEYPAIR.to_string(),
        None,
    );
    let own = KexSecret::from_bytes(bytes("rspamd-own-keypair"));
    kp(
        "rspamd-keypair-written",
        "the form this project writes",
        keypair::format(&own).to_string(),
        None,
    );
    kp(
        "rspamd-keypair-wrong-id",
        "id does not match pubkey",
        REAL_KEYPAIR.replace("r898uxxzyq5", "r898uxxzyq6"),
        Some(Error::BadKeypair),
    );
    kp(
        "rspamd-keypair-wrong-pubkey",
        "pubkey does not match privkey",
        REAL_KEYPAIR.replace("w56geq9r18", "w56geq9r19"),
        Some(Error::BadKeypair),
    );
    kp(
        "rspamd-keypair-sign",
        "a signing key pair is not a kex key",
        REAL_KEYPAIR.replace("\"kex\"", "\"sign\""),
        Some(Error::BadKeypair),
    );
    kp(
        "rspamd-keypair-no-privkey",
        "no secret key",
        REAL_KEYPAIR
            .lines()
            .filter(|l| !l.contains("privkey"))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Error::BadKeypair),
    );

    // Exchanges: client request and server response, explicit randomness.
    for (i, inner) in [&b"GET /stat HTTP/1.0\r\nUser-Agent: rspamc/3.4\r\n\r\n"[..], b"POST /checkv2 HTTP/1.0\r\nContent-Length: 12\r\nContent-Type: text/plain\r\n\r\nhello rspamd"].into_iter().enumerate() {
        let client = KexSecret::from_bytes(bytes(&format!("rspamd-client-{i}")));
        let nonce = bytes::<24>(&format!("rspamd-nonce-{i}"));
        let rnonce = bytes::<24>(&format!("rspamd-rnonce-{i}"));
        let mut req = Vec::new();
        let c = Client::seal_request_with(&client, &nonce, server.public(), "localhost", inner, &mut req).unwrap();
        let header_value = KeyHeader { short_id: httpcrypt_proto::rspamd::ShortId::of(server.public()), client: *client.public() }.format();
        let split = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let ring: Keyring = std::iter::once(keypair::parse(REAL_KEYPAIR).unwrap()).collect();
        let (got, responder) = ring.open_request(&KeyHeader::parse(header_value.as_bytes()).unwrap().unwrap(), &req[split..]).unwrap();
        assert_eq!(got, inner);
        let inner_rsp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"action\":\"ok\"}";
        let mut rsp = Vec::new();
        responder.seal_response_with(&rnonce, inner_rsp, &mut rsp).unwrap();
        let rsplit = rsp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(c.open_response(&rsp[rsplit..]).unwrap(), inner_rsp);
        v.push(Case::ok(
            "rspamd_exchange",
            &format!("rspamd-exchange-{i}"),
            "outer request with the Key header, cryptobox body; outer response with a fresh nonce",
            json!({"server_keypair": REAL_KEYPAIR, "client_secret": hx(*client.to_bytes()), "nonce": hx(nonce), "host": "localhost", "inner_request": hx(inner), "response_nonce": hx(rnonce), "inner_response": hx(inner_rsp)}),
            json!({"key_header": header_value, "outer_request": hx(&req), "outer_response": hx(&rsp)}),
        ));
    }

    // Opening: real rspamc captures, then damage.
    let stat = hex::decode(CAPTURED_STAT.1).unwrap();
    let symbols = hex::decode(CAPTURED_SYMBOLS.1).unwrap();
    v.push(open_case(
        "rspamd-open-captured-stat",
        "a request captured from rspamc 3.4 (stat)",
        REAL_KEYPAIR,
        CAPTURED_STAT.0,
        &stat,
        None,
    ));
    v.push(open_case(
        "rspamd-open-captured-symbols",
        "a request captured from rspamc 3.4 (symbols with a message)",
        REAL_KEYPAIR,
        CAPTURED_SYMBOLS.0,
        &symbols,
        None,
    ));
    let flip = |at: usize| {
        let mut b = stat.clone();
        b[at] ^= 1;
        b
    };
    v.push(open_case(
        "rspamd-open-flipped-nonce",
        "a nonce bit",
        REAL_KEYPAIR,
        CAPTURED_STAT.0,
        &flip(3),
        Some(Error::Integrity),
    ));
    v.push(open_case(
        "rspamd-open-flipped-tag",
        "a tag bit",
        REAL_KEYPAIR,
        CAPTURED_STAT.0,
        &flip(30),
        Some(Error::Integrity),
    ));
    v.push(open_case(
        "rspamd-open-flipped-ciphertext",
        "a ciphertext bit",
        REAL_KEYPAIR,
        CAPTURED_STAT.0,
        &flip(100),
        Some(Error::Integrity),
    ));
    v.push(open_case(
        "rspamd-open-truncated",
        "the last byte missing",
        REAL_KEYPAIR,
        CAPTURED_STAT.0,
        &stat[..stat.len() - 1],
        Some(Error::Integrity),
    ));
    v.push(open_case(
        "rspamd-open-short",
        "shorter than nonce and tag",
        REAL_KEYPAIR,
        CAPTURED_STAT.0,
        &stat[..39],
        Some(Error::Truncated),
    ));
    v.push(open_case(
        "rspamd-open-other-client-key",
        "the Key header names another client key",
        REAL_KEYPAIR,
        CAPTURED_SYMBOLS.0,
        &stat,
        Some(Error::Integrity),
    ));
    let other = KexSecret::from_bytes(bytes("rspamd-other-server"));
    let other_text = keypair::format(&other).to_string();
    v.push(open_case(
        "rspamd-open-unknown-key",
        "the short ID names a key the server does not hold",
        &other_text,
        CAPTURED_STAT.0,
        &stat,
        Some(Error::UnknownKey),
    ));
    let zero_header = KeyHeader {
        short_id: httpcrypt_proto::rspamd::ShortId::of(server.public()),
        client: KexPublic([0; 32]),
    }
    .format();
    v.push(open_case(
        "rspamd-open-small-order",
        "an all-zero client key (rspamd itself accepts it)",
        REAL_KEYPAIR,
        &zero_header,
        &stat,
        Some(Error::SmallOrder),
    ));
    v
}
