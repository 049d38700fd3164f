//! What the session cache keeps (spec/httpcrypt.md §7.1): the session of a
//! fresh-key request once its inner head has opened under the session key,
//! and only when its client did not decline (`Ticket: none`, §7.3). A
//! public key alone, which anyone can send, takes no place in the cache.
//! The service behind the layer tells what it was told: whether the
//! request's session key came from the cache (`Encrypted::cached`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use httpcrypt::clock::unix_now;
use httpcrypt::server::Encrypted;
use httpcrypt::{HttpCryptLayer, ServerConfig};
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::ticket::TICKET_FIELD;
use httpcrypt_proto::{replay, KexSecret, KeyCert, Limits};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod common;
use common::{listen, one_key, read_response};

/// A layer in front of a service that answers `cached=<bool>` from the
/// request's `Encrypted` extension.
async fn server() -> (SocketAddr, KeyCert) {
    let (_, cert, live) = one_key(31, 3600);
    let layer = HttpCryptLayer::new(live, ServerConfig::default());
    let svc = tower::Layer::layer(
        &layer,
        tower::service_fn(|req: http::Request<httpcrypt::body::HcBody>| async move {
            let cached = req.extensions().get::<Encrypted>().map(|e| e.cached);
            let text = format!("cached={}", cached.expect("a sealed request"));
            Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(Bytes::from(
                text,
            ))))
        }),
    );
    (listen(svc).await, cert)
}

/// One sealed GET under `client`'s key pair, declining a ticket when
/// `decline`; its stream's last byte flipped when `tamper`. Returns what
/// the service said, or `None` when the answer did not come from it.
async fn get(
    addr: SocketAddr,
    cert: &KeyCert,
    client: &KexSecret,
    n0: u8,
    decline: bool,
    tamper: bool,
) -> Option<String> {
    let prepared =
        PreparedRequest::new(cert, ClientCredential::Key(client), [n0; 24], "", "").unwrap();
    let mut head = RequestHead::new("GET", "/");
    head.fields.push(Field::new("Host", addr.to_string()));
    head.fields
        .push(Field::new("Date", replay::format_date(unix_now())));
    if decline {
        head.fields.push(Field::new(TICKET_FIELD, "none"));
    }
    let mut stream = prepared.seal_message(&head, b"", 16 * 1024).unwrap();
    if tamper {
        *stream.last_mut().unwrap() ^= 1;
    }
    let wire = prepared.encode_outer(Form::Get, &Mount::default(), &addr.to_string(), &stream);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&wire).await.unwrap();
    let (status, body) = read_response(&mut tcp).await;
    assert_eq!(status, 200, "a sealed exchange shows 200 outside");
    let (inner_head, inner_body) = prepared.open_response(&body, &Limits::default()).unwrap();
    (inner_head.status == 200).then(|| String::from_utf8(inner_body).unwrap())
}

#[tokio::test]
async fn a_request_that_does_not_open_leaves_no_session_behind() {
    let (addr, cert) = server().await;
    let client = KexSecret::from_bytes([41; 32]);
    // The key agreement runs (the answer is sealed under its key), but the
    // stream fails its tag: the service never sees it.
    assert_eq!(get(addr, &cert, &client, 1, false, true).await, None);
    // So the first request that opens still takes an X25519 ...
    assert_eq!(
        get(addr, &cert, &client, 2, false, false).await.unwrap(),
        "cached=false"
    );
    // ... and the next one finds the session that request proved.
    assert_eq!(
        get(addr, &cert, &client, 3, false, false).await.unwrap(),
        "cached=true"
    );
}

#[tokio::test]
async fn a_declining_request_leaves_no_session_behind() {
    let (addr, cert) = server().await;
    let client = KexSecret::from_bytes([42; 32]);
    for n0 in 1..=2 {
        assert_eq!(
            get(addr, &cert, &client, n0, true, false).await.unwrap(),
            "cached=false",
            "a client that declines says it sends nothing more under the session"
        );
    }
    // A client that does not decline is cached, and a cached session serves
    // a later declining request too.
    assert_eq!(
        get(addr, &cert, &client, 3, false, false).await.unwrap(),
        "cached=false"
    );
    assert_eq!(
        get(addr, &cert, &client, 4, true, false).await.unwrap(),
        "cached=true"
    );
}
