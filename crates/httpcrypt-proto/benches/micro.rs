//! Micro benchmarks of the per-operation costs of HTTPCrypt (criterion).
//!
//! Groups (directory names under `target/criterion/`):
//! - `x25519`: one agreement with a reusable secret, aws-lc-rs (ours) and
//!   x25519-dalek on the same inputs;
//! - `kdf`: the session key (X25519 + HChaCha20), HChaCha20 alone, and a
//!   key ID (SHA3-256 of a public key);
//! - `seal_<size>` / `open_<size>`: one record of 100 B, 1 KiB, 16 KiB and
//!   1 MiB through `stream::Sealer` / `stream::Opener`, beside raw aws-lc-rs
//!   ChaCha20-Poly1305, our `suite::XChaCha` and RustCrypto's
//!   XChaCha20Poly1305. Every AEAD gets the same 20 bytes of associated data
//!   as a non-first record (previous tag || header), so Poly1305 does the
//!   same work everywhere;
//! - `server`: one complete first request (accept with X25519, open the
//!   stream, parse the inner head, seal a 100-byte response), its pieces, and
//!   the same without the X25519;
//! - `inner`: parsing a typical 300-byte inner request head;
//! - `resumption`: the server's whole per-request work (accept, open, parse,
//!   seal a 100-byte response) with a fresh client key, a session-cache hit
//!   and a ticket (spec §7);
//! - `strikes`: one strike-register check with the register holding a
//!   60-second window at 50k requests/s (3M entries); its memory per entry,
//!   and the mean and slowest check over 20 s of steady state (buckets
//!   expiring), are written to `target/criterion/strikes/memory.json`;
//! - `hybrid` (spec/hybrid.md): `hybrid_decaps`, the server's whole
//!   suite-2 agreement (X25519, ML-KEM-768 decapsulation, combiner);
//!   `hybrid_encaps`, the client's; `kem_keygen`, a server ML-KEM key from
//!   its seed; and each ML-KEM step alone in aws-lc-rs and RustCrypto
//!   `ml-kem`, the two backends the core could use.
//!
//! `scripts/bench-micro.sh` runs this on one core and prints the table.
//!
//! The clock is wall time by default; `BENCH_CLOCK=cpu` measures this
//! thread's CPU time instead (Linux), so that other work sharing the core
//! (a build, another benchmark) stretches neither the samples nor the ratios.

use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::XChaCha20Poly1305;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Bencher, Throughput};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::keys::{IdentityKey, KexSecret, SessionKey};
use httpcrypt_proto::limits::{Limits, RECORD_CEILING};
use httpcrypt_proto::outer::Mount;
use httpcrypt_proto::server::{
    self, Accept, Accepted, Agreement, CookieFields, OuterRequest, Plain, ServerKey, ServerKeys,
};
use httpcrypt_proto::stream::{Event, Opener, ResponseKey, Sealer, RECORD_OVERHEAD};
use httpcrypt_proto::suite::{self, XChaCha, NONCE_LEN, TAG_LEN};

/// The benchmarks' clock: wall time, or this thread's CPU time.
struct Clock {
    cpu: bool,
}

/// A reading of [`Clock`].
enum Mark {
    Wall(Instant),
    Cpu(Duration),
}

type Criterion = criterion::Criterion<Clock>;

impl Clock {
    /// `BENCH_CLOCK=cpu` selects CPU time where the platform has it.
    fn from_env() -> Self {
        let cpu = std::env::var("BENCH_CLOCK").is_ok_and(|v| v == "cpu");
        if cpu && thread_cpu_time().is_none() {
            eprintln!("BENCH_CLOCK=cpu: no thread CPU clock here, using wall time");
        }
        Clock {
            cpu: cpu && thread_cpu_time().is_some(),
        }
    }

    fn read(&self) -> Mark {
        match self.cpu.then(thread_cpu_time).flatten() {
            Some(t) => Mark::Cpu(t),
            None => Mark::Wall(Instant::now()),
        }
    }

    fn since(&self, mark: Mark) -> Duration {
        match mark {
            Mark::Wall(t) => t.elapsed(),
            Mark::Cpu(t) => thread_cpu_time()
                .expect("the CPU clock read before reads again")
                .saturating_sub(t),
        }
    }
}

#[cfg(target_os = "linux")]
fn thread_cpu_time() -> Option<Duration> {
    use rustix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

impl Measurement for Clock {
    type Intermediate = Mark;
    type Value = Duration;

    fn start(&self) -> Mark {
        self.read()
    }
    fn end(&self, mark: Mark) -> Duration {
        self.since(mark)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Both clocks count nanoseconds: format them like wall time.
        WallTime.formatter()
    }
}

/// The clock for timing inside `iter_custom` (the same one criterion uses).
fn clock() -> &'static Clock {
    static CLOCK: std::sync::OnceLock<Clock> = std::sync::OnceLock::new();
    CLOCK.get_or_init(Clock::from_env)
}

/// Record sizes measured, with the label used in group names.
const SIZES: &[(usize, &str)] = &[
    (100, "100B"),
    (1024, "1KiB"),
    (16 * 1024, "16KiB"),
    (1024 * 1024, "1MiB"),
];

/// Associated data of the AEAD baselines: as long as a non-first record's
/// `AD_i` (previous tag || header).
const AD: [u8; TAG_LEN + 4] = [0x5a; TAG_LEN + 4];

/// Open benchmarks feed this many bytes of fresh ciphertext per timed batch
/// (small enough to stay in L2, large enough to amortise the clock reads).
const OPEN_BATCH_BYTES: usize = 256 * 1024;

fn rng() -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(0x6874_7470_6372_7970)
}

fn bytes32(rng: &mut ChaCha20Rng) -> [u8; 32] {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    b
}

fn x25519(c: &mut Criterion) {
    let mut r = rng();
    let (secret, peer) = (bytes32(&mut r), bytes32(&mut r));
    let ours = KexSecret::from_bytes(secret);
    let peer_ours = *KexSecret::from_bytes(peer).public();
    let dalek = x25519_dalek::StaticSecret::from(secret);
    let peer_dalek = x25519_dalek::PublicKey::from(peer_ours.0);
    // Same inputs, same output: the comparison is between implementations only.
    assert_eq!(
        *ours.agree_raw(&peer_ours).expect("valid peer"),
        *dalek.diffie_hellman(&peer_dalek).as_bytes()
    );

    let mut g = c.benchmark_group("x25519");
    g.bench_function("agree_raw_awslc", |b| {
        b.iter(|| black_box(ours.agree_raw(black_box(&peer_ours))))
    });
    g.bench_function("dalek_diffie_hellman", |b| {
        b.iter(|| black_box(dalek.diffie_hellman(black_box(&peer_dalek))))
    });
    g.finish();
}

fn kdf(c: &mut Criterion) {
    let mut r = rng();
    let ours = KexSecret::from_bytes(bytes32(&mut r));
    let peer = *KexSecret::from_bytes(bytes32(&mut r)).public();
    let shared = bytes32(&mut r);

    let mut g = c.benchmark_group("kdf");
    g.bench_function("session_key", |b| {
        b.iter(|| black_box(ours.session_key(black_box(&peer))))
    });
    g.bench_function("hchacha20", |b| {
        b.iter(|| black_box(suite::hchacha20(black_box(&shared), &[0u8; 16])))
    });
    // On every request's path: `ServerKeys` finds the key by its ID.
    g.bench_function("key_id_sha3", |b| {
        b.iter(|| black_box(black_box(&peer).kid()))
    });
    g.finish();
}

fn seal(c: &mut Criterion) {
    let mut r = rng();
    let key = SessionKey::from_bytes(bytes32(&mut r));
    let mut n0 = [0u8; NONCE_LEN];
    r.fill_bytes(&mut n0);
    let nonce24 = n0;
    let mut nonce12 = [0u8; 12];
    nonce12[4..].copy_from_slice(&n0[16..]);

    for &(size, label) in SIZES {
        let mut g = c.benchmark_group(format!("seal_{label}"));
        g.throughput(Throughput::Bytes(size as u64));
        let mut plaintext = vec![0u8; size];
        r.fill_bytes(&mut plaintext);

        // Our record layer, in place: `RECORD_OVERHEAD` bytes of room, then
        // the payload. One long-lived sealer: the per-record cost.
        let mut sealer = Sealer::request(&key, n0);
        let mut record = vec![0u8; RECORD_OVERHEAD + size];
        record[RECORD_OVERHEAD..].copy_from_slice(&plaintext);
        g.bench_function("sealer_in_place", |b| {
            b.iter(|| {
                sealer
                    .seal_in_place(black_box(&mut record))
                    .expect("record is in range");
            })
        });

        // The convenient API: copies the plaintext into the caller's Vec
        // (capacity kept between iterations, so no allocation after the first).
        let mut sealer = Sealer::request(&key, n0);
        let mut out = Vec::with_capacity(RECORD_OVERHEAD + size);
        g.bench_function("sealer_vec", |b| {
            b.iter(|| {
                out.clear();
                sealer
                    .seal(black_box(&plaintext), &mut out)
                    .expect("record is in range");
                black_box(&out);
            })
        });

        // A whole one-record stream: construction (HChaCha20, key schedule)
        // plus the FINAL record, as a small message pays it.
        if size <= 16 * 1024 {
            g.bench_function("sealer_new_finish_in_place", |b| {
                b.iter(|| {
                    Sealer::request(black_box(&key), n0)
                        .finish_in_place(black_box(&mut record))
                        .expect("record is in range");
                })
            });
        }

        let raw = LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, key.as_bytes()).expect("32-byte key"),
        );
        let mut buf = plaintext.clone();
        g.bench_function("raw_awslc_chacha20poly1305", |b| {
            b.iter(|| {
                let tag = raw
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce12),
                        Aad::from(&AD),
                        black_box(&mut buf[..]),
                    )
                    .expect("in range");
                let _ = black_box(tag);
            })
        });

        let mut xchacha = XChaCha::new(key.as_bytes());
        g.bench_function("xchacha_ours", |b| {
            b.iter(|| {
                black_box(xchacha.seal_in_place(&nonce24, &AD, black_box(&mut buf[..])));
            })
        });

        let rc = XChaCha20Poly1305::new(key.as_bytes().into());
        g.bench_function("xchacha_rustcrypto", |b| {
            b.iter(|| {
                let tag = rc
                    .encrypt_in_place_detached((&nonce24).into(), &AD, black_box(&mut buf[..]))
                    .expect("in range");
                let _ = black_box(tag);
            })
        });
        g.finish();
    }
}

fn open(c: &mut Criterion) {
    let mut r = rng();
    let key = SessionKey::from_bytes(bytes32(&mut r));
    let mut n0 = [0u8; NONCE_LEN];
    r.fill_bytes(&mut n0);
    let nonce24 = n0;
    let mut nonce12 = [0u8; 12];
    nonce12[4..].copy_from_slice(&n0[16..]);

    for &(size, label) in SIZES {
        let mut g = c.benchmark_group(format!("open_{label}"));
        g.throughput(Throughput::Bytes(size as u64));
        let per_batch = (OPEN_BATCH_BYTES / size).max(1);
        let mut plaintext = vec![0u8; size];
        r.fill_bytes(&mut plaintext);

        // Our opener, long-lived: each record is pushed with `receive` (which
        // copies it into the opener's buffer) and verified by `next_event`.
        // A twin sealer produces the next records of the chain, untimed.
        {
            let mut opener = Opener::request(&key, n0, RECORD_CEILING);
            let mut twin = Sealer::request(&key, n0);
            let mut records: Vec<Vec<u8>> = Vec::new();
            g.bench_function("opener", |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters as usize;
                    while left > 0 {
                        let n = left.min(per_batch);
                        records.resize_with(n, Vec::new);
                        for rec in &mut records[..n] {
                            rec.clear();
                            twin.seal(&plaintext, rec).expect("record is in range");
                        }
                        let t = clock().read();
                        for rec in &records[..n] {
                            opener.receive(rec).expect("stream is open");
                            match opener.next_event().expect("record verifies") {
                                Some(Event::Data { plaintext, .. }) => {
                                    black_box(plaintext);
                                }
                                other => panic!("expected data, got {other:?}"),
                            }
                        }
                        total += clock().since(t);
                        left -= n;
                    }
                    total
                })
            });
        }

        // Whole one-record stream: construction plus the FINAL record.
        if size <= 16 * 1024 {
            let mut stream = Vec::new();
            Sealer::request(&key, n0)
                .finish(&plaintext, &mut stream)
                .expect("record is in range");
            g.bench_function("opener_new_one_record", |b| {
                b.iter(|| {
                    let mut opener = Opener::request(black_box(&key), n0, RECORD_CEILING);
                    opener.receive(black_box(&stream)).expect("stream is open");
                    match opener.next_event().expect("record verifies") {
                        Some(Event::Data { plaintext, .. }) => {
                            black_box(plaintext);
                        }
                        other => panic!("expected data, got {other:?}"),
                    }
                })
            });
        }

        // The AEAD baselines open in place, so each needs a fresh copy of
        // the ciphertext per operation: copied in untimed batches, like the
        // opener's records.
        let raw = LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, key.as_bytes()).expect("32-byte key"),
        );
        let mut ct = plaintext.clone();
        let raw_tag = raw
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce12),
                Aad::from(&AD),
                &mut ct,
            )
            .expect("in range");
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        g.bench_function("raw_awslc_chacha20poly1305", |b| {
            b.iter_custom(|iters| {
                batched_in_place(iters, per_batch, &mut bufs, &ct, |buf| {
                    let pt = raw
                        .open_in_place_separate_tag(
                            Nonce::assume_unique_for_key(nonce12),
                            Aad::from(&AD),
                            raw_tag.as_ref(),
                            buf,
                        )
                        .expect("tag verifies");
                    black_box(pt);
                })
            })
        });

        let mut xchacha = XChaCha::new(key.as_bytes());
        let mut ct = plaintext.clone();
        let x_tag = xchacha.seal_in_place(&nonce24, &AD, &mut ct);
        g.bench_function("xchacha_ours", |b| {
            b.iter_custom(|iters| {
                batched_in_place(iters, per_batch, &mut bufs, &ct, |buf| {
                    xchacha
                        .open_in_place(&nonce24, &AD, &x_tag, buf)
                        .expect("tag verifies");
                    black_box(buf);
                })
            })
        });

        let rc = XChaCha20Poly1305::new(key.as_bytes().into());
        let mut ct = plaintext.clone();
        let rc_tag = rc
            .encrypt_in_place_detached((&nonce24).into(), &AD, &mut ct)
            .expect("in range");
        g.bench_function("xchacha_rustcrypto", |b| {
            b.iter_custom(|iters| {
                batched_in_place(iters, per_batch, &mut bufs, &ct, |buf| {
                    rc.decrypt_in_place_detached((&nonce24).into(), &AD, buf, &rc_tag)
                        .expect("tag verifies");
                    black_box(buf);
                })
            })
        });
        g.finish();
    }
}

/// Times `iters` in-place opens of fresh copies of `ct`, copied (untimed)
/// in batches of `per_batch`.
fn batched_in_place(
    iters: u64,
    per_batch: usize,
    bufs: &mut Vec<Vec<u8>>,
    ct: &[u8],
    mut op: impl FnMut(&mut [u8]),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(per_batch);
        bufs.resize_with(n, Vec::new);
        for buf in &mut bufs[..n] {
            buf.clear();
            buf.extend_from_slice(ct);
        }
        let t = clock().read();
        for buf in &mut bufs[..n] {
            op(buf);
        }
        total += clock().since(t);
        left -= n;
    }
    total
}

/// One pre-built first request: what the server receives.
struct Prepared {
    target: String,
    cookie: String,
    stream: Vec<u8>,
    n0: [u8; NONCE_LEN],
    key: SessionKey,
}

impl Prepared {
    fn outer(&self) -> OuterRequest<'_> {
        OuterRequest {
            method: "POST",
            target: &self.target,
            host: Some(b"www.example.com"),
            cookies: CookieFields::from_slice(&[b"theme=dark; lang=en", self.cookie.as_bytes()]),
            content_length: Some(self.stream.len() as u64),
            has_body: true,
        }
    }
}

/// Distinct client keys per request, so neither caching nor branch history
/// of one fixed input can help.
const POOL: usize = 64;
const NOW: u64 = 1_750_000_000;

fn request_head(body_len: usize) -> RequestHead {
    let mut head = RequestHead::new("POST", "/api/v1/items");
    head.fields = vec![
        Field::new("Host", "www.example.com"),
        Field::new("User-Agent", "httpcrypt-bench/0.1"),
        Field::new("Accept", "application/json"),
        Field::new("Content-Type", "application/json"),
        Field::new("Content-Length", body_len.to_string()),
    ];
    head
}

fn unwrap_request(a: httpcrypt_proto::Result<Accept>) -> Accepted {
    match a.expect("request is valid") {
        Accept::Request(acc) => acc,
        other => panic!("expected an HTTPCrypt request, got {other:?}"),
    }
}

fn server(c: &mut Criterion) {
    let mut r = rng();
    let identity = IdentityKey::from_seed(bytes32(&mut r));
    let server_secret = KexSecret::from_bytes(bytes32(&mut r));
    let not_before = (NOW - 3600) as u32;
    let cert = KeyCert::sign(
        &identity,
        1,
        not_before,
        not_before + 7 * 86400,
        *server_secret.public(),
    );
    let mut keys = ServerKeys::new();
    keys.add_key(server_secret, cert.clone());
    let mount = Mount::new("/.hc").expect("valid mount");
    let limits = Limits::default();

    let body = [b'x'; 100];
    let head = request_head(body.len());
    let pool: Vec<Prepared> = (0..POOL)
        .map(|_| {
            let client = KexSecret::from_bytes(bytes32(&mut r));
            let mut n0 = [0u8; NONCE_LEN];
            r.fill_bytes(&mut n0);
            let prep = PreparedRequest::new(&cert, ClientCredential::Key(&client), n0, "", "")
                .expect("valid credential");
            let stream = prep
                .seal_message(&head, &body, 16 * 1024)
                .expect("message seals");
            Prepared {
                target: mount.nonce_path(&n0),
                cookie: prep.cookie().to_string(),
                stream,
                n0,
                key: prep.session_key().clone(),
            }
        })
        .collect();
    let outers: Vec<OuterRequest<'_>> = pool.iter().map(Prepared::outer).collect();

    let mut rsp_head = ResponseHead::new(200, "OK");
    rsp_head.fields = vec![
        Field::new("Content-Type", "application/json"),
        Field::new("Cache-Control", "no-store"),
    ];
    let rsp_body = [b'y'; 100];

    // Sanity: the whole exchange round-trips before anything is timed.
    for (p, outer) in pool.iter().zip(&outers) {
        let acc = unwrap_request(server::accept(
            &keys, &mount, outer, &limits, NOW, &mut Plain,
        ));
        let (h, b) = server::open_request(&acc, &p.stream, &limits).expect("request opens");
        assert_eq!((h, b.as_slice()), (head.clone(), &body[..]));
    }

    let mut g = c.benchmark_group("server");
    let mut out = Vec::with_capacity(1024);
    let mut i = 0usize;
    let mut rsp_n0 = [7u8; NONCE_LEN];

    let mut first_request = |derive_x25519: bool, b: &mut Bencher<'_, Clock>| {
        b.iter(|| {
            let (p, outer) = (&pool[i % POOL], &outers[i % POOL]);
            i = i.wrapping_add(1);
            let acc = if derive_x25519 {
                server::accept(&keys, &mount, black_box(outer), &limits, NOW, &mut Plain)
            } else {
                server::accept(
                    &keys,
                    &mount,
                    black_box(outer),
                    &limits,
                    NOW,
                    &mut Known(&p.key),
                )
            };
            let acc = unwrap_request(acc);
            let (h, b) =
                server::open_request(&acc, black_box(&p.stream), &limits).expect("request opens");
            black_box((h, b));
            rsp_n0[..8].copy_from_slice(&(i as u64).to_be_bytes());
            out.clear();
            server::seal_response(
                acc.into_response_key(),
                rsp_n0,
                &rsp_head,
                &rsp_body,
                NOW,
                16 * 1024,
                &mut out,
            )
            .expect("response seals");
            black_box(&out);
        })
    };
    g.bench_function("first_request", |b| first_request(true, b));
    g.bench_function("first_request_no_x25519", |b| first_request(false, b));

    let mut i = 0usize;
    g.bench_function("accept", |b| {
        b.iter(|| {
            let outer = &outers[i % POOL];
            i = i.wrapping_add(1);
            black_box(unwrap_request(server::accept(
                &keys,
                &mount,
                black_box(outer),
                &limits,
                NOW,
                &mut Plain,
            )))
        })
    });
    g.bench_function("accept_precomputed_key", |b| {
        b.iter(|| {
            let (p, outer) = (&pool[i % POOL], &outers[i % POOL]);
            i = i.wrapping_add(1);
            black_box(unwrap_request(server::accept(
                &keys,
                &mount,
                black_box(outer),
                &limits,
                NOW,
                &mut Known(&p.key),
            )))
        })
    });

    let accepted: Vec<Accepted> = outers
        .iter()
        .map(|o| unwrap_request(server::accept(&keys, &mount, o, &limits, NOW, &mut Plain)))
        .collect();
    g.bench_function("open_request", |b| {
        b.iter(|| {
            let (p, acc) = (&pool[i % POOL], &accepted[i % POOL]);
            i = i.wrapping_add(1);
            black_box(server::open_request(acc, black_box(&p.stream), &limits).expect("opens"))
        })
    });
    g.bench_function("seal_response_100B", |b| {
        b.iter_batched(
            || {
                let p = &pool[i % POOL];
                i = i.wrapping_add(1);
                ResponseKey::new(p.key.clone(), p.n0)
            },
            |rk| {
                out.clear();
                server::seal_response(rk, rsp_n0, &rsp_head, &rsp_body, NOW, 16 * 1024, &mut out)
                    .expect("response seals");
                black_box(&out);
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// A typical browser-ish inner request head of about 300 bytes.
const HEAD_300: &[u8] = b"GET /api/v1/items?page=2&sort=recent HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: application/json, text/plain, */*\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate\r\n\
Referer: https://www.example.com/items\r\n\
\r\n";

fn inner_parse(c: &mut Criterion) {
    let limits = Limits::default();
    assert!(
        (280..=320).contains(&HEAD_300.len()),
        "head is {} bytes",
        HEAD_300.len()
    );
    let (h, b) = inner::decode_all::<RequestHead>(HEAD_300, &limits).expect("head parses");
    assert_eq!((h.fields.len(), b.len()), (6, 0));

    let mut g = c.benchmark_group("inner");
    g.throughput(Throughput::Bytes(HEAD_300.len() as u64));
    g.bench_function("decode_request_head_300B", |b| {
        b.iter(|| {
            black_box(inner::decode_all::<RequestHead>(
                black_box(HEAD_300),
                &limits,
            ))
            .expect("parses")
        })
    });
    g.finish();
}

/// A session key known in advance: the key agreement is not what is
/// measured.
struct Known<'a>(&'a SessionKey);

impl Agreement for Known<'_> {
    fn cached(&mut self, _: &ServerKey, _: &httpcrypt_proto::KexPublic) -> Option<SessionKey> {
        Some(self.0.clone())
    }
}

/// A session cache in front of the X25519.
struct Cached(httpcrypt_proto::cache::SessionCache);

impl Agreement for Cached {
    fn cached(&mut self, sk: &ServerKey, peer: &httpcrypt_proto::KexPublic) -> Option<SessionKey> {
        self.0.get(&sk.kid, peer)
    }
}

/// Tickets only: no request may need a key agreement.
struct TicketsOnly;

impl Agreement for TicketsOnly {
    fn agree(
        &mut self,
        _: &ServerKey,
        _: &httpcrypt_proto::KexPublic,
    ) -> httpcrypt_proto::Result<SessionKey> {
        panic!("tickets need no key agreement")
    }
}

fn resumption(c: &mut Criterion) {
    use httpcrypt_proto::cache::SessionCache;
    use httpcrypt_proto::ticket::{TicketContents, TicketKey};
    let mut r = rng();
    let identity = IdentityKey::from_seed(bytes32(&mut r));
    let server_secret = KexSecret::from_bytes(bytes32(&mut r));
    let not_before = (NOW - 3600) as u32;
    let cert = KeyCert::sign(
        &identity,
        1,
        not_before,
        not_before + 7 * 86400,
        *server_secret.public(),
    );
    let mut keys = ServerKeys::new();
    keys.add_key(server_secret, cert.clone());
    let tk = TicketKey::new(httpcrypt_proto::KeyId([9; 10]), bytes32(&mut r));
    keys.add_ticket_key(TicketKey::new(tk.tid(), *tk.to_bytes()), NOW + 86400);
    let mount = Mount::new("/.hc").expect("valid mount");
    let limits = Limits::default();
    let body = [b'x'; 100];
    let head = request_head(body.len());
    let mut rsp_head = ResponseHead::new(200, "OK");
    rsp_head.fields = vec![Field::new("Content-Type", "application/json")];
    let rsp_body = [b'y'; 100];

    // Pools of prepared requests: fresh keys, reused keys (cache), tickets.
    let clients: Vec<KexSecret> = (0..POOL)
        .map(|_| KexSecret::from_bytes(bytes32(&mut r)))
        .collect();
    let mk = |cred: ClientCredential<'_>, r: &mut ChaCha20Rng| {
        let mut n0 = [0u8; NONCE_LEN];
        r.fill_bytes(&mut n0);
        let prep = PreparedRequest::new(&cert, cred, n0, "", "").expect("valid credential");
        let stream = prep
            .seal_message(&head, &body, 16 * 1024)
            .expect("message seals");
        Prepared {
            target: mount.nonce_path(&n0),
            cookie: prep.cookie().to_string(),
            stream,
            n0,
            key: prep.session_key().clone(),
        }
    };
    let keyed: Vec<Prepared> = clients
        .iter()
        .map(|c| mk(ClientCredential::Key(c), &mut r))
        .collect();
    let tickets: Vec<(httpcrypt_proto::ticket::Ticket, SessionKey)> = keyed
        .iter()
        .map(|p| {
            let mut n = [0u8; NONCE_LEN];
            r.fill_bytes(&mut n);
            (
                tk.seal(
                    &TicketContents {
                        key: p.key.clone(),
                        kid: cert.kid(),
                        expiry: cert.not_after,
                    },
                    n,
                ),
                p.key.clone(),
            )
        })
        .collect();
    let ticketed: Vec<Prepared> = tickets
        .iter()
        .map(|(t, k)| mk(ClientCredential::Ticket(t, k), &mut r))
        .collect();
    let mut cache = SessionCache::new(4 * POOL, [5; 16]);
    for (c, p) in clients.iter().zip(&keyed) {
        cache.insert(&cert.kid(), c.public(), p.key.clone());
    }

    let mut g = c.benchmark_group("resumption");
    let mut out = Vec::with_capacity(1024);
    let mut run = |name: &str, pool: &[Prepared], agreement: &mut dyn Agreement| {
        let outers: Vec<OuterRequest<'_>> = pool.iter().map(Prepared::outer).collect();
        let mut i = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = &pool[i % POOL];
                let outer = &outers[i % POOL];
                i += 1;
                let acc = unwrap_request(server::accept(
                    &keys,
                    &mount,
                    outer,
                    &limits,
                    NOW,
                    &mut *agreement,
                ));
                let (h, b2) =
                    server::open_request(&acc, &p.stream, &limits).expect("request opens");
                black_box((&h, &b2));
                out.clear();
                server::seal_response(
                    acc.into_response_key(),
                    p.n0,
                    &rsp_head,
                    &rsp_body,
                    NOW,
                    16 * 1024,
                    &mut out,
                )
                .expect("seals");
                black_box(out.len())
            })
        });
    };
    run("fresh_key", &keyed, &mut Plain);
    run("cache_hit", &keyed, &mut Cached(cache));
    run("ticket", &ticketed, &mut TicketsOnly);
    g.finish();
}

fn strikes(c: &mut Criterion) {
    use httpcrypt_proto::replay::StrikeRegister;
    // 50k requests/s over a 60 s window: 3M live entries.
    const RATE: u64 = 50_000;
    const WINDOW: u64 = 60;
    let mut reg = StrikeRegister::new(WINDOW, 4_000_000, [3; 16]);
    let kid = httpcrypt_proto::KeyId([1; 10]);
    let mut n0 = [0u8; NONCE_LEN];
    let start = NOW;
    let mut count = 0u64;
    // The window fills, then 20 more seconds of requests pass: whole
    // buckets expire on the way. Each check of those 20 s is timed alone,
    // for the mean and the slowest (a request that waits for expiry work).
    const STEADY: u64 = 20;
    let (mut steady_ns, mut steady_n, mut worst_ns) = (0u128, 0u64, 0u128);
    let mut entries = 0;
    let mut bytes = 0;
    for sec in 0..WINDOW + STEADY {
        if sec == WINDOW {
            entries = reg.len();
            bytes = reg.memory_bytes();
        }
        for _ in 0..RATE {
            n0[..8].copy_from_slice(&count.to_le_bytes());
            count += 1;
            let t = std::time::Instant::now();
            reg.check(&kid, &n0, start + sec, start + sec)
                .expect("fresh");
            if sec >= WINDOW {
                let d = t.elapsed().as_nanos();
                steady_ns += d;
                steady_n += 1;
                worst_ns = worst_ns.max(d);
            }
        }
    }
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion/strikes");
    let _ = std::fs::create_dir_all(&dir);
    let per_entry = bytes as f64 / entries as f64;
    let mean_ns = steady_ns as f64 / steady_n as f64;
    let worst_us = worst_ns as f64 / 1e3;
    let _ = std::fs::write(
        dir.join("memory.json"),
        format!(
            "{{\"entries\": {entries}, \"bytes\": {bytes}, \"bytes_per_entry\": {per_entry:.2}, \"steady_check_ns\": {mean_ns:.0}, \"worst_check_us\": {worst_us:.1}}}\n"
        ),
    );
    eprintln!(
        "strike register: {entries} entries, {bytes} bytes, {per_entry:.2} bytes/entry; steady check {mean_ns:.0} ns, slowest {worst_us:.1} µs"
    );
    // Both benchmarks go on at the same rate: a second passes every RATE
    // checks, so buckets keep expiring and the register keeps its size
    // (it would otherwise fill up and answer `overloaded`).
    let mut sec = WINDOW + STEADY;
    let mut g = c.benchmark_group("strikes");
    g.bench_function("check_3M", |b| {
        b.iter(|| {
            n0[..8].copy_from_slice(&count.to_le_bytes());
            count += 1;
            if count % RATE == 0 {
                sec += 1;
            }
            black_box(reg.check(&kid, &n0, start + sec, start + sec)).expect("fresh")
        })
    });
    g.bench_function("replay_3M", |b| {
        // Pairs of the last 50 s: all still live.
        let live_from = count - RATE * (WINDOW - 10);
        let mut k = 0u64;
        b.iter(|| {
            n0[..8].copy_from_slice(&(live_from + k % (count - live_from)).to_le_bytes());
            k = k.wrapping_add(7919);
            let r = black_box(reg.check(&kid, &n0, start + sec, start + sec));
            assert_eq!(r, Err(httpcrypt_proto::Error::Replay));
        })
    });
    g.finish();
}

fn hybrid(c: &mut Criterion) {
    use aws_lc_rs::kem as awslc;
    use httpcrypt_proto::hybrid::{Encapsulation, HybridCert, HybridServerKey, KemSecret};
    use ml_kem::kem::Decapsulate as _;
    use ml_kem::kem::KeyExport as _;
    use std::sync::Arc;

    let mut r = rng();
    let mut seed = [0u8; 64];
    r.fill_bytes(&mut seed);
    let kem = Arc::new(KemSecret::from_seed(seed));
    let kex = KexSecret::from_bytes(bytes32(&mut r));
    let cert = HybridCert::sign(
        &IdentityKey::from_seed([1; 32]),
        httpcrypt_proto::Profile::V1,
        1,
        0,
        u32::MAX,
        *kex.public(),
        kem.public().hash(),
    );
    let ek = kem.public().clone();
    let server = HybridServerKey::new(kex, kem.clone(), cert.clone()).expect("the pair matches");
    let client = KexSecret::from_bytes(bytes32(&mut r));
    let e = Encapsulation::new(&cert, &ek, &client, &mut r).expect("valid keys");
    assert_eq!(
        &server.agree(&e.ct_x, &e.ct_m[..]).expect("agrees"),
        e.session_key()
    );
    let ml_dk = ml_kem::ml_kem_768::DecapsulationKey::from_seed(seed.into());
    let ml_ct = ml_kem::ml_kem_768::Ciphertext::try_from(&e.ct_m[..]).expect("1088 bytes");
    let aws_ek = awslc::EncapsulationKey::new(&awslc::ML_KEM_768, ek.as_bytes()).expect("ek");
    let aws_dk = awslc::DecapsulationKey::generate(&awslc::ML_KEM_768).expect("keygen");
    let (aws_ct, _) = aws_dk
        .encapsulation_key()
        .expect("ek")
        .encapsulate()
        .expect("encaps");
    assert_eq!(
        ml_dk.encapsulation_key().to_bytes().as_slice(),
        &ek.as_bytes()[..]
    );

    let mut g = c.benchmark_group("hybrid");
    g.bench_function("hybrid_decaps", |b| {
        b.iter(|| black_box(server.agree(black_box(&e.ct_x), black_box(&e.ct_m[..]))))
    });
    g.bench_function("hybrid_encaps", |b| {
        b.iter(|| black_box(Encapsulation::new(&cert, &ek, &client, &mut r)))
    });
    g.bench_function("kem_keygen", |b| {
        b.iter(|| black_box(KemSecret::from_seed(black_box(seed))))
    });
    g.bench_function("mlkem_decaps_awslc", |b| {
        b.iter(|| black_box(kem.decapsulate(black_box(&e.ct_m[..]))))
    });
    g.bench_function("mlkem_decaps_rustcrypto", |b| {
        b.iter(|| black_box(ml_dk.decapsulate(black_box(&ml_ct))))
    });
    g.bench_function("mlkem_encaps_rustcrypto", |b| {
        b.iter(|| black_box(ek.encapsulate_with(black_box(&[7; 32]))))
    });
    g.bench_function("mlkem_encaps_awslc", |b| {
        b.iter(|| black_box(aws_ek.encapsulate()))
    });
    g.bench_function("mlkem_keygen_rustcrypto", |b| {
        b.iter(|| {
            black_box(ml_kem::ml_kem_768::DecapsulationKey::from_seed(
                black_box(seed).into(),
            ))
        })
    });
    g.bench_function("mlkem_keygen_awslc", |b| {
        b.iter(|| black_box(awslc::DecapsulationKey::generate(&awslc::ML_KEM_768)))
    });
    g.bench_function("mlkem_decaps_awslc_own_ct", |b| {
        b.iter(|| black_box(aws_dk.decapsulate(black_box(aws_ct.as_ref()).into())))
    });
    g.finish();
}

fn config() -> Criterion {
    criterion::Criterion::default()
        .with_measurement(Clock::from_env())
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = x25519, server, kdf, seal, open, inner_parse, resumption, strikes, hybrid
}
criterion_main!(benches);
