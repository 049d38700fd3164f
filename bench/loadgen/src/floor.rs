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
//! - `agreement_us`: the whole suite-1 key agreement a fresh client key
//!   costs, as the server runs it (`KexSecret::session_key`): that X25519
//!   plus the session key's HChaCha20 (spec §2), timed on its own. The
//!   floors of the fresh cells add this one.
//! - `crypto_us`: the cryptography of one exchange and nothing else: open
//!   the request stream of the benchmark's GET (HChaCha20 subkey, one
//!   ChaCha20-Poly1305 record) and seal a 100 B answer with its inner head
//!   (a second subkey and record).
//! - `core_us`: the sans-IO protocol core on that request with a known
//!   session key (a session-cache hit): outer checks, cookie scan, query
//!   decode, open, inner parse (into the packed head the layer keeps),
//!   `Date` window and strike register, inner answer head and seal
//!   (`httpcrypt_proto::server`).
//! - `crypto_1k_us`, `core_1k_us`: the same two with a 1 KiB answer, for the
//!   benchmark's 1 KiB cells.
//! - `crypto_1m_us`, `core_1m_us`: the same with a 1 MiB answer (64 records
//!   of the server's 16 KiB), for the bulk cell: on a machine where the TLS
//!   servers' AES-GCM is much faster than ChaCha20-Poly1305, this alone
//!   bounds the bulk ratio.
//! - `xwing_us`: the suite-2 agreement (spec/hybrid.md H1) in place of the
//!   X25519: X25519, ML-KEM-768 decapsulation and the X-Wing combiner, as
//!   the server runs it (`HybridServerKey::agree`).
//! - `core_pq_us`: the sans-IO core on a fresh suite-2 GET (the generator's
//!   `--keys hybrid` request: 1,088-byte ciphertext in the query) with a
//!   100 B answer, the agreement included (the hybrid accept has no session
//!   cache to stand in for it): `httpcrypt_proto::hybrid::exchange::accept`,
//!   then the same open, parse, `Date`, strike register and seal as
//!   `core_us`.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{ensure, Context as _, Result};
use httpcrypt::ServerConfig;
use httpcrypt_proto::hybrid::{self, HybridCert, HybridKeys, HybridServerKey, KemSecret};
use httpcrypt_proto::inner::{Field, Head as _, PackedRequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Mount};
use httpcrypt_proto::replay::{self, StrikeRegister};
use httpcrypt_proto::server::{
    self, Accept, Agreement, CookieFields, OuterRequest, ServerKey, ServerKeys,
};
use httpcrypt_proto::stream::{self, ResponseKey, Sealer};
use httpcrypt_proto::{
    IdentityKey, KexPublic, KexSecret, KeyCert, Limits, Opener, Profile, SessionKey,
};
use rand_core::OsRng;

use crate::hc::{HcClient, KeyMode};
use crate::hcpq::{HcPqClient, PqMode};

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

/// One request of the pool, made by the generator's own client
/// (`loadgen run --proto hc`), as the server's HTTP parser hands it over.
struct Prepared {
    target: String,
    cookie: String,
    /// The sealed stream carried in the target's query.
    stream: Vec<u8>,
    n0: [u8; 24],
    key: SessionKey,
}

impl Prepared {
    /// A new GET of `path` from `client`, its outer head parsed back.
    fn new(client: &HcClient, path: &str, limits: &Limits) -> Result<Self> {
        let mut wire = Vec::new();
        let pending = client.request(path, false, &mut wire)?;
        Self::parse(&wire, pending.key(), pending.n0(), limits)
    }

    /// A new suite-2 GET of `path` from `client`, its outer head parsed back.
    fn hybrid(client: &HcPqClient, path: &str, limits: &Limits) -> Result<Self> {
        let mut wire = Vec::new();
        let pending = client.request(path, false, &mut wire)?;
        Self::parse(&wire, pending.key(), pending.n0(), limits)
    }

    /// The GET-form request `wire`, sealed under `key` with nonce `n0`.
    fn parse(wire: &[u8], key: &SessionKey, n0: &[u8; 24], limits: &Limits) -> Result<Self> {
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut fields);
        ensure!(
            req.parse(wire)?.is_complete(),
            "the client's request head is incomplete"
        );
        let target = req.path.context("request target")?.to_string();
        let cookie = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("cookie"))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
            .context("Cookie field")?;
        let query = target.split_once('?').context("a GET-form target")?.1;
        Ok(Prepared {
            stream: outer::decode_query(query, limits.max_body)?,
            target,
            cookie,
            n0: *n0,
            key: key.clone(),
        })
    }
}

/// The outer request head of `p` as the server's HTTP stack hands it over.
fn outer_of<'a>(p: &'a Prepared, host: &'a str) -> OuterRequest<'a> {
    OuterRequest {
        method: "GET",
        target: &p.target,
        host: Some(host.as_bytes()),
        cookies: CookieFields::from_slice(&[p.cookie.as_bytes()]),
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
    let not_before = (now - 60) as u32;
    let mut keys = ServerKeys::new();
    let secret = KexSecret::generate(&mut OsRng);
    let cert = KeyCert::sign(
        &identity,
        1,
        not_before,
        not_before + 86_400,
        *secret.public(),
    );
    keys.add_key(secret, cert.clone());
    let secret = &keys.keys()[0].secret;
    let mount = Mount::new("/hc")?;
    let limits = Limits::default();
    let host = "127.0.0.1:8080";
    let path = "/100b";

    // The benchmark's GETs, each with its own client key and nonce.
    let certs = httpcrypt_proto::cert::format_cert_list(&[cert]);
    let client = HcClient::new(certs.as_bytes(), mount.as_str(), host, KeyMode::Fresh)?;
    let pool = (0..POOL)
        .map(|_| Prepared::new(&client, path, &limits))
        .collect::<Result<Vec<_>>>()?;
    let clients: Vec<KexPublic> = (0..POOL)
        .map(|_| *KexSecret::generate(&mut OsRng).public())
        .collect();
    let rsp_head = answer_head();
    let record = 16 * 1024;
    let mut out = Vec::with_capacity(2048);
    // The server's default register. It holds only this loop's entries, so
    // it stays small and in cache: a lower bound too.
    let config = ServerConfig::default();
    let window = config.freshness.unwrap_or(replay::DEFAULT_WINDOW);
    let mut strikes = StrikeRegister::new(window, config.strike_capacity, [9; 16]);
    let mut serial = 0u64;

    let x25519 = time(a.reps, a.iters, |i| {
        black_box(secret.agree_raw(black_box(&clients[i % POOL])).ok());
    });
    // The session key's HChaCha20 on its own, added to the X25519: timed
    // together, the two differ from the X25519 alone by less than the
    // X25519's own spread.
    let shared: Vec<[u8; 32]> = clients
        .iter()
        .map(|c| secret.agree_raw(c).map(|s| *s))
        .collect::<Result<_, _>>()?;
    let session_key = time(a.reps, a.iters, |i| {
        black_box(SessionKey::from_shared(black_box(&shared[i % POOL])));
    });
    let agreement = x25519 + session_key;

    // Times the cryptography and the core with an answer of `len` bytes.
    let mut time_with_answer = |len: usize, iters: usize| -> Result<(f64, f64)> {
        let body = vec![b'x'; len];
        // Every part is checked once before it is timed; the answer's
        // plaintext, as the server seals it, comes out of the first.
        let mut answer = Vec::new();
        for p in &pool {
            let Accept::Request(acc) = server::accept(
                &keys,
                &mount,
                &outer_of(p, host),
                &limits,
                now,
                &mut Known(&p.key),
            )?
            else {
                anyhow::bail!("the pool's request was not taken as HTTPCrypt");
            };
            let (head, _) = server::open_request_as::<PackedRequestHead>(&acc, b"", &limits)?;
            ensure!(
                head.target() == path,
                "the pool's request opens to the wrong target"
            );
            out.clear();
            server::seal_response(
                acc.into_response_key(),
                [7; 24],
                &rsp_head,
                &body,
                now,
                record,
                &mut out,
            )?;
            let opener = Opener::response(&p.key, p.n0, limits.record_limit());
            answer = stream::open_all(opener, &out)?;
        }
        ensure!(
            answer.ends_with(&body),
            "the sealed answer does not carry the body"
        );

        let crypto = time(a.reps, iters, |i| {
            let p = &pool[i % POOL];
            let opener = Opener::request(&p.key, p.n0, limits.record_limit());
            black_box(stream::open_all(opener, black_box(&p.stream)).ok());
            let mut fresh = p.n0;
            fresh[0] ^= 0xa5;
            out.clear();
            let sealer = Sealer::response(ResponseKey::new(p.key.clone(), p.n0), fresh, &mut out);
            black_box(stream::seal_all(sealer, &answer, record, &mut out).ok());
        });

        let core = time(a.reps, iters, |i| {
            let p = &pool[i % POOL];
            let Ok(Accept::Request(acc)) = server::accept(
                &keys,
                &mount,
                black_box(&outer_of(p, host)),
                &limits,
                now,
                &mut Known(&p.key),
            ) else {
                return;
            };
            // The inner head as the layer keeps it: one buffer, with spans.
            let Ok((head, _)) = server::open_request_as::<PackedRequestHead>(&acc, b"", &limits)
            else {
                return;
            };
            let date = acc.check_time(head.field("date"), now, window);
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
        Ok((crypto, core))
    };
    let (crypto, core) = time_with_answer(100, a.iters)?;
    let (crypto_1k, core_1k) = time_with_answer(1024, a.iters)?;
    // A 1 MiB answer takes about as long as 500 of the small ones.
    let (crypto_1m, core_1m) = time_with_answer(1 << 20, (a.iters / 500).max(3))?;

    // Suite 2: the same server identity with one hybrid key (a kex key and
    // the ML-KEM-768 key its certificate names), asked by the generator's
    // own hybrid client.
    let kem = std::sync::Arc::new(KemSecret::generate(&mut OsRng));
    let kex = KexSecret::generate(&mut OsRng);
    let hcert = HybridCert::sign(
        &identity,
        Profile::V1,
        2,
        not_before,
        not_before + 86_400,
        *kex.public(),
        kem.public().hash(),
    );
    let mut hkeys = HybridKeys::new();
    hkeys.add_key(HybridServerKey::new(kex, kem.clone(), hcert.clone())?);
    let list = hybrid::cert::format_cert_list(&[hcert], &[kem.public()]);
    // The GET form (`true`): the pool is parsed as the server's HTTP stack
    // hands a GET over; a POST's core reads the same bytes from the body
    // instead of decoding them from the query, which costs no more.
    let pq_client = HcPqClient::new(list.as_bytes(), mount.as_str(), host, PqMode::Fresh, true)?;
    let pq_pool = (0..POOL)
        .map(|_| Prepared::hybrid(&pq_client, path, &limits))
        .collect::<Result<Vec<_>>>()?;
    let hkey = &hkeys.keys()[0];
    // The agreement's inputs as the server finds them: `ct_X` from the
    // cookie, `ct_M` from the start of the decoded query.
    let mut encaps = Vec::with_capacity(POOL);
    for p in &pq_pool {
        // `{kid}{pad}={ct_X}{pad}`: ct_X is the value's first 43 characters.
        let value = p.cookie.rsplit_once('=').context("cookie value")?.1;
        let ct_x = httpcrypt_proto::b64::decode(value.as_bytes().get(..43).context("ct_X")?)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
            .context("the cookie's ct_X")?;
        let ct_x = KexPublic(ct_x);
        let ct_m = p.stream[..hybrid::CIPHERTEXT_LEN].to_vec();
        ensure!(
            hkey.agree(&ct_x, &ct_m)? == p.key,
            "the floor's hybrid agreement does not give the client's key"
        );
        encaps.push((ct_x, ct_m));
    }
    let xwing = time(a.reps, a.iters, |i| {
        let (ct_x, ct_m) = &encaps[i % POOL];
        black_box(hkey.agree(black_box(ct_x), black_box(ct_m)).ok());
    });
    let body = vec![b'x'; 100];
    for p in &pq_pool {
        let Accept::Request(acc) =
            hybrid::exchange::accept(&hkeys, &mount, &outer_of(p, host), &[], &limits, now)?
        else {
            anyhow::bail!("the pool's suite-2 request was not taken as HTTPCrypt");
        };
        let (head, _) = server::open_request_as::<PackedRequestHead>(&acc, b"", &limits)?;
        ensure!(
            head.target() == path,
            "the pool's suite-2 request opens to the wrong target"
        );
        out.clear();
        server::seal_response(
            acc.into_response_key(),
            [7; 24],
            &rsp_head,
            &body,
            now,
            record,
            &mut out,
        )?;
        let opener = Opener::response(&p.key, p.n0, limits.record_limit());
        ensure!(
            stream::open_all(opener, &out)?.ends_with(&body),
            "the sealed suite-2 answer does not carry the body"
        );
    }
    let core_pq = time(a.reps, a.iters, |i| {
        let p = &pq_pool[i % POOL];
        let Ok(Accept::Request(acc)) = hybrid::exchange::accept(
            &hkeys,
            &mount,
            black_box(&outer_of(p, host)),
            &[],
            &limits,
            now,
        ) else {
            return;
        };
        let Ok((head, _)) = server::open_request_as::<PackedRequestHead>(&acc, b"", &limits) else {
            return;
        };
        let date = acc.check_time(head.field("date"), now, window);
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
        "agreement_us": agreement,
        "crypto_us": crypto,
        "core_us": core,
        "crypto_1k_us": crypto_1k,
        "core_1k_us": core_1k,
        "crypto_1m_us": crypto_1m,
        "core_1m_us": core_1m,
        "xwing_us": xwing,
        "core_pq_us": core_pq,
        "iters": a.iters,
        "reps": a.reps,
    });
    println!("{doc}");
    Ok(())
}

/// A session key known in advance: the floor leaves the key agreement out.
struct Known<'a>(&'a SessionKey);

impl Agreement for Known<'_> {
    fn cached(&mut self, _: &ServerKey, _: &KexPublic) -> Option<SessionKey> {
        Some(self.0.clone())
    }
}
