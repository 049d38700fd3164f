//! The client's suite 2 (spec/hybrid.md H3–H5) against a tiny hyper
//! server built on proto's hybrid exchange (`hybrid::exchange::accept`,
//! `HybridKeys`) beside v1's (`server::accept`, `ServerKeys`): hybrid POST
//! and GET, resumption of a hybrid session, the pin, `require` and
//! `prefer` against a v1-only server, and `unknown-key` with
//! `hybrid_certs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use httpcrypt::client::{KeySource, OuterExchange, Pq, Suite};
use httpcrypt::clock::unix_now;
use httpcrypt::{Client, ClientConfig};
use httpcrypt_proto::hybrid::cert::HybridCert;
use httpcrypt_proto::hybrid::{exchange, HybridKeys, HybridServerKey, KemSecret};
use httpcrypt_proto::inner::{Field, ResponseHead};
use httpcrypt_proto::outer::{self, Credential, Mount};
use httpcrypt_proto::server::{self, Accept, Accepted, OuterRequest, ServerKeys};
use httpcrypt_proto::ticket::{TicketContents, TicketKey, TICKET_FIELD};
use httpcrypt_proto::{Error, IdentityKey, KexSecret, KeyCert, KeyId, Limits, Profile};

/// What the server takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// v1 only: `OPTIONS /pq` is 404.
    V1Only,
    /// Both suites.
    On,
}

struct State {
    mode: Mode,
    /// The request profile the suite-2 certificates announce.
    profile: Profile,
    /// Seeds the identity, the keys and the ticket keys.
    seed: u8,
    /// The `max-age` of the `OPTIONS /` answer.
    v1_max_age: u64,
    identity: IdentityKey,
    kem: Arc<KemSecret>,
    hybrid: HybridKeys,
    v1: ServerKeys,
    /// One line per request: `OPTIONS /pq`, `OPTIONS /`, or the suite and
    /// credential of an opened request (`hybrid-key`, `v1-ticket`, ...).
    log: Vec<String>,
}

impl State {
    fn new(seed: u8, mode: Mode) -> Self {
        Self::announcing(seed, mode, Profile::V1)
    }

    /// A server whose suite-2 certificates announce `profile`.
    fn announcing(seed: u8, mode: Mode, profile: Profile) -> Self {
        let identity = IdentityKey::from_seed([seed; 32]);
        let kem = Arc::new(KemSecret::from_seed([seed; 64]));
        let mut s = State {
            mode,
            profile,
            seed,
            v1_max_age: 60,
            identity,
            kem,
            hybrid: HybridKeys::new(),
            v1: ServerKeys::new(),
            log: Vec::new(),
        };
        s.add_hybrid(1, seed.wrapping_add(1));
        let now = unix_now();
        let kex = KexSecret::from_bytes([seed.wrapping_add(100); 32]);
        let cert = KeyCert::sign(
            &s.identity,
            1,
            (now - 10) as u32,
            (now + 3600) as u32,
            *kex.public(),
        );
        s.v1.add_key(kex, cert);
        s.v1.add_ticket_key(TicketKey::new(KeyId([1; 10]), [seed; 32]), now + 3600);
        s.hybrid
            .add_ticket_key(TicketKey::new(KeyId([2; 10]), [seed; 32]), now + 3600);
        s
    }

    /// A suite-2 key with serial `serial` for kex key `[key_seed; 32]`.
    fn add_hybrid(&mut self, serial: u32, key_seed: u8) -> HybridCert {
        let now = unix_now();
        let kex = KexSecret::from_bytes([key_seed; 32]);
        let cert = HybridCert::sign(
            &self.identity,
            self.profile,
            serial,
            (now - 10) as u32,
            (now + 3600) as u32,
            *kex.public(),
            self.kem.public().hash(),
        );
        self.hybrid
            .add_key(HybridServerKey::new(kex, self.kem.clone(), cert.clone()).unwrap());
        cert
    }
}

type Shared = Arc<Mutex<State>>;

fn respond(status: u16, ctype: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    respond_for(status, ctype, body, 60)
}

fn respond_for(
    status: u16,
    ctype: &str,
    body: impl Into<Bytes>,
    max_age: u64,
) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", ctype)
        .header("cache-control", format!("max-age={max_age}"))
        .body(Full::new(body.into()))
        .unwrap()
}

fn unknown_key(s: &State, now: u64) -> Response<Full<Bytes>> {
    let (status, doc) = outer::format_problem(&Error::UnknownKey, &s.v1.cert_lines(now)).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    if s.mode == Mode::On {
        let lines: Vec<String> = s
            .hybrid
            .certs(now)
            .into_iter()
            .map(HybridCert::to_text)
            .collect();
        doc["hybrid_certs"] = serde_json::json!(lines);
    }
    respond(status, outer::PROBLEM_TYPE, doc.to_string())
}

async fn handle(state: Shared, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let now = unix_now();
    let mut s = state.lock().unwrap();
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if parts.method == http::Method::OPTIONS {
        s.log.push(format!("OPTIONS {target}"));
        return match target {
            "/pq" if s.mode == Mode::V1Only => respond(404, "text/plain", "not found"),
            "/pq" => respond(200, outer::CERTS_TYPE, s.hybrid.cert_list(now)),
            _ => respond_for(
                200,
                outer::CERTS_TYPE,
                s.v1.cert_lines(now).join("\n"),
                s.v1_max_age,
            ),
        };
    }
    let cookies: httpcrypt_proto::server::CookieFields = parts
        .headers
        .get_all("cookie")
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    let req = OuterRequest {
        method: parts.method.as_str(),
        target,
        host: parts.headers.get("host").map(|v| v.as_bytes()),
        cookies,
        content_length: Some(body.len() as u64),
        has_body: !body.is_empty(),
    };
    let mount = Mount::default();
    let limits = Limits::default();
    let mut accepted: Option<(Accepted, bool)> = None;
    if s.mode == Mode::On {
        match exchange::accept(&s.hybrid, &mount, &req, &body, &limits, now) {
            Ok(Accept::Request(a)) => accepted = Some((a, true)),
            Err(Error::UnknownKey) => {}
            other => return respond(400, "text/plain", format!("{other:?}")),
        }
    }
    if accepted.is_none() {
        match server::accept(&s.v1, &mount, &req, &limits, now, &mut server::Plain) {
            Ok(Accept::Request(a)) => accepted = Some((a, false)),
            Err(Error::UnknownKey) => return unknown_key(&s, now),
            other => return respond(400, "text/plain", format!("{other:?}")),
        }
    }
    let (a, hybrid) = accepted.unwrap();
    let opened = if hybrid {
        exchange::open_request(&a, &body, &limits)
    } else {
        server::open_request(&a, &body, &limits)
    };
    let (head, inner_body) = match opened {
        Ok(o) => o,
        Err(e) => return respond(400, "text/plain", e.code()),
    };
    let fresh = matches!(a.credential, Credential::Key { .. });
    let suite = if hybrid { "hybrid" } else { "v1" };
    let cred = if fresh { "key" } else { "ticket" };
    let p2 = if a.profile == Profile::Compact {
        "-p2"
    } else {
        ""
    };
    s.log.push(format!("{suite}-{cred}{p2}"));
    let mut rsp = ResponseHead::new(200, "OK");
    if fresh {
        let tk = TicketKey::new(KeyId([if hybrid { 2 } else { 1 }; 10]), [s.seed; 32]);
        let t = tk.seal(
            &TicketContents {
                key: a.session_key().clone(),
                kid: a.kid,
                expiry: (now + 600) as u32,
            },
            [7; 24],
        );
        rsp.fields.push(Field::new(TICKET_FIELD, t.to_field()));
    }
    let text = format!(
        "{suite} {cred} {} {} {}",
        head.method,
        head.target,
        inner_body.len()
    );
    let mut out = Vec::new();
    server::seal_response(
        a.into_response_key(),
        [9; 24],
        &rsp,
        text.as_bytes(),
        now,
        16 * 1024,
        &mut out,
    )
    .unwrap();
    respond(200, outer::OCTET_STREAM, out)
}

async fn serve(state: Shared) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(state, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

fn server_state(seed: u8, mode: Mode) -> Shared {
    Arc::new(Mutex::new(State::new(seed, mode)))
}

/// A client that also sends fresh hybrid requests in the GET form when they
/// fit, so both forms stay covered (the default is POST).
fn client(pq: Pq, tickets: bool) -> Client {
    Client::new(ClientConfig {
        pq,
        tickets,
        hybrid_get_form: true,
        ..Default::default()
    })
}

async fn get(
    c: &Client,
    addr: SocketAddr,
    path: &str,
) -> Result<(String, OuterExchange), httpcrypt::Error> {
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Bytes::new())
        .unwrap();
    let rsp = c.send(req).await?;
    let x = rsp.extensions().get::<OuterExchange>().unwrap().clone();
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    Ok((String::from_utf8(body.to_vec()).unwrap(), x))
}

fn log(state: &Shared) -> Vec<String> {
    state.lock().unwrap().log.clone()
}

fn downgrade(r: Result<(String, OuterExchange), httpcrypt::Error>) -> bool {
    matches!(r, Err(httpcrypt::Error::Protocol(Error::HybridDowngrade)))
}

#[tokio::test]
async fn hybrid_get_post_and_streaming_post() {
    let state = server_state(11, Mode::On);
    let addr = serve(state.clone()).await;
    let c = client(Pq::Prefer, false);
    let (body, x) = get(&c, addr, "/a").await.unwrap();
    assert_eq!(body, "hybrid key GET /a 0");
    assert_eq!(x.suite, Suite::Hybrid);
    assert_eq!(
        x.method,
        http::Method::GET,
        "a small hybrid request fits the GET form"
    );
    assert_eq!(c.key_source(&addr.to_string()), Some(KeySource::PqOptions));

    let big = Bytes::from(vec![b'x'; 3000]);
    let rsp = c
        .send(
            Request::post(format!("http://{addr}/b"))
                .body(big.clone())
                .unwrap(),
        )
        .await
        .unwrap();
    let x = rsp.extensions().get::<OuterExchange>().unwrap().clone();
    assert_eq!(x.method, http::Method::POST);
    assert_eq!(x.suite, Suite::Hybrid);
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hybrid key POST /b 3000");

    let stream = http_body_util::StreamBody::new(futures_util::stream::iter(
        (0..4).map(|_| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(vec![b'y'; 500])))),
    ));
    let rsp = c
        .send_streaming(
            Request::post(format!("http://{addr}/c"))
                .body(stream)
                .unwrap(),
        )
        .await
        .unwrap();
    let x = rsp.extensions().get::<OuterExchange>().unwrap().clone();
    assert_eq!(x.suite, Suite::Hybrid);
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hybrid key POST /c 2000");
    assert_eq!(
        log(&state),
        ["OPTIONS /pq", "hybrid-key", "hybrid-key", "hybrid-key"]
    );
}

#[tokio::test]
async fn a_hybrid_session_resumes_with_its_ticket() {
    let state = server_state(12, Mode::On);
    let addr = serve(state.clone()).await;
    let c = client(Pq::Prefer, true);
    let (_, x) = get(&c, addr, "/1").await.unwrap();
    assert_eq!(x.suite, Suite::Hybrid);
    let (body, x) = get(&c, addr, "/2").await.unwrap();
    assert_eq!(body, "hybrid ticket GET /2 0");
    assert_eq!(
        x.suite,
        Suite::Hybrid,
        "a ticket of a hybrid session is hybrid"
    );
    assert_eq!(log(&state), ["OPTIONS /pq", "hybrid-key", "hybrid-ticket"]);
}

#[tokio::test]
async fn a_v1_ticket_is_not_presented_to_a_suite_2_key() {
    // A v1 session first (`prefer` against a v1-only server, v1 keys
    // reusable for one second), then the server turns suite 2 on.
    let state = server_state(13, Mode::V1Only);
    state.lock().unwrap().v1_max_age = 1;
    let addr = serve(state.clone()).await;
    let c = client(Pq::Prefer, true);
    let (body, _) = get(&c, addr, "/1").await.unwrap();
    assert_eq!(body, "v1 key GET /1 0");
    state.lock().unwrap().mode = Mode::On;
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    // The next discovery finds suite 2; the v1 ticket would make the
    // request classical, so a fresh hybrid request goes instead.
    let (body, x) = get(&c, addr, "/2").await.unwrap();
    assert_eq!(body, "hybrid key GET /2 0");
    assert_eq!(x.suite, Suite::Hybrid);
    let (body, _) = get(&c, addr, "/3").await.unwrap();
    assert_eq!(body, "hybrid ticket GET /3 0");
}

#[tokio::test]
async fn the_pin_refuses_a_downgrade() {
    let state = server_state(14, Mode::On);
    let addr = serve(state.clone()).await;
    let c = client(Pq::Prefer, false);
    get(&c, addr, "/1").await.unwrap();
    // An attacker (or a misconfigured server) now offers v1 only: the
    // suite-2 key is refused, and rediscovery finds no suite 2.
    state.lock().unwrap().mode = Mode::V1Only;
    assert!(downgrade(get(&c, addr, "/2").await));
    assert_eq!(
        log(&state),
        ["OPTIONS /pq", "hybrid-key", "OPTIONS /pq"],
        "no v1 request left"
    );
    // A client that never saw suite 2 falls back.
    let fresh = client(Pq::Prefer, false);
    let (body, x) = get(&fresh, addr, "/3").await.unwrap();
    assert_eq!(body, "v1 key GET /3 0");
    assert_eq!(x.suite, Suite::Classical);
}

#[tokio::test]
async fn require_fails_against_a_v1_only_server() {
    let state = server_state(15, Mode::V1Only);
    let addr = serve(state.clone()).await;
    let c = client(Pq::Require, false);
    assert!(downgrade(get(&c, addr, "/").await));
    assert_eq!(log(&state), ["OPTIONS /pq"], "nothing sent under v1");
}

#[tokio::test]
async fn prefer_falls_back_to_v1() {
    let state = server_state(16, Mode::V1Only);
    let addr = serve(state.clone()).await;
    let c = client(Pq::Prefer, false);
    let (body, x) = get(&c, addr, "/1").await.unwrap();
    assert_eq!(body, "v1 key GET /1 0");
    assert_eq!(x.suite, Suite::Classical);
    let (_, x) = get(&c, addr, "/2").await.unwrap();
    assert_eq!(x.suite, Suite::Classical);
    assert_eq!(
        log(&state),
        ["OPTIONS /pq", "OPTIONS /", "v1-key", "v1-key"],
        "the v1 keys serve until their max-age"
    );
    // Off never asks for suite 2.
    let off = client(Pq::Off, false);
    state.lock().unwrap().mode = Mode::On;
    let (body, _) = get(&off, addr, "/3").await.unwrap();
    assert_eq!(body, "v1 key GET /3 0");
    assert!(!log(&state)[4..].iter().any(|l| l == "OPTIONS /pq"));
}

#[tokio::test]
async fn unknown_key_brings_hybrid_certs() {
    let state = server_state(17, Mode::On);
    let addr = serve(state.clone()).await;
    let c = client(Pq::Prefer, false);
    get(&c, addr, "/1").await.unwrap();
    // The server rotates its kex key; the ML-KEM key stays, so the new
    // certificate names a hash the client holds.
    {
        let mut s = state.lock().unwrap();
        s.hybrid = HybridKeys::new();
        s.add_hybrid(2, 99);
        let now = unix_now();
        let seed = s.seed;
        s.hybrid
            .add_ticket_key(TicketKey::new(KeyId([2; 10]), [seed; 32]), now + 3600);
    }
    let (body, x) = get(&c, addr, "/2").await.unwrap();
    assert_eq!(body, "hybrid key GET /2 0");
    assert_eq!(x.suite, Suite::Hybrid);
    assert_eq!(x.attempts, 2);
    assert_eq!(c.key_source(&addr.to_string()), Some(KeySource::UnknownKey));
    assert_eq!(
        log(&state),
        ["OPTIONS /pq", "hybrid-key", "hybrid-key"],
        "the key text came from the cache, not from another OPTIONS"
    );
}

/// A discovery hook standing in for DNS: suite-2 certificates, and key
/// texts when `with_kem`; no v1 keys.
#[derive(Debug)]
struct FakeDns {
    certs: Vec<HybridCert>,
    kem: Option<httpcrypt_proto::hybrid::KemPublic>,
}

impl httpcrypt::client::Discovery for FakeDns {
    fn discover<'a>(
        &'a self,
        _authority: &'a str,
        _pinned: Option<&'a httpcrypt_proto::IdentityPublic>,
    ) -> httpcrypt::client::BoxFuture<'a, Result<httpcrypt::client::Discovered, httpcrypt::Error>>
    {
        Box::pin(async { Ok(httpcrypt::client::Discovered::default()) })
    }

    fn discover_hybrid<'a>(
        &'a self,
        _authority: &'a str,
    ) -> httpcrypt::client::BoxFuture<
        'a,
        Result<httpcrypt::client::HybridDiscovered, httpcrypt::Error>,
    > {
        Box::pin(async {
            Ok(httpcrypt::client::HybridDiscovered {
                certs: self.certs.clone(),
                kems: self.kem.iter().cloned().collect(),
                source: Some(KeySource::DnsPqTxt),
                ttl: 60,
                detail: String::new(),
            })
        })
    }
}

#[tokio::test]
async fn suite_2_from_the_discovery_hook() {
    let state = server_state(18, Mode::On);
    let addr = serve(state.clone()).await;
    let (certs, kem) = {
        let s = state.lock().unwrap();
        let now = unix_now();
        let certs: Vec<HybridCert> = s.hybrid.certs(now).into_iter().cloned().collect();
        (certs, s.kem.public().clone())
    };
    // Certificate and key text in DNS: no OPTIONS at all.
    let c = Client::new(ClientConfig {
        pq: Pq::Require,
        tickets: false,
        discovery: Some(Arc::new(FakeDns {
            certs: certs.clone(),
            kem: Some(kem),
        })),
        options_fallback: false,
        ..Default::default()
    });
    let (body, x) = get(&c, addr, "/1").await.unwrap();
    assert_eq!(body, "hybrid key GET /1 0");
    assert_eq!(x.suite, Suite::Hybrid);
    assert_eq!(c.key_source(&addr.to_string()), Some(KeySource::DnsPqTxt));
    assert_eq!(log(&state), ["hybrid-key"]);
    // Certificates without the key text: the text comes from OPTIONS /pq.
    let c = Client::new(ClientConfig {
        pq: Pq::Require,
        tickets: false,
        discovery: Some(Arc::new(FakeDns { certs, kem: None })),
        ..Default::default()
    });
    get(&c, addr, "/2").await.unwrap();
    assert_eq!(log(&state), ["hybrid-key", "OPTIONS /pq", "hybrid-key"]);
}

#[tokio::test]
async fn the_default_client_posts_hybrid_requests_in_profile_2() {
    let state = Arc::new(Mutex::new(State::announcing(
        13,
        Mode::On,
        Profile::Compact,
    )));
    let addr = serve(state.clone()).await;
    let c = Client::new(ClientConfig {
        pq: Pq::Require,
        ..Default::default()
    });
    let (body, x) = get(&c, addr, "/a").await.unwrap();
    assert_eq!(body, "hybrid key GET /a 0");
    assert_eq!(x.suite, Suite::Hybrid);
    assert_eq!(
        x.method,
        http::Method::POST,
        "a fresh hybrid request goes as a POST by default"
    );
    let (body, x) = get(&c, addr, "/b").await.unwrap();
    assert_eq!(body, "hybrid ticket GET /b 0");
    assert_eq!(
        x.method,
        http::Method::GET,
        "a resumed request carries no ciphertext"
    );
    assert_eq!(
        log(&state),
        ["OPTIONS /pq", "hybrid-key-p2", "hybrid-ticket-p2"]
    );
}
