//! A static-file server on loopback for the integration tests: this
//! crate's directory behind `httpcrypt::listen::run` with one key.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;

use httpcrypt::clock::unix_now;
use httpcrypt::keys::{Epoch, LiveKeys};
use httpcrypt::{HttpCryptLayer, ServerConfig};
use httpcrypt_proto::ticket::TicketKey;
use httpcrypt_proto::{IdentityKey, KexSecret, KeyCert, KeyId};

/// A running server and what a client needs to reach it.
pub struct OneKey {
    pub addr: SocketAddr,
    pub identity: IdentityKey,
    pub cert: KeyCert,
    /// The server's keys (a test may add an epoch).
    pub live: LiveKeys,
}

/// Serves this crate's directory with the default configuration under one
/// key whose certificate is valid from 10 s ago for `valid_for` seconds.
/// `seed` tells the identity and key of one test from another's.
pub async fn serve_one_key(seed: u8, valid_for: u64) -> OneKey {
    serve_one_key_with(seed, valid_for, ServerConfig::default()).await
}

/// [`serve_one_key`] with the layer's configuration `config`.
#[allow(dead_code)]
pub async fn serve_one_key_with(seed: u8, valid_for: u64, config: ServerConfig) -> OneKey {
    let (identity, cert, live) = one_key(seed, valid_for);
    let layer = HttpCryptLayer::new(live.clone(), config);
    let svc = tower::Layer::layer(
        &layer,
        httpcrypt::services::static_files(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))),
    );
    OneKey {
        addr: listen(svc).await,
        identity,
        cert,
        live,
    }
}

/// The keys of [`serve_one_key`]: an identity from `seed` and one epoch
/// under it (key `seed + 1`, valid from 10 s ago for `valid_for` seconds),
/// with that epoch's certificate.
pub fn one_key(seed: u8, valid_for: u64) -> (IdentityKey, KeyCert, LiveKeys) {
    let identity = IdentityKey::from_seed([seed; 32]);
    let first = epoch(
        &identity,
        1,
        seed.wrapping_add(1),
        valid_for,
        KeyId([1; 10]),
    );
    let cert = first.cert.clone();
    let live = LiveKeys::new();
    live.add(first);
    (identity, cert, live)
}

/// Serves `svc` on a loopback port of its own with `httpcrypt::listen::run`.
pub async fn listen(svc: impl httpcrypt::listen::ConnectionService) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(httpcrypt::listen::run(
        listener,
        svc,
        Default::default(),
        std::future::pending(),
    ));
    addr
}

/// An epoch under `identity`: key certificate `serial` for the kex key
/// `[key_seed; 32]`, valid from 10 s ago for `valid_for` seconds, with the
/// ticket key `tid`.
pub fn epoch(
    identity: &IdentityKey,
    serial: u32,
    key_seed: u8,
    valid_for: u64,
    tid: KeyId,
) -> Epoch {
    let secret = KexSecret::from_bytes([key_seed; 32]);
    let now = unix_now();
    let cert = KeyCert::sign(
        identity,
        serial,
        (now - 10) as u32,
        (now + valid_for) as u32,
        *secret.public(),
    );
    Epoch {
        secret,
        cert,
        ticket: TicketKey::new(tid, [2; 32]),
        hybrid: None,
        kem: None,
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` body.
pub async fn read_response(tcp: &mut tokio::net::TcpStream) -> (u16, Vec<u8>) {
    use tokio::io::AsyncReadExt as _;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut rsp = httparse::Response::new(&mut fields);
        if let httparse::Status::Complete(head_len) = rsp.parse(&buf).unwrap() {
            let status = rsp.code.unwrap();
            let len: usize = rsp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .expect("a sealed answer has a Content-Length");
            while buf.len() < head_len + len {
                let n = tcp.read(&mut chunk).await.unwrap();
                assert!(n > 0, "connection closed inside a response");
                buf.extend_from_slice(&chunk[..n]);
            }
            assert_eq!(buf.len(), head_len + len, "one response at a time");
            return (status, buf.split_off(head_len));
        }
        let n = tcp.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before a response");
        buf.extend_from_slice(&chunk[..n]);
    }
}
