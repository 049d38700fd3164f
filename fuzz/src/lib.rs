//! Shared pieces of the httpcrypt-proto fuzz targets: a byte reader that
//! turns the head of a fuzz input into parameters (and its mirror image for
//! writing seeds), input splitting, fixed keys, and the incremental drivers
//! that are compared against the whole-input decoders.
//!
//! Every target reads its parameters with [`Input`] from the front of the
//! input and treats the rest as the bytes under test; `examples/gen_seeds/`
//! writes seeds with [`SeedWriter`] in the same layout.

use std::sync::OnceLock;

use httpcrypt_proto::inner::{Decoder, Head, InnerEvent};
use httpcrypt_proto::keys::{IdentityKey, KexSecret, KeyId, SessionKey};
use httpcrypt_proto::server::ServerKeys;
use httpcrypt_proto::stream::{Event, Opener};
use httpcrypt_proto::ticket::TicketKey;
use httpcrypt_proto::{Error, KeyCert, Limits};

/// Reads parameters from the front of a fuzz input. Past the end every read
/// yields zeros, so any input is a valid parameter block.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Up to `n` bytes (fewer at the end of input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// Exactly `N` bytes, zero-filled past the end of input.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let b = self.bytes(N);
        out[..b.len()].copy_from_slice(b);
        out
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.data)
    }

    /// Whether all input has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Writes a seed in the layout [`Input`] reads.
#[derive(Debug, Default, Clone)]
pub struct SeedWriter(pub Vec<u8>);

impl SeedWriter {
    /// An empty seed.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends one byte.
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    /// Appends a little-endian u16.
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a little-endian u32.
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a little-endian u64.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends raw bytes.
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    /// The finished seed.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Split plans for [`split`].
pub mod plan {
    /// Two pieces at offset `at` (taken modulo `len + 1`).
    pub const fn two(at: u16) -> u32 {
        (at as u32) << 8
    }
    /// One byte at a time.
    pub const ONE_BY_ONE: u32 = 1;
    /// Random pieces of 0..=`max` bytes (`max` ≥ 2), drawn from `seed`.
    pub const fn random(max: u8, seed: u32) -> u32 {
        (seed << 8) | max as u32
    }
}

/// Cuts `data` into pieces according to a fuzzer-chosen `plan`:
/// - low byte 0: two pieces at offset `(plan >> 8) % (len + 1)`;
/// - low byte 1: one byte at a time;
/// - low byte k ≥ 2: pieces of 0..=k bytes from a xorshift seeded by `plan`
///   (empty pieces included: `receive(&[])` must be harmless).
///
/// The pieces always concatenate to `data`, and there is at least one.
pub fn split(data: &[u8], plan: u32) -> Vec<&[u8]> {
    let k = (plan & 0xff) as usize;
    let mut out = Vec::new();
    match k {
        0 => {
            let at = (plan >> 8) as usize % (data.len() + 1);
            out.push(&data[..at]);
            out.push(&data[at..]);
        }
        1 if data.is_empty() => out.push(data),
        1 => out.extend(data.chunks(1)),
        _ => {
            let mut x = plan | 1;
            let mut rest = data;
            // Bounded: after this many pieces the remainder goes in one.
            let mut budget = 2 * data.len() + 4;
            while !rest.is_empty() && budget > 0 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let n = (x as usize % (k + 1)).min(rest.len());
                out.push(&rest[..n]);
                rest = &rest[n..];
                budget -= 1;
            }
            out.push(rest);
        }
    }
    debug_assert_eq!(out.concat(), data);
    out
}

/// Unix time at which the fixtures are valid.
pub const NOW: u64 = 1_700_000_000;
/// The session key of the stream fixtures.
pub const SESSION_KEY: [u8; 32] = [0x42; 32];
/// The request nonce of the stream fixtures.
pub const REQUEST_N0: [u8; 24] = [0x24; 24];
/// Secret of the server's current kex key.
pub const SERVER_SECRET: [u8; 32] = [0x11; 32];
/// Secret of a server kex key whose certificate has expired.
pub const EXPIRED_SECRET: [u8; 32] = [0x12; 32];
/// Seed of the identity key that signs the certificates.
pub const IDENTITY_SEED: [u8; 32] = [0x22; 32];
/// Ticket-key ID.
pub const TICKET_ID: KeyId = KeyId([0x33; 10]);
/// Ticket-key bytes.
pub const TICKET_KEY: [u8; 32] = [0x44; 32];
/// A client's kex secret (for seeds).
pub const CLIENT_SECRET: [u8; 32] = [0x55; 32];
/// Secret of the `Random` token.
pub const TOKEN_SECRET: &[u8] = b"fuzz-token-secret";
/// Mounts the server targets choose from.
pub const MOUNTS: [&str; 3] = ["", "/hc", "/.well-known/httpcrypt"];

/// The session key of the stream fixtures.
pub fn session_key() -> SessionKey {
    SessionKey::from_bytes(SESSION_KEY)
}

/// The identity key that signs the fixture certificates.
pub fn identity() -> IdentityKey {
    IdentityKey::from_seed(IDENTITY_SEED)
}

/// The certificate of the current server key (valid a day either side of [`NOW`]).
pub fn server_cert() -> KeyCert {
    let secret = KexSecret::from_bytes(SERVER_SECRET);
    KeyCert::sign(
        &identity(),
        2,
        (NOW - 86_400) as u32,
        (NOW + 86_400) as u32,
        *secret.public(),
    )
}

/// The certificate of the expired server key.
pub fn expired_cert() -> KeyCert {
    let secret = KexSecret::from_bytes(EXPIRED_SECRET);
    KeyCert::sign(
        &identity(),
        1,
        (NOW - 3 * 86_400) as u32,
        (NOW - 86_400) as u32,
        *secret.public(),
    )
}

/// The fixture ticket key.
pub fn ticket_key() -> TicketKey {
    TicketKey::new(TICKET_ID, TICKET_KEY)
}

/// The server's key set: one current and one expired kex key, one ticket
/// key (paired with the current kex key).
pub fn server_keys() -> &'static ServerKeys {
    static KEYS: OnceLock<ServerKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = ServerKeys::new();
        keys.add_key(KexSecret::from_bytes(EXPIRED_SECRET), expired_cert());
        keys.add_key(KexSecret::from_bytes(SERVER_SECRET), server_cert());
        // The ticket key came with the current kex key: it takes short
        // tickets (spec §7.3) too.
        keys.add_ticket_key_for(ticket_key(), server_cert().kid(), NOW + 86_400);
        keys
    })
}

/// The suite-2 fixture: a certificate (valid a day either side of [`NOW`])
/// for the current kex key and an ML-KEM key, and that ML-KEM key.
pub fn hybrid_fixture() -> (
    httpcrypt_proto::hybrid::HybridCert,
    std::sync::Arc<httpcrypt_proto::hybrid::KemSecret>,
) {
    use httpcrypt_proto::hybrid::{HybridCert, KemSecret};
    static FIXTURE: OnceLock<(HybridCert, std::sync::Arc<KemSecret>)> = OnceLock::new();
    FIXTURE
        .get_or_init(|| {
            let kem = std::sync::Arc::new(KemSecret::from_seed([0x4b; 64]));
            let cert = HybridCert::sign(
                &identity(),
                httpcrypt_proto::Profile::V1,
                2,
                (NOW - 86_400) as u32,
                (NOW + 86_400) as u32,
                *KexSecret::from_bytes(SERVER_SECRET).public(),
                kem.public().hash(),
            );
            (cert, kem)
        })
        .clone()
}

/// The hybrid server's key set: the suite-2 fixture key and the ticket key.
pub fn hybrid_keys() -> &'static httpcrypt_proto::hybrid::HybridKeys {
    use httpcrypt_proto::hybrid::{HybridKeys, HybridServerKey};
    static KEYS: OnceLock<HybridKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let (cert, kem) = hybrid_fixture();
        let mut keys = HybridKeys::new();
        keys.add_key(
            HybridServerKey::new(KexSecret::from_bytes(SERVER_SECRET), kem, cert)
                .expect("the fixture pair matches"),
        );
        keys.add_ticket_key(ticket_key(), NOW + 86_400);
        keys
    })
}

/// Limit presets the targets choose from by index (wrapping).
pub fn limits(index: u8) -> Limits {
    let d = Limits::default();
    match index % 4 {
        0 => d,
        1 => Limits {
            max_inner_head: 64,
            max_inner_fields: 4,
            max_body: 64,
            ..d
        },
        2 => Limits {
            max_inner_head: 512,
            max_inner_fields: 16,
            max_body: 4096,
            ..d
        },
        _ => Limits {
            max_inner_fields: 0,
            max_body: 0,
            ..d
        },
    }
}

/// Asserts that `r` is `Ok` or one of `allowed` errors.
#[track_caller]
pub fn assert_errors<T>(r: &Result<T, Error>, allowed: &[Error]) {
    if let Err(e) = r {
        assert!(
            allowed.contains(e),
            "unexpected error {e:?} (allowed: {allowed:?})"
        );
    }
}

/// Errors a stream [`Opener`] may report.
pub const STREAM_ERRORS: &[Error] = &[
    Error::RecordTooLarge,
    Error::Integrity,
    Error::ClearInRequest,
    Error::Truncated,
    Error::TrailingData,
    Error::TooManyRecords,
];

/// Errors an inner [`Decoder`] may report.
pub const INNER_ERRORS: &[Error] = &[
    Error::MalformedInner,
    Error::InnerHeadTooLarge,
    Error::ForbiddenHeader,
    Error::ContentLengthMismatch,
];

/// One verified record's plaintext and its CLEAR flag.
pub type Record = (Vec<u8>, bool);

/// Drives `opener` with `pieces`, pulling events after every piece when
/// `eager` (else only at the end), then calls `finish`. Checks the event
/// contract on the way: `Data` is never empty, nothing follows `End`, and
/// `is_complete` agrees with `finish`.
pub fn open_pieces(
    mut opener: Opener,
    pieces: &[&[u8]],
    eager: bool,
) -> Result<Vec<Record>, Error> {
    let mut records = Vec::new();
    let mut ended = false;
    let mut drain = |opener: &mut Opener, records: &mut Vec<Record>| -> Result<(), Error> {
        while let Some(ev) = opener.next_event()? {
            assert!(!ended, "event after End");
            match ev {
                Event::Data { plaintext, clear } => {
                    assert!(!plaintext.is_empty(), "empty Data event");
                    records.push((plaintext.to_vec(), clear));
                }
                Event::End => ended = true,
            }
        }
        Ok(())
    };
    for p in pieces {
        opener.receive(p)?;
        if eager {
            drain(&mut opener, &mut records)?;
        }
    }
    drain(&mut opener, &mut records)?;
    let complete = opener.is_complete();
    let r = opener.finish();
    assert_eq!(
        complete,
        r.is_ok(),
        "is_complete disagrees with finish: {r:?}"
    );
    assert_eq!(ended, r.is_ok(), "End event disagrees with finish: {r:?}");
    r.map(|()| records)
}

/// Drives an inner [`Decoder`] with `pieces`; checks that the head comes
/// exactly once, first, and that body chunks are never empty.
pub fn decode_pieces<H: Head + Clone>(
    limits: Limits,
    pieces: &[&[u8]],
) -> Result<(H, Vec<u8>), Error> {
    let mut d = Decoder::<H>::new(limits);
    let mut head: Option<H> = None;
    let mut body = Vec::new();
    for p in pieces {
        d.receive(p)?;
        while let Some(ev) = d.next_event()? {
            match ev {
                InnerEvent::Head(h) => {
                    assert!(head.is_none(), "second Head event");
                    head = Some(h);
                }
                InnerEvent::Body(b) => {
                    assert!(head.is_some(), "Body before Head");
                    assert!(!b.is_empty(), "empty Body event");
                    body.extend_from_slice(b);
                }
            }
        }
    }
    d.finish()?;
    let head = head.expect("finish succeeded without a head");
    Ok((head, body))
}

/// Fixtures of the rspamd profile.
pub mod rspamd {
    use std::sync::OnceLock;

    use httpcrypt_proto::keys::KexSecret;
    use httpcrypt_proto::rspamd::base32;
    use httpcrypt_proto::rspamd::cryptobox::Nm;
    use httpcrypt_proto::rspamd::Keyring;

    /// `privkey` of a key pair printed by a real `rspamadm keypair`
    /// (rspamd 3.4); the seeds hold requests `rspamc --key` sealed to it.
    pub const PRIVKEY: &str = "yousub68a7xnpt7mhjfxfb5m9mhite5q9ejsurfdqjjn7txg58hy";
    /// A second server key of the keyring.
    pub const OTHER_SECRET: [u8; 32] = [0x66; 32];
    /// The fixed `nm` of the cryptobox checks.
    pub const NM: [u8; 32] = [0x77; 32];

    /// The rspamd server key.
    pub fn server_secret() -> KexSecret {
        KexSecret::from_bytes(base32::decode_key(PRIVKEY.as_bytes()).expect("fixture key"))
    }

    /// The fixed `nm`.
    pub fn nm() -> Nm {
        Nm::from_bytes(NM)
    }

    /// A keyring holding [`server_secret`] and one other key.
    pub fn keyring() -> &'static Keyring {
        static RING: OnceLock<Keyring> = OnceLock::new();
        RING.get_or_init(|| {
            [KexSecret::from_bytes(OTHER_SECRET), server_secret()]
                .into_iter()
                .collect()
        })
    }
}
