//! The server side of suite 2 (spec/hybrid.md) over real sockets:
//! `httpcrypt serve --pq off|on|only` checked with raw HTTP and requests
//! sealed by proto's `HybridRequest`; the ML-KEM key's life across
//! rotations, its file's permissions, `keys show` and the DNS records.
//! Every process is a child killed on drop, every address is 127.0.0.1,
//! and every loop is bounded in count and time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{exchange, wire, RawResponse, Sealed};
use httpcrypt::clock::unix_now;
use httpcrypt::proto::client::{ClientCredential, PreparedRequest};
use httpcrypt::proto::hybrid::cert::{parse_cert_list, HybridCert};
use httpcrypt::proto::hybrid::{Encapsulation, HybridRequest, KemPublic, CIPHERTEXT_LEN};
use httpcrypt::proto::inner::{field, Field, RequestHead, ResponseHead};
use httpcrypt::proto::outer::{self, Form, Mount};
use httpcrypt::proto::ticket::{Ticket, TICKET_FIELD};
use httpcrypt::proto::{cert, replay, stream, Error, IdentityPublic, KexSecret, Limits};
use rand_core::{OsRng, RngCore};

const HELLO: &[u8] = b"hello, post-quantum world\n";
const HYBRID_REQUIRED: &str = "urn:httpcrypt:hybrid-required";
const MALFORMED: &str = "urn:httpcrypt:malformed";

/// A key directory, a site root with `hello.txt`, and the identity.
struct Site {
    dir: tempfile::TempDir,
    identity: IdentityPublic,
}

impl Site {
    fn new(extra: &[&str]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let mut args = vec!["keygen", "--dir", keys.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = common::run(&args, Duration::from_secs(30));
        assert!(out.status.success(), "keygen: {}", out.stderr_text());
        let identity = IdentityPublic::from_b64(out.stdout_text().trim()).unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("hello.txt"), HELLO).unwrap();
        Site { dir, identity }
    }

    fn keys(&self) -> std::path::PathBuf {
        self.dir.path().join("keys")
    }

    fn serve(&self, extra: &[&str]) -> common::Proc {
        common::serve(&self.keys(), &self.dir.path().join("root"), extra)
    }
}

fn mount() -> Mount {
    Mount::new("").unwrap()
}

fn options(addr: SocketAddr, path: &str) -> RawResponse {
    let host = addr.to_string();
    exchange(addr, &wire("OPTIONS", path, &[("Host", &host)], b"")).0
}

/// The suite-2 certificates and key texts of `OPTIONS /pq`, verified.
fn hybrid_keys(addr: SocketAddr, identity: &IdentityPublic) -> Vec<(HybridCert, KemPublic)> {
    let rsp = options(addr, "/pq");
    assert_eq!(rsp.status, 200, "{rsp:?}");
    assert_eq!(rsp.header("content-type"), Some(outer::CERTS_TYPE));
    let max_age = rsp.header("cache-control").unwrap();
    assert!(max_age.starts_with("max-age="), "{max_age}");
    let list = parse_cert_list(&rsp.body).unwrap();
    assert_eq!(list.classical().count(), 0, "suite-2 certificates only");
    let pairs: Vec<_> = list
        .hybrid()
        .map(|c| {
            c.verify(identity).unwrap();
            (c.clone(), list.kem_for(c).expect("its key text").clone())
        })
        .collect();
    assert!(!pairs.is_empty());
    pairs
}

/// One hybrid request to `cert`/`ek` of an inner `GET target`.
struct Hybrid {
    req: HybridRequest,
}

impl Hybrid {
    fn new(cert: &HybridCert, ek: &KemPublic) -> Hybrid {
        let client = KexSecret::generate(&mut OsRng);
        let mut n0 = [0u8; 24];
        OsRng.fill_bytes(&mut n0);
        let req = HybridRequest::new(
            cert,
            ek,
            &client,
            &mut OsRng,
            n0,
            &outer::random_pad(&mut OsRng),
            &outer::random_pad(&mut OsRng),
        )
        .unwrap();
        Hybrid { req }
    }

    fn stream(&self, target: &str) -> Vec<u8> {
        let mut head = RequestHead::new("GET", target);
        head.fields
            .push(Field::new("Date", replay::format_date(unix_now())));
        let mut plain = Vec::new();
        head.encode(&mut plain);
        let mut out = Vec::new();
        stream::seal_all(self.req.sealer(), &plain, 16 * 1024, &mut out).unwrap();
        out
    }

    fn outer(&self, form: Form, addr: SocketAddr, target: &str) -> Vec<u8> {
        self.req
            .encode_outer(form, &mount(), &addr.to_string(), &self.stream(target))
    }

    fn open(&self, rsp: &RawResponse) -> Result<(ResponseHead, Vec<u8>), Error> {
        assert_eq!(rsp.status, 200, "{rsp:?}");
        self.req
            .open_response_to("GET", &rsp.body, &Limits::default())
    }
}

/// The v1 request of `GET /hello.txt` to the first v1 certificate.
fn v1_request(addr: SocketAddr, certs: &[cert::KeyCert]) -> (Sealed, Vec<u8>) {
    let sealed = Sealed::new(certs, None, &mount());
    let stream = sealed.stream("GET", "/hello.txt", unix_now(), b"");
    let bytes = sealed.post(&addr.to_string(), &stream);
    (sealed, bytes)
}

#[test]
fn off_by_default_has_no_pq_path() {
    let site = Site::new(&[]);
    let server = site.serve(&[]);
    assert_eq!(options(server.addr, "/pq").status, 404);
    let server = site.serve(&["--pq", "off"]);
    assert_eq!(options(server.addr, "/pq").status, 404);
    assert!(!site.keys().join("kem").exists(), "no ML-KEM key when off");
    let (sealed, bytes) = v1_request(server.addr, &common::certs(server.addr, &mount()));
    let (rsp, _) = exchange(server.addr, &bytes);
    assert_eq!(sealed.open(&rsp).1, HELLO);
}

#[test]
fn on_takes_both_suites() {
    let site = Site::new(&[]);
    let server = site.serve(&["--pq", "on"]);
    let addr = server.addr;
    // `OPTIONS /` lists suite-1 certificates, which a v1 reader parses.
    let v1 = common::certs(addr, &mount());
    assert_eq!(v1.len(), 1);
    let pairs = hybrid_keys(addr, &site.identity);
    assert_eq!(pairs.len(), 1);
    let (hc, ek) = &pairs[0];
    assert_eq!(hc.kex_public, v1[0].kex_public, "one kex key, both suites");

    // A hybrid POST and a hybrid GET.
    for form in [Form::Post, Form::Get] {
        let h = Hybrid::new(hc, ek);
        let (rsp, _) = exchange(addr, &h.outer(form, addr, "/hello.txt"));
        let (head, body) = h.open(&rsp).unwrap();
        assert_eq!((head.status, body.as_slice()), (200, HELLO), "{form:?}");
    }
    // A v1 request still works.
    let (sealed, bytes) = v1_request(addr, &v1);
    let (rsp, _) = exchange(addr, &bytes);
    assert_eq!(sealed.open(&rsp).1, HELLO);

    // A POST whose body is shorter than the ciphertext: bad_ciphertext.
    let h = Hybrid::new(hc, ek);
    let mut bytes = Vec::new();
    outer::encode_request_head(
        Form::Post,
        &mount().nonce_path(h.req.n0()),
        &addr.to_string(),
        h.req.cookie(),
        CIPHERTEXT_LEN - 1,
        &mut bytes,
    );
    bytes.extend_from_slice(&h.req.ciphertext()[..CIPHERTEXT_LEN - 1]);
    let (rsp, _) = exchange(addr, &bytes);
    assert_eq!(rsp.status, 400, "{rsp:?}");
    assert_eq!(rsp.problem().type_uri, MALFORMED);
    assert!(rsp.title().contains("ciphertext"), "{}", rsp.title());

    // A ciphertext made for another ML-KEM key: the keys differ, and the
    // request fails as under any wrong key (integrity).
    let other = httpcrypt::proto::hybrid::KemSecret::generate(&mut OsRng);
    let mut m = [0u8; 32];
    OsRng.fill_bytes(&mut m);
    let (ct_m, ss_m) = other.public().encapsulate_with(&m);
    let client = KexSecret::generate(&mut OsRng);
    let e = Encapsulation::from_parts(&hc.kex_public, &client, ct_m, &ss_m).unwrap();
    let mut n0 = [0u8; 24];
    OsRng.fill_bytes(&mut n0);
    let h = Hybrid {
        req: HybridRequest::from_encapsulation(hc, e, n0, "a", "b").unwrap(),
    };
    let (rsp, _) = exchange(addr, &h.outer(Form::Post, addr, "/hello.txt"));
    assert_eq!(rsp.status, 200, "a sealed inner problem: {rsp:?}");
    assert_eq!(h.open(&rsp).err(), Some(Error::Integrity));

    // An unknown key ID: the problem lists both suites apart.
    let mut stale = hc.clone();
    stale.kex_public = KexSecret::generate(&mut OsRng).public().to_owned();
    let h = Hybrid::new(&stale, ek);
    let (rsp, _) = exchange(addr, &h.outer(Form::Post, addr, "/hello.txt"));
    assert_eq!(rsp.status, 400, "{rsp:?}");
    let doc: serde_json::Value = serde_json::from_slice(&rsp.body).unwrap();
    assert_eq!(doc["certs"][0].as_str().unwrap(), v1[0].to_text());
    assert_eq!(doc["hybrid_certs"][0].as_str().unwrap(), hc.to_text());
}

#[test]
fn a_ticket_resumes_a_hybrid_session() {
    let site = Site::new(&[]);
    for mode in ["on", "only"] {
        let server = site.serve(&["--pq", mode]);
        let addr = server.addr;
        let pairs = hybrid_keys(addr, &site.identity);
        let (hc, ek) = &pairs[0];
        let h = Hybrid::new(hc, ek);
        let (rsp, _) = exchange(addr, &h.outer(Form::Post, addr, "/hello.txt"));
        let (head, _) = h.open(&rsp).unwrap();
        let ticket = Ticket::from_field(field(&head.fields, TICKET_FIELD).unwrap()).unwrap();
        for _ in 0..2 {
            let mut n0 = [0u8; 24];
            OsRng.fill_bytes(&mut n0);
            let prepared = PreparedRequest::for_key(
                &hc.kex_public,
                ClientCredential::Ticket(&ticket, h.req.session_key()),
                n0,
                &outer::random_pad(&mut OsRng),
                &outer::random_pad(&mut OsRng),
            )
            .unwrap();
            let resumed = Sealed {
                prepared,
                mount: mount(),
            };
            let stream = resumed.stream("GET", "/hello.txt", unix_now(), b"");
            let (rsp, _) = exchange(addr, &resumed.post(&addr.to_string(), &stream));
            assert_eq!(resumed.open(&rsp).1, HELLO, "--pq {mode}");
        }
    }
}

#[test]
fn only_refuses_classical_fresh_keys() {
    let site = Site::new(&[]);
    // Learn the v1 certificate from a server that still lists it.
    let v1 = {
        let server = site.serve(&["--pq", "on"]);
        common::certs(server.addr, &mount())
    };
    let server = site.serve(&["--pq", "only"]);
    let addr = server.addr;
    let rsp = options(addr, "/");
    assert_eq!(rsp.status, 200);
    assert_eq!(
        common::certs(addr, &mount()),
        v1,
        "the v1 certificates are listed, so a v1 client is told hybrid_required"
    );
    let (_, bytes) = v1_request(addr, &v1);
    let (rsp, _) = exchange(addr, &bytes);
    assert_eq!(rsp.status, 400, "{rsp:?}");
    assert_eq!(rsp.problem().type_uri, HYBRID_REQUIRED);

    let pairs = hybrid_keys(addr, &site.identity);
    let h = Hybrid::new(&pairs[0].0, &pairs[0].1);
    let (rsp, _) = exchange(addr, &h.outer(Form::Post, addr, "/hello.txt"));
    assert_eq!(h.open(&rsp).unwrap().1, HELLO);
}

/// The suite-2 certificates stored in a key directory, by serial.
fn stored_hybrid(keys: &Path) -> BTreeMap<u32, HybridCert> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(keys.join("kex")).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        if let Some(line) = text.lines().find_map(|l| l.strip_prefix("hybrid ")) {
            let c = HybridCert::from_text(line).unwrap();
            out.insert(c.serial, c);
        }
    }
    out
}

#[test]
fn the_kem_key_lives_k_rotations() {
    let site = Site::new(&[]);
    let keys = site.keys();
    let server = site.serve(&["--pq", "on", "--rotation", "1", "--kem-every", "3"]);
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut stored = stored_hybrid(&keys);
    while stored.len() < 7 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        stored = stored_hybrid(&keys);
    }
    assert!(stored.len() >= 7, "{} keys: {}", stored.len(), server.log());
    let hash = |s: u32| stored[&s].kem_hash;
    assert_eq!(hash(1), hash(2));
    assert_eq!(hash(1), hash(3));
    assert_ne!(hash(3), hash(4), "a new ML-KEM key with the 4th kex key");
    assert_eq!(hash(4), hash(6));
    assert_ne!(hash(6), hash(7));
    // Every suite-2 certificate held is served, with the two key texts.
    let pairs = hybrid_keys(server.addr, &site.identity);
    let h = Hybrid::new(&pairs[0].0, &pairs[0].1);
    let (rsp, _) = exchange(server.addr, &h.outer(Form::Post, server.addr, "/hello.txt"));
    assert_eq!(h.open(&rsp).unwrap().1, HELLO);
    // Each ML-KEM key is a private file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let files: Vec<_> = std::fs::read_dir(keys.join("kem"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(files.len() >= 2, "{files:?}");
        for f in files {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }
}

#[cfg(unix)]
#[test]
fn the_kem_seed_is_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new(&["--static", "--pq"]);
    let keys = site.keys();
    let seed = keys.join("kem").join("0000000001.key");
    let mode = std::fs::metadata(&seed).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = common::run(
        &["keys", "show", "--keys", keys.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr_text()
            .contains(&format!("chmod 600 {}", seed.display())),
        "{}",
        out.stderr_text()
    );
}

#[test]
fn keys_show_and_dns_records_name_suite_2() {
    let site = Site::new(&["--static", "--pq"]);
    let keys = site.keys();
    let stored = stored_hybrid(&keys);
    let hc = &stored[&1];
    let out = common::run(
        &["keys", "show", "--keys", keys.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("suite 2"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&hc.kid().to_b64()), "{line}");
    assert!(
        line.contains(&httpcrypt::proto::b64::encode(&hc.kem_hash.0)),
        "{line}"
    );

    let out = common::run(
        &[
            "dns",
            "records",
            "--keys",
            keys.to_str().unwrap(),
            "--host",
            "www.example.com",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let zone = out.stdout_text();
    let lines = |owner: &str, rtype: &str| -> Vec<String> {
        zone.lines()
            .filter(|l| l.starts_with(owner) && l.contains(&format!(" IN {rtype} ")))
            .map(str::to_string)
            .collect()
    };
    let txt = lines("_httpcrypt-pq.www.example.com.", "TXT");
    assert_eq!(txt.len(), 1, "{zone}");
    assert!(
        txt[0].contains(&format!("\"{}\"", hc.to_text())),
        "{}",
        txt[0]
    );
    assert_eq!(
        lines("_httpcrypt-pq.www.example.com.", "AAAA").len(),
        11,
        "{zone}"
    );
    let kem = lines("_httpcrypt-kem.www.example.com.", "TXT");
    assert_eq!(kem.len(), 1, "{zone}");
    // Seven strings of at most 255 characters that join to the key text.
    let strings: Vec<&str> = kem[0].split('"').skip(1).step_by(2).collect();
    assert_eq!(strings.len(), 7, "{}", kem[0]);
    assert!(strings.iter().all(|s| s.len() <= 255));
    let joined: String = strings.concat();
    let ek = KemPublic::from_text(&joined).unwrap();
    ek.check(hc).unwrap();
    // The v1 names are still there.
    assert_eq!(
        lines("_httpcrypt.www.example.com.", "AAAA").len(),
        9,
        "{zone}"
    );
}

#[test]
fn a_fleet_shares_its_kem_keys() {
    let site = Site::new(&[]);
    let out = common::run(
        &[
            "fleet",
            "init",
            "--keys",
            site.keys().to_str().unwrap(),
            "--period",
            "2",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "fleet init: {}", out.stderr_text());
    let instance = |name: &str| {
        let keys = site.dir.path().join(format!("keys-{name}"));
        common::copy_dir(&site.keys(), &keys);
        common::serve(
            &keys,
            &site.dir.path().join("root"),
            &["--pq", "on", "--kem-every", "3"],
        )
    };
    let (a, b) = (instance("a"), instance("b"));
    // Both instances hold the same suite-2 keys (compared within one
    // epoch, retried across a boundary), and each answers a hybrid request
    // made for the other.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ka, kb) = (
            hybrid_keys(a.addr, &site.identity),
            hybrid_keys(b.addr, &site.identity),
        );
        if ka == kb {
            let (cert, ek) = ka.last().unwrap();
            let h = Hybrid::new(cert, ek);
            let (rsp, _) = exchange(b.addr, &h.outer(Form::Post, b.addr, "/hello.txt"));
            assert_eq!(h.open(&rsp).unwrap().1, HELLO);
            break;
        }
        assert!(Instant::now() < deadline, "{ka:?} != {kb:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Across epochs, the ML-KEM key changes every third one.
    std::thread::sleep(Duration::from_secs(7));
    let pairs = hybrid_keys(a.addr, &site.identity);
    let window = |c: &HybridCert| c.serial / 3;
    for (c1, _) in &pairs {
        for (c2, _) in &pairs {
            assert_eq!(
                window(c1) == window(c2),
                c1.kem_hash == c2.kem_hash,
                "serials {} and {}",
                c1.serial,
                c2.serial
            );
        }
    }
}

#[test]
fn a_stalled_ciphertext_times_out() {
    let site = Site::new(&[]);
    let server = site.serve(&["--pq", "on", "--body-timeout", "1"]);
    let addr = server.addr;
    let pairs = hybrid_keys(addr, &site.identity);
    let h = Hybrid::new(&pairs[0].0, &pairs[0].1);
    let whole = h.outer(Form::Post, addr, "/hello.txt");
    let head_end = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut s = common::connect(addr);
    std::io::Write::write_all(&mut s, &whole[..head_end + 500]).unwrap();
    let started = Instant::now();
    let mut r = std::io::BufReader::new(s);
    let rsp = common::read_response(&mut r).expect("an answer");
    assert_eq!(rsp.status, 408, "{rsp:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// SIGHUP re-reads the key directory with its suite-2 certificates: a kex
/// key copied in is served in both suites.
#[test]
fn sighup_reloads_suite_2_keys() {
    let site = Site::new(&[]);
    let server = site.serve(&["--pq", "on", "--log", "info"]);
    assert_eq!(hybrid_keys(server.addr, &site.identity).len(), 1);
    httpcrypt::keys::KeyStore::open(&site.keys())
        .unwrap()
        .with_hybrid(24)
        .rotate(unix_now(), Duration::from_secs(3600))
        .unwrap();
    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log().contains("key directory reloaded") {
        assert!(Instant::now() < deadline, "no reload: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let pairs = hybrid_keys(server.addr, &site.identity);
    assert_eq!(pairs.len(), 2);
    assert_eq!(
        pairs[0].1, pairs[1].1,
        "the copied-in key takes the same ML-KEM key"
    );
    for (cert, ek) in &pairs {
        let h = Hybrid::new(cert, ek);
        let (rsp, _) = exchange(server.addr, &h.outer(Form::Post, server.addr, "/hello.txt"));
        assert_eq!(h.open(&rsp).unwrap().1, HELLO, "serial {}", cert.serial);
    }
}

/// The gateway takes the same flags: `--pq only` serves hybrid requests
/// and refuses classical ones by name.
#[test]
fn the_gateway_takes_pq_only() {
    let site = Site::new(&[]);
    let upstream = common::upstream();
    let gw = common::gateway(&site.keys(), upstream.addr, &["--pq", "only"]);
    let pairs = hybrid_keys(gw.addr, &site.identity);
    let h = Hybrid::new(&pairs[0].0, &pairs[0].1);
    let (rsp, _) = exchange(gw.addr, &h.outer(Form::Post, gw.addr, "/echo/pq"));
    let (head, body) = h.open(&rsp).unwrap();
    assert_eq!(head.status, 200);
    let echo: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(echo.to_string().contains("/echo/pq"), "{echo}");
    // The v1 certificates stay listed; a v1 request is refused by name.
    let v1 = common::certs(gw.addr, &mount());
    assert!(!v1.is_empty());
    let (_, bytes) = v1_request(gw.addr, &v1);
    let (rsp, _) = exchange(gw.addr, &bytes);
    assert_eq!(rsp.status, 400, "{rsp:?}");
    assert_eq!(rsp.problem().type_uri, HYBRID_REQUIRED);
}
