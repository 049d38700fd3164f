//! Resumption, replay defence, key rotation and scale-out over real sockets
//! (spec §6.7, §7, §8): fleets of `httpcrypt serve` instances that share a
//! key ratchet, tickets across instances, replays of recorded requests
//! with and without a shared Redis strike register, the stale-`Date`
//! retry, the session cache's CPU saving, and the token demand. Every
//! process is a child killed on drop, every address is 127.0.0.1, and every
//! loop is bounded in count and time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{certs, exchange, Proc, RawResponse, Relay, Sealed};
use http_body_util::BodyExt;
use httpcrypt::client::{BoxFuture, Discovered, Discovery, KeySource, OuterExchange};
use httpcrypt::clock::unix_now;
use httpcrypt::proto::cert::{DiscoveredKey, KeyCert};
use httpcrypt::proto::client::ClientCredential;
use httpcrypt::proto::inner::{field, ResponseHead};
use httpcrypt::proto::outer::Mount;
use httpcrypt::proto::ticket::{Ticket, TICKET_FIELD};
use httpcrypt::proto::{b64, replay, token, IdentityPublic};
use httpcrypt::{Client, ClientConfig, KeyPolicy};
use rand_core::{OsRng, RngCore};

const REPLAY: &str = "urn:httpcrypt:replay";
const STALE: &str = "urn:httpcrypt:stale";
const OVERLOADED: &str = "urn:httpcrypt:overloaded";
const TOKEN_REQUIRED: &str = "urn:httpcrypt:token-required";

const HELLO: &[u8] = b"hello from every instance\n";

/// A key directory with a fleet ratchet, a site root, and instances
/// started from copies of the key directory (as an operator would).
struct Fleet {
    dir: tempfile::TempDir,
    identity: IdentityPublic,
}

impl Fleet {
    /// `keygen` and `fleet init --period PERIOD`.
    fn new(period: u64) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let identity = IdentityPublic::from_b64(&common::keygen(&keys, false)).unwrap();
        let out = common::run(
            &[
                "fleet",
                "init",
                "--keys",
                keys.to_str().unwrap(),
                "--period",
                &period.to_string(),
            ],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "fleet init: {}", out.stderr_text());
        assert!(keys.join("fleet").exists());
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("hello.txt"), HELLO).unwrap();
        std::fs::write(root.join("mid.bin"), common::noise(40_000, 3)).unwrap();
        Fleet { dir, identity }
    }

    /// `serve` on a fresh copy of the key directory.
    fn instance(&self, name: &str, extra: &[&str]) -> Proc {
        let keys = self.dir.path().join(format!("keys-{name}"));
        common::copy_dir(&self.dir.path().join("keys"), &keys);
        common::serve(&keys, &self.root(), extra)
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.root().join(name)).unwrap()
    }

    /// The certificates of `server` by `OPTIONS`, all signed by the identity.
    fn certs(&self, server: &Proc) -> Vec<KeyCert> {
        let c = certs(server.addr, &Mount::default());
        assert!(!c.is_empty());
        for cert in &c {
            cert.verify(&self.identity).unwrap();
        }
        c
    }

    fn sealed(&self, server: &Proc) -> Sealed {
        Sealed::new(&self.certs(server), Some(&self.identity), &Mount::default())
    }
}

/// A sealed `GET /hello.txt` with the current `Date`, as POST-form bytes.
fn get_hello(sealed: &Sealed, host: &str) -> Vec<u8> {
    sealed.post(host, &sealed.stream("GET", "/hello.txt", unix_now(), b""))
}

/// Opens a sealed answer that must be an inner 200 carrying `HELLO`.
fn assert_hello(sealed: &Sealed, rsp: &RawResponse) -> ResponseHead {
    let (head, body) = sealed.open(rsp);
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(body, HELLO);
    head
}

/// The key ID (or ticket ID) a request named: the first 14 characters of
/// its cookie (spec §4.1).
fn cookie_id(x: &OuterExchange) -> String {
    let c = x.request_headers.get(http::header::COOKIE).unwrap();
    c.to_str().unwrap()[..14].to_string()
}

/// Key discovery that always returns the certificates of one instance
/// (fetched from it by `OPTIONS`), whatever authority is asked for: the
/// client then talks to every instance with instance A's certificates.
#[derive(Debug)]
struct CertsOf {
    client: Client,
    authority: String,
    lookups: AtomicUsize,
    /// Every key ID it handed out.
    kids: std::sync::Mutex<BTreeSet<String>>,
}

impl CertsOf {
    fn new(server: &Proc, identity: IdentityPublic) -> Arc<CertsOf> {
        Arc::new(CertsOf {
            client: Client::new(ClientConfig {
                identity: Some(identity),
                ..Default::default()
            }),
            authority: server.addr.to_string(),
            lookups: AtomicUsize::new(0),
            kids: Default::default(),
        })
    }
}

impl Discovery for CertsOf {
    fn discover<'a>(
        &'a self,
        _authority: &'a str,
        _pinned: Option<&'a IdentityPublic>,
    ) -> BoxFuture<'a, Result<Discovered, httpcrypt::Error>> {
        Box::pin(async move {
            self.lookups.fetch_add(1, Ordering::SeqCst);
            // Verified under the pinned identity by the inner client.
            let certs = self.client.refresh_certs("http", &self.authority).await?;
            let mut kids = self.kids.lock().unwrap();
            kids.extend(certs.iter().map(|c| c.kid().to_b64()));
            drop(kids);
            Ok(Discovered {
                keys: certs.iter().map(DiscoveredKey::from).collect(),
                source: Some(KeySource::Options),
                // Asked again every second, so the client follows rotation.
                ttl: 1,
                identity: None,
                detail: format!("certificates of {}", self.authority),
            })
        })
    }
}

/// What a run of [`traffic`] saw.
#[derive(Debug, Default)]
struct Traffic {
    requests: usize,
    failures: usize,
    /// Calls that needed a second attempt (`unknown-key` or `stale`).
    retries: usize,
    errors: Vec<String>,
    /// Cookie IDs sent, per target index.
    ids: Vec<BTreeSet<String>>,
}

/// One client sends `GET` requests to `targets` in turn (hello.txt and
/// mid.bin alternately) until `deadline` or `max` requests.
async fn traffic(
    client: &Client,
    fleet: &Fleet,
    targets: &[String],
    deadline: Instant,
    max: usize,
) -> Traffic {
    let mut t = Traffic {
        ids: vec![BTreeSet::new(); targets.len()],
        ..Default::default()
    };
    let files = [
        ("hello.txt", fleet.file("hello.txt")),
        ("mid.bin", fleet.file("mid.bin")),
    ];
    while Instant::now() < deadline && t.requests < max {
        let which = t.requests % targets.len();
        let (name, want) = &files[(t.requests / targets.len()) % 2];
        let url = format!("http://{}/{name}", targets[which]);
        t.requests += 1;
        let result = tokio::time::timeout(Duration::from_secs(10), async {
            let req = http::Request::get(&url).body(Bytes::new()).unwrap();
            let rsp = client.send(req).await.map_err(|e| e.to_string())?;
            let x = rsp.extensions().get::<OuterExchange>().unwrap().clone();
            let status = rsp.status();
            let body = rsp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if status != 200 || body != want[..] {
                return Err(format!("{url}: {status}, {} bytes", body.len()));
            }
            Ok::<_, String>(x)
        })
        .await
        .unwrap_or_else(|_| Err(format!("{url}: timed out")));
        match result {
            Ok(x) => {
                t.ids[which].insert(cookie_id(&x));
                if x.attempts > 1 {
                    t.retries += 1;
                }
            }
            Err(e) => {
                t.failures += 1;
                if t.errors.len() < 5 {
                    t.errors.push(e);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    t
}

/// `httpcrypt certs URL --identity ID` with the time-dependent part
/// ("(valid, Ns left)") cut off each line.
fn certs_output(server: &Proc, identity: &IdentityPublic) -> String {
    let url = format!("http://{}/", server.addr);
    let out = common::run(
        &["certs", &url, &format!("--identity={}", identity.to_b64())],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "certs: {}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.contains("signature verified"), "{text}");
    text.lines()
        .map(|l| l.split(" (").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Two instances from copies of one fleet directory publish the same
/// certificates, decrypt each other's clients across epochs (R = 3 s), and
/// take each other's tickets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_instances_decrypt_each_others_clients_across_epochs() {
    let fleet = Fleet::new(3);
    let a = fleet.instance("a", &[]);
    let b = fleet.instance("b", &[]);

    // Same kids, same certificates, byte for byte (`certs` on both; asked
    // again if an epoch boundary fell between the two calls).
    let mut same = false;
    for _ in 0..3 {
        let (ca, cb) = (
            certs_output(&a, &fleet.identity),
            certs_output(&b, &fleet.identity),
        );
        if ca == cb {
            same = true;
            break;
        }
        eprintln!("certs differ (epoch boundary?):\n{ca}\n--\n{cb}");
    }
    assert!(same, "the instances publish different certificates");

    // A ticket A issued is accepted by B, which never saw the session.
    let first = fleet.sealed(&a);
    let rsp = exchange(a.addr, &get_hello(&first, &a.addr.to_string())).0;
    let head = assert_hello(&first, &rsp);
    let ticket = Ticket::from_field(field(&head.fields, TICKET_FIELD).unwrap()).unwrap();
    let cert = fleet.certs(&a)[0].clone();
    let resumed = Sealed::with_credential(
        &cert,
        ClientCredential::Ticket(&ticket, first.prepared.session_key()),
        &Mount::default(),
    );
    assert_eq!(
        &resumed.cookie()[..14],
        b64::encode(&ticket.tid().0).as_str(),
        "the cookie names the ticket key"
    );
    let rsp = exchange(b.addr, &get_hello(&resumed, &b.addr.to_string())).0;
    let head = assert_hello(&resumed, &rsp);
    assert!(
        field(&head.fields, TICKET_FIELD).is_some(),
        "B issues a ticket too"
    );

    // One client, one kept key pair, A's certificates only, alternating
    // between A and B (B behind a relay that shows what reached it) for
    // more than two epochs.
    let relay_b = Relay::new(b.addr);
    let discovery = CertsOf::new(&a, fleet.identity);
    let client = Client::new(ClientConfig {
        identity: Some(fleet.identity),
        key_policy: KeyPolicy::ReusePerHost,
        tickets: false,
        discovery: Some(discovery.clone()),
        options_fallback: false,
        ..Default::default()
    });
    let targets = [a.addr.to_string(), relay_b.addr.to_string()];
    let deadline = Instant::now() + Duration::from_millis(7_500);
    let t = traffic(&client, &fleet, &targets, deadline, 3_000).await;
    println!(
        "fleet R=3s for 7.5s: {} requests alternating A/B, {} failed, {} retried; \
         kids at A {:?}, at B {:?}; {} certificate look-ups at A",
        t.requests,
        t.failures,
        t.retries,
        t.ids[0],
        t.ids[1],
        discovery.lookups.load(Ordering::SeqCst)
    );
    assert_eq!(t.failures, 0, "{:?}", t.errors);
    assert!(t.requests >= 100, "too little traffic: {}", t.requests);
    assert!(t.ids[1].len() >= 2, "B saw one epoch only: {:?}", t.ids[1]);
    assert!(t.ids[0].len() >= 2, "A saw one epoch only: {:?}", t.ids[0]);
    // B only ever saw kids A advertised, and was never asked for its own.
    let from_a = discovery.kids.lock().unwrap().clone();
    assert!(
        t.ids[1].is_subset(&from_a),
        "{:?} not all from {from_a:?}",
        t.ids[1]
    );
    for sent in relay_b.captured() {
        let text = String::from_utf8_lossy(&sent);
        assert!(!text.contains("OPTIONS "), "B was asked for certificates");
    }
    assert!(relay_b.connections() >= 1);
}

/// A request recorded by a relay and replayed byte for byte: refused by
/// the instance that took it; without a shared register another fleet
/// instance takes it once (at most once *per instance*, spec §8.2); with
/// both instances on one Redis it is refused fleet-wide, and with Redis
/// gone the instances fail closed (inner 503 `overloaded`, spec §8.3).
#[test]
fn replays_are_refused_per_instance_and_fleet_wide_with_redis() {
    let fleet = Fleet::new(3600);

    // Local strike registers.
    let a = fleet.instance("a", &[]);
    let b = fleet.instance("b", &[]);
    let relay = Relay::new(a.addr);
    let sealed = fleet.sealed(&a);
    let bytes = get_hello(&sealed, &a.addr.to_string());
    assert_hello(&sealed, &exchange(relay.addr, &bytes).0);
    let recorded = relay.captured().remove(0);
    assert_eq!(
        recorded, bytes,
        "the relay recorded the request byte for byte"
    );
    let again = exchange(a.addr, &recorded).0;
    assert_eq!(sealed.open_problem(&again).0, 425);
    assert_eq!(sealed.open_problem(&again).1, REPLAY);
    // B has its own register: the recorded request takes effect there once.
    assert_hello(&sealed, &exchange(b.addr, &recorded).0);
    let (status, ty, _) = sealed.open_problem(&exchange(b.addr, &recorded).0);
    assert_eq!((status, ty.as_str()), (425, REPLAY));
    drop((a, b));

    // One Redis for both instances.
    let redis = common::redis_server();
    let url = format!("redis://{}/", redis.addr);
    let a = fleet.instance("a2", &["--redis", &url]);
    let b = fleet.instance("b2", &["--redis", &url]);
    let relay = Relay::new(a.addr);
    let sealed = fleet.sealed(&a);
    let bytes = get_hello(&sealed, &a.addr.to_string());
    assert_hello(&sealed, &exchange(relay.addr, &bytes).0);
    let recorded = relay.captured().remove(0);
    assert_eq!(recorded, bytes);
    for server in [&a, &b] {
        let (status, ty, _) = sealed.open_problem(&exchange(server.addr, &recorded).0);
        assert_eq!((status, ty.as_str()), (425, REPLAY), "at {}", server.addr);
    }
    // B serves new requests (the register is not refusing everything).
    let fresh = fleet.sealed(&b);
    assert_hello(
        &fresh,
        &exchange(b.addr, &get_hello(&fresh, &b.addr.to_string())).0,
    );

    // Redis stalls (SIGSTOP), then goes away: nothing can be checked, so
    // nothing is accepted, and the answer comes within a bounded time.
    signal(&redis, "-STOP");
    let stalled = overloaded_at(&fleet, &a);
    signal(&redis, "-CONT");
    let fresh = fleet.sealed(&a);
    assert_hello(
        &fresh,
        &exchange(a.addr, &get_hello(&fresh, &a.addr.to_string())).0,
    );
    drop(redis);
    let gone = [overloaded_at(&fleet, &a), overloaded_at(&fleet, &b)];
    println!("fail closed: Redis stalled {stalled:?}, Redis gone {gone:?}");
}

/// Two instances sharing Redis whose clocks differ by 20 s: the strike
/// written by the one running ahead must outlive the window of the one
/// running behind. Its TTL used to be `Date + W − now` on the recording
/// instance's clock: 3 s here, after which the lagging instance, which
/// still accepts the `Date`, took the replay.
#[test]
fn replays_are_refused_across_a_fleet_with_skewed_clocks() {
    let fleet = Fleet::new(3600);
    let redis = common::redis_server();
    let url = format!("redis://{}/", redis.addr);
    let ahead_keys = fleet.dir.path().join("keys-ahead");
    common::copy_dir(&fleet.dir.path().join("keys"), &ahead_keys);
    let ahead = common::serve_env(
        &[
            ("LD_PRELOAD", libfaketime().to_str().unwrap()),
            ("FAKETIME", "+20s"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        &ahead_keys,
        &fleet.root(),
        &["--redis", &url],
    );
    let behind = fleet.instance("behind", &["--redis", &url]);
    let sealed = fleet.sealed(&behind);
    // A Date 38 s old: 58 s behind the fast instance's clock, inside its
    // window of 60 s.
    let date = unix_now() - 38;
    let bytes = sealed.post(
        &ahead.addr.to_string(),
        &sealed.stream("GET", "/hello.txt", date, b""),
    );
    assert_hello(&sealed, &exchange(ahead.addr, &bytes).0);
    std::thread::sleep(Duration::from_secs(5));
    // Still inside the slow instance's window (42 s old): a replay.
    let (status, ty, _) = sealed.open_problem(&exchange(behind.addr, &bytes).0);
    assert_eq!((status, ty.as_str()), (425, REPLAY));
}

/// Sends `sig` to a child process this test started.
fn signal(p: &Proc, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &p.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// A new request to `server` is answered inner 503 `overloaded`, in
/// bounded time (returned).
fn overloaded_at(fleet: &Fleet, server: &Proc) -> Duration {
    let fresh = fleet.sealed(server);
    let started = Instant::now();
    let rsp = exchange(server.addr, &get_hello(&fresh, &server.addr.to_string())).0;
    let took = started.elapsed();
    let (status, ty, _) = fresh.open_problem(&rsp);
    assert_eq!(
        (status, ty.as_str()),
        (503, OVERLOADED),
        "at {}",
        server.addr
    );
    assert!(
        took < Duration::from_secs(5),
        "failing closed took {took:?}"
    );
    took
}

/// Debian's libfaketime (package `libfaketime`, pulled in by `faketime`;
/// `scripts/install-test-deps.sh` installs it), multithreaded flavour.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("faketime/libfaketimeMT.so.1")))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketimeMT.so.1")])
        .find(|p| p.exists());
    found.expect("libfaketime is missing: run scripts/install-test-deps.sh")
}

/// Fleet certificates are version 1, identical on every instance (spec
/// §6.7): `serve --compact` on a fleet directory refuses to start and says
/// why, instead of publishing certificates the other instances do not.
#[test]
fn compact_is_refused_on_a_fleet_directory() {
    let fleet = Fleet::new(3600);
    let keys = fleet.dir.path().join("keys");
    let root = fleet.dir.path().join("root");
    let out = common::run(
        &[
            "serve",
            "--compact",
            "--keys",
            keys.to_str().unwrap(),
            "--root",
            root.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = out.stderr_text();
    assert!(err.contains("not available for fleets"), "{err}");
}

/// `serve` with its clock moved 5 minutes ahead (libfaketime).
fn serve_five_minutes_ahead(keys: &Path, root: &Path, extra: &[&str]) -> Proc {
    let preload = libfaketime();
    common::serve_env(
        &[
            ("LD_PRELOAD", preload.to_str().unwrap()),
            ("FAKETIME", "+5m"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        keys,
        root,
        extra,
    )
}

/// A `Date` outside the window is inner 425 `stale` carrying the server's
/// clock; the library client, told so, corrects its offset and succeeds
/// with its one retry (server clock moved 5 minutes ahead with faketime).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_date_is_recovered_by_one_retry() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.txt"), HELLO).unwrap();
    let mount = Mount::default();

    // A request dated 5 minutes ago, built by hand.
    let keys = dir.path().join("keys");
    let identity = IdentityPublic::from_b64(&common::keygen(&keys, false)).unwrap();
    let server = common::serve(&keys, &root, &[]);
    let host = server.addr.to_string();
    let sealed = Sealed::new(&certs(server.addr, &mount), Some(&identity), &mount);
    let old = sealed.stream("GET", "/hello.txt", unix_now() - 300, b"");
    let rsp = exchange(server.addr, &sealed.post(&host, &old)).0;
    let (status, ty, _) = sealed.open_problem(&rsp);
    assert_eq!((status, ty.as_str()), (425, STALE));
    let (head, _) = sealed.open(&rsp);
    let date = replay::check_date(field(&head.fields, "date"), unix_now(), 5).unwrap();
    println!(
        "stale answer carries the server's Date {date} (now {})",
        unix_now()
    );
    // The same request re-dated within the window passes.
    let sealed = Sealed::new(&certs(server.addr, &mount), Some(&identity), &mount);
    let ok = sealed.stream("GET", "/hello.txt", unix_now() - 30, b"");
    assert_hello(&sealed, &exchange(server.addr, &sealed.post(&host, &ok)).0);
    drop(server);

    // The library client against a server 5 minutes ahead. Its key is
    // static (valid from keygen on), so only the Date is off.
    let keys = dir.path().join("static-keys");
    let identity = IdentityPublic::from_b64(&common::keygen(&keys, true)).unwrap();
    let ahead = serve_five_minutes_ahead(&keys, &root, &[]);
    let host = ahead.addr.to_string();
    // It really is ahead: a correct Date is stale there, a skewed one is not.
    let sealed = Sealed::new(&certs(ahead.addr, &mount), Some(&identity), &mount);
    let now = sealed.stream("GET", "/hello.txt", unix_now(), b"");
    let (status, ty, _) = sealed.open_problem(&exchange(ahead.addr, &sealed.post(&host, &now)).0);
    assert_eq!((status, ty.as_str()), (425, STALE));
    let sealed = Sealed::new(&certs(ahead.addr, &mount), Some(&identity), &mount);
    let skewed = sealed.stream("GET", "/hello.txt", unix_now() + 300, b"");
    assert_hello(
        &sealed,
        &exchange(ahead.addr, &sealed.post(&host, &skewed)).0,
    );

    let client = Client::new(ClientConfig {
        identity: Some(identity),
        ..Default::default()
    });
    let url = format!("http://{host}/hello.txt");
    for (round, want_attempts) in [(1, 2), (2, 1), (3, 1)] {
        let req = http::Request::get(&url).body(Bytes::new()).unwrap();
        let rsp = tokio::time::timeout(Duration::from_secs(20), client.send(req))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("request {round}: {e}"));
        let attempts = rsp.extensions().get::<OuterExchange>().unwrap().attempts;
        let server_date = replay::check_date(
            rsp.headers().get("date").map(|v| v.as_bytes()),
            unix_now() + 300,
            5,
        );
        assert_eq!(rsp.status(), 200);
        assert!(server_date.is_ok(), "inner Date is the server's clock");
        assert_eq!(rsp.into_body().collect().await.unwrap().to_bytes(), HELLO);
        // The first call retries once; later ones use the learnt offset.
        assert_eq!(attempts, want_attempts, "request {round}");
    }
}

/// Profile 2 (spec §4.5) carries the time in the nonce: against a
/// `--compact` server 5 minutes ahead the library client's first request is
/// `stale`, it learns the offset from the 425's inner `Date`, and its retry
/// (a new nonce with the corrected time) and every later request pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_stale_time_is_recovered_by_one_retry() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.txt"), HELLO).unwrap();
    let keys = dir.path().join("static-keys");
    let identity = IdentityPublic::from_b64(&common::keygen(&keys, true)).unwrap();
    let ahead = serve_five_minutes_ahead(&keys, &root, &["--compact"]);
    let announced = certs(ahead.addr, &Mount::default());
    assert!(announced
        .iter()
        .all(|c| c.profile == httpcrypt::proto::Profile::Compact));
    let client = Client::new(ClientConfig {
        identity: Some(identity),
        ..Default::default()
    });
    let url = format!("http://{}/hello.txt", ahead.addr);
    for (round, want_attempts) in [(1, 2), (2, 1), (3, 1)] {
        let req = http::Request::get(&url).body(Bytes::new()).unwrap();
        let rsp = tokio::time::timeout(Duration::from_secs(20), client.send(req))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("request {round}: {e}"));
        let exchange = rsp.extensions().get::<OuterExchange>().unwrap().clone();
        assert_eq!(rsp.status(), 200);
        // Profile 2 answers carry no inner Date.
        assert!(rsp.headers().get("date").is_none(), "request {round}");
        assert_eq!(rsp.into_body().collect().await.unwrap().to_bytes(), HELLO);
        assert_eq!(exchange.attempts, want_attempts, "request {round}");
        let segment = exchange.uri.path().rsplit('/').next().unwrap();
        assert_eq!((segment.len(), &segment[..1]), (33, "2"), "request {round}");
    }
}

/// `n` `GET /hello.txt` to `addr` from `client`, `concurrency` at a time;
/// every answer must be the file.
async fn load(client: &Client, addr: std::net::SocketAddr, n: usize, concurrency: usize) {
    let uri: http::Uri = format!("http://{addr}/hello.txt").parse().unwrap();
    // Joined, not spawned: the future of `Client::send` is not accepted by
    // `tokio::spawn` (a higher-ranked lifetime error inside the client).
    let workers = (0..concurrency).map(|worker| {
        let uri = uri.clone();
        let count = n / concurrency + usize::from(worker < n % concurrency);
        async move {
            for _ in 0..count {
                let req = http::Request::get(uri.clone()).body(Bytes::new()).unwrap();
                let rsp = tokio::time::timeout(Duration::from_secs(20), client.send(req))
                    .await
                    .expect("a request timed out")
                    .expect("a request failed");
                assert_eq!(rsp.status(), 200);
                let body = rsp.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(body, HELLO);
            }
        }
    });
    futures_util::future::join_all(workers).await;
}

/// A client with fresh keys and one that keeps its key pair, both without
/// tickets (so every request needs the server's key agreement or its cache).
fn fresh_and_kept(identity: IdentityPublic) -> (Client, Client) {
    let config = |key_policy| ClientConfig {
        identity: Some(identity),
        key_policy,
        tickets: false,
        ..Default::default()
    };
    (
        Client::new(config(KeyPolicy::FreshPerRequest)),
        Client::new(config(KeyPolicy::ReusePerHost)),
    )
}

/// A key directory and a site root with `hello.txt`.
fn keys_and_root() -> (tempfile::TempDir, IdentityPublic) {
    let dir = tempfile::tempdir().unwrap();
    let identity =
        IdentityPublic::from_b64(&common::keygen(&dir.path().join("keys"), false)).unwrap();
    std::fs::create_dir(dir.path().join("root")).unwrap();
    std::fs::write(dir.path().join("root/hello.txt"), HELLO).unwrap();
    (dir, identity)
}

/// The session cache at work, counted: a client that keeps its key pair
/// costs the server one X25519 (one miss) and then only cache hits; fresh
/// keys miss every time; `session_cache: 0` keeps no cache at all. The
/// layer runs in process (over loopback sockets) so its counters can be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cache_serves_a_kept_key_pair_without_key_agreement() {
    let (dir, identity) = keys_and_root();
    for capacity in [65_536, 0] {
        let store = httpcrypt::keys::KeyStore::open(&dir.path().join("keys")).unwrap();
        let live = httpcrypt::keys::start(store, Duration::from_secs(3600)).unwrap();
        let layer = httpcrypt::HttpCryptLayer::new(
            live,
            httpcrypt::ServerConfig {
                session_cache: capacity,
                ..Default::default()
            },
        );
        let svc = tower::Layer::layer(
            &layer,
            httpcrypt::services::static_files(&dir.path().join("root")),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(httpcrypt::listen::run(
            listener,
            svc,
            Default::default(),
            async {
                let _ = stopped.await;
            },
        ));
        let (fresh, kept) = fresh_and_kept(identity);
        let n = 500;
        load(&fresh, addr, n, 4).await;
        let after_fresh = layer.cache_stats();
        load(&kept, addr, n, 4).await;
        let after_kept = layer.cache_stats();
        println!(
            "session cache {capacity}: (hits, misses) after {n} fresh keys {after_fresh:?}, \
             after {n} with a kept key {after_kept:?}"
        );
        if capacity == 0 {
            assert_eq!(after_kept, (0, 0), "no cache, no counts");
        } else {
            assert_eq!(after_fresh, (0, n as u64), "fresh keys never hit");
            let (hits, misses) = (after_kept.0 - after_fresh.0, after_kept.1 - after_fresh.1);
            // One key agreement for the kept key pair; concurrent first
            // requests may each miss once before the first insert.
            assert!((1..=4).contains(&misses), "misses {misses}");
            assert_eq!(hits + misses, n as u64);
        }
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// Server CPU (`/proc/PID/stat` ticks) of the `serve` binary for requests
/// with fresh keys and as many with a kept key pair, in alternating blocks
/// of 500 (so drift hits both alike): at least 2,000 of each, and more
/// (at most 6,000) until the fresh keys have taken 20 ticks, so that a
/// fast machine still gives a count worth comparing.
async fn cpu_fresh_vs_kept(server: &Proc, identity: IdentityPublic) -> (u64, u64) {
    let (fresh, kept) = fresh_and_kept(identity);
    // Certificates fetched and connections opened before measuring.
    load(&fresh, server.addr, 4, 2).await;
    load(&kept, server.addr, 4, 2).await;
    let (mut f, mut k) = (0, 0);
    for block in 0..12 {
        if block >= 4 && f >= 20 {
            break;
        }
        let t = server.cpu_ticks();
        load(&fresh, server.addr, 500, 4).await;
        f += server.cpu_ticks() - t;
        let t = server.cpu_ticks();
        load(&kept, server.addr, 500, 4).await;
        k += server.cpu_ticks() - t;
    }
    (f, k)
}

/// What the session cache saves end to end, as server CPU: measured and
/// printed for `serve` with the cache on and with `--session-cache 0`.
/// The saving is one X25519 (about 20 µs with aws-lc) against a whole
/// static-file request (hundreds of µs of hyper, file I/O on the blocking
/// pool and syscalls), so the end-to-end ratio stays near 1 on this
/// machine; the test asserts only that a kept key pair never costs the
/// server more than fresh keys. The cache's effect itself is counted by
/// `session_cache_serves_a_kept_key_pair_without_key_agreement`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cache_cpu_with_fresh_and_kept_keys() {
    let (dir, identity) = keys_and_root();
    let (keys, root) = (dir.path().join("keys"), dir.path().join("root"));
    let cached = common::serve(&keys, &root, &[]);
    let (fresh, kept) = cpu_fresh_vs_kept(&cached, identity).await;
    drop(cached);
    let uncached = common::serve(&keys, &root, &["--session-cache", "0"]);
    let (fresh0, kept0) = cpu_fresh_vs_kept(&uncached, identity).await;
    drop(uncached);
    let ratio = fresh as f64 / kept.max(1) as f64;
    let ratio0 = fresh0 as f64 / kept0.max(1) as f64;
    println!(
        "server CPU for 2,000–6,000 requests (10 ms ticks): session cache on: fresh keys {fresh}, \
         kept key {kept} (fresh/kept {ratio:.2}); --session-cache 0: fresh keys {fresh0}, \
         kept key {kept0} (fresh/kept {ratio0:.2})"
    );
    assert!(fresh >= 10 && fresh0 >= 10, "too little CPU to measure");
    assert!(
        ratio > 0.8,
        "a kept key pair cost the server more: {ratio:.2}"
    );
}

/// `--require-token`: an unsafe method without a token is inner 425
/// `token-required` with a `Random` (when asked for) and a `Ticket`; the
/// retry under that ticket's session key with the token succeeds; a token
/// of another session does not; a GET needs none.
#[test]
fn token_demand_is_met_by_one_retry_under_the_ticket() {
    let up = common::upstream();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let identity = IdentityPublic::from_b64(&common::keygen(&keys, false)).unwrap();
    let gw = common::gateway(&keys, up.addr, &["--require-token"]);
    let host = gw.addr.to_string();
    let mount = Mount::default();
    let cert_list = certs(gw.addr, &mount);
    let new_sealed = || Sealed::new(&cert_list, Some(&identity), &mount);
    let post = |sealed: &Sealed, fields: &[(&str, &str)]| {
        let stream = sealed.stream_with("POST", "/echo", unix_now(), fields, b"pay");
        exchange(gw.addr, &sealed.post(&host, &stream)).0
    };

    // No token, with Client-Random: 425 with a Random for it and a ticket.
    let first = new_sealed();
    let mut cr = [0u8; 24];
    OsRng.fill_bytes(&mut cr);
    let cr_text = b64::encode(&cr);
    let rsp = post(&first, &[(token::CLIENT_RANDOM_FIELD, &cr_text)]);
    let (status, ty, _) = first.open_problem(&rsp);
    assert_eq!((status, ty.as_str()), (425, TOKEN_REQUIRED));
    let (head, _) = first.open(&rsp);
    let random =
        String::from_utf8(field(&head.fields, token::RANDOM_FIELD).unwrap().to_vec()).unwrap();
    assert_eq!(random.len(), 54);
    assert_eq!(
        &b64::decode(random.as_bytes()).unwrap()[..24],
        cr,
        "Random answers cr"
    );
    let ticket = Ticket::from_field(field(&head.fields, TICKET_FIELD).unwrap()).unwrap();

    // The retry: same session key through the ticket, with the token.
    let cert = cert_list
        .iter()
        .find(|c| c.is_valid_at(unix_now()))
        .unwrap();
    let retry = Sealed::with_credential(
        cert,
        ClientCredential::Ticket(&ticket, first.prepared.session_key()),
        &mount,
    );
    let (head, body) = retry.open(&post(&retry, &[(token::RANDOM_FIELD, &random)]));
    assert_eq!(
        head.status,
        200,
        "{head:?} {}",
        String::from_utf8_lossy(&body)
    );
    let echo: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(echo["method"], "POST", "{echo}");
    assert_eq!(echo["length"], 3, "{echo}");

    // Under the ticket but without the token: still 425.
    let bare = Sealed::with_credential(
        cert,
        ClientCredential::Ticket(&ticket, first.prepared.session_key()),
        &mount,
    );
    let (status, ty, _) = bare.open_problem(&post(&bare, &[]));
    assert_eq!((status, ty.as_str()), (425, TOKEN_REQUIRED));
    // The token is bound to its session key: another session cannot use it.
    let other = new_sealed();
    let (status, ty, _) = other.open_problem(&post(&other, &[(token::RANDOM_FIELD, &random)]));
    assert_eq!((status, ty.as_str()), (425, TOKEN_REQUIRED));
    // Without Client-Random: no Random, still a ticket.
    let plain = new_sealed();
    let rsp = post(&plain, &[]);
    let (head, _) = plain.open(&rsp);
    assert_eq!(head.status, 425);
    assert!(
        field(&head.fields, token::RANDOM_FIELD).is_none(),
        "{head:?}"
    );
    assert!(field(&head.fields, TICKET_FIELD).is_some(), "{head:?}");

    // A safe method needs no token.
    let get = new_sealed();
    let stream = get.stream("GET", "/echo", unix_now(), b"");
    let (head, body) = get.open(&exchange(gw.addr, &get.post(&host, &stream)).0);
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
}

/// Fleet mode with R = 2 s under steady traffic for 20 s: two instances
/// started half a second apart, two clients alternating between them
/// (fresh keys with tickets and the GET form, certificates from each
/// instance; a kept key without tickets, the POST form, certificates from
/// A only), zero failures, and next to no `unknown-key` retries: the
/// instances advance their ratchets at the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_rotation_every_two_seconds_under_steady_traffic() {
    let fleet = Fleet::new(2);
    let a = fleet.instance("a", &[]);
    // Half a second apart, so a rotation task that woke up on whole
    // seconds would leave B a whole half second behind A at each boundary.
    std::thread::sleep(Duration::from_millis(500));
    let b = fleet.instance("b", &[]);
    let targets = [a.addr.to_string(), b.addr.to_string()];
    let deadline = Instant::now() + Duration::from_secs(20);
    let fresh = Client::new(ClientConfig {
        identity: Some(fleet.identity),
        ..Default::default()
    });
    let discovery = CertsOf::new(&a, fleet.identity);
    let kept = Client::new(ClientConfig {
        identity: Some(fleet.identity),
        key_policy: KeyPolicy::ReusePerHost,
        tickets: false,
        get_form: false,
        discovery: Some(discovery.clone()),
        options_fallback: false,
        ..Default::default()
    });
    // The kept-key client also refreshes B's keys (from A) five times a
    // second, at any point of a second, as a crowd of clients would: it
    // learns A's new key right after A starts advertising it.
    let refresh = async {
        let mut refreshes = 0;
        while Instant::now() < deadline {
            kept.refresh_keys("http", &targets[1]).await.unwrap();
            refreshes += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        refreshes
    };
    let (x, y, refreshes) = tokio::join!(
        traffic(&fresh, &fleet, &targets, deadline, 20_000),
        traffic(&kept, &fleet, &targets, deadline, 20_000),
        refresh
    );
    let kids: BTreeSet<&String> = y.ids.iter().flatten().collect();
    println!(
        "fleet R=2s for 20s: {} requests ({} + {}), {} failed, {} retried; \
         {} kids used by the kept-key client",
        x.requests + y.requests,
        x.requests,
        y.requests,
        x.failures + y.failures,
        x.retries + y.retries,
        kids.len()
    );
    assert_eq!(x.failures + y.failures, 0, "{:?} {:?}", x.errors, y.errors);
    assert!(x.requests + y.requests >= 200, "too little traffic");
    // The instances rotate together: B hardly ever refuses a key A
    // already advertises (which the client survives by a retry).
    assert!(refreshes >= 20, "{refreshes} refreshes");
    assert!(y.retries <= 3, "B lagged behind A: {} retries", y.retries);
    assert!(
        kids.len() >= 7,
        "the client followed the rotation: {kids:?}"
    );
    let from_a = discovery.kids.lock().unwrap().clone();
    for ids in &y.ids {
        assert!(ids.len() >= 7, "each instance saw the epochs: {ids:?}");
        assert!(ids.is_subset(&from_a), "{ids:?} not all from {from_a:?}");
    }
}
