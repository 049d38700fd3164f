//! Hybrid exchanges from both sides (spec/hybrid.md), positive and
//! negative: the server every case uses, the request builder, and the cases.

use std::sync::Arc;

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::hybrid::cert::HybridCert;
use httpcrypt_proto::hybrid::exchange::{self, HybridKeys, HybridRequest, HybridServerKey};
use httpcrypt_proto::hybrid::{Encapsulation, KemSecret, CIPHERTEXT_LEN};
use httpcrypt_proto::inner::{RequestHead, ResponseHead};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::server::Accepted;
use httpcrypt_proto::stream::{self, Sealer};
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{Error, IdentityKey, KexSecret, KeyCert, KeyId, Limits, SessionKey};
use serde_json::{json, Value};

use super::{NA, NB, NOW};
use crate::vectors::{bytes, check, hx, Case};

/// The server every hybrid exchange case uses.
struct Server {
    secret: [u8; 32],
    kem_seed: [u8; 64],
    identity_seed: [u8; 32],
    cert: HybridCert,
    ticket_key: TicketKey,
}

fn server() -> Server {
    let secret = bytes("hybrid-server-secret");
    let kem_seed = bytes("hybrid-kem-seed");
    let identity_seed = bytes("hybrid-identity");
    let kem = KemSecret::from_seed(kem_seed);
    let cert = HybridCert::sign(
        &IdentityKey::from_seed(identity_seed),
        Profile::V1,
        42,
        NB,
        NA,
        *KexSecret::from_bytes(secret).public(),
        kem.public().hash(),
    );
    Server {
        secret,
        kem_seed,
        identity_seed,
        cert,
        ticket_key: TicketKey::new(KeyId(bytes("hybrid-tid")), bytes("hybrid-ticket-key")),
    }
}

impl Server {
    fn kem(&self) -> KemSecret {
        KemSecret::from_seed(self.kem_seed)
    }

    fn keys(&self) -> HybridKeys {
        let mut k = HybridKeys::new();
        let key = HybridServerKey::new(
            KexSecret::from_bytes(self.secret),
            Arc::new(self.kem()),
            self.cert.clone(),
        )
        .unwrap();
        k.add_key(key);
        k.add_ticket_key(
            TicketKey::new(self.ticket_key.tid(), *self.ticket_key.to_bytes()),
            u64::from(NA),
        );
        k
    }

    fn ticket(&self) -> (Ticket, SessionKey) {
        let k = SessionKey::from_bytes(bytes("hybrid-ticket-session"));
        let t = self.ticket_key.seal(
            &TicketContents {
                key: k.clone(),
                kid: self.cert.kid(),
                expiry: NA,
            },
            bytes("hybrid-ticket-n"),
        );
        (t, k)
    }

    fn json(&self, mount: &str) -> Value {
        json!({
            "server_secret": hx(self.secret),
            "kem_seed": hx(self.kem_seed),
            "identity_seed": hx(self.identity_seed),
            "cert": {"serial": self.cert.serial, "not_before": self.cert.not_before, "not_after": self.cert.not_after},
            "ticket_key": {"tid": hx(self.ticket_key.tid().0), "key": hx(*self.ticket_key.to_bytes()), "expires": NA},
            "now": NOW,
            "mount": mount,
        })
    }
}

fn serve(
    keys: &HybridKeys,
    mount: &Mount,
    outer: &[u8],
) -> Result<(Accepted, RequestHead, Vec<u8>), Error> {
    exchange::serve_bytes(keys, mount, &Limits::default(), NOW, outer)?.ok_or(Error::BadNoncePath)
}

const INNER_GET: &[u8] =
    b"GET /status HTTP/1.1\r\nHost: www.example.com\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\n\r\n";
const INNER_POST: &[u8] = b"POST /api/v1/items HTTP/1.1\r\nHost: www.example.com\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"name\":\"widget\",\"qty\":12}\n";
const INNER_RSP: &[u8] = b"HTTP/1.1 201 Created\r\nDate: Tue, 14 Nov 2023 22:13:21 GMT\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"id\":7}\n";
const HOST: &str = "www.example.com";

/// How a case's client opens the answer.
type OpenResponse = Box<dyn Fn(&[u8]) -> Result<(ResponseHead, Vec<u8>), Error>>;

/// A fresh-key hybrid request: its outer bytes and the client's state.
fn build(
    s: &Server,
    label: &str,
    form: Form,
    mount: &Mount,
    pads: (&str, &str),
    inner: &[u8],
) -> (HybridRequest, Vec<u8>, [u8; 32], [u8; 32]) {
    let client = KexSecret::from_bytes(bytes(&format!("{label}-client")));
    let m: [u8; 32] = bytes(&format!("{label}-m"));
    let (ct_m, ss_m) = s.kem().public().encapsulate_with(&m);
    let e = Encapsulation::from_parts(&s.cert.kex_public, &client, ct_m, &ss_m).unwrap();
    let req = HybridRequest::from_encapsulation(
        &s.cert,
        e,
        bytes(&format!("{label}-n0")),
        pads.0,
        pads.1,
    )
    .unwrap();
    let mut sealed = Vec::new();
    stream::seal_all(req.sealer(), inner, 16384, &mut sealed).unwrap();
    let outer = req.encode_outer(form, mount, HOST, &sealed);
    (req, outer, *client.to_bytes(), m)
}

fn exchange_case(name: &str, why: &str, s: &Server, form: Form, mount: &str, ticket: bool) -> Case {
    let m = Mount::new(mount).unwrap();
    let pads = ("", "Pad");
    let inner = if form == Form::Post {
        INNER_POST
    } else {
        INNER_GET
    };
    let keys = s.keys();
    let mut input = s.json(mount);
    let (session_key, cookie, outer, open): (SessionKey, String, Vec<u8>, OpenResponse);
    if ticket {
        let (t, k) = s.ticket();
        let n0 = bytes(&format!("{name}-n0"));
        let p = PreparedRequest::new(
            // The cookie and stream of a ticket do not depend on the
            // certificate; v1's prepare path takes it for the kex key only.
            &KeyCert::sign(
                &IdentityKey::from_seed(s.identity_seed),
                1,
                NB,
                NA,
                s.cert.kex_public,
            ),
            ClientCredential::Ticket(&t, &k),
            n0,
            pads.0,
            pads.1,
        )
        .unwrap();
        let mut sealed = Vec::new();
        stream::seal_all(p.sealer(), inner, 16384, &mut sealed).unwrap();
        outer = p.encode_outer(form, &m, HOST, &sealed);
        session_key = p.session_key().clone();
        cookie = p.cookie().to_string();
        input["ticket"] = json!(hx(t.0));
        input["ticket_session_key"] = json!(hx(k.as_bytes()));
        input["n0"] = json!(hx(n0));
        open = Box::new(move |b: &[u8]| p.open_response(b, &Limits::default()));
    } else {
        let (req, o, client, mm) = build(s, name, form, &m, pads, inner);
        let (ct_m, ss_m) = s.kem().public().encapsulate_with(&mm);
        input["client_secret"] = json!(hx(client));
        input["encapsulation"] = json!({"m": hx(mm), "ct_m": hx(&ct_m[..]), "ss_m": hx(*ss_m)});
        input["n0"] = json!(hx(req.n0()));
        outer = o;
        session_key = req.session_key().clone();
        cookie = req.cookie().to_string();
        open = Box::new(move |b: &[u8]| req.open_response_to("GET", b, &Limits::default()));
    }
    input["name_pad"] = json!(pads.0);
    input["value_pad"] = json!(pads.1);
    input["host"] = json!(HOST);
    input["form"] = json!(if form == Form::Post { "post" } else { "get" });
    input["inner_request"] = json!(hx(inner));
    input["record_size"] = json!(16384);
    let (accepted, head, body) =
        serve(&keys, &m, &outer).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let mut plain = Vec::new();
    head.encode(&mut plain);
    plain.extend_from_slice(&body);
    assert_eq!(plain, inner, "{name}: the inner request survives");
    assert_eq!(accepted.session_key(), &session_key, "{name}");
    assert_eq!(
        accepted.kid,
        s.cert.kid(),
        "{name}: the session runs under the suite-2 kid"
    );
    let rn0 = bytes::<24>(&format!("{name}-response-n0"));
    let mut rsp = Vec::new();
    let sealer = Sealer::response(accepted.into_response_key(), rn0, &mut rsp);
    stream::seal_all(sealer, INNER_RSP, 64, &mut rsp).unwrap();
    let (rh, _) = open(&rsp).unwrap();
    assert_eq!(rh.status, 201);
    input["response_n0"] = json!(hx(rn0));
    input["inner_response"] = json!(hx(INNER_RSP));
    input["response_record_size"] = json!(64);
    Case::ok(
        "hybrid_exchange",
        name,
        why,
        input,
        json!({
            "cert_text": s.cert.to_text(),
            "kem_text": s.kem().public().to_text(),
            "kid": hx(s.cert.kid().0),
            "session_key": hx(session_key.as_bytes()),
            "cookie": cookie,
            "outer_request": hx(&outer),
            "response_body": hx(&rsp),
        }),
    )
}

fn refuse(name: &str, why: &str, s: &Server, mount: &str, outer: &[u8], want: Error) -> Case {
    let got = serve(&s.keys(), &Mount::new(mount).unwrap(), outer).map(|(_, h, _)| h);
    check(name, got, &want);
    let mut input = s.json(mount);
    input["outer_request"] = json!(hx(outer));
    Case::err("hybrid_server_request", name, why, input, want)
}

fn body_replaced(outer: &[u8], f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let split = outer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end")
        + 4;
    let mut body = outer[split..].to_vec();
    let old = body.len();
    f(&mut body);
    let head = String::from_utf8(outer[..split].to_vec()).expect("ASCII head");
    let head = head.replacen(
        &format!("Content-Length: {old}\r\n"),
        &format!("Content-Length: {}\r\n", body.len()),
        1,
    );
    [head.as_bytes(), &body].concat()
}

pub(super) fn exchange_cases() -> Vec<Case> {
    let s = server();
    let mut v = vec![
        exchange_case(
            "hybrid-exchange-post",
            "a hybrid POST: ct_M then the sealed stream",
            &s,
            Form::Post,
            "/hc",
            false,
        ),
        exchange_case(
            "hybrid-exchange-get",
            "a hybrid GET: the query is b64u(ct_M || stream)",
            &s,
            Form::Get,
            "/hc",
            false,
        ),
        exchange_case(
            "hybrid-exchange-ticket",
            "a ticket of a hybrid session: v1's ticket path, no ciphertext",
            &s,
            Form::Post,
            "",
            true,
        ),
    ];
    let m = Mount::new("/hc").unwrap();
    let (_, post, _, _) = build(&s, "hybrid-base", Form::Post, &m, ("", ""), INNER_POST);
    let (_, get, _, _) = build(&s, "hybrid-base-get", Form::Get, &m, ("", ""), INNER_GET);
    // Positive server-side cases.
    for (name, why, outer) in [
        (
            "hybrid-accept-post",
            "the server opens a hybrid POST",
            &post,
        ),
        ("hybrid-accept-get", "the server opens a hybrid GET", &get),
    ] {
        let (_, head, body) = serve(&s.keys(), &m, outer).unwrap();
        let mut input = s.json("/hc");
        input["outer_request"] = json!(hx(outer));
        v.push(Case::ok(
            "hybrid_server_request",
            name,
            why,
            input,
            json!({"method": head.method, "target": head.target, "body": hx(&body)}),
        ));
    }
    v.push(refuse(
        "hybrid-refuse-short-ciphertext",
        "a body shorter than the 1,088-byte ciphertext",
        &s,
        "/hc",
        &body_replaced(&post, |b| b.truncate(1000)),
        Error::BadCiphertext,
    ));
    v.push(refuse(
        "hybrid-refuse-empty-body",
        "an empty body has no ciphertext",
        &s,
        "/hc",
        &body_replaced(&post, Vec::clear),
        Error::BadCiphertext,
    ));
    let short_get = {
        let text = String::from_utf8_lossy(&get).to_string();
        let q = text.find('?').expect("query") + 1;
        let end = text[q..].find(' ').expect("end of target") + q;
        // 1,000 bytes of the query: fewer than a ciphertext.
        format!("{}{}{}", &text[..q], &text[q..q + 1332], &text[end..]).into_bytes()
    };
    v.push(refuse(
        "hybrid-refuse-short-ciphertext-get",
        "a GET query that decodes to fewer than 1,088 bytes",
        &s,
        "/hc",
        &short_get,
        Error::BadCiphertext,
    ));
    // A ciphertext made for another ML-KEM key: implicit rejection gives an
    // unrelated secret, and the first record fails.
    let other = KemSecret::from_seed(bytes("hybrid-other-kem-seed"));
    let (foreign_ct, _) = other.public().encapsulate_with(&bytes("hybrid-other-m"));
    v.push(refuse(
        "hybrid-refuse-other-kem-key",
        "a ciphertext made for another ML-KEM key fails with integrity",
        &s,
        "/hc",
        &body_replaced(&post, |b| {
            b[..CIPHERTEXT_LEN].copy_from_slice(&foreign_ct[..])
        }),
        Error::Integrity,
    ));
    v.push(refuse(
        "hybrid-refuse-flipped-ciphertext",
        "a flipped ciphertext bit fails with integrity",
        &s,
        "/hc",
        &body_replaced(&post, |b| b[500] ^= 1),
        Error::Integrity,
    ));
    v.push(refuse(
        "hybrid-refuse-flipped-stream",
        "a flipped bit of the stream after the ciphertext",
        &s,
        "/hc",
        &body_replaced(&post, |b| b[CIPHERTEXT_LEN + 30] ^= 1),
        Error::Integrity,
    ));
    v.push(refuse(
        "hybrid-refuse-no-stream",
        "the ciphertext alone: the stream is empty",
        &s,
        "/hc",
        &body_replaced(&post, |b| b.truncate(CIPHERTEXT_LEN)),
        Error::Truncated,
    ));
    let cookie_of = |outer: &[u8]| {
        let t = String::from_utf8_lossy(outer).to_string();
        let i = t.find("Cookie: ").expect("cookie");
        t[i..i + t[i..].find("\r\n").expect("eol")].to_string()
    };
    let base_cookie = cookie_of(&post);
    let small = httpcrypt_proto::outer::format_cookie(&s.cert.kid(), &[0; 32], "", "").unwrap();
    v.push(refuse(
        "hybrid-refuse-small-order",
        "ct_X of small order: the X25519 half is all zero",
        &s,
        "/hc",
        &crate::vectors::exchange::replace(&post, &base_cookie, &format!("Cookie: {small}")),
        Error::SmallOrder,
    ));
    // A classical request (v1 kid of the same kex key) to hybrid-only keys.
    let client = KexSecret::from_bytes(bytes("hybrid-v1-client"));
    let v1 = PreparedRequest::for_key(
        &s.cert.kex_public,
        ClientCredential::Key(&client),
        bytes("hybrid-v1-n0"),
        "",
        "",
    )
    .unwrap();
    let mut sealed = Vec::new();
    stream::seal_all(v1.sealer(), INNER_POST, 16384, &mut sealed).unwrap();
    v.push(refuse(
        "hybrid-refuse-classical",
        "a v1 fresh-key request to a key set that takes hybrid requests only",
        &s,
        "/hc",
        &v1.encode_outer(Form::Post, &m, HOST, &sealed),
        Error::HybridRequired,
    ));
    let foreign = httpcrypt_proto::outer::format_cookie(
        &KeyId(bytes("hybrid-unknown-kid")),
        &client.public().0,
        "",
        "",
    )
    .unwrap();
    v.push(refuse(
        "hybrid-refuse-unknown-key",
        "a cookie naming no key held",
        &s,
        "/hc",
        &crate::vectors::exchange::replace(&post, &base_cookie, &format!("Cookie: {foreign}")),
        Error::UnknownKey,
    ));
    v
}
