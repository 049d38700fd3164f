//! The load-aware defence of spec §14 end to end over loopback sockets:
//! invisible while idle, challenge/echo/busy on the wire, address binding,
//! tickets skipping it, the library client obeying it, and a real
//! `httpcrypt serve` flooded by `httpcrypt flood` staying within its memory
//! bound while legitimate clients get through.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Proc, Sealed};
use httpcrypt::client::OuterExchange;
use httpcrypt::proto::admission::{self, Refusal};
use httpcrypt::proto::outer::Mount;

struct Site {
    _dir: tempfile::TempDir,
    server: Proc,
}

fn site(extra: &[&str]) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.txt"), b"hello under load\n").unwrap();
    let server = common::serve(&keys, &root, extra);
    Site { _dir: dir, server }
}

fn now() -> u64 {
    httpcrypt::clock::unix_now()
}

/// Makes the `hc1-admit` pair for a request nonce.
type EchoFor<'a> = dyn Fn(&[u8; 24]) -> String + 'a;

/// A fresh-key GET of /hello.txt, with an optional `hc1-admit` pair.
fn fresh_request(addr: SocketAddr, echo: Option<&EchoFor>) -> (Sealed, Vec<u8>) {
    let certs = common::certs(addr, &Mount::default());
    let sealed = Sealed::new(&certs, None, &Mount::default());
    let host = addr.to_string();
    let stream = sealed.stream("GET", "/hello.txt", now(), b"");
    let bytes = match echo {
        None => sealed.post(&host, &stream),
        Some(echo) => {
            let cookie = format!("{}; {}", sealed.cookie(), echo(sealed.prepared.n0()));
            common::wire(
                "POST",
                &sealed.path(),
                &[
                    ("Host", &host),
                    ("Cookie", &cookie),
                    ("Content-Length", &stream.len().to_string()),
                ],
                &stream,
            )
        }
    };
    (sealed, bytes)
}

/// Sends `bytes` from source address `src` and reads one response.
fn exchange_from(src: [u8; 4], addr: SocketAddr, bytes: &[u8]) -> common::RawResponse {
    let sock = socket_from(src, addr);
    let mut s = sock;
    s.write_all(bytes).unwrap();
    let mut r = BufReader::new(s);
    common::read_response(&mut r).expect("a response")
}

fn socket_from(src: [u8; 4], addr: SocketAddr) -> TcpStream {
    // std has no bind-before-connect; tokio's TcpSocket does.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::from((src, 0))).unwrap();
        sock.connect(addr).await.unwrap()
    });
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn echo_pair(c: &admission::AdmitCookie, n0: &[u8; 24]) -> String {
    let s = admission::solve_puzzle(c, n0, 0, 1 << 26).expect("solvable");
    format!(
        "{}={}",
        admission::ADMIT_COOKIE,
        admission::format_echo(c, &s)
    )
}

/// Pushes the demand above a threshold of 1/s: fresh-key requests until the
/// server answers with a challenge, which is returned.
fn provoke_challenge(addr: SocketAddr) -> admission::AdmitCookie {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let (_, bytes) = fresh_request(addr, None);
        let rsp = exchange_from([127, 0, 0, 1], addr, &bytes);
        if rsp.status == 429 {
            assert_eq!(rsp.header("cache-control"), Some("no-store"));
            assert_eq!(rsp.header("retry-after"), Some("0"));
            let p = rsp.problem();
            assert_eq!(p.type_uri, "urn:httpcrypt:admission");
            assert_eq!(p.status, 429);
            let Ok(Refusal::Admission(c)) = admission::parse_refusal(&rsp.body) else {
                panic!("an admission challenge: {rsp:?}");
            };
            return c;
        }
        assert_eq!(rsp.status, 200, "{rsp:?}");
    }
    panic!("the defence never switched on");
}

/// Idle: no challenge, no extra round trip, and a request that knows
/// nothing of the defence is answered as before.
#[test]
fn defence_is_invisible_while_idle() {
    let s = site(&[]);
    let addr = s.server.addr;
    for _ in 0..5 {
        let (sealed, bytes) = fresh_request(addr, None);
        let rsp = exchange_from([127, 0, 0, 1], addr, &bytes);
        let (head, body) = sealed.open(&rsp);
        assert_eq!(head.status, 200);
        assert_eq!(body, b"hello under load\n");
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = httpcrypt::Client::new(httpcrypt::ClientConfig::default());
        let rsp = client
            .send(
                http::Request::get(format!("http://{addr}/hello.txt"))
                    .body(Bytes::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(rsp.status(), 200);
        let ex = rsp.extensions().get::<OuterExchange>().unwrap();
        assert_eq!(ex.attempts, 1, "no challenge round trip while idle");
        let cookie = ex.request_headers.get("cookie").unwrap().to_str().unwrap();
        assert!(!cookie.contains("hc1-admit"), "{cookie}");
    });
}

/// Under pressure: a challenge, an echo from the same address admitted,
/// the same echo from another address or for another nonce refused, then
/// the prefix budget spent (busy) while another /24 still gets through.
#[test]
fn challenge_echo_budget_over_sockets() {
    let s = site(&[
        "--defence-threshold",
        "1",
        "--prefix-rate",
        "1",
        "--prefix-burst",
        "2",
        "--max-difficulty",
        "8",
    ]);
    let addr = s.server.addr;
    let c = provoke_challenge(addr);
    let ok = |src: [u8; 4]| {
        let c = provoke_from(src, addr);
        let (sealed, bytes) = fresh_request(addr, Some(&|n0| echo_pair(&c, n0)));
        let rsp = exchange_from(src, addr, &bytes);
        (sealed, rsp)
    };
    // The echo from the address the cookie was issued to. The budget's
    // clock starts no earlier than here.
    let (sealed, bytes) = fresh_request(addr, Some(&|n0| echo_pair(&c, n0)));
    let first_spent = Instant::now();
    let rsp = exchange_from([127, 0, 0, 1], addr, &bytes);
    let (head, body) = sealed.open(&rsp);
    assert_eq!(
        (head.status, body.as_slice()),
        (200, &b"hello under load\n"[..])
    );
    // The same cookie from 127.0.0.2 (same /24, other address): a new challenge.
    let (_, bytes) = fresh_request(addr, Some(&|n0| echo_pair(&c, n0)));
    let rsp = exchange_from([127, 0, 0, 2], addr, &bytes);
    assert_eq!(rsp.status, 429);
    assert_eq!(rsp.problem().type_uri, "urn:httpcrypt:admission");
    // A solution for another nonce does not count when the puzzle is on.
    if c.difficulty() > 0 {
        let wrong = echo_pair(&c, &[0x55; 24]);
        let (_, bytes) = fresh_request(addr, Some(&|_| wrong.clone()));
        let rsp = exchange_from([127, 0, 0, 1], addr, &bytes);
        assert_eq!(rsp.status, 429);
    }
    // The burst of 2 is spent (one above, one here); the next is busy.
    let (_, rsp) = ok([127, 0, 0, 1]);
    assert_eq!(rsp.status, 200, "{rsp:?}");
    let (_, rsp) = ok([127, 0, 0, 1]);
    // At 1 token a second the budget holds a new one a second after the
    // first was spent: a slow machine may have taken that long by now, and
    // then the answer may be a 200. Within the second it must be busy.
    let refilled = rsp.status == 200 && first_spent.elapsed() >= Duration::from_secs(1);
    if !refilled {
        assert_eq!(rsp.status, 429, "{rsp:?}");
        assert_eq!(rsp.problem().type_uri, "urn:httpcrypt:busy");
        let retry: u64 = rsp.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=2).contains(&retry), "{retry}");
    }
    // Another /24 has a budget of its own.
    let (sealed, rsp) = ok([127, 0, 9, 1]);
    assert_eq!(sealed.open(&rsp).0.status, 200);
}

/// The challenge for `src`, by fresh-key requests from it without an echo.
fn provoke_from(src: [u8; 4], addr: SocketAddr) -> admission::AdmitCookie {
    let (_, bytes) = fresh_request(addr, None);
    let rsp = exchange_from(src, addr, &bytes);
    assert_eq!(rsp.status, 429, "the defence is on: {rsp:?}");
    match admission::parse_refusal(&rsp.body).unwrap() {
        Refusal::Admission(c) => c,
        other => panic!("{other:?}"),
    }
}

/// The library client obeys by itself: under pressure a new session costs
/// one challenge round trip; a returning client with a ticket skips the
/// defence altogether.
#[test]
fn client_obeys_and_tickets_skip_the_defence() {
    let s = site(&["--defence-threshold", "1", "--max-difficulty", "8"]);
    let addr = s.server.addr;
    provoke_challenge(addr);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let get = |c: &httpcrypt::Client| {
            let c = c.clone();
            async move {
                c.send(
                    http::Request::get(format!("http://{addr}/hello.txt"))
                        .body(Bytes::new())
                        .unwrap(),
                )
                .await
            }
        };
        let fresh = httpcrypt::Client::new(httpcrypt::ClientConfig {
            tickets: false,
            ..Default::default()
        });
        let rsp = get(&fresh).await.unwrap();
        assert_eq!(rsp.status(), 200);
        let ex = rsp.extensions().get::<OuterExchange>().unwrap();
        assert_eq!(ex.attempts, 2, "one challenge, then the echo");
        // The cookie is kept: the next new session needs no extra round trip.
        let rsp = get(&fresh).await.unwrap();
        let ex = rsp.extensions().get::<OuterExchange>().unwrap();
        assert_eq!(ex.attempts, 1);
        assert!(ex
            .request_headers
            .get("cookie")
            .unwrap()
            .to_str()
            .unwrap()
            .contains("hc1-admit="));

        let returning = httpcrypt::Client::new(httpcrypt::ClientConfig::default());
        get(&returning).await.unwrap();
        for _ in 0..3 {
            let rsp = get(&returning).await.unwrap();
            assert_eq!(rsp.status(), 200);
            let ex = rsp.extensions().get::<OuterExchange>().unwrap();
            assert_eq!(ex.attempts, 1);
            let cookie = ex.request_headers.get("cookie").unwrap().to_str().unwrap();
            assert!(!cookie.contains("hc1-admit"), "tickets carry no echo");
        }
    });
    // `httpcrypt fetch` obeys too (a fresh client per run, so a challenge).
    let out = common::fetch(&[&format!("http://{addr}/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "hello under load\n");
}

fn flood(addr: SocketAddr, args: &[&str]) -> std::process::Child {
    Command::new(common::BIN)
        .arg("flood")
        .arg(format!("http://{addr}/"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn json_of(child: std::process::Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `httpcrypt flood` junk, slow heads and huge headers at once against a
/// real server for a few seconds: its peak RSS stays within the bound of
/// spec §14.6 for its settings, and legitimate clients still succeed.
#[test]
fn flood_keeps_memory_bounded_and_serves_clients() {
    const MAX_CONNECTIONS: u64 = 64;
    let s = site(&[
        "--defence-threshold",
        "50",
        "--max-difficulty",
        "8",
        "--max-connections",
        "64",
        "--header-timeout",
        "2",
    ]);
    let addr = s.server.addr;
    let baseline_kib = s.server.status_kib("VmRSS");
    s.server.reset_peak_rss();
    let junk = flood(
        addr,
        &[
            "--mode",
            "junk",
            "--duration",
            "4",
            "--connections",
            "16",
            "--sources",
            "40",
        ],
    );
    let slow = flood(
        addr,
        &[
            "--mode",
            "slow-head",
            "--duration",
            "4",
            "--connections",
            "24",
            "--sources",
            "24",
        ],
    );
    let huge = flood(
        addr,
        &[
            "--mode",
            "huge-header",
            "--duration",
            "4",
            "--connections",
            "8",
            "--sources",
            "8",
            "--rate",
            "200",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    let legit = flood(
        addr,
        &[
            "--mode",
            "legit-new",
            "--path",
            "/hello.txt",
            "--duration",
            "3",
            "--rate",
            "10",
            "--timeout",
            "10",
        ],
    );
    let (junk, slow, huge, legit) = (json_of(junk), json_of(slow), json_of(huge), json_of(legit));
    // The defence switched on: junk met challenges instead of key agreements.
    assert!(
        junk["statuses"]["429"].as_u64().unwrap_or(0) > 0,
        "junk was challenged: {junk}"
    );
    assert!(slow["sent"].as_u64().unwrap() > 0, "{slow}");
    assert!(
        huge["statuses"]["431"].as_u64().unwrap_or(0) > 0,
        "huge heads refused: {huge}"
    );
    let sent = legit["sent"].as_u64().unwrap();
    let ok = legit["ok"].as_u64().unwrap();
    assert!(sent >= 10, "{legit}");
    assert!(
        ok * 100 >= sent * 95,
        "legitimate clients get through: {legit}"
    );
    // Spec §14.6: head buffers and one record per connection, the
    // admission table, a session cache and strike register filled only by
    // the legitimate requests (a few hundred entries: 1 MiB is generous).
    let per_conn_kib = (16 + 64 + 1) + 1024 + 1;
    let bound_kib = baseline_kib + MAX_CONNECTIONS * per_conn_kib + 1024 + 1024;
    let peak_kib = s.server.status_kib("VmHWM");
    assert!(
        peak_kib <= bound_kib,
        "peak RSS {peak_kib} KiB above the bound {bound_kib} KiB (baseline {baseline_kib} KiB)"
    );
    eprintln!("baseline {baseline_kib} KiB, peak {peak_kib} KiB, bound {bound_kib} KiB");
}
