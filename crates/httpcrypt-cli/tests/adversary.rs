//! An attacker on the path (spec §4.3 as amended by erratum E1, and the
//! "Security considerations" of spec/httpcrypt.md): a relay written here
//! (`adversary/relay.rs`: a hyper server in front of the target, a hyper
//! client behind it) adds,
//! changes, duplicates and removes outer fields of every class, re-frames
//! bodies, and adds outer response fields; raw sockets play the framing
//! games a relay built on an HTTP library cannot. Against `serve`,
//! `gateway` (an upstream written here records exactly what it received),
//! the layer in an axum app, `split-proxy` and the rspamd profile, the
//! service sees what the client sealed, field for field, and the client
//! releases what the server sealed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;
#[path = "adversary/relay.rs"]
mod relay;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{exchange, Proc, Sealed};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use http_body_util::BodyExt;
use httpcrypt::proto::inner::{self, Field, ResponseHead};
use httpcrypt::proto::outer::Mount;
use relay::{add, attacks, fields_of, keep, response_attack, set, Mitm, Recorder, Seen};

/// The inner request of the gateway cases.
const SEALED_FIELDS: &[(&str, &str)] = &[
    ("Host", "app.example"),
    ("User-Agent", "sealed-agent/1"),
    ("Accept", "application/json"),
    ("Content-Type", "application/json"),
    ("X-Sealed", "yes"),
];

fn now() -> u64 {
    httpcrypt::clock::unix_now()
}

/// Sends `sealed`'s request through `via` in the POST form (or, with
/// `get`, the GET form) and returns the outer response.
fn send(
    sealed: &Sealed,
    via: SocketAddr,
    get: bool,
    method: &str,
    target: &str,
    fields: &[(&str, &str)],
    body: &[u8],
) -> common::RawResponse {
    let stream = sealed.stream_with(method, target, now(), fields, body);
    let host = via.to_string();
    let bytes = if get {
        sealed.get(&host, &stream)
    } else {
        sealed.post(&host, &stream)
    };
    exchange(via, &bytes).0
}

/// Opens a sealed answer and checks it is the upstream's, exactly.
fn assert_upstream_answer(sealed: &Sealed, rsp: &common::RawResponse, what: &str) {
    let (head, body) = sealed.open(rsp);
    assert_eq!(
        head.status,
        200,
        "{what}: {head:?} {}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(body, b"upstream ok", "{what}");
    assert_eq!(
        inner::field(&head.fields, "x-upstream"),
        Some(b"yes".as_slice()),
        "{what}"
    );
}

/// A gateway in front of the recorder, with `extra` options.
struct GatewaySetup {
    _dir: tempfile::TempDir,
    recorder: Recorder,
    gateway: Proc,
}

impl GatewaySetup {
    fn new(extra: &[&str]) -> GatewaySetup {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        common::keygen(&keys, false);
        let recorder = Recorder::start();
        // The gateway's own client-address fields (`--forwarded`, by
        // default X-Forwarded-For/-Proto from the TCP peer: tests/ops.rs)
        // are off, so the upstream must see the sealed request exactly.
        let mut args = vec!["--forwarded", "none"];
        args.extend_from_slice(extra);
        let gateway = common::gateway(&keys, recorder.addr, &args);
        GatewaySetup {
            _dir: dir,
            recorder,
            gateway,
        }
    }
}

/// `gateway`: whatever the relay does to the outer request, the upstream
/// receives exactly the sealed request (method, target, every field in
/// order, body) or nothing at all, in the POST and the GET form.
#[test]
fn gateway_upstream_sees_exactly_what_the_client_sealed() {
    let s = GatewaySetup::new(&[]);
    let certs = common::certs(s.gateway.addr, &Mount::default());
    let body = br#"{"item":"widget","qty":12}"#;
    for a in attacks() {
        let relay = Mitm::start(s.gateway.addr, a.request.clone(), a.rechunk, keep());
        for get in [false, true] {
            let (method, body): (&str, &[u8]) = if get { ("GET", b"") } else { ("POST", body) };
            let what = format!("{} ({method})", a.name);
            let sealed = Sealed::new(&certs, None, &Mount::default());
            let rsp = send(
                &sealed,
                relay.addr,
                get,
                method,
                "/api/items?x=1",
                SEALED_FIELDS,
                body,
            );
            let seen = s.recorder.take();
            if !a.served {
                assert_ne!(rsp.status, 200, "{what}: {rsp:?}");
                assert!(seen.is_empty(), "{what}: the upstream saw {seen:?}");
                continue;
            }
            assert_upstream_answer(&sealed, &rsp, &what);
            // The sealed head is `Date` (the protocol's) and these.
            let want = Seen::sealed(method, "/api/items?x=1", SEALED_FIELDS, body);
            assert_eq!(seen, [want], "{what}");
        }
    }
}

/// Outer framing games over raw sockets (a relay built on an HTTP library
/// cannot play them): odd chunk sizes with extensions, both framings at
/// once, two equal lengths, a length short of the stream, a
/// `Connection`-named field. The upstream sees the sealed request or
/// nothing.
#[test]
fn gateway_framing_games_change_nothing_the_upstream_sees() {
    let s = GatewaySetup::new(&[]);
    let gw = s.gateway.addr;
    let certs = common::certs(gw, &Mount::default());
    let body = vec![b'x'; 3000];
    let host = gw.to_string();
    let want = || Seen::sealed("PUT", "/items/7", SEALED_FIELDS, &body);
    let head = |sealed: &Sealed, extra: &[(&str, &str)]| {
        let mut fields = vec![
            ("Host", host.as_str()),
            ("Cookie", sealed.cookie()),
            ("Content-Type", httpcrypt::proto::outer::OCTET_STREAM),
        ];
        fields.extend_from_slice(extra);
        common::wire("POST", &sealed.path(), &fields, b"")
    };
    // Chunks of odd sizes, with chunk extensions and a trailer.
    {
        let sealed = Sealed::new(&certs, None, &Mount::default());
        let stream = sealed.stream_with("PUT", "/items/7", now(), SEALED_FIELDS, &body);
        let mut bytes = head(&sealed, &[("Transfer-Encoding", "chunked")]);
        for c in stream.chunks(7) {
            bytes.extend_from_slice(format!("{:x};ext=evil\r\n", c.len()).as_bytes());
            bytes.extend_from_slice(c);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"0\r\nX-Trailer: evil\r\n\r\n");
        let rsp = exchange(gw, &bytes).0;
        assert_upstream_answer(&sealed, &rsp, "odd chunks");
        assert_eq!(s.recorder.take(), [want()], "odd chunks");
    }
    // Both framings, two equal lengths, a length short of the stream, a
    // Connection-named Authorization: served exactly, or refused with
    // nothing upstream.
    type Frame = fn(&[u8]) -> (Vec<(&'static str, String)>, Vec<u8>);
    let games: &[(&str, Frame)] = &[
        ("content-length and chunked", |st| {
            (
                vec![
                    ("Content-Length", "5".into()),
                    ("Transfer-Encoding", "chunked".into()),
                ],
                common::chunked(st, 100),
            )
        }),
        ("two equal lengths", |st| {
            let n = st.len().to_string();
            (
                vec![("Content-Length", n.clone()), ("Content-Length", n)],
                st.to_vec(),
            )
        }),
        ("a length short of the stream", |st| {
            (
                vec![("Content-Length", (st.len() - 30).to_string())],
                st[..st.len() - 30].to_vec(),
            )
        }),
        ("connection-named authorization", |st| {
            (
                vec![
                    ("Content-Length", st.len().to_string()),
                    ("Connection", "Authorization, X-Hop".into()),
                    ("Authorization", "Basic ZXZpbA==".into()),
                    ("X-Hop", "1".into()),
                ],
                st.to_vec(),
            )
        }),
    ];
    for (name, frame) in games {
        let sealed = Sealed::new(&certs, None, &Mount::default());
        let stream = sealed.stream_with("PUT", "/items/7", now(), SEALED_FIELDS, &body);
        let (extra, framed) = frame(&stream);
        let extra: Vec<(&str, &str)> = extra.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let mut bytes = head(&sealed, &extra);
        bytes.extend_from_slice(&framed);
        let mut tcp = common::connect(gw);
        std::io::Write::write_all(&mut tcp, &bytes).unwrap();
        let rsp = common::read_response(&mut std::io::BufReader::new(tcp));
        let seen = s.recorder.take();
        match rsp {
            Some(r) if r.status == 200 => {
                let (head, got) = sealed.open(&r);
                if head.status == 200 {
                    assert_eq!(got, b"upstream ok", "{name}");
                    assert_eq!(seen, [want()], "{name}");
                } else {
                    assert!(
                        seen.is_empty(),
                        "{name}: {head:?}, the upstream saw {seen:?}"
                    );
                }
            }
            other => assert!(
                seen.is_empty(),
                "{name}: {other:?}, the upstream saw {seen:?}"
            ),
        }
    }
}

/// `gateway --pass-outer`: the allow-listed outer fields reach the upstream
/// under the prefix only, never under their own names; inner fields with
/// the prefix (a client posing as the proxy in front) are dropped.
#[test]
fn gateway_passes_allow_listed_outer_fields_under_a_prefix_only() {
    for (extra, prefix) in [
        (
            &[
                "--pass-outer",
                "X-Forwarded-For",
                "--pass-outer",
                "x-real-ip",
            ][..],
            "httpcrypt-outer-",
        ),
        (
            &[
                "--pass-outer",
                "X-Forwarded-For",
                "--pass-outer",
                "x-real-ip",
                "--outer-prefix",
                "X-Edge-",
            ][..],
            "x-edge-",
        ),
    ] {
        let s = GatewaySetup::new(extra);
        let certs = common::certs(s.gateway.addr, &Mount::default());
        let relay = Mitm::start(
            s.gateway.addr,
            Arc::new(|h: &mut HeaderMap| {
                add(h, "x-forwarded-for", "192.0.2.1");
                add(h, "x-forwarded-for", "192.0.2.2");
                add(h, "x-real-ip", "192.0.2.1");
                add(h, "authorization", "Basic ZXZpbA==");
            }),
            false,
            keep(),
        );
        let forged_xff = format!("{prefix}x-forwarded-for");
        let forged_other = format!("{prefix}role");
        let mut fields = SEALED_FIELDS.to_vec();
        fields.push((&forged_xff, "10.0.0.1"));
        fields.push((&forged_other, "admin"));
        let sealed = Sealed::new(&certs, None, &Mount::default());
        let rsp = send(&sealed, relay.addr, false, "POST", "/p", &fields, b"abc");
        assert_upstream_answer(&sealed, &rsp, prefix);
        let seen = s.recorder.take();
        assert_eq!(seen.len(), 1);
        let mut want = Seen::sealed("POST", "/p", SEALED_FIELDS, b"abc");
        want.fields.extend([
            (forged_xff.clone(), b"192.0.2.1".to_vec()),
            (forged_xff.clone(), b"192.0.2.2".to_vec()),
            (format!("{prefix}x-real-ip"), b"192.0.2.1".to_vec()),
        ]);
        assert_eq!(seen[0].clone().sorted(), want.sorted(), "{prefix}");
    }
}

/// `serve` (static files): the relay's ranges, preconditions, codings and
/// host change nothing: the whole file comes back, verified.
#[test]
fn serve_answers_what_was_sealed_whatever_the_relay_adds() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = common::noise(5000, 7);
    std::fs::write(root.join("a.bin"), &file).unwrap();
    let server = common::serve(&keys, &root, &[]);
    let certs = common::certs(server.addr, &Mount::default());
    for a in attacks() {
        let relay = Mitm::start(server.addr, a.request.clone(), a.rechunk, response_attack());
        for get in [false, true] {
            let what = format!(
                "{} ({})",
                a.name,
                if get { "GET form" } else { "POST form" }
            );
            let sealed = Sealed::new(&certs, None, &Mount::default());
            let rsp = send(
                &sealed,
                relay.addr,
                get,
                "GET",
                "/a.bin",
                &[("Host", "files.example")],
                b"",
            );
            if !a.served {
                assert_ne!(rsp.status, 200, "{what}");
                continue;
            }
            let (head, body) = sealed.open(&rsp);
            assert_eq!(head.status, 200, "{what}: {head:?}");
            assert!(body == file, "{what}: {} bytes", body.len());
            assert!(
                inner::field(&head.fields, "content-range").is_none(),
                "{what}"
            );
            assert!(
                inner::field(&head.fields, "content-encoding").is_none(),
                "{what}"
            );
        }
    }
}

/// The rspamd profile behind `gateway --profile rspamd --server-name`:
/// the upstream sees the sealed request, with the configured `Host`
/// (rspamc seals none) and no outer field the relay added.
#[test]
fn rspamd_gateway_upstream_sees_only_the_sealed_request() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::run(
        &[
            "keygen",
            "--format",
            "rspamd",
            "--dir",
            dir.path().join("k").to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let server =
        httpcrypt::proto::rspamd::keys::public_from_base32(out.stdout_text().trim().as_bytes())
            .unwrap();
    let key_file = dir.path().join("k/keypair.ucl");
    let recorder = Recorder::start();
    let gateway = common::gateway_args(
        recorder.addr,
        &[
            "--profile",
            "rspamd",
            "--keypair",
            key_file.to_str().unwrap(),
            "--server-name",
            "scanner.example",
            "--forwarded",
            "none",
        ],
    );
    let inner_req = b"POST /checkv2 HTTP/1.0\r\nContent-Length: 5\r\nUser-Agent: rspamc\r\nFilename: msg.eml\r\n\r\nhello";
    let want = Seen {
        method: "POST".into(),
        target: "/checkv2".into(),
        fields: vec![
            ("content-length".into(), b"5".to_vec()),
            ("user-agent".into(), b"rspamc".to_vec()),
            ("filename".into(), b"msg.eml".to_vec()),
            ("host".into(), b"scanner.example".to_vec()),
        ],
        body: b"hello".to_vec(),
    }
    .sorted();
    for a in attacks().into_iter().filter(|a| a.served) {
        let relay = Mitm::start(gateway.addr, a.request.clone(), a.rechunk, keep());
        let mut bytes = Vec::new();
        let exchange_state = httpcrypt::proto::rspamd::Client::seal_request(
            &mut rand_core::OsRng,
            &server,
            "gw.example",
            inner_req,
            &mut bytes,
        )
        .unwrap();
        let rsp = exchange(relay.addr, &bytes).0;
        assert_eq!(rsp.status, 200, "{}: {rsp:?}", a.name);
        let plain = exchange_state.open_response(&rsp.body).unwrap();
        let answer =
            httpcrypt::proto::rspamd::message::Response::decode(&plain, &Default::default())
                .unwrap();
        assert_eq!(
            (answer.status, answer.body.as_slice()),
            (200, b"upstream ok".as_slice()),
            "{}",
            a.name
        );
        let seen: Vec<Seen> = recorder.take().into_iter().map(Seen::sorted).collect();
        assert_eq!(seen, std::slice::from_ref(&want), "{}", a.name);
    }
}

/// `split-proxy` in front of `serve --public`, the relay between the proxy
/// and the origin (where an untrusted proxy's own additions would come
/// from too): `fetch` gets the whole file, verified, whatever the relay
/// adds, and prints no protocol field.
#[test]
fn split_proxy_path_serves_what_was_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("static")).unwrap();
    let file = common::noise(40_000, 3);
    std::fs::write(root.join("static/a.bin"), &file).unwrap();
    let origin = common::serve(&keys, &root, &["--public", "/static/**"]);
    for a in attacks().into_iter().filter(|a| a.served) {
        let relay = Mitm::start(origin.addr, a.request.clone(), a.rechunk, response_attack());
        let cache = tempfile::tempdir().unwrap();
        let proxy = common::split_proxy(relay.addr, cache.path(), &[]);
        let out = common::fetch(&["-i", &format!("http://{}/static/a.bin", proxy.addr)]);
        assert!(out.status.success(), "{}: {}", a.name, out.stderr_text());
        let end = out.stdout.windows(2).position(|w| w == b"\n\n").unwrap();
        let head = String::from_utf8_lossy(&out.stdout[..end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{}: {head}", a.name);
        for absent in [
            "content-range",
            "ticket:",
            "set-cookie",
            "x-injected",
            "content-encoding",
        ] {
            assert!(!head.contains(absent), "{}: {absent} in {head}", a.name);
        }
        assert!(out.stdout[end + 2..] == file[..], "{}", a.name);
    }
}

/// `fetch -i` through a relay that adds outer response fields: it prints
/// the sealed answer alone, without the server's `Ticket`; the outer
/// request carries only what the network needs, every field the user set
/// travels inside.
#[test]
fn fetch_releases_what_the_server_sealed_and_seals_what_the_user_set() {
    let s = GatewaySetup::new(&[]);
    let relay = Mitm::start(s.gateway.addr, keep(), false, response_attack());
    let out = common::fetch(&[
        "-i",
        "-H",
        "User-Agent: mine/1",
        "-H",
        "Accept: text/plain",
        "-H",
        "Accept-Encoding: identity",
        "-H",
        "Authorization: Bearer secret-token",
        "-H",
        "Cookie: session=mine",
        "-d",
        "data",
        &format!("http://{}/x", relay.addr),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let end = out.stdout.windows(2).position(|w| w == b"\n\n").unwrap();
    let head = String::from_utf8_lossy(&out.stdout[..end]).to_ascii_lowercase();
    let mut names: Vec<&str> = head
        .lines()
        .skip(1)
        .map(|l| l.split(':').next().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["content-length", "content-type", "date", "x-upstream"],
        "{head}"
    );
    assert_eq!(&out.stdout[end + 2..], b"upstream ok");
    let seen = s.recorder.take();
    let upstream: Vec<(&str, &[u8])> = seen[0]
        .fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    for (n, v) in [
        ("user-agent", "mine/1"),
        ("accept", "text/plain"),
        ("accept-encoding", "identity"),
        ("authorization", "Bearer secret-token"),
        ("cookie", "session=mine"),
    ] {
        assert!(
            upstream.contains(&(n, v.as_bytes())),
            "{n} sealed: {upstream:?}"
        );
    }
    // Outside: what the network needs (Host, the key cookie, the body's
    // type and framing), nothing the user set.
    let outer = relay.received();
    let sealed = outer
        .iter()
        .find(|h| h.contains_key(header::COOKIE))
        .expect("a sealed request");
    assert!(sealed.contains_key(header::HOST));
    for n in outer.iter().flat_map(|h| h.keys()) {
        assert!(
            [
                "host",
                "cookie",
                "content-type",
                "content-length",
                "transfer-encoding"
            ]
            .contains(&n.as_str()),
            "outer {n}: {outer:?}"
        );
    }
    let cookie = sealed[header::COOKIE].to_str().unwrap();
    assert!(!cookie.contains("session=mine"), "{cookie}");
}

/// What the axum handler saw: the request and its `OuterFields`.
type AppLog = Arc<Mutex<Vec<(Seen, Option<HeaderMap>)>>>;

/// An axum app behind the layer (mount `/hc`, `config` otherwise) whose
/// handler logs what it receives and answers `app ok` with `X-App`;
/// `profile` is what its certificates announce. Returns its address, the
/// identity key and the log.
async fn axum_app(
    dir: &std::path::Path,
    config: httpcrypt::ServerConfig,
    profile: httpcrypt::proto::Profile,
) -> (SocketAddr, httpcrypt::proto::IdentityPublic, AppLog) {
    use axum::extract::Request as AxumRequest;
    use tower::Layer as _;
    let store = httpcrypt::keys::KeyStore::create(dir, false)
        .unwrap()
        .with_profile(profile);
    let identity = store.identity();
    let keys = httpcrypt::keys::start(store, Duration::from_secs(3600)).unwrap();
    let layer = httpcrypt::HttpCryptLayer::new(
        keys,
        httpcrypt::ServerConfig {
            mount: Mount::new("/hc").unwrap(),
            ..config
        },
    );
    let log: AppLog = Arc::default();
    let handler_log = log.clone();
    let app = axum::Router::new().fallback(move |req: AxumRequest| {
        let log = handler_log.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let outer = parts
                .extensions
                .get::<httpcrypt::OuterFields>()
                .map(|o| o.0.clone());
            log.lock().unwrap().push((
                Seen {
                    method: parts.method.to_string(),
                    target: parts.uri.to_string(),
                    fields: fields_of(&parts.headers),
                    body: body.to_vec(),
                },
                outer,
            ));
            Response::builder()
                .header("x-app", "sealed")
                .header("content-type", "text/plain")
                .body(axum::body::Body::from("app ok"))
                .unwrap()
        }
    });
    let svc = tower::ServiceExt::<AxumRequest>::map_response(layer.layer(app), |r| {
        r.map(axum::body::Body::new)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, tower::make::Shared::new(svc)).await;
    });
    (origin, identity, log)
}

/// The layer in an axum app, reached by the Rust client through the relay:
/// the handler sees the client's fields and nothing the relay added; the
/// allow-listed `X-Forwarded-For` arrives as `OuterFields` only; the
/// client releases the handler's answer and nothing the relay added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_layer_sees_the_sealed_request_and_the_client_the_sealed_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = httpcrypt::ServerConfig {
        pass_outer: vec![HeaderName::from_static("x-forwarded-for")],
        ..Default::default()
    };
    let (origin, identity, log) = axum_app(dir.path(), config, httpcrypt::proto::Profile::V1).await;
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
        mount: Mount::new("/hc").unwrap(),
        identity: Some(identity),
        ..Default::default()
    });
    let user: &[(&str, &str)] = &[
        ("user-agent", "mine/1"),
        ("accept", "text/plain"),
        ("accept-encoding", "identity"),
        ("authorization", "Bearer secret-token"),
        ("cookie", "session=mine"),
        ("x-custom", "sealed"),
    ];
    for a in attacks().into_iter().filter(|a| a.served) {
        let relay = Mitm::start(origin, a.request.clone(), a.rechunk, response_attack());
        let authority = relay.addr.to_string();
        for (method, body) in [("GET", &b""[..]), ("POST", &b"payload"[..])] {
            let what = format!("{} ({method})", a.name);
            let mut req = Request::builder()
                .method(method)
                .uri(format!("http://{authority}/api/items?x=1"));
            for (n, v) in user {
                req = req.header(*n, *v);
            }
            let rsp = client
                .send(req.body(Bytes::from_static(body)).unwrap())
                .await;
            let rsp = rsp.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(rsp.status(), 200, "{what}");
            let mut names: Vec<&str> = rsp.headers().keys().map(|n| n.as_str()).collect();
            names.sort();
            assert_eq!(
                names,
                ["content-length", "content-type", "date", "x-app"],
                "{what}: {:?}",
                rsp.headers()
            );
            let got = rsp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(got, "app ok", "{what}");
            let (seen, outer) = log.lock().unwrap().pop().unwrap();
            let mut want = vec![("host", authority.as_str())];
            want.extend_from_slice(user);
            let mut want: Vec<(String, Vec<u8>)> = want
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect();
            if !body.is_empty() {
                want.push(("content-length".into(), body.len().to_string().into_bytes()));
            }
            let want = Seen {
                method: method.into(),
                target: "/api/items?x=1".into(),
                fields: want,
                body: body.to_vec(),
            };
            assert_eq!(seen.sorted(), want.sorted(), "{what}");
            let outer = outer.expect("OuterFields when an allow-list is configured");
            let xff: Vec<&[u8]> = outer
                .get_all("x-forwarded-for")
                .iter()
                .map(|v| v.as_bytes())
                .collect();
            let injected: &[&[u8]] = if a.name == "inject every class" {
                &[b"6.6.6.6"]
            } else {
                &[]
            };
            assert_eq!(xff, injected, "{what}");
            assert_eq!(outer.len(), xff.len(), "{what}: {outer:?}");
        }
    }
}

/// The inner `Ticket` is the server's alone (an upstream's own `Ticket`
/// and `Random` fields are dropped), and the Rust client consumes it:
/// `fetch -i` never prints it.
#[test]
fn the_inner_ticket_is_in_the_sealed_answer_but_not_released() {
    let s = GatewaySetup::new(&[]);
    let certs = common::certs(s.gateway.addr, &Mount::default());
    let sealed = Sealed::new(&certs, None, &Mount::default());
    let rsp = send(
        &sealed,
        s.gateway.addr,
        false,
        "GET",
        "/t",
        &[("Host", "a")],
        b"",
    );
    let (head, _): (ResponseHead, _) = sealed.open(&rsp);
    let tickets: Vec<&Field> = head.fields.iter().filter(|f| f.is("ticket")).collect();
    assert_eq!(tickets.len(), 1, "the server's ticket alone: {head:?}");
    httpcrypt::proto::ticket::Ticket::from_field(&tickets[0].value).unwrap();
    assert!(inner::field(&head.fields, "random").is_none(), "{head:?}");
    let out = common::fetch(&["-i", &format!("http://{}/t", s.gateway.addr)]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(!text.contains("\nticket:"), "{text}");
}

/// Profile 2 binds the outer `Host` (spec §4.5): the Rust client seals
/// none, so the handler gets the bound one; a relay that changes it breaks
/// the request (`integrity`), and the handler sees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_host_reaches_the_service_and_a_changed_one_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = httpcrypt::ServerConfig {
        authority: Some(HeaderValue::from_static("configured.example")),
        ..Default::default()
    };
    let (origin, identity, log) =
        axum_app(dir.path(), config, httpcrypt::proto::Profile::Compact).await;
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
        mount: Mount::new("/hc").unwrap(),
        identity: Some(identity),
        compact: true,
        ..Default::default()
    });
    let relay = Mitm::start(origin, keep(), false, keep());
    let get = |authority: String| {
        Request::get(format!("http://{authority}/p"))
            .body(Bytes::new())
            .unwrap()
    };
    let rsp = client.send(get(relay.addr.to_string())).await.unwrap();
    assert_eq!(rsp.status(), 200);
    let (seen, _) = log.lock().unwrap().pop().unwrap();
    let host: Vec<&[u8]> = seen
        .fields
        .iter()
        .filter(|(n, _)| n == "host")
        .map(|(_, v)| v.as_slice())
        .collect();
    assert_eq!(host, [relay.addr.to_string().as_bytes()], "{seen:?}");

    let evil = Mitm::start(
        origin,
        Arc::new(|h: &mut HeaderMap| set(h, "host", "evil.example")),
        false,
        keep(),
    );
    // The server's sealed inner 500 `integrity` (spec §4.4).
    let failed = client.send(get(evil.addr.to_string())).await.unwrap();
    assert_eq!(failed.status(), 500);
    let body = failed.into_body().collect().await.unwrap().to_bytes();
    let problem = httpcrypt::proto::outer::parse_problem(&body).unwrap();
    assert_eq!(problem.type_uri, "urn:httpcrypt:integrity");
    assert!(log.lock().unwrap().is_empty(), "the handler saw a request");
}
