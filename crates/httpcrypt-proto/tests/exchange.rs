//! In-memory client/server pairs with simulated time: streaming bodies,
//! key rotation with the `unknown-key` retry, replay and freshness, tickets
//! and tokens. No sockets: the bytes pass through plain buffers.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use httpcrypt_proto::cert::{self, KeyCert};
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, Field, InnerEvent, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::replay::{self, StrikeRegister};
use httpcrypt_proto::server::{self, Accept, Accepted, ParsedOuter, ServerKeys};
use httpcrypt_proto::stream::Event;
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{token, Error, IdentityKey, KexSecret, Limits, SessionKey};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

const T0: u64 = 1_800_000_000;
const R: u64 = 3600;

struct Server {
    identity: IdentityKey,
    keys: ServerKeys,
    serial: u32,
    strikes: StrikeRegister,
    mount: Mount,
}

impl Server {
    fn new(rng: &mut ChaCha20Rng) -> Self {
        let mut s = Server {
            identity: IdentityKey::generate(rng),
            keys: ServerKeys::new(),
            serial: 0,
            strikes: StrikeRegister::new(60, 10_000, [7; 16]),
            mount: Mount::new("/hc").unwrap(),
        };
        s.rotate(rng, T0);
        s
    }

    /// A new kex key and ticket key at `now` (spec §6 rotation).
    fn rotate(&mut self, rng: &mut ChaCha20Rng, now: u64) {
        self.serial += 1;
        let kex = KexSecret::generate(rng);
        let not_after = now + 2 * R + 60;
        let c = KeyCert::sign(
            &self.identity,
            self.serial,
            (now - 60) as u32,
            not_after as u32,
            *kex.public(),
        );
        self.keys.add_key(kex, c);
        self.keys
            .add_ticket_key(TicketKey::generate(rng), not_after);
        self.keys.remove_expired(now);
    }

    /// Handles one outer request; returns the outer status and body.
    fn handle(
        &mut self,
        wire: &[u8],
        now: u64,
        rng: &mut ChaCha20Rng,
        chunk: usize,
    ) -> (u16, Vec<u8>) {
        let o = ParsedOuter::parse(wire).expect("a complete request");
        let req = o.as_request();
        let accepted = match server::accept(
            &self.keys,
            &self.mount,
            &req,
            &Limits::default(),
            now,
            &mut server::Plain,
        ) {
            Ok(Accept::Request(a)) => a,
            Ok(other) => panic!("unexpected route {other:?}"),
            Err(e) => {
                let (status, doc) =
                    outer::format_problem(&e, &self.keys.cert_lines(now)).expect("request error");
                return (status, doc.into_bytes());
            }
        };
        let mut rn0 = [0u8; 24];
        rng.fill_bytes(&mut rn0);
        let (head, body) = match self.read_inner(&accepted, &o.body, chunk, now) {
            Ok(x) => x,
            Err(e) => {
                let (h, b) = server::problem_response(&e).expect("inner problem");
                let mut out = Vec::new();
                server::seal_response(
                    accepted.into_response_key(),
                    rn0,
                    &h,
                    &b,
                    now,
                    1024,
                    &mut out,
                )
                .unwrap();
                return (200, out);
            }
        };
        // The application: echo method, target, body; issue a ticket; answer a token.
        let mut rsp = ResponseHead::new(200, "OK");
        rsp.fields.push(Field::new(
            "X-Echo",
            format!("{} {} {}", head.method, head.target, body.len()),
        ));
        if let Some(tk) = self.keys.ticket_key(now) {
            let expiry = self
                .keys
                .key(&accepted.kid, now)
                .map(|k| k.cert.not_after)
                .unwrap();
            let mut n = [0u8; 24];
            rng.fill_bytes(&mut n);
            let t = tk.seal(
                &TicketContents {
                    key: accepted.session_key().clone(),
                    kid: accepted.kid,
                    expiry,
                },
                n,
            );
            rsp.fields.push(Field::new("Ticket", t.to_field()));
        }
        if let Some(cr) = inner::field(&head.fields, token::CLIENT_RANDOM_FIELD) {
            let cr = token::parse_client_random(cr).unwrap();
            rsp.fields.push(Field::new(
                "Random",
                token::format_random(b"token-secret", accepted.session_key(), &cr),
            ));
        }
        let mut out = Vec::new();
        server::seal_response(
            accepted.into_response_key(),
            rn0,
            &rsp,
            &body,
            now,
            4096,
            &mut out,
        )
        .unwrap();
        (200, out)
    }

    /// Streams the request body through the opener and the inner decoder in
    /// `chunk`-byte pieces, then applies the freshness and replay checks.
    fn read_inner(
        &mut self,
        a: &Accepted,
        body: &[u8],
        chunk: usize,
        now: u64,
    ) -> Result<(RequestHead, Vec<u8>), Error> {
        let limits = Limits::default();
        let mut opener = a.opener(&limits);
        let mut decoder = inner::RequestDecoder::new(limits);
        let mut head = None;
        let mut out = Vec::new();
        let source = a.query_stream.as_deref().unwrap_or(body);
        for piece in source.chunks(chunk.max(1)) {
            opener.receive(piece)?;
            while let Some(ev) = opener.next_event()? {
                if let Event::Data { plaintext, .. } = ev {
                    decoder.receive(plaintext)?;
                    while let Some(iev) = decoder.next_event()? {
                        match iev {
                            InnerEvent::Head(h) => head = Some(h),
                            InnerEvent::Body(b) => out.extend_from_slice(b),
                        }
                    }
                }
            }
        }
        opener.finish()?;
        decoder.finish()?;
        let head = head.ok_or(Error::MalformedInner)?;
        let date = replay::check_date(inner::field(&head.fields, "date"), now, 60)?;
        self.strikes.check(&a.kid, &a.n0, date, now)?;
        Ok((head, out))
    }
}

struct Client {
    certs: Vec<KeyCert>,
    identity: httpcrypt_proto::IdentityPublic,
    ticket: Option<(Ticket, SessionKey)>,
    clock_offset: i64,
}

struct Reply {
    status: u16,
    fields: Vec<Field>,
    body: Vec<u8>,
}

impl Client {
    fn request(
        &self,
        rng: &mut ChaCha20Rng,
        now: u64,
        target: &str,
        body: &[u8],
        use_ticket: bool,
        extra: &[Field],
    ) -> (PreparedRequest, Vec<u8>) {
        let cert = cert::choose(&self.certs, now, Some(&self.identity)).unwrap();
        let key = KexSecret::generate(rng);
        let mut n0 = [0u8; 24];
        rng.fill_bytes(&mut n0);
        let cred = match (&self.ticket, use_ticket) {
            (Some((t, k)), true) => ClientCredential::Ticket(t, k),
            _ => ClientCredential::Key(&key),
        };
        let prepared = PreparedRequest::new(
            cert,
            cred,
            n0,
            &outer::random_pad(rng),
            &outer::random_pad(rng),
        )
        .unwrap();
        let mut head = RequestHead::new("POST", target);
        let client_now = now.saturating_add_signed(self.clock_offset);
        head.fields
            .push(Field::new("Date", replay::format_date(client_now)));
        head.fields
            .push(Field::new("Content-Length", body.len().to_string()));
        head.fields.extend(extra.iter().cloned());
        let stream = prepared.seal_message(&head, body, 16 * 1024).unwrap();
        let wire = prepared.encode_outer(
            Form::Post,
            &Mount::new("/hc").unwrap(),
            "svc.example",
            &stream,
        );
        (prepared, wire)
    }

    fn open(&self, prepared: &PreparedRequest, status: u16, body: &[u8]) -> Result<Reply, Error> {
        if status != 200 {
            let p = outer::parse_problem(body).unwrap();
            return Err(if p.type_uri == "urn:httpcrypt:unknown-key" {
                Error::UnknownKey
            } else {
                Error::MalformedInner
            });
        }
        let (h, b) = prepared.open_response(body, &Limits::default())?;
        Ok(Reply {
            status: h.status,
            fields: h.fields,
            body: b,
        })
    }
}

fn setup(seed: u8) -> (ChaCha20Rng, Server, Client) {
    let mut rng = ChaCha20Rng::from_seed([seed; 32]);
    let server = Server::new(&mut rng);
    let client = Client {
        certs: server.keys.certs(T0).into_iter().cloned().collect(),
        identity: server.identity.public(),
        ticket: None,
        clock_offset: 0,
    };
    (rng, server, client)
}

#[test]
fn streaming_body_in_any_chunking() {
    let (mut rng, mut server, client) = setup(1);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    for chunk in [1usize, 7, 4096, 1 << 20] {
        let (prepared, wire) = client.request(&mut rng, T0, "/upload", &body, false, &[]);
        let (status, rsp) = server.handle(&wire, T0, &mut rng, chunk);
        let reply = client.open(&prepared, status, &rsp).unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, body, "echoed body, chunk {chunk}");
        assert_eq!(
            inner::field(&reply.fields, "x-echo"),
            Some(b"POST /upload 200000".as_slice())
        );
    }
}

#[test]
fn rotation_and_unknown_key_retry() {
    let (mut rng, mut server, mut client) = setup(2);
    // Two rotations later the client's key is gone; the server lists the current ones.
    server.rotate(&mut rng, T0 + R);
    server.rotate(&mut rng, T0 + 2 * R + 61);
    server.rotate(&mut rng, T0 + 3 * R);
    let now = T0 + 3 * R;
    let (prepared, wire) = client.request(&mut rng, now - 2 * R, "/a", b"x", false, &[]);
    let (status, rsp) = server.handle(&wire, now, &mut rng, 4096);
    assert_eq!(status, 400);
    assert_eq!(
        client.open(&prepared, status, &rsp).err(),
        Some(Error::UnknownKey)
    );
    let p = outer::parse_problem(&rsp).unwrap();
    client.certs = p
        .certs
        .iter()
        .map(|l| KeyCert::from_text(l).unwrap())
        .collect();
    assert!(cert::choose(&client.certs, now, Some(&client.identity)).is_ok());
    let (prepared, wire) = client.request(&mut rng, now, "/a", b"x", false, &[]);
    let (status, rsp) = server.handle(&wire, now, &mut rng, 4096);
    assert_eq!(client.open(&prepared, status, &rsp).unwrap().status, 200);
}

#[test]
fn replay_and_stale_date() {
    let (mut rng, mut server, mut client) = setup(3);
    let (prepared, wire) = client.request(&mut rng, T0, "/pay", b"1", false, &[]);
    let (s1, r1) = server.handle(&wire, T0, &mut rng, 4096);
    assert_eq!(client.open(&prepared, s1, &r1).unwrap().status, 200);
    // The same bytes again, 10 s later: refused inside, under k.
    let (s2, r2) = server.handle(&wire, T0 + 10, &mut rng, 4096);
    let reply = client.open(&prepared, s2, &r2).unwrap();
    assert_eq!(reply.status, 425);
    assert!(String::from_utf8_lossy(&reply.body).contains("urn:httpcrypt:replay"));
    // A client clock 5 minutes slow: 425 stale with the server's Date; one corrected retry.
    client.clock_offset = -300;
    let (prepared, wire) = client.request(&mut rng, T0 + 20, "/pay", b"2", false, &[]);
    let (s3, r3) = server.handle(&wire, T0 + 20, &mut rng, 4096);
    let reply = client.open(&prepared, s3, &r3).unwrap();
    assert_eq!(reply.status, 425);
    assert!(String::from_utf8_lossy(&reply.body).contains("urn:httpcrypt:stale"));
    let server_date = replay::check_date(inner::field(&reply.fields, "date"), T0 + 20, 1).unwrap();
    let sent = (T0 + 20).saturating_add_signed(client.clock_offset);
    client.clock_offset += server_date as i64 - sent as i64;
    assert_eq!(client.clock_offset, 0);
    let (prepared, wire) = client.request(&mut rng, T0 + 20, "/pay", b"2", false, &[]);
    let (s4, r4) = server.handle(&wire, T0 + 20, &mut rng, 4096);
    assert_eq!(client.open(&prepared, s4, &r4).unwrap().status, 200);
}

#[test]
fn tickets_resume_without_key_agreement_and_die_with_their_kid() {
    let (mut rng, mut server, mut client) = setup(4);
    let (prepared, wire) = client.request(&mut rng, T0, "/t", b"", false, &[]);
    let (s, r) = server.handle(&wire, T0, &mut rng, 4096);
    let reply = client.open(&prepared, s, &r).unwrap();
    let ticket = Ticket::from_field(inner::field(&reply.fields, "ticket").unwrap()).unwrap();
    client.ticket = Some((ticket, prepared.session_key().clone()));
    // With the ticket the server needs no X25519: the agreement's `agree` must not run.
    let (prepared, wire) = client.request(&mut rng, T0 + 5, "/t2", b"abc", true, &[]);
    let o = ParsedOuter::parse(&wire).expect("a complete request");
    let req = o.as_request();
    struct NoAgreement;
    impl server::Agreement for NoAgreement {
        fn agree(
            &mut self,
            _: &server::ServerKey,
            _: &httpcrypt_proto::KexPublic,
        ) -> httpcrypt_proto::Result<httpcrypt_proto::SessionKey> {
            panic!("no key agreement with a ticket")
        }
    }
    let accepted = match server::accept(
        &server.keys,
        &server.mount,
        &req,
        &Limits::default(),
        T0 + 5,
        &mut NoAgreement,
    )
    .unwrap()
    {
        Accept::Request(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(accepted.session_key(), prepared.session_key());
    let (s, r) = server.handle(&wire, T0 + 10, &mut rng, 4096);
    assert_eq!(client.open(&prepared, s, &r).unwrap().body, b"abc");
    // After the kid's not_after the ticket is an unknown key.
    let late = T0 + 2 * R + 61;
    server.rotate(&mut rng, late);
    let (prepared, wire) = client.request(&mut rng, T0, "/t3", b"", true, &[]);
    let (s, r) = server.handle(&wire, late, &mut rng, 4096);
    assert_eq!(client.open(&prepared, s, &r).err(), Some(Error::UnknownKey));
}

#[test]
fn token_is_verifiable_later_without_state() {
    let (mut rng, mut server, client) = setup(5);
    let cr = [9u8; 24];
    let (prepared, wire) = client.request(
        &mut rng,
        T0,
        "/tok",
        b"",
        false,
        &[Field::new(
            "Client-Random",
            httpcrypt_proto::b64::encode(&cr),
        )],
    );
    let (s, r) = server.handle(&wire, T0, &mut rng, 4096);
    let reply = client.open(&prepared, s, &r).unwrap();
    let random = inner::field(&reply.fields, "random").unwrap();
    assert_eq!(
        token::verify_random(b"token-secret", prepared.session_key(), random),
        Ok(cr)
    );
}

#[test]
fn inner_errors_are_sealed_not_plaintext() {
    let (mut rng, mut server, client) = setup(6);
    let (prepared, mut wire) = client.request(&mut rng, T0, "/x", b"payload", false, &[]);
    let last = wire.len() - 1;
    wire[last] ^= 1;
    let (s, r) = server.handle(&wire, T0, &mut rng, 4096);
    assert_eq!(
        s, 200,
        "the outer status stays 200: an injector cannot tell"
    );
    let reply = client.open(&prepared, s, &r).unwrap();
    assert_eq!(reply.status, 500);
    assert!(String::from_utf8_lossy(&reply.body).contains("urn:httpcrypt:integrity"));
    assert!(inner::field(&reply.fields, "date").is_some());
    // Another client cannot read that error: it is bound to the request's nonce and key.
    let (other, _) = client.request(&mut rng, T0, "/y", b"", false, &[]);
    assert!(other.open_response(&r, &Limits::default()).is_err());
}
