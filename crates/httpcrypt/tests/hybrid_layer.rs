//! The layer with the hybrid suite (spec/hybrid.md H3–H4), driven in
//! memory with proto's `HybridRequest`: a POST whose ciphertext arrives in
//! pieces of every size, a GET, a body shorter than the ciphertext, the
//! three modes' answers to `OPTIONS`, v1 requests in `only` mode, tickets
//! of hybrid sessions, and the `unknown-key` problem's `hybrid_certs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use httpcrypt::body::HcBody;
use httpcrypt::clock::unix_now;
use httpcrypt::keys::{Epoch, LiveKeys};
use httpcrypt::server::Pq;
use httpcrypt::{HttpCryptLayer, ServerConfig};
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::hybrid::cert::parse_cert_list;
use httpcrypt_proto::hybrid::{HybridCert, HybridRequest, KemSecret, CIPHERTEXT_LEN};
use httpcrypt_proto::inner::{field, Field, RequestHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::server::ParsedOuter;
use httpcrypt_proto::ticket::{Ticket, TICKET_FIELD};
use httpcrypt_proto::{replay, stream, IdentityKey, KexSecret, KeyId, Limits, Profile};
use tower::ServiceExt as _;

mod common;

/// A body that yields `pieces` one frame at a time.
struct Pieces(VecDeque<Bytes>);

impl Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// One kex key with both certificates, under an identity.
struct Keys {
    live: LiveKeys,
    cert: HybridCert,
    kem: Arc<KemSecret>,
    v1: httpcrypt_proto::KeyCert,
}

fn keys() -> Keys {
    let identity = IdentityKey::from_seed([21; 32]);
    let mut e: Epoch = common::epoch(&identity, 1, 22, 3600, KeyId([3; 10]));
    let kem = Arc::new(KemSecret::from_seed([23; 64]));
    let c = &e.cert;
    let cert = HybridCert::sign(
        &identity,
        Profile::V1,
        c.serial,
        c.not_before,
        c.not_after,
        c.kex_public,
        kem.public().hash(),
    );
    e.hybrid = Some(cert.clone());
    e.kem = Some(kem.clone());
    let v1 = e.cert.clone();
    let live = LiveKeys::new();
    live.add(e);
    Keys {
        live,
        cert,
        kem,
        v1,
    }
}

/// Sends `bytes` (a whole outer request) with its body in pieces of
/// `piece` bytes to a layer over this crate's files in mode `pq`.
async fn send(keys: &Keys, pq: Pq, bytes: &[u8], piece: usize) -> Response<HcBody> {
    let layer = HttpCryptLayer::new(
        keys.live.clone(),
        ServerConfig {
            pq,
            admission: None,
            ..Default::default()
        },
    );
    let svc = tower::Layer::layer(
        &layer,
        httpcrypt::services::static_files(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))),
    );
    let o = ParsedOuter::parse(bytes).unwrap();
    let mut req = Request::builder().method(o.method.as_str()).uri(&o.target);
    if let Some(h) = &o.host {
        req = req.header("host", h.as_slice());
    }
    for c in &o.cookies {
        req = req.header("cookie", c.as_slice());
    }
    if let Some(l) = o.content_length {
        req = req.header("content-length", l);
    }
    let pieces = o
        .body
        .chunks(piece.max(1))
        .map(Bytes::copy_from_slice)
        .collect();
    svc.oneshot(req.body(Pieces(pieces)).unwrap())
        .await
        .unwrap()
}

async fn body(rsp: Response<HcBody>) -> (u16, Vec<u8>) {
    let status = rsp.status().as_u16();
    (
        status,
        rsp.into_body().collect().await.unwrap().to_bytes().to_vec(),
    )
}

fn hybrid_request(keys: &Keys) -> HybridRequest {
    let client = KexSecret::generate(&mut rand_core::OsRng);
    let mut n0 = [0u8; 24];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut n0);
    HybridRequest::new(
        &keys.cert,
        keys.kem.public(),
        &client,
        &mut rand_core::OsRng,
        n0,
        "",
        "",
    )
    .unwrap()
}

/// The sealed stream of `GET /Cargo.toml`.
fn inner_stream(sealer: httpcrypt_proto::stream::Sealer) -> Vec<u8> {
    let mut head = RequestHead::new("GET", "/Cargo.toml");
    head.fields
        .push(Field::new("Date", replay::format_date(unix_now())));
    let mut plain = Vec::new();
    head.encode(&mut plain);
    let mut out = Vec::new();
    stream::seal_all(sealer, &plain, 16 * 1024, &mut out).unwrap();
    out
}

fn mount() -> Mount {
    Mount::default()
}

const CARGO_TOML: &[u8] = include_bytes!("../Cargo.toml");

#[tokio::test]
async fn a_hybrid_post_is_served_whatever_its_pieces() {
    let keys = keys();
    for pq in [Pq::On, Pq::Only] {
        for piece in [1, 7, 1000, CIPHERTEXT_LEN, CIPHERTEXT_LEN + 1, 64 * 1024] {
            let req = hybrid_request(&keys);
            let bytes =
                req.encode_outer(Form::Post, &mount(), "h.test", &inner_stream(req.sealer()));
            let (status, b) = body(send(&keys, pq, &bytes, piece).await).await;
            assert_eq!(
                status,
                200,
                "{pq:?} {piece}: {}",
                String::from_utf8_lossy(&b)
            );
            let (head, got) = req.open_response_to("GET", &b, &Limits::default()).unwrap();
            assert_eq!((head.status, got.as_slice()), (200, CARGO_TOML));
        }
        let req = hybrid_request(&keys);
        let bytes = req.encode_outer(Form::Get, &mount(), "h.test", &inner_stream(req.sealer()));
        let (status, b) = body(send(&keys, pq, &bytes, 1).await).await;
        assert_eq!(status, 200, "{pq:?} GET");
        assert_eq!(
            req.open_response_to("GET", &b, &Limits::default())
                .unwrap()
                .1,
            CARGO_TOML
        );
    }
}

#[tokio::test]
async fn a_short_ciphertext_is_bad_ciphertext() {
    let keys = keys();
    let req = hybrid_request(&keys);
    let mut bytes = Vec::new();
    outer::encode_request_head(
        Form::Post,
        &mount().nonce_path(req.n0()),
        "h.test",
        req.cookie(),
        100,
        &mut bytes,
    );
    bytes.extend_from_slice(&req.ciphertext()[..100]);
    let (status, b) = body(send(&keys, Pq::On, &bytes, 10).await).await;
    assert_eq!(status, 400);
    let p = outer::parse_problem(&b).unwrap();
    assert_eq!(p.type_uri, "urn:httpcrypt:malformed");
    // Off: the suite-2 key ID is unknown.
    let (status, b) = body(send(&keys, Pq::Off, &bytes, 10).await).await;
    assert_eq!(status, 400);
    let doc: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(doc["type"], "urn:httpcrypt:unknown-key");
    assert!(doc.get("hybrid_certs").is_none(), "{doc}");
}

#[tokio::test]
async fn options_and_problems_by_mode() {
    let keys = keys();
    let options =
        |path: &str| format!("OPTIONS {path} HTTP/1.1\r\nHost: h.test\r\n\r\n").into_bytes();
    let (status, _) = body(send(&keys, Pq::Off, &options("/pq"), 1).await).await;
    assert_eq!(status, 404);
    for pq in [Pq::On, Pq::Only] {
        let (status, b) = body(send(&keys, pq, &options("/pq"), 1).await).await;
        assert_eq!(status, 200);
        let list = parse_cert_list(&b).unwrap();
        assert_eq!(list.hybrid().collect::<Vec<_>>(), vec![&keys.cert]);
        assert_eq!(list.kems, vec![keys.kem.public().clone()]);
    }
    let (_, b) = body(send(&keys, Pq::On, &options("/"), 1).await).await;
    assert_eq!(
        httpcrypt_proto::cert::parse_cert_list(&b).unwrap(),
        vec![keys.v1.clone()]
    );
    // Listed in only mode too: a v1 client's request then gets hybrid_required.
    let (status, b) = body(send(&keys, Pq::Only, &options("/"), 1).await).await;
    assert_eq!(status, 200);
    assert_eq!(
        httpcrypt_proto::cert::parse_cert_list(&b).unwrap(),
        vec![keys.v1.clone()]
    );

    // A v1 fresh-key request: served when on, hybrid_required when only.
    let client = KexSecret::generate(&mut rand_core::OsRng);
    let v1 =
        PreparedRequest::new(&keys.v1, ClientCredential::Key(&client), [5; 24], "", "").unwrap();
    let bytes = v1.encode_outer(Form::Post, &mount(), "h.test", &inner_stream(v1.sealer()));
    let (status, _) = body(send(&keys, Pq::On, &bytes, 100).await).await;
    assert_eq!(status, 200);
    let (status, b) = body(send(&keys, Pq::Only, &bytes, 100).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        outer::parse_problem(&b).unwrap().type_uri,
        "urn:httpcrypt:hybrid-required"
    );

    // An unknown key: both lists, apart.
    let other = HybridCert {
        kex_public: *KexSecret::generate(&mut rand_core::OsRng).public(),
        ..keys.cert.clone()
    };
    let client = KexSecret::generate(&mut rand_core::OsRng);
    let req = HybridRequest::new(
        &other,
        keys.kem.public(),
        &client,
        &mut rand_core::OsRng,
        [6; 24],
        "",
        "",
    )
    .unwrap();
    let bytes = req.encode_outer(Form::Post, &mount(), "h.test", &inner_stream(req.sealer()));
    for (pq, v1_listed) in [(Pq::On, true), (Pq::Only, true)] {
        let (status, b) = body(send(&keys, pq, &bytes, 100).await).await;
        assert_eq!(status, 400);
        let doc: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(doc["type"], "urn:httpcrypt:unknown-key");
        assert_eq!(doc["hybrid_certs"][0], keys.cert.to_text());
        assert_eq!(
            doc["certs"].as_array().unwrap().len(),
            usize::from(v1_listed)
        );
    }
}

#[tokio::test]
async fn a_hybrid_session_resumes_with_its_ticket() {
    let keys = keys();
    for pq in [Pq::On, Pq::Only] {
        let req = hybrid_request(&keys);
        let bytes = req.encode_outer(Form::Post, &mount(), "h.test", &inner_stream(req.sealer()));
        let (_, b) = body(send(&keys, pq, &bytes, 500).await).await;
        let (head, _) = req.open_response_to("GET", &b, &Limits::default()).unwrap();
        let ticket = Ticket::from_field(field(&head.fields, TICKET_FIELD).unwrap()).unwrap();
        let resumed = PreparedRequest::for_key(
            &keys.cert.kex_public,
            ClientCredential::Ticket(&ticket, req.session_key()),
            [9; 24],
            "",
            "",
        )
        .unwrap();
        for form in [Form::Post, Form::Get] {
            let bytes =
                resumed.encode_outer(form, &mount(), "h.test", &inner_stream(resumed.sealer()));
            let (status, b) = body(send(&keys, pq, &bytes, 3).await).await;
            assert_eq!(status, 200, "{pq:?} {form:?}");
            // The strike register is per layer: each send is a new one.
            let (_, got) = resumed.open_response(&b, &Limits::default()).unwrap();
            assert_eq!(got, CARGO_TOML);
        }
    }
}

#[tokio::test]
async fn a_hybrid_session_resumes_with_a_short_ticket() {
    use httpcrypt_proto::ticket::{ShortTicket, ASK_SHORT};
    let keys = keys();
    for pq in [Pq::On, Pq::Only] {
        let req = hybrid_request(&keys);
        let mut head = RequestHead::new("GET", "/Cargo.toml");
        head.fields
            .push(Field::new("Date", replay::format_date(unix_now())));
        head.fields.push(Field::new(TICKET_FIELD, ASK_SHORT));
        let mut plain = Vec::new();
        head.encode(&mut plain);
        let mut stream_bytes = Vec::new();
        stream::seal_all(req.sealer(), &plain, 16 * 1024, &mut stream_bytes).unwrap();
        let bytes = req.encode_outer(Form::Post, &mount(), "h.test", &stream_bytes);
        let (_, b) = body(send(&keys, pq, &bytes, 500).await).await;
        let (head, _) = req.open_response_to("GET", &b, &Limits::default()).unwrap();
        let field = field(&head.fields, TICKET_FIELD).unwrap();
        assert_eq!(field.len(), 78, "a short ticket");
        let ticket = ShortTicket::from_field(field).unwrap();
        let resumed = PreparedRequest::for_key(
            &keys.cert.kex_public,
            ClientCredential::ShortTicket(&ticket),
            [9; 24],
            "",
            "",
        )
        .unwrap();
        for form in [Form::Post, Form::Get] {
            let bytes =
                resumed.encode_outer(form, &mount(), "h.test", &inner_stream(resumed.sealer()));
            let (status, b) = body(send(&keys, pq, &bytes, 3).await).await;
            assert_eq!(status, 200, "{pq:?} {form:?}");
            let (head, got) = resumed.open_response(&b, &Limits::default()).unwrap();
            assert_eq!(got, CARGO_TOML);
            assert!(httpcrypt_proto::inner::field(&head.fields, TICKET_FIELD).is_none());
        }
    }
}
