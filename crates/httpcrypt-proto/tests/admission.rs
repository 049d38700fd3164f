//! The load-aware defence (spec §14) with an in-memory client/server pair
//! and simulated time: junk is refused before the key agreement, a client
//! answers the challenge and completes its exchange, tickets pass without
//! one, and the defence switches off again once the flood stops.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::cell::Cell;
use std::net::IpAddr;

use httpcrypt_proto::admission::{self, Admission, AdmissionConfig, Refusal, Verdict};
use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::server::{
    self, Accept, Agreement, OuterRequest, ParsedOuter, ServerKey, ServerKeys,
};
use httpcrypt_proto::ticket::{TicketContents, TicketKey};
use httpcrypt_proto::{Error, IdentityKey, KexPublic, KexSecret, KeyId, Limits, SessionKey};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

const T0: u64 = 1_800_000_000;
const HOST: &str = "a.test";

struct Server {
    keys: ServerKeys,
    public: KexPublic,
    tk: TicketKey,
    defence: Admission,
    x25519: Cell<u32>,
}

impl Server {
    fn new(rng: &mut ChaCha20Rng) -> Server {
        let identity = IdentityKey::generate(rng);
        let kex = KexSecret::generate(rng);
        let public = *kex.public();
        let cert = KeyCert::sign(&identity, 1, (T0 - 60) as u32, (T0 + 7200) as u32, public);
        let mut keys = ServerKeys::new();
        keys.add_key(kex, cert);
        let tk = TicketKey::new(KeyId([5; 10]), [6; 32]);
        keys.add_ticket_key(TicketKey::new(KeyId([5; 10]), [6; 32]), T0 + 7200);
        let config = AdmissionConfig {
            threshold: 100,
            hold_ms: 2000,
            prefix_rate: 50,
            prefix_burst: 50,
            max_difficulty: 10,
            ..Default::default()
        };
        Server {
            keys,
            public,
            tk,
            defence: Admission::new(config, [1; 32], [2; 16], T0 * 1000),
            x25519: Cell::new(0),
        }
    }

    /// Judges one outer request from `addr` at `now_ms`: the verdict of the
    /// defence (if it ran) and the outcome of `accept`.
    fn handle(
        &mut self,
        bytes: &[u8],
        addr: IpAddr,
        now_ms: u64,
    ) -> (Option<Verdict>, Result<Accept, Error>) {
        let o = ParsedOuter::parse(bytes).unwrap();
        let view: OuterRequest<'_> = o.as_request();
        let mut gate = Gate {
            defence: &mut self.defence,
            x25519: &self.x25519,
            now_ms,
            addr,
            verdict: None,
        };
        let r = server::accept(
            &self.keys,
            &Mount::default(),
            &view,
            &Limits::default(),
            now_ms / 1000,
            &mut gate,
        );
        (gate.verdict, r)
    }
}

/// The defence in front of a counted X25519, as a server runs it.
struct Gate<'a> {
    defence: &'a mut Admission,
    x25519: &'a Cell<u32>,
    now_ms: u64,
    addr: IpAddr,
    verdict: Option<Verdict>,
}

impl Agreement for Gate<'_> {
    fn admit(&mut self, req: &OuterRequest<'_>, n0: &[u8; 24]) -> Result<(), Error> {
        let echo = admission::find_echo(req.cookies.iter().copied());
        match self.defence.judge(self.now_ms, self.addr, n0, echo) {
            Verdict::Admit => Ok(()),
            v => {
                self.verdict = Some(v);
                Err(Error::AdmissionRequired)
            }
        }
    }

    fn agree(&mut self, sk: &ServerKey, peer: &KexPublic) -> Result<SessionKey, Error> {
        self.x25519.set(self.x25519.get() + 1);
        sk.secret.session_key(peer)
    }
}

fn request(
    server_public: &KexPublic,
    secret: &KexSecret,
    rng: &mut ChaCha20Rng,
    echo: Option<&admission::AdmitCookie>,
) -> (PreparedRequest, Vec<u8>) {
    let mut n0 = [0u8; 24];
    rng.fill_bytes(&mut n0);
    let p =
        PreparedRequest::for_key(server_public, ClientCredential::Key(secret), n0, "", "").unwrap();
    let mut head = RequestHead::new("GET", "/x");
    head.fields.push(Field::new("Host", HOST));
    let stream = p.seal_message(&head, b"", 16_384).unwrap();
    let mut bytes = p.encode_outer(Form::Post, &Mount::default(), HOST, &stream);
    if let Some(c) = echo {
        let s = admission::solve_puzzle(c, &n0, rng.next_u64(), 1 << 24).unwrap();
        let text = String::from_utf8_lossy(&bytes[..bytes.len() - stream.len()]).into_owned();
        let cookie = format!("Cookie: {}", p.cookie());
        let head = text.replacen(
            &cookie,
            &format!("{cookie}; hc1-admit={}", admission::format_echo(c, &s)),
            1,
        );
        bytes = [head.as_bytes(), &stream].concat();
    }
    (p, bytes)
}

fn junk(kid: &KeyId, rng: &mut ChaCha20Rng) -> Vec<u8> {
    let mut public = [0u8; 32];
    rng.fill_bytes(&mut public);
    let mut n0 = [0u8; 24];
    rng.fill_bytes(&mut n0);
    let cookie = outer::format_cookie(kid, &public, "", "").unwrap();
    format!(
        "POST {} HTTP/1.1\r\nHost: {HOST}\r\nCookie: {cookie}\r\nContent-Length: 40\r\n\r\n{}",
        Mount::default().nonce_path(&n0),
        "x".repeat(40)
    )
    .into_bytes()
}

#[test]
fn flood_challenge_echo_ticket_and_calm() {
    let mut rng = ChaCha20Rng::seed_from_u64(14);
    let mut s = Server::new(&mut rng);
    let kid = s.public.kid();
    let attacker: IpAddr = "198.51.100.9".parse().unwrap();
    let client: IpAddr = "203.0.113.5".parse().unwrap();
    let mut t = T0 * 1000;

    // Idle: junk costs an X25519 each (that is what the defence is for).
    for _ in 0..50 {
        t += 5;
        let (v, r) = s.handle(&junk(&kid, &mut rng), attacker, t);
        assert!(v.is_none() && r.is_ok());
    }
    assert_eq!(s.x25519.get(), 50);

    // A flood: 1000 junk requests in 500 ms. Once the demand passed the
    // threshold of 100/s every further one is refused before the X25519.
    for _ in 0..1000 {
        let _ = s.handle(&junk(&kid, &mut rng), attacker, t);
    }
    t += 500;
    let agreed = s.x25519.get();
    assert!(
        agreed <= 50 + 101,
        "the defence switched on at the threshold: {agreed}"
    );
    for _ in 0..200 {
        let (v, r) = s.handle(&junk(&kid, &mut rng), attacker, t);
        assert!(matches!(v, Some(Verdict::Challenge(_))), "{v:?}");
        assert_eq!(r.unwrap_err(), Error::AdmissionRequired);
    }
    assert_eq!(s.x25519.get(), agreed, "no X25519 for junk under pressure");

    // A legitimate new client: challenged, it echoes the cookie and
    // completes its exchange.
    let secret = KexSecret::generate(&mut rng);
    let (_, bytes) = request(&s.public, &secret, &mut rng, None);
    let (v, _) = s.handle(&bytes, client, t);
    let Some(Verdict::Challenge(c)) = v else {
        panic!("{v:?}")
    };
    let mut doc = String::new();
    admission::format_refusal(&Verdict::Challenge(c), &mut doc);
    let Ok(Refusal::Admission(c)) = admission::parse_refusal(doc.as_bytes()) else {
        panic!("{doc}")
    };
    // The junk never echoed, so it never made the server pay and does not
    // raise the price: the newcomer echoes a cookie without a puzzle.
    assert_eq!(c.difficulty(), 0, "junk alone sets no puzzle");
    let (p, bytes) = request(&s.public, &secret, &mut rng, Some(&c));
    let (v, r) = s.handle(&bytes, client, t + 50);
    assert!(v.is_none(), "{v:?}");
    let Ok(Accept::Request(a)) = r else {
        panic!("{r:?}")
    };
    let body = &ParsedOuter::parse(&bytes).unwrap().body;
    let (head, _) = server::open_request(&a, body, &Limits::default()).unwrap();
    assert_eq!(head.target, "/x");
    let mut out = Vec::new();
    server::seal_response(
        a.into_response_key(),
        [3; 24],
        &ResponseHead::new(200, "OK"),
        b"ok",
        t / 1000,
        16_384,
        &mut out,
    )
    .unwrap();
    let (rh, rb) = p.open_response(&out, &Limits::default()).unwrap();
    assert_eq!((rh.status, rb.as_slice()), (200, &b"ok"[..]));

    // The attacker cannot reuse the client's echo from its own address.
    let (_, stolen) = request(&s.public, &secret, &mut rng, Some(&c));
    let (v, _) = s.handle(&stolen, attacker, t + 60);
    assert!(matches!(v, Some(Verdict::Challenge(_))));

    // A returning client with a ticket never meets the defence.
    let ticket = s.tk.seal(
        &TicketContents {
            key: p.session_key().clone(),
            kid,
            expiry: (T0 + 7200) as u32,
        },
        [4; 24],
    );
    let mut n0 = [0u8; 24];
    rng.fill_bytes(&mut n0);
    let k = p.session_key().clone();
    let tp = PreparedRequest::for_key(&s.public, ClientCredential::Ticket(&ticket, &k), n0, "", "")
        .unwrap();
    let stream = tp
        .seal_message(&RequestHead::new("GET", "/t"), b"", 16_384)
        .unwrap();
    let (v, r) = s.handle(
        &tp.encode_outer(Form::Post, &Mount::default(), HOST, &stream),
        attacker,
        t + 70,
    );
    assert!(v.is_none() && matches!(r, Ok(Accept::Request(_))));

    // The flood stops: after the hold time the defence is off again.
    t += 5000;
    let (v, r) = s.handle(&junk(&kid, &mut rng), attacker, t);
    assert!(v.is_none() && r.is_ok(), "idle again: {v:?}");
    let counts = s.defence.counts();
    assert!(
        counts.challenged >= 200 && counts.admitted_on == 1,
        "{counts:?}"
    );
}
