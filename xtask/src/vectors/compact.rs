//! Vectors for request profile 2, compact (spec §4.5): version-2
//! certificates, the nonce time, streams bound to the outer `Host` and
//! answered after a 16-byte response random, complete exchanges, and the
//! ways a server refuses a profile-2 request. Route cases live with the
//! other route cases (`messages.rs`).

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::profile::{self, Profile};
use httpcrypt_proto::stream::{self, Opener, ResponseKey, Sealer};
use httpcrypt_proto::{dns, Error, IdentityKey, KexPublic, KexSecret, KeyCert, Limits, SessionKey};
use serde_json::{json, Value};

use super::certs;
use super::exchange::{self, replace, Server};
use super::{bytes, check, hx, Case};

const NOW: u64 = 1_700_000_000;
const HOST: &str = "www.example.com";

/// A profile-2 request nonce sent at `t`.
pub(crate) fn n0_at(label: &str, t: u64) -> [u8; 24] {
    let mut n0 = bytes::<24>(label);
    n0[..5].copy_from_slice(&t.to_be_bytes()[3..]);
    n0
}

/// The exchange server with its certificate re-signed as version 2.
pub(crate) fn server2() -> Server {
    let mut s = exchange::server();
    let c = &s.cert;
    s.cert = KeyCert::sign_for(
        &IdentityKey::from_seed(s.identity_seed),
        Profile::Compact,
        c.serial,
        c.not_before,
        c.not_after,
        c.kex_public,
    );
    s
}

fn cert_cases(v: &mut Vec<Case>) {
    let id = IdentityKey::from_seed(bytes("cert-identity"));
    let (serial, nb, na) = (3u32, 1_700_000_000u32, 1_700_007_260u32);
    let c = KeyCert::sign_for(
        &id,
        Profile::Compact,
        serial,
        nb,
        na,
        KexPublic(bytes("compact-cert-kex")),
    );
    c.verify(&id.public()).unwrap();
    let aaaa = dns::format_aaaa(&c);
    assert_eq!(dns::parse_aaaa(&aaaa).unwrap(), c);
    assert_eq!(c.encode()[0], 2);
    v.push(Case::ok(
        "cert",
        "compact-cert-sign",
        "a version-2 certificate: the key also takes profile-2 requests",
        json!({"identity_seed": hx(bytes::<32>("cert-identity")), "version": 2, "serial": serial, "not_before": nb, "not_after": na, "kex_public": hx(c.kex_public.0)}),
        certs::cert_output(&c, &id),
    ));
    v.push(Case::ok(
        "cert_verify",
        "compact-cert-verify",
        "a version-2 certificate verifies like a version-1 one",
        json!({"text": c.to_text(), "identity_public": hx(id.public().to_bytes())}),
        json!({"version": 2, "serial": serial, "not_before": nb, "not_after": na, "kex_public": hx(c.kex_public.0)}),
    ));
    // The version byte is signed: turning a v1 certificate into a v2 one breaks it.
    let v1 = KeyCert::sign(&id, serial, nb, na, KexPublic(bytes("compact-cert-kex")));
    let mut raw = v1.encode();
    raw[0] = 2;
    let text = format!("hc1 {}", httpcrypt_proto::b64::encode(&raw));
    let got = KeyCert::from_text(&text).and_then(|c| c.verify(&id.public()));
    check("compact-cert-verify-upgraded", got, &Error::BadSignature);
    v.push(Case::err(
        "cert_verify",
        "compact-cert-verify-upgraded",
        "the version byte is signed: a v1 certificate relabelled as version 2 fails",
        json!({"text": text, "identity_public": hx(id.public().to_bytes())}),
        Error::BadSignature,
    ));
}

fn time_cases(v: &mut Vec<Case>) {
    let mut add = |name: &str, why: &str, t: u64, now: u64, window: u64| {
        let n0 = n0_at(name, t);
        let got = profile::check_nonce_time(&n0, now, window);
        let input = json!({"n0": hx(n0), "now": now, "window": window});
        match got {
            Ok(time) => {
                assert_eq!(time, t);
                v.push(Case::ok(
                    "nonce_time",
                    name,
                    why,
                    input,
                    json!({"time": time}),
                ));
            }
            Err(e) => v.push(Case::err("nonce_time", name, why, input, e)),
        }
    };
    add("compact-time-now", "sent now", NOW, NOW, 60);
    add(
        "compact-time-edge-past",
        "exactly W seconds old passes",
        NOW - 60,
        NOW,
        60,
    );
    add(
        "compact-time-edge-future",
        "exactly W seconds ahead passes",
        NOW + 60,
        NOW,
        60,
    );
    add(
        "compact-time-stale-past",
        "W + 1 seconds old is stale",
        NOW - 61,
        NOW,
        60,
    );
    add(
        "compact-time-stale-future",
        "W + 1 seconds ahead is stale",
        NOW + 61,
        NOW,
        60,
    );
    add("compact-time-zero", "time 0 is stale", 0, NOW, 60);
    add(
        "compact-time-large",
        "the full 40 bits are the time",
        0xff_ffff_ffff,
        0xff_ffff_ffff - 1,
        60,
    );
}

fn stream_cases(v: &mut Vec<Case>) {
    let key = SessionKey::from_bytes(bytes("compact-stream-key"));
    let n0 = n0_at("compact-stream-n0", NOW);
    let records: [(&[u8], bool); 2] = [(b"GET / HTTP/1.1\r\n", false), (b"\r\n", false)];
    // Request, two records.
    let mut req = Vec::new();
    let mut s = Sealer::request_bound(&key, n0, HOST.as_bytes()).unwrap();
    s.seal(records[0].0, &mut req).unwrap();
    s.finish(records[1].0, &mut req).unwrap();
    let plain = [records[0].0, records[1].0].concat();
    let o = Opener::request_bound(&key, n0, HOST.as_bytes(), 1 << 20).unwrap();
    assert_eq!(stream::open_all(o, &req).unwrap(), plain);
    let recs = |rs: &[(&[u8], bool)]| {
        rs.iter()
            .enumerate()
            .map(|(i, (p, c))| json!({"plaintext": hx(p), "clear": c, "final": i + 1 == rs.len()}))
            .collect::<Vec<_>>()
    };
    v.push(Case::ok(
        "stream_seal",
        "compact-seal-request",
        "profile 2: record 0 binds the outer Host",
        json!({"profile": 2, "key": hx(key.as_bytes()), "direction": "request", "n0": hx(n0), "host": HOST, "records": recs(&records)}),
        json!({"body": hx(&req)}),
    ));
    // Response: random, then a CLEAR and an encrypted record.
    let rnd = bytes::<16>("compact-stream-random");
    let mut fresh = [0u8; 24];
    fresh[..16].copy_from_slice(&rnd);
    let mut rsp = Vec::new();
    let mut s = Sealer::response(
        ResponseKey::for_profile(key.clone(), n0, Profile::Compact),
        fresh,
        &mut rsp,
    );
    let rrecs: [(&[u8], bool); 2] = [(b"HTTP/1.1 200 OK\r\n\r\n", false), (b"public bytes", true)];
    s.seal(rrecs[0].0, &mut rsp).unwrap();
    s.finish_clear(rrecs[1].0, &mut rsp).unwrap();
    assert_eq!(&rsp[..16], &rnd);
    let o = Opener::response_for(&key, n0, Profile::Compact, 1 << 20);
    assert_eq!(
        stream::open_all(o, &rsp).unwrap(),
        [rrecs[0].0, rrecs[1].0].concat()
    );
    v.push(Case::ok(
        "stream_seal",
        "compact-seal-response",
        "profile 2: 16-byte random, stream nonce ff*8 || random, label hc2-rsp",
        json!({"profile": 2, "key": hx(key.as_bytes()), "direction": "response", "request_n0": hx(n0), "response_random": hx(rnd), "records": recs(&rrecs)}),
        json!({"body": hx(&rsp)}),
    ));
    // Opening.
    let mut open = |name: &str,
                    why: &str,
                    input: Value,
                    got: Result<Vec<u8>, Error>,
                    want: Result<&[u8], Error>| {
        match want {
            Ok(p) => {
                assert_eq!(got.unwrap_or_else(|e| panic!("{name}: {e:?}")), p, "{name}");
                v.push(Case::ok(
                    "stream_open",
                    name,
                    why,
                    input,
                    json!({"plaintext": hx(p)}),
                ));
            }
            Err(e) => {
                check(name, got, &e);
                v.push(Case::err("stream_open", name, why, input, e));
            }
        }
    };
    let req_in = |host: &str, body: &[u8]| json!({"profile": 2, "key": hx(key.as_bytes()), "direction": "request", "n0": hx(n0), "host": host, "max_record": 1 << 20, "body": hx(body)});
    let open_req = |host: &str, body: &[u8]| {
        stream::open_all(
            Opener::request_bound(&key, n0, host.as_bytes(), 1 << 20).unwrap(),
            body,
        )
    };
    open(
        "compact-open-request",
        "the Host bound by the sender",
        req_in(HOST, &req),
        open_req(HOST, &req),
        Ok(&plain),
    );
    open(
        "compact-open-request-other-host",
        "a rewritten Host breaks record 0",
        req_in("www.example.com:80", &req),
        open_req("www.example.com:80", &req),
        Err(Error::Integrity),
    );
    open(
        "compact-open-request-as-v1",
        "a v1 receiver (no Host, label hc1-req) cannot open it",
        json!({"key": hx(key.as_bytes()), "direction": "request", "n0": hx(n0), "max_record": 1 << 20, "body": hx(&req)}),
        stream::open_all(Opener::request(&key, n0, 1 << 20), &req),
        Err(Error::Integrity),
    );
    let rsp_in = |body: &[u8], profile: Option<u8>| {
        let mut j = json!({"key": hx(key.as_bytes()), "direction": "response", "request_n0": hx(n0), "max_record": 1 << 20, "body": hx(body)});
        if let Some(p) = profile {
            j["profile"] = json!(p);
        }
        j
    };
    let open_rsp = |body: &[u8], p: Profile| {
        stream::open_all(Opener::response_for(&key, n0, p, 1 << 20), body)
    };
    let rplain = [rrecs[0].0, rrecs[1].0].concat();
    open(
        "compact-open-response",
        "16 bytes of random, then the stream",
        rsp_in(&rsp, Some(2)),
        open_rsp(&rsp, Profile::Compact),
        Ok(&rplain),
    );
    open(
        "compact-open-response-as-v1",
        "read as v1, the 24-byte nonce swallows the first record header, and the next four bytes of tag read as a length far above the maximum",
        rsp_in(&rsp, None),
        open_rsp(&rsp, Profile::V1),
        Err(Error::RecordTooLarge),
    );
    open(
        "compact-open-response-short",
        "a body shorter than the random is truncated",
        rsp_in(&rsp[..15], Some(2)),
        open_rsp(&rsp[..15], Profile::Compact),
        Err(Error::Truncated),
    );
    let mut flipped = rsp.clone();
    flipped[3] ^= 1;
    open(
        "compact-open-response-flipped-random",
        "the random feeds the nonce",
        rsp_in(&flipped, Some(2)),
        open_rsp(&flipped, Profile::Compact),
        Err(Error::Integrity),
    );
}

const INNER_GET: &[u8] = b"GET /status?verbose=1 HTTP/1.1\r\nAccept: text/plain\r\n\r\n";
const INNER_POST: &[u8] = b"POST /api/v1/items HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"name\":\"widget\",\"qty\":12}\n";
const INNER_RSP: &[u8] =
    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n\r\n{\"id\":7}\n";

fn prepare(
    s: &Server,
    cred: ClientCredential<'_>,
    n0: [u8; 24],
    pads: (&str, &str),
) -> PreparedRequest {
    PreparedRequest::new(&s.cert, cred, n0, pads.0, pads.1)
        .unwrap()
        .compact(HOST)
        .unwrap()
}

fn outer(p: &PreparedRequest, form: Form, mount: &Mount, inner: &[u8], record: usize) -> Vec<u8> {
    let mut st = Vec::new();
    stream::seal_all(p.sealer(), inner, record, &mut st).unwrap();
    p.encode_outer(form, mount, HOST, &st)
}

#[allow(clippy::too_many_arguments)]
fn exchange_case(
    v: &mut Vec<Case>,
    name: &str,
    why: &str,
    s: &Server,
    client_secret: Option<[u8; 32]>,
    pads: (&str, &str),
    form: Form,
    mount: &str,
    inner: &[u8],
    record: usize,
) {
    let m = Mount::new(mount).unwrap();
    let n0 = n0_at(&format!("{name}-n0"), NOW);
    let client = client_secret.map(KexSecret::from_bytes);
    let (ticket, ticket_k) = s.ticket();
    let cred = match &client {
        Some(c) => ClientCredential::Key(c),
        None => ClientCredential::Ticket(&ticket, &ticket_k),
    };
    let p = prepare(s, cred, n0, pads);
    let out = outer(&p, form, &m, inner, record);
    let (accepted, head, body) = exchange::serve(&s.keys(), &m, &Limits::default(), NOW, &out)
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(accepted.profile, Profile::Compact);
    let mut plain = Vec::new();
    head.encode(&mut plain);
    plain.extend_from_slice(&body);
    assert_eq!(plain, inner, "{name}: inner request survives");
    let rnd = bytes::<16>(&format!("{name}-response-random"));
    let mut fresh = [0u8; 24];
    fresh[..16].copy_from_slice(&rnd);
    let mut rsp = Vec::new();
    let sealer = Sealer::response(accepted.into_response_key(), fresh, &mut rsp);
    stream::seal_all(sealer, INNER_RSP, 1 << 14, &mut rsp).unwrap();
    let (rh, rb) = p.open_response(&rsp, &Limits::default()).unwrap();
    assert_eq!(
        (rh.status, rb.as_slice()),
        (201, b"{\"id\":7}\n".as_slice())
    );

    let mut input = s.exchange_input(mount, client.as_ref(), n0, pads, HOST, form, inner, record);
    input["profile"] = json!(2);
    input["cert"]["version"] = json!(2);
    input["response_random"] = json!(hx(rnd));
    input["inner_response"] = json!(hx(INNER_RSP));
    input["response_record_size"] = json!(1 << 14);
    v.push(Case::ok(
        "exchange",
        name,
        why,
        input,
        json!({
            "cert_text": s.cert.to_text(),
            "session_key": hx(p.session_key().as_bytes()),
            "cookie": p.cookie(),
            "outer_request": hx(&out),
            "response_body": hx(&rsp),
        }),
    ));
}

fn refuse(v: &mut Vec<Case>, s: &Server, name: &str, why: &str, outer: &[u8], want: Error) {
    let m = Mount::new("/hc").unwrap();
    let got = exchange::serve(&s.keys(), &m, &Limits::default(), NOW, outer).map(|(_, h, _)| h);
    check(name, got, &want);
    let mut input = s.json(NOW, "/hc");
    input["cert"]["version"] = json!(2);
    input["outer_request"] = json!(hx(outer));
    v.push(Case::err("server_request", name, why, input, want));
}

fn exchange_cases(v: &mut Vec<Case>) {
    let s = server2();
    exchange_case(
        v,
        "compact-exchange-get",
        "profile 2, GET form, fresh key: no inner Host or Date, the answer without Date or Content-Length",
        &s,
        Some(bytes("compact-client-1")),
        ("", "Q"),
        Form::Get,
        "/hc",
        INNER_GET,
        16384,
    );
    exchange_case(
        v,
        "compact-exchange-post-padded",
        "profile 2, POST form under the root mount, 7-character pads, small records",
        &s,
        Some(bytes("compact-client-2")),
        ("k3y_Pad", "pad-7ch"),
        Form::Post,
        "",
        INNER_POST,
        40,
    );
    exchange_case(
        v,
        "compact-exchange-ticket",
        "profile 2 with a ticket",
        &s,
        None,
        ("t", ""),
        Form::Post,
        "/hc",
        INNER_POST,
        16384,
    );

    // Refusals.
    let m = Mount::new("/hc").unwrap();
    let client = KexSecret::from_bytes(bytes("compact-client-9"));
    let n0 = n0_at("compact-refuse-n0", NOW);
    let p = prepare(&s, ClientCredential::Key(&client), n0, ("", ""));
    let base = outer(&p, Form::Post, &m, INNER_POST, 16384);
    let get = outer(&p, Form::Get, &m, INNER_GET, 16384);
    let seg = format!("/hc/2{}", httpcrypt_proto::b64::encode(&n0));
    // The same request accepted under the v1 server certificate too: the
    // profile is the request's, not the key's.
    let v1 = exchange::server();
    let got = exchange::serve(&v1.keys(), &m, &Limits::default(), NOW, &base);
    assert!(got.is_ok(), "profile 2 under a v1 certificate: {got:?}");
    refuse(
        v,
        &s,
        "compact-refuse-other-host",
        "the outer Host is bound: a proxy that rewrites it breaks record 0",
        &replace(
            &base,
            &format!("Host: {HOST}\r\n"),
            "Host: backend.internal\r\n",
        ),
        Error::Integrity,
    );
    refuse(
        v,
        &s,
        "compact-refuse-get-other-host",
        "the GET form binds the Host too",
        &replace(
            &get,
            &format!("Host: {HOST}\r\n"),
            "Host: www.example.com.\r\n",
        ),
        Error::Integrity,
    );
    refuse(
        v,
        &s,
        "compact-refuse-mark-dropped",
        "a profile-2 stream sent with the v1 path does not open",
        &replace(
            &base,
            &seg,
            &format!("/hc/{}", httpcrypt_proto::b64::encode(&n0)),
        ),
        Error::Integrity,
    );
    refuse(
        v,
        &s,
        "compact-refuse-other-mark",
        "a 33-character segment that does not start with `2`",
        &replace(&base, &seg, &seg.replacen("/hc/2", "/hc/Z", 1)),
        Error::BadNoncePath,
    );
    refuse(
        v,
        &s,
        "compact-refuse-no-host",
        "Host is still checked first",
        &replace(&base, &format!("Host: {HOST}\r\n"), ""),
        Error::BadHost,
    );
    let long = "h".repeat(65_536);
    refuse(
        v,
        &s,
        "compact-refuse-host-too-long",
        "a Host above 65535 bytes cannot be bound",
        &replace(
            &base,
            &format!("Host: {HOST}\r\n"),
            &format!("Host: {long}\r\n"),
        ),
        Error::BadHost,
    );
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    cert_cases(&mut v);
    time_cases(&mut v);
    stream_cases(&mut v);
    exchange_cases(&mut v);
    v
}
