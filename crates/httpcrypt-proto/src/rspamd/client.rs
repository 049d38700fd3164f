//! The client end of an rspamd-profile exchange, sans-IO (profile
//! "Request"): [`Client::seal_request`] writes the whole outer request and
//! returns the state that opens the response body.
//!
//! The inner request is opaque bytes here: a complete HTTP request with CRLF
//! endings (and `Content-Length` if it has a body), built by the caller.

use rand_core::CryptoRngCore;

use super::cryptobox::{Nm, NONCE_LEN, OVERHEAD};
use super::keys::{KeyHeader, ShortId};
use crate::error::{Error, Result};
use crate::keys::{KexPublic, KexSecret};

/// Content type of both outer bodies.
pub const CONTENT_TYPE: &str = "application/octet-stream";

/// Appends the outer request head (profile "Request") for a sealed body of
/// `body_len` bytes. `host` must be a non-empty run of visible ASCII
/// ([`Error::BadHost`] otherwise).
pub fn format_request_head(
    host: &str,
    key: &KeyHeader,
    body_len: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let fields = request_fields(host, key, body_len)?;
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(REQUEST_TARGET.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &fields {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// The outer request target: rspamd ignores it (and the method), `/post`
/// is what rspamc's successors send.
pub const REQUEST_TARGET: &str = "/post";

/// The outer request fields in the order [`format_request_head`] writes
/// them, for drivers whose HTTP library writes the head: `Host`,
/// `Content-Length`, `Content-Type`, `Connection`, `Key`.
pub fn request_fields(
    host: &str,
    key: &KeyHeader,
    body_len: usize,
) -> Result<[(&'static str, String); 5]> {
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::BadHost);
    }
    Ok([
        ("Host", host.to_string()),
        ("Content-Length", body_len.to_string()),
        ("Content-Type", CONTENT_TYPE.to_string()),
        ("Connection", "close".to_string()),
        (KeyHeader::NAME, key.format()),
    ])
}

/// The client end of one exchange, between sending the request and opening
/// the response. Holds `nm`; not `Clone`, and consumed by opening.
pub struct Client {
    nm: Nm,
}

impl Client {
    /// Appends a complete outer request sealing `inner` to `server` under a
    /// fresh ephemeral key and nonce drawn from `rng`.
    pub fn seal_request(
        rng: &mut impl CryptoRngCore,
        server: &KexPublic,
        host: &str,
        inner: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Client> {
        let ephemeral = KexSecret::generate(rng);
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        Client::seal_request_with(&ephemeral, &nonce, server, host, inner, out)
    }

    /// [`Client::seal_request`] with explicit randomness (for test vectors).
    /// `client` must be used for one request only.
    pub fn seal_request_with(
        client: &KexSecret,
        nonce: &[u8; NONCE_LEN],
        server: &KexPublic,
        host: &str,
        inner: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Client> {
        let nm = Nm::derive(client, server)?;
        let key = KeyHeader {
            short_id: ShortId::of(server),
            client: *client.public(),
        };
        let start = out.len();
        format_request_head(host, &key, OVERHEAD + inner.len(), out)?;
        if let Err(e) = nm.seal(nonce, inner, out) {
            out.truncate(start);
            return Err(e);
        }
        Ok(Client { nm })
    }

    /// Appends only the sealed body (`nonce || tag || E(inner)`) to `out`
    /// and returns the `Key` header value to send with it: for drivers
    /// whose HTTP library writes the head (with [`request_fields`]).
    pub fn seal_body(
        rng: &mut impl CryptoRngCore,
        server: &KexPublic,
        inner: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(Client, KeyHeader)> {
        let ephemeral = KexSecret::generate(rng);
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        let nm = Nm::derive(&ephemeral, server)?;
        nm.seal(&nonce, inner, out)?;
        let key = KeyHeader {
            short_id: ShortId::of(server),
            client: *ephemeral.public(),
        };
        Ok((Client { nm }, key))
    }

    /// Opens the body of the outer response: the inner response.
    pub fn open_response(self, body: &[u8]) -> Result<Vec<u8>> {
        self.nm.open(body)
    }
}

impl core::fmt::Debug for Client {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Client(..)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::rspamd::keypair;
    use crate::rspamd::testdata::{split_request, SERVER_KEYPAIR};

    #[test]
    fn exact_outer_bytes() {
        let client = KexSecret::from_bytes([0x42; 32]);
        let server = keypair::parse(SERVER_KEYPAIR).unwrap();
        let mut out = b"..".to_vec();
        Client::seal_request_with(
            &client,
            &[3; 24],
            server.public(),
            "h:1",
            b"GET /stat HTTP/1.0\r\n\r\n",
            &mut out,
        )
        .unwrap();
        let key = KeyHeader {
            short_id: ShortId::of(server.public()),
            client: *client.public(),
        };
        let head = std::format!(
            "..POST /post HTTP/1.1\r\nHost: h:1\r\nContent-Length: 62\r\n\
             Content-Type: application/octet-stream\r\nConnection: close\r\nKey: {}\r\n\r\n",
            key.format()
        );
        assert!(key.format().starts_with("r898uxxz="));
        assert_eq!(&out[..head.len()], head.as_bytes());
        assert_eq!(out.len(), head.len() + 62);
        assert_eq!(out[head.len()..head.len() + 24], [3; 24]);
    }

    #[test]
    fn parts_match_the_whole_request() {
        use rand_chacha::rand_core::SeedableRng;
        let secret = keypair::parse(SERVER_KEYPAIR).unwrap();
        let server = *secret.public();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let mut body = b"..".to_vec();
        let (client, key) =
            Client::seal_body(&mut rng, &server, b"GET /stat HTTP/1.1\r\n\r\n", &mut body).unwrap();
        let body = &body[2..];
        assert_eq!(body.len(), OVERHEAD + 22);
        // The fields are the head format_request_head writes, in order.
        let mut head = Vec::new();
        format_request_head("h:1", &key, body.len(), &mut head).unwrap();
        let mut expected = format!("POST {REQUEST_TARGET} HTTP/1.1\r\n");
        for (n, v) in request_fields("h:1", &key, body.len()).unwrap() {
            expected.push_str(&std::format!("{n}: {v}\r\n"));
        }
        expected.push_str("\r\n");
        assert_eq!(head, expected.as_bytes());
        // The server opens it and its sealed body opens at the client.
        let keys: crate::rspamd::Keyring = [secret].into_iter().collect();
        let (inner, responder) = keys.open_request(&key, body).unwrap();
        assert_eq!(inner, b"GET /stat HTTP/1.1\r\n\r\n");
        let mut reply = Vec::new();
        responder
            .seal_body(&mut rng, b"HTTP/1.1 200 OK\r\n\r\n", &mut reply)
            .unwrap();
        assert_eq!(
            client.open_response(&reply).unwrap(),
            b"HTTP/1.1 200 OK\r\n\r\n"
        );
        assert_eq!(
            request_fields("", &key, 1).err().map(|e| e.code()),
            Some("bad_host")
        );
        let mut out = Vec::new();
        let r = Client::seal_body(&mut rng, &KexPublic([0; 32]), b"", &mut out);
        assert_eq!(r.err().map(|e| e.code()), Some("small_order"));
        assert!(out.is_empty());
    }

    #[test]
    fn failures() {
        let server = *keypair::parse(SERVER_KEYPAIR).unwrap().public();
        let client = KexSecret::from_bytes([0x42; 32]);
        let mut out = Vec::new();
        for host in ["", "a b", "a\r\nX: y", "h\u{e9}"] {
            let r = Client::seal_request_with(&client, &[3; 24], &server, host, b"", &mut out);
            assert_eq!(r.err().map(|e| e.code()), Some("bad_host"));
            assert!(out.is_empty());
        }
        let r =
            Client::seal_request_with(&client, &[3; 24], &KexPublic([0; 32]), "h", b"", &mut out);
        assert_eq!(r.err().map(|e| e.code()), Some("small_order"));
    }

    #[test]
    fn a_fresh_key_and_nonce_per_request() {
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let server = *keypair::parse(SERVER_KEYPAIR).unwrap().public();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Client::seal_request(&mut rng, &server, "h", b"x", &mut a).unwrap();
        Client::seal_request(&mut rng, &server, "h", b"x", &mut b).unwrap();
        let (ka, ba) = split_request(&a);
        let (kb, bb) = split_request(&b);
        assert_ne!(ka, kb);
        assert_ne!(ba[..24], bb[..24]);
    }
}
