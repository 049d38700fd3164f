//! Every way the server must refuse an outer request, in the order of spec
//! §11, each made by damaging one well-formed request.

use httpcrypt_proto::client::ClientCredential;
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::ticket::TicketContents;
use httpcrypt_proto::{Error, KexPublic, KexSecret, Limits, SessionKey};
use serde_json::json;

use super::{build, replace, serve, server, with_body, Server, INNER_GET, INNER_POST, NA, NOW};
use crate::vectors::{bytes, check, hx, Case};

fn refuse(
    name: &str,
    why: &str,
    s: &Server,
    mount: &str,
    now: u64,
    limits: Option<Limits>,
    outer: &[u8],
    want: Error,
) -> Case {
    let l = limits.unwrap_or_default();
    let got = serve(&s.keys(), &Mount::new(mount).unwrap(), &l, now, outer).map(|(_, h, _)| h);
    check(name, got, &want);
    let mut input = s.json(now, mount);
    input["outer_request"] = json!(hx(outer));
    if let Some(l) = limits {
        input["max_body"] = json!(l.max_body);
    }
    Case::err("server_request", name, why, input, want)
}

/// The refusal cases.
pub(super) fn cases() -> Vec<Case> {
    let s = server();
    let mut v = Vec::new();
    // Refusals. A well-formed base request to damage:
    let m = Mount::new("/hc").unwrap();
    let client = KexSecret::from_bytes(bytes("exchange-client-9"));
    let base = build(
        &s,
        ClientCredential::Key(&client),
        bytes("x-n0-9"),
        ("", ""),
        Form::Post,
        &m,
        INNER_POST,
        16384,
    )
    .outer;
    let get = build(
        &s,
        ClientCredential::Key(&client),
        bytes("x-n0-10"),
        ("", ""),
        Form::Get,
        &m,
        INNER_GET,
        16384,
    )
    .outer;
    let path = m.nonce_path(&bytes("x-n0-9"));
    let cookie_line = {
        let t = String::from_utf8_lossy(&base).to_string();
        let i = t.find("Cookie: ").expect("cookie");
        t[i..i + t[i..].find("\r\n").expect("eol")].to_string()
    };
    // The contract's original layout (with the request's Cache-Control and
    // Pragma, which clients no longer send: spec §4.1) is still accepted.
    let contract_layout = replace(
        &base,
        "Content-Type: application/octet-stream\r\n",
        "Content-Type: application/octet-stream\r\nCache-Control: no-cache, no-store\r\nPragma: no-cache\r\n",
    );
    let (_, head, body) = serve(&s.keys(), &m, &Limits::default(), NOW, &contract_layout)
        .expect("the contract's layout is accepted");
    let mut input = s.json(NOW, "/hc");
    input["outer_request"] = json!(hx(&contract_layout));
    v.push(Case::ok(
        "server_request",
        "accept-contract-cache-fields",
        "the v1 contract's layout with Cache-Control and Pragma is served like the lean one",
        input,
        json!({"method": head.method, "target": head.target, "body": hx(&body)}),
    ));
    v.push(refuse(
        "refuse-no-host",
        "Host is checked first",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&base, "Host: www.example.com\r\n", ""),
        Error::BadHost,
    ));
    v.push(refuse(
        "refuse-no-host-and-bad-path",
        "Host comes before the nonce path",
        &s,
        "/hc",
        NOW,
        None,
        &replace(
            &replace(&base, "Host: www.example.com\r\n", ""),
            &path,
            "/hc/short",
        ),
        Error::BadHost,
    ));
    v.push(refuse(
        "refuse-bad-path",
        "a nonce of the wrong length",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&base, &path, &path[..path.len() - 2]),
        Error::BadNoncePath,
    ));
    v.push(refuse(
        "refuse-bad-path-and-cookie",
        "the nonce path comes before the cookie",
        &s,
        "/hc",
        NOW,
        None,
        &replace(
            &replace(&base, &path, "/hc/!!"),
            &cookie_line,
            "Cookie: a=b",
        ),
        Error::BadNoncePath,
    ));
    v.push(refuse(
        "refuse-too-large",
        "Content-Length above the server's limit is refused before reading",
        &s,
        "/hc",
        NOW,
        Some(Limits {
            max_body: 64,
            ..Limits::default()
        }),
        &base,
        Error::BodyTooLarge,
    ));
    v.push(refuse(
        "refuse-get-extra-param",
        "a GET query with another parameter",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&get, "?", "?x=1&"),
        Error::BadQuery,
    ));
    v.push(refuse(
        "refuse-get-bad-query",
        "a GET query that is not base64url",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&get, "?", "?%2B"),
        Error::BadQuery,
    ));
    v.push(refuse(
        "refuse-get-with-body",
        "a GET with a body",
        &s,
        "/hc",
        NOW,
        None,
        &[
            replace(
                &get,
                &format!("{cookie_line}\r\n"),
                &format!("{cookie_line}\r\nContent-Length: 3\r\n"),
            )
            .as_slice(),
            b"abc",
        ]
        .concat(),
        Error::BadQuery,
    ));
    v.push(refuse(
        "refuse-no-cookie",
        "no HTTPCrypt cookie at all",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&base, &cookie_line, "Cookie: session=1"),
        Error::NoCookie,
    ));
    let other = KexSecret::from_bytes(bytes("exchange-other-server"));
    let foreign =
        httpcrypt_proto::outer::format_cookie(&other.kid(), &client.public().0, "", "").unwrap();
    v.push(refuse(
        "refuse-unknown-key",
        "a cookie for a key this server does not hold",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&base, &cookie_line, &format!("Cookie: {foreign}")),
        Error::UnknownKey,
    ));
    v.push(refuse(
        "refuse-expired-key",
        "the key expired one second ago",
        &s,
        "/hc",
        u64::from(NA) + 1,
        None,
        &base,
        Error::UnknownKey,
    ));
    v.push(refuse(
        "refuse-expired-key-edge",
        "not_after itself is still valid; the next check fails later",
        &s,
        "/hc",
        u64::from(NA),
        None,
        &replace(&base, &cookie_line, "Cookie: x=y"),
        Error::NoCookie,
    ));
    let bad_value = format!("Cookie: {}={}", s.cert.kid().to_b64(), "A".repeat(20));
    v.push(refuse(
        "refuse-bad-cookie",
        "the known key's cookie value is malformed",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&base, &cookie_line, &bad_value),
        Error::BadCookie,
    ));
    let small = httpcrypt_proto::outer::format_cookie(&s.cert.kid(), &KexPublic([0; 32]).0, "", "")
        .unwrap();
    v.push(refuse(
        "refuse-small-order",
        "a client key that yields an all-zero secret",
        &s,
        "/hc",
        NOW,
        None,
        &replace(&base, &cookie_line, &format!("Cookie: {small}")),
        Error::SmallOrder,
    ));
    v.push(refuse(
        "refuse-flipped-body",
        "a flipped ciphertext bit is an inner integrity error",
        &s,
        "/hc",
        NOW,
        None,
        &with_body(&base, |b| b[30] ^= 1),
        Error::Integrity,
    ));
    v.push(refuse(
        "refuse-truncated-body",
        "a body cut short",
        &s,
        "/hc",
        NOW,
        None,
        &with_body(&base, |b| b.truncate(b.len() - 1)),
        Error::Truncated,
    ));
    v.push(refuse(
        "refuse-empty-body",
        "an empty POST body is a truncated stream",
        &s,
        "/hc",
        NOW,
        None,
        &with_body(&base, Vec::clear),
        Error::Truncated,
    ));
    v.push(refuse(
        "refuse-trailing-body",
        "bytes after the FINAL record",
        &s,
        "/hc",
        NOW,
        None,
        &with_body(&base, |b| b.push(0)),
        Error::TrailingData,
    ));
    v.push(refuse(
        "refuse-clear-record",
        "a CLEAR record in a request",
        &s,
        "/hc",
        NOW,
        None,
        &with_body(&base, |b| b[0] ^= 0x40),
        Error::ClearInRequest,
    ));
    // Inner-message errors need a stream sealed over bad plaintext.
    let mut inner_bad = |name: &str, why: &str, inner: &[u8], want: Error| {
        let o = build(
            &s,
            ClientCredential::Key(&client),
            bytes(name),
            ("", ""),
            Form::Post,
            &m,
            inner,
            16384,
        )
        .outer;
        v.push(refuse(name, why, &s, "/hc", NOW, None, &o, want));
    };
    inner_bad(
        "refuse-inner-garbage",
        "the stream opens but holds no HTTP request",
        b"hello, world",
        Error::MalformedInner,
    );
    inner_bad(
        "refuse-inner-chunked",
        "inner Transfer-Encoding",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        Error::ForbiddenHeader,
    );
    inner_bad(
        "refuse-inner-length",
        "inner Content-Length mismatch",
        b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc",
        Error::ContentLengthMismatch,
    );
    // A ticket that fails to open.
    let ticket_k = SessionKey::from_bytes(bytes("exchange-ticket-session"));
    let mut ticket = s.ticket_key.seal(
        &TicketContents {
            key: ticket_k.clone(),
            kid: s.cert.kid(),
            expiry: NA,
        },
        bytes("exchange-ticket-n"),
    );
    ticket.0[50] ^= 1;
    let o = build(
        &s,
        ClientCredential::Ticket(&ticket, &ticket_k),
        bytes("x-n0-t"),
        ("", ""),
        Form::Post,
        &m,
        INNER_POST,
        16384,
    )
    .outer;
    v.push(refuse(
        "refuse-ticket-tampered",
        "a ticket that fails to open is an unknown key",
        &s,
        "/hc",
        NOW,
        None,
        &o,
        Error::UnknownKey,
    ));
    v
}
