//! Peers that hold connections without making progress (spec §11.6): slow
//! heads, bodies dripped a byte at a time, answers nobody reads, idle
//! keep-alive connections. With every connection slot held by them, a new
//! client is served within seconds (the slowest connection is shed), and a
//! client that transfers at a good rate is never cut. Loopback only; every
//! wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{certs, closes_within, connect, read_response, wire, Proc, Sealed};
use httpcrypt::clock::unix_now;
use httpcrypt::proto::cert::KeyCert;
use httpcrypt::proto::outer::Mount;
use httpcrypt::proto::IdentityPublic;

const FILE: &[u8] = b"a small file\n";
/// Larger than what the kernel's socket buffers of both ends hold on
/// loopback, so that a client that does not read blocks the server.
const BIG: u64 = 32 << 20;

struct Site {
    _dir: tempfile::TempDir,
    server: Proc,
    mount: Mount,
    identity: IdentityPublic,
    /// Fetched at the start, while a slot is free.
    certs: Vec<KeyCert>,
    host: String,
}

impl Site {
    /// `serve --max-connections 4 --mount /hc` with `extra` flags, over a
    /// small file and a big one.
    fn new(extra: &[&str]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), FILE).unwrap();
        common::write_pattern(&root.join("big.bin"), BIG);
        let identity = IdentityPublic::from_b64(&common::keygen(&keys, false)).unwrap();
        let mut args = vec!["--mount", "/hc", "--max-connections", "4"];
        args.extend_from_slice(extra);
        let server = common::serve(&keys, &root, &args);
        let host = server.addr.to_string();
        let mount = Mount::new("/hc").unwrap();
        let certs = certs(server.addr, &mount);
        Site {
            _dir: dir,
            server,
            mount,
            identity,
            certs,
            host,
        }
    }

    /// `OPTIONS {mount}/` as it goes on the wire.
    fn options(&self) -> Vec<u8> {
        wire(
            "OPTIONS",
            &self.mount.options_path(),
            &[("Host", &self.host)],
            b"",
        )
    }

    fn sealed(&self) -> Sealed {
        Sealed::new(&self.certs, Some(&self.identity), &self.mount)
    }

    /// Sends `bytes` on a new connection; the answer and how long it took,
    /// or `None` if none came within `wait`.
    fn timed(&self, bytes: &[u8], wait: Duration) -> Option<(common::RawResponse, Duration)> {
        let start = Instant::now();
        let mut s = TcpStream::connect(self.server.addr).unwrap();
        s.set_read_timeout(Some(wait)).unwrap();
        s.set_write_timeout(Some(wait)).unwrap();
        s.write_all(bytes).ok()?;
        let rsp = read_response(&mut BufReader::new(s))?;
        Some((rsp, start.elapsed()))
    }

    /// `OPTIONS /hc/` and a sealed GET of `/a.txt`, each on a new
    /// connection, answered within `within`.
    fn served_within(&self, sealed: &Sealed, within: Duration) {
        let (rsp, took) = self
            .timed(&self.options(), within * 2)
            .expect("no answer to OPTIONS while every slot is held");
        eprintln!("OPTIONS answered in {took:.2?}");
        assert_eq!(rsp.status, 200, "{rsp:?}");
        assert!(took < within, "OPTIONS took {took:?}");
        let get = sealed.get(&self.host, &sealed.stream("GET", "/a.txt", unix_now(), b""));
        let (rsp, took) = self
            .timed(&get, within * 2)
            .expect("no answer to a sealed GET while every slot is held");
        eprintln!("sealed GET answered in {took:.2?}");
        let (head, body) = sealed.open(&rsp);
        assert_eq!(head.status, 200);
        assert_eq!(body, FILE);
        assert!(took < within, "the sealed GET took {took:?}");
    }
}

/// A client that sends `first` at once, then the bytes of `rest` one at a
/// time every `every`, until the server closes or `stop` is set (at most
/// `rest.len()` bytes). Returns whether the server closed the connection
/// (without answering).
fn drip(
    addr: SocketAddr,
    first: Vec<u8>,
    rest: Vec<u8>,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> JoinHandle<bool> {
    std::thread::spawn(move || {
        let mut s = connect(addr);
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        if s.write_all(&first).is_err() {
            return true;
        }
        for b in rest {
            std::thread::sleep(every);
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if s.write_all(&[b]).is_err() {
                return true;
            }
        }
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match s.read(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    })
}

/// A request for the big file whose answer is never read; the connection
/// is returned to be looked at later.
fn never_read(addr: SocketAddr, host: &str) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(&wire("GET", "/big.bin", &[("Host", host)], b""))
        .unwrap();
    s
}

/// Reads what `s` holds until the server's end: the bytes read, or `None`
/// if the connection is still open after `wait`.
fn drain(mut s: TcpStream, wait: Duration) -> Option<u64> {
    let end = Instant::now() + wait;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let left = end.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Some(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(total),
            Err(_) => return None,
        }
    }
}

/// A sealed POST of `/a.txt` dripped by [`drip`]: its head and the first
/// byte of its body at once, then a byte every `every`.
fn drip_post(site: &Site, every: Duration, stop: &Arc<AtomicBool>) -> JoinHandle<bool> {
    let s = site.sealed();
    let stream = s.stream("POST", "/a.txt", unix_now(), &[b'x'; 200]);
    let post = s.post(&site.host, &stream);
    let at = post.len() - stream.len() + 1;
    drip(
        site.server.addr,
        post[..at].to_vec(),
        post[at..].iter().copied().take(100).collect(),
        every,
        stop.clone(),
    )
}

/// (a) Four sealed POSTs whose bodies drip a byte at a time hold every
/// slot; a new client's OPTIONS and sealed GET are answered within a few
/// seconds all the same (the slowest connection gives up its slot), with
/// every deadline at its default.
#[test]
fn dripping_bodies_do_not_lock_new_clients_out() {
    let site = Site::new(&[]);
    let stop = Arc::new(AtomicBool::new(false));
    let drippers: Vec<_> = (0..4)
        .map(|_| drip_post(&site, Duration::from_millis(500), &stop))
        .collect();
    // Every slot is taken, for longer than a newcomer is protected.
    std::thread::sleep(Duration::from_millis(2500));
    site.served_within(&site.sealed(), Duration::from_secs(5));
    stop.store(true, Ordering::SeqCst);
    let cut = drippers
        .into_iter()
        .map(|d| d.join().unwrap())
        .filter(|c| *c)
        .count();
    eprintln!("{cut} of 4 drippers were cut");
    assert!(cut >= 1, "no dripper gave up its slot");
}

/// (b) Four clients ask for a big file and never read it: a new client is
/// served within seconds, and the stuck connections are closed after the
/// write timeout instead of holding their slots for ever.
#[test]
fn clients_that_never_read_are_shed_and_closed() {
    let site = Site::new(&["--pass-through", "--write-timeout", "2"]);
    let stuck: Vec<_> = (0..4)
        .map(|_| never_read(site.server.addr, &site.host))
        .collect();
    // The server fills the socket buffers, then its writes block.
    std::thread::sleep(Duration::from_millis(1500));
    site.served_within(&site.sealed(), Duration::from_secs(5));
    let plain = wire("GET", "/a.txt", &[("Host", &site.host)], b"");
    let (rsp, took) = site
        .timed(&plain, Duration::from_secs(10))
        .expect("a plain GET is answered");
    assert_eq!((rsp.status, rsp.body.as_slice()), (200, FILE), "{took:?}");
    // By now every stuck connection is past its write timeout.
    std::thread::sleep(Duration::from_secs(3));
    for s in stuck {
        let got = drain(s, Duration::from_secs(10)).expect("a stuck connection stays open");
        eprintln!("a client that never read got {got} bytes before the close");
        assert!(got < BIG, "the whole file went out");
    }
}

/// (c) A request head sent a byte at a time is cut at the head deadline,
/// though bytes keep coming.
#[test]
fn a_slow_head_is_cut_at_the_head_deadline() {
    let site = Site::new(&["--header-timeout", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let head = format!(
        "GET /hc/ HTTP/1.1\r\nHost: {}\r\nX-Pad: {}\r\n\r\n",
        site.host,
        "p".repeat(200)
    );
    let start = Instant::now();
    let dripper = drip(
        site.server.addr,
        Vec::new(),
        head.into_bytes(),
        Duration::from_millis(100),
        stop.clone(),
    );
    assert!(dripper.join().unwrap(), "the slow head was never cut");
    let took = start.elapsed();
    eprintln!("slow head cut after {took:.2?} (deadline 2 s)");
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(6),
        "{took:?}"
    );
}

/// (d) A client downloading a big file at a good rate keeps its
/// connection while every other slot is held by slow peers and new clients
/// keep coming: neither the shedding nor the rate rule cuts it.
#[test]
fn a_client_reading_at_a_good_rate_is_never_cut() {
    let site = Site::new(&[
        "--pass-through",
        "--write-timeout",
        "2",
        "--min-rate",
        "65536",
        "--min-rate-grace",
        "1",
        "--header-timeout",
        "60",
    ]);
    let mut s = connect(site.server.addr);
    s.write_all(&wire(
        "GET",
        "/big.bin",
        &[("Host", &site.host), ("Connection", "close")],
        b"",
    ))
    .unwrap();
    let reader = std::thread::spawn(move || {
        // About 8 MB/s: often behind the server, never stopped.
        let mut buf = vec![0u8; 128 << 10];
        let mut total = 0u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
            std::thread::sleep(Duration::from_millis(15));
        }
        total
    });
    // Three slow heads hold the other slots.
    let stop = Arc::new(AtomicBool::new(false));
    let drippers: Vec<_> = (0..3)
        .map(|_| {
            drip(
                site.server.addr,
                Vec::new(),
                b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: pppppppppppppppppppppppp".to_vec(),
                Duration::from_millis(300),
                stop.clone(),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // New clients, each keeping its connection open (idle keep-alive).
    let mut kept = Vec::new();
    for _ in 0..5 {
        let plain = wire("GET", "/a.txt", &[("Host", &site.host)], b"");
        let mut c = connect(site.server.addr);
        c.write_all(&plain).unwrap();
        let mut r = BufReader::new(c);
        let rsp = read_response(&mut r).expect("a new client is served");
        assert_eq!(rsp.status, 200);
        kept.push(r);
        std::thread::sleep(Duration::from_millis(1200));
    }
    stop.store(true, Ordering::SeqCst);
    for d in drippers {
        d.join().unwrap();
    }
    let got = reader.join().unwrap();
    assert!(got > BIG, "the download was cut after {got} of {BIG} bytes");
}

/// A body that keeps coming, but below the minimum rate, is cut once the
/// grace period has passed, with slots to spare.
#[test]
fn a_body_below_the_minimum_rate_is_cut_after_the_grace() {
    let site = Site::new(&["--min-rate", "1000", "--min-rate-grace", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let dripper = drip_post(&site, Duration::from_millis(100), &stop);
    assert!(dripper.join().unwrap(), "the slow body was never cut");
    let took = start.elapsed();
    eprintln!("slow body cut after {took:.2?} (grace 2 s)");
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

/// An idle keep-alive connection is closed after the keep-alive timeout.
#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let site = Site::new(&["--keepalive-timeout", "2"]);
    let mut c = connect(site.server.addr);
    c.write_all(&site.options()).unwrap();
    let mut r = BufReader::new(c);
    assert_eq!(read_response(&mut r).expect("an answer").status, 200);
    let start = Instant::now();
    assert!(closes_within(&mut r, Duration::from_secs(10)));
    let took = start.elapsed();
    eprintln!("idle connection closed after {took:.2?} (timeout 2 s)");
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

/// Four clients whose POST to the mount states a 64 MiB body: each gets an
/// early 413 and keeps sending its body without reading, so the server
/// lingers on each connection (up to 2 s) to let the answer arrive. With
/// every slot held that way, a new client is shed a slot at once: a
/// lingering connection is cut like an idle one, and its linger ends when
/// it is cut instead of running its 2 s out.
#[test]
fn lingering_connections_give_up_their_slots() {
    let site = Site::new(&[]);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let head = format!(
        "POST /hc/{} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
        "n".repeat(32),
        site.host,
        64u64 << 20
    );
    let lingerers: Vec<_> = (0..4)
        .map(|_| {
            let (addr, head, stop) = (site.server.addr, head.clone(), stop.clone());
            std::thread::spawn(move || -> Option<Duration> {
                let mut s = connect(addr);
                s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
                s.write_all(head.as_bytes()).unwrap();
                // Never reads; a write fails once the server has closed.
                while !stop.load(Ordering::SeqCst) {
                    if s.write_all(&[b'x'; 1000]).is_err() {
                        return Some(start.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                None
            })
        })
        .collect();
    // Older than a newcomer is protected (1 s), well inside the linger.
    std::thread::sleep(Duration::from_millis(1100));
    let (rsp, took) = site
        .timed(&site.options(), Duration::from_secs(5))
        .expect("no answer while lingering connections hold every slot");
    assert_eq!(rsp.status, 200, "{rsp:?}");
    eprintln!("OPTIONS answered in {took:.2?} while four connections lingered");
    // Time for the cut connection's peer to notice (its writes fail).
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::SeqCst);
    let closed: Vec<_> = lingerers.into_iter().map(|l| l.join().unwrap()).collect();
    eprintln!("the lingering connections closed at {closed:.2?}");
    let first = closed.iter().flatten().min().copied();
    // Without the cut, the first slot frees when a linger ends, 2 s after
    // the 413s: the newcomer would wait about 0.9 s.
    assert!(
        first.is_some_and(|t| t < Duration::from_millis(1700)),
        "no lingering connection was cut: {closed:?}"
    );
    assert!(took < Duration::from_millis(600), "OPTIONS took {took:?}");
}
