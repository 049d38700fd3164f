//! What a listener and the layer share about one connection: its
//! [`ConnState`] (key expiry, tickets issued and opened on it, pending
//! socket options, the ASAP early room), the `Progress` its socket and
//! bodies count for the listener's deadlines, and the listener's
//! `ExpiryWatch` over all its connections (spec §6, §7.2, §11.6).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use httpcrypt_proto::ticket::{LastOpened, TicketContents, TicketKey, SEALED_TICKET_LEN};

/// What the layer remembers about one connection, shared between the
/// listener that made it (one per accepted connection, put into every
/// request's extensions) and the layer:
///
/// - the latest key expiry (`not_after`) of the requests it carried: the
///   listener closes the connection once it has passed (spec §6);
/// - the session whose ticket was last issued on it: a ticket is issued
///   once per session and connection, not with every answer (spec §7.2).
#[derive(Debug, Clone, Default)]
pub struct ConnState(Arc<ConnInner>);

#[derive(Debug, Default)]
struct ConnInner {
    not_after: std::sync::atomic::AtomicU64,
    /// The listener's watch over all its connections' expiries.
    watch: Option<Arc<ExpiryWatch>>,
    /// The TCP peer, when the listener knows it.
    peer: Option<std::net::SocketAddr>,
    /// Socket options the listener is to apply before its next write
    /// (`listen::socket`).
    sock: std::sync::atomic::AtomicU8,
    /// The session of the last ticket issued here, as the layer names sessions (a keyed hash of the session key).
    ticketed: std::sync::atomic::AtomicU64,
    /// The last ticket opened on this connection.
    opened: Mutex<LastOpened>,
    /// What the connection did, for the listener's deadlines
    /// (`crate::lifecycle`).
    progress: Progress,
    /// Bytes the connection may send before its handshake completes, when
    /// the ASAP gate admitted it early (spec/asap.md §4); 0 otherwise or
    /// once the first answer took it.
    early_room: std::sync::atomic::AtomicUsize,
}

impl ConnState {
    /// The state of a connection accepted by a listener that closes
    /// connections through `watch` once their keys expire.
    pub(crate) fn watched(watch: Arc<ExpiryWatch>, peer: std::net::SocketAddr) -> Self {
        ConnState(Arc::new(ConnInner {
            watch: Some(watch),
            peer: Some(peer),
            ..ConnInner::default()
        }))
    }

    /// The state of a connection that carries several requests at once
    /// (`listen::run_h2`): the peer and the ticket memory of D29, no
    /// expiry watch (such a connection is not closed when its keys expire)
    /// and no progress that the listener's deadlines read.
    pub(crate) fn multiplexed(peer: std::net::SocketAddr) -> Self {
        ConnState(Arc::new(ConnInner {
            peer: Some(peer),
            ..ConnInner::default()
        }))
    }

    /// Notes a request under a key valid through `not_after`.
    pub fn note(&self, not_after: u64) {
        let before = self
            .0
            .not_after
            .fetch_max(not_after, std::sync::atomic::Ordering::Relaxed);
        if let Some(w) = &self.0.watch {
            w.note(before.max(not_after));
        }
    }

    /// The TCP peer of the connection, when the listener recorded it.
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        self.0.peer
    }

    /// The listener's pending socket options for this connection.
    pub(crate) fn sock(&self) -> &std::sync::atomic::AtomicU8 {
        &self.0.sock
    }

    /// What the connection did, for the listener's deadlines.
    pub(crate) fn progress(&self) -> &Progress {
        &self.0.progress
    }

    /// Notes that the connection may send `bytes` before its handshake
    /// completes (an ASAP early admission).
    pub(crate) fn set_early_room(&self, bytes: usize) {
        self.0
            .early_room
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The early room, for the first answer only: that answer sizes its
    /// records so that its first record (and so its verified head) fits in
    /// what may leave before the handshake.
    pub(crate) fn take_early_room(&self) -> usize {
        // A plain load first: only a connection the gate admitted early
        // has room to take, and every other answer skips the locked swap.
        let room = &self.0.early_room;
        if room.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return 0;
        }
        room.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes this connection's expiry with the listener's watch again
    /// (after the watch woke it early).
    pub(crate) fn renote(&self) {
        let t = self.0.not_after.load(std::sync::atomic::Ordering::Relaxed);
        if let (Some(w), true) = (&self.0.watch, t != 0) {
            w.note(t);
        }
    }

    /// Whether the connection carried HTTPCrypt requests and all their keys
    /// have expired at `now`.
    pub fn expired(&self, now: u64) -> bool {
        match self.0.not_after.load(std::sync::atomic::Ordering::Relaxed) {
            0 => false,
            t => now > t,
        }
    }

    /// Whether an answer to a request of session `session` (a
    /// the layer's name for it) should carry a new ticket: only if no ticket
    /// for that session went out on this connection yet. Requests on one
    /// connection are linkable anyway, so a second ticket for the same
    /// session adds no unlinkability; a connection shared by several
    /// sessions (a proxy multiplexing its clients) gets a ticket whenever
    /// the session changes.
    pub(crate) fn wants_ticket(&self, session: u64) -> bool {
        self.0.ticketed.load(std::sync::atomic::Ordering::Relaxed) != session
    }

    /// Opens a ticket presented on this connection. A client presents the
    /// same ticket with each request of a keep-alive connection, so the
    /// last one opened is remembered (spec §7.2, D29).
    pub(crate) fn open_ticket(
        &self,
        tk: &TicketKey,
        sealed: &[u8; SEALED_TICKET_LEN],
        now: u64,
    ) -> Result<TicketContents, httpcrypt_proto::Error> {
        self.opened().open(tk, sealed, now)
    }

    /// The key of a short ticket presented on this connection (spec §7.3):
    /// a client presents the same one with each request of a keep-alive
    /// connection, so the last one is remembered, as a v1 ticket's contents
    /// are; `derive` gives any other.
    pub(crate) fn short_key(
        &self,
        tk: &TicketKey,
        kid: &httpcrypt_proto::KeyId,
        h: &[u8; httpcrypt_proto::ticket::SHORT_H_LEN],
        derive: impl FnOnce() -> httpcrypt_proto::SessionKey,
    ) -> httpcrypt_proto::SessionKey {
        self.opened().short_key_or(tk, kid, h, derive)
    }

    /// The last ticket opened on this connection, v1 or short.
    fn opened(&self) -> std::sync::MutexGuard<'_, LastOpened> {
        self.0.opened.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that a ticket for session `session` went out.
    pub(crate) fn ticket_issued(&self, session: u64) {
        self.0
            .ticketed
            .store(session, std::sync::atomic::Ordering::Relaxed);
    }
}

/// When a listener's connections must look at their key expiry (spec §6),
/// without a timer per connection: each connection notes the latest expiry
/// of the keys it carried in its [`ConnState`], and the earliest of those
/// over all connections here; one ticker per listener calls
/// [`ExpiryWatch::tick`] every second, which wakes the connections only once
/// that earliest expiry has passed. A woken connection that is not expired
/// notes its expiry again.
#[derive(Debug)]
pub(crate) struct ExpiryWatch {
    /// The earliest noted expiry (unix seconds); `u64::MAX` when none.
    earliest: std::sync::atomic::AtomicU64,
    notify: tokio::sync::Notify,
    /// Set when the listener drains: every connection is to close once
    /// its request in flight is answered.
    draining: std::sync::atomic::AtomicBool,
}

impl Default for ExpiryWatch {
    fn default() -> Self {
        ExpiryWatch {
            earliest: std::sync::atomic::AtomicU64::new(u64::MAX),
            notify: tokio::sync::Notify::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl ExpiryWatch {
    fn note(&self, not_after: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if not_after < self.earliest.load(Relaxed) {
            self.earliest.fetch_min(not_after, Relaxed);
        }
    }

    /// Wakes every waiting connection if a noted expiry has passed at `now`.
    /// Connections noted meanwhile are among the woken ones (they wait
    /// before they note), so they note again.
    pub(crate) fn tick(&self, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if now > self.earliest.load(Relaxed) {
            self.earliest.store(u64::MAX, Relaxed);
            self.notify.notify_waiters();
        }
    }

    /// Wakes every connection for good: the listener drains, and each
    /// connection closes after the request it is answering, if any.
    pub(crate) fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    /// Whether [`ExpiryWatch::drain`] was called.
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves at the next [`ExpiryWatch::tick`] that wakes connections;
    /// enable it (or poll it) before noting an expiry.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// What one connection has done, as counted by its socket, its request
/// bodies and its answers; read by the listener's ticker.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Bytes read from the socket (written only by the connection's task).
    pub(crate) read: AtomicU64,
    /// Bytes written to the socket (likewise).
    pub(crate) written: AtomicU64,
    /// Requests handed to the service (likewise).
    pub(crate) requests: AtomicU32,
    /// `IN_FLIGHT`, `BODY_WAIT`, `WRITE_BLOCKED`, `CLOSED`, `BODY_OPEN`.
    pub(crate) flags: AtomicU8,
    /// Set by the listener: close this connection now ([`Cut`]).
    cut: AtomicU8,
    /// The connection's task, woken when it is cut.
    waker: AtomicWaker,
}

impl Progress {
    /// A request was handed to the service and its answer is not complete.
    pub(crate) const IN_FLIGHT: u8 = 1;
    /// The service waits for bytes of the request body from the peer.
    pub(crate) const BODY_WAIT: u8 = 2;
    /// The last write found the socket's send buffer full.
    pub(crate) const WRITE_BLOCKED: u8 = 4;
    /// The connection's task has ended.
    pub(crate) const CLOSED: u8 = 8;
    /// The body of the last request has bytes hyper has not read yet:
    /// until they are read, hyper is not idle between requests.
    pub(crate) const BODY_OPEN: u8 = 16;

    /// Bytes came in. Only the connection's task reads its socket, so a
    /// load and a store do (no locked read-modify-write).
    pub(crate) fn read(&self, n: usize) {
        let r = self.read.load(Relaxed);
        self.read.store(r.wrapping_add(n as u64), Relaxed);
    }

    /// Bytes went out, or (`n == None`) the send buffer was full.
    pub(crate) fn wrote(&self, n: Option<usize>) {
        match n {
            Some(n) => {
                let w = self.written.load(Relaxed);
                self.written.store(w.wrapping_add(n as u64), Relaxed);
                self.clear(Self::WRITE_BLOCKED);
            }
            None => self.set(Self::WRITE_BLOCKED),
        }
    }

    /// A request was handed to the service.
    pub(crate) fn request(&self) {
        let n = self.requests.load(Relaxed);
        self.requests.store(n.wrapping_add(1), Relaxed);
        self.set(Self::IN_FLIGHT);
    }

    /// Whether the request just handed to the service has a body whose
    /// end hyper has yet to read. hyper reads a request's head only once
    /// the body of the one before is read to its end, so every new request
    /// sets this afresh.
    pub(crate) fn body_open(&self, open: bool) {
        if open {
            self.set(Self::BODY_OPEN)
        } else {
            self.clear(Self::BODY_OPEN)
        }
    }

    /// Whether hyper, polled last with nothing left to do, is idle between
    /// requests: it answered a request since `since` (the count of
    /// requests when it started), nothing is in flight, every byte of the
    /// last request's body was read and every byte of the answer went out.
    /// Then hyper waits only for the next head, and closing it gracefully
    /// neither writes nor loses anything (`listen::connection`).
    pub(crate) fn idle_since(&self, since: u32) -> bool {
        const BUSY: u8 = Progress::IN_FLIGHT | Progress::BODY_OPEN | Progress::WRITE_BLOCKED;
        self.requests.load(Relaxed) != since && self.flags.load(Relaxed) & BUSY == 0
    }

    /// Requests handed to the service so far (wrapping).
    pub(crate) fn requests(&self) -> u32 {
        self.requests.load(Relaxed)
    }

    /// The answer is complete (or abandoned).
    pub(crate) fn answered(&self) {
        self.clear(Self::IN_FLIGHT | Self::BODY_WAIT);
    }

    /// Whether the service now waits for the request body from the peer.
    pub(crate) fn body_waits(&self, waits: bool) {
        if waits {
            self.set(Self::BODY_WAIT)
        } else {
            self.clear(Self::BODY_WAIT)
        }
    }

    /// The connection's task has ended.
    pub(crate) fn closed(&self) {
        self.set(Self::CLOSED);
    }

    /// Whether the listener cut this connection.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(Relaxed) != 0
    }

    /// Whether the listener cut this connection with a reset (it was in
    /// the middle of an exchange), not a plain close (it was idle).
    pub(crate) fn resets(&self) -> bool {
        self.cut.load(Relaxed) == Cut::Reset as u8
    }

    /// Resolves once the listener cut this connection.
    pub(crate) fn poll_cut(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cut() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        if self.is_cut() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    pub(crate) fn cut(&self, how: Cut) {
        self.cut.store(how as u8, Relaxed);
        self.waker.wake();
    }

    // Bodies may be polled on another task (the gateway's upstream
    // connection sends them), so the flags change by read-modify-write, and
    // only when they change.
    fn set(&self, f: u8) {
        if self.flags.load(Relaxed) & f != f {
            self.flags.fetch_or(f, Relaxed);
        }
    }

    fn clear(&self, f: u8) {
        if self.flags.load(Relaxed) & f != 0 {
            self.flags.fetch_and(!f, Relaxed);
        }
    }
}

/// How a connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cut {
    /// Between requests: closed as a keep-alive connection is.
    Close = 1,
    /// In the middle of an exchange: reset, so the kernel drops at once
    /// what the peer did not read.
    Reset = 2,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch wakes waiting connections once, after the earliest noted
    /// expiry has passed, and not before; a connection noted again is
    /// woken again at its own expiry.
    #[tokio::test]
    async fn the_expiry_watch_wakes_once_an_expiry_has_passed() {
        use std::future::Future;
        let watch = Arc::new(ExpiryWatch::default());
        let peer = "127.0.0.1:1".parse().expect("an address");
        let (a, b) = (
            ConnState::watched(watch.clone(), peer),
            ConnState::watched(watch.clone(), peer),
        );
        let woken = |n: &mut std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>| {
            let waker = futures_util::task::noop_waker();
            n.as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
                .is_ready()
        };
        let na = watch.notified();
        let nb = watch.notified();
        tokio::pin!(na, nb);
        na.as_mut().enable();
        nb.as_mut().enable();
        a.note(100);
        b.note(200);
        watch.tick(100);
        assert!(!woken(&mut na) && !woken(&mut nb), "nothing expired at 100");
        watch.tick(101);
        assert!(woken(&mut na) && woken(&mut nb), "a's key expired at 101");
        assert!(a.expired(101) && !b.expired(101));
        // b waits again and notes its expiry again.
        let nb = watch.notified();
        tokio::pin!(nb);
        nb.as_mut().enable();
        b.renote();
        watch.tick(150);
        assert!(!woken(&mut nb), "b's key lives until 200");
        watch.tick(201);
        assert!(woken(&mut nb), "b's key expired at 201");
    }
}
