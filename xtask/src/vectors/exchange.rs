//! Vectors for complete exchanges (spec §4): the client's outer request
//! and the server's response, in both forms, and every way the server must
//! refuse an outer request, in the order of spec §11.

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::RequestHead;
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::server::{self, ServerKeys};
use httpcrypt_proto::stream::{self, Sealer};
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{
    Error, IdentityKey, KexPublic, KexSecret, KeyCert, KeyId, Limits, SessionKey,
};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

const NOW: u64 = 1_700_000_000;
const NB: u32 = 1_699_999_000;
const NA: u32 = 1_700_007_260;

/// The server side every exchange case uses.
pub struct Server {
    pub secret: [u8; 32],
    pub identity_seed: [u8; 32],
    pub cert: KeyCert,
    pub ticket_key: TicketKey,
}

pub fn server() -> Server {
    let secret = bytes("exchange-server-secret");
    let identity_seed = bytes("exchange-identity");
    let kex = KexSecret::from_bytes(secret);
    let cert = KeyCert::sign(
        &IdentityKey::from_seed(identity_seed),
        42,
        NB,
        NA,
        *kex.public(),
    );
    let ticket_key = TicketKey::new(KeyId(bytes("exchange-tid")), bytes("exchange-ticket-key"));
    Server {
        secret,
        identity_seed,
        cert,
        ticket_key,
    }
}

impl Server {
    /// The ticket the ticket cases present: issued earlier for the session
    /// key of a previous exchange.
    pub fn ticket(&self) -> (Ticket, SessionKey) {
        let k = SessionKey::from_bytes(bytes("exchange-ticket-session"));
        let t = self.ticket_key.seal(
            &TicketContents {
                key: k.clone(),
                kid: self.cert.kid(),
                expiry: NA,
            },
            bytes("exchange-ticket-n"),
        );
        (t, k)
    }

    /// The `exchange` input members both profiles share: the server, the
    /// credential (`client`, else the ticket of [`Server::ticket`]) and
    /// the client's request.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange_input(
        &self,
        mount: &str,
        client: Option<&KexSecret>,
        n0: [u8; 24],
        pads: (&str, &str),
        host: &str,
        form: Form,
        inner: &[u8],
        record: usize,
    ) -> Value {
        let mut input = self.json(NOW, mount);
        match client {
            Some(c) => input["client_secret"] = json!(hx(*c.to_bytes())),
            None => {
                let (t, k) = self.ticket();
                input["ticket"] = json!(hx(t.0));
                input["ticket_session_key"] = json!(hx(k.as_bytes()));
            }
        }
        input["n0"] = json!(hx(n0));
        input["name_pad"] = json!(pads.0);
        input["value_pad"] = json!(pads.1);
        input["host"] = json!(host);
        input["form"] = json!(if form == Form::Post { "post" } else { "get" });
        input["inner_request"] = json!(hx(inner));
        input["record_size"] = json!(record);
        input
    }

    pub fn keys(&self) -> ServerKeys {
        let mut k = ServerKeys::new();
        k.add_key(KexSecret::from_bytes(self.secret), self.cert.clone());
        k.add_ticket_key(
            TicketKey::new(self.ticket_key.tid(), *self.ticket_key.to_bytes()),
            u64::from(NA),
        );
        k
    }

    pub fn json(&self, now: u64, mount: &str) -> Value {
        json!({
            "server_secret": hx(self.secret),
            "identity_seed": hx(self.identity_seed),
            "cert": {"serial": self.cert.serial, "not_before": self.cert.not_before, "not_after": self.cert.not_after},
            "ticket_key": {"tid": hx(self.ticket_key.tid().0), "key": hx(*self.ticket_key.to_bytes()), "expires": NA},
            "now": now,
            "mount": mount,
        })
    }
}

/// Runs the server on outer request bytes: accept, open, parse.
pub fn serve(
    keys: &ServerKeys,
    mount: &Mount,
    limits: &Limits,
    now: u64,
    outer: &[u8],
) -> Result<(server::Accepted, RequestHead, Vec<u8>), Error> {
    server::serve_bytes(keys, mount, limits, now, outer)?.ok_or(Error::BadNoncePath)
}

struct Built {
    prepared: PreparedRequest,
    outer: Vec<u8>,
}

fn build(
    s: &Server,
    cred: ClientCredential<'_>,
    n0: [u8; 24],
    pads: (&str, &str),
    form: Form,
    mount: &Mount,
    inner: &[u8],
    record: usize,
) -> Built {
    let prepared = PreparedRequest::new(&s.cert, cred, n0, pads.0, pads.1).unwrap();
    let mut stream_bytes = Vec::new();
    stream::seal_all(prepared.sealer(), inner, record, &mut stream_bytes).unwrap();
    let outer = prepared.encode_outer(form, mount, "www.example.com", &stream_bytes);
    Built { prepared, outer }
}

const INNER_GET: &[u8] = b"GET /status?verbose=1 HTTP/1.1\r\nHost: www.example.com\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\nAccept: text/plain\r\n\r\n";
const INNER_POST: &[u8] = b"POST /api/v1/items HTTP/1.1\r\nHost: www.example.com\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"name\":\"widget\",\"qty\":12}\n";
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

/// Replaces `from` by `to` once in the head of `outer` (the body is binary).
pub(crate) fn replace(outer: &[u8], from: &str, to: &str) -> Vec<u8> {
    let split = outer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end")
        + 4;
    let head = String::from_utf8(outer[..split].to_vec()).expect("ASCII head");
    assert!(head.contains(from), "{from} not in head");
    [head.replacen(from, to, 1).as_bytes(), &outer[split..]].concat()
}

fn with_body(outer: &[u8], f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let split = outer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head end")
        + 4;
    let mut body = outer[split..].to_vec();
    f(&mut body);
    let head = String::from_utf8(outer[..split].to_vec()).expect("ASCII head");
    let old = outer.len() - split;
    let head = head.replacen(
        &format!("Content-Length: {old}\r\n"),
        &format!("Content-Length: {}\r\n", body.len()),
        1,
    );
    [head.as_bytes(), &body].concat()
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
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
