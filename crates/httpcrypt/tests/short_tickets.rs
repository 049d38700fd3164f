//! Short tickets (spec/httpcrypt.md §7.3) against the server: issued only
//! when the request asks (`Ticket: short`), whatever it presents; a request
//! that presents one and does not ask gets no ticket; a client that never
//! asks still gets v1 tickets as D29 says; one that declines
//! (`Ticket: none`) gets none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use httpcrypt::clock::unix_now;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::ticket::{AnyTicket, ShortTicket, ASK_SHORT, DECLINE, TICKET_FIELD};
use httpcrypt_proto::{replay, KexSecret, Limits};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod common;
use common::{read_response, serve_one_key, OneKey as Server};

/// Sends one sealed GET of this crate's `Cargo.toml` on a new connection,
/// asking for a short ticket when `ask`; returns the opened answer's head
/// and the cookie the request carried.
async fn fetch(
    srv: &Server,
    credential: ClientCredential<'_>,
    ask: bool,
    n0: u8,
) -> (ResponseHead, String) {
    fetch_with(srv, credential, ask.then_some(ASK_SHORT), n0).await
}

/// [`fetch`] with `Ticket: {ticket}` in the request when given.
async fn fetch_with(
    srv: &Server,
    credential: ClientCredential<'_>,
    ticket: Option<&str>,
    n0: u8,
) -> (ResponseHead, String) {
    let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
    let prepared = PreparedRequest::new(&srv.cert, credential, [n0; 24], "", "").unwrap();
    let mut head = RequestHead::new("GET", "/Cargo.toml");
    head.fields.push(Field::new("Host", srv.addr.to_string()));
    head.fields
        .push(Field::new("Date", replay::format_date(unix_now())));
    if let Some(value) = ticket {
        head.fields.push(Field::new(TICKET_FIELD, value));
    }
    let stream = prepared.seal_message(&head, b"", 16 * 1024).unwrap();
    let wire = prepared.encode_outer(Form::Get, &Mount::default(), &srv.addr.to_string(), &stream);
    tcp.write_all(&wire).await.unwrap();
    let (status, rsp_body) = read_response(&mut tcp).await;
    assert_eq!(status, 200);
    let (inner_head, body) = prepared
        .open_response(&rsp_body, &Limits::default())
        .unwrap();
    assert_eq!(inner_head.status, 200);
    assert!(String::from_utf8_lossy(&body).contains("[package]"));
    (inner_head, prepared.cookie().to_string())
}

fn ticket_of(head: &ResponseHead) -> Option<AnyTicket> {
    inner::field(&head.fields, TICKET_FIELD).map(|v| AnyTicket::from_field(v).unwrap())
}

fn short_of(head: &ResponseHead) -> ShortTicket {
    match ticket_of(head) {
        Some(AnyTicket::Short(t)) => t,
        other => panic!("no short ticket: {other:?}"),
    }
}

#[tokio::test]
async fn a_short_ticket_is_issued_when_asked_and_resumes_on_new_connections() {
    let srv = serve_one_key(4, 3600).await;
    let key = KexSecret::from_bytes([6; 32]);
    // A fresh-key request that asks gets a short ticket (78 characters).
    let (h, _) = fetch(&srv, ClientCredential::Key(&key), true, 1).await;
    assert_eq!(inner::field(&h.fields, TICKET_FIELD).unwrap().len(), 78);
    let t = short_of(&h);
    // Presented on new connections without asking: served, no ticket; the
    // cookie value is 22 characters.
    for n0 in 2..5 {
        let (h, cookie) = fetch(&srv, ClientCredential::ShortTicket(&t), false, n0).await;
        assert!(ticket_of(&h).is_none(), "request {n0}: {h:?}");
        assert_eq!(cookie.split('=').nth(1).unwrap().len(), 22, "{cookie}");
    }
    // Presented and asking: a new short ticket, which works in turn.
    let (h, _) = fetch(&srv, ClientCredential::ShortTicket(&t), true, 5).await;
    let t2 = short_of(&h);
    assert_ne!(t2, t);
    let (h, _) = fetch(&srv, ClientCredential::ShortTicket(&t2), false, 6).await;
    assert!(ticket_of(&h).is_none());
}

#[tokio::test]
async fn a_client_that_does_not_ask_gets_v1_tickets_as_before() {
    let srv = serve_one_key(4, 3600).await;
    let key = KexSecret::from_bytes([7; 32]);
    let (h, _) = fetch(&srv, ClientCredential::Key(&key), false, 1).await;
    let t = match ticket_of(&h) {
        Some(AnyTicket::V1(t)) => t,
        other => panic!("no v1 ticket: {other:?}"),
    };
    assert_eq!(inner::field(&h.fields, TICKET_FIELD).unwrap().len(), 128);
    // D29: a v1 ticket presented on a new connection gets a new v1 ticket.
    let k = {
        let p =
            PreparedRequest::new(&srv.cert, ClientCredential::Key(&key), [1; 24], "", "").unwrap();
        p.session_key().clone()
    };
    let (h, _) = fetch(&srv, ClientCredential::Ticket(&t, &k), false, 2).await;
    assert!(matches!(ticket_of(&h), Some(AnyTicket::V1(_))), "{h:?}");
}

#[tokio::test]
async fn a_client_that_declines_gets_no_ticket_of_either_form() {
    let srv = serve_one_key(4, 3600).await;
    let key = KexSecret::from_bytes([8; 32]);
    // A fresh key that declines: no ticket, where D29 would send a v1 one.
    let (h, _) = fetch_with(&srv, ClientCredential::Key(&key), Some(DECLINE), 1).await;
    assert!(ticket_of(&h).is_none(), "{h:?}");
    // A v1 ticket presented on a new connection, declining: none either.
    let (h, _) = fetch(&srv, ClientCredential::Key(&key), false, 2).await;
    let Some(AnyTicket::V1(t)) = ticket_of(&h) else {
        panic!("no v1 ticket: {h:?}")
    };
    let k = PreparedRequest::new(&srv.cert, ClientCredential::Key(&key), [1; 24], "", "")
        .unwrap()
        .session_key()
        .clone();
    let (h, _) = fetch_with(&srv, ClientCredential::Ticket(&t, &k), Some(DECLINE), 3).await;
    assert!(ticket_of(&h).is_none(), "{h:?}");
    // Any other value is no ask: D29's v1 ticket, as without the field (a
    // new key: the session above got its ticket already).
    let other = KexSecret::from_bytes([9; 32]);
    let (h, _) = fetch_with(&srv, ClientCredential::Key(&other), Some("maybe"), 4).await;
    assert!(matches!(ticket_of(&h), Some(AnyTicket::V1(_))), "{h:?}");
}
