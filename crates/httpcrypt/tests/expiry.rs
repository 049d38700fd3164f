//! Forward secrecy at the connection level: a keep-alive connection whose
//! only key has expired is closed by the server, and the expired key's
//! cache entries go with it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use httpcrypt::clock::unix_now;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::{replay, KexSecret};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

#[tokio::test]
async fn connection_closes_after_its_key_expires() {
    // A key that expires in two seconds.
    let srv = common::serve_one_key(4, 2).await;
    let (addr, cert) = (srv.addr, srv.cert);

    // One sealed request on a keep-alive connection.
    let client = KexSecret::from_bytes([6; 32]);
    let prepared =
        PreparedRequest::new(&cert, ClientCredential::Key(&client), [7; 24], "", "").unwrap();
    let mut head = RequestHead::new("GET", "/Cargo.toml");
    head.fields.push(Field::new("Host", addr.to_string()));
    head.fields
        .push(Field::new("Date", replay::format_date(unix_now())));
    let stream = prepared.seal_message(&head, b"", 16 * 1024).unwrap();
    let wire = prepared.encode_outer(Form::Post, &Mount::default(), &addr.to_string(), &stream);
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&wire).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Drain the rest of the response, then wait for the server to close.
    let started = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(8), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the connection outlived its key");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "closed too early ({waited:?}): before the key expired"
    );
    eprintln!("connection closed {waited:?} after the response, key expired at not_after + 1 s");
}
