//! Split serving end to end (spec/split-serving.md): `serve --public` as
//! the origin, `split-proxy` as the cache, unmodified `fetch` and the Rust
//! client through it; and a malicious proxy (a test double in this process
//! that deviates on purpose) that the client must catch every time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{fetch, Proc};
use http_body_util::BodyExt;
use httpcrypt::proto::split::{self, ContentId, SplitDecoder, SplitEvent};
use httpcrypt::proto::stream::RECORD_OVERHEAD;

const C: usize = split::DEFAULT_PUBLIC_RECORD;

/// An origin serving `root/static/*` as public and `root/secret.txt` as private.
struct Origin {
    dir: tempfile::TempDir,
    server: Proc,
    public: Vec<u8>,
    secret: Vec<u8>,
}

impl Origin {
    fn new(extra: &[&str]) -> Origin {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        common::keygen(&keys, false);
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("static")).unwrap();
        // Three full public records and a short one.
        let public = common::noise(3 * C + 1000, 11);
        std::fs::write(root.join("static/app.bin"), &public).unwrap();
        let secret = b"SECRET-7f3a9c private body that no proxy may see\n".repeat(1000);
        std::fs::write(root.join("secret.txt"), &secret).unwrap();
        let mut args = vec!["--public", "/static/**"];
        args.extend_from_slice(extra);
        let server = common::serve(&keys, &root, &args);
        Origin {
            dir,
            server,
            public,
            secret,
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn cache(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Files in a cache directory and their total size.
fn cache_files(dir: &Path) -> (usize, u64, Vec<Vec<u8>>) {
    let mut n = 0;
    let mut bytes = 0;
    let mut all = Vec::new();
    if let Ok(subs) = std::fs::read_dir(dir) {
        for sub in subs.flatten() {
            for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
                let b = std::fs::read(f.path()).unwrap();
                n += 1;
                bytes += b.len() as u64;
                all.push(b);
            }
        }
    }
    (n, bytes, all)
}

/// Polls `probe` every 20 ms until `done` holds of what it returns, for at
/// most 10 s; returns the last result. The proxy writes fetched payloads to
/// its cache after the client has its response, so a test may look a moment
/// before the write is done.
fn settle<T>(mut probe: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let seen = probe();
        if done(&seen) || std::time::Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether a cache entry is being written (a temporary file exists).
fn cache_writing(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|sub| {
            std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
                .any(|f| f.file_name().to_string_lossy().ends_with(".tmp"))
        })
}

/// `cache_files` once the directory holds `n` entries and none is being
/// written (see [`settle`]).
fn cache_settled(dir: &Path, n: usize) -> (usize, u64, Vec<Vec<u8>>) {
    settle(
        || (cache_files(dir), cache_writing(dir)),
        |(seen, writing)| seen.0 == n && !writing,
    )
    .0
}

/// A TCP relay counting the bytes each way (the origin's traffic).
struct Counter {
    addr: SocketAddr,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Counter {
    fn new(target: SocketAddr) -> Counter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, down, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (u, d, s) = (up.clone(), down.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().take(256) {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (u, d) = (u.clone(), d.clone());
                std::thread::spawn(move || pump(client, server, u));
                std::thread::spawn(move || pump(s2, c2, d));
            }
        });
        Counter {
            addr,
            up,
            down,
            stop,
        }
    }

    fn total(&self) -> u64 {
        self.up.load(Ordering::SeqCst) + self.down.load(Ordering::SeqCst)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, count: Arc<AtomicU64>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        count.fetch_add(n as u64, Ordering::SeqCst);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[test]
fn cold_then_warm_through_the_proxy_with_an_unmodified_fetch() {
    let origin = Origin::new(&[]);
    let counter = Counter::new(origin.server.addr);
    let cache = origin.cache("cache");
    let proxy = common::split_proxy(counter.addr, &cache, &[]);
    let target = url(proxy.addr, "/static/app.bin");

    let out = fetch(&[&target]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, origin.public, "cold fetch");
    let cold = counter.total();
    let (entries, bytes, _) = cache_settled(&cache, 4);
    assert_eq!(entries, 4, "one cache entry per public record");
    assert_eq!(bytes, origin.public.len() as u64);

    let out = fetch(&[&target]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, origin.public, "warm fetch");
    let warm = counter.total() - cold;
    // Warm: the origin sends stubs only (53 bytes a record), not the body.
    assert!(
        warm < 4_000,
        "warm fetch cost the origin {warm} bytes (cold {cold})"
    );
    assert!(
        cold > origin.public.len() as u64,
        "cold fetch carried the body"
    );

    // A cache entry corrupted on disk fails its BLAKE3 check, is dropped
    // and fetched again: the client never notices.
    let id = ContentId::of(&origin.public[C..2 * C]).to_hex();
    let entry = cache.join(&id[..2]).join(&id);
    std::fs::write(&entry, vec![0u8; C]).unwrap();
    let out = fetch(&[&target]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, origin.public, "fetch over a corrupted cache");
    settle(
        || std::fs::read(&entry).ok(),
        |b| b.as_deref() == Some(&origin.public[C..2 * C]),
    );
    assert_eq!(std::fs::read(&entry).unwrap(), &origin.public[C..2 * C]);

    // Private content passes through sealed and is never cached.
    let out = fetch(&[&url(proxy.addr, "/secret.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, origin.secret);
    let (entries, _, files) = cache_settled(&cache, 4);
    assert_eq!(entries, 4);
    assert!(files.iter().all(|f| !contains(f, b"SECRET-7f3a9c")));
    // Certificates (OPTIONS) pass through too: fetch needed them above, and
    // a missing file is the origin's sealed 404.
    let out = fetch(&["-i", &url(proxy.addr, "/static/none.bin")]);
    assert!(
        out.stdout_text().starts_with("HTTP/1.1 404"),
        "{}",
        out.stdout_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_works_through_two_proxies_on_one_origin() {
    let origin = Origin::new(&[]);
    let p1 = common::split_proxy(origin.server.addr, &origin.cache("c1"), &[]);
    let p2 = common::split_proxy(origin.server.addr, &origin.cache("c2"), &[]);
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig::default());
    for round in 0..2 {
        for p in [&p1, &p2] {
            let req = http::Request::get(url(p.addr, "/static/app.bin"))
                .body(Bytes::new())
                .unwrap();
            let rsp = client.send(req).await.unwrap();
            assert_eq!(rsp.status(), 200);
            let body = rsp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], &origin.public[..], "round {round}");
        }
    }
    assert_eq!(cache_settled(&origin.cache("c1"), 4).0, 4);
    assert_eq!(cache_settled(&origin.cache("c2"), 4).0, 4);
}

#[test]
fn a_ten_mib_file_streams_in_bounded_memory_and_the_cache_evicts() {
    let origin = Origin::new(&[]);
    let big = common::noise(10 << 20, 5);
    std::fs::write(origin.root().join("static/big.bin"), &big).unwrap();
    let cache = origin.cache("cache");
    let proxy = common::split_proxy(origin.server.addr, &cache, &["--cache-size", "4M"]);
    // Warm the proxy's allocator with a small answer, then measure the peak.
    let out = fetch(&[&url(proxy.addr, "/static/app.bin")]);
    assert!(out.status.success());
    let base = proxy.status_kib("VmRSS");
    assert!(proxy.reset_peak_rss(), "cannot reset the peak RSS");
    let dest = origin.dir.path().join("big.out");
    let out = fetch(&[
        "-o",
        dest.to_str().unwrap(),
        &url(proxy.addr, "/static/big.bin"),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(std::fs::read(&dest).unwrap() == big, "10 MiB body differs");
    let peak = proxy.status_kib("VmHWM");
    assert!(
        peak < base + 8 * 1024,
        "proxy peak RSS grew from {base} KiB to {peak} KiB for a 10 MiB body"
    );
    // The cache stays within its bound (each entry counted with its block
    // overhead, each subdirectory as a block); the oldest records were
    // evicted.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (_, bytes, _) = settle(|| (cache_files(&cache), cache_writing(&cache)), |s| !s.1).0;
    assert!(bytes <= 4 << 20, "cache holds {bytes} bytes");
    assert!(bytes >= 3 << 20, "cache holds only {bytes} bytes");
    let first = ContentId::of(&big[..C]).to_hex();
    assert!(
        !cache.join(&first[..2]).join(&first).exists(),
        "first record not evicted"
    );
    // Evicted content is fetched again transparently.
    let out = fetch(&[
        "-o",
        dest.to_str().unwrap(),
        &url(proxy.addr, "/static/big.bin"),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(std::fs::read(&dest).unwrap() == big);
}

#[test]
fn a_direct_client_gets_ordinary_sealed_records() {
    // Without a proxy's request field the origin seals public bodies too.
    let origin = Origin::new(&[]);
    let relay = common::Relay::new(origin.server.addr);
    let out = fetch(&[&url(relay.addr, "/static/app.bin")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, origin.public);
    // The content endpoint knows nothing it did not emit as a stub.
    let id = ContentId::of(&origin.public[..C]).to_b64();
    let (rsp, _) = common::exchange(
        origin.server.addr,
        &common::wire("GET", &format!("/.content/{id}"), &[("Host", "x")], b""),
    );
    assert_eq!(rsp.status, 404);
}

#[test]
fn the_content_endpoint_serves_emitted_payloads_only() {
    let origin = Origin::new(&[]);
    let proxy = common::split_proxy(origin.server.addr, &origin.cache("c"), &[]);
    assert!(fetch(&[&url(proxy.addr, "/static/app.bin")])
        .status
        .success());
    let id = ContentId::of(&origin.public[C..2 * C]);
    let (rsp, _) = common::exchange(
        origin.server.addr,
        &common::wire(
            "GET",
            &format!("/.content/{}", id.to_b64()),
            &[("Host", "x")],
            b"",
        ),
    );
    assert_eq!(rsp.status, 200);
    assert_eq!(rsp.body, &origin.public[C..2 * C]);
    for bad in ["AAAA", "!!", ""] {
        let (rsp, _) = common::exchange(
            origin.server.addr,
            &common::wire("GET", &format!("/.content/{bad}"), &[("Host", "x")], b""),
        );
        assert!(
            rsp.status == 400 || rsp.status == 405,
            "{bad}: {}",
            rsp.status
        );
    }
    // A batch with one known and one unknown id.
    let mut body = Vec::new();
    split::encode_batch_request(&[id, ContentId::of(&origin.secret)], &mut body);
    let (rsp, _) = common::exchange(
        origin.server.addr,
        &common::wire(
            "POST",
            "/.content/",
            &[("Host", "x"), ("Content-Length", &body.len().to_string())],
            &body,
        ),
    );
    assert_eq!(rsp.status, 200);
    let mut want = Vec::new();
    split::encode_batch_entry(Some(&origin.public[C..2 * C]), &mut want);
    split::encode_batch_entry(None, &mut want);
    assert_eq!(rsp.body, want);
}

// ---------------------------------------------------------------------------
// The malicious proxy.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Deviation {
    Honest,
    WrongBytes,
    OldVersion,
    Reorder,
    Drop,
    Duplicate,
    Truncate,
    CutMid,
    ClearForSealed,
}

/// A proxy that splices like the real one from payloads it was given, then
/// deviates, and records everything it sees of both directions.
struct Evil {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<u8>>>,
    _task: tokio::task::JoinHandle<std::io::Result<()>>,
}

struct EvilState {
    origin: SocketAddr,
    deviation: Deviation,
    payloads: HashMap<ContentId, Vec<u8>>,
    old: Vec<u8>,
    seen: Arc<Mutex<Vec<u8>>>,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<Bytes>,
    >,
}

async fn evil(origin: SocketAddr, deviation: Deviation, public: &[u8], old: &[u8]) -> Evil {
    let payloads = public
        .chunks(C)
        .map(|c| (ContentId::of(c), c.to_vec()))
        .collect();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = Arc::new(EvilState {
        origin,
        deviation,
        payloads,
        old: old.to_vec(),
        seen: seen.clone(),
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = tower::service_fn(move |req: http::Request<httpcrypt::listen::RequestBody>| {
        let state = state.clone();
        async move {
            let rsp = state.handle(req).await;
            Ok::<_, std::convert::Infallible>(rsp)
        }
    });
    let task = tokio::spawn(httpcrypt::listen::run(
        listener,
        svc,
        httpcrypt::listen::ListenOptions::default(),
        std::future::pending(),
    ));
    Evil {
        addr,
        seen,
        _task: task,
    }
}

impl EvilState {
    fn note(&self, b: &[u8]) {
        self.seen.lock().unwrap().extend_from_slice(b);
    }

    async fn handle(
        &self,
        req: http::Request<httpcrypt::listen::RequestBody>,
    ) -> http::Response<httpcrypt::body::HcBody> {
        let (mut parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        self.note(parts.uri.to_string().as_bytes());
        for (n, v) in &parts.headers {
            self.note(n.as_str().as_bytes());
            self.note(v.as_bytes());
        }
        self.note(&body);
        let pq = parts.uri.path_and_query().unwrap().as_str().to_string();
        parts.uri = format!("http://{}{pq}", self.origin).parse().unwrap();
        // The honest double asks for the short outer head (§S3), the
        // others for the full one, as an older proxy would.
        let short = self.deviation == Deviation::Honest;
        let asked = if short { split::SPLIT_SHORT } else { "1" };
        parts
            .headers
            .insert(split::SPLIT_FIELD, asked.parse().unwrap());
        let rsp = self
            .client
            .request(http::Request::from_parts(
                parts,
                http_body_util::Full::new(body),
            ))
            .await
            .unwrap();
        let (mut parts, body) = rsp.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        self.note(&body);
        let is_split = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == split::SPLIT_TYPE.as_bytes());
        let sealed = parts.status == 200
            && parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes() == b"application/octet-stream");
        if is_split {
            // Full head: the content endpoint named, no-store; short head:
            // neither.
            let named = parts
                .headers
                .get(split::CONTENT_FIELD)
                .map(|v| v.as_bytes().to_vec());
            let no_store = parts
                .headers
                .get(http::header::CACHE_CONTROL)
                .is_some_and(|v| v.as_bytes() == b"no-store");
            if short {
                assert_eq!(named, None, "short head with Httpcrypt-Content");
                assert!(!no_store, "short head with Cache-Control");
                assert_eq!(
                    split::content_prefix(pq.split('?').next().unwrap()).as_deref(),
                    Some("/.content/")
                );
            } else {
                assert_eq!(named.as_deref(), Some(&b"/.content/"[..]));
                assert!(no_store, "full head without Cache-Control: no-store");
            }
        }
        let mut records: Vec<Vec<u8>> = Vec::new();
        if is_split {
            let mut d = SplitDecoder::new(1 << 20);
            d.receive(&body).unwrap();
            let mut stub_index = 0;
            while let Some(ev) = d.next_event().unwrap() {
                match ev {
                    SplitEvent::Nonce(b) | SplitEvent::Verbatim(b) => records.push(b.to_vec()),
                    SplitEvent::Stub(s) => {
                        let mut payload = self.payloads[&s.id].clone();
                        match self.deviation {
                            Deviation::WrongBytes if stub_index == 1 => {
                                payload = b"EVIL".repeat(payload.len() / 4 + 1);
                                payload.truncate(s.len);
                            }
                            Deviation::OldVersion => {
                                payload = self.old[stub_index * C..][..s.len].to_vec();
                            }
                            _ => {}
                        }
                        let mut rec = s.head.to_vec();
                        rec.extend_from_slice(&payload);
                        records.push(rec);
                        stub_index += 1;
                    }
                    SplitEvent::End => break,
                }
            }
        } else if sealed {
            records.push(body[..24].to_vec());
            let mut rest = &body[24..];
            while !rest.is_empty() {
                let len =
                    (u32::from_be_bytes(rest[..4].try_into().unwrap()) & 0x3fff_ffff) as usize;
                records.push(rest[..RECORD_OVERHEAD + len].to_vec());
                rest = &rest[RECORD_OVERHEAD + len..];
            }
        }
        if records.len() >= 4 {
            match self.deviation {
                Deviation::Reorder => records.swap(2, 3),
                Deviation::Drop => {
                    records.remove(2);
                }
                Deviation::Duplicate => {
                    let r = records[2].clone();
                    records.insert(3, r);
                }
                Deviation::Truncate => {
                    records.pop();
                }
                Deviation::ClearForSealed if !is_split => {
                    // Present the sealed head record as CLEAR: same bytes,
                    // CLEAR bit set, as if the ciphertext were plaintext.
                    records[1][0] |= 0x40;
                }
                _ => {}
            }
        }
        let mut out: Vec<u8> = if records.is_empty() {
            body.to_vec()
        } else {
            records.concat()
        };
        if self.deviation == Deviation::CutMid && records.len() >= 4 {
            // End cleanly (right Content-Length) in the middle of a record.
            out.truncate(records[..2].concat().len() + 100);
        }
        parts.headers.remove(split::CONTENT_FIELD);
        parts.headers.remove(http::header::TRANSFER_ENCODING);
        parts.headers.insert(
            http::header::CONTENT_TYPE,
            if is_split {
                "application/octet-stream".parse().unwrap()
            } else {
                parts.headers[http::header::CONTENT_TYPE].clone()
            },
        );
        parts
            .headers
            .insert(http::header::CONTENT_LENGTH, out.len().into());
        http::Response::from_parts(
            parts,
            http_body_util::Full::new(Bytes::from(out))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
    }
}

/// `fetch` through `proxy`; returns (success, stdout, stderr).
async fn fetch_via(proxy: SocketAddr, path: &str) -> (bool, Vec<u8>, String) {
    let u = url(proxy, path);
    tokio::task::spawn_blocking(move || {
        let out = fetch(&[&u]);
        (out.status.success(), out.stdout.clone(), out.stderr_text())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malicious_proxy_is_caught_every_time() {
    let origin = Origin::new(&[]);
    let old = common::noise(origin.public.len(), 99);
    // The honest double works, so every failure below is the deviation's.
    let honest = evil(origin.server.addr, Deviation::Honest, &origin.public, &old).await;
    let (ok, out, err) = fetch_via(honest.addr, "/static/app.bin").await;
    assert!(ok, "{err}");
    assert_eq!(out, origin.public);
    let (ok, out, err) = fetch_via(honest.addr, "/secret.txt").await;
    assert!(ok, "{err}");
    assert_eq!(out, origin.secret);

    let cases = [
        (Deviation::WrongBytes, "/static/app.bin", "(integrity)"),
        (Deviation::OldVersion, "/static/app.bin", "(integrity)"),
        (Deviation::Reorder, "/static/app.bin", "(integrity)"),
        (Deviation::Drop, "/static/app.bin", "(integrity)"),
        (Deviation::Duplicate, "/static/app.bin", "(integrity)"),
        (Deviation::Truncate, "/static/app.bin", "(truncated)"),
        (Deviation::CutMid, "/static/app.bin", "(truncated)"),
        (Deviation::Reorder, "/secret.txt", "(integrity)"),
        (Deviation::Truncate, "/secret.txt", "(truncated)"),
        (Deviation::ClearForSealed, "/secret.txt", "(integrity)"),
    ];
    for (dev, path, code) in cases {
        let proxy = evil(origin.server.addr, dev, &origin.public, &old).await;
        let (ok, out, err) = fetch_via(proxy.addr, path).await;
        assert!(!ok, "{dev:?} {path}: the client accepted a tampered answer");
        assert!(
            err.contains(code),
            "{dev:?} {path}: expected {code}, got {err}"
        );
        // Whatever was printed verified: a prefix of the real body, with
        // none of the proxy's own bytes.
        let real = if path == "/secret.txt" {
            &origin.secret
        } else {
            &origin.public
        };
        assert!(
            real.starts_with(&out),
            "{dev:?} {path}: unverified bytes printed"
        );
        assert!(!contains(&out, b"EVIL"), "{dev:?}: forged bytes printed");
        // Dropping only the empty FINAL record leaves every byte verified
        // but the answer incomplete: the exit status says so.
        if dev != Deviation::Truncate {
            assert!(out.len() < real.len(), "{dev:?} {path}: whole body printed");
        }
    }

    // What the proxy saw: the public content's IDs (it must, to cache it),
    // but no request plaintext and no private body.
    let seen = honest.seen.lock().unwrap().clone();
    let id = ContentId::of(&origin.public[..C]);
    assert!(contains(&seen, &id.0), "sanity: the stubs are visible");
    assert!(
        !contains(&seen, b"SECRET-7f3a9c"),
        "the proxy saw a private body"
    );
    for needle in [&b"secret.txt"[..], b"static/app.bin", b"GET /static"] {
        assert!(
            !contains(&seen, needle),
            "the proxy saw request plaintext {:?}",
            String::from_utf8_lossy(needle)
        );
    }
}

/// `svc` as the upstream on `up`, `gateway --public '/static/**'` in front
/// of it, and a split proxy in front of that caching every record in
/// `cache` (short tails included). The upstream's task runs on when the
/// returned handle is dropped.
async fn public_static_chain<S>(
    up: tokio::net::TcpListener,
    svc: S,
    keys: PathBuf,
    cache: &Path,
) -> (tokio::task::JoinHandle<std::io::Result<()>>, Proc, Proc)
where
    S: httpcrypt::listen::ConnectionService,
{
    let up_addr = up.local_addr().unwrap();
    let task = tokio::spawn(httpcrypt::listen::run(
        up,
        svc,
        httpcrypt::listen::ListenOptions::default(),
        std::future::pending(),
    ));
    let gw = tokio::task::spawn_blocking(move || {
        common::gateway(&keys, up_addr, &["--public", "/static/**"])
    })
    .await
    .unwrap();
    let proxy = common::split_proxy(gw.addr, cache, &["--cache-min-record", "0"]);
    (task, gw, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_opts_in_and_out_with_hc_public() {
    // A gateway whose upstream marks /api/feed public and /static/x private.
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let feed = common::noise(2 * C + 10, 3);
    let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = common::noise(2 * C + 10, 4);
    let (feed2, other2) = (Bytes::from(feed.clone()), Bytes::from(other.clone()));
    let svc = tower::service_fn(move |req: http::Request<httpcrypt::listen::RequestBody>| {
        let body = if req.uri().path() == "/api/feed" {
            feed2.clone()
        } else {
            other2.clone()
        };
        async move {
            let mut r = http::Response::new(
                http_body_util::Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            let flag = if req.uri().path() == "/api/feed" {
                "1"
            } else {
                "0"
            };
            r.headers_mut().insert("hc-public", flag.parse().unwrap());
            Ok::<_, std::convert::Infallible>(r)
        }
    });
    let cache = dir.path().join("cache");
    let (_up, gw, proxy) = public_static_chain(up, svc, keys, &cache).await;
    let u = url(proxy.addr, "/api/feed");
    let out = tokio::task::spawn_blocking(move || fetch(&["-i", &u]))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(
        !text.to_ascii_lowercase().contains("hc-public"),
        "HC-Public leaked: {text}"
    );
    assert!(out.stdout.ends_with(&feed));
    assert_eq!(cache_settled(&cache, 3).0, 3, "opt-in body cached");
    // HC-Public: 0 wins over the glob: nothing more is cached.
    let u = url(proxy.addr, "/static/x");
    let out = tokio::task::spawn_blocking(move || fetch(&[&u]))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, other);
    assert_eq!(cache_settled(&cache, 3).0, 3, "opt-out body cached");
    drop(gw);
}

/// Split-serving §S1: `--public '/static/**'` is matched against the
/// normalised path, so `/static/%2e%2e/private`, which the upstream resolves
/// to `/private`, is answered sealed, not as CLEAR records a proxy caches;
/// so are answers to a request with `Cookie` and answers that set a cookie
/// or say `Cache-Control: private` / `no-store`, under a public glob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_the_glob_really_names_and_nothing_personal_is_public() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, false);
    let public = common::noise(2 * C + 10, 5);
    let secret = b"SECRET-51d0 the private answer\n".repeat(2 * C / 31 + 1);
    let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (public2, secret2) = (Bytes::from(public.clone()), Bytes::from(secret.clone()));
    // An upstream that resolves the path as servers do: `%2e` decoded, dot
    // segments removed.
    let svc = tower::service_fn(move |req: http::Request<httpcrypt::listen::RequestBody>| {
        let raw = req.uri().path().replace("%2e", ".").replace("%2E", ".");
        let mut resolved: Vec<&str> = Vec::new();
        for seg in raw.split('/').skip(1) {
            match seg {
                ".." => {
                    resolved.pop();
                }
                "." => {}
                s => resolved.push(s),
            }
        }
        let path = format!("/{}", resolved.join("/"));
        let (body, field) = match path.as_str() {
            "/static/app.bin" => (public2.clone(), None),
            "/static/set-cookie" => (secret2.clone(), Some(("set-cookie", "session=1"))),
            "/static/private-cc" => (secret2.clone(), Some(("cache-control", "private"))),
            "/static/no-store" => (secret2.clone(), Some(("cache-control", "no-store"))),
            _ => (secret2.clone(), None),
        };
        async move {
            let mut r = http::Response::new(
                http_body_util::Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            if let Some((n, v)) = field {
                r.headers_mut().insert(n, v.parse().unwrap());
            }
            Ok::<_, std::convert::Infallible>(r)
        }
    });
    let cache = dir.path().join("cache");
    let (_up, gw, proxy) = public_static_chain(up, svc, keys, &cache).await;
    let private: &[(&str, &[&str])] = &[
        ("/static/%2e%2e/private", &[]),
        ("/static/%2E%2E/private", &[]),
        ("/static/%2e./private", &[]),
        ("/static/cookie", &["-H", "Cookie: s=1"]),
        ("/static/set-cookie", &[]),
        ("/static/private-cc", &[]),
        ("/static/no-store", &[]),
    ];
    for (path, extra) in private {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.push(url(proxy.addr, path));
        let out = tokio::task::spawn_blocking(move || {
            fetch(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{path}: {}", out.stderr_text());
        assert!(out.stdout == secret, "{path}: the private answer arrives");
    }
    // Then a public file: its three records are all the cache ever holds.
    let u = url(proxy.addr, "/static/app.bin");
    let out = tokio::task::spawn_blocking(move || fetch(&[&u]))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, public);
    let (entries, bytes, files) = cache_settled(&cache, 3);
    assert_eq!((entries, bytes), (3, public.len() as u64));
    assert!(files.iter().all(|f| !contains(f, b"SECRET-51d0")));
    drop(gw);
}

/// The leg over HTTP/2 (§S11): the same answers through a proxy that
/// speaks HTTP/2 to the origin's `--h2-listen` port, for fewer bytes on the
/// origin's side than the HTTP/1.1 leg, warm request for warm request.
#[test]
fn the_http2_leg_gives_the_same_answers_for_fewer_bytes() {
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let h2: SocketAddr = free.local_addr().unwrap();
    drop(free);
    let h2_arg = h2.to_string();
    let origin = Origin::new(&["--h2-listen", &h2_arg]);
    settle(|| TcpStream::connect(h2).is_ok(), |up| *up);
    let mut warm = Vec::new();
    for (leg, target, extra) in [
        ("h1", origin.server.addr, &[][..]),
        ("h2", h2, &["--origin-h2"][..]),
    ] {
        let counter = Counter::new(target);
        let cache = origin.cache(leg);
        let proxy = common::split_proxy(counter.addr, &cache, extra);
        let target = url(proxy.addr, "/static/app.bin");
        let out = fetch(&[&target]);
        assert!(out.status.success(), "{leg}: {}", out.stderr_text());
        assert_eq!(out.stdout, origin.public, "{leg}: cold fetch");
        let (entries, _, _) = cache_settled(&cache, 4);
        assert_eq!(entries, 4, "{leg}: one cache entry per public record");
        let before = counter.total();
        for _ in 0..3 {
            let out = fetch(&[&target]);
            assert!(out.status.success(), "{leg}: {}", out.stderr_text());
            assert_eq!(out.stdout, origin.public, "{leg}: warm fetch");
        }
        warm.push((counter.total() - before) / 3);
        // Private answers and errors pass through sealed, as on HTTP/1.1.
        let out = fetch(&[&url(proxy.addr, "/secret.txt")]);
        assert!(out.status.success(), "{leg}: {}", out.stderr_text());
        assert_eq!(out.stdout, origin.secret, "{leg}: private");
        let out = fetch(&["-i", &url(proxy.addr, "/static/none.bin")]);
        assert!(
            out.stdout_text().starts_with("HTTP/1.1 404"),
            "{leg}: {}",
            out.stdout_text()
        );
    }
    eprintln!("warm bytes per request: {warm:?}");
    // HPACK: the relayed fields and the answer's head after their first
    // use, the base64url of the target and cookie Huffman-coded.
    assert!(
        warm[1] + 100 < warm[0],
        "a warm request cost the origin {} bytes over HTTP/2, {} over HTTP/1.1",
        warm[1],
        warm[0]
    );
}
