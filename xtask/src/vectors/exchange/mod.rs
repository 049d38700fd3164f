//! Vectors for complete exchanges (spec §4): the client's outer request
//! and the server's response, in both forms, and every way the server must
//! refuse an outer request, in the order of spec §11.
//!
//! This file holds the server every case uses and the request builder;
//! `exchanges.rs` the positive exchanges, `refusals.rs` the refusals.

mod exchanges;
mod refusals;

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::RequestHead;
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::server::{self, ServerKeys};
use httpcrypt_proto::stream;
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{Error, IdentityKey, KexSecret, KeyCert, KeyId, Limits, SessionKey};
use serde_json::{json, Value};

use super::{bytes, hx, Case};

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
    [exchanges::cases(), refusals::cases()].concat()
}
