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
//!    for the peer address and this server, and that certificate has not
//!    verified a flight before (one certificate, one early flight). The
//!    check is an HMAC over at most 62 bytes after an httparse of the head:
//!    no X25519, no AEAD, no state but the replay set. Until its handshake
//!    completes, such a connection may send at most [`DEFAULT_EARLY_FACTOR`]
//!    times the bytes its SYN carried ([`EarlyBudget`], QUIC's
//!    anti-amplification rule); the rest waits for the client's ACK.
//! 3. Any other Fast Open child waits, with nothing written, until its
//!    handshake completes (state no longer `TCP_SYN_RECV`; bounded time); if it never does (a spoofed
//!    source) it is closed. Before verification the server sends nothing
//!    but the kernel's SYN-ACK.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
use tokio::net::TcpStream;

use crate::clock::unix_now;
use crate::sockopt;

/// Most first flights remembered for replay detection; when full (after
/// dropping expired entries) certificates are not honoured, which costs
/// honest clients one round trip and nothing else.
const MAX_SEEN: usize = 65_536;
/// Bytes of the first flight read for the check (the outer head must fit).
const PEEK: usize = 4096;
/// What a verified connection may send before its handshake completes, per
/// byte its SYN carried (QUIC's anti-amplification limit, RFC 9000 §8.1).
pub const DEFAULT_EARLY_FACTOR: usize = 3;
/// Longest pause between two looks at the TCP state of a connection whose
/// early budget is spent (the answer's remainder waits for the ACK).
const EARLY_POLL_MAX: Duration = Duration::from_millis(16);

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
    /// Of those, certificates that were valid but had verified a first
    /// flight before (a replay, whatever the flight's bytes).
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
    early_factor: usize,
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
            early_factor: DEFAULT_EARLY_FACTOR,
            seen: Mutex::new(HashMap::new()),
            hasher: RandomState::new(),
            stats: GateStats::default(),
        }
    }

    /// Lets a verified connection send `factor` bytes per byte of its SYN
    /// data before its handshake completes (default
    /// [`DEFAULT_EARLY_FACTOR`]; 0 sends nothing before the handshake).
    pub fn with_early_factor(mut self, factor: usize) -> Self {
        self.early_factor = factor;
        self
    }

    /// Decides whether `stream` may be served now. Writes nothing to the
    /// stream. A connection admitted on its certificate before the
    /// handshake comes with the [`EarlyBudget`] its writes must respect.
    pub async fn admit(&self, stream: &TcpStream, peer: SocketAddr) -> Admission {
        // The kernel marks a passive Fast Open child whose SYN carried data.
        // (Its state may already be ESTABLISHED when a fast client's ACK
        // beat the accept; the data still came with the SYN.)
        if !sockopt::syn_data(stream).unwrap_or(false) {
            self.stats.handshake.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, stats = %self.stats.line(), "asap: no SYN data");
            return Admission::Established;
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
                return Admission::Early(Box::new(EarlyBudget::new(
                    n.saturating_mul(self.early_factor),
                    self.handshake_wait,
                )));
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
            Admission::Established
        } else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%peer, stats = %self.stats.line(), "asap: no handshake; closed");
            Admission::Refused
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
        // One certificate verifies one flight: the set is keyed on what the
        // certificate states (not on its text, not on the flight), so a
        // certificate relayed once by an open resolver, or captured, buys at
        // most one early answer however the flight is varied.
        let h = self.hasher.hash_one((
            claims.key_id,
            provenance::canonical(claims.address),
            claims.server.0,
            claims.issued,
            claims.lifetime,
        ));
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

/// The gate's decision on one connection.
#[derive(Debug)]
pub enum Admission {
    /// Refused: drop the connection.
    Refused,
    /// Its handshake is complete: serve it as any connection.
    Established,
    /// Verified on its certificate before the handshake completed: serve
    /// it now, with writes held to the budget until the handshake completes.
    Early(Box<EarlyBudget>),
}

/// What a connection admitted before its handshake may still send until
/// the handshake completes (spec/asap.md §4): the server's writes take at
/// most this many bytes; past them they wait, polling the TCP state, until
/// the client's ACK arrives (then nothing is limited any more) or the
/// handshake wait runs out (then the write fails and the connection ends).
#[derive(Debug)]
pub struct EarlyBudget {
    left: usize,
    deadline: tokio::time::Instant,
    step: Duration,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl EarlyBudget {
    /// `bytes` may be sent before the handshake; it must complete within
    /// `wait`.
    pub fn new(bytes: usize, wait: Duration) -> Self {
        EarlyBudget {
            left: bytes,
            deadline: tokio::time::Instant::now() + wait,
            step: Duration::from_millis(1),
            sleep: None,
        }
    }

    /// Bytes that may still be sent before the handshake.
    pub fn left(&self) -> usize {
        self.left
    }

    /// `Ready(Ok(Some(n)))`: up to `n` bytes may be written now;
    /// `Ready(Ok(None))`: the handshake has completed, nothing is limited
    /// any more; `Pending`: the budget is spent, the ACK has not come.
    fn poll_allow(
        &mut self,
        cx: &mut Context<'_>,
        stream: &TcpStream,
    ) -> Poll<std::io::Result<Option<usize>>> {
        loop {
            if sockopt::tcp_state(stream)? != sockopt::TCP_SYN_RECV {
                return Poll::Ready(Ok(None));
            }
            if self.left > 0 {
                return Poll::Ready(Ok(Some(self.left)));
            }
            if tokio::time::Instant::now() >= self.deadline {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "early budget spent and the handshake did not complete",
                )));
            }
            let step = self.step;
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(step)));
            std::task::ready!(sleep.as_mut().poll(cx));
            self.sleep = None;
            self.step = (step * 2).min(EARLY_POLL_MAX);
        }
    }

    /// Writes `bufs` to `stream` within the budget in `slot` (nothing to do
    /// without one): at most the bytes left, or nothing until the handshake
    /// completes once they are spent. `None`: no budget (any more), write
    /// as usual.
    pub fn poll_write(
        slot: &mut Option<Box<EarlyBudget>>,
        stream: &mut TcpStream,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Option<Poll<std::io::Result<usize>>> {
        use tokio::io::AsyncWrite;
        let budget = slot.as_mut()?;
        let left = match budget.poll_allow(cx, stream) {
            Poll::Pending => return Some(Poll::Pending),
            Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
            Poll::Ready(Ok(None)) => {
                *slot = None;
                return None;
            }
            Poll::Ready(Ok(Some(left))) => left,
        };
        let Some(first) = bufs.iter().find(|b| !b.is_empty()) else {
            return Some(Poll::Ready(Ok(0)));
        };
        let take = first.len().min(left);
        let r = std::pin::Pin::new(stream).poll_write(cx, &first[..take]);
        if let Poll::Ready(Ok(n)) = r {
            budget.left -= n.min(budget.left);
        }
        Some(r)
    }
}
