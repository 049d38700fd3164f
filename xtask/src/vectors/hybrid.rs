//! `vectors/hybrid/`: suite 2 (spec/hybrid.md). The X-Wing draft's own
//! vectors (`xwing-kat-*`), suite-2 certificates and key texts, the
//! eleven-address AAAA form, certificate lists of both suites, and hybrid
//! exchanges from both sides, positive and negative.

use std::sync::Arc;

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::hybrid::cert::{self as hcert, HybridCert};
use httpcrypt_proto::hybrid::exchange::{self, HybridKeys, HybridRequest, HybridServerKey};
use httpcrypt_proto::hybrid::{self, Encapsulation, KemPublic, KemSecret, CIPHERTEXT_LEN};
use httpcrypt_proto::inner::{RequestHead, ResponseHead};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::server::Accepted;
use httpcrypt_proto::stream::{self, Sealer};
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{
    b64, Error, IdentityKey, KexPublic, KexSecret, KeyCert, KeyId, Limits, SessionKey,
};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

const NOW: u64 = 1_700_000_000;
const NB: u32 = 1_699_999_000;
const NA: u32 = 1_700_007_260;

/// The X-Wing draft's test vectors (draft-connolly-cfrg-xwing-kem-06,
/// as shipped with RustCrypto's `x-wing` 0.1.1): data only.
const XWING_DRAFT: &str = include_str!("../../data/xwing-draft-vectors.json");

fn xwing_cases() -> Vec<Case> {
    let all: Vec<Value> = serde_json::from_str(XWING_DRAFT).expect("the draft's vectors parse");
    all.iter()
        .enumerate()
        .map(|(n, v)| {
            let h = |k: &str| hex::decode(v[k].as_str().expect("hex")).expect("hex");
            let seed: [u8; 32] = h("seed").try_into().expect("32-byte seed");
            let eseed = h("eseed");
            let (kem, kex) = hybrid::xwing_expand_seed(&seed);
            let pk = [&kem.public().as_bytes()[..], &kex.public().0].concat();
            assert_eq!(pk, h("pk"), "xwing-kat-{n}: key expansion");
            let ct = h("ct");
            let ct_x = KexPublic(ct[CIPHERTEXT_LEN..].try_into().expect("32 bytes"));
            let k = hybrid::decapsulate(&kex, &kem, &ct_x, &ct[..CIPHERTEXT_LEN]).unwrap();
            assert_eq!(k.as_bytes().to_vec(), h("ss"), "xwing-kat-{n}: decapsulation");
            let m: [u8; 32] = eseed[..32].try_into().expect("32 bytes");
            let eph = KexSecret::from_bytes(eseed[32..].try_into().expect("32 bytes"));
            let (ct_m, ss_m) = kem.public().encapsulate_with(&m);
            let e = Encapsulation::from_parts(kex.public(), &eph, ct_m, &ss_m).unwrap();
            assert_eq!(
                [&e.ct_m[..], &e.ct_x.0].concat(),
                ct,
                "xwing-kat-{n}: encapsulation"
            );
            Case::ok(
                "xwing",
                &format!("xwing-kat-{n}"),
                "X-Wing draft test vector: SHAKE-256 seed expansion, decapsulation, deterministic encapsulation",
                json!({"seed": hx(seed), "eseed": hx(&eseed)}),
                json!({"pk": hx(&pk), "ct": hx(&ct), "ss": hx(k.as_bytes())}),
            )
        })
        .collect()
}

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

fn exchange_cases() -> Vec<Case> {
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
        &super::exchange::replace(&post, &base_cookie, &format!("Cookie: {small}")),
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
        &super::exchange::replace(&post, &base_cookie, &format!("Cookie: {foreign}")),
        Error::UnknownKey,
    ));
    v
}

fn cert_cases() -> Vec<Case> {
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

/// Every case of `vectors/hybrid/`.
pub fn cases() -> Vec<Case> {
    let mut v = xwing_cases();
    v.extend(cert_cases());
    v.extend(exchange_cases());
    v
}
