//! `httpcrypt fetch --pq` (spec/hybrid.md H5) against `httpcrypt serve`,
//! run as the built binary over loopback. The cases against `serve --pq
//! on|only` first check that `serve --help` offers `--pq` and fail with a
//! clear message when it does not; the cases against a v1 `serve` need no
//! server support for suite 2.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{fetch, Proc};

/// Fails the test unless `serve` takes `--pq` (suite 2 on the server).
fn require_serve_pq() {
    let help = common::run(&["serve", "--help"], Duration::from_secs(30));
    assert!(
        help.stdout_text().contains("--pq"),
        "serve has no --pq yet: these cases run `fetch --pq` against `serve --pq on|only`"
    );
}

/// A key directory, a site root with one file, and `serve` with `extra`.
struct Site {
    _dir: tempfile::TempDir,
    server: Proc,
}

impl Site {
    fn new(extra: &[&str]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        common::keygen(&keys, false);
        let root: PathBuf = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("hello.txt"), b"hello over suite 2\n").unwrap();
        std::fs::write(root.join("big.bin"), common::noise(40_000, 3)).unwrap();
        let server = common::serve(&keys, &root, extra);
        Site { _dir: dir, server }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.addr)
    }
}

const SUITE_2: &str = "* suite 2";

#[test]
fn prefer_uses_suite_2_when_serve_offers_it() {
    require_serve_pq();
    let site = Site::new(&["--pq", "on"]);
    let out = fetch(&["-v", "--pq", "prefer", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, b"hello over suite 2\n");
    assert!(out.stderr_text().contains(SUITE_2), "{}", out.stderr_text());
    // Without --pq the same server is asked in v1.
    let out = fetch(&["-v", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(
        !out.stderr_text().contains(SUITE_2),
        "{}",
        out.stderr_text()
    );
}

#[test]
fn require_against_a_hybrid_only_server_get_post_and_tickets() {
    require_serve_pq();
    let site = Site::new(&["--pq", "only"]);
    let out = fetch(&["-v", "--pq", "require", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(out.stderr_text().contains(SUITE_2), "{}", out.stderr_text());
    // A request too large for the GET form goes as a POST, ct_M first.
    let data = "x".repeat(3000);
    let out = fetch(&[
        "-v",
        "--pq",
        "require",
        "-X",
        "POST",
        "-d",
        &data,
        &site.url("/hello.txt"),
    ]);
    let stderr = out.stderr_text();
    assert!(stderr.contains("> POST "), "{stderr}");
    assert!(stderr.contains(SUITE_2), "{stderr}");
    // A hybrid session resumes with its ticket, still suite 2.
    let out = fetch(&["--pq", "require", "--repeat", "2", &site.url("/big.bin")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let stderr = out.stderr_text();
    assert!(
        stderr.contains("request 1: status 200, credential key"),
        "{stderr}"
    );
    assert!(
        stderr.contains("request 2: status 200, credential ticket"),
        "{stderr}"
    );
}

#[test]
fn off_against_a_hybrid_only_server_is_refused() {
    require_serve_pq();
    let site = Site::new(&["--pq", "only"]);
    let out = fetch(&[&site.url("/hello.txt")]);
    assert_eq!(out.status.code(), Some(35), "{}", out.stderr_text());
    assert!(out.stdout.is_empty(), "never unverified bytes");
    let stderr = out.stderr_text();
    assert!(
        stderr.starts_with("httpcrypt: hybrid_required: "),
        "{stderr}"
    );
}

#[test]
fn require_against_a_v1_server_is_a_downgrade() {
    let site = Site::new(&[]);
    let out = fetch(&["--pq", "require", &site.url("/hello.txt")]);
    assert_eq!(out.status.code(), Some(35), "{}", out.stderr_text());
    assert!(out.stdout.is_empty());
    let stderr = out.stderr_text();
    assert!(
        stderr.starts_with("httpcrypt: hybrid_downgrade: "),
        "{stderr}"
    );
    assert!(stderr.contains("offered no suite-2"), "{stderr}");
}

#[test]
fn prefer_against_a_v1_server_falls_back() {
    let site = Site::new(&[]);
    let out = fetch(&["-v", "--pq", "prefer", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, b"hello over suite 2\n");
    assert!(
        !out.stderr_text().contains(SUITE_2),
        "{}",
        out.stderr_text()
    );
}

#[test]
fn fetch_help_lists_pq() {
    let help = common::run(&["fetch", "--help"], Duration::from_secs(30));
    let text = help.stdout_text();
    assert!(text.contains("--pq"), "{text}");
    assert!(
        text.contains("prefer") && text.contains("require"),
        "{text}"
    );
}
