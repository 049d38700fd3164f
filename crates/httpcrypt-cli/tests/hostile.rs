//! A hostile network between client and server: a man in the middle (a TCP
//! relay here that parses HTTP/1.1 framing and the sealed-stream records
//! just enough to change them) re-chunks bodies, flips bits, truncates,
//! reorders, drops and duplicates records, swaps the responses of two
//! concurrent requests, injects plaintext responses, and replays requests
//! and responses.
//!
//! Re-chunking must not matter (spec §3.5). Every other change must be
//! detected with the spec's error (§12), and nothing unauthenticated may
//! reach the caller: `fetch` exits non-zero and prints no byte that did not
//! verify (nothing at all when the change hits the first record), and the
//! library client returns an error, having yielded at most a verified
//! prefix of the body. The rspamd profile's client gets the same treatment.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;
mod interop;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Proc;
use http_body_util::BodyExt;
use interop::Daemon;

/// One HTTP/1.1 message as the man in the middle holds it.
#[derive(Clone, Debug)]
struct Msg {
    /// Start line.
    line: String,
    /// Fields other than the framing ones.
    fields: Vec<(String, String)>,
    /// The body, de-chunked.
    body: Vec<u8>,
}

impl Msg {
    fn method(&self) -> &str {
        self.line.split(' ').next().unwrap_or("")
    }

    fn target(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or("")
    }

    /// Encodes with a Content-Length, or chunked in pieces of the given
    /// sizes (cycled).
    fn encode(&self, chunks: Option<&[usize]>) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.line).into_bytes();
        for (n, v) in &self.fields {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        match chunks {
            None => {
                let has_body = !self.body.is_empty()
                    || self.line.starts_with("HTTP/")
                    || self.method() == "POST";
                if has_body {
                    out.extend_from_slice(
                        format!("Content-Length: {}\r\n", self.body.len()).as_bytes(),
                    );
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&self.body);
            }
            Some(sizes) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut at = 0;
                let mut i = 0;
                while at < self.body.len() {
                    let n = sizes[i % sizes.len()].max(1).min(self.body.len() - at);
                    out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                    out.extend_from_slice(&self.body[at..at + n]);
                    out.extend_from_slice(b"\r\n");
                    at += n;
                    i += 1;
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
        }
        out
    }
}

/// Reads one message; `None` at a clean end of the connection.
fn read_msg(r: &mut BufReader<TcpStream>, request: bool) -> Option<Msg> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let line = line.trim_end().to_string();
    let mut fields = Vec::new();
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut l = String::new();
        r.read_line(&mut l).ok()?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':')?;
        let (n, v) = (n.trim().to_string(), v.trim().to_string());
        if n.eq_ignore_ascii_case("content-length") {
            length = v.parse::<usize>().ok();
        } else if n.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.eq_ignore_ascii_case("chunked");
        } else {
            fields.push((n, v));
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if size == 0 {
                let mut end = String::new();
                r.read_line(&mut end).ok()?;
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..]).ok()?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).ok()?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body).ok()?;
    } else if !request {
        r.read_to_end(&mut body).ok()?;
    }
    Some(Msg { line, fields, body })
}

/// A sealed response body: the response nonce and its records (spec §3.1).
#[derive(Clone, Debug)]
struct Records {
    n0: Vec<u8>,
    records: Vec<Vec<u8>>,
}

impl Records {
    fn parse(body: &[u8]) -> Records {
        assert!(body.len() >= 24, "a sealed body");
        let (n0, mut rest) = body.split_at(24);
        let mut records = Vec::new();
        while rest.len() >= 20 {
            let header = u32::from_be_bytes(rest[..4].try_into().unwrap());
            let len = (header & 0x3fff_ffff) as usize;
            let (rec, tail) = rest.split_at((20 + len).min(rest.len()));
            records.push(rec.to_vec());
            rest = tail;
        }
        assert!(rest.is_empty(), "records cover the body");
        Records {
            n0: n0.to_vec(),
            records,
        }
    }

    fn join(&self) -> Vec<u8> {
        let mut out = self.n0.clone();
        for r in &self.records {
            out.extend_from_slice(r);
        }
        out
    }
}

/// What the man in the middle does. Attacks apply to sealed exchanges
/// (not to `OPTIONS`, which fetches the certificates).
#[derive(Clone, Debug)]
enum Attack {
    /// Forward everything unchanged.
    None,
    /// Re-chunk both bodies in odd piece sizes.
    Rechunk,
    /// Flip bit `bit` of response body byte `at` (`at` counted from the
    /// body's start).
    FlipResponse { at: usize, bit: u8 },
    /// Flip a bit in the sealed request (POST body or GET query).
    FlipRequest,
    /// Cut the response body to `keep` bytes, framing fixed up.
    Truncate { keep: usize },
    /// Cut the response body to `keep` bytes and close, Content-Length kept.
    TruncateRaw { keep: usize },
    /// Append bytes after the FINAL record, framing fixed up.
    Trailing,
    /// Swap records `a` and `b` of the response.
    SwapRecords(usize, usize),
    /// Drop record `i` (`usize::MAX`: the last one).
    DropRecord(usize),
    /// Send record `i` twice.
    DuplicateRecord(usize),
    /// Give each of two concurrent requests the other's response.
    SwapResponses,
    /// Answer in place of the server, without forwarding the request.
    Forge {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// Answer the second sealed request with the first one's response.
    ReplayResponse,
    /// Send the server the first sealed request again in place of the
    /// second, and return what the server answers.
    ReplayRequest,
    /// Close the connection without answering.
    Close,
}

#[derive(Default)]
struct Shared {
    exchanges: AtomicUsize,
    first_request: Mutex<Option<Vec<u8>>>,
    first_response: Mutex<Option<Vec<u8>>>,
    swap: Mutex<Vec<(usize, Vec<u8>)>>,
    swapped: Condvar,
}

/// The man in the middle, in front of `target`.
struct Mitm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
}

impl Mitm {
    fn new(target: SocketAddr, attack: Attack) -> Mitm {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (sh, sp) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            for (id, conn) in listener.incoming().take(256).enumerate() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let (sh, attack) = (sh.clone(), attack.clone());
                std::thread::spawn(move || {
                    let _ = serve(id, client, target, &attack, &sh);
                });
            }
        });
        Mitm { addr, shared, stop }
    }

    /// Sealed exchanges seen.
    fn exchanges(&self) -> usize {
        self.shared.exchanges.load(Ordering::SeqCst)
    }
}

impl Drop for Mitm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

const ODD_PIECES: &[usize] = &[1, 7, 4093, 3, 16385, 250, 9000, 2];

fn serve(
    id: usize,
    client: TcpStream,
    target: SocketAddr,
    attack: &Attack,
    sh: &Shared,
) -> Option<()> {
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut from_client = BufReader::new(client.try_clone().ok()?);
    let mut to_client = client;
    let mut upstream: Option<(TcpStream, BufReader<TcpStream>)> = None;
    loop {
        let mut req = read_msg(&mut from_client, true)?;
        let sealed = req.method() != "OPTIONS";
        let n = if sealed {
            sh.exchanges.fetch_add(1, Ordering::SeqCst)
        } else {
            usize::MAX
        };
        if sealed {
            if let Attack::Forge {
                status,
                content_type,
                body,
            } = attack
            {
                let forged = Msg {
                    line: format!("HTTP/1.1 {status} Forged"),
                    fields: vec![("Content-Type".into(), content_type.to_string())],
                    body: body.clone(),
                };
                to_client.write_all(&forged.encode(None)).ok()?;
                continue;
            }
            if let Attack::Close = attack {
                return None;
            }
        }
        // The request as forwarded.
        let mut chunks = None;
        if sealed {
            match attack {
                Attack::Rechunk if !req.body.is_empty() => chunks = Some(ODD_PIECES),
                Attack::FlipRequest => flip_request(&mut req),
                _ => {}
            }
        }
        let mut wire = req.encode(chunks);
        if sealed {
            let mut first = sh.first_request.lock().unwrap();
            match (attack, first.as_ref()) {
                (Attack::ReplayRequest, Some(old)) if n >= 1 => wire = old.clone(),
                _ if first.is_none() => *first = Some(wire.clone()),
                _ => {}
            }
        }
        if upstream.is_none() {
            let s = TcpStream::connect(target).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
            upstream = Some((s.try_clone().ok()?, BufReader::new(s)));
        }
        let (up_w, up_r) = upstream.as_mut()?;
        up_w.write_all(&wire).ok()?;
        let rsp = read_msg(up_r, false)?;
        if !sealed {
            to_client.write_all(&rsp.encode(None)).ok()?;
            continue;
        }
        let out = attack_response(id, n, rsp, attack, sh);
        to_client.write_all(&out).ok()?;
        if matches!(attack, Attack::TruncateRaw { .. }) {
            let _ = to_client.shutdown(std::net::Shutdown::Both);
            return None;
        }
    }
}

/// Flips one bit in the sealed request: in the POST body, or in the GET
/// query (one base64url character replaced by another, so it still decodes).
fn flip_request(req: &mut Msg) {
    if !req.body.is_empty() {
        let at = req.body.len() / 2;
        req.body[at] ^= 0x01;
        return;
    }
    let target = req.target().to_string();
    let q = target.find('?').expect("a GET-form query");
    let mut bytes = target.into_bytes();
    let at = q + 1 + (bytes.len() - q - 1) / 2;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    let target = String::from_utf8(bytes).unwrap();
    let method = req.method().to_string();
    req.line = format!("{method} {target} HTTP/1.1");
}

fn attack_response(id: usize, n: usize, mut rsp: Msg, attack: &Attack, sh: &Shared) -> Vec<u8> {
    match attack {
        Attack::Rechunk => return rsp.encode(Some(ODD_PIECES)),
        Attack::FlipResponse { at, bit } => {
            let at = (*at).min(rsp.body.len() - 1);
            rsp.body[at] ^= 1 << bit;
        }
        Attack::Truncate { keep } => rsp.body.truncate(*keep),
        Attack::TruncateRaw { keep } => {
            let mut out = rsp.encode(None);
            let cut = out.len() - rsp.body.len() + keep;
            out.truncate(cut);
            return out;
        }
        Attack::Trailing => rsp.body.extend_from_slice(b"trailing bytes"),
        Attack::SwapRecords(a, b) => {
            let mut r = Records::parse(&rsp.body);
            assert!(
                r.records.len() > (*a).max(*b),
                "{} records",
                r.records.len()
            );
            r.records.swap(*a, *b);
            rsp.body = r.join();
        }
        Attack::DropRecord(i) => {
            let mut r = Records::parse(&rsp.body);
            let i = (*i).min(r.records.len() - 1);
            r.records.remove(i);
            rsp.body = r.join();
        }
        Attack::DuplicateRecord(i) => {
            let mut r = Records::parse(&rsp.body);
            let dup = r.records[*i].clone();
            r.records.insert(*i, dup);
            rsp.body = r.join();
        }
        Attack::SwapResponses => {
            let mut box_ = sh.swap.lock().unwrap();
            box_.push((id, rsp.body.clone()));
            sh.swapped.notify_all();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some((_, other)) = box_.iter().find(|(i, _)| *i != id) {
                    rsp.body = other.clone();
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "no second response to swap with");
                box_ = sh.swapped.wait_timeout(box_, left).unwrap().0;
            }
        }
        Attack::ReplayResponse => {
            let mut first = sh.first_response.lock().unwrap();
            match (n, first.as_ref()) {
                (0, _) => *first = Some(rsp.body.clone()),
                (_, Some(old)) => rsp.body = old.clone(),
                _ => {}
            }
        }
        _ => {}
    }
    rsp.encode(None)
}

/// The servers: the Python upstream behind a gateway.
struct Setup {
    _dir: tempfile::TempDir,
    _upstream: Proc,
    gateway: Daemon,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let upstream = common::upstream();
    let gateway = interop::gateway(&["--keys", keys.to_str().unwrap()], upstream.addr);
    Setup {
        _dir: dir,
        _upstream: upstream,
        gateway,
    }
}

/// The body the upstream generates for `/gen?n=N`.
fn generated(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// What the library client made of one request: the body bytes it yielded
/// and how it ended.
struct Outcome {
    status: Option<u16>,
    yielded: Vec<u8>,
    error: Option<httpcrypt::Error>,
}

impl Outcome {
    fn code(&self) -> Option<&'static str> {
        self.error.as_ref().and_then(|e| e.code())
    }
}

async fn library(url: &str, post: Option<&[u8]>) -> Outcome {
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
        get_form: post.is_none(),
        ..Default::default()
    });
    let req = match post {
        Some(b) => http::Request::post(url).body(Bytes::copy_from_slice(b)),
        None => http::Request::get(url).body(Bytes::new()),
    }
    .unwrap();
    let rsp = match tokio::time::timeout(Duration::from_secs(30), client.send(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return Outcome {
                status: None,
                yielded: Vec::new(),
                error: Some(e),
            }
        }
        Err(_) => panic!("library client timed out"),
    };
    let status = Some(rsp.status().as_u16());
    let mut body = rsp.into_body();
    let mut yielded = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(d) = f.into_data() {
                    yielded.extend_from_slice(&d);
                }
            }
            Err(e) => {
                return Outcome {
                    status,
                    yielded,
                    error: Some(httpcrypt::error::from_box(e)),
                }
            }
        }
    }
    Outcome {
        status,
        yielded,
        error: None,
    }
}

/// `fetch` through `mitm` must fail with `want` in its message, printing at
/// most a verified prefix of `full` (nothing when `nothing` is set).
fn fetch_fails(url: &str, extra: &[&str], want: &[&str], full: &[u8], nothing: bool) {
    let mut args = extra.to_vec();
    args.push(url);
    let out = common::fetch(&args);
    let err = out.stderr_text();
    assert!(
        !out.status.success(),
        "fetch {args:?} succeeded: {}",
        out.stdout_text()
    );
    assert!(
        want.iter().any(|w| err.contains(w)),
        "fetch {args:?}: expected one of {want:?} in: {err}"
    );
    assert!(
        full.starts_with(&out.stdout),
        "fetch {args:?} printed bytes that are not a verified prefix"
    );
    if nothing {
        assert!(
            out.stdout.is_empty(),
            "fetch {args:?} printed {} bytes",
            out.stdout.len()
        );
    }
}

/// The library client through a man in the middle must fail with one of
/// `codes`, having yielded at most a prefix of `full`.
fn library_fails(rt: &tokio::runtime::Runtime, url: &str, codes: &[&str], full: &[u8]) {
    let o = rt.block_on(library(url, None));
    let code = o.code();
    assert!(
        code.is_some_and(|c| codes.contains(&c)),
        "{url}: expected {codes:?}, got {:?} (status {:?})",
        o.error.as_ref().map(|e| e.to_string()),
        o.status
    );
    assert!(
        full.starts_with(&o.yielded),
        "unauthenticated bytes yielded"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn rechunking_both_ways_is_harmless() {
    let s = setup();
    let mitm = Mitm::new(s.gateway.addr, Attack::Rechunk);
    let big = generated(100_000);
    let out = common::fetch(&[&format!("http://{}/gen?n=100000", mitm.addr)]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, big);
    let data = "x".repeat(50_000);
    let out = common::fetch(&[
        "--no-get-form",
        "-d",
        &data,
        &format!("http://{}/echo/rechunked", mitm.addr),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["sha256"], common::sha256(data.as_bytes()));
    let rt = runtime();
    let o = rt.block_on(library(&format!("http://{}/gen?n=100000", mitm.addr), None));
    assert!(o.error.is_none(), "{:?}", o.error.map(|e| e.to_string()));
    assert_eq!(o.yielded, big);
    assert!(mitm.exchanges() >= 3);
}

#[test]
fn tampered_responses_are_detected() {
    let s = setup();
    let rt = runtime();
    let small = |m: &Mitm| format!("http://{}/echo/small", m.addr);
    let gen = |m: &Mitm| format!("http://{}/gen?n=100000", m.addr);
    let full = generated(100_000);
    let t = Instant::now();

    // Bit flips: in the response nonce, a record header (the FINAL flag, a
    // high length bit), the tag, the payload. One-record answers, so
    // nothing can have been shown before the failure.
    let flips: &[(usize, u8, &[&str])] = &[
        (3, 0, &["integrity"]),            // n0
        (24, 7, &["integrity"]),           // FINAL bit
        (24, 5, &["record_too_large"]),    // length bit 29: far above the limit
        (24 + 4 + 3, 2, &["integrity"]),   // tag
        (24 + 20 + 10, 0, &["integrity"]), // payload
        (usize::MAX, 7, &["integrity"]),   // last byte
    ];
    for &(at, bit, codes) in flips {
        let mitm = Mitm::new(s.gateway.addr, Attack::FlipResponse { at, bit });
        let want: Vec<String> = codes.iter().map(|c| format!("({c})")).collect();
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        fetch_fails(&small(&mitm), &[], &want, b"", true);
        library_fails(&rt, &small(&mitm), codes, b"");
    }

    // Truncation with the framing fixed up: `truncated`; inside the nonce,
    // inside the first record, and (multi-record) at a record boundary.
    for keep in [0, 10, 24, 24 + 19, 24 + 30] {
        let mitm = Mitm::new(s.gateway.addr, Attack::Truncate { keep });
        fetch_fails(&small(&mitm), &[], &["(truncated)"], b"", true);
        library_fails(&rt, &small(&mitm), &["truncated"], b"");
    }
    let mitm = Mitm::new(s.gateway.addr, Attack::DropRecord(usize::MAX));
    fetch_fails(&gen(&mitm), &[], &["(truncated)"], &full, false);
    library_fails(&rt, &gen(&mitm), &["truncated"], &full);

    // A cut with the Content-Length kept: the connection ends early.
    let mitm = Mitm::new(s.gateway.addr, Attack::TruncateRaw { keep: 60 });
    fetch_fails(&small(&mitm), &[], &["transport", "(truncated)"], b"", true);
    let o = rt.block_on(library(&small(&mitm), None));
    assert!(o.error.is_some() && o.yielded.is_empty());

    // Bytes after the FINAL record.
    let mitm = Mitm::new(s.gateway.addr, Attack::Trailing);
    fetch_fails(&small(&mitm), &[], &["(trailing_data)"], b"", false);
    library_fails(&rt, &small(&mitm), &["trailing_data"], b"");

    // Records reordered, dropped, duplicated. Touching the first record
    // leaves nothing shown; touching later ones leaves a verified prefix.
    for attack in [Attack::SwapRecords(0, 1), Attack::DropRecord(0)] {
        let mitm = Mitm::new(s.gateway.addr, attack.clone());
        fetch_fails(&gen(&mitm), &[], &["(integrity)"], &full, true);
        library_fails(&rt, &gen(&mitm), &["integrity"], &full);
    }
    // (A duplicated first record verifies once: its bytes are genuine.)
    for attack in [
        Attack::SwapRecords(1, 2),
        Attack::DropRecord(1),
        Attack::DuplicateRecord(0),
        Attack::DuplicateRecord(1),
    ] {
        let mitm = Mitm::new(s.gateway.addr, attack.clone());
        fetch_fails(&gen(&mitm), &[], &["(integrity)"], &full, false);
        library_fails(&rt, &gen(&mitm), &["integrity"], &full);
    }
    println!("tampered responses: {:.2?}", t.elapsed());
}

#[test]
fn swapped_injected_and_replayed_messages_are_detected() {
    let s = setup();
    let rt = runtime();
    let t = Instant::now();

    // Two concurrent requests, each handed the other's answer.
    let mitm = Mitm::new(s.gateway.addr, Attack::SwapResponses);
    let (url_a, url_b) = (
        format!("http://{}/echo/a", mitm.addr),
        format!("http://{}/echo/b", mitm.addr),
    );
    let (a, b) = rt.block_on(async { tokio::join!(library(&url_a, None), library(&url_b, None)) });
    for o in [&a, &b] {
        assert_eq!(
            o.code(),
            Some("integrity"),
            "{:?}",
            o.error.as_ref().map(|e| e.to_string())
        );
        assert!(o.yielded.is_empty());
    }
    // The same with two fetch processes at once.
    let mitm = Mitm::new(s.gateway.addr, Attack::SwapResponses);
    let url_a = format!("http://{}/echo/a", mitm.addr);
    let url_b = format!("http://{}/echo/b", mitm.addr);
    let ta = std::thread::spawn(move || common::fetch(&[&url_a]));
    let out_b = common::fetch(&[&url_b]);
    let out_a = ta.join().unwrap();
    for out in [out_a, out_b] {
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr_text().contains("(integrity)"),
            "{}",
            out.stderr_text()
        );
    }

    // Plaintext answers injected in place of the server's.
    let mut junk = vec![0x5a; 24];
    junk.extend_from_slice(&(0x8000_0000u32 | 100).to_be_bytes());
    junk.extend_from_slice(&[0x11; 16 + 100]);
    let forgeries: Vec<(Attack, &[&str], Option<&str>)> = vec![
        (
            Attack::Forge {
                status: 200,
                content_type: "application/octet-stream",
                body: junk,
            },
            &["(integrity)"],
            Some("integrity"),
        ),
        (
            Attack::Forge {
                status: 200,
                content_type: "text/html",
                body: b"<h1>pwned</h1>".to_vec(),
            },
            &["(truncated)"],
            Some("truncated"),
        ),
        (
            Attack::Forge {
                status: 404,
                content_type: "text/html",
                body: b"<h1>Not Found</h1>".to_vec(),
            },
            &["server refused the request: 404"],
            None,
        ),
        (
            Attack::Forge {
                status: 500,
                content_type: "application/problem+json",
                body: br#"{"type":"urn:httpcrypt:integrity","status":500}"#.to_vec(),
            },
            &["server refused the request: 500"],
            None,
        ),
        (Attack::Close, &["transport"], None),
    ];
    for (attack, want, code) in forgeries {
        let mitm = Mitm::new(s.gateway.addr, attack.clone());
        let url = format!("http://{}/echo/forged", mitm.addr);
        fetch_fails(&url, &[], want, b"", true);
        let o = rt.block_on(library(&url, None));
        assert!(o.error.is_some(), "{attack:?}: accepted");
        assert!(o.yielded.is_empty());
        if let Some(c) = code {
            assert_eq!(o.code(), Some(c), "{attack:?}");
        } else if let Some(httpcrypt::Error::Refused { status, .. }) = &o.error {
            assert!(*status == 404 || *status == 500);
        }
    }

    // A recorded answer replayed to a later request.
    let mitm = Mitm::new(s.gateway.addr, Attack::ReplayResponse);
    let url = format!("http://{}/echo/replayed", mitm.addr);
    let first = rt.block_on(library(&url, None));
    assert!(first.error.is_none());
    library_fails(&rt, &url, &["integrity"], b"");
    fetch_fails(&url, &[], &["(integrity)"], b"", true);

    // A recorded request replayed in place of a later one: the client
    // cannot open what comes back, and the server refused the replay
    // (checked below with keys the test holds).
    let mitm = Mitm::new(s.gateway.addr, Attack::ReplayRequest);
    let url = format!("http://{}/echo/again", mitm.addr);
    assert!(rt.block_on(library(&url, None)).error.is_none());
    library_fails(&rt, &url, &["integrity"], b"");
    fetch_fails(&url, &[], &["(integrity)"], b"", true);

    // A tampered request: the server answers a sealed 500 (it is the
    // server's word, so the library returns it); fetch fails on it.
    let mitm = Mitm::new(s.gateway.addr, Attack::FlipRequest);
    for extra in [&[][..], &["--no-get-form", "-d", "some body"][..]] {
        let url = format!("http://{}/echo/tampered", mitm.addr);
        fetch_fails(&url, extra, &["500 urn:httpcrypt:integrity"], b"", true);
    }
    let o = rt.block_on(library(
        &format!("http://{}/echo/t", mitm.addr),
        Some(b"body"),
    ));
    assert_eq!(o.status, Some(500));
    let p = httpcrypt::proto::outer::parse_problem(&o.yielded).unwrap();
    assert_eq!(p.type_uri, "urn:httpcrypt:integrity");
    println!("swapped, injected, replayed: {:.2?}", t.elapsed());
}

/// The server's side of a replay, seen with keys the test holds: the same
/// sealed request sent twice gets an answer the first time and an inner 425
/// `replay` the second.
#[test]
fn the_server_refuses_a_replayed_request() {
    let s = setup();
    let mount = httpcrypt::proto::outer::Mount::default();
    let certs = common::certs(s.gateway.addr, &mount);
    let sealed = common::Sealed::new(&certs, None, &mount);
    let now = httpcrypt::clock::unix_now();
    let host = s.gateway.addr.to_string();
    let request = sealed.post(
        &host,
        &sealed.stream("POST", "/echo/once", now, b"pay once"),
    );
    let (first, _) = common::exchange(s.gateway.addr, &request);
    let (head, body) = sealed.open(&first);
    assert_eq!(head.status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["target"], "/echo/once");
    let (second, _) = common::exchange(s.gateway.addr, &request);
    let (status, type_uri, _) = sealed.open_problem(&second);
    assert_eq!((status, type_uri.as_str()), (425, "urn:httpcrypt:replay"));
}

/// The rspamd profile's client against the same kinds of interference.
#[test]
fn rspamd_profile_client_under_attack() {
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
    assert!(out.status.success());
    let key = out.stdout_text().trim().to_string();
    let keyfile = dir.path().join("k/keypair.ucl");
    let upstream = common::upstream();
    let gw = interop::gateway(
        &[
            "--profile",
            "rspamd",
            "--keypair",
            keyfile.to_str().unwrap(),
        ],
        upstream.addr,
    );
    let fetch = |m: &Mitm| {
        common::fetch(&[
            "--profile",
            "rspamd",
            "--server-key",
            &key,
            "-d",
            "message",
            &format!("http://{}/echo/r", m.addr),
        ])
    };
    // Untouched and re-chunked: fine.
    for attack in [Attack::None, Attack::Rechunk] {
        let mitm = Mitm::new(gw.addr, attack);
        let out = fetch(&mitm);
        assert!(out.status.success(), "{}", out.stderr_text());
        assert!(out.stdout_text().contains("\"target\": \"/echo/r\""));
    }
    let cases: Vec<(Attack, &str)> = vec![
        (
            Attack::FlipResponse { at: 30, bit: 1 },
            "failed authentication (integrity)",
        ),
        (
            Attack::FlipResponse { at: 100, bit: 4 },
            "failed authentication (integrity)",
        ),
        (
            Attack::Truncate { keep: 39 },
            "failed authentication (truncated)",
        ),
        (
            Attack::Truncate { keep: 80 },
            "failed authentication (integrity)",
        ),
        (Attack::Trailing, "failed authentication (integrity)"),
        (
            Attack::Forge {
                status: 200,
                content_type: "application/octet-stream",
                body: vec![7; 120],
            },
            "failed authentication (integrity)",
        ),
        (
            Attack::Forge {
                status: 500,
                content_type: "text/plain",
                body: b"HTTP parser internal error".to_vec(),
            },
            "refused the request in plaintext: 500",
        ),
        (Attack::Close, "closed the connection without answering"),
        (Attack::ReplayRequest, "failed authentication (integrity)"),
    ];
    for (attack, want) in cases {
        let mitm = Mitm::new(gw.addr, attack.clone());
        if matches!(attack, Attack::ReplayRequest) {
            // The first exchange is recorded (and answered normally).
            assert!(fetch(&mitm).status.success());
        }
        let out = fetch(&mitm);
        assert!(!out.status.success(), "{attack:?} accepted");
        assert!(
            out.stdout.is_empty(),
            "{attack:?}: printed {:?}",
            out.stdout_text()
        );
        assert!(
            out.stderr_text().contains(want),
            "{attack:?}: {}",
            out.stderr_text()
        );
    }
    // A tampered request: the gateway's sealed inner 500, which fetch
    // reports as the server's word.
    let mitm = Mitm::new(gw.addr, Attack::FlipRequest);
    let out = fetch(&mitm);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr_text().contains("500 urn:httpcrypt:integrity"),
        "{}",
        out.stderr_text()
    );
}
