//! ASAP mode end to end (spec/asap.md), in network namespaces created and
//! removed here: a server namespace (`serve`, `dns serve`) and a client
//! namespace joined by a veth pair. Replies to the client namespace's
//! second ("victim") address are routed into a veth pair whose far end drops them in the
//! server namespace, so a SYN sent from that address is a spoofed SYN: its
//! handshake can never complete, and iptables counters measure every byte
//! the server sends to the victim.
//!
//! Needs root (namespaces, sysctls) and `ip`, `iptables`; otherwise each test
//! is skipped with a message (a failure under `CI`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use httpcrypt::proto::provenance::{self, ProvenanceKey, ServerId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_httpcrypt");
const INDEX: &str = "hello over HTTPCrypt in the SYN\n";
const ZONE: &str = "example.test";

static NEXT: AtomicU32 = AtomicU32::new(0);

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sh_out(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn usable() -> bool {
    let root = nix::unistd::Uid::effective().is_root();
    let tools = ["ip", "iptables"].iter().all(|t| {
        Command::new(t)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    });
    if root && tools {
        return true;
    }
    let msg = "ASAP tests need root and ip/iptables (network namespaces, sysctls)";
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

/// A process started inside a namespace, killed and reaped on drop; its
/// stderr goes to a file.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two namespaces, their addresses, and the files of one server.
struct Lab {
    server_ns: String,
    client_ns: String,
    server_ip: IpAddr,
    client_ip: IpAddr,
    victim_ip: IpAddr,
    dir: tempfile::TempDir,
    keys: PathBuf,
    pkey: PathBuf,
}

impl Lab {
    /// `tfo_sysctl`: `net.ipv4.tcp_fastopen` of the server namespace.
    fn new(tfo_sysctl: &str) -> Lab {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let net = 200 + n;
        let lab = Lab {
            server_ns: format!("hcas{tag}"),
            client_ns: format!("hcac{tag}"),
            server_ip: format!("10.{net}.0.1").parse().unwrap(),
            client_ip: format!("10.{net}.0.2").parse().unwrap(),
            victim_ip: format!("10.{net}.0.99").parse().unwrap(),
            dir: tempfile::tempdir().unwrap(),
            keys: PathBuf::new(),
            pkey: PathBuf::new(),
        };
        let (s, c) = (lab.server_ns.as_str(), lab.client_ns.as_str());
        let (vs, vc) = (format!("vs{tag}"), format!("vc{tag}"));
        sh(&["ip", "netns", "add", s]);
        sh(&["ip", "netns", "add", c]);
        sh(&[
            "ip", "link", "add", &vs, "type", "veth", "peer", "name", &vc,
        ]);
        sh(&["ip", "link", "set", &vs, "netns", s]);
        sh(&["ip", "link", "set", &vc, "netns", c]);
        let ex = |ns: &str, args: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", ns];
            v.extend_from_slice(args);
            sh(&v);
        };
        ex(s, &["ip", "link", "set", "lo", "up"]);
        ex(c, &["ip", "link", "set", "lo", "up"]);
        ex(
            s,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/24", lab.server_ip),
                "dev",
                &vs,
            ],
        );
        ex(
            c,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/24", lab.client_ip),
                "dev",
                &vc,
            ],
        );
        ex(
            c,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/32", lab.victim_ip),
                "dev",
                &vc,
            ],
        );
        ex(s, &["ip", "link", "set", &vs, "up"]);
        ex(c, &["ip", "link", "set", &vc, "up"]);
        // The victim: replies to it leave through a veth pair whose far end drops them.
        // (No dummy driver here: a veth pair with both ends in the server
        // namespace, and a static neighbour entry, so frames leave and are
        // dropped by the other end.)
        ex(
            s,
            &[
                "ip", "link", "add", "victim0", "type", "veth", "peer", "name", "victim1",
            ],
        );
        ex(s, &["ip", "link", "set", "victim0", "up"]);
        ex(s, &["ip", "link", "set", "victim1", "up"]);
        ex(
            s,
            &[
                "ip",
                "route",
                "add",
                &format!("{}/32", lab.victim_ip),
                "dev",
                "victim0",
            ],
        );
        ex(
            s,
            &[
                "ip",
                "neigh",
                "add",
                &lab.victim_ip.to_string(),
                "lladdr",
                "02:00:00:00:00:99",
                "dev",
                "victim0",
            ],
        );
        ex(s, &["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"]);
        ex(
            s,
            &["sysctl", "-qw", &format!("net.ipv4.conf.{vs}.rp_filter=0")],
        );
        ex(
            s,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv4.tcp_fastopen={tfo_sysctl}"),
            ],
        );
        ex(c, &["sysctl", "-qw", "net.ipv4.tcp_fastopen=1"]);
        // Byte counters for traffic from and to the victim.
        let victim = lab.victim_ip.to_string();
        ex(s, &["iptables", "-A", "INPUT", "-s", &victim, "-p", "tcp"]);
        ex(s, &["iptables", "-A", "OUTPUT", "-d", &victim, "-p", "tcp"]);
        let mut lab = lab;
        lab.keys = lab.dir.path().join("keys");
        common::keygen(&lab.keys, true);
        lab.pkey = lab.dir.path().join("provenance.key");
        let out = common::run(
            &["dns", "provenance-key", "--out", lab.pkey.to_str().unwrap()],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{}", out.stderr_text());
        std::fs::create_dir_all(lab.dir.path().join("root")).unwrap();
        std::fs::write(lab.dir.path().join("root/index.html"), INDEX).unwrap();
        lab
    }

    fn spawn(&self, ns: &str, name: &str, args: &[&str]) -> Daemon {
        let log = self.dir.path().join(format!("{name}.log"));
        let f = File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, BIN])
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    /// `serve` on port 8080 of the server namespace, with `extra` options.
    fn serve(&self, extra: &[&str]) -> Daemon {
        let listen = format!("{}:8080", self.server_ip);
        let mut args = vec![
            "--log",
            "httpcrypt::asap=debug,warn",
            "serve",
            "--listen",
            &listen,
            "--keys",
            self.keys.to_str().unwrap(),
            "--root",
        ];
        let root = self.dir.path().join("root");
        args.push(root.to_str().unwrap());
        args.extend_from_slice(extra);
        let d = self.spawn(&self.server_ns, "serve", &args);
        wait_for(&d, "listening on");
        d
    }

    /// `serve` with Fast Open (no cookie) and the provenance gate.
    fn serve_asap(&self) -> Daemon {
        let pkey = self.pkey.to_str().unwrap().to_string();
        self.serve(&[
            "--tfo",
            "64",
            "--tfo-no-cookie",
            "--provenance-key",
            &pkey,
            "--handshake-wait",
            "1",
        ])
    }

    /// `dns serve` on port 53 of the server namespace, issuing certificates.
    fn dns(&self, extra: &[&str]) -> Daemon {
        let listen = format!("{}:53", self.server_ip);
        let addr = self.server_ip.to_string();
        let mut args = vec![
            "dns",
            "serve",
            "--keys",
            self.keys.to_str().unwrap(),
            "--zone",
            ZONE,
            "--address",
            &addr,
            "--listen",
            &listen,
            "--provenance-key",
            self.pkey.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let d = self.spawn(&self.server_ns, "dns", &args);
        wait_for(&d, "DNS for zone");
        d
    }

    /// `fetch` in the client namespace; returns (success, stdout, stderr).
    fn fetch(&self, extra: &[&str]) -> (bool, String, String) {
        let resolver = format!("{}:53", self.server_ip);
        let url = format!("http://{ZONE}:8080/index.html");
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.client_ns,
            BIN,
            "fetch",
            "--resolver",
            &resolver,
        ])
        .args(extra)
        .arg(&url);
        let out = common::run_cmd(cmd, Duration::from_secs(30));
        (out.status.success(), out.stdout_text(), out.stderr_text())
    }

    fn server_id(&self) -> ServerId {
        let store = httpcrypt::keys::KeyStore::open(&self.keys).unwrap();
        ServerId::of(&store.identity())
    }

    fn provenance_key(&self) -> ProvenanceKey {
        ProvenanceKey::parse(&std::fs::read_to_string(&self.pkey).unwrap()).unwrap()
    }

    /// Bytes (IP) the server namespace received from and sent to the victim.
    fn victim_bytes(&self) -> (u64, u64) {
        let count = |chain: &str| -> u64 {
            let out = sh_out(&[
                "ip",
                "netns",
                "exec",
                &self.server_ns,
                "iptables",
                "-L",
                chain,
                "-v",
                "-x",
                "-n",
            ]);
            out.lines()
                .filter(|l| l.contains(&self.victim_ip.to_string()))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum()
        };
        (count("INPUT"), count("OUTPUT"))
    }

    /// Runs `f` on a thread whose network namespace is the client's (a
    /// thread-local change: `setns` moves only the calling thread).
    fn in_client<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.client_ns);
        std::thread::spawn(move || {
            let ns = File::open(path).unwrap();
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn wait_for(d: &Daemon, what: &str) {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if d.log().contains(what) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("never saw {what:?}: {}", d.log());
}

/// The gate's counters from the last stats line of the server log.
fn stats(log: &str) -> std::collections::HashMap<String, u64> {
    let log = strip_ansi(log);
    let mut m = std::collections::HashMap::new();
    if let Some(line) = log.lines().rev().find(|l| l.contains("stats=handshake=")) {
        let rest = line.split("stats=").nth(1).unwrap();
        for kv in rest.split_whitespace() {
            if let Some((k, v)) = kv.split_once('=') {
                if let Ok(v) = v.parse() {
                    m.insert(k.to_string(), v);
                }
            }
        }
    }
    m
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut esc = false;
    for c in s.chars() {
        match (esc, c) {
            (false, '\x1b') => esc = true,
            (false, c) => out.push(c),
            (true, 'm') => esc = false,
            (true, _) => {}
        }
    }
    out
}

fn stat(log: &str, k: &str) -> u64 {
    stats(log).get(k).copied().unwrap_or(0)
}

/// Sends `first` in the SYN (no cookie) from `from` to `to` and returns
/// what comes back within `wait` (nothing for a spoofed source).
async fn syn_send(from: IpAddr, to: SocketAddr, first: Vec<u8>, wait: Duration) -> Vec<u8> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    httpcrypt::sockopt::connect_fastopen(&sock, true).unwrap();
    let mut s = sock.connect(to).await.unwrap();
    s.write_all(&first).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut got)).await;
    got
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A plain outer request head carrying `cert` (the gate reads only the head).
fn first_flight(cert: Option<&str>, pad: usize) -> Vec<u8> {
    let mut h = format!(
        "GET /index.html HTTP/1.1\r\nHost: {ZONE}:8080\r\nX-Pad: {}\r\n",
        "p".repeat(pad)
    );
    if let Some(c) = cert {
        h.push_str(&format!("{}: {c}\r\n", provenance::FIELD));
    }
    h.push_str("Connection: close\r\n\r\n");
    h.into_bytes()
}

fn now() -> u64 {
    httpcrypt::clock::unix_now()
}

#[test]
fn asap_fetch_rides_in_the_syn_with_a_dns_certificate() {
    if !usable() {
        return;
    }
    let lab = Lab::new("0x203");
    let _dns = lab.dns(&[]);
    let srv = lab.serve_asap();
    for i in 1..=3 {
        // A certificate verifies one flight, and the issuer's certificates
        // for one address differ from second to second: each fetch gets
        // its own.
        let start = now();
        while now() == start {
            std::thread::sleep(Duration::from_millis(20));
        }
        let (ok, body, err) = lab.fetch(&["--asap", "--timing"]);
        assert!(ok, "fetch {i}: {err}");
        assert_eq!(body, INDEX);
        assert!(err.contains("timing: first_byte_ms="), "{err}");
        let log = srv.log();
        assert_eq!(stat(&log, "verified"), i, "fetch {i} not verified: {log}");
        assert_eq!(stat(&log, "syn_data"), i, "{log}");
        assert_eq!(stat(&log, "unverified"), 0, "{log}");
    }
}

#[test]
fn tfo_with_the_kernel_cookie_needs_one_earlier_connection() {
    if !usable() {
        return;
    }
    // Server bit only: the kernel demands a cookie. The gate is on (cookie
    // mode plus certificates), so its counters show where data arrived.
    let lab = Lab::new("3");
    let _dns = lab.dns(&[]);
    let pkey = lab.pkey.to_str().unwrap().to_string();
    let srv = lab.serve(&["--tfo", "64", "--provenance-key", &pkey]);
    let (ok, body, err) = lab.fetch(&["--discovery", "dns", "--tfo", "cookie"]);
    assert!(ok && body == INDEX, "{err}");
    let log = srv.log();
    assert_eq!(stat(&log, "syn_data"), 0, "no cookie yet: {log}");
    assert!(stat(&log, "handshake") >= 1, "{log}");
    let (ok, body, err) = lab.fetch(&["--discovery", "dns", "--tfo", "cookie"]);
    assert!(ok && body == INDEX, "{err}");
    let log = srv.log();
    assert_eq!(stat(&log, "syn_data"), 1, "the cookie carried data: {log}");
    assert_eq!(
        stat(&log, "completed"),
        1,
        "no certificate: after the handshake: {log}"
    );
}

#[test]
fn spoofed_flood_without_certificates_gets_nothing_but_syn_acks() {
    if !usable() {
        return;
    }
    let lab = Lab::new("0x203");
    let _dns = lab.dns(&[]);
    let srv = lab.serve_asap();
    let (victim, to) = (lab.victim_ip, SocketAddr::new(lab.server_ip, 8080));
    // A certificate for the attacker's own address does not help either.
    let own = provenance::issue_text(
        &lab.provenance_key(),
        lab.client_ip,
        lab.server_id(),
        now(),
        600,
    );
    const N: usize = 40;
    lab.in_client(move || {
        rt().block_on(async move {
            let mut tasks = Vec::new();
            for i in 0..N {
                let cert = (i % 2 == 1).then_some(own.clone());
                let flight = first_flight(cert.as_deref(), 400);
                tasks.push(tokio::spawn(syn_send(
                    victim,
                    to,
                    flight,
                    Duration::from_millis(1500),
                )));
            }
            for t in tasks {
                assert!(t.await.unwrap().is_empty(), "the spoofer got an answer");
            }
        })
    });
    // Handshake wait (1 s) has passed for all; let the closes go out.
    std::thread::sleep(Duration::from_millis(1500));
    let log = srv.log();
    assert_eq!(stat(&log, "syn_data"), N as u64, "{log}");
    assert_eq!(stat(&log, "verified"), 0, "{log}");
    assert_eq!(stat(&log, "completed"), 0, "{log}");
    assert_eq!(stat(&log, "dropped"), N as u64, "{log}");
    let (bytes_in, bytes_out) = lab.victim_bytes();
    let amplification = bytes_out as f64 / bytes_in as f64;
    eprintln!(
        "spoofed flood: {bytes_in} B in, {bytes_out} B out, amplification {amplification:.3}"
    );
    assert!(bytes_in > 0);
    assert!(amplification <= 1.0, "amplification {amplification}");
    // The server is still fine for a real client.
    let (ok, body, err) = lab.fetch(&["--discovery", "dns", "--tfo", "no-cookie"]);
    assert!(ok && body == INDEX, "{err}");
}

#[test]
fn bad_certificates_wait_for_the_handshake_and_replays_are_refused() {
    if !usable() {
        return;
    }
    let lab = Lab::new("0x203");
    let srv = lab.serve_asap();
    let key = lab.provenance_key();
    let me = lab.client_ip;
    let to = SocketAddr::new(lab.server_ip, 8080);
    let t = now();
    let other_key = ProvenanceKey::from_parts(key.id(), [9; 32]);
    let cases: Vec<(&str, Option<String>)> = vec![
        ("none", None),
        (
            "expired",
            Some(provenance::issue_text(
                &key,
                me,
                lab.server_id(),
                t - 700,
                600,
            )),
        ),
        (
            "other server",
            Some(provenance::issue_text(&key, me, ServerId([1; 8]), t, 600)),
        ),
        (
            "other address",
            Some(provenance::issue_text(
                &key,
                lab.victim_ip,
                lab.server_id(),
                t,
                600,
            )),
        ),
        (
            "other key",
            Some(provenance::issue_text(
                &other_key,
                me,
                lab.server_id(),
                t,
                600,
            )),
        ),
    ];
    let mut expected_unverified = 0;
    for (what, cert) in cases {
        let flight = first_flight(cert.as_deref(), 10);
        let got =
            lab.in_client(move || rt().block_on(syn_send(me, to, flight, Duration::from_secs(5))));
        // Served, but only after the handshake.
        assert!(
            got.starts_with(b"HTTP/1.1 "),
            "{what}: {:?}",
            String::from_utf8_lossy(&got)
        );
        expected_unverified += 1;
        let log = srv.log();
        assert_eq!(stat(&log, "verified"), 0, "{what}: {log}");
        assert_eq!(
            stat(&log, "unverified"),
            expected_unverified,
            "{what}: {log}"
        );
        assert_eq!(
            stat(&log, "completed"),
            expected_unverified,
            "{what}: {log}"
        );
    }
    // A valid certificate: verified; the same first flight again: a replay.
    let good = provenance::issue_text(&key, me, lab.server_id(), t, 600);
    let flight = first_flight(Some(&good), 10);
    for round in 0..2 {
        let f = flight.clone();
        let got = lab.in_client(move || rt().block_on(syn_send(me, to, f, Duration::from_secs(5))));
        assert!(got.starts_with(b"HTTP/1.1 "), "round {round}");
    }
    // The same certificate with one byte of the flight changed: still a
    // replay (the set is keyed on the certificate, not the flight).
    let mut changed = flight.clone();
    let at = changed.iter().position(|&b| b == b'p').unwrap();
    changed[at] = b'q';
    let got =
        lab.in_client(move || rt().block_on(syn_send(me, to, changed, Duration::from_secs(5))));
    assert!(got.starts_with(b"HTTP/1.1 "), "after the handshake");
    let log = srv.log();
    assert_eq!(stat(&log, "verified"), 1, "{log}");
    assert_eq!(stat(&log, "replayed"), 2, "{log}");
    assert_eq!(stat(&log, "unverified"), expected_unverified + 2, "{log}");
}

/// The reflection of spec/asap.md §6: a certificate naming the victim's
/// address (an open recursive resolver relays one naming itself) buys one
/// early answer, and that answer is cut to three times the SYN's bytes.
#[test]
fn a_relayed_certificate_buys_one_early_answer_of_at_most_three_times_the_syn() {
    if !usable() {
        return;
    }
    let lab = Lab::new("0x203");
    std::fs::write(
        lab.dir.path().join("root/big.bin"),
        common::noise(200_000, 3),
    )
    .unwrap();
    // Plaintext outside the mount is served (a large answer to a small
    // request, whatever the protocol).
    let pkey = lab.pkey.to_str().unwrap().to_string();
    let srv = lab.serve(&[
        "--tfo",
        "64",
        "--tfo-no-cookie",
        "--provenance-key",
        &pkey,
        "--handshake-wait",
        "1",
        "--mount",
        "/hc",
        "--pass-through",
    ]);
    let (victim, to) = (lab.victim_ip, SocketAddr::new(lab.server_ip, 8080));
    let cert = provenance::issue_text(&lab.provenance_key(), victim, lab.server_id(), now(), 600);
    let mut flight = first_flight(Some(&cert), 300);
    flight = String::from_utf8(flight)
        .unwrap()
        .replace("/index.html", "/big.bin")
        .into_bytes();
    // The same certificate, one byte of the flight changed.
    let mut changed = flight.clone();
    let at = changed.iter().position(|&b| b == b'p').unwrap();
    changed[at] = b'q';
    lab.in_client(move || {
        rt().block_on(async move {
            for f in [flight, changed] {
                let got = syn_send(victim, to, f, Duration::from_millis(1500)).await;
                assert!(got.is_empty(), "the spoofer got an answer");
            }
        })
    });
    // The handshake wait (1 s) has passed for both; let the closes go out.
    let until = Instant::now() + Duration::from_secs(5);
    while stat(&srv.log(), "dropped") == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (bytes_in, bytes_out) = lab.victim_bytes();
    eprintln!("relayed certificate: {bytes_in} B in, {bytes_out} B out");
    assert!(bytes_in > 0);
    assert!(
        bytes_out <= 3 * bytes_in,
        "{bytes_out} B sent for {bytes_in} B received"
    );
    let log = srv.log();
    assert_eq!(stat(&log, "syn_data"), 2, "{log}");
    assert_eq!(stat(&log, "verified"), 1, "{log}");
    assert_eq!(stat(&log, "replayed"), 1, "{log}");
    assert_eq!(stat(&log, "dropped"), 1, "{log}");

    // An honest client with its own certificate gets the whole answer: the
    // part beyond the bound follows its ACK.
    let me = lab.client_ip;
    let own = provenance::issue_text(&lab.provenance_key(), me, lab.server_id(), now(), 600);
    let flight = String::from_utf8(first_flight(Some(&own), 10))
        .unwrap()
        .replace("/index.html", "/big.bin")
        .into_bytes();
    let got =
        lab.in_client(move || rt().block_on(syn_send(me, to, flight, Duration::from_secs(5))));
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &got[..got.len().min(100)]
    );
    assert!(got.len() > 200_000, "{} bytes", got.len());
    assert_eq!(stat(&srv.log(), "verified"), 2, "{}", srv.log());
}

#[test]
fn asap_falls_back_without_failing() {
    if !usable() {
        return;
    }
    let lab = Lab::new("0x203");
    // Certificates that expire before the client may present them.
    let dns = lab.dns(&["--provenance-lifetime", "1"]);
    let srv = lab.serve_asap();
    let (ok, body, err) = lab.fetch(&["--asap"]);
    assert!(ok && body == INDEX, "expired certificate: {err}");
    let log = srv.log();
    assert_eq!(
        (stat(&log, "verified"), stat(&log, "completed")),
        (0, 1),
        "{log}"
    );
    drop(srv);
    drop(dns);

    // A server without Fast Open: the kernel sends the data after the handshake.
    let _dns = lab.dns(&[]);
    let pkey = lab.pkey.to_str().unwrap().to_string();
    let srv = lab.serve(&["--provenance-key", &pkey]);
    let (ok, body, err) = lab.fetch(&["--asap"]);
    assert!(ok && body == INDEX, "server without TFO: {err}");
    assert_eq!(stat(&srv.log(), "handshake"), 1, "{}", srv.log());
    drop(srv);

    // A middlebox that drops SYNs carrying data: the SYN is resent bare.
    let srv = lab.serve_asap();
    let s = lab.server_ns.clone();
    sh(&[
        "ip",
        "netns",
        "exec",
        &s,
        "iptables",
        "-I",
        "INPUT",
        "-p",
        "tcp",
        "--dport",
        "8080",
        "--syn",
        "-m",
        "length",
        "--length",
        "100:65535",
        "-j",
        "DROP",
    ]);
    let (ok, body, err) = lab.fetch(&["--asap"]);
    assert!(ok && body == INDEX, "SYN data dropped on the path: {err}");
    assert_eq!(stat(&srv.log(), "handshake"), 1, "{}", srv.log());
}

/// The spawned processes find their files: a guard against a path typo
/// making every other test vacuous.
#[test]
fn key_file_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p: &Path = &dir.path().join("k");
    let out = common::run(
        &["dns", "provenance-key", "--out", p.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let k = ProvenanceKey::parse(&std::fs::read_to_string(p).unwrap()).unwrap();
    let again = common::run(
        &["dns", "provenance-key", "--out", p.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(
        !again.status.success(),
        "an existing key file is not overwritten"
    );
    assert_eq!(
        ProvenanceKey::parse(&std::fs::read_to_string(p).unwrap())
            .unwrap()
            .id(),
        k.id()
    );
}
