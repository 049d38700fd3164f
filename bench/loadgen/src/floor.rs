//! `loadgen floor`: what the protocol alone costs per request on this core,
//! with no HTTP stack, no sockets and no application around it. The
//! end-to-end report adds these times to the plaintext path it measured, so
//! each ratio target can be set against the best any server built on this
//! protocol could do here (a lower bound: the real server also parses a
//! longer outer request, builds the application's request and so on).
//!
//! Three parts, each timed in a loop over a pool of distinct inputs (so no
//! branch history or cache of one input helps), median of repetitions:
//!
//! - `x25519_us`: one X25519 with a client's public key, the server's only
//!   public-key operation for a fresh client key (aws-lc, as the server).
//! - `crypto_us`: the cryptography of one exchange and nothing else: open
//!   the request stream of the benchmark's GET (HChaCha20 subkey, one
//!   ChaCha20-Poly1305 record) and seal a 100 B answer with its inner head
//!   (a second subkey and record).
//! - `core_us`: the sans-IO protocol core on that request with a known
//!   session key (a session-cache hit): outer checks, cookie scan, query
//!   decode, open, inner parse, `Date` window and strike register, inner
//!   answer head and seal (`httpcrypt_proto::server`).

use std::hint::black_box;
use std::time::Instant;

use anyhow::{ensure, Result};
use httpcrypt_proto::inner::{Field, Head as _, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Mount};
use httpcrypt_proto::replay::{self, StrikeRegister};
use httpcrypt_proto::server::{self, Accept, OuterRequest, ServerKeys};
use httpcrypt_proto::stream::{self, ResponseKey, Sealer};
use httpcrypt_proto::{IdentityKey, KexPublic, KexSecret, KeyCert, Limits, Opener, SessionKey};
use rand_core::{OsRng, RngCore};

/// Distinct inputs cycled through by every loop.
const POOL: usize = 64;

/// Options of `loadgen floor`.
#[derive(clap::Args)]
pub struct FloorArgs {
    /// Iterations per repetition of each part.
    #[arg(long, default_value_t = 5000)]
    iters: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 7)]
    reps: usize,
}

/// One request of the pool, as `loadgen run --proto hc --keys reuse` sends it.
struct Prepared {
    target: String,
    cookie: String,
    stream: Vec<u8>,
    n0: [u8; 24],
    key: SessionKey,
}

/// The outer request head of `p` as the server's HTTP stack hands it over.
fn outer_of<'a>(p: &'a Prepared, host: &'a str) -> OuterRequest<'a> {
    OuterRequest {
        method: "GET",
        target: &p.target,
        host: Some(host.as_bytes()),
        cookies: vec![p.cookie.as_bytes()],
        content_length: None,
        has_body: false,
    }
}

/// The answer's plaintext: an inner head like the file service's and 100 B.
fn answer_head() -> ResponseHead {
    let mut head = ResponseHead::new(200, "OK");
    head.fields = vec![
        Field::new("Content-Type", "application/octet-stream"),
        Field::new("Last-Modified", "Wed, 25 Nov 2026 10:00:00 GMT"),
    ];
    head
}

/// Median over `reps` of the mean µs per iteration of `f` over `iters` calls.
fn time(reps: usize, iters: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut per = Vec::with_capacity(reps);
    let mut i = 0usize;
    // One repetition's worth of warm-up.
    for _ in 0..iters {
        f(i);
        i = i.wrapping_add(1);
    }
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            f(i);
            i = i.wrapping_add(1);
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    per.sort_by(f64::total_cmp);
    per[per.len() / 2]
}

pub fn run(a: FloorArgs) -> Result<()> {
    ensure!(
        a.iters > 0 && a.reps > 0,
        "--iters and --reps must be positive"
    );
    let now = crate::hc::unix_now();
    let identity = IdentityKey::generate(&mut OsRng);
    let secret = KexSecret::generate(&mut OsRng);
    let not_before = (now - 60) as u32;
    let cert = KeyCert::sign(
        &identity,
        1,
        not_before,
        not_before + 86_400,
        *secret.public(),
    );
    let server_public = *secret.public();
    let mut keys = ServerKeys::new();
    keys.add_key(secret, cert);
    let secret = &keys.keys()[0].secret;
    let mount = Mount::new("/hc")?;
    let limits = Limits::default();
    let host = "127.0.0.1:8080";

    // The benchmark's GET (hc.rs), each with its own client key and nonce.
    let mut pool = Vec::with_capacity(POOL);
    let mut clients: Vec<KexPublic> = Vec::with_capacity(POOL);
    for _ in 0..POOL {
        let client = KexSecret::generate(&mut OsRng);
        let key = client.session_key(&server_public)?;
        let mut n0 = [0u8; 24];
        OsRng.fill_bytes(&mut n0);
        let pad = |n: usize| "A".repeat(n);
        let cookie =
            outer::format_cookie(&server_public.kid(), &client.public().0, &pad(8), &pad(8))?;
        let mut head = RequestHead::new("GET", "/100b");
        head.fields.push(Field::new("Host", host));
        head.fields
            .push(Field::new("Date", replay::format_date(now)));
        let mut plain = Vec::new();
        head.encode(&mut plain);
        let mut sealed = Vec::new();
        stream::seal_all(Sealer::request(&key, n0), &plain, plain.len(), &mut sealed)?;
        pool.push(Prepared {
            target: mount.get_target(&n0, &sealed),
            cookie,
            stream: sealed,
            n0,
            key,
        });
        clients.push(*client.public());
    }
    let rsp_head = answer_head();
    let body = [b'x'; 100];
    let record = 16 * 1024;
    let mut out = Vec::with_capacity(1024);

    // Every part is checked once before it is timed.
    for p in &pool {
        let Accept::Request(acc) =
            server::accept_with(&keys, &mount, &outer_of(p, host), &limits, now, |_, _| {
                Ok(p.key.clone())
            })?
        else {
            anyhow::bail!("the pool's request was not taken as HTTPCrypt");
        };
        let (head, _) = server::open_request(&acc, b"", &limits)?;
        ensure!(
            head.target == "/100b",
            "the pool's request opens to the wrong target"
        );
    }

    let x25519 = time(a.reps, a.iters, |i| {
        black_box(secret.agree_raw(black_box(&clients[i % POOL])).ok());
    });

    // The inner answer's plaintext, as the server seals it.
    let mut answer = Vec::new();
    {
        let mut h = rsp_head.clone();
        h.fields.push(Field::new("Date", replay::format_date(now)));
        h.fields.push(Field::new("Content-Length", "100"));
        h.encode(&mut answer);
        answer.extend_from_slice(&body);
    }
    let crypto = time(a.reps, a.iters, |i| {
        let p = &pool[i % POOL];
        let opener = Opener::request(&p.key, p.n0, limits.record_limit());
        black_box(stream::open_all(opener, black_box(&p.stream)).ok());
        let mut fresh = p.n0;
        fresh[0] ^= 0xa5;
        out.clear();
        let sealer = Sealer::response(ResponseKey::new(p.key.clone(), p.n0), fresh, &mut out);
        black_box(stream::seal_all(sealer, &answer, record, &mut out).ok());
    });

    // The server's default register (4 Mi entries). It holds only this
    // loop's entries, so it stays small and in cache: a lower bound too.
    let mut strikes = StrikeRegister::new(replay::DEFAULT_WINDOW, 1 << 22, [9; 16]);
    let mut serial = 0u64;
    let core = time(a.reps, a.iters, |i| {
        let p = &pool[i % POOL];
        let Ok(Accept::Request(acc)) = server::accept_with(
            &keys,
            &mount,
            black_box(&outer_of(p, host)),
            &limits,
            now,
            |_, _| Ok(p.key.clone()),
        ) else {
            return;
        };
        let Ok((head, _)) = server::open_request(&acc, b"", &limits) else {
            return;
        };
        let date = acc.check_time(head.field("date"), now, replay::DEFAULT_WINDOW);
        // The pool repeats its nonces; the register sees a new one each time.
        serial += 1;
        let mut n0 = acc.n0;
        n0[..8].copy_from_slice(&serial.to_le_bytes());
        black_box(date.and_then(|d| strikes.check(&acc.kid, &n0, d, now)).ok());
        let mut fresh = p.n0;
        fresh[0] ^= 0x5a;
        out.clear();
        black_box(
            server::seal_response(
                acc.into_response_key(),
                fresh,
                &rsp_head,
                &body,
                now,
                record,
                &mut out,
            )
            .ok(),
        );
    });

    let doc = serde_json::json!({
        "x25519_us": x25519,
        "crypto_us": crypto,
        "core_us": core,
        "iters": a.iters,
        "reps": a.reps,
    });
    println!("{doc}");
    Ok(())
}
