//! When the server issues tickets (spec/httpcrypt.md §7.2, D29): with the
//! first answer of each session on a connection, not with every answer; a
//! connection that carries several sessions gets one whenever the session
//! changes, and a new connection gets one again. The ticket presented over
//! and over on one connection (opened once, then remembered) keeps working.
//! A client that reuses its key pair gets one ticket per session and ticket
//! key, not one per connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use httpcrypt::clock::unix_now;
use httpcrypt::ServerConfig;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::ticket::{Ticket, TICKET_FIELD};
use httpcrypt_proto::{replay, KexSecret, KeyId, Limits, SessionKey};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod common;
use common::{epoch, read_response, serve_one_key, OneKey as Server};

async fn server() -> Server {
    assert!(ServerConfig::default().tickets, "tickets are on by default");
    serve_one_key(4, 3600).await
}

/// Writes one sealed GET of this crate's `Cargo.toml` on `tcp`.
async fn send(
    tcp: &mut TcpStream,
    srv: &Server,
    credential: ClientCredential<'_>,
    n0: u8,
) -> PreparedRequest {
    let prepared = PreparedRequest::new(&srv.cert, credential, [n0; 24], "", "").unwrap();
    let mut head = RequestHead::new("GET", "/Cargo.toml");
    head.fields.push(Field::new("Host", srv.addr.to_string()));
    head.fields
        .push(Field::new("Date", replay::format_date(unix_now())));
    let stream = prepared.seal_message(&head, b"", 16 * 1024).unwrap();
    let wire = prepared.encode_outer(Form::Get, &Mount::default(), &srv.addr.to_string(), &stream);
    tcp.write_all(&wire).await.unwrap();
    prepared
}

/// [`send`], then reads and opens the answer, which must be the file.
async fn fetch(
    tcp: &mut TcpStream,
    srv: &Server,
    credential: ClientCredential<'_>,
    n0: u8,
) -> (ResponseHead, SessionKey) {
    let prepared = send(tcp, srv, credential, n0).await;
    let (status, body) = read_response(tcp).await;
    assert_eq!(status, 200);
    let (inner_head, inner_body) = prepared.open_response(&body, &Limits::default()).unwrap();
    assert_eq!(inner_head.status, 200);
    assert!(String::from_utf8_lossy(&inner_body).contains("[package]"));
    (inner_head, prepared.session_key().clone())
}

/// [`fetch`] on a connection of its own.
async fn fetch_on_new(
    srv: &Server,
    credential: ClientCredential<'_>,
    n0: u8,
) -> (ResponseHead, SessionKey) {
    let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
    fetch(&mut tcp, srv, credential, n0).await
}

fn ticket_of(head: &ResponseHead) -> Option<Ticket> {
    inner::field(&head.fields, TICKET_FIELD).map(|v| Ticket::from_field(v).unwrap())
}

#[tokio::test]
async fn one_ticket_per_session_and_connection() {
    let srv = server().await;
    let alice = KexSecret::from_bytes([6; 32]);
    let bob = KexSecret::from_bytes([7; 32]);

    let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
    // The first answer of a session on a connection carries a ticket ...
    let (h, alice_key) = fetch(&mut tcp, &srv, ClientCredential::Key(&alice), 1).await;
    let t1 = ticket_of(&h).expect("the first answer carries a ticket");
    // ... the next ones of that session on it do not, whether the request
    // presents the ticket (opened the first time, remembered after) or the key.
    for n0 in 2..5 {
        let (h, _) = fetch(
            &mut tcp,
            &srv,
            ClientCredential::Ticket(&t1, &alice_key),
            n0,
        )
        .await;
        assert!(
            ticket_of(&h).is_none(),
            "request {n0}: a second ticket for one session"
        );
    }
    let (h, _) = fetch(&mut tcp, &srv, ClientCredential::Key(&alice), 5).await;
    assert!(ticket_of(&h).is_none());
    // Another session on the same connection (a proxy multiplexing clients)
    // gets its own, and so does the first one when it comes back after it.
    let (h, bob_key) = fetch(&mut tcp, &srv, ClientCredential::Key(&bob), 6).await;
    let tb = ticket_of(&h).expect("a new session on the connection gets a ticket");
    assert_ne!(bob_key, alice_key);
    let (h, _) = fetch(&mut tcp, &srv, ClientCredential::Ticket(&t1, &alice_key), 7).await;
    assert!(ticket_of(&h).is_some(), "the session changed back");
    let (h, _) = fetch(&mut tcp, &srv, ClientCredential::Ticket(&tb, &bob_key), 8).await;
    assert!(ticket_of(&h).is_some(), "the session changed again");

    // A new connection: the first answer carries a fresh ticket for the
    // same session (other bytes: a fresh nonce), so connections stay
    // unlinkable to an observer.
    let mut tcp2 = TcpStream::connect(srv.addr).await.unwrap();
    let (h, _) = fetch(
        &mut tcp2,
        &srv,
        ClientCredential::Ticket(&t1, &alice_key),
        9,
    )
    .await;
    let t2 = ticket_of(&h).expect("a new connection gets a new ticket");
    assert_ne!(t2, t1);
    let (h, _) = fetch(
        &mut tcp2,
        &srv,
        ClientCredential::Ticket(&t2, &alice_key),
        10,
    )
    .await;
    assert!(ticket_of(&h).is_none());
}

#[tokio::test]
async fn a_remembered_ticket_is_still_checked() {
    let srv = server().await;
    let alice = KexSecret::from_bytes([6; 32]);
    let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
    let (h, key) = fetch(&mut tcp, &srv, ClientCredential::Key(&alice), 1).await;
    let t = ticket_of(&h).unwrap();
    let (_, _) = fetch(&mut tcp, &srv, ClientCredential::Ticket(&t, &key), 2).await;
    // The same ticket bytes with a flipped tag byte on the same connection:
    // not the remembered ticket, so it is opened, fails, and is unknown_key.
    let mut bad = t.clone();
    bad.0[95] ^= 1;
    send(&mut tcp, &srv, ClientCredential::Ticket(&bad, &key), 3).await;
    let (status, body) = read_response(&mut tcp).await;
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("urn:httpcrypt:unknown-key"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    // The genuine one still works after that on the same connection.
    let (_, _) = fetch(&mut tcp, &srv, ClientCredential::Ticket(&t, &key), 4).await;
}

#[tokio::test]
async fn a_reused_key_gets_one_ticket_per_ticket_key() {
    let srv = server().await;
    let alice = KexSecret::from_bytes([6; 32]);

    // The session's first answer carries a ticket (the X25519 fills the cache).
    let (h, key) = fetch_on_new(&srv, ClientCredential::Key(&alice), 1).await;
    let t1 = ticket_of(&h).expect("a new session gets a ticket");
    // The same key pair on later connections (session-cache hits): the
    // ticket it got is still good, so no new one.
    for n0 in 2..4 {
        let (h, k) = fetch_on_new(&srv, ClientCredential::Key(&alice), n0).await;
        assert_eq!(k, key);
        assert!(
            ticket_of(&h).is_none(),
            "connection {n0}: a second ticket for a reused key"
        );
    }
    // The ticket itself, on a new connection, still gets a new one (unlinkable
    // connections for the client that uses its tickets).
    let (h, _) = fetch_on_new(&srv, ClientCredential::Ticket(&t1, &key), 4).await;
    let t2 = ticket_of(&h).expect("a ticket on a new connection gets a new one");
    assert_ne!(t2, t1);
    let (h, _) = fetch_on_new(&srv, ClientCredential::Key(&alice), 5).await;
    assert!(ticket_of(&h).is_none());

    // A new epoch brings a new ticket key: the reused key gets one ticket
    // under it, on its next connection, and then none again.
    srv.live
        .add(epoch(&srv.identity, 2, 40, 3600, KeyId([9; 10])));
    let (h, _) = fetch_on_new(&srv, ClientCredential::Key(&alice), 6).await;
    let t3 = ticket_of(&h).expect("a new ticket key: a new ticket");
    assert_eq!(&t3.0[..10], &[9; 10], "sealed under the new ticket key");
    let (h, _) = fetch_on_new(&srv, ClientCredential::Key(&alice), 7).await;
    assert!(ticket_of(&h).is_none());
    // And that ticket works.
    let (_, k) = fetch_on_new(&srv, ClientCredential::Ticket(&t3, &key), 8).await;
    assert_eq!(k, key);
}
