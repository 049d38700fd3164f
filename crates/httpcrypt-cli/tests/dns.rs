//! End-to-end tests of DNS publication and discovery (spec §6) with real
//! DNS servers from Debian, started here on 127.0.0.1 high ports, as the
//! current user, in temporary directories, and killed on drop:
//!
//! - NSD authoritative + Unbound recursive: `fetch` finds the key by TXT,
//!   by AAAA when there is no TXT, by TLSA alone, and by `OPTIONS` when DNS
//!   has nothing; malformed records are refused with their error codes and
//!   discovery moves on to the next method. Also measures discovery latency.
//! - Unbound validating a zone signed with ldns-signzone: authenticated mode
//!   takes the identity from a DNSSEC-validated `_httpcrypt-id` and refuses
//!   a forged, a bogus and an unsigned one.
//! - BIND as primary: `serve --rotation 5` publishes every rotation by RFC
//!   2136 + TSIG; a client fetching for 60 s through Unbound never fails.
//! - `httpcrypt dns serve` (embedded authority) answers dig (UDP) and kdig
//!   (TCP) with the records `httpcrypt dns records` prints.
//!
//! A missing binary skips a test with a message, unless `CI` is set, where
//! it fails (scripts/install-test-deps.sh installs them all).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use httpcrypt::dns::DnsDiscovery;
use httpcrypt::proto::{dns as forms, IdentityKey};

const BIN: &str = env!("CARGO_BIN_EXE_httpcrypt");
const INDEX: &str = "hello over HTTPCrypt via DNS\n";

/// Whether every binary is installed. Missing ones skip the test with a
/// message, or fail it under CI.
fn have(bins: &[&str]) -> bool {
    let missing: Vec<&str> = bins
        .iter()
        .copied()
        .filter(|b| which(b).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "missing {} (install with scripts/install-test-deps.sh)",
        missing.join(", ")
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// A daemon killed (and reaped) on drop; its output goes to a log file.
struct Daemon {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Daemon {
    fn start(name: &str, cmd: &mut Command, dir: &Path) -> Daemon {
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Daemon {
            child,
            log,
            name: name.to_string(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, self.log());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_port() -> u16 {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port");
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Runs a command to completion within `limit`.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).ok();
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

fn hc(args: &[&str]) -> Output {
    run(Command::new(BIN).args(args), Duration::from_secs(60))
}

/// Output as text, without ANSI colour sequences (the log may carry them).
fn text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `dig` (or `kdig`) answer lines, `+short`.
fn dig(tool: &str, server: u16, name: &str, rtype: &str, tcp: bool) -> Vec<String> {
    let mut c = Command::new(tool);
    c.args([
        "@127.0.0.1",
        "-p",
        &server.to_string(),
        name,
        rtype,
        "+short",
        "+time=2",
        "+retry=1",
    ]);
    if tcp {
        c.arg("+tcp");
    }
    let o = run(&mut c, Duration::from_secs(20));
    text(&o.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with(";;"))
        .collect()
}

/// dig's whole answer to a query (header, flags and sections), with `extra`
/// options.
fn dig_full(server: u16, name: &str, rtype: &str, extra: &[&str]) -> String {
    let server = server.to_string();
    let mut args = vec![
        "@127.0.0.1",
        "-p",
        &server,
        name,
        rtype,
        "+time=2",
        "+retry=1",
    ];
    args.extend_from_slice(extra);
    text(&run(Command::new("dig").args(args), Duration::from_secs(20)).stdout)
}

/// The response status of a query (`NOERROR`, `NXDOMAIN`, …).
fn dig_status(server: u16, name: &str, rtype: &str) -> String {
    dig_full(server, name, rtype, &[])
        .split("status: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("none")
        .to_string()
}

/// The header flags of a DNSSEC query (`qr rd ra ad`, …).
fn dig_flags(server: u16, name: &str, rtype: &str) -> String {
    dig_full(server, name, rtype, &["+dnssec"])
        .lines()
        .find_map(|l| {
            Some(
                l.split(";; flags:")
                    .nth(1)?
                    .split(';')
                    .next()?
                    .trim()
                    .to_string(),
            )
        })
        .unwrap_or_default()
}

/// Polls `ready` (every `pause`, for 30 s at most) until it holds, checking
/// that `d` is still running; `ready` says what it saw when it does not.
fn wait_until(
    d: &mut Daemon,
    what: &str,
    pause: Duration,
    mut ready: impl FnMut() -> Result<(), String>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(saw) = ready() {
        d.assert_running();
        assert!(
            Instant::now() < deadline,
            "{} never {what} ({saw}):\n{}",
            d.name,
            d.log()
        );
        std::thread::sleep(pause);
    }
}

/// Waits until `server` answers `name` `rtype` with at least one record.
fn wait_dns(d: &mut Daemon, server: u16, name: &str, rtype: &str) {
    let what = format!("answered {name} {rtype}");
    wait_until(d, &what, Duration::from_millis(100), || {
        if dig("dig", server, name, rtype, false).is_empty() {
            Err("no record".into())
        } else {
            Ok(())
        }
    });
}

/// Waits until `server` answers `name` `rtype` with the AD bit set.
fn wait_validated(d: &mut Daemon, server: u16, name: &str, rtype: &str) {
    let what = format!("validated {name} {rtype}");
    wait_until(d, &what, Duration::from_millis(200), || {
        let flags = dig_flags(server, name, rtype);
        if flags.split_whitespace().any(|f| f == "ad") {
            Ok(())
        } else {
            Err(format!("flags: {flags:?}"))
        }
    });
}

fn wait_tcp(d: &mut Daemon, port: u16) {
    wait_until(d, "listened", Duration::from_millis(50), || {
        TcpStream::connect_timeout(&addr(port), Duration::from_millis(200))
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

/// A key directory (returns the identity) and a site with `index.html`.
fn site(dir: &Path) -> (PathBuf, PathBuf, String) {
    let keys = dir.join("keys");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), INDEX).unwrap();
    let o = hc(&["keygen", "--dir", keys.to_str().unwrap()]);
    assert!(o.status.success(), "keygen: {}", text(&o.stderr));
    (keys, root, text(&o.stdout).trim().to_string())
}

/// `httpcrypt serve` on a free port.
fn serve(dir: &Path, keys: &Path, root: &Path, extra: &[&str]) -> (Daemon, u16) {
    let port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--keys",
        keys.to_str().unwrap(),
        "--root",
        root.to_str().unwrap(),
        "--listen",
        &addr(port).to_string(),
    ])
    .args(extra);
    let mut d = Daemon::start("httpcrypt-serve", &mut cmd, dir);
    wait_tcp(&mut d, port);
    (d, port)
}

/// Zone-file lines for `host` from `httpcrypt dns records`.
fn records(keys: &Path, host: &str, port: u16, ttl: u32) -> Vec<String> {
    let o = hc(&[
        "dns",
        "records",
        "--keys",
        keys.to_str().unwrap(),
        "--host",
        host,
        "--port",
        &port.to_string(),
        "--ttl",
        &ttl.to_string(),
        "--address",
        "127.0.0.1",
    ]);
    assert!(o.status.success(), "dns records: {}", text(&o.stderr));
    text(&o.stdout).lines().map(str::to_string).collect()
}

fn soa(zone: &str) -> String {
    format!(
        "$ORIGIN {zone}.\n$TTL 30\n@ IN SOA ns.{zone}. hostmaster.{zone}. 1 30 30 600 5\n@ IN NS ns.{zone}.\nns IN A 127.0.0.1\n"
    )
}

/// NSD serving `zones` (name, file) on a free port.
fn nsd(dir: &Path, zones: &[(&str, PathBuf)]) -> (Daemon, u16) {
    let port = free_port();
    let d = dir.display();
    let mut conf = format!(
        "server:\n  ip-address: 127.0.0.1@{port}\n  port: {port}\n  username: \"\"\n  chroot: \"\"\n  zonesdir: \"{d}\"\n  zonelistfile: \"{d}/zone.list\"\n  database: \"\"\n  pidfile: \"{d}/nsd.pid\"\n  xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  server-count: 1\n  verbosity: 1\nremote-control:\n  control-enable: no\n"
    );
    for (name, file) in zones {
        conf.push_str(&format!(
            "zone:\n  name: {name}\n  zonefile: {}\n",
            file.display()
        ));
    }
    let path = dir.join("nsd.conf");
    std::fs::write(&path, conf).unwrap();
    let mut d = Daemon::start(
        "nsd",
        Command::new(which("nsd").unwrap()).args(["-d", "-c", path.to_str().unwrap()]),
        dir,
    );
    wait_dns(&mut d, port, &format!("ns.{}", zones[0].0), "A");
    (d, port)
}

/// Unbound recursing into stub zones at 127.0.0.1@`auth`; `anchors` are
/// DS lines of trust anchors (validation is on when there is one).
fn unbound(dir: &Path, stubs: &[&str], auth: u16, anchors: &[String]) -> (Daemon, u16) {
    let port = free_port();
    let d = dir.display();
    let mut conf = format!(
        "server:\n  interface: 127.0.0.1@{port}\n  port: {port}\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  do-not-query-localhost: no\n  do-ip6: no\n  num-threads: 1\n  so-reuseport: no\n  cache-min-ttl: 0\n  local-zone: \"test.\" nodefault\n  module-config: \"{}\"\n",
        if anchors.is_empty() { "iterator" } else { "validator iterator" }
    );
    for a in anchors {
        conf.push_str(&format!("  trust-anchor: \"{a}\"\n"));
    }
    if !anchors.is_empty() {
        // A validation that failed because nsd answered late (a loaded
        // machine) is not remembered as bogus for the default 60 s.
        conf.push_str("  val-bogus-ttl: 1\n");
    }
    if anchors.is_empty() {
        conf.push_str("  domain-insecure: \"test.\"\n");
    }
    for s in stubs {
        conf.push_str(&format!(
            "stub-zone:\n  name: \"{s}.\"\n  stub-addr: 127.0.0.1@{auth}\n"
        ));
    }
    conf.push_str("remote-control:\n  control-enable: no\n");
    let path = dir.join("unbound.conf");
    std::fs::write(&path, conf).unwrap();
    let mut d = Daemon::start(
        "unbound",
        Command::new(which("unbound").unwrap()).args(["-d", "-c", path.to_str().unwrap()]),
        dir,
    );
    wait_dns(&mut d, port, &format!("ns.{}", stubs[0]), "A");
    (d, port)
}

fn fetch(resolver: u16, url: &str, extra: &[&str]) -> Output {
    let r = addr(resolver).to_string();
    let mut args = vec!["fetch", "-v", "--resolver", &r];
    args.extend_from_slice(extra);
    args.push(url);
    hc(&args)
}

/// Fetches `url` and checks the body and where the key came from.
fn fetch_ok(resolver: u16, url: &str, extra: &[&str], source: &str) {
    let o = fetch(resolver, url, extra);
    let err = text(&o.stderr);
    assert!(o.status.success(), "fetch {url} {extra:?} failed: {err}");
    assert_eq!(text(&o.stdout), INDEX);
    assert!(
        err.contains(&format!("server key from {source}\n")),
        "{url} {extra:?}: expected the key from {source}: {err}"
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Lines of `all` for `host` whose record type is in `types`.
fn only(all: &[String], types: &[&str]) -> Vec<String> {
    all.iter()
        .filter(|l| types.iter().any(|t| l.contains(&format!(" IN {t} "))))
        .cloned()
        .collect()
}

#[test]
fn discovery_through_nsd_and_unbound() {
    if !have(&["nsd", "unbound", "dig"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (keys, root, identity) = site(dir);
    let (_server, port) = serve(dir, &keys, &root, &[]);

    // One host per situation, all pointing at the same server.
    let mut zone = soa("hc.test");
    let lines = |h: &str| records(&keys, &format!("{h}.hc.test"), port, 30);
    let all = lines("all");
    assert_eq!(all.len(), 1 + 9 + 1 + 1 + 1, "{all:#?}");
    zone += &all.join("\n");
    zone += "\n";
    // TXT filtered out: AAAA is next.
    zone += &only(&lines("notxt"), &["AAAA", "TLSA", "A"]).join("\n");
    zone += "\n";
    // TLSA only.
    zone += &only(&lines("tlsa"), &["TLSA", "A"]).join("\n");
    zone += "\n";
    // Nothing but the address: OPTIONS.
    zone += &only(&lines("none"), &["A"]).join("\n");
    zone += "\n";
    // Malformed TXT (bad base64) and a good AAAA set: AAAA is used.
    let mut badtxt = only(&lines("badtxt"), &["TXT", "AAAA", "A"]);
    for l in badtxt.iter_mut().filter(|l| l.contains("\"hc1 ")) {
        *l = l.replacen("\"hc1 A", "\"hc1 +", 1);
    }
    zone += &badtxt.join("\n");
    zone += "\n";
    // No TXT, an AAAA set with a wrong prefix, a good TLSA: TLSA is used.
    let mut badaaaa = only(&lines("badaaaa"), &["AAAA", "TLSA", "A"]);
    let first = badaaaa
        .iter()
        .position(|l| l.contains(" IN AAAA fd0"))
        .unwrap();
    badaaaa[first] = badaaaa[first].replacen(" IN AAAA fd0", " IN AAAA fc0", 1);
    zone += &badaaaa.join("\n");
    zone += "\n";
    // Only a TLSA whose signature byte is flipped, and a second, oversize one.
    let mut badtlsa = only(&lines("badtlsa"), &["TLSA", "A"]);
    let t = badtlsa
        .iter()
        .position(|l| l.contains(" IN TLSA "))
        .unwrap();
    // The last byte of the DER is the last byte of the signature.
    let (head, last) = badtlsa[t].split_at(badtlsa[t].len() - 2);
    let flipped = u8::from_str_radix(last, 16).unwrap() ^ 1;
    badtlsa[t] = format!("{head}{flipped:02X}");
    let oversize = format!(
        "_{port}._tcp.badtlsa.hc.test. 30 IN TLSA 3 0 0 {}",
        "00".repeat(httpcrypt::proto::tlsa::MAX_DER + 1)
    );
    badtlsa.push(oversize);
    zone += &badtlsa.join("\n");
    zone += "\n";
    let zfile = dir.join("hc.test.zone");
    std::fs::write(&zfile, &zone).unwrap();

    let (_nsd, nsd_port) = nsd(dir, &[("hc.test", zfile)]);
    let (_unbound, ub) = unbound(dir, &["hc.test"], nsd_port, &[]);
    let url = |h: &str| format!("http://{h}.hc.test:{port}/index.html");

    // Each method, in the order of spec §6, through the recursive resolver.
    fetch_ok(ub, &url("all"), &["--discovery", "dns"], "dns-txt");
    fetch_ok(ub, &url("notxt"), &["--discovery", "dns"], "dns-aaaa");
    fetch_ok(ub, &url("tlsa"), &["--discovery", "dns"], "dns-tlsa");
    fetch_ok(ub, &url("none"), &["--discovery", "auto"], "options");
    // Authenticated with a pinned identity: TXT and TLSA signatures verify.
    fetch_ok(
        ub,
        &url("all"),
        &[&format!("--identity={identity}")],
        "dns-txt",
    );
    fetch_ok(
        ub,
        &url("tlsa"),
        &[&format!("--identity={identity}"), "--discovery", "dns"],
        "dns-tlsa",
    );
    // DNS only, and DNS has nothing: a clear error, no fallback.
    let o = fetch(ub, &url("none"), &["--discovery", "dns"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("dns-txt: no records; dns-aaaa: no records; dns-tlsa: no records"),
        "{err}"
    );

    // Malformed records are refused with their codes; the next method wins.
    fetch_ok(ub, &url("badtxt"), &["--discovery", "dns"], "dns-aaaa");
    fetch_ok(ub, &url("badaaaa"), &["--discovery", "dns"], "dns-tlsa");
    // Opportunistic mode does not check signatures: the flipped TLSA still
    // names the right key. Authenticated mode refuses it and falls back.
    fetch_ok(ub, &url("badtlsa"), &["--discovery", "dns"], "dns-tlsa");
    fetch_ok(
        ub,
        &url("badtlsa"),
        &[&format!("--identity={identity}")],
        "options",
    );
    let r = addr(ub).to_string();
    let certs = |h: &str, extra: &[&str]| {
        let u = format!("http://{h}.hc.test:{port}/");
        let mut args = vec!["certs", "--discovery", "dns", "--resolver", &r];
        args.extend_from_slice(extra);
        args.push(&u);
        hc(&args)
    };
    let o = certs("badtxt", &[]);
    assert!(
        text(&o.stdout).starts_with("source dns-aaaa\n"),
        "{}",
        text(&o.stdout)
    );
    let pin = format!("--identity={identity}");
    for (host, extra, want) in [
        (
            "badtlsa",
            vec![pin.as_str()],
            &[
                "dns-tlsa: no usable record (",
                "bad_signature",
                "bad_record",
            ][..],
        ),
        ("none", vec![], &["dns-tlsa: no records"][..]),
    ] {
        let o = certs(host, &extra);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{host}: {err}");
        for w in want {
            assert!(err.contains(w), "{host}: {w} not in {err}");
        }
    }
    // The bad TXT is named in the debug log of the discovery.
    let o = hc(&[
        "--log",
        "httpcrypt=debug",
        "certs",
        "--discovery",
        "dns",
        "--resolver",
        &r,
        &format!("http://badtxt.hc.test:{port}/"),
    ]);
    assert!(
        text(&o.stderr).contains("no usable record (bad_base64)"),
        "{}",
        text(&o.stderr)
    );
    let o = certs("badaaaa", &["--log", "httpcrypt=debug"]);
    assert!(
        text(&o.stderr).contains("method=dns-aaaa why=no usable record (bad_record)"),
        "{}",
        text(&o.stderr)
    );

    // Latency of discovery over loopback, per method: median of N lookups
    // with a cold in-process cache (a new discovery each time; Unbound's
    // cache is warm after the first) and with a warm one.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 25;
    let mut table =
        String::from("| method | via | cold (median) | warm (median) |\n|---|---|---|---|\n");
    for (host, method) in [
        ("all", "dns-txt"),
        ("notxt", "dns-aaaa"),
        ("tlsa", "dns-tlsa"),
    ] {
        for (via, server) in [("unbound", ub), ("nsd direct", nsd_port)] {
            let authority = format!("{host}.hc.test:{port}");
            let (cold, warm) = rt.block_on(async {
                use httpcrypt::client::Discovery;
                let mut cold = Vec::new();
                for _ in 0..n {
                    let d = DnsDiscovery::new(Some(addr(server)), Duration::from_secs(2)).unwrap();
                    let t = Instant::now();
                    let f = d.discover(&authority, None).await.unwrap();
                    cold.push(t.elapsed());
                    assert_eq!(f.source.unwrap().as_str(), method);
                }
                let d = DnsDiscovery::new(Some(addr(server)), Duration::from_secs(2)).unwrap();
                d.discover(&authority, None).await.unwrap();
                let mut warm = Vec::new();
                for _ in 0..n {
                    let t = Instant::now();
                    d.discover(&authority, None).await.unwrap();
                    warm.push(t.elapsed());
                }
                (median(cold), median(warm))
            });
            table += &format!("| {method} | {via} | {cold:.2?} | {warm:.2?} |\n");
        }
    }
    // OPTIONS for comparison: a new client (new connection) each time.
    let options = rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..n {
            let c = httpcrypt::Client::new(httpcrypt::ClientConfig::default());
            let t = Instant::now();
            c.refresh_certs("http", &addr(port).to_string())
                .await
                .unwrap();
            v.push(t.elapsed());
        }
        median(v)
    });
    table += &format!("| options | http, new connection | {options:.2?} | — |\n");
    eprintln!("discovery latency over loopback, N = {n}:\n{table}");
    std::fs::write(
        std::env::temp_dir().join("httpcrypt-dns-latency.md"),
        &table,
    )
    .ok();
}

/// Signs `zone` with a fresh Ed25519 KSK and ZSK; returns the DS line.
fn sign_zone(dir: &Path, zone: &str, file: &Path) -> String {
    let keygen = |ksk: bool| {
        let mut c = Command::new("ldns-keygen");
        c.current_dir(dir).args(["-a", "ED25519"]);
        if ksk {
            c.arg("-k");
        }
        c.arg(zone);
        let o = run(&mut c, Duration::from_secs(20));
        assert!(o.status.success(), "ldns-keygen: {}", text(&o.stderr));
        text(&o.stdout).trim().to_string()
    };
    let ksk = keygen(true);
    let zsk = keygen(false);
    let o = run(
        Command::new("ldns-signzone").current_dir(dir).args([
            "-o",
            zone,
            file.to_str().unwrap(),
            &ksk,
            &zsk,
        ]),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "ldns-signzone: {}", text(&o.stderr));
    std::fs::read_to_string(dir.join(format!("{ksk}.ds")))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn dnssec_identity_through_validating_unbound() {
    if !have(&["nsd", "unbound", "dig", "ldns-keygen", "ldns-signzone"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (keys, root, identity) = site(dir);
    let (_server, port) = serve(dir, &keys, &root, &[]);
    let lines = |h: &str| records(&keys, h, port, 30);

    // sec.test, signed: "good" publishes the real identity, "forged" another
    // key (validly signed by the zone, but the certificates do not verify
    // under it), "bogus" the real one altered after signing.
    let mut sec = soa("sec.test");
    sec += &lines("good.sec.test").join("\n");
    sec += "\n";
    let forged_id = IdentityKey::from_seed([0x42; 32]).public();
    for l in lines("forged.sec.test") {
        if l.contains("\"hc1-id ") {
            sec += &format!(
                "_httpcrypt-id.forged.sec.test. 30 IN TXT \"{}\"\n",
                forms::format_identity_txt(&forged_id)
            );
        } else {
            sec += &l;
            sec += "\n";
        }
    }
    sec += &lines("bogus.sec.test").join("\n");
    sec += "\n";
    let sec_file = dir.join("sec.test.zone");
    std::fs::write(&sec_file, &sec).unwrap();
    let ds = sign_zone(dir, "sec.test", &sec_file);
    let signed = dir.join("sec.test.zone.signed");
    let tampered = std::fs::read_to_string(&signed)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("_httpcrypt-id.bogus.sec.test.")
                && l.contains("TXT")
                && !l.contains("RRSIG")
            {
                l.replace(&identity, &forged_id.to_b64())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(tampered.contains(&forged_id.to_b64()));
    std::fs::write(&signed, tampered + "\n").unwrap();

    // plain.test: not signed, so never validated.
    let mut plain = soa("plain.test");
    plain += &lines("www.plain.test").join("\n");
    plain += "\n";
    let plain_file = dir.join("plain.test.zone");
    std::fs::write(&plain_file, plain).unwrap();

    let (_nsd, nsd_port) = nsd(dir, &[("sec.test", signed), ("plain.test", plain_file)]);
    let (mut resolver, ub) = unbound(dir, &["sec.test", "plain.test"], nsd_port, &[ds]);
    let url = |h: &str| format!("http://{h}:{port}/index.html");
    // Unbound validates before any fetch relies on it.
    wait_validated(&mut resolver, ub, "_httpcrypt-id.good.sec.test", "TXT");

    // The validated identity authenticates the keys: no pin needed.
    fetch_ok(ub, &url("good.sec.test"), &["--dnssec-identity"], "dns-txt");
    fetch_ok(
        ub,
        &url("good.sec.test"),
        &["--dnssec-identity", "--discovery", "dns"],
        "dns-txt",
    );
    // A validated identity that did not sign the certificates: refused,
    // and the OPTIONS fallback is checked under it too.
    let o = fetch(ub, &url("forged.sec.test"), &["--dnssec-identity"]);
    assert!(
        !o.status.success(),
        "forged identity accepted: {}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains("bad_signature"),
        "{}",
        text(&o.stderr)
    );
    // Opportunistic mode learns the validated (forged) identity as well and
    // therefore refuses the keys too: DNSSEC upgrades every client.
    let o = fetch(ub, &url("forged.sec.test"), &[]);
    assert!(!o.status.success(), "{}", text(&o.stderr));
    // Bogus (altered after signing): the resolver answers SERVFAIL.
    assert_eq!(
        dig_status(ub, "_httpcrypt-id.bogus.sec.test", "TXT"),
        "SERVFAIL"
    );
    let o = fetch(ub, &url("bogus.sec.test"), &["--dnssec-identity"]);
    assert!(!o.status.success());
    // The error says what the lookup found instead.
    assert!(
        text(&o.stderr).contains("no pinned identity and no DNSSEC-validated")
            && text(&o.stderr).contains("Server Failure"),
        "{}",
        text(&o.stderr)
    );
    // Unsigned: the record is there but carries no AD bit.
    assert_eq!(
        dig("dig", ub, "_httpcrypt-id.www.plain.test", "TXT", false).len(),
        1
    );
    let o = fetch(ub, &url("www.plain.test"), &["--dnssec-identity"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("no pinned identity and no DNSSEC-validated")
            && text(&o.stderr).contains("no AD bit"),
        "{}",
        text(&o.stderr)
    );
    // …while opportunistic mode still works there.
    fetch_ok(ub, &url("www.plain.test"), &[], "dns-txt");
}

/// `tsig-keygen` output: (name, secret).
fn tsig_key(dir: &Path) -> (String, String) {
    let o = run(
        Command::new(which("tsig-keygen").unwrap()).args(["-a", "hmac-sha256", "hc-update"]),
        Duration::from_secs(20),
    );
    let conf = text(&o.stdout);
    std::fs::write(dir.join("key.conf"), &conf).unwrap();
    let secret = conf
        .lines()
        .find(|l| l.contains("secret"))
        .and_then(|l| l.split('"').nth(1))
        .unwrap()
        .to_string();
    ("hc-update".into(), secret)
}

#[test]
fn rfc2136_updates_into_bind_during_rotation() {
    if !have(&["named", "tsig-keygen", "unbound", "dig"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (keys, root, _) = site(dir);
    let (tsig_name, secret) = tsig_key(dir);
    let bind_port = free_port();
    let zone_file = dir.join("dyn.test.zone");
    std::fs::write(&zone_file, soa("dyn.test") + "www IN A 127.0.0.1\n").unwrap();
    let d = dir.display();
    // check-names: BIND refuses AAAA records at `_httpcrypt` names otherwise.
    let conf = format!(
        "include \"{d}/key.conf\";\noptions {{\n  directory \"{d}\";\n  listen-on port {bind_port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  pid-file \"{d}/named.pid\";\n  session-keyfile \"{d}/session.key\";\n  recursion no;\n  dnssec-validation no;\n  notify no;\n  check-names primary ignore;\n}};\ncontrols {{ }};\nzone \"dyn.test\" {{\n  type primary;\n  file \"{}\";\n  update-policy {{ grant {tsig_name} zonesub ANY; }};\n}};\n",
        zone_file.display()
    );
    let conf_path = dir.join("named.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut named = Daemon::start(
        "named",
        Command::new(which("named").unwrap()).args([
            "-g",
            "-n",
            "1",
            "-c",
            conf_path.to_str().unwrap(),
        ]),
        dir,
    );
    wait_dns(&mut named, bind_port, "ns.dyn.test", "A");

    // R = 5 s: the server publishes at start and after every rotation.
    let (mut server, port) = serve(
        dir,
        &keys,
        &root,
        &[
            "--rotation",
            "5",
            "--publish-server",
            &addr(bind_port).to_string(),
            "--publish-zone",
            "dyn.test",
            "--publish-host",
            "www.dyn.test",
            "--tsig-name",
            &tsig_name,
            // The key file tsig-keygen wrote: the secret never appears in argv.
            "--tsig-secret-file",
            dir.join("key.conf").to_str().unwrap(),
        ],
    );
    wait_dns(&mut named, bind_port, "_httpcrypt.www.dyn.test", "TXT");

    // A wrong TSIG secret is refused.
    let o = hc(&[
        "dns",
        "publish",
        "--keys",
        keys.to_str().unwrap(),
        "--host",
        "www.dyn.test",
        "--server",
        &addr(bind_port).to_string(),
        "--zone",
        "dyn.test",
        "--tsig-name",
        &tsig_name,
        "--tsig-secret",
        "c2VjcmV0c2VjcmV0c2VjcmV0",
    ]);
    assert!(!o.status.success(), "unsigned update accepted");
    assert!(
        !text(&o.stderr).contains("no unexpired key"),
        "{}",
        text(&o.stderr)
    );
    // The secret on the command line still works but is warned about.
    let stderr = text(&o.stderr);
    assert!(stderr.contains("warning: --tsig-secret"), "{stderr}");
    // The secret alone in a file (not in argv) is accepted. (The records'
    // TTL is the server's R, so that resolvers follow its rotations.)
    let raw = dir.join("tsig.secret");
    std::fs::write(&raw, format!("{secret}\n")).unwrap();
    let o = hc(&[
        "dns",
        "publish",
        "--keys",
        keys.to_str().unwrap(),
        "--ttl",
        "5",
        "--host",
        "www.dyn.test",
        "--server",
        &addr(bind_port).to_string(),
        "--zone",
        "dyn.test",
        "--tsig-name",
        &tsig_name,
        "--tsig-secret-file",
        raw.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));

    let (_unbound, ub) = unbound(dir, &["dyn.test"], bind_port, &[]);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ok, serials) = rt.block_on(async {
        let d = Arc::new(DnsDiscovery::new(Some(addr(ub)), Duration::from_secs(2)).unwrap());
        let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
            discovery: Some(d.clone()),
            resolver: Some(d),
            options_fallback: false,
            ..Default::default()
        });
        let authority = format!("www.dyn.test:{port}");
        let uri = format!("http://{authority}/index.html");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut ok = 0;
        let mut serials = std::collections::BTreeSet::new();
        // Bounded: 60 s and at most 600 requests.
        for i in 0..600 {
            if Instant::now() > deadline {
                break;
            }
            let req = http::Request::get(&uri).body(bytes::Bytes::new()).unwrap();
            let rsp = client.send(req).await;
            let rsp = rsp.unwrap_or_else(|e| panic!("request {i} failed: {e}"));
            assert_eq!(rsp.status(), 200, "request {i}");
            let body = http_body_util::BodyExt::collect(rsp.into_body())
                .await
                .unwrap()
                .to_bytes();
            assert_eq!(body, INDEX.as_bytes(), "request {i}");
            ok += 1;
            serials.extend(client.cached_keys(&authority).iter().map(|k| k.serial));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (ok, serials)
    });
    server.assert_running();
    assert!(ok >= 100, "only {ok} requests in 60 s");
    // Keys rotated about 12 times; the client followed through DNS.
    assert!(
        serials.len() >= 6,
        "client saw serials {serials:?}: {}",
        server.log()
    );
    // Only unexpired certificates are published (expired ones were removed).
    let now = httpcrypt::clock::unix_now();
    let txt = dig("dig", bind_port, "_httpcrypt.www.dyn.test", "TXT", true);
    assert!(
        !txt.is_empty() && txt.len() <= 16,
        "{} TXT records",
        txt.len()
    );
    for t in &txt {
        let c = forms::parse_txt(t.trim_matches('"').as_bytes()).unwrap();
        assert!(
            u64::from(c.not_after) + 6 >= now,
            "expired serial {} still published",
            c.serial
        );
    }
    assert_eq!(
        dig("dig", bind_port, "_httpcrypt.www.dyn.test", "AAAA", false).len(),
        9
    );
    let tlsa = dig(
        "dig",
        bind_port,
        &format!("_{port}._tcp.www.dyn.test"),
        "TLSA",
        true,
    );
    assert_eq!(tlsa.len(), txt.len());
}

#[test]
fn embedded_authority_answers_dig_and_kdig() {
    if !have(&["dig", "kdig"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keys = dir.join("keys");
    let o = hc(&["keygen", "--static", "--dir", keys.to_str().unwrap()]);
    assert!(o.status.success());
    let dns_port = free_port();
    let k = keys.to_str().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "dns",
        "serve",
        "--keys",
        k,
        "--zone",
        "emb.test",
        "--host",
        "www.emb.test",
        "--port",
        "8443",
        "--ttl",
        "120",
        "--address",
        "127.0.0.1",
        "--listen",
        &addr(dns_port).to_string(),
    ]);
    let mut d = Daemon::start("httpcrypt-dns-serve", &mut cmd, dir);
    wait_dns(&mut d, dns_port, "emb.test", "SOA");
    let want = records(&keys, "www.emb.test", 8443, 120);
    // Every record kind, over UDP (dig) and TCP (kdig), matches the zone lines.
    for (name, rtype) in [
        ("_httpcrypt.www.emb.test.", "TXT"),
        ("_httpcrypt.www.emb.test.", "AAAA"),
        ("_8443._tcp.www.emb.test.", "TLSA"),
        ("_httpcrypt-id.www.emb.test.", "TXT"),
        ("www.emb.test.", "A"),
    ] {
        let mut expect: Vec<String> = want
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("{name} 120 IN {rtype} ")))
            .map(|s| s.to_ascii_lowercase().replace(' ', ""))
            .collect();
        expect.sort();
        assert!(!expect.is_empty(), "{name} {rtype}");
        for (tool, tcp) in [("dig", false), ("kdig", true)] {
            let mut got: Vec<String> = dig(tool, dns_port, name, rtype, tcp)
                .iter()
                .map(|s| s.to_ascii_lowercase().replace(' ', ""))
                .collect();
            got.sort();
            assert_eq!(got, expect, "{tool} {name} {rtype}");
        }
    }
    let soa = dig("dig", dns_port, "emb.test", "SOA", false);
    assert!(
        soa[0].starts_with("ns.emb.test. hostmaster.emb.test. 1 "),
        "{soa:?}"
    );
    assert_eq!(
        dig("kdig", dns_port, "emb.test", "NS", true),
        ["ns.emb.test."]
    );
    assert_eq!(dig_status(dns_port, "_tcp.www.emb.test", "TXT"), "NOERROR");
    assert_eq!(dig_status(dns_port, "nothing.emb.test", "TXT"), "NXDOMAIN");
    assert_eq!(dig_status(dns_port, "example.org", "A"), "REFUSED");
    // The records parse back with the core's readers.
    let txt = dig("dig", dns_port, "_httpcrypt.www.emb.test", "TXT", false);
    let cert = forms::parse_txt(txt[0].trim_matches('"').as_bytes()).unwrap();
    let id = dig("dig", dns_port, "_httpcrypt-id.www.emb.test", "TXT", false);
    let id = forms::parse_identity_txt(id[0].trim_matches('"').as_bytes()).unwrap();
    cert.verify(&id).unwrap();
    d.assert_running();
}

#[test]
fn embedded_authority_follows_rotation() {
    if !have(&["dig"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (keys, root, _) = site(dir);
    let (_server, port) = serve(dir, &keys, &root, &["--rotation", "2"]);
    let dns_port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "dns",
        "serve",
        "--keys",
        keys.to_str().unwrap(),
        "--zone",
        "rot.test",
        "--host",
        "www.rot.test",
        "--port",
        &port.to_string(),
        "--ttl",
        "2",
        "--address",
        "127.0.0.1",
        "--reload",
        "1",
        "--listen",
        &addr(dns_port).to_string(),
    ]);
    let mut d = Daemon::start("httpcrypt-dns-serve", &mut cmd, dir);
    wait_dns(&mut d, dns_port, "rot.test", "SOA");
    let serial = || -> u32 {
        let soa = dig("dig", dns_port, "rot.test", "SOA", false);
        soa[0].split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let first = serial();
    let deadline = Instant::now() + Duration::from_secs(15);
    while serial() < first + 2 {
        assert!(
            Instant::now() < deadline,
            "zone serial stayed at {}",
            serial()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // And a client finds the current key through it.
    fetch_ok(
        dns_port,
        &format!("http://www.rot.test:{port}/index.html"),
        &["--discovery", "dns"],
        "dns-txt",
    );
}

/// A query in wire form: `id`, recursion desired, one question, and an OPT
/// record offering `edns` bytes if given.
fn query_bytes(id: u16, name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let mut q = Vec::new();
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    if let Some(size) = edns {
        q.push(0);
        q.extend_from_slice(&41u16.to_be_bytes());
        q.extend_from_slice(&size.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    q
}

/// The TC bit of a response.
fn truncated(rsp: &[u8]) -> bool {
    rsp.len() >= 12 && rsp[2] & 0x02 != 0
}

fn ancount(rsp: &[u8]) -> u16 {
    u16::from_be_bytes([rsp[6], rsp[7]])
}

#[test]
fn embedded_authority_is_no_amplifier() {
    if !have(&["dig"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keys = dir.join("keys");
    // Three live keys: their TLSA set is larger than 512 bytes.
    let store = httpcrypt::keys::KeyStore::create(&keys, false).unwrap();
    let now = httpcrypt::clock::unix_now();
    for _ in 0..3 {
        store.rotate(now, Duration::from_secs(3600)).unwrap();
    }
    let dns_port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "dns",
        "serve",
        "--keys",
        keys.to_str().unwrap(),
        "--zone",
        "a.test",
        "--host",
        "www.a.test",
        "--port",
        "443",
        "--address",
        "127.0.0.1",
        "--rrl-rate",
        "20",
        "--listen",
        &addr(dns_port).to_string(),
    ]);
    let mut d = Daemon::start("httpcrypt-dns-serve", &mut cmd, dir);
    wait_dns(&mut d, dns_port, "a.test", "SOA");
    // Over TCP the whole set.
    assert_eq!(
        dig("dig", dns_port, "_443._tcp.www.a.test", "TLSA", true).len(),
        3
    );
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr(dns_port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 65_536];
    let mut ask = |q: &[u8]| -> Vec<u8> {
        sock.send(q).unwrap();
        let n = sock.recv(&mut buf).unwrap();
        buf[..n].to_vec()
    };
    // RFC 1035: without EDNS at most 512 bytes, with TC when cut.
    let q = query_bytes(1, "_443._tcp.www.a.test", 52, None);
    assert_eq!(q.len(), 38);
    let rsp = ask(&q);
    assert!(rsp.len() <= 512, "{} bytes", rsp.len());
    assert!(truncated(&rsp), "TC not set");
    // With EDNS (1232 offered) it fits.
    let rsp = ask(&query_bytes(2, "_443._tcp.www.a.test", 52, Some(1232)));
    assert!(rsp.len() > 512 && rsp.len() <= 1232, "{} bytes", rsp.len());
    assert!(!truncated(&rsp));
    assert_eq!(ancount(&rsp), 3);
    // Offering more than the cap changes nothing; offering less than the
    // answer truncates.
    let rsp = ask(&query_bytes(3, "_443._tcp.www.a.test", 52, Some(4096)));
    assert!(rsp.len() <= 1232 && !truncated(&rsp));
    let rsp = ask(&query_bytes(4, "_443._tcp.www.a.test", 52, Some(600)));
    assert!(rsp.len() <= 600 && truncated(&rsp), "{} bytes", rsp.len());
    // RFC 8482: ANY gets one RRset (here TXT and AAAA live at the name).
    let rsp = ask(&query_bytes(5, "_httpcrypt.www.a.test", 255, Some(1232)));
    assert!(!truncated(&rsp));
    let n = ancount(&rsp);
    assert!(
        n == 3 || n == 9,
        "{n} records: one RRset, TXT (3) or AAAA (9)"
    );
    let any = dig_full(
        dns_port,
        "_httpcrypt.www.a.test",
        "ANY",
        &["+noall", "+answer"],
    );
    let types: std::collections::BTreeSet<&str> = any
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    assert_eq!(types.len(), 1, "{any}");

    // A burst from one source: 20 answers a second, every second excess
    // response slipped as an empty truncated answer, the rest dropped.
    std::thread::sleep(Duration::from_millis(1100));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr(dns_port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    let start = Instant::now();
    for id in 0..200u16 {
        sock.send(&query_bytes(id, "www.a.test", 1, None)).unwrap();
    }
    // The server refills its budget by the time it reads each query, which
    // is before the last reply arrives here: that bounds the refill.
    let mut last = start.elapsed();
    let (mut answered, mut slipped) = (0u32, 0u32);
    while let Ok(n) = sock.recv(&mut buf) {
        last = start.elapsed();
        if truncated(&buf[..n]) {
            assert_eq!(ancount(&buf[..n]), 0);
            slipped += 1;
        } else {
            answered += 1;
        }
    }
    let allowed = 20 + (20.0 * last.as_secs_f64()).ceil() as u32 + 1;
    assert!(
        answered <= allowed,
        "{answered} answers (at most {allowed}) within {last:?}"
    );
    assert!(answered >= 15, "{answered} answers");
    assert!(
        slipped >= 60 && answered + slipped < 200,
        "{slipped} slipped, {answered} answered"
    );
    d.assert_running();
}
