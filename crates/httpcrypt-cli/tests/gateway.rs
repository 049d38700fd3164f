//! `httpcrypt fetch` ↔ `httpcrypt gateway` ↔ a real plaintext upstream
//! (`tests/upstream.py`, Python standard library): method, target, fields,
//! status and bodies pass through; bodies stream both ways in bounded
//! memory, 200 MiB each way.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{fetch, Proc, Relay};
use http_body_util::BodyExt;

/// Keys, the Python upstream and a gateway in front of it.
struct Setup {
    dir: tempfile::TempDir,
    _upstream: Proc,
    gateway: Proc,
}

impl Setup {
    fn new(extra: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        common::keygen(&keys, false);
        let upstream = common::upstream();
        let gateway = common::gateway(&keys, upstream.addr, extra);
        Setup {
            dir,
            _upstream: upstream,
            gateway,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.gateway.addr)
    }
}

/// Splits `fetch -i` output into the status code, fields and body.
fn split_include(out: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let end = out
        .windows(2)
        .position(|w| w == b"\n\n")
        .expect("fetch -i prints a head");
    let head = String::from_utf8(out[..end].to_vec()).unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let fields = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    (status, fields, out[end + 2..].to_vec())
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The upstream's `/echo` report.
fn echo(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

fn upstream_header<'a>(doc: &'a serde_json::Value, name: &str) -> Vec<&'a str> {
    doc["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|h| h[1].as_str().unwrap())
        .collect()
}

#[test]
fn gateway_preserves_method_target_fields_status_and_bodies() {
    let s = Setup::new(&[]);
    // A PUT with a query, extra fields and a body.
    let out = fetch(&[
        "-i",
        "-X",
        "PUT",
        "-H",
        "X-Custom: hello there",
        "-H",
        "Accept: text/plain",
        "-d",
        "the body",
        &s.url("/echo/a/b?x=1&y=two%20words&z="),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let (status, fields, body) = split_include(&out.stdout);
    assert_eq!(status, 200);
    assert_eq!(field(&fields, "x-upstream"), Some("yes"));
    assert_eq!(field(&fields, "content-type"), Some("application/json"));
    assert_eq!(
        field(&fields, "content-length"),
        Some(body.len().to_string().as_str())
    );
    let doc = echo(&body);
    assert_eq!(doc["method"], "PUT");
    assert_eq!(doc["target"], "/echo/a/b?x=1&y=two%20words&z=");
    assert_eq!(upstream_header(&doc, "x-custom"), ["hello there"]);
    assert_eq!(upstream_header(&doc, "accept"), ["text/plain"]);
    assert_eq!(doc["length"], 8);
    assert_eq!(doc["sha256"], common::sha256(b"the body"));
    // Outer framing fields never reach the upstream; nor does the cookie.
    assert!(upstream_header(&doc, "cookie").is_empty(), "{doc}");
    assert_eq!(upstream_header(&doc, "content-length"), ["8"]);
    assert!(upstream_header(&doc, "transfer-encoding").is_empty());

    // Methods without a body.
    for method in ["DELETE", "GET"] {
        let out = fetch(&["-X", method, &s.url("/echo/m?q=1")]);
        assert!(out.status.success());
        let doc = echo(&out.stdout);
        assert_eq!(doc["method"], method);
        assert_eq!(doc["target"], "/echo/m?q=1");
        assert_eq!(doc["length"], 0);
    }

    // Statuses other than 200 travel inside, and fetch still prints them.
    let out = fetch(&["-i", &s.url("/missing")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let (status, fields, body) = split_include(&out.stdout);
    assert_eq!(status, 404);
    assert_eq!(field(&fields, "x-upstream"), Some("yes"));
    assert_eq!(body, b"no such thing\n");
    let out = fetch(&["-i", "-v", "-X", "POST", "-d", "x", &s.url("/create")]);
    let (status, fields, body) = split_include(&out.stdout);
    assert_eq!(status, 201);
    assert_eq!(field(&fields, "location"), Some("/things/1"));
    assert_eq!(body, b"created\n");
    // …while a middlebox saw only a 200 and an opaque body.
    let stderr = out.stderr_text();
    assert!(stderr.contains("< HTTP/1.1 200 OK"), "{stderr}");
    assert!(stderr.contains("< HTTP/1.1 201 Created"), "{stderr}");

    // A large -d takes the POST form; the body arrives byte for byte.
    let data = "0123456789abcdef".repeat(6250);
    let out = fetch(&["-v", "-d", &data, &s.url("/echo/big")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(out.stderr_text().contains("\n> POST /"), "POST form");
    let doc = echo(&out.stdout);
    assert_eq!(doc["method"], "POST");
    assert_eq!(doc["length"], 100_000);
    assert_eq!(doc["sha256"], common::sha256(data.as_bytes()));
}

#[test]
fn data_file_streams_with_a_content_length() {
    let s = Setup::new(&[]);
    let relay = Relay::new(s.gateway.addr);
    let file = s.dir.path().join("upload.bin");
    let len = 5_000_000u64;
    common::write_pattern(&file, len);
    let out = fetch(&[
        "--data-file",
        file.to_str().unwrap(),
        &format!("http://{}/echo/upload", relay.addr),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let doc = echo(&out.stdout);
    assert_eq!(doc["method"], "POST");
    assert_eq!(doc["length"], len);
    assert_eq!(doc["sha256"], common::sha256_file(&file));
    assert_eq!(upstream_header(&doc, "content-length"), [len.to_string()]);
    // On the wire: the POST form with a Content-Length, not chunked.
    let sent = relay.captured();
    let head = outer_post_head(&sent);
    assert!(head.contains("\r\ncontent-length: "), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
}

/// The outer POST request head among the captured connections.
fn outer_post_head(sent: &[Vec<u8>]) -> String {
    sent.iter()
        .find_map(|c| {
            let at = c.windows(5).position(|w| w == b"POST ")?;
            let end = c[at..].windows(4).position(|w| w == b"\r\n\r\n")?;
            Some(String::from_utf8_lossy(&c[at..at + end + 4]).to_ascii_lowercase())
        })
        .expect("an outer POST")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_size_body_goes_out_chunked() {
    let s = Setup::new(&[]);
    let relay = Relay::new(s.gateway.addr);
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig::default());
    // A body of unknown size: frames as they come, no size hint.
    let pieces: Vec<Bytes> = (0..40u64)
        .map(|i| Bytes::from(common::noise(25_000 + i as usize * 97, i)))
        .collect();
    let all: Vec<u8> = pieces.iter().flat_map(|b| b.iter().copied()).collect();
    let frames = futures_util::stream::iter(
        pieces
            .into_iter()
            .map(|b| Ok::<_, Infallible>(http_body::Frame::data(b))),
    );
    let body = http_body_util::StreamBody::new(frames);
    assert!(http_body::Body::size_hint(&body).exact().is_none());
    let req = http::Request::post(format!("http://{}/echo/stream", relay.addr))
        .body(body)
        .unwrap();
    let rsp = tokio::time::timeout(Duration::from_secs(60), client.send_streaming(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rsp.status(), 200);
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    let doc = echo(&body);
    assert_eq!(doc["length"], all.len());
    assert_eq!(doc["sha256"], common::sha256(&all));
    // No inner Content-Length, so the upstream got it chunked as well.
    assert!(upstream_header(&doc, "content-length").is_empty(), "{doc}");
    assert_eq!(upstream_header(&doc, "transfer-encoding"), ["chunked"]);
    let head = outer_post_head(&relay.captured());
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(!head.contains("content-length"), "{head}");
}

/// 200 MiB up and 200 MiB down through the gateway, both streamed: the
/// gateway's peak RSS stays under 64 MiB. Runs in CI (a few seconds in a
/// debug build: the AEAD is aws-lc's assembly either way).
#[test]
fn large_transfers_stream_through_the_gateway_in_bounded_memory() {
    const SIZE: u64 = 200 << 20;
    const RSS_LIMIT_KIB: u64 = 64 << 10;
    let s = Setup::new(&["--max-body", &(SIZE + (16 << 20)).to_string()]);
    let gw = &s.gateway;
    let start_rss = gw.status_kib("VmRSS");

    // Upload: a generated file through --data-file; the upstream hashes it.
    let up = s.dir.path().join("up.bin");
    common::write_pattern(&up, SIZE);
    let expected = common::sha256_file(&up);
    let t = Instant::now();
    let out = fetch(&["--data-file", up.to_str().unwrap(), &s.url("/sink")]);
    let up_time = t.elapsed();
    let fetch_up_peak = out.peak_rss_kib;
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), format!("{SIZE} {expected}"));
    std::fs::remove_file(&up).unwrap();
    let up_peak = gw.status_kib("VmHWM");
    let separate = gw.reset_peak_rss();

    // Download: the upstream streams generated bytes (chunked) to -o FILE.
    let down = s.dir.path().join("down.bin");
    let t = Instant::now();
    let out = fetch(&[
        "-o",
        down.to_str().unwrap(),
        &s.url(&format!("/gen?n={SIZE}")),
    ]);
    let down_time = t.elapsed();
    let fetch_down_peak = out.peak_rss_kib;
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(common::is_pattern(&down, SIZE), "download differs");
    let down_peak = gw.status_kib("VmHWM");

    let mib = |kib: u64| kib as f64 / 1024.0;
    let rate = |t: Duration| SIZE as f64 / (1 << 20) as f64 / t.as_secs_f64();
    println!(
        "gateway RSS at start {:.1} MiB; 200 MiB upload {:.2?} ({:.0} MiB/s), peak RSS {:.1} MiB; \
         200 MiB download {:.2?} ({:.0} MiB/s), peak RSS {:.1} MiB{}",
        mib(start_rss),
        up_time,
        rate(up_time),
        mib(up_peak),
        down_time,
        rate(down_time),
        mib(down_peak),
        if separate {
            ""
        } else {
            " (cumulative: clear_refs refused)"
        }
    );
    println!(
        "fetch peak RSS: upload {:.1} MiB, download {:.1} MiB",
        mib(fetch_up_peak),
        mib(fetch_down_peak)
    );
    assert!(up_peak < RSS_LIMIT_KIB, "upload peak RSS {up_peak} KiB");
    assert!(
        down_peak < RSS_LIMIT_KIB,
        "download peak RSS {down_peak} KiB"
    );
    // The client streams as well: neither side holds a body.
    assert!(
        fetch_up_peak < RSS_LIMIT_KIB,
        "fetch upload {fetch_up_peak} KiB"
    );
    assert!(
        fetch_down_peak < RSS_LIMIT_KIB,
        "fetch download {fetch_down_peak} KiB"
    );
}

/// Erratum E2: the gateway passes the upstream's HEAD and 304 lengths
/// through (the representation's, with no body), and the Rust client takes
/// them; the GET of the same target still carries its bytes.
#[test]
fn head_and_304_lengths_pass_through() {
    let setup = Setup::new(&[]);
    let out = fetch(&["-X", "HEAD", "-i", &setup.url("/mib")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let (status, fields, body) = split_include(&out.stdout);
    assert_eq!(status, 200);
    assert_eq!(field(&fields, "content-length"), Some("1048576"));
    assert!(body.is_empty(), "{} bytes of body", body.len());

    let out = fetch(&["-i", &setup.url("/not-modified")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let (status, fields, body) = split_include(&out.stdout);
    assert_eq!(status, 304);
    assert_eq!(field(&fields, "content-length"), Some("1234"));
    assert!(body.is_empty());

    let out = fetch(&["-i", &setup.url("/mib")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let (status, fields, body) = split_include(&out.stdout);
    assert_eq!(status, 200);
    assert_eq!(field(&fields, "content-length"), Some("1048576"));
    assert_eq!(body.len(), 1 << 20);
}
