//! The server's admission check for data that arrived with the SYN
//! (spec/asap.md §4). It runs on every accepted connection, before hyper
//! reads a byte:
//!
//! 1. A connection whose SYN carried no data (every connection without
//!    Fast Open) is admitted: the kernel delivers it only after the
//!    client's ACK proved its address.
//! 2. A Fast Open child (the kernel's `TCPI_OPT_SYN_DATA`: the first data
//!    came with the SYN, possibly before the client's ACK) is admitted at
//!    once only if the outer request head already
//!    received carries an `Httpcrypt-Provenance` certificate that verifies
//!    for the peer address and this server, and that exact first flight was
//!    not seen before. The check is an HMAC over at most 62 bytes after an
//!    httparse of the head: no X25519, no AEAD, no state but the replay set.
//! 3. Any other Fast Open child waits, with nothing written, until its
//!    handshake completes (state no longer `TCP_SYN_RECV`; bounded time); if it never does (a spoofed
//!    source) it is closed. Before verification the server sends nothing
//!    but the kernel's SYN-ACK.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
use tokio::net::TcpStream;

use super::sockopt;
use crate::keystore::unix_now;

/// Most first flights remembered for replay detection; when full (after
/// dropping expired entries) certificates are not honoured, which costs
/// honest clients one round trip and nothing else.
const MAX_SEEN: usize = 65_536;
/// Bytes of the first flight read for the check (the outer head must fit).
const PEEK: usize = 4096;

/// Counters of the gate's decisions.
#[derive(Debug, Default)]
pub struct GateStats {
    /// Connections accepted with their handshake complete.
    pub handshake: AtomicU64,
    /// Fast Open children (data arrived with the SYN).
    pub syn_data: AtomicU64,
    /// Fast Open children admitted on a valid certificate.
    pub verified: AtomicU64,
    /// Fast Open children whose certificate was missing or invalid.
    pub unverified: AtomicU64,
    /// Of those, certificates that were valid but came with a first flight
    /// seen before (a replay).
    pub replayed: AtomicU64,
    /// Unverified children admitted after their handshake completed.
    pub completed: AtomicU64,
    /// Unverified children closed because the handshake never completed.
    pub dropped: AtomicU64,
}

impl GateStats {
    /// One line for logs and tests: `name=value` pairs.
    pub fn line(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "handshake={} syn_data={} verified={} unverified={} replayed={} completed={} dropped={}",
            g(&self.handshake),
            g(&self.syn_data),
            g(&self.verified),
            g(&self.unverified),
            g(&self.replayed),
            g(&self.completed),
            g(&self.dropped)
        )
    }
}

/// The admission check; shared by all connections of a listener.
#[derive(Debug)]
pub struct Gate {
    keys: Vec<ProvenanceKey>,
    server: ServerId,
    handshake_wait: Duration,
    seen: Mutex<HashMap<u64, u64>>,
    hasher: RandomState,
    /// Decision counters.
    pub stats: GateStats,
}

/// Why a first flight was not verified.
#[derive(Debug)]
enum Refusal {
    NoCertificate,
    Invalid(httpcrypt_proto::Error),
    Replayed,
    Full,
}

impl Refusal {
    fn code(&self) -> &'static str {
        match self {
            Refusal::NoCertificate => "no_certificate",
            Refusal::Invalid(e) => e.code(),
            Refusal::Replayed => "replay",
            Refusal::Full => "replay_set_full",
        }
    }
}

impl Gate {
    /// A gate that accepts certificates under `keys` (current first) for
    /// `server`, and waits at most `handshake_wait` for the handshake of
    /// connections it cannot verify.
    pub fn new(keys: Vec<ProvenanceKey>, server: ServerId, handshake_wait: Duration) -> Self {
        Gate {
            keys,
            server,
            handshake_wait,
            seen: Mutex::new(HashMap::new()),
            hasher: RandomState::new(),
            stats: GateStats::default(),
        }
    }

    /// Decides whether `stream` may be served now; `false` means it was
    /// refused and should be dropped. Writes nothing to the stream.
    pub async fn admit(&self, stream: &TcpStream, peer: SocketAddr) -> bool {
        // The kernel marks a passive Fast Open child whose SYN carried data.
        // (Its state may already be ESTABLISHED when a fast client's ACK
        // beat the accept; the data still came with the SYN.)
        if !sockopt::syn_data(stream).unwrap_or(false) {
            self.stats.handshake.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, stats = %self.stats.line(), "asap: no SYN data");
            return true;
        }
        self.stats.syn_data.fetch_add(1, Ordering::Relaxed);
        let mut buf = vec![0u8; PEEK];
        // A Fast Open child holds its SYN data already: this returns at once.
        let n = match tokio::time::timeout(Duration::from_millis(100), stream.peek(&mut buf)).await
        {
            Ok(Ok(n)) => n,
            _ => 0,
        };
        match self.check(&buf[..n], peer) {
            Ok(()) => {
                self.stats.verified.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, stats = %self.stats.line(), "asap: SYN data verified");
                return true;
            }
            Err(why) => {
                if matches!(why, Refusal::Replayed) {
                    self.stats.replayed.fetch_add(1, Ordering::Relaxed);
                }
                self.stats.unverified.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, why = why.code(), "asap: SYN data not verified; waiting for the handshake");
            }
        }
        if self.wait_for_handshake(stream).await {
            self.stats.completed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%peer, stats = %self.stats.line(), "asap: handshake completed");
            true
        } else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%peer, stats = %self.stats.line(), "asap: no handshake; closed");
            false
        }
    }

    fn check(&self, first: &[u8], peer: SocketAddr) -> Result<(), Refusal> {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut fields);
        // A partial head is fine as long as the field is in it.
        let _ = req.parse(first);
        let cert = req
            .headers
            .iter()
            .take_while(|h| !h.name.is_empty())
            .find(|h| h.name.eq_ignore_ascii_case(provenance::FIELD))
            .ok_or(Refusal::NoCertificate)?;
        let now = unix_now();
        let claims = provenance::verify(cert.value, &self.keys, peer.ip(), self.server, now)
            .map_err(Refusal::Invalid)?;
        // The first flight carries a fresh ephemeral key and nonce, so an
        // honest client never sends the same bytes twice.
        let h = self.hasher.hash_one(first);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains_key(&h) {
            return Err(Refusal::Replayed);
        }
        if seen.len() >= MAX_SEEN {
            seen.retain(|_, until| *until >= now);
            if seen.len() >= MAX_SEEN {
                return Err(Refusal::Full);
            }
        }
        seen.insert(h, claims.expires());
        Ok(())
    }

    /// Polls the TCP state (1 ms doubling to 64 ms) until the handshake
    /// completes or `handshake_wait` passes.
    async fn wait_for_handshake(&self, stream: &TcpStream) -> bool {
        let deadline = tokio::time::Instant::now() + self.handshake_wait;
        let mut step = Duration::from_millis(1);
        loop {
            match sockopt::tcp_state(stream) {
                Ok(sockopt::TCP_SYN_RECV) => {}
                Ok(_) => return true,
                Err(_) => return false,
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(step).await;
            step = (step * 2).min(Duration::from_millis(64));
        }
    }
}
