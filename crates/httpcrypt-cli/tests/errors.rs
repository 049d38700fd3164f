//! Every error status of spec §4.4, §11 and §12 over real sockets, against
//! the `httpcrypt serve` and `httpcrypt gateway` binaries. Requests are
//! written byte by byte by the test (hostile input is the point); sealed
//! ones are built with the sans-IO core and their sealed answers opened
//! with the request's key.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use common::{certs, chunked, closes_within, connect, exchange, read_response, wire, Proc, Sealed};
use httpcrypt::clock::unix_now;
use httpcrypt::proto::cert::KeyCert;
use httpcrypt::proto::outer::Mount;
use httpcrypt::proto::{b64, Error, IdentityPublic};
use rand_core::{OsRng, RngCore};

const MALFORMED: &str = "urn:httpcrypt:malformed";
const UNKNOWN_KEY: &str = "urn:httpcrypt:unknown-key";
const TOO_LARGE: &str = "urn:httpcrypt:too-large";
const INTEGRITY: &str = "urn:httpcrypt:integrity";
const REPLAY: &str = "urn:httpcrypt:replay";
const STALE: &str = "urn:httpcrypt:stale";

const FILE: &[u8] = b"hello from a static file\n";

/// `httpcrypt serve --mount /hc` on fresh keys with one file, `/a.txt`.
struct Site {
    _dir: tempfile::TempDir,
    server: Proc,
    mount: Mount,
    identity: IdentityPublic,
    host: String,
}

impl Site {
    fn new(extra: &[&str]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), FILE).unwrap();
        let identity = IdentityPublic::from_b64(&common::keygen(&keys, false)).unwrap();
        let mut args = vec!["--mount", "/hc"];
        args.extend_from_slice(extra);
        let server = common::serve(&keys, &root, &args);
        let host = server.addr.to_string();
        Site {
            _dir: dir,
            server,
            mount: Mount::new("/hc").unwrap(),
            identity,
            host,
        }
    }

    fn certs(&self) -> Vec<KeyCert> {
        let c = certs(self.server.addr, &self.mount);
        for cert in &c {
            cert.verify(&self.identity).unwrap();
        }
        c
    }

    fn sealed(&self) -> Sealed {
        Sealed::new(&self.certs(), Some(&self.identity), &self.mount)
    }

    fn send(&self, bytes: &[u8]) -> common::RawResponse {
        exchange(self.server.addr, bytes).0
    }
}

/// An outer problem: status, type, and the core's title for `code`.
fn assert_outer(rsp: &common::RawResponse, status: u16, type_uri: &str, code: Error) {
    assert_eq!(rsp.status, status, "{rsp:?}");
    let p = rsp.problem();
    assert_eq!(p.type_uri, type_uri, "{rsp:?}");
    assert_eq!(p.status, status);
    assert_eq!(rsp.title(), code.to_string(), "which check fired: {rsp:?}");
}

fn random_b64(n: usize) -> String {
    let mut b = vec![0u8; n];
    OsRng.fill_bytes(&mut b);
    b64::encode(&b)
}

#[test]
fn routing_outside_and_under_the_mount() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    // Outside the mount: plain 404, never an HTTPCrypt error (spec §11.1, D16).
    let rsp = site.send(&wire("GET", "/a.txt", &[("Host", host)], b""));
    assert_eq!(rsp.status, 404);
    assert_ne!(rsp.header("content-type"), Some("application/problem+json"));
    let rsp = site.send(&wire("POST", "/other/x", &[("Host", host)], b""));
    assert_eq!(rsp.status, 404);
    // Under the mount, a method other than GET, POST, OPTIONS: 405 with Allow.
    let path = format!("/hc/{}", random_b64(24));
    for method in ["PUT", "DELETE", "PATCH"] {
        let rsp = site.send(&wire(
            method,
            &path,
            &[("Host", host), ("Content-Length", "0")],
            b"",
        ));
        assert_eq!(rsp.status, 405, "{method}");
        assert_eq!(rsp.header("allow"), Some("GET, POST, OPTIONS"));
    }
    // OPTIONS anywhere but {mount}/ is 404 (D4); at {mount}/ the signed list.
    let rsp = site.send(&wire("OPTIONS", &path, &[("Host", host)], b""));
    assert_eq!(rsp.status, 404);
    assert!(!site.certs().is_empty());
}

#[test]
fn malformed_outer_requests_are_400_malformed() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let s = site.sealed();
    let stream = s.stream("GET", "/a.txt", unix_now(), b"");
    let len = stream.len().to_string();
    let post = |target: &str, fields: &[(&str, &str)]| wire("POST", target, fields, &stream);

    // The well-formed request works, so each case below fails for one reason.
    let (head, body) = s.open(&site.send(&s.post(host, &stream)));
    assert_eq!((head.status, body.as_slice()), (200, FILE));

    // Missing Host.
    let rsp = site.send(&post(
        &s.path(),
        &[("Cookie", s.cookie()), ("Content-Length", &len)],
    ));
    assert_outer(&rsp, 400, MALFORMED, Error::BadHost);
    // Nonce path: too short, non-canonical, one level too deep. The nonce
    // must not start with `2`: `/hc/2{32 characters}` is a profile-2 path.
    let nonce = format!("A{}", &random_b64(24)[1..]);
    for bad in [
        "/hc/short".to_string(),
        format!("/hc/{}+", &nonce[..31]),
        format!("/hc/{}=", &nonce[..31]),
        format!("/hc/{nonce}A"),
        format!("{}/x", s.path()),
    ] {
        let rsp = site.send(&post(
            &bad,
            &[
                ("Host", host),
                ("Cookie", s.cookie()),
                ("Content-Length", &len),
            ],
        ));
        assert_outer(&rsp, 400, MALFORMED, Error::BadNoncePath);
    }
    // No cookie at all, and cookies without the HTTPCrypt shape.
    for fields in [
        vec![("Host", host), ("Content-Length", &len)],
        vec![
            ("Host", host),
            ("Cookie", "session=abc; theme=dark"),
            ("Content-Length", &len),
        ],
    ] {
        let rsp = site.send(&post(&s.path(), &fields));
        assert_outer(&rsp, 400, MALFORMED, Error::NoCookie);
    }
    // A cookie naming the server's kid whose value is not a key: bad_cookie.
    let kid = s.cookie()[..14].to_string();
    for value in [
        format!("{kid}=!!!notbase64!!!"),
        format!("{kid}={}", &random_b64(32)[..42]),
        format!("{kid}{}={}", "A".repeat(17), random_b64(32)),
    ] {
        let rsp = site.send(&post(
            &s.path(),
            &[("Host", host), ("Cookie", &value), ("Content-Length", &len)],
        ));
        assert_outer(&rsp, 400, MALFORMED, Error::BadCookie);
    }
    // GET form: no query, a query that is not canonical base64url, a body.
    let get = |target: &str, extra: &[(&str, &str)], body: &[u8]| {
        let mut f = vec![("Host", host), ("Cookie", s.cookie())];
        f.extend_from_slice(extra);
        site.send(&wire("GET", target, &f, body))
    };
    let query = b64::encode(&stream);
    for target in [
        s.path(),
        format!("{}?{}=", s.path(), query),
        format!("{}?{}&x=1", s.path(), query),
        format!("{}?***", s.path()),
    ] {
        assert_outer(&get(&target, &[], b""), 400, MALFORMED, Error::BadQuery);
    }
    let target = format!("{}?{}", s.path(), query);
    let rsp = get(&target, &[("Content-Length", "5")], b"hello");
    assert_outer(&rsp, 400, MALFORMED, Error::BadQuery);
    let rsp = get(
        &target,
        &[("Transfer-Encoding", "chunked")],
        &chunked(b"hello", 5),
    );
    assert_outer(&rsp, 400, MALFORMED, Error::BadQuery);
    // The GET form without a body is fine (a new nonce: the POST above was
    // this one's first use, so it would be a replay).
    let s = site.sealed();
    let target = format!(
        "{}?{}",
        s.path(),
        b64::encode(&s.stream("GET", "/a.txt", unix_now(), b""))
    );
    let rsp = site.send(&wire(
        "GET",
        &target,
        &[("Host", host), ("Cookie", s.cookie())],
        b"",
    ));
    let (head, body) = s.open(&rsp);
    assert_eq!((head.status, body.as_slice()), (200, FILE));
}

#[test]
fn unknown_key_lists_certificates_the_client_can_use() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    // A cookie of the HTTPCrypt shape naming no key the server holds.
    let cookie = format!("{}={}", random_b64(10), random_b64(32));
    let s = site.sealed();
    let stream = s.stream("GET", "/a.txt", unix_now(), b"");
    let len = stream.len().to_string();
    let rsp = site.send(&wire(
        "POST",
        &s.path(),
        &[
            ("Host", host),
            ("Cookie", &cookie),
            ("Content-Length", &len),
        ],
        &stream,
    ));
    assert_outer(&rsp, 400, UNKNOWN_KEY, Error::UnknownKey);
    let p = rsp.problem();
    assert!(!p.certs.is_empty(), "unknown-key carries certs: {rsp:?}");
    let listed: Vec<KeyCert> = p
        .certs
        .iter()
        .map(|l| KeyCert::from_text(l).unwrap())
        .collect();
    assert!(
        listed.windows(2).all(|w| w[0].serial >= w[1].serial),
        "highest serial first"
    );
    // The listed certificates verify and are enough for a working request.
    let s = Sealed::new(&listed, Some(&site.identity), &site.mount);
    let stream = s.stream("GET", "/a.txt", unix_now(), b"");
    let (head, body) = s.open(&site.send(&s.post(host, &stream)));
    assert_eq!((head.status, body.as_slice()), (200, FILE));
}

#[test]
fn too_large_is_refused_before_the_body_is_read() {
    let site = Site::new(&["--max-body", "1048576"]);
    let s = site.sealed();
    // Content-Length above the limit: 413 while the body has not been sent.
    let mut conn = connect(site.server.addr);
    let head = wire(
        "POST",
        &s.path(),
        &[
            ("Host", &site.host),
            ("Cookie", s.cookie()),
            ("Content-Length", "1048577"),
        ],
        b"",
    );
    conn.write_all(&head).unwrap();
    let mut r = BufReader::new(conn);
    let rsp = read_response(&mut r).expect("413 before any body byte");
    assert_outer(&rsp, 413, TOO_LARGE, Error::BodyTooLarge);
    // The default limit is 16 MiB (spec §11.6).
    let site = Site::new(&[]);
    let s = site.sealed();
    let rsp = site.send(&wire(
        "POST",
        &s.path(),
        &[
            ("Host", &site.host),
            ("Cookie", s.cookie()),
            ("Content-Length", &((16 << 20) + 1).to_string()),
        ],
        b"",
    ));
    assert_outer(&rsp, 413, TOO_LARGE, Error::BodyTooLarge);
    // A GET-form query whose decoded size is above the limit (D22).
    let site = Site::new(&["--max-body", "4096"]);
    let s = site.sealed();
    let target = format!("{}?{}", s.path(), "A".repeat(4096 / 3 * 4 + 4));
    let rsp = site.send(&wire(
        "GET",
        &target,
        &[("Host", &site.host), ("Cookie", s.cookie())],
        b"",
    ));
    assert_outer(&rsp, 413, TOO_LARGE, Error::BodyTooLarge);
}

#[test]
fn chunked_body_above_the_limit_is_413() {
    // The gateway reads the body (its upstream consumes it), so the limit
    // trips mid-stream; the answer is still the outer 413 problem.
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let up = common::upstream();
    let gw = common::gateway(&keys, up.addr, &["--max-body", "1048576"]);
    let mount = Mount::default();
    let s = Sealed::new(&certs(gw.addr, &mount), None, &mount);
    let body = common::noise(2 << 20, 1);
    let stream = s.stream("POST", "/sink", unix_now(), &body);
    let host = gw.addr.to_string();
    let head = wire(
        "POST",
        &s.path(),
        &[
            ("Host", &host),
            ("Cookie", s.cookie()),
            ("Transfer-Encoding", "chunked"),
        ],
        b"",
    );
    let conn = connect(gw.addr);
    let mut writer = conn.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&head);
        let _ = writer.write_all(&chunked(&stream, 60_000));
    });
    let mut r = BufReader::new(conn);
    let rsp = read_response(&mut r).expect("a response");
    assert_outer(&rsp, 413, TOO_LARGE, Error::BodyTooLarge);
    drop(r);
    sender.join().unwrap();
    // Below the limit the same route works, chunked too.
    let s = Sealed::new(&certs(gw.addr, &mount), None, &mount);
    let small = common::noise(500_000, 2);
    let stream = s.stream("POST", "/sink", unix_now(), &small);
    let rsp = exchange(
        gw.addr,
        &wire(
            "POST",
            &s.path(),
            &[
                ("Host", &host),
                ("Cookie", s.cookie()),
                ("Transfer-Encoding", "chunked"),
            ],
            &chunked(&stream, 7000),
        ),
    )
    .0;
    let (head, answer) = s.open(&rsp);
    assert_eq!(head.status, 200);
    assert_eq!(
        String::from_utf8(answer).unwrap(),
        format!("{} {}", small.len(), common::sha256(&small))
    );
}

#[test]
fn huge_request_line_is_414_and_huge_header_section_431() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let nonce = random_b64(24);
    // Request line over 16 KiB: 414, inside or outside the mount.
    for target in [
        format!("/hc/{nonce}?{}", "A".repeat(17 * 1024)),
        format!("/x/{}", "a".repeat(17 * 1024)),
    ] {
        let (rsp, mut r) = exchange(
            site.server.addr,
            &wire("GET", &target, &[("Host", host)], b""),
        );
        assert_eq!(rsp.status, 414, "{target:.20}…: {rsp:?}");
        assert!(closes_within(&mut r, Duration::from_secs(5)));
    }
    // Just below the limit the line is judged by the protocol, not refused.
    let target = format!("/hc/{nonce}?{}", "A".repeat(16 * 1024 - 100));
    let rsp = site.send(&wire("GET", &target, &[("Host", host)], b""));
    assert_eq!(rsp.status, 400, "{rsp:?}");
    // Header section over 64 KiB: 431, in many fields or one.
    let many: Vec<(String, String)> = (0..80)
        .map(|i| (format!("X-Filler-{i}"), "v".repeat(1000)))
        .collect();
    let mut fields: Vec<(&str, &str)> = vec![("Host", host)];
    fields.extend(many.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let big = "v".repeat(70 * 1024);
    for fields in [fields, vec![("Host", host), ("X-Big", big.as_str())]] {
        let (rsp, mut r) = exchange(site.server.addr, &wire("GET", "/hc/", &fields, b""));
        assert_eq!(rsp.status, 431, "{rsp:?}");
        assert!(closes_within(&mut r, Duration::from_secs(5)));
    }
    // Far beyond any limit hyper refuses by itself (431: it stops buffering).
    let target = format!("/hc/{nonce}?{}", "A".repeat(200 * 1024));
    let (rsp, _) = exchange(
        site.server.addr,
        &wire("GET", &target, &[("Host", host)], b""),
    );
    assert!(matches!(rsp.status, 414 | 431), "{rsp:?}");
}

#[test]
fn transfer_codings_and_conflicting_framing() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let s = site.sealed();
    // A coding other than chunked, behind chunked: 501, connection closed.
    let stream = s.stream("GET", "/a.txt", unix_now(), b"");
    let rsp = exchange(
        site.server.addr,
        &wire(
            "POST",
            &s.path(),
            &[
                ("Host", host),
                ("Cookie", s.cookie()),
                ("Transfer-Encoding", "gzip, chunked"),
            ],
            &chunked(&stream, 100),
        ),
    );
    assert_eq!(rsp.0.status, 501, "{:?}", rsp.0);
    let mut r = rsp.1;
    assert!(closes_within(&mut r, Duration::from_secs(5)));
    // A coding alone (the body length is then unknowable): hyper answers 400
    // and closes before the service runs. The spec asks for 501 (§11.6);
    // hyper gives no hook for it (see the milestone report).
    let s = site.sealed();
    let (rsp, mut r) = exchange(
        site.server.addr,
        &wire(
            "POST",
            &s.path(),
            &[
                ("Host", host),
                ("Cookie", s.cookie()),
                ("Transfer-Encoding", "gzip"),
            ],
            b"xxxx",
        ),
    );
    assert!(matches!(rsp.status, 400 | 501), "{rsp:?}");
    assert!(closes_within(&mut r, Duration::from_secs(5)));
    // Bad chunk syntax: 400 and the connection is closed.
    let s = site.sealed();
    let (rsp, mut r) = exchange(
        site.server.addr,
        &wire(
            "POST",
            &s.path(),
            &[
                ("Host", host),
                ("Cookie", s.cookie()),
                ("Transfer-Encoding", "chunked"),
            ],
            b"zz\r\nhello\r\n0\r\n\r\n",
        ),
    );
    assert_eq!(rsp.status, 400, "{rsp:?}");
    assert!(closes_within(&mut r, Duration::from_secs(5)));
}

#[test]
fn content_length_with_transfer_encoding_closes_the_connection() {
    // Both framings (the request-smuggling shape), in both orders. hyper
    // frames by chunked, as RFC 9112 §6.3 says, and closes the connection
    // after answering, so the bytes the other reading would take for a
    // second request are never served. Spec §11.6 also wants status 400,
    // which hyper does not let the layer see (see the milestone report).
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let smuggled = wire("GET", "/smuggled", &[("Host", host)], b"");
    for te_first in [false, true] {
        let s = site.sealed();
        let stream = s.stream("GET", "/a.txt", unix_now(), b"");
        let body = chunked(&stream, 64);
        let cl = body.len().to_string();
        let mut fields = vec![("Host", host), ("Cookie", s.cookie())];
        let framing = [
            ("Transfer-Encoding", "chunked"),
            ("Content-Length", cl.as_str()),
        ];
        if te_first {
            fields.extend(framing);
        } else {
            fields.extend(framing.iter().rev());
        }
        let mut bytes = wire("POST", &s.path(), &fields, &body);
        bytes.extend_from_slice(&smuggled);
        let (rsp, mut r) = exchange(site.server.addr, &bytes);
        assert!(matches!(rsp.status, 200 | 400), "{rsp:?}");
        assert_eq!(rsp.header("connection"), Some("close"), "{rsp:?}");
        assert!(
            closes_within(&mut r, Duration::from_secs(5)),
            "closed after the answer, the pipelined request unanswered"
        );
    }
}

#[test]
fn a_get_stream_is_judged_whole_before_the_service_runs() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let head = format!(
        "GET /a.txt HTTP/1.1\r\nDate: {}\r\n\r\n",
        httpcrypt::proto::replay::format_date(unix_now())
    );
    // The inner head in a record of its own, then the FINAL record: served.
    let s = site.sealed();
    let mut whole = Vec::new();
    let mut sealer = s.prepared.sealer();
    sealer.seal(head.as_bytes(), &mut whole).unwrap();
    sealer.finish(b"", &mut whole).unwrap();
    let (inner, _) = s.open(&site.send(&s.get(host, &whole)));
    assert_eq!(inner.status, 200);
    // The same without its FINAL record: `truncated`, though the file
    // service answering the GET never reads a body (§11.4).
    let s = site.sealed();
    let mut cut = Vec::new();
    s.prepared.sealer().seal(head.as_bytes(), &mut cut).unwrap();
    let (status, _, title) = s.open_problem(&site.send(&s.get(host, &cut)));
    assert_eq!((status, title), (500, Error::Truncated.to_string()));
    // A body shorter than the head's Content-Length: judged as well.
    let s = site.sealed();
    let short = s.stream_of(
        format!(
            "GET /a.txt HTTP/1.1\r\nDate: {}\r\nContent-Length: 5\r\n\r\nab",
            httpcrypt::proto::replay::format_date(unix_now())
        )
        .as_bytes(),
    );
    let (status, _, title) = s.open_problem(&site.send(&s.get(host, &short)));
    let p = Error::ContentLengthMismatch.problem().unwrap();
    assert_eq!(
        (status, title),
        (p.status, Error::ContentLengthMismatch.to_string())
    );
}

#[test]
fn inner_errors_are_sealed_inside_a_200() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let now = unix_now();
    let send = |s: &Sealed, stream: &[u8]| s.open_problem(&site.send(&s.post(host, stream)));

    // One changed bit in the (one-record) stream: the header is part of the
    // tag's input, so any change is an integrity failure, except that the
    // header is judged first (§11.2): a CLEAR bit, an oversize length.
    let len = site.sealed().stream("GET", "/a.txt", now, b"").len();
    for (at, bit, expect) in [
        (0, 0x80, Error::Integrity),
        (0, 0x40, Error::ClearInRequest),
        (0, 0x01, Error::RecordTooLarge),
        (10, 0x01, Error::Integrity),
        (30, 0x10, Error::Integrity),
        (len - 1, 0x01, Error::Integrity),
    ] {
        let s = site.sealed();
        let mut stream = s.stream("GET", "/a.txt", now, b"");
        stream[at] ^= bit;
        let (status, ty, title) = send(&s, &stream);
        let p = expect.problem().unwrap();
        assert_eq!(
            (status, ty.as_str(), title.as_str()),
            (p.status, p.type_uri, expect.to_string().as_str()),
            "byte {at} bit {bit:#x}"
        );
    }
    // Truncated: the record cut short; and a head split over records whose
    // stream ends before any FINAL record. The stream is judged before the
    // inner parse (§11.4), so neither is `malformed_inner`.
    let s = site.sealed();
    let stream = s.stream("GET", "/a.txt", now, b"");
    let (status, ty, title) = send(&s, &stream[..stream.len() - 5]);
    assert_eq!((status, ty.as_str()), (500, INTEGRITY));
    assert_eq!(title, Error::Truncated.to_string());
    let s = site.sealed();
    let mut partial = Vec::new();
    let mut sealer = s.prepared.sealer();
    sealer
        .seal(b"GET /a.txt HTTP/1.1\r\n", &mut partial)
        .unwrap();
    sealer.seal(b"Date: ", &mut partial).unwrap();
    let (status, ty, title) = send(&s, &partial);
    assert_eq!((status, ty.as_str()), (500, INTEGRITY));
    assert_eq!(title, Error::Truncated.to_string());
    // An empty body is an empty stream: truncated as well.
    let s = site.sealed();
    let (status, _, title) = send(&s, b"");
    assert_eq!((status, title), (500, Error::Truncated.to_string()));
    // Trailing data after the FINAL record.
    let s = site.sealed();
    let mut stream = s.stream("GET", "/a.txt", now, b"");
    stream.extend_from_slice(b"\x00\x00\x00\x00extra");
    let (status, ty, title) = send(&s, &stream);
    assert_eq!((status, ty.as_str()), (500, INTEGRITY));
    assert_eq!(title, Error::TrailingData.to_string());
    // Sealed plaintext that is not a well-formed inner request.
    let date = httpcrypt::proto::replay::format_date(now);
    for (plaintext, expect) in [
        (
            "this is not HTTP\r\n\r\n".to_string(),
            Error::MalformedInner,
        ),
        (
            format!("GET /a.txt HTTP/1.0\r\nDate: {date}\r\n\r\n"),
            Error::MalformedInner,
        ),
        (
            format!("GET /a.txt HTTP/1.1\r\nDate: {date}\r\nno colon\r\n\r\n"),
            Error::MalformedInner,
        ),
        (
            format!("GET /a.txt HTTP/1.1\r\nDate: {date}\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Error::ForbiddenHeader,
        ),
        (
            "GET /a.txt HTTP/1.1\r\nDate: yesterday\r\n\r\n".to_string(),
            Error::BadDate,
        ),
    ] {
        let s = site.sealed();
        let (status, ty, title) = send(&s, &s.stream_of(plaintext.as_bytes()));
        assert_eq!(
            (status, ty.as_str(), title.as_str()),
            (400, MALFORMED, expect.to_string().as_str()),
            "{plaintext:?}"
        );
    }
}

#[test]
fn body_errors_behind_the_head_are_sealed_too() {
    // The gateway's upstream reads the whole body, so a failure in a later
    // record surfaces while the request is being forwarded; the answer is
    // still the sealed inner problem, not a dropped connection.
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let up = common::upstream();
    let gw = common::gateway(&keys, up.addr, &[]);
    let host = gw.addr.to_string();
    let mount = Mount::default();
    let body = common::noise(100_000, 5);
    let sealed = || Sealed::new(&certs(gw.addr, &mount), None, &mount);
    let send =
        |s: &Sealed, stream: &[u8]| s.open_problem(&exchange(gw.addr, &s.post(&host, stream)).0);
    let record = 16 * 1024 + 20;

    // Intact, the body arrives whole.
    let s = sealed();
    let rsp = exchange(
        gw.addr,
        &s.post(&host, &s.stream("POST", "/sink", unix_now(), &body)),
    )
    .0;
    let (head, answer) = s.open(&rsp);
    assert_eq!(head.status, 200);
    assert_eq!(
        String::from_utf8(answer).unwrap(),
        format!("{} {}", body.len(), common::sha256(&body))
    );
    // A flipped bit in the third record.
    let s = sealed();
    let mut stream = s.stream("POST", "/sink", unix_now(), &body);
    stream[2 * record + 100] ^= 4;
    let (status, ty, title) = send(&s, &stream);
    assert_eq!(
        (status, ty.as_str(), title),
        (500, INTEGRITY, Error::Integrity.to_string())
    );
    // Cut after four whole records: no FINAL record.
    let s = sealed();
    let stream = s.stream("POST", "/sink", unix_now(), &body);
    let (status, ty, title) = send(&s, &stream[..4 * record]);
    assert_eq!(
        (status, ty.as_str(), title),
        (500, INTEGRITY, Error::Truncated.to_string())
    );
    // Bytes after the FINAL record.
    let s = sealed();
    let mut stream = s.stream("POST", "/sink", unix_now(), &body);
    stream.extend_from_slice(&[0u8; 30]);
    let (status, ty, title) = send(&s, &stream);
    assert_eq!(
        (status, ty.as_str(), title),
        (500, INTEGRITY, Error::TrailingData.to_string())
    );
    // A body longer than its inner Content-Length.
    let s = sealed();
    let mut plaintext = format!(
        "POST /sink HTTP/1.1\r\nDate: {}\r\nContent-Length: 50000\r\n\r\n",
        httpcrypt::proto::replay::format_date(unix_now())
    )
    .into_bytes();
    plaintext.extend_from_slice(&body);
    let (status, ty, title) = send(&s, &s.stream_of(&plaintext));
    assert_eq!(
        (status, ty.as_str(), title),
        (400, MALFORMED, Error::ContentLengthMismatch.to_string())
    );
}

#[test]
fn replayed_and_stale_requests_are_425_inside() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let s = site.sealed();
    let request = s.post(host, &s.stream("GET", "/a.txt", unix_now(), b""));
    let (head, body) = s.open(&site.send(&request));
    assert_eq!((head.status, body.as_slice()), (200, FILE));
    // The same bytes again, on a new connection: replay, sealed.
    let (status, ty, title) = s.open_problem(&site.send(&request));
    assert_eq!((status, ty.as_str()), (425, REPLAY));
    assert_eq!(title, Error::Replay.to_string());
    // A Date an hour off (either way): stale, with the server's Date inside.
    for offset in [-3600i64, 3600] {
        let s = site.sealed();
        let date = unix_now().saturating_add_signed(offset);
        let rsp = site.send(&s.post(host, &s.stream("GET", "/a.txt", date, b"")));
        let (status, ty, title) = s.open_problem(&rsp);
        assert_eq!((status, ty.as_str()), (425, STALE));
        assert_eq!(title, Error::Stale.to_string());
        let (head, _) = s.open(&rsp);
        let server_date = httpcrypt::proto::replay::check_date(
            httpcrypt::proto::inner::field(&head.fields, "date"),
            unix_now(),
            5,
        )
        .expect("the inner Date is the server's clock");
        assert!(server_date.abs_diff(unix_now()) <= 5);
    }
    // Within the window (W = 60 s) the Date passes.
    let s = site.sealed();
    let rsp = site.send(&s.post(host, &s.stream("GET", "/a.txt", unix_now() - 30, b"")));
    assert_eq!(s.open(&rsp).0.status, 200);
}

#[test]
fn idle_half_header_is_disconnected_by_the_header_timeout() {
    let site = Site::new(&["--header-timeout", "2", "--body-timeout", "2"]);
    // Half a request head, then silence: the connection is closed.
    let mut conn = connect(site.server.addr);
    conn.write_all(b"GET /hc/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Partial: ")
        .unwrap();
    let start = Instant::now();
    let mut r = BufReader::new(conn);
    let closed = closes_within(&mut r, Duration::from_secs(15));
    let waited = start.elapsed();
    eprintln!("half header: connection closed after {waited:.2?} (timeout 2 s)");
    assert!(closed, "the server keeps an idle half header open");
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    // A body that stalls inside the inner head (which spans two records):
    // 408 after the body timeout, then closed.
    let s = site.sealed();
    let stream = s.stream_of(
        format!(
            "GET /a.txt HTTP/1.1\r\nDate: {}\r\nX-Pad: {}\r\n\r\n",
            httpcrypt::proto::replay::format_date(unix_now()),
            "p".repeat(30_000)
        )
        .as_bytes(),
    );
    let full = s.post(&site.host, &stream);
    let mut conn = connect(site.server.addr);
    conn.write_all(&full[..full.len() - 10_000]).unwrap();
    let start = Instant::now();
    let mut r = BufReader::new(conn);
    let rsp = read_response(&mut r).expect("an answer to the stalled body");
    let waited = start.elapsed();
    eprintln!(
        "stalled body: {} after {waited:.2?} (timeout 2 s)",
        rsp.status
    );
    assert_eq!(rsp.status, 408, "{rsp:?}");
    assert!(waited >= Duration::from_millis(1500) && waited < Duration::from_secs(8));
    assert!(closes_within(&mut r, Duration::from_secs(5)));
}

/// A relay that flips one bit of the server's traffic `at` bytes into each
/// connection (a sealed body's byte, for a large answer).
fn corrupting_relay(target: std::net::SocketAddr, at: usize) -> std::net::SocketAddr {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        // Bounded: the test opens a few connections.
        for conn in listener.incoming().take(16) {
            let Ok(client) = conn else { continue };
            let Ok(server) = TcpStream::connect(target) else {
                continue;
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = 0;
                while let Ok(n) = s_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if (seen..seen + n).contains(&at) {
                        buf[at - seen] ^= 0x01;
                    }
                    seen += n;
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}

/// Names in `dir` other than `keep`.
fn others(dir: &std::path::Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

/// `fetch -o FILE` whose answer fails its integrity check
/// part-way exits non-zero and leaves no FILE (and an existing FILE as it
/// was), nor a temporary file; a clean answer becomes FILE.
#[test]
fn fetch_output_appears_only_after_the_stream_verified() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = common::noise(1 << 20, 21);
    std::fs::write(root.join("big.bin"), &file).unwrap();
    let server = common::serve(&keys, &root, &[]);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let dest = out_dir.join("big.bin");
    let dest_s = dest.to_str().unwrap();

    let relay = corrupting_relay(server.addr, 300_000);
    let via_relay = format!("http://{relay}/big.bin");
    let out = common::fetch(&["--no-get-form", "-o", dest_s, &via_relay]);
    assert!(!out.status.success(), "a corrupted answer must fail");
    assert!(
        out.stderr_text().contains("integrity"),
        "{}",
        out.stderr_text()
    );
    assert!(!dest.exists(), "a partial body was left in FILE");
    assert_eq!(others(&out_dir, &[]), Vec::<String>::new());

    // An existing FILE stays as it was.
    std::fs::write(&dest, b"the old content\n").unwrap();
    let out = common::fetch(&["-o", dest_s, &via_relay]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&dest).unwrap(), b"the old content\n");
    assert_eq!(others(&out_dir, &["big.bin"]), Vec::<String>::new());

    // Straight from the server: FILE holds the body, nothing else is left.
    let direct = format!("http://{}/big.bin", server.addr);
    let out = common::fetch(&["-o", dest_s, &direct]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(std::fs::read(&dest).unwrap() == file);
    assert_eq!(others(&out_dir, &["big.bin"]), Vec::<String>::new());
    // A FILE that is not a regular file is written directly.
    let out = common::fetch(&["-o", "/dev/null", &direct]);
    assert!(out.status.success(), "{}", out.stderr_text());
}

/// Erratum E2 for inner problems: a stale or replayed HEAD gets its 425
/// with the problem's `Content-Type`, `Date` and length but no body, so a
/// client that decodes the answer to HEAD as bodiless reads it; a GET gets
/// the document.
#[test]
fn a_problem_in_answer_to_head_has_no_body() {
    let site = Site::new(&[]);
    let host = site.host.as_str();
    let s = site.sealed();
    let stale = unix_now() - 3600;
    let rsp = site.send(&s.post(host, &s.stream("HEAD", "/a.txt", stale, b"")));
    let (head, body) = s
        .prepared
        .open_response_to("HEAD", &rsp.body, &httpcrypt::proto::Limits::default())
        .unwrap();
    assert_eq!(head.status, 425);
    let field = |n| httpcrypt::proto::inner::field(&head.fields, n);
    assert_eq!(
        field("content-type"),
        Some(httpcrypt::proto::outer::PROBLEM_TYPE.as_bytes())
    );
    assert!(field("date").is_some());
    let length: usize = std::str::from_utf8(field("content-length").unwrap())
        .unwrap()
        .parse()
        .unwrap();
    assert!(length > 0 && body.is_empty(), "{length} {body:?}");
    // The same request as a GET: the document, of that length.
    let s = site.sealed();
    let rsp = site.send(&s.post(host, &s.stream("GET", "/a.txt", stale, b"")));
    let (status, ty, _) = s.open_problem(&rsp);
    assert_eq!((status, ty.as_str()), (425, STALE));
    assert_eq!(s.open(&rsp).1.len(), length);
    // A HEAD within the window: the file's length, no body.
    let s = site.sealed();
    let rsp = site.send(&s.post(host, &s.stream("HEAD", "/a.txt", unix_now(), b"")));
    let (head, body) = s
        .prepared
        .open_response_to("HEAD", &rsp.body, &httpcrypt::proto::Limits::default())
        .unwrap();
    assert_eq!(head.status, 200);
    let cl = httpcrypt::proto::inner::field(&head.fields, "content-length");
    assert_eq!(cl, Some(FILE.len().to_string().as_bytes()));
    assert!(body.is_empty());
}
