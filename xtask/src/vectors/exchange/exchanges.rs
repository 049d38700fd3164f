//! Complete exchanges: the client's outer request, what the server opens,
//! and its sealed response, in both forms, with padding, a mount, small
//! records and a ticket.

use httpcrypt_proto::client::ClientCredential;
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::stream::{self, Sealer};
use httpcrypt_proto::{KexSecret, Limits};
use serde_json::json;

use super::{build, serve, server, Server, INNER_GET, INNER_POST, NOW};
use crate::vectors::{bytes, hx, Case};

const INNER_RSP: &[u8] = b"HTTP/1.1 201 Created\r\nDate: Tue, 14 Nov 2023 22:13:21 GMT\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"id\":7}\n";

#[allow(clippy::too_many_arguments)]
fn exchange_case(
    name: &str,
    why: &str,
    s: &Server,
    client_secret: Option<[u8; 32]>,
    n0: [u8; 24],
    pads: (&str, &str),
    form: Form,
    mount: &str,
    inner: &[u8],
    record: usize,
) -> Case {
    let m = Mount::new(mount).unwrap();
    let client = client_secret.map(KexSecret::from_bytes);
    let (ticket, ticket_k) = s.ticket();
    let cred = match &client {
        Some(c) => ClientCredential::Key(c),
        None => ClientCredential::Ticket(&ticket, &ticket_k),
    };
    let built = build(s, cred, n0, pads, form, &m, inner, record);
    // Server side.
    let keys = s.keys();
    let limits = Limits::default();
    let (accepted, head, body) =
        serve(&keys, &m, &limits, NOW, &built.outer).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let mut plain = Vec::new();
    head.encode(&mut plain);
    plain.extend_from_slice(&body);
    assert_eq!(plain, inner, "{name}: inner request survives");
    let rn0 = bytes::<24>(&format!("{name}-response-n0"));
    let mut rsp = Vec::new();
    let sealer = Sealer::response(accepted.into_response_key(), rn0, &mut rsp);
    stream::seal_all(sealer, INNER_RSP, 64, &mut rsp).unwrap();
    let (rh, rb) = built.prepared.open_response(&rsp, &limits).unwrap();
    assert_eq!(
        (rh.status, rb.as_slice()),
        (201, b"{\"id\":7}\n".as_slice())
    );

    let mut input = s.exchange_input(
        mount,
        client.as_ref(),
        n0,
        pads,
        "www.example.com",
        form,
        inner,
        record,
    );
    input["response_n0"] = json!(hx(rn0));
    input["inner_response"] = json!(hx(INNER_RSP));
    input["response_record_size"] = json!(64);
    Case::ok(
        "exchange",
        name,
        why,
        input,
        json!({
            "cert_text": s.cert.to_text(),
            "session_key": hx(built.prepared.session_key().as_bytes()),
            "cookie": built.prepared.cookie(),
            "outer_request": hx(&built.outer),
            "response_body": hx(&rsp),
        }),
    )
}

/// The positive exchange cases.
pub(super) fn cases() -> Vec<Case> {
    let s = server();
    let mut v = Vec::new();
    let c1 = Some(bytes("exchange-client-1"));
    v.push(exchange_case(
        "exchange-post",
        "POST form, one record, no padding",
        &s,
        c1,
        bytes("x-n0-1"),
        ("", ""),
        Form::Post,
        "",
        INNER_POST,
        16384,
    ));
    v.push(exchange_case(
        "exchange-post-padded-mount",
        "POST form under a mount, padded cookie, small records",
        &s,
        Some(bytes("exchange-client-2")),
        bytes("x-n0-2"),
        ("k3y", "Pad_ding-16chars"),
        Form::Post,
        "/hc",
        INNER_POST,
        40,
    ));
    v.push(exchange_case(
        "exchange-get",
        "GET form: the stream rides in the query",
        &s,
        Some(bytes("exchange-client-3")),
        bytes("x-n0-3"),
        ("", "Q"),
        Form::Get,
        "/hc",
        INNER_GET,
        16384,
    ));
    v.push(exchange_case(
        "exchange-ticket",
        "a ticket instead of a client key",
        &s,
        None,
        bytes("x-n0-4"),
        ("t", ""),
        Form::Post,
        "",
        INNER_POST,
        16384,
    ));
    v
}
