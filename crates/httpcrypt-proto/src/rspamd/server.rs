//! The server end of an rspamd-profile exchange, sans-IO (profile
//! "Request", "Response").
//!
//! The caller parses the outer head and hands the `Key` value to
//! [`KeyHeader::parse`] (`None` means a plaintext request); then
//! [`Keyring::open_request`] yields the inner request and a [`Responder`]
//! that seals exactly one response. The inner response is opaque bytes: a
//! complete HTTP/1.1 response with the real status, `Content-Length` and
//! `Content-Type`, built by the caller.

use rand_core::CryptoRngCore;

use super::client::CONTENT_TYPE;
use super::cryptobox::{Nm, NONCE_LEN, OVERHEAD};
use super::keys::{KeyHeader, ShortId};
use crate::error::{Error, Result};
use crate::keys::KexSecret;

/// Appends the outer response head (profile "Response") for a sealed body
/// of `body_len` bytes.
pub fn format_response_head(body_len: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    for (name, value) in response_fields(body_len) {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// The outer response fields in the order [`format_response_head`] writes
/// them, for drivers whose HTTP library writes the head (status 200):
/// `Content-Length`, `Content-Type`, `Connection: close`.
pub fn response_fields(body_len: usize) -> [(&'static str, String); 3] {
    [
        ("Content-Length", body_len.to_string()),
        ("Content-Type", CONTENT_TYPE.to_string()),
        ("Connection", "close".to_string()),
    ]
}

/// A server's secret keys, found by the short ID of their public key.
#[derive(Default)]
pub struct Keyring {
    keys: Vec<(ShortId, KexSecret)>,
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// Adds a key.
    pub fn insert(&mut self, key: KexSecret) {
        self.keys.push((ShortId::of(key.public()), key));
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys whose public key has this short ID (normally at most one).
    pub fn find<'a>(&'a self, id: &'a ShortId) -> impl Iterator<Item = &'a KexSecret> + 'a {
        self.keys
            .iter()
            .filter(move |(s, _)| s == id)
            .map(|(_, k)| k)
    }

    /// Opens a request body sealed to one of these keys: the inner request
    /// and the [`Responder`] for its reply.
    ///
    /// [`Error::UnknownKey`] if no key has the short ID (rspamd's controller
    /// answers a plaintext 500); [`Error::SmallOrder`] for a small-order client
    /// key; [`Error::Truncated`] or [`Error::Integrity`] if the body does not
    /// open (the controller answers a sealed inner 500 then, which needs `nm`:
    /// use [`Keyring::responder`]).
    pub fn open_request(&self, key: &KeyHeader, body: &[u8]) -> Result<(Vec<u8>, Responder)> {
        let mut result = Err(Error::UnknownKey);
        // Several keys may share a 5-byte short ID; the one whose tag verifies wins.
        for secret in self.find(&key.short_id) {
            let nm = Nm::derive(secret, &key.client)?;
            result = nm.open(body).map(|inner| (inner, Responder { nm }));
            if result.is_ok() {
                break;
            }
        }
        result
    }

    /// A responder for `key` without opening a body, to seal an error reply
    /// after [`Keyring::open_request`] failed with a known key. With several
    /// keys under one short ID, the first is used.
    pub fn responder(&self, key: &KeyHeader) -> Result<Responder> {
        let secret = self.find(&key.short_id).next().ok_or(Error::UnknownKey)?;
        Ok(Responder {
            nm: Nm::derive(secret, &key.client)?,
        })
    }
}

impl FromIterator<KexSecret> for Keyring {
    fn from_iter<I: IntoIterator<Item = KexSecret>>(iter: I) -> Keyring {
        let mut k = Keyring::new();
        for key in iter {
            k.insert(key);
        }
        k
    }
}

impl core::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|(s, _)| s))
            .finish()
    }
}

/// The server end of one exchange: seals exactly one response under the
/// request's `nm`. Not `Clone`; consumed by sealing.
pub struct Responder {
    nm: Nm,
}

impl Responder {
    /// Appends the complete outer response (head and sealed body) carrying
    /// the inner response `inner`, under a fresh nonce from `rng`.
    pub fn seal_response(
        self,
        rng: &mut impl CryptoRngCore,
        inner: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        self.seal_response_with(&nonce, inner, out)
    }

    /// Appends only the sealed body (`nonce' || tag' || E(inner)`), under a
    /// fresh nonce from `rng`: for drivers whose HTTP library writes the head
    /// (with [`response_fields`]).
    pub fn seal_body(
        self,
        rng: &mut impl CryptoRngCore,
        inner: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        self.nm.seal(&nonce, inner, out)
    }

    /// [`Responder::seal_response`] with an explicit nonce (for test vectors).
    pub fn seal_response_with(
        self,
        nonce: &[u8; NONCE_LEN],
        inner: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let start = out.len();
        format_response_head(OVERHEAD + inner.len(), out);
        if let Err(e) = self.nm.seal(nonce, inner, out) {
            out.truncate(start);
            return Err(e);
        }
        Ok(())
    }
}

impl core::fmt::Debug for Responder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Responder(..)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::keys::KexPublic;
    use crate::rspamd::testdata::{split_request, RSPAMC_STAT, RSPAMC_SYMBOLS, SERVER_KEYPAIR};
    use crate::rspamd::{keypair, Client};
    use rand_chacha::rand_core::SeedableRng;

    fn keyring() -> Keyring {
        [keypair::parse(SERVER_KEYPAIR).unwrap()]
            .into_iter()
            .collect()
    }

    fn captured((head, body): (&str, &str)) -> Vec<u8> {
        [head.as_bytes().to_vec(), hex::decode(body).unwrap()].concat()
    }

    #[test]
    fn opens_requests_captured_from_rspamc() {
        let keys = keyring();
        let (key, body) = split_request(&captured(RSPAMC_STAT));
        let key = KeyHeader::parse(&key).unwrap().unwrap();
        let (inner, _) = keys.open_request(&key, &body).unwrap();
        let inner = String::from_utf8(inner).unwrap();
        assert!(inner.starts_with("GET /stat HTTP/1.0\r\n"), "{inner}");
        assert!(inner.ends_with("\r\n\r\n"), "{inner}");

        let (key, body) = split_request(&captured(RSPAMC_SYMBOLS));
        let key = KeyHeader::parse(&key).unwrap().unwrap();
        let (inner, _) = keys.open_request(&key, &body).unwrap();
        let inner = String::from_utf8(inner).unwrap();
        assert!(inner.starts_with("POST /checkv2 HTTP/1.0\r\n"), "{inner}");
        assert!(inner.contains("Content-Length: 69\r\n"), "{inner}");
        assert!(inner.ends_with("\r\n\r\nFrom: a@example.org\r\nTo: b@example.org\r\nSubject: hi\r\n\r\nhello rspamd\r\n"));

        let mut flipped = body.clone();
        flipped[30] ^= 1;
        assert!(matches!(
            keys.open_request(&key, &flipped),
            Err(Error::Integrity)
        ));
    }

    #[test]
    fn round_trip() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let keys = keyring();
        let server_pk = *keys.keys[0].1.public();
        let inner = b"POST /checkv2 HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello";
        let mut out = Vec::new();
        let client = Client::seal_request(
            &mut rng,
            &server_pk,
            "rspamd.example:11333",
            inner,
            &mut out,
        )
        .unwrap();
        let (key, body) = split_request(&out);
        let key = KeyHeader::parse(&key).unwrap().unwrap();
        let (got, responder) = keys.open_request(&key, &body).unwrap();
        assert_eq!(got, inner);

        let reply =
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}";
        let mut resp = Vec::new();
        responder.seal_response(&mut rng, reply, &mut resp).unwrap();
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut r = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(n) = r.parse(&resp).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(r.code, Some(200));
        assert_eq!(client.open_response(&resp[n..]).unwrap(), reply);
    }

    #[test]
    fn exact_response_bytes() {
        let key = KeyHeader {
            short_id: ShortId::of(keypair::parse(SERVER_KEYPAIR).unwrap().public()),
            client: *KexSecret::from_bytes([0x42; 32]).public(),
        };
        let mut resp = b"..".to_vec();
        keyring()
            .responder(&key)
            .unwrap()
            .seal_response_with(&[4; 24], b"x", &mut resp)
            .unwrap();
        let head = "..HTTP/1.1 200 OK\r\nContent-Length: 41\r\n\
                    Content-Type: application/octet-stream\r\nConnection: close\r\n\r\n";
        assert_eq!(&resp[..head.len()], head.as_bytes());
        assert_eq!(resp.len(), head.len() + 41);
    }

    #[test]
    fn failures() {
        let keys = keyring();
        let server = *keys.keys[0].1.public();
        let client = KexSecret::from_bytes([0x42; 32]);
        let mut out = Vec::new();
        Client::seal_request_with(
            &client,
            &[3; 24],
            &server,
            "h",
            b"GET / HTTP/1.0\r\n\r\n",
            &mut out,
        )
        .unwrap();
        let (key, body) = split_request(&out);
        let key = KeyHeader::parse(&key).unwrap().unwrap();
        let unknown = KeyHeader {
            short_id: ShortId([0; 5]),
            ..key
        };
        assert_eq!(
            keys.open_request(&unknown, &body).err(),
            Some(Error::UnknownKey)
        );
        assert_eq!(keys.responder(&unknown).err(), Some(Error::UnknownKey));
        assert_eq!(
            Keyring::new().open_request(&key, &body).err(),
            Some(Error::UnknownKey)
        );
        let small = KeyHeader {
            client: KexPublic([0; 32]),
            ..key
        };
        assert_eq!(
            keys.open_request(&small, &body).err(),
            Some(Error::SmallOrder)
        );
        let other = KeyHeader {
            client: *KexSecret::from_bytes([7; 32]).public(),
            ..key
        };
        assert_eq!(
            keys.open_request(&other, &body).err(),
            Some(Error::Integrity)
        );
        assert_eq!(
            keys.open_request(&key, &body[..39]).err(),
            Some(Error::Truncated)
        );
        for i in 0..body.len() {
            let mut b = body.clone();
            b[i] ^= 0x80;
            assert_eq!(keys.open_request(&key, &b).err(), Some(Error::Integrity));
        }
        // A key whose short ID collides is skipped in favour of the one that opens.
        let mut two = Keyring::new();
        two.insert(KexSecret::from_bytes([9; 32]));
        two.insert(keypair::parse(SERVER_KEYPAIR).unwrap());
        two.keys[0].0 = key.short_id;
        assert!(two.open_request(&key, &body).is_ok());
        assert_eq!(two.len(), 2);
        assert!(!std::format!("{two:?}").contains("yousub"));
    }
}
