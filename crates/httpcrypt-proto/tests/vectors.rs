//! Runs every case in `vectors/` (see `vectors/README.md` for the schema)
//! against this crate. Stream and message decoders are also fed each case
//! byte by byte and split at every offset.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::PathBuf;

use httpcrypt_proto::cert::{self, KeyCert};
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, RequestHead};
use httpcrypt_proto::keys::{IdentityKey, IdentityPublic, KexPublic, KexSecret, KeyId, SessionKey};
use httpcrypt_proto::outer::{self, Credential, Form, IdKind, Mount, Route};
use httpcrypt_proto::profile::{self, Profile};
use httpcrypt_proto::server::{self, ServerKeys};
use httpcrypt_proto::split::{self, ContentId, SplitDecoder, SplitEvent};
use httpcrypt_proto::stream::{self, Event, Opener, ResponseKey, Sealer};
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{b64, dns, replay, tlsa, token, Error, Limits};
use serde_json::{json, Value};

mod common;
use common::*;

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../vectors")
}

#[test]
fn every_vector() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("vectors/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 60,
        "expected at least 60 vectors, found {}",
        files.len()
    );
    let (mut pos, mut neg) = (0, 0);
    for f in &files {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(f).expect("readable"))
            .expect("valid JSON");
        let name = case["name"].as_str().expect("name").to_string();
        let expect = case["expect"].as_str().expect("expect").to_string();
        if expect == "ok" {
            pos += 1;
        } else {
            neg += 1;
            assert!(
                Error::from_code(&expect).is_some(),
                "{name}: unknown error code {expect}"
            );
        }
        let got = std::panic::catch_unwind(|| run(&case));
        match got {
            Ok(Ok(out)) => {
                assert_eq!(expect, "ok", "{name}: expected {expect}, got success");
                assert_eq!(out, case["output"], "{name}: output differs");
            }
            Ok(Err(e)) => assert_eq!(e.code(), expect, "{name}: wrong outcome"),
            Err(_) => panic!("{name}: runner panicked"),
        }
    }
    assert!(
        neg > pos,
        "negative cases ({neg}) must outnumber positive ones ({pos})"
    );
}

/// Runs one case; `Ok(output)` must equal the file's output.
fn run(case: &Value) -> Result<Value, Error> {
    let i = &case["input"];
    match case["kind"].as_str().expect("kind") {
        "b64u" => Ok(json!({"hex": hex::encode(b64::decode(s(i, "text").as_bytes())?)})),
        "kex" => {
            let sk = KexSecret::from_bytes(arr(i, "secret"));
            let peer = KexPublic(arr(i, "peer_public"));
            let shared = sk.agree_raw(&peer)?;
            let k = sk.session_key(&peer)?;
            Ok(
                json!({"public": hex::encode(sk.public().0), "kid": hex::encode(sk.kid().0), "shared": hex::encode(*shared), "session_key": hex::encode(k.as_bytes())}),
            )
        }
        "inner_request" => {
            let limits = inner_limits(i);
            let msg = hx(i, "message");
            let (h, body) = inner::decode_all::<RequestHead>(&msg, &limits)?;
            for_every_split(&msg, |parts| {
                assert_eq!(
                    decode_split(inner::RequestDecoder::new(limits), parts),
                    Ok((h.clone(), body.clone()))
                )
            });
            Ok(
                json!({"method": h.method, "target": h.target, "fields": fields_json(&h.fields), "body": hex::encode(body)}),
            )
        }
        "inner_response" => {
            let limits = Limits::default();
            let msg = hx(i, "message");
            let method = i["request_method"].as_str().unwrap_or("GET");
            let decoder = || inner::ResponseDecoder::answering(method, limits);
            let got = decode_split(decoder(), &[&msg]);
            for_every_split(&msg, |parts| {
                assert_eq!(decode_split(decoder(), parts), got)
            });
            let (h, body) = got?;
            Ok(
                json!({"status": h.status, "reason": h.reason, "fields": fields_json(&h.fields), "body": hex::encode(body)}),
            )
        }
        "route" => {
            let m = Mount::new(s(i, "mount"))?;
            Ok(match outer::route(s(i, "method"), s(i, "target"), &m)? {
                Route::Outside => json!({"route": "outside"}),
                Route::Options => json!({"route": "options"}),
                Route::MethodNotAllowed => json!({"route": "method_not_allowed"}),
                Route::NotFound => json!({"route": "not_found"}),
                Route::Post { n0, profile } => {
                    json!({"route": "post", "n0": hex::encode(n0), "profile": profile.number()})
                }
                Route::Get { n0, query, profile } => {
                    json!({"route": "get", "n0": hex::encode(n0), "query": query, "profile": profile.number()})
                }
            })
        }
        "cookie_scan" => {
            let ids: Vec<(KeyId, IdKind)> = i["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|e| {
                    (
                        KeyId(arr(e, "id")),
                        if s(e, "kind") == "key" {
                            IdKind::Key
                        } else {
                            IdKind::Ticket
                        },
                    )
                })
                .collect();
            let fields: Vec<String> = i["fields"]
                .as_array()
                .expect("fields")
                .iter()
                .map(|f| f.as_str().expect("str").to_string())
                .collect();
            let got = outer::scan_cookies(fields.iter().map(|f| f.as_bytes()), |id| {
                ids.iter().find(|(k, _)| k == id).map(|(_, kind)| *kind)
            })?;
            Ok(match got {
                Credential::Key { kid, client_public } => {
                    json!({"kind": "key", "id": hex::encode(kid.0), "value": hex::encode(client_public.0)})
                }
                Credential::Ticket { tid, sealed } => {
                    json!({"kind": "ticket", "id": hex::encode(tid.0), "value": hex::encode(sealed)})
                }
                Credential::ShortTicket { tid, h } => {
                    json!({"kind": "short_ticket", "id": hex::encode(tid.0), "value": hex::encode(h)})
                }
            })
        }
        "date_check" => {
            let d = replay::check_date(
                i["date"].as_str().map(str::as_bytes),
                u(i, "now"),
                u(i, "window"),
            )?;
            Ok(json!({"date": d}))
        }
        "nonce_time" => {
            let t = profile::check_nonce_time(&arr(i, "n0"), u(i, "now"), u(i, "window"))?;
            Ok(json!({"time": t}))
        }
        "stream_seal" => run_stream_seal(i),
        "stream_open" => run_stream_open(i),
        "split_seal" => run_split_seal(i),
        "split_splice" => run_split_splice(i),
        "content_batch" => run_content_batch(i),
        "exchange" => run_exchange(i),
        "server_request" => {
            let keys = server_keys(i);
            let limits = Limits {
                max_body: i["max_body"]
                    .as_u64()
                    .map_or(Limits::default().max_body, |m| m as usize),
                ..Limits::default()
            };
            let (_, head, body) = serve(
                &keys,
                &Mount::new(s(i, "mount"))?,
                &limits,
                u(i, "now"),
                &hx(i, "outer_request"),
            )?;
            Ok(json!({"method": head.method, "target": head.target, "body": hex::encode(body)}))
        }
        "service_request" => run_service_request(i),
        "cert" => {
            let id = IdentityKey::from_seed(arr(i, "identity_seed"));
            let c = KeyCert::sign_for(
                &id,
                profile_of(i, "version"),
                u(i, "serial") as u32,
                u(i, "not_before") as u32,
                u(i, "not_after") as u32,
                KexPublic(arr(i, "kex_public")),
            );
            Ok(json!({
                "cert": hex::encode(c.encode()),
                "text": c.to_text(),
                "kid": hex::encode(c.kid().0),
                "signer": hex::encode(c.signer),
                "identity_public": hex::encode(id.public().to_bytes()),
                "aaaa": dns::format_aaaa(&c).iter().map(hex::encode).collect::<Vec<_>>(),
                "identity_txt": dns::format_identity_txt(&id.public()),
            }))
        }
        "cert_verify" => {
            let c = KeyCert::from_text(s(i, "text"))?;
            c.verify(&IdentityPublic::from_bytes(&arr(i, "identity_public"))?)?;
            Ok(
                json!({"version": c.profile.number(), "serial": c.serial, "not_before": c.not_before, "not_after": c.not_after, "kex_public": hex::encode(c.kex_public.0)}),
            )
        }
        "cert_choose" => {
            let certs = i["lines"]
                .as_array()
                .expect("lines")
                .iter()
                .map(|l| KeyCert::from_text(l.as_str().expect("str")))
                .collect::<Result<Vec<_>, _>>()?;
            let pinned = match i.get("identity_public") {
                Some(_) => Some(IdentityPublic::from_bytes(&arr(i, "identity_public"))?),
                None => None,
            };
            let c = cert::choose(&certs, u(i, "now"), pinned.as_ref())?;
            let mut out = json!({"serial": c.serial});
            if case["output"].get("not_before").is_some() {
                out["not_before"] = json!(c.not_before);
            }
            Ok(out)
        }
        "cert_list" => Ok(
            json!({"serials": cert::parse_cert_list(s(i, "body").as_bytes())?.iter().map(|c| c.serial).collect::<Vec<_>>()}),
        ),
        "aaaa" => {
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
            Ok(json!({"cert": hex::encode(dns::parse_aaaa(&addrs)?.encode())}))
        }
        "tlsa" => {
            let id = IdentityKey::from_seed(arr(i, "identity_seed"));
            let c = KeyCert::sign(
                &id,
                u(i, "serial") as u32,
                u(i, "not_before") as u32,
                u(i, "not_after") as u32,
                KexPublic(arr(i, "kex_public")),
            );
            let der = tlsa::encode(&id, &c);
            // What was encoded reads back and verifies.
            let t = tlsa::decode(&der)?;
            t.verify(&id.public())?;
            assert_eq!(t.key(), httpcrypt_proto::DiscoveredKey::from(&c));
            Ok(json!({"der": hex::encode(&der), "rdata": tlsa::format_rdata(&der)}))
        }
        "tlsa_read" => {
            let t = tlsa::parse_record(
                u(i, "usage") as u8,
                u(i, "selector") as u8,
                u(i, "matching") as u8,
                &hx(i, "data"),
            )?;
            if i.get("identity_public").is_some() {
                t.verify(&IdentityPublic::from_bytes(&arr(i, "identity_public"))?)?;
            }
            Ok(
                json!({"serial": t.serial, "not_before": t.not_before, "not_after": t.not_after, "kex_public": hex::encode(t.kex_public.0)}),
            )
        }
        "txt" => {
            let joined: Vec<u8> = i["strings"]
                .as_array()
                .expect("strings")
                .iter()
                .flat_map(|x| hex::decode(x.as_str().expect("str")).expect("hex"))
                .collect();
            Ok(json!({"cert": hex::encode(dns::parse_txt(&joined)?.encode())}))
        }
        "identity_txt" => Ok(
            json!({"identity_public": hex::encode(dns::parse_identity_txt(s(i, "text").as_bytes())?.to_bytes())}),
        ),
        "ticket_seal" => {
            let tk = ticket_key(&i["ticket_key"]);
            let t = tk.seal(
                &TicketContents {
                    key: SessionKey::from_bytes(arr(i, "session_key")),
                    kid: KeyId(arr(i, "kid")),
                    expiry: u(i, "expiry") as u32,
                },
                arr(i, "n"),
            );
            let cookie =
                outer::format_cookie(&t.tid(), t.sealed(), s(i, "name_pad"), s(i, "value_pad"))?;
            Ok(json!({"ticket": hex::encode(t.0), "field": t.to_field(), "cookie": cookie}))
        }
        "ticket_open" => {
            let c = ticket_key(&i["ticket_key"]).open(&arr(i, "sealed"), u(i, "now"))?;
            Ok(
                json!({"session_key": hex::encode(c.key.as_bytes()), "kid": hex::encode(c.kid.0), "expiry": c.expiry}),
            )
        }
        "ticket_field" => Ticket::from_field(s(i, "field").as_bytes())
            .map(|t| json!({"ticket": hex::encode(t.0)})),
        "token" => {
            let k = SessionKey::from_bytes(arr(i, "session_key"));
            let cr: [u8; 24] = arr(i, "client_random");
            Ok(
                json!({"client_random_field": b64::encode(&cr), "random_field": token::format_random(&hx(i, "token_secret"), &k, &cr)}),
            )
        }
        "token_verify" => {
            let k = SessionKey::from_bytes(arr(i, "session_key"));
            Ok(
                json!({"client_random": hex::encode(token::verify_random(&hx(i, "token_secret"), &k, s(i, "random_field").as_bytes())?)}),
            )
        }
        "admit_cookie" => {
            let addr: std::net::IpAddr = s(i, "addr").parse().expect("an address");
            let c = httpcrypt_proto::admission::issue_cookie(
                &arr(i, "secret"),
                u(i, "step") as u32,
                u(i, "difficulty") as u8,
                addr,
            );
            Ok(json!({"cookie": hex::encode(c.0), "admit": b64::encode(&c.0)}))
        }
        "admit_verify" => {
            use httpcrypt_proto::admission;
            let addr: std::net::IpAddr = s(i, "addr").parse().expect("an address");
            let n0: [u8; 24] = arr(i, "n0");
            let echo = s(i, "echo").as_bytes();
            admission::verify_echo(
                &[&arr(i, "secret")],
                u(i, "step_now") as u32,
                addr,
                &n0,
                echo,
            )?;
            let (c, sol) = admission::parse_echo(echo)?;
            Ok(
                json!({"difficulty": c.difficulty(), "puzzle_hash": hex::encode(admission::puzzle_hash(&c, &n0, &sol))}),
            )
        }
        kind if kind.starts_with("rspamd_") => common::rspamd::run(kind, i),
        other => panic!("unknown vector kind {other}"),
    }
}

fn run_stream_seal(i: &Value) -> Result<Value, Error> {
    let key = SessionKey::from_bytes(arr(i, "key"));
    let p = profile_of(i, "profile");
    let mut out = Vec::new();
    let response = s(i, "direction") == "response";
    let mut sealer = match (response, p) {
        (true, _) => {
            let fresh: [u8; 24] = match p {
                Profile::V1 => arr(i, "n0"),
                Profile::Compact => {
                    let mut f = [0u8; 24];
                    f[..16].copy_from_slice(&arr::<16>(i, "response_random"));
                    f
                }
            };
            Sealer::response(
                ResponseKey::for_profile(key.clone(), arr(i, "request_n0"), p),
                fresh,
                &mut out,
            )
        }
        (false, Profile::V1) => Sealer::request(&key, arr(i, "n0")),
        (false, Profile::Compact) => {
            Sealer::request_bound(&key, arr(i, "n0"), s(i, "host").as_bytes())?
        }
    };
    let records = i["records"].as_array().expect("records");
    let mut expected_events = Vec::new();
    for (idx, r) in records.iter().enumerate() {
        let p = hx(r, "plaintext");
        let clear = r["clear"].as_bool().expect("clear");
        if !p.is_empty() {
            expected_events.push((p.clone(), clear));
        }
        if idx + 1 == records.len() {
            assert!(r["final"].as_bool().expect("final"));
            if clear {
                sealer.finish_clear(&p, &mut out)?
            } else {
                sealer.finish(&p, &mut out)?
            }
            break;
        }
        if clear {
            sealer.seal_clear(&p, &mut out)?
        } else {
            sealer.seal(&p, &mut out)?
        }
    }
    // The sealed body must open again, event by event, for any split.
    let mk = || stream_opener(i, &key, 1 << 20);
    for_every_split(&out, |parts| {
        assert_eq!(open_split(mk(), parts), Ok(expected_events.clone()))
    });
    Ok(json!({"body": hex::encode(out)}))
}

fn run_split_seal(i: &Value) -> Result<Value, Error> {
    let key = SessionKey::from_bytes(arr(i, "key"));
    let mut out = Vec::new();
    let sealer = Sealer::response(
        ResponseKey::new(key.clone(), arr(i, "request_n0")),
        arr(i, "n0"),
        &mut out,
    );
    let body = hx(i, "body");
    let size = u(i, "public_record") as usize;
    let ids = split::seal_split(sealer, &hx(i, "head"), &body, size, &mut out)?;
    let client = split::splice_all(&out, 1 << 20, |id| {
        body.chunks(size.max(1))
            .find(|c| ContentId::of(c) == *id)
            .map(<[u8]>::to_vec)
    })?;
    // The spliced body is an ordinary response stream under the key.
    let plain = stream::open_all(
        Opener::response(&key, arr(i, "request_n0"), 1 << 20),
        &client,
    )?;
    assert!(plain.ends_with(&body));
    Ok(json!({
        "split": hex::encode(&out),
        "ids": ids.iter().map(|i| hex::encode(i.0)).collect::<Vec<_>>(),
        "client_body": hex::encode(&client),
    }))
}

/// Splices a split stream fed in `parts`, with payloads from `map`.
fn splice_parts(
    parts: &[&[u8]],
    max: usize,
    map: &serde_json::Map<String, Value>,
) -> Result<Vec<u8>, Error> {
    let mut d = SplitDecoder::new(max);
    let mut out = Vec::new();
    for p in parts {
        d.receive(p)?;
        while let Some(ev) = d.next_event()? {
            match ev {
                SplitEvent::Nonce(b) | SplitEvent::Verbatim(b) => out.extend_from_slice(b),
                SplitEvent::Stub(stub) => {
                    let payload = map
                        .get(&hex::encode(stub.id.0))
                        .map(|v| hex::decode(v.as_str().unwrap()).unwrap())
                        .ok_or(Error::ContentMismatch)?;
                    stub.splice(&payload, &mut out)?;
                }
                SplitEvent::End => {}
            }
        }
    }
    d.finish()?;
    Ok(out)
}

fn run_split_splice(i: &Value) -> Result<Value, Error> {
    let max = u(i, "max_record") as usize;
    let map = i["payloads"].as_object().expect("payloads").clone();
    let input = hx(i, "split");
    let whole = splice_parts(&[&input], max, &map);
    for_every_split(&input, |parts| {
        assert_eq!(splice_parts(parts, max, &map), whole, "split feeding");
    });
    Ok(json!({"body": hex::encode(whole?)}))
}

fn run_content_batch(i: &Value) -> Result<Value, Error> {
    let body = hx(i, "body");
    let run = |parts: &[&[u8]]| -> Result<Vec<Value>, Error> {
        let mut d = split::BatchDecoder::new(u(i, "count") as usize, u(i, "max_record") as usize);
        let mut out = Vec::new();
        for p in parts {
            d.receive(p)?;
            while let Some(ev) = d.next_event()? {
                out.push(match ev {
                    split::BatchEvent::Found(p) => json!(hex::encode(p)),
                    split::BatchEvent::Missing => Value::Null,
                });
            }
        }
        d.finish()?;
        Ok(out)
    };
    let whole = run(&[&body]);
    for_every_split(&body, |parts| {
        assert_eq!(run(parts), whole, "split feeding")
    });
    Ok(json!({"entries": whole?}))
}

fn run_stream_open(i: &Value) -> Result<Value, Error> {
    let key = SessionKey::from_bytes(arr(i, "key"));
    let max = u(i, "max_record") as usize;
    let mk = || stream_opener(i, &key, max);
    let body = hx(i, "body");
    let whole = open_split(mk(), &[&body]);
    for_every_split(&body, |parts| {
        assert_eq!(
            open_split(mk(), parts),
            whole,
            "split {:?}",
            parts.iter().map(|p| p.len()).collect::<Vec<_>>()
        )
    });
    let events = whole?;
    Ok(
        json!({"plaintext": hex::encode(events.iter().flat_map(|(p, _)| p.iter().copied()).collect::<Vec<u8>>())}),
    )
}

/// The version / profile number in `i[name]` (absent: 1).
fn profile_of(i: &Value, name: &str) -> Profile {
    match i.get(name).and_then(Value::as_u64) {
        None | Some(1) => Profile::V1,
        Some(2) => Profile::Compact,
        Some(n) => panic!("unknown profile {n}"),
    }
}

/// The opener a `stream_seal` / `stream_open` case describes.
fn stream_opener(i: &Value, key: &SessionKey, max: usize) -> Opener {
    let p = profile_of(i, "profile");
    match (s(i, "direction") == "response", p) {
        (true, _) => Opener::response_for(key, arr(i, "request_n0"), p, max),
        (false, Profile::V1) => Opener::request(key, arr(i, "n0"), max),
        (false, Profile::Compact) => {
            Opener::request_bound(key, arr(i, "n0"), s(i, "host").as_bytes(), max)
                .expect("vector hosts fit")
        }
    }
}

fn run_exchange(i: &Value) -> Result<Value, Error> {
    let keys = server_keys(i);
    let cert = keys.keys()[0].cert.clone();
    let mount = Mount::new(s(i, "mount"))?;
    let form = if s(i, "form") == "post" {
        Form::Post
    } else {
        Form::Get
    };
    let client_secret = i
        .get("client_secret")
        .map(|_| KexSecret::from_bytes(arr(i, "client_secret")));
    let ticket = i.get("ticket").map(|_| {
        (
            Ticket(arr(i, "ticket")),
            SessionKey::from_bytes(arr(i, "ticket_session_key")),
        )
    });
    let cred = match (&client_secret, &ticket) {
        (Some(c), _) => ClientCredential::Key(c),
        (None, Some((t, k))) => ClientCredential::Ticket(t, k),
        (None, None) => panic!("exchange needs a credential"),
    };
    let mut prepared = PreparedRequest::new(
        &cert,
        cred,
        arr(i, "n0"),
        s(i, "name_pad"),
        s(i, "value_pad"),
    )?;
    let p = profile_of(i, "profile");
    assert_eq!(
        cert.profile, p,
        "the server's certificate announces the profile"
    );
    if p == Profile::Compact {
        prepared = prepared.compact(s(i, "host"))?;
    }
    let inner_req = hx(i, "inner_request");
    let mut stream_bytes = Vec::new();
    stream::seal_all(
        prepared.sealer(),
        &inner_req,
        u(i, "record_size") as usize,
        &mut stream_bytes,
    )?;
    let outer_req = prepared.encode_outer(form, &mount, s(i, "host"), &stream_bytes);
    // Server: parse what the client sent, recover the inner request.
    let (accepted, head, body) = serve(&keys, &mount, &Limits::default(), u(i, "now"), &outer_req)?;
    let mut plain = Vec::new();
    head.encode(&mut plain);
    plain.extend_from_slice(&body);
    assert_eq!(plain, inner_req);
    assert_eq!(accepted.session_key(), prepared.session_key());
    // Response.
    let inner_rsp = hx(i, "inner_response");
    let mut rsp = Vec::new();
    assert_eq!(accepted.profile, p);
    let fresh: [u8; 24] = match p {
        Profile::V1 => arr(i, "response_n0"),
        Profile::Compact => {
            let mut f = [0u8; 24];
            f[..16].copy_from_slice(&arr::<16>(i, "response_random"));
            f
        }
    };
    let sealer = Sealer::response(accepted.into_response_key(), fresh, &mut rsp);
    stream::seal_all(
        sealer,
        &inner_rsp,
        u(i, "response_record_size") as usize,
        &mut rsp,
    )?;
    let (rh, rb) = prepared.open_response(&rsp, &Limits::default())?;
    let mut again = Vec::new();
    rh.encode(&mut again);
    again.extend_from_slice(&rb);
    assert_eq!(again, inner_rsp);
    Ok(json!({
        "cert_text": cert.to_text(),
        "session_key": hex::encode(prepared.session_key().as_bytes()),
        "cookie": prepared.cookie(),
        "outer_request": hex::encode(&outer_req),
        "response_body": hex::encode(&rsp),
    }))
}

fn server_keys(i: &Value) -> ServerKeys {
    let id = IdentityKey::from_seed(arr(i, "identity_seed"));
    let kex = KexSecret::from_bytes(arr(i, "server_secret"));
    let c = &i["cert"];
    let cert = KeyCert::sign_for(
        &id,
        profile_of(c, "version"),
        u(c, "serial") as u32,
        u(c, "not_before") as u32,
        u(c, "not_after") as u32,
        *kex.public(),
    );
    let mut keys = ServerKeys::new();
    keys.add_key(kex, cert);
    let tk = &i["ticket_key"];
    keys.add_ticket_key(ticket_key(tk), u(tk, "expires"));
    keys
}

fn ticket_key(v: &Value) -> TicketKey {
    TicketKey::new(KeyId(arr(v, "tid")), arr(v, "key"))
}

/// The server's handling of outer request bytes.
fn serve(
    keys: &ServerKeys,
    mount: &Mount,
    limits: &Limits,
    now: u64,
    outer_bytes: &[u8],
) -> Result<(server::Accepted, RequestHead, Vec<u8>), Error> {
    let served = server::serve_bytes(keys, mount, limits, now, outer_bytes)?;
    Ok(served.expect("vector requests are under the mount"))
}

/// The request the service sees (spec §4.3, erratum E1): the inner fields
/// as `inner::service_fields` builds them (the bound outer `Host` and the
/// configured `authority` only where the inner head has no `Host`), and
/// apart from them the outer fields named in `pass_outer`: each name in
/// list order, its values in outer order.
fn run_service_request(i: &Value) -> Result<Value, Error> {
    let outer = hx(i, "outer_request");
    let (accepted, head, body) = serve(
        &server_keys(i),
        &Mount::new(s(i, "mount"))?,
        &Limits::default(),
        u(i, "now"),
        &outer,
    )?;
    let fields = inner::service_fields(
        &head.fields,
        accepted.bound_host(),
        i["authority"].as_str().map(str::as_bytes),
    );
    let mut storage = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut storage);
    req.parse(&outer).expect("outer head parses");
    let mut passed = Vec::new();
    for name in i["pass_outer"].as_array().into_iter().flatten() {
        let name = name.as_str().expect("pass_outer names are strings");
        for h in req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
        {
            passed.push(json!([h.name, String::from_utf8_lossy(h.value)]));
        }
    }
    Ok(json!({
        "method": head.method,
        "target": head.target,
        "fields": fields_json(&fields),
        "outer_fields": passed,
        "body": hex::encode(body),
    }))
}

fn inner_limits(i: &Value) -> Limits {
    let mut l = Limits::default();
    if let Some(h) = i["max_inner_head"].as_u64() {
        l.max_inner_head = h as usize;
    }
    if let Some(f) = i["max_inner_fields"].as_u64() {
        l.max_inner_fields = f as usize;
    }
    l
}

fn fields_json(fields: &[inner::Field]) -> Value {
    json!(fields
        .iter()
        .map(|f| json!([f.name, String::from_utf8_lossy(&f.value)]))
        .collect::<Vec<_>>())
}

/// Opens a stream fed in `parts`; returns (plaintext, clear) per data event.
fn open_split(mut o: Opener, parts: &[&[u8]]) -> Result<Vec<(Vec<u8>, bool)>, Error> {
    let mut events = Vec::new();
    let mut ended = false;
    for p in parts {
        o.receive(p)?;
        while let Some(ev) = o.next_event()? {
            match ev {
                Event::Data { plaintext, clear } => {
                    assert!(!ended && !plaintext.is_empty());
                    events.push((plaintext.to_vec(), clear));
                }
                Event::End => ended = true,
            }
        }
    }
    o.finish()?;
    assert!(ended, "finish succeeded without End");
    Ok(events)
}

fn decode_split<H: inner::Head + Clone>(
    mut d: inner::Decoder<H>,
    parts: &[&[u8]],
) -> Result<(H, Vec<u8>), Error> {
    let mut head = None;
    let mut body = Vec::new();
    for p in parts {
        d.receive(p)?;
        while let Some(ev) = d.next_event()? {
            match ev {
                inner::InnerEvent::Head(h) => head = Some(h),
                inner::InnerEvent::Body(b) => body.extend_from_slice(b),
            }
        }
    }
    d.finish()?;
    Ok((head.ok_or(Error::MalformedInner)?, body))
}

/// `vectors/provenance/`: provenance certificates (spec/asap.md), a project
/// extension kept apart from the v1 vectors the other implementations run.
#[test]
fn provenance_vectors() {
    use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
    let dir = vectors_dir().join("provenance");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("vectors/provenance/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let (mut pos, mut neg) = (0, 0);
    for f in &files {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(f).expect("readable"))
            .expect("valid JSON");
        let name = case["name"].as_str().expect("name");
        assert_eq!(case["kind"], "provenance_verify", "{name}");
        let i = &case["input"];
        let key = ProvenanceKey::from_parts(arr(i, "key_id"), arr(i, "secret"));
        let got = provenance::verify(
            s(i, "text").as_bytes(),
            &[key],
            s(i, "peer").parse().expect("peer address"),
            ServerId(arr(i, "server")),
            i["now"].as_u64().expect("now"),
        );
        match (case["expect"].as_str().expect("expect"), got) {
            ("ok", Ok(c)) => {
                pos += 1;
                let out = &case["output"];
                assert_eq!(out["address"], c.address.to_string(), "{name}");
                assert_eq!(out["issued"], c.issued, "{name}");
                assert_eq!(out["lifetime"], c.lifetime, "{name}");
                let raw = b64::decode(s(i, "text").as_bytes()).expect("b64");
                assert_eq!(out["hex"], hex::encode(raw), "{name}");
            }
            (want, Err(e)) => {
                neg += 1;
                assert_eq!(e.code(), want, "{name}");
            }
            (want, Ok(_)) => panic!("{name}: expected {want}, got success"),
        }
    }
    assert!(pos >= 3 && neg > pos, "{pos} positive, {neg} negative");
}

fn hybrid_cases() -> Vec<Value> {
    let dir = vectors_dir().join("hybrid");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("vectors/hybrid/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            serde_json::from_str(&std::fs::read_to_string(f).expect("readable"))
                .expect("valid JSON")
        })
        .collect()
}

/// `vectors/hybrid/`: suite 2 (spec/hybrid.md), a project extension kept
/// apart from the v1 vectors until every implementation runs it.
#[test]
fn hybrid_vectors() {
    let cases = hybrid_cases();
    let pos = cases.iter().filter(|c| c["expect"] == "ok").count();
    let neg = cases.len() - pos;
    assert!(pos >= 10 && neg > pos, "{pos} positive, {neg} negative");
    for kind in [
        "xwing",
        "hybrid_exchange",
        "hybrid_server_request",
        "hybrid_cert_verify",
    ] {
        assert!(cases.iter().any(|c| c["kind"] == kind), "no {kind} case");
    }
    for case in &cases {
        if let Err(e) = common::hybrid::check(case) {
            panic!("{e}");
        }
    }
}

/// The hybrid runner notices a changed file: every positive case with one
/// output character changed, and every negative case expecting another
/// code, fails.
#[test]
fn hybrid_vectors_catch_corruption() {
    for case in hybrid_cases() {
        let mut bad = case.clone();
        if case["expect"] == "ok" {
            assert!(
                change_one_character(&mut bad["output"]),
                "{}: nothing to change",
                case["name"]
            );
        } else {
            let other = if case["expect"] == "integrity" {
                "truncated"
            } else {
                "integrity"
            };
            bad["expect"] = json!(other);
        }
        assert!(
            common::hybrid::check(&bad).is_err(),
            "{}: a corrupted copy passed",
            case["name"]
        );
    }
}

/// Changes the last character of the first non-empty string in `v`.
fn change_one_character(v: &mut Value) -> bool {
    match v {
        Value::String(t) if !t.is_empty() => {
            let last = t.pop().expect("non-empty");
            t.push(if last == '0' { '1' } else { '0' });
            true
        }
        Value::Array(a) => a.iter_mut().any(change_one_character),
        Value::Object(o) => o.values_mut().any(change_one_character),
        _ => false,
    }
}

/// `vectors/short-ticket/`: short tickets (spec §7.3), a project extension
/// kept apart from the v1 vectors: the derivation of `k'`, the `Ticket`
/// field, and the server's handling of the cookie.
#[test]
fn short_ticket_vectors() {
    use httpcrypt_proto::ticket::ShortTicket;
    let dir = vectors_dir().join("short-ticket");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("vectors/short-ticket/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let (mut pos, mut neg) = (0, 0);
    for f in &files {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(f).expect("readable"))
            .expect("valid JSON");
        let name = case["name"].as_str().expect("name");
        let i = &case["input"];
        let got: Result<Value, Error> = match case["kind"].as_str().expect("kind") {
            "short_ticket_issue" => {
                let tk = ticket_key(&i["ticket_key"]);
                let t = tk.issue_short(&KeyId(arr(i, "kid")), arr(i, "h"));
                outer::format_cookie(&t.tid(), t.h(), s(i, "name_pad"), s(i, "value_pad")).map(
                    |cookie| {
                        json!({"key": hex::encode(t.key().as_bytes()), "field": t.to_field(), "cookie": cookie})
                    },
                )
            }
            "short_ticket_field" => ShortTicket::from_field(s(i, "field").as_bytes()).map(|t| {
                json!({"tid": hex::encode(t.tid().0), "h": hex::encode(t.h()), "key": hex::encode(t.key().as_bytes())})
            }),
            "short_ticket_accept" => {
                let kex = KexSecret::from_bytes(arr(i, "server_secret"));
                let c = &i["cert"];
                let cert = KeyCert::sign_for(
                    &IdentityKey::from_seed(arr(i, "identity_seed")),
                    Profile::V1,
                    u(c, "serial") as u32,
                    u(c, "not_before") as u32,
                    u(c, "not_after") as u32,
                    *kex.public(),
                );
                let mut keys = ServerKeys::new();
                keys.add_key(kex, cert);
                let tk = &i["ticket_key"];
                match tk["kid"].as_str() {
                    Some(_) => keys.add_ticket_key_for(
                        ticket_key(tk),
                        KeyId(arr(tk, "kid")),
                        u(tk, "expires"),
                    ),
                    None => keys.add_ticket_key(ticket_key(tk), u(tk, "expires")),
                }
                let now = u(i, "now");
                outer::scan_cookies([s(i, "cookie").as_bytes()], |id| keys.lookup(id, now))
                    .and_then(|cred| match cred {
                        Credential::ShortTicket { tid, h } => keys.open_short_ticket(&tid, &h, now),
                        other => panic!("{name}: not a short ticket: {other:?}"),
                    })
                    .map(|(kid, key)| {
                        json!({"kid": hex::encode(kid.0), "session_key": hex::encode(key.as_bytes())})
                    })
            }
            other => panic!("{name}: unknown kind {other}"),
        };
        match (case["expect"].as_str().expect("expect"), got) {
            ("ok", Ok(out)) => {
                pos += 1;
                assert_eq!(out, case["output"], "{name}: output differs");
            }
            (want, Err(e)) => {
                neg += 1;
                assert_eq!(e.code(), want, "{name}");
            }
            (want, Ok(_)) => panic!("{name}: expected {want}, got success"),
        }
    }
    assert!(pos >= 3 && neg > pos, "{pos} positive, {neg} negative");
}
