//! The rspamd profile against the real thing (`spec/rspamd-profile.md`):
//! a real rspamd 3.4 started here from a small configuration (no Redis, no
//! stock modules, one Lua rule, workers on loopback ports), a real `rspamc`
//! and `rspamadm`.
//!
//! - `fetch --profile rspamd` scans a message with rspamd's scan worker and
//!   reads the controller's `/stat`, sealed to keys rspamd reads from files
//!   `httpcrypt keygen --format rspamd` and `rspamadm keypair` wrote;
//! - an unmodified `rspamc --key` gets correct answers through
//!   `gateway --profile rspamd` from a plaintext rspamd and from the Python
//!   upstream, and reports every error row of the profile's table;
//! - every error of our profile server, over raw sockets.
//!
//! Without `rspamd`/`rspamc`/`rspamadm` the tests that need them skip,
//! unless `CI` is set (then they fail).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;
mod interop;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Output, Relay};
use httpcrypt::proto::rspamd::keys::{public_from_base32, public_to_base32, KeyHeader, ShortId};
use httpcrypt::proto::rspamd::{keypair, message, Client as Exchange};
use httpcrypt::proto::{outer, KexPublic, KexSecret, Limits};
use interop::Daemon;
use rand_core::OsRng;

const RSPAMD_BINS: &[&str] = &["rspamd", "rspamc", "rspamadm"];

/// A Lua rule, so a scan result shows that the message arrived intact.
const RULES: &str = r#"
rspamd_config.HTTPCRYPT_SUBJECT = {
  callback = function(task)
    local subject = task:get_subject() or ''
    if subject:find('httpcrypt', 1, true) then
      return true, subject
    end
    return false
  end,
  score = 1.5,
  description = 'Subject mentions httpcrypt',
}
"#;

/// A running rspamd: a scan worker with a keypair, one without, and a
/// controller with a keypair.
struct Rspamd {
    daemon: Daemon,
    scan: SocketAddr,
    plain: SocketAddr,
    controller: SocketAddr,
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Starts rspamd in `dir` with the scan worker keyed by `scan_key` and the
/// controller by `controller_key` (files holding a `keypair { }` block).
fn start_rspamd(dir: &Path, scan_key: &Path, controller_key: &Path) -> Rspamd {
    let (db, run) = (dir.join("db"), dir.join("run"));
    std::fs::create_dir_all(&db).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    // A one-line TLD list: the stock one is not needed and slows start-up.
    interop::write(&dir.join("tld.dat"), "org\ncom\n");
    interop::write(&dir.join("rules.lua"), RULES);
    let [scan, plain, controller] = interop::free_ports::<3>();
    let d = dir.display();
    let config = format!(
        r#"
options {{
    pidfile = "{d}/run/rspamd.pid";
    filters = "";
    dynamic_conf = "{d}/db/dynamic";
    history_file = "{d}/db/history";
    cache_file = "{d}/db/symbols.cache";
    control_socket = "{d}/run/rspamd.sock mode=0600";
    stats_file = "{d}/db/stats.ucl";
    hs_cache_dir = "{d}/db/";
    url_tld = "{d}/tld.dat";
    allow_raw_input = true;
    dns {{ nameserver = ["127.0.0.1:1"]; timeout = 0.2s; retransmits = 1; }}
}}
lua = "{d}/rules.lua";
logging {{ type = "console"; level = "notice"; }}
worker "normal" {{
    bind_socket = "127.0.0.1:{scan}";
    count = 1;
    .include "{scan_key}"
}}
worker "normal" {{
    bind_socket = "127.0.0.1:{plain}";
    count = 1;
}}
worker "controller" {{
    bind_socket = "127.0.0.1:{controller}";
    count = 1;
    secure_ip = "127.0.0.1";
    .include "{controller_key}"
}}
"#,
        scan_key = scan_key.display(),
        controller_key = controller_key.display(),
    );
    let conf = dir.join("rspamd.conf");
    interop::write(&conf, &config);
    let mut cmd = Command::new(interop::find_bin("rspamd").unwrap());
    cmd.arg("-f").arg("-c").arg(&conf);
    if is_root() {
        // rspamd refuses to run as root unless told to, and then wants a
        // user and group to keep.
        cmd.args(["-u", "root", "-g", "root", "-i"]);
    }
    let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let t = Instant::now();
    let daemon = Daemon::start(cmd, "rspamd", addr(controller), Duration::from_secs(20));
    for p in [scan, plain] {
        assert!(interop::wait_port(addr(p), Duration::from_secs(20)));
    }
    println!("rspamd listening after {:.2?}", t.elapsed());
    Rspamd {
        daemon,
        scan: addr(scan),
        plain: addr(plain),
        controller: addr(controller),
    }
}

/// `rspamadm keypair [-j]` into `path`; returns the public key text.
fn rspamadm_keypair(path: &Path, json: bool) -> String {
    let mut cmd = Command::new(interop::find_bin("rspamadm").unwrap());
    cmd.arg("keypair");
    if json {
        cmd.arg("-j");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    std::fs::write(path, &out.stdout).unwrap();
    let secret = keypair::parse(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    public_to_base32(secret.public())
}

/// `httpcrypt keygen --format rspamd --dir DIR`: the key file and public key.
fn keygen(dir: &Path) -> (PathBuf, String) {
    let out = common::run(
        &[
            "keygen",
            "--format",
            "rspamd",
            "--dir",
            dir.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    (
        dir.join("keypair.ucl"),
        out.stdout_text().trim().to_string(),
    )
}

/// A message whose Subject the Lua rule recognises.
fn message(subject_tail: &str) -> String {
    format!(
        "From: a@example.org\r\nTo: b@example.org\r\nSubject: hello httpcrypt {subject_tail}\r\n\
         Message-ID: <t@example.org>\r\n\r\nhello rspamd\r\n"
    )
}

fn fetch_rspamd(key: &str, url: &str, extra: &[&str]) -> Output {
    let mut args = vec!["fetch", "--profile", "rspamd", "--server-key", key];
    args.extend_from_slice(extra);
    args.push(url);
    common::run(&args, Duration::from_secs(60))
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

fn rspamc(args: &[&str]) -> Output {
    let mut cmd = Command::new(interop::find_bin("rspamc").unwrap());
    cmd.args(["-t", "20"]).args(args);
    common::run_cmd(cmd, Duration::from_secs(60))
}

/// What rspamc printed, both streams.
fn said(out: &Output) -> String {
    format!("{}{}", out.stdout_text(), out.stderr_text())
}

#[test]
fn fetch_scans_and_reads_stats_from_real_rspamd() {
    if !interop::require("fetch_scans_and_reads_stats_from_real_rspamd", RSPAMD_BINS) {
        return;
    }
    let t = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // The scan worker's key comes from our keygen, the controller's from
    // rspamadm: rspamd reads the first, fetch reads the second.
    let (scan_key_file, scan_key) = keygen(&dir.path().join("scan-key"));
    let ctl_key_file = dir.path().join("controller.ucl");
    let ctl_key = rspamadm_keypair(&ctl_key_file, false);
    let r = start_rspamd(dir.path(), &scan_key_file, &ctl_key_file);
    let msg_file = dir.path().join("msg.eml");
    interop::write(&msg_file, &message("one"));

    // checkv2 with the message from a file, sealed to the scan worker.
    let scan_url = format!("http://{}/checkv2", r.scan);
    let out = fetch_rspamd(
        &scan_key,
        &scan_url,
        &["--data-file", msg_file.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        out.stderr_text(),
        r.daemon.log()
    );
    let doc = json(&out.stdout);
    assert_eq!(doc["action"], "no action", "{doc}");
    assert_eq!(doc["score"], 1.5, "{doc}");
    assert_eq!(
        doc["symbols"]["HTTPCRYPT_SUBJECT"]["options"][0], "hello httpcrypt one",
        "{doc}"
    );
    // The same scan in plaintext gives the same verdict.
    let plain = rspamc(&["-h", &r.plain.to_string(), "-j", msg_file.to_str().unwrap()]);
    assert!(plain.status.success(), "{}", said(&plain));
    let plain = json(&plain.stdout);
    for field in ["action", "score", "symbols"] {
        assert_eq!(doc[field], plain[field], "{field}");
    }

    // -d, extra fields, -i: the inner head is rspamd's own.
    let out = fetch_rspamd(
        &scan_key,
        &scan_url,
        &["-i", "-H", "Filename: inline.eml", "-d", &message("two")],
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.starts_with("HTTP/1.1 200 OK\n"), "{text}");
    assert!(text.contains("server: rspamd/3.4"), "{text}");
    assert!(text.contains("\"hello httpcrypt two\""), "{text}");

    // The controller's /stat, the key given as the rspamadm file.
    let out = fetch_rspamd(
        ctl_key_file.to_str().unwrap(),
        &format!("http://{}/stat", r.controller),
        &[],
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let stat = json(&out.stdout);
    assert!(stat["scanned"].as_u64().unwrap() >= 3, "{stat}");
    assert_eq!(stat["version"], "3.4");

    // Unknown key at the scan worker: rspamd closes without a byte.
    let out = fetch_rspamd(&ctl_key, &scan_url, &["-d", &message("x")]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = out.stderr_text();
    assert!(
        err.contains("closed the connection without answering"),
        "{err}"
    );
    assert!(err.contains("--server-key"), "{err}");
    // Unknown key at the controller: a plaintext 500.
    let out = fetch_rspamd(&scan_key, &format!("http://{}/stat", r.controller), &[]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = out.stderr_text();
    assert!(
        err.contains("refused the request in plaintext: 500"),
        "{err}"
    );
    assert!(err.contains("HTTP parser internal error"), "{err}");
    assert!(err.contains("check --server-key"), "{err}");
    // rspamd's own answers to broken requests (profile §5), raw.
    let scan_pk = public_from_base32(scan_key.as_bytes()).unwrap();
    let ctl_pk = public_from_base32(ctl_key.as_bytes()).unwrap();
    let stat = b"GET /stat HTTP/1.0\r\n\r\n";
    // An undecodable Key: the scan worker closes, the controller says 500.
    for (addr, pk, closes) in [(r.scan, &scan_pk, true), (r.controller, &ctl_pk, false)] {
        let (req, _) = sealed_request(pk, stat);
        let bad = String::from_utf8_lossy(&req)
            .replacen("Key: ", "Key: 0", 1)
            .into_bytes();
        match raw_or_close(addr, &bad) {
            None => assert!(closes, "the controller should answer"),
            Some(rsp) => {
                assert!(!closes, "the scan worker should close: {rsp:?}");
                assert_eq!(rsp.status, 500);
                assert_eq!(rsp.header("content-type"), Some("text/plain"));
            }
        }
    }
    // A bad tag: the scan worker closes, the controller seals an inner 500.
    for (addr, pk, closes) in [(r.scan, &scan_pk, true), (r.controller, &ctl_pk, false)] {
        let (mut req, ex) = sealed_request(pk, stat);
        let at = req.len() - 2;
        req[at] ^= 1;
        match raw_or_close(addr, &req) {
            None => assert!(closes, "the controller should answer"),
            Some(rsp) => {
                assert!(!closes, "the scan worker should close: {rsp:?}");
                assert_eq!(open(ex, &rsp).status, 500);
            }
        }
    }
    // Unknown key at the controller: a plaintext 500 with this text.
    let (req, _) = sealed_request(&scan_pk, stat);
    let rsp = raw_or_close(r.controller, &req).expect("an answer");
    assert_eq!(rsp.status, 500);
    assert_eq!(
        rsp.body,
        b"HTTP parser internal error: the on_message_complete callback failed"
    );
    // What rspamc itself prints for a wrong key at the scan worker.
    let out = rspamc(&[
        "--key",
        &ctl_key,
        "-h",
        &r.scan.to_string(),
        "symbols",
        msg_file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        said(&out).contains("IO read error: unexpected EOF"),
        "{}",
        said(&out)
    );

    // Nothing listening: a transport error, not a key hint.
    let out = fetch_rspamd(&scan_key, "http://127.0.0.1:1/checkv2", &["-d", "x"]);
    assert!(!out.status.success());
    assert!(!out.stderr_text().contains("--server-key"));
    println!("fetch against rspamd: {:.2?}", t.elapsed());
}

/// A one-shot man in the middle for rspamc: reads one request, changes it
/// with `edit`, forwards it to `target` and relays the answer back.
fn mitm_once(
    target: SocketAddr,
    edit: impl FnOnce(&mut String, &mut Vec<u8>) + Send + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut c, _)) = listener.accept() else {
            return;
        };
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut data = Vec::new();
        let mut buf = [0u8; 65536];
        let head_end = loop {
            if let Some(p) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            match c.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => data.extend_from_slice(&buf[..n]),
            }
        };
        let mut head = String::from_utf8_lossy(&data[..head_end]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = data[head_end + 4..].to_vec();
        while body.len() < len {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
        }
        edit(&mut head, &mut body);
        let mut s = TcpStream::connect(target).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(b"\r\n\r\n").unwrap();
        s.write_all(&body).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let _ = c.write_all(&answer);
    });
    addr
}

fn set_field(head: &mut String, name: &str, value: &str) {
    *head = head
        .split("\r\n")
        .map(|l| match l.split_once(':') {
            Some((n, _)) if n.eq_ignore_ascii_case(name) => format!("{n}: {value}"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\r\n");
}

#[test]
fn rspamc_through_the_gateway() {
    if !interop::require("rspamc_through_the_gateway", RSPAMD_BINS) {
        return;
    }
    let t = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (rspamd_key, _) = keygen(&dir.path().join("rspamd-key"));
    let r = start_rspamd(dir.path(), &rspamd_key, &rspamd_key);
    // The gateways' keys: rspamadm's UCL and its JSON form.
    let gw_file = dir.path().join("gateway.ucl");
    let gw_key = rspamadm_keypair(&gw_file, false);
    let gw_json = dir.path().join("gateway.json");
    let gw_json_key = rspamadm_keypair(&gw_json, true);
    let gateway = |upstream: SocketAddr, keypair: &Path| -> Daemon {
        interop::gateway(
            &[
                "--profile",
                "rspamd",
                "--keypair",
                keypair.to_str().unwrap(),
                "--max-body",
                &(8 << 20).to_string(),
            ],
            upstream,
        )
    };
    let to_scan = gateway(r.plain, &gw_file);
    let to_controller = gateway(r.controller, &gw_json);
    let upstream = common::upstream();
    let to_python = gateway(upstream.addr, &gw_file);

    let msg = message("through the gateway");
    let msg_file = dir.path().join("msg.eml");
    interop::write(&msg_file, &msg);
    let file = msg_file.to_str().unwrap();

    // rspamc → gateway → plaintext rspamd: the verdict rspamd gives directly.
    let relay = interop::Tap::new(to_scan.addr, &[]);
    let out = rspamc(&[
        "--key",
        &gw_key,
        "-h",
        &relay.addr.to_string(),
        "symbols",
        file,
    ]);
    assert!(out.status.success(), "{}\n{}", said(&out), to_scan.log());
    let text = out.stdout_text();
    assert!(text.contains("Action: no action"), "{text}");
    assert!(
        text.contains("Symbol: HTTPCRYPT_SUBJECT (1.50)[hello httpcrypt through the gateway]"),
        "{text}"
    );
    let via = rspamc(&[
        "--key",
        &gw_key,
        "-h",
        &to_scan.addr.to_string(),
        "-j",
        file,
    ]);
    let direct = rspamc(&["-h", &r.plain.to_string(), "-j", file]);
    let (via, direct) = (json(&via.stdout), json(&direct.stdout));
    for field in ["action", "score", "symbols", "required_score"] {
        assert_eq!(via[field], direct[field], "{field}");
    }
    // What crossed the wire was sealed: rspamc's own head, no subject; our
    // answer is hyper's head for an HTTP/1.0 request, which rspamc accepted.
    let sent = relay.kept(interop::Way::Up);
    let wire = String::from_utf8_lossy(&sent[0]);
    assert!(wire.starts_with("POST /"), "{wire}");
    assert!(wire.contains("HTTP/1.0\r\n"), "{wire}");
    let short = ShortId::of(&public_from_base32(gw_key.as_bytes()).unwrap()).to_base32();
    assert!(wire.contains(&format!("Key: {short}=")), "{wire}");
    assert!(!interop::contains(&sent[0], b"through the gateway"));
    let answer = &relay.kept(interop::Way::Down)[0];
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&answer[..end]);
    assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
    for field in [
        "content-type: application/octet-stream",
        "connection: close",
        "date: ",
    ] {
        assert!(head.contains(field), "{head}");
    }
    assert!(!interop::contains(answer, b"HTTPCRYPT_SUBJECT"));

    // rspamc → gateway → controller (JSON key file).
    let out = rspamc(&[
        "--key",
        &gw_json_key,
        "-h",
        &to_controller.addr.to_string(),
        "stat",
    ]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        out.stdout_text().contains("Messages scanned: "),
        "{}",
        said(&out)
    );

    // rspamc → gateway → the Python upstream: the digest proves the bytes,
    // for a small message and for one of 2 MiB.
    let big = format!("{}{}", message("big"), "x".repeat(2 << 20));
    let big_file = dir.path().join("big.eml");
    interop::write(&big_file, &big);
    for (m, f) in [(&msg, file), (&big, big_file.to_str().unwrap())] {
        let out = rspamc(&[
            "--key",
            &gw_key,
            "-h",
            &to_python.addr.to_string(),
            "symbols",
            f,
        ]);
        assert!(out.status.success(), "{}", said(&out));
        let text = out.stdout_text();
        let want = format!("[{}, {}]", common::sha256(m.as_bytes()), m.len());
        assert!(text.contains("Symbol: UPSTREAM_SHA256 (0.50)"), "{text}");
        assert!(text.contains(&want), "{text} lacks {want}");
    }
    // fetch --profile rspamd against the same gateway.
    let out = fetch_rspamd(
        &gw_key,
        &format!("http://{}/checkv2", to_python.addr),
        &["--data-file", file],
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let doc = json(&out.stdout);
    assert_eq!(
        doc["symbols"]["UPSTREAM_SHA256"]["options"][0],
        common::sha256(msg.as_bytes())
    );

    // The error rows of the profile's table, as rspamc reports them.
    // Unknown key: our plaintext 400 unknown-key (rspamd's scan worker would
    // close silently); rspamc fails, and says it could not decrypt.
    let other = public_to_base32(KexSecret::generate(&mut OsRng).public());
    let out = rspamc(&[
        "--key",
        &other,
        "-h",
        &to_scan.addr.to_string(),
        "symbols",
        file,
    ]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("HTTP parser internal error"),
        "{}",
        said(&out)
    );
    assert!(!said(&out).contains("Action:"));
    // A Key value that does not decode: plaintext 400 malformed; same report.
    let mitm = mitm_once(to_scan.addr, |head, _| set_field(head, "Key", "!!!=???"));
    let out = rspamc(&["--key", &gw_key, "-h", &mitm.to_string(), "symbols", file]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("HTTP parser internal error"),
        "{}",
        said(&out)
    );
    // A flipped bit (bad tag) and a cut body (with a matching
    // Content-Length): a sealed inner 500, which rspamc reports as such.
    let mitm = mitm_once(to_scan.addr, |_, body| body[60] ^= 1);
    let out = rspamc(&["--key", &gw_key, "-h", &mitm.to_string(), "symbols", file]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("HTTP error: 500"), "{}", said(&out));
    let mitm = mitm_once(to_scan.addr, |head, body| {
        body.truncate(30);
        set_field(head, "Content-Length", "30");
    });
    let out = rspamc(&["--key", &gw_key, "-h", &mitm.to_string(), "symbols", file]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("HTTP error: 500"), "{}", said(&out));
    // Without --key rspamc sends plaintext, which passes (as at rspamd).
    let out = rspamc(&["-h", &to_scan.addr.to_string(), "symbols", file]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(out.stdout_text().contains("HTTPCRYPT_SUBJECT"));
    drop(r);
    println!("rspamc through the gateway: {:.2?}", t.elapsed());
}

/// One raw request to the profile server; the response as read.
fn raw(addr: SocketAddr, bytes: &[u8]) -> common::RawResponse {
    let mut s = common::connect(addr);
    s.write_all(bytes).unwrap();
    let mut r = BufReader::new(s);
    common::read_response(&mut r).expect("a response")
}

/// One raw request; `None` if the server closed without a byte.
fn raw_or_close(addr: SocketAddr, bytes: &[u8]) -> Option<common::RawResponse> {
    let mut s = common::connect(addr);
    s.write_all(bytes).unwrap();
    let mut r = BufReader::new(s);
    common::read_response(&mut r)
}

/// A request sealed to `server` with the core, as rspamc builds it.
fn sealed_request(server: &KexPublic, inner: &[u8]) -> (Vec<u8>, Exchange) {
    let mut out = Vec::new();
    let exchange =
        Exchange::seal_request(&mut OsRng, server, "gw.example", inner, &mut out).unwrap();
    (out, exchange)
}

fn open(exchange: Exchange, rsp: &common::RawResponse) -> message::Response {
    assert_eq!(rsp.status, 200, "{rsp:?}");
    assert_eq!(rsp.header("content-type"), Some("application/octet-stream"));
    assert_eq!(rsp.header("connection"), Some("close"));
    let inner = exchange.open_response(&rsp.body).unwrap();
    message::Response::decode(&inner, &Limits::default()).unwrap()
}

fn problem_type(body: &[u8]) -> String {
    outer::parse_problem(body).unwrap().type_uri
}

/// Every row of the profile's error table for our server, over sockets
/// (no rspamd needed): the Python upstream behind `gateway --profile rspamd`.
#[test]
fn profile_server_errors_over_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let (key_file, key) = keygen(&dir.path().join("k"));
    let server = public_from_base32(key.as_bytes()).unwrap();
    let upstream = common::upstream();
    let gw = interop::gateway(
        &[
            "--profile",
            "rspamd",
            "--keypair",
            key_file.to_str().unwrap(),
            "--max-body",
            "100000",
        ],
        upstream.addr,
    );
    let echo = b"POST /echo/x HTTP/1.0\r\nContent-Length: 5\r\nX-Inner: yes\r\n\r\nhello";

    // A good exchange: the inner answer is the upstream's, whole.
    let (req, ex) = sealed_request(&server, echo);
    let rsp = open(ex, &raw(gw.addr, &req));
    assert_eq!(rsp.status, 200);
    let doc = json(&rsp.body);
    assert_eq!(doc["method"], "POST");
    assert_eq!(doc["target"], "/echo/x");
    assert_eq!(doc["sha256"], common::sha256(b"hello"));
    let names: Vec<String> = doc["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap().to_ascii_lowercase())
        .collect();
    assert!(names.contains(&"x-inner".to_string()), "{doc}");
    assert!(!names.contains(&"key".to_string()), "{doc}");

    // `Key` without `=`: plaintext, handed on as it is.
    let plain = common::wire(
        "POST",
        "/echo/plain",
        &[("Host", "h"), ("Key", "r898uxxz"), ("Content-Length", "2")],
        b"hi",
    );
    let rsp = raw(gw.addr, &plain);
    assert_eq!(rsp.status, 200, "{rsp:?}");
    assert_eq!(json(&rsp.body)["target"], "/echo/plain");

    // `Key` that does not decode: plaintext 400 malformed.
    let (req, _) = sealed_request(&server, echo);
    let bad = String::from_utf8_lossy(&req)
        .replacen("Key: ", "Key: 0", 1)
        .into_bytes();
    let rsp = raw(gw.addr, &bad);
    assert_eq!(rsp.status, 400, "{rsp:?}");
    assert_eq!(problem_type(&rsp.body), "urn:httpcrypt:malformed");

    // Unknown short ID: plaintext 400 unknown-key, no certificates.
    let other = *KexSecret::generate(&mut OsRng).public();
    let (req, _) = sealed_request(&other, echo);
    let rsp = raw(gw.addr, &req);
    assert_eq!(rsp.status, 400, "{rsp:?}");
    let p = outer::parse_problem(&rsp.body).unwrap();
    assert_eq!(p.type_uri, "urn:httpcrypt:unknown-key");
    assert!(p.certs.is_empty());

    // Small-order client key: plaintext 400 malformed.
    let small = KeyHeader {
        short_id: ShortId::of(&server),
        client: KexPublic([0; 32]),
    };
    let rsp = raw(
        gw.addr,
        &common::wire(
            "POST",
            "/post",
            &[
                ("Host", "h"),
                ("Key", &small.format()),
                ("Content-Length", "40"),
            ],
            &[7; 40],
        ),
    );
    assert_eq!(rsp.status, 400, "{rsp:?}");
    assert_eq!(problem_type(&rsp.body), "urn:httpcrypt:malformed");

    // Bad tag, and a body under 40 bytes: sealed inner 500 integrity.
    let (mut req, ex) = sealed_request(&server, echo);
    let at = req.len() - 3;
    req[at] ^= 0x40;
    let rsp = open(ex, &raw(gw.addr, &req));
    assert_eq!(rsp.status, 500);
    assert_eq!(problem_type(&rsp.body), "urn:httpcrypt:integrity");
    let (req, ex) = sealed_request(&server, echo);
    let head_end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut head = String::from_utf8_lossy(&req[..head_end - 4]).into_owned();
    set_field(&mut head, "Content-Length", "39");
    let mut cut = format!("{head}\r\n\r\n").into_bytes();
    cut.extend_from_slice(&req[head_end..head_end + 39]);
    let rsp = open(ex, &raw(gw.addr, &cut));
    assert_eq!(rsp.status, 500);
    assert_eq!(problem_type(&rsp.body), "urn:httpcrypt:integrity");

    // Inner request malformed: sealed inner 400 malformed.
    for inner in [
        &b"not http at all"[..],
        b"POST /echo HTTP/1.0\r\nContent-Length: 9\r\n\r\nshort",
        b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ] {
        let (req, ex) = sealed_request(&server, inner);
        let rsp = open(ex, &raw(gw.addr, &req));
        assert_eq!(rsp.status, 400, "{}", String::from_utf8_lossy(inner));
        assert_eq!(problem_type(&rsp.body), "urn:httpcrypt:malformed");
    }

    // Over the body limit: 413 too-large, before the body is read.
    let (req, _) = sealed_request(&server, &vec![b'x'; 200_000]);
    let rsp = raw(gw.addr, &req);
    assert_eq!(rsp.status, 413, "{rsp:?}");
    assert_eq!(problem_type(&rsp.body), "urn:httpcrypt:too-large");

    // An upstream that is gone: sealed inner 502.
    drop(upstream);
    let (req, ex) = sealed_request(&server, echo);
    let rsp = open(ex, &raw(gw.addr, &req));
    assert_eq!(rsp.status, 502);

    // --encrypted-only refuses plaintext.
    let strict = interop::gateway(
        &[
            "--profile",
            "rspamd",
            "--keypair",
            key_file.to_str().unwrap(),
            "--encrypted-only",
        ],
        "127.0.0.1:1".parse().unwrap(),
    );
    let rsp = raw(strict.addr, &plain);
    assert_eq!(rsp.status, 400);
    assert!(String::from_utf8_lossy(&rsp.body).contains("encrypted requests only"));
}

/// `fetch --profile rspamd` writes the outer head byte for byte as the
/// core's `format_request_head` does.
#[test]
fn fetch_writes_the_profile_head_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (key_file, key) = keygen(&dir.path().join("k"));
    let upstream = common::upstream();
    let gw = interop::gateway(
        &[
            "--profile",
            "rspamd",
            "--keypair",
            key_file.to_str().unwrap(),
        ],
        upstream.addr,
    );
    let relay = Relay::new(gw.addr);
    let url = format!("http://{}/echo/exact", relay.addr);
    let out = fetch_rspamd(&key, &url, &["-d", "hello"]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(json(&out.stdout)["sha256"], common::sha256(b"hello"));
    let sent = &relay.captured()[0];
    let end = sent.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&sent[..end]).into_owned();
    let value = head
        .lines()
        .find_map(|l| l.strip_prefix("Key: "))
        .expect("a Key field");
    let k = KeyHeader::parse(value.as_bytes()).unwrap().unwrap();
    assert_eq!(
        k.short_id,
        ShortId::of(&public_from_base32(key.as_bytes()).unwrap())
    );
    let mut expected = Vec::new();
    httpcrypt::proto::rspamd::client::format_request_head(
        &relay.addr.to_string(),
        &k,
        sent.len() - end,
        &mut expected,
    )
    .unwrap();
    assert_eq!(head, String::from_utf8(expected).unwrap());
}

/// `serve --profile rspamd`: static files for `fetch --profile rspamd`.
#[test]
fn serve_profile_rspamd_serves_files() {
    let dir = tempfile::tempdir().unwrap();
    let (key_file, key) = keygen(&dir.path().join("k"));
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    interop::write(&root.join("hello.txt"), "hello over the rspamd profile\n");
    let server = interop::httpcrypt(
        &[
            "serve",
            "--profile",
            "rspamd",
            "--keypair",
            key_file.to_str().unwrap(),
            "--root",
            root.to_str().unwrap(),
        ],
        "httpcrypt serve",
    );
    let out = fetch_rspamd(&key, &format!("http://{}/hello.txt", server.addr), &["-i"]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.starts_with("HTTP/1.1 200 OK\n"), "{text}");
    assert!(
        text.ends_with("\n\nhello over the rspamd profile\n"),
        "{text}"
    );
    let out = fetch_rspamd(
        &key,
        &format!("http://{}/missing.txt", server.addr),
        &["-i"],
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(out.stdout_text().starts_with("HTTP/1.1 404 Not Found\n"));
}

#[test]
fn keygen_format_rspamd_and_keypair_files() {
    let dir = tempfile::tempdir().unwrap();
    // To stdout: one block that parses.
    let out = common::run(&["keygen", "--format", "rspamd"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.starts_with("keypair {\n    pubkey = \""), "{text}");
    let secret = keypair::parse(&text).unwrap();
    assert!(text.contains(&public_to_base32(secret.public())));
    // Into a directory: modes, the public key on stdout, no overwrite.
    let kdir = dir.path().join("k");
    let (file, public) = keygen(&kdir);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&kdir), 0o700);
    assert_eq!(mode(&file), 0o600);
    let secret = keypair::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(public_to_base32(secret.public()), public);
    let again = common::run(
        &[
            "keygen",
            "--format",
            "rspamd",
            "--dir",
            kdir.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(!again.status.success());
    assert!(again.stderr_text().contains("refusing to overwrite"));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        keypair::format(&secret).as_str()
    );
    // --static is a v1 notion.
    let out = common::run(
        &["keygen", "--format", "rspamd", "--static"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    // A bad key file or key text is a clear error.
    let bad = dir.path().join("bad.ucl");
    interop::write(&bad, "keypair { pubkey = \"abc\"; }");
    let out = fetch_rspamd(bad.to_str().unwrap(), "http://127.0.0.1:1/", &[]);
    assert!(!out.status.success());
    assert!(
        out.stderr_text().contains("bad_keypair"),
        "{}",
        out.stderr_text()
    );
    let out = fetch_rspamd("not-a-key", "http://127.0.0.1:1/", &[]);
    assert!(out
        .stderr_text()
        .contains("neither an rspamd base32 public key"));
    // The profile's flags are checked.
    let out = common::run(
        &["fetch", "--profile", "rspamd", "http://127.0.0.1:1/"],
        Duration::from_secs(20),
    );
    assert!(out.stderr_text().contains("needs --server-key"));
    let out = common::run(
        &[
            "gateway",
            "--profile",
            "rspamd",
            "--upstream",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
        ],
        Duration::from_secs(20),
    );
    assert!(
        out.stderr_text().contains("needs --keypair"),
        "{}",
        out.stderr_text()
    );
}
