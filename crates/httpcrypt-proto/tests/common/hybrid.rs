//! Runner for `vectors/hybrid/` (suite 2, spec/hybrid.md).

use std::sync::Arc;

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::hybrid::cert::{self as hcert, HybridCert};
use httpcrypt_proto::hybrid::exchange::{self, HybridKeys, HybridRequest, HybridServerKey};
use httpcrypt_proto::hybrid::{self, AnyCert, Encapsulation, KemPublic, KemSecret, CIPHERTEXT_LEN};
use httpcrypt_proto::keys::{IdentityKey, IdentityPublic, KexPublic, KexSecret, KeyId, SessionKey};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::stream::{self, Sealer};
use httpcrypt_proto::ticket::{Ticket, TicketKey};
use httpcrypt_proto::{Error, Limits};
use serde_json::{json, Value};

use super::{arr, hx, s, u};

/// Runs one case and compares it with the file: `Err` says how it differs.
pub fn check(case: &Value) -> Result<(), String> {
    let name = case["name"].as_str().unwrap_or("?");
    let expect = case["expect"].as_str().ok_or("no expect")?;
    let got = std::panic::catch_unwind(|| run(case)).map_err(|_| format!("{name}: panicked"))?;
    match got {
        Ok(out) if expect == "ok" && out == case["output"] => Ok(()),
        Ok(out) if expect == "ok" => Err(format!("{name}: output differs: {out}")),
        Ok(_) => Err(format!("{name}: expected {expect}, got success")),
        Err(e) if e.code() == expect => Ok(()),
        Err(e) => Err(format!("{name}: expected {expect}, got {}", e.code())),
    }
}

fn keys(i: &Value) -> (HybridKeys, HybridCert, KemSecret) {
    let id = IdentityKey::from_seed(arr(i, "identity_seed"));
    let kex = KexSecret::from_bytes(arr(i, "server_secret"));
    let kem = KemSecret::from_seed(arr(i, "kem_seed"));
    let c = &i["cert"];
    let cert = HybridCert::sign(
        &id,
        Profile::V1,
        u(c, "serial") as u32,
        u(c, "not_before") as u32,
        u(c, "not_after") as u32,
        *kex.public(),
        kem.public().hash(),
    );
    let mut keys = HybridKeys::new();
    let ek_copy = KemSecret::from_seed(*kem.to_seed());
    keys.add_key(HybridServerKey::new(kex, Arc::new(kem), cert.clone()).expect("the pair matches"));
    let tk = &i["ticket_key"];
    keys.add_ticket_key(
        TicketKey::new(KeyId(arr(tk, "tid")), arr(tk, "key")),
        u(tk, "expires"),
    );
    (keys, cert, ek_copy)
}

/// Runs one case; `Ok(output)` must equal the file's output.
pub fn run(case: &Value) -> Result<Value, Error> {
    let i = &case["input"];
    match case["kind"].as_str().expect("kind") {
        "xwing" => {
            let (kem, kex) = hybrid::xwing_expand_seed(&arr(i, "seed"));
            let pk = [&kem.public().as_bytes()[..], &kex.public().0].concat();
            let eseed: [u8; 64] = arr(i, "eseed");
            let (ct_m, ss_m) = kem
                .public()
                .encapsulate_with(&eseed[..32].try_into().expect("32"));
            let eph = KexSecret::from_bytes(eseed[32..].try_into().expect("32"));
            let e = Encapsulation::from_parts(kex.public(), &eph, ct_m, &ss_m)?;
            let ct = [&e.ct_m[..], &e.ct_x.0].concat();
            let k = hybrid::decapsulate(&kex, &kem, &e.ct_x, &e.ct_m[..])?;
            assert_eq!(&k, e.session_key(), "both sides agree");
            Ok(
                json!({"pk": hex::encode(pk), "ct": hex::encode(ct), "ss": hex::encode(k.as_bytes())}),
            )
        }
        "hybrid_cert" => {
            let id = IdentityKey::from_seed(arr(i, "identity_seed"));
            let kem = KemSecret::from_seed(arr(i, "kem_seed"));
            let profile = if u(i, "version") == 2 {
                Profile::Compact
            } else {
                Profile::V1
            };
            let c = HybridCert::sign(
                &id,
                profile,
                u(i, "serial") as u32,
                u(i, "not_before") as u32,
                u(i, "not_after") as u32,
                KexPublic(arr(i, "kex_public")),
                kem.public().hash(),
            );
            Ok(json!({
                "cert": hex::encode(c.encode()),
                "text": c.to_text(),
                "kid": hex::encode(c.kid().0),
                "kem_hash": hex::encode(c.kem_hash.0),
                "kem_text": kem.public().to_text(),
                "aaaa": hcert::format_aaaa(&c).iter().map(hex::encode).collect::<Vec<_>>(),
            }))
        }
        "hybrid_cert_verify" => {
            let h = match AnyCert::from_text(s(i, "text"))? {
                AnyCert::Hybrid(h) => h,
                AnyCert::Classical(c) => {
                    // A suite-1 certificate verifies as one, or not at all.
                    c.verify(&IdentityPublic::from_bytes(&arr(i, "identity_public"))?)?;
                    return Err(Error::BadCertificate);
                }
            };
            h.verify(&IdentityPublic::from_bytes(&arr(i, "identity_public"))?)?;
            if let Some(k) = i["kem_text"].as_str() {
                KemPublic::from_text(k)?.check(&h)?;
            }
            Ok(
                json!({"version": h.profile.number(), "serial": h.serial, "not_before": h.not_before, "not_after": h.not_after, "kex_public": hex::encode(h.kex_public.0), "kem_hash": hex::encode(h.kem_hash.0), "kid": hex::encode(h.kid().0)}),
            )
        }
        "hybrid_aaaa" => {
            let addrs: Vec<[u8; 16]> = i["addrs"]
                .as_array()
                .expect("addrs")
                .iter()
                .map(|a| {
                    hex::decode(a.as_str().expect("str"))
                        .expect("hex")
                        .try_into()
                        .expect("16 bytes")
                })
                .collect();
            Ok(json!({"cert": hex::encode(hcert::parse_aaaa(&addrs)?.encode())}))
        }
        "hybrid_cert_list" => {
            let l = hcert::parse_cert_list(s(i, "body").as_bytes())?;
            Ok(json!({
                "certs": l.certs.iter().map(|c| json!({"suite": match c { AnyCert::Classical(_) => 1, AnyCert::Hybrid(_) => 2 }, "kid": hex::encode(c.kid().0)})).collect::<Vec<_>>(),
                "kem_hashes": l.kems.iter().map(|k| hex::encode(k.hash().0)).collect::<Vec<_>>(),
            }))
        }
        "hybrid_server_request" => {
            let (keys, _, _) = keys(i);
            let served = exchange::serve_bytes(
                &keys,
                &Mount::new(s(i, "mount"))?,
                &Limits::default(),
                u(i, "now"),
                &hx(i, "outer_request"),
            )?;
            let (_, head, body) = served.expect("vector requests are under the mount");
            Ok(json!({"method": head.method, "target": head.target, "body": hex::encode(body)}))
        }
        "hybrid_exchange" => run_exchange(i),
        other => panic!("unknown hybrid vector kind {other}"),
    }
}

fn run_exchange(i: &Value) -> Result<Value, Error> {
    let (keys, cert, kem) = keys(i);
    let mount = Mount::new(s(i, "mount"))?;
    let form = if s(i, "form") == "post" {
        Form::Post
    } else {
        Form::Get
    };
    let limits = Limits::default();
    let inner_req = hx(i, "inner_request");
    let record = u(i, "record_size") as usize;
    let host = s(i, "host");
    let (outer, key, cookie, opener) = if i.get("ticket").is_some() {
        let t = Ticket(arr(i, "ticket"));
        let k = SessionKey::from_bytes(arr(i, "ticket_session_key"));
        let p = PreparedRequest::for_key(
            &cert.kex_public,
            ClientCredential::Ticket(&t, &k),
            arr(i, "n0"),
            s(i, "name_pad"),
            s(i, "value_pad"),
        )?;
        let mut sealed = Vec::new();
        stream::seal_all(p.sealer(), &inner_req, record, &mut sealed)?;
        (
            p.encode_outer(form, &mount, host, &sealed),
            p.session_key().clone(),
            p.cookie().to_string(),
            p.response_opener(&limits),
        )
    } else {
        let client = KexSecret::from_bytes(arr(i, "client_secret"));
        let e = &i["encapsulation"];
        let ct_m: [u8; CIPHERTEXT_LEN] = arr(e, "ct_m");
        // Where the library allows it, the encapsulation is checked too.
        let (ct_again, ss_again) = kem.public().encapsulate_with(&arr(e, "m"));
        assert_eq!(
            (&ct_again[..], *ss_again),
            (&ct_m[..], arr::<32>(e, "ss_m"))
        );
        let enc =
            Encapsulation::from_parts(&cert.kex_public, &client, Box::new(ct_m), &arr(e, "ss_m"))?;
        let r = HybridRequest::from_encapsulation(
            &cert,
            enc,
            arr(i, "n0"),
            s(i, "name_pad"),
            s(i, "value_pad"),
        )?;
        let mut sealed = Vec::new();
        stream::seal_all(r.sealer(), &inner_req, record, &mut sealed)?;
        (
            r.encode_outer(form, &mount, host, &sealed),
            r.session_key().clone(),
            r.cookie().to_string(),
            r.response_opener(&limits),
        )
    };
    let (accepted, head, body) =
        exchange::serve_bytes(&keys, &mount, &limits, u(i, "now"), &outer)?
            .expect("vector requests are under the mount");
    let mut plain = Vec::new();
    head.encode(&mut plain);
    plain.extend_from_slice(&body);
    assert_eq!(plain, inner_req);
    assert_eq!(accepted.session_key(), &key);
    let mut rsp = Vec::new();
    let sealer = Sealer::response(
        accepted.into_response_key(),
        arr(i, "response_n0"),
        &mut rsp,
    );
    stream::seal_all(
        sealer,
        &hx(i, "inner_response"),
        u(i, "response_record_size") as usize,
        &mut rsp,
    )?;
    assert_eq!(stream::open_all(opener, &rsp)?, hx(i, "inner_response"));
    Ok(json!({
        "cert_text": cert.to_text(),
        "kem_text": kem.public().to_text(),
        "kid": hex::encode(cert.kid().0),
        "session_key": hex::encode(key.as_bytes()),
        "cookie": cookie,
        "outer_request": hex::encode(&outer),
        "response_body": hex::encode(&rsp),
    }))
}
