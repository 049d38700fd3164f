//! The connection's socket as hyper sees it, and the socket options each
//! answer asks for (`TCP_NODELAY`, `TCP_CORK`, the shutdown), applied right
//! before the next write.

use bytes::{Buf, Bytes};
use http::{header, Request};

use crate::conn::ConnState;

/// The socket options of one connection, decided per answer and applied
/// by [`Socket`] right before its next write (flags in [`ConnState::sock`]):
///
/// - an answer on a connection that stays open turns on `TCP_NODELAY` (once);
/// - the last answer of a connection (`Connection: close`) is corked, so
///   head, body and the FIN leave as one segment (as with nginx's
///   `tcp_nopush`), two packets fewer per connection: the kernel sets FIN on
///   the corked data and pushes it out at `shutdown(SHUT_WR)` or at `close`;
/// - if that answer's body stalls ([`StallBody`]), the cork comes off at once
///   and `TCP_NODELAY` goes on, so nothing waits for the kernel's 200 ms;
/// - at the end of the connection hyper asks for `shutdown(SHUT_WR)`. It is
///   only needed when request bytes may still wait in the kernel, unread:
///   then `close` resets the connection and drops the unsent answer, while
///   a shutdown first sends it (a 413 leaves its body unread), and
///   [`Socket::linger`] reads the rest before the close. Like nginx,
///   which lingers only then, [`Socket`] skips the system call when no
///   request of the connection carried a body ([`SockPlan::BODY`]) and its
///   last read did not fill hyper's buffer, so the kernel held no more.
pub(super) struct SockPlan;

impl SockPlan {
    const WANT_NODELAY: u8 = 1;
    const WANT_CORK: u8 = 2;
    const WANT_UNCORK: u8 = 4;
    const NODELAY: u8 = 8;
    const CORKED: u8 = 16;
    /// A request of this connection carried a body (read or not).
    const BODY: u8 = 32;
    /// hyper is released between requests: its shutdown at its end is
    /// not the connection's.
    const KEEP_OPEN: u8 = 64;
    const WANTS: u8 = Self::WANT_NODELAY | Self::WANT_CORK | Self::WANT_UNCORK;

    /// A request arrives: notes whether it carries a body.
    pub(super) fn request<B: http_body::Body>(conn: &ConnState, req: &Request<B>) {
        use std::sync::atomic::Ordering::Relaxed;
        if !req.body().is_end_stream() {
            conn.sock().fetch_or(Self::BODY, Relaxed);
        }
    }

    /// Whether the end of the connection needs `shutdown(SHUT_WR)` before
    /// the close; `full_read`: the socket's last read filled its buffer.
    fn needs_shutdown(conn: &ConnState, full_read: bool) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        full_read || conn.sock().load(Relaxed) & Self::BODY != 0
    }

    /// While `keep` holds, the end of hyper's connection leaves the socket
    /// open: hyper is released between requests, and the next one starts
    /// on the same socket.
    pub(super) fn keep_open(conn: &ConnState, keep: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let sock = conn.sock();
        let f = sock.load(Relaxed);
        sock.store(
            if keep {
                f | Self::KEEP_OPEN
            } else {
                f & !Self::KEEP_OPEN
            },
            Relaxed,
        );
    }

    fn kept_open(conn: &ConnState) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        conn.sock().load(Relaxed) & Self::KEEP_OPEN != 0
    }

    /// Whether hyper closes the connection after answering `req` (its own
    /// rule: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with
    /// `Connection: keep-alive`).
    pub(super) fn closes<B>(req: &Request<B>) -> bool {
        let mut tokens = httpcrypt_proto::inner::connection_token_iter(
            req.headers()
                .get_all(header::CONNECTION)
                .iter()
                .map(|v| v.as_bytes()),
        );
        if req.version() == http::Version::HTTP_10 {
            !tokens.any(|t| t.eq_ignore_ascii_case(b"keep-alive"))
        } else {
            tokens.any(|t| t.eq_ignore_ascii_case(b"close"))
        }
    }

    /// An answer is ready; `close`: it is the connection's last.
    pub(super) fn answer(conn: &ConnState, close: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let sock = conn.sock();
        let f = sock.load(Relaxed);
        if close {
            sock.store(f | Self::WANT_CORK, Relaxed);
        } else if f & (Self::NODELAY | Self::WANT_NODELAY) == 0 {
            sock.store(f | Self::WANT_NODELAY, Relaxed);
        }
    }

    /// The answer's body is waiting for data: send what is written now.
    pub(super) fn stalled(conn: &ConnState) {
        use std::sync::atomic::Ordering::Relaxed;
        let sock = conn.sock();
        let f = sock.load(Relaxed);
        if f & (Self::WANT_CORK | Self::CORKED) != 0 || f & Self::NODELAY == 0 {
            sock.store((f & !Self::WANT_CORK) | Self::WANT_UNCORK, Relaxed);
        }
    }

    /// Applies what was decided since the last write.
    fn apply(conn: &ConnState, stream: &tokio::net::TcpStream) {
        use nix::sys::socket::{setsockopt, sockopt};
        use std::sync::atomic::Ordering::Relaxed;
        let sock = conn.sock();
        let mut f = sock.load(Relaxed);
        if f & Self::WANTS == 0 {
            return;
        }
        // Failures only cost an extra packet or a delay; the write goes on.
        if f & Self::WANT_UNCORK != 0 {
            if f & Self::CORKED != 0 {
                let _ = setsockopt(stream, sockopt::TcpCork, &false);
            }
            f = (f & !Self::CORKED) | Self::WANT_NODELAY;
        }
        if f & Self::WANT_CORK != 0 && f & Self::CORKED == 0 {
            let _ = setsockopt(stream, sockopt::TcpCork, &true);
            f |= Self::CORKED;
        }
        if f & Self::WANT_NODELAY != 0 && f & Self::NODELAY == 0 {
            let _ = stream.set_nodelay(true);
            f |= Self::NODELAY;
        }
        sock.store(f & !Self::WANTS, Relaxed);
    }
}

/// How much of a request head the first read after an idle spell takes
/// (on the stack, [`Socket::readable`]): most heads fit, and a larger one
/// is read on by hyper.
const READ_AHEAD: usize = 2048;

/// The longest a closing connection keeps reading a peer's unread request
/// bytes ([`Socket::linger`]), as nginx's lingering close does (its
/// defaults: 30 s in all, 5 s between reads; shorter here, so that a
/// client cannot hold a slot long this way).
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);
/// The longest wait for the peer's next bytes while lingering.
const LINGER_GAP: std::time::Duration = std::time::Duration::from_millis(500);
/// The most bytes a lingering connection reads and discards.
const LINGER_BYTES: usize = 16 << 20;

/// The connection's socket as hyper sees it: socket options are applied
/// before each write, and the shutdown is skipped when the close alone
/// delivers the answer ([`SockPlan`]).
pub(super) struct Socket {
    stream: tokio::net::TcpStream,
    conn: ConnState,
    /// The last read filled the buffer it was given: the kernel may hold
    /// more.
    full_read: bool,
    /// The last read found no bytes (and the runtime now waits for some).
    read_blocked: bool,
    /// Admitted by the ASAP gate before its handshake completed: what it
    /// may still send until then (spec/asap.md §4).
    early: Option<Box<crate::asap::EarlyBudget>>,
    /// Bytes read from the socket that the HTTP machinery before this one
    /// had not parsed yet (the start of the next request head): read again
    /// before the socket.
    replay: Bytes,
}

impl tokio::io::AsyncRead for Socket {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.check_cut()?;
        if !self.replay.is_empty() {
            let n = self.replay.len().min(buf.remaining());
            buf.put_slice(&self.replay[..n]);
            if n == self.replay.len() {
                // Releases the buffer the bytes were read into.
                self.replay = Bytes::new();
            } else {
                self.replay.advance(n);
            }
            return std::task::Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.stream).poll_read(cx, buf);
        // Pending: the kernel had nothing; a short read: it had no more.
        self.full_read = r.is_ready() && buf.remaining() == 0;
        self.read_blocked = r.is_pending();
        if r.is_ready() {
            self.conn.progress().read(buf.filled().len() - before);
        }
        r
    }
}

impl Socket {
    /// The socket of connection `conn`; `early` when the ASAP gate admitted
    /// it before its handshake.
    pub(super) fn new(
        stream: tokio::net::TcpStream,
        conn: ConnState,
        early: Option<Box<crate::asap::EarlyBudget>>,
    ) -> Self {
        Socket {
            stream,
            conn,
            full_read: false,
            read_blocked: false,
            early,
            replay: Bytes::new(),
        }
    }

    /// Bytes to read before the socket's own: what was read from it but not
    /// parsed when the HTTP machinery was released between requests.
    pub(super) fn replay(&mut self, bytes: Bytes) {
        // Empty, it may still hold the buffer it was cut from.
        if !bytes.is_empty() {
            self.replay = bytes;
        }
    }

    /// Whether a read finds bytes at once without the socket: some were
    /// read from it but not parsed yet.
    pub(super) fn has_replay(&self) -> bool {
        !self.replay.is_empty()
    }

    /// Waits until the socket has bytes to read (or its end, or an error,
    /// which the next read then meets) and reads the first of them, up to
    /// [`READ_AHEAD`], into the replay: the HTTP machinery that starts
    /// next finds them without a system call, so a new connection whose
    /// request is already in the kernel costs one read, not a peek and a
    /// read. The buffer lives on the stack for the read alone; what is
    /// kept is the bytes read, so an idle connection holds none.
    pub(super) async fn readable(&mut self) {
        if self.read_blocked {
            // The last read found nothing: the runtime knows the socket is
            // not readable, and says when it is.
            let _ = self.stream.readable().await;
        }
        // The runtime takes a new socket for readable until a read finds
        // it empty, and then waits for the kernel's word.
        while !self.read_ahead() {
            let _ = self.stream.readable().await;
        }
    }

    /// One read of at most [`READ_AHEAD`] bytes into the replay; false
    /// only when the kernel has none yet. The end of the stream and
    /// errors leave the replay empty: the next read meets them again.
    fn read_ahead(&mut self) -> bool {
        let mut buf = [0u8; READ_AHEAD];
        match self.stream.try_read(&mut buf) {
            Ok(n) => {
                self.read_blocked = false;
                self.full_read = n == buf.len();
                self.conn.progress().read(n);
                self.replay(Bytes::copy_from_slice(&buf[..n]));
                true
            }
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    /// Whether request bytes may still wait in the kernel, unread, now that
    /// hyper has closed its side: the last request's body was not read to
    /// its end, or the last read filled the buffer it was given.
    pub(super) fn may_hold_unread(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let flags = self.conn.progress().flags.load(Relaxed);
        self.full_read || flags & crate::conn::Progress::BODY_OPEN != 0
    }

    /// The close of a connection that may hold unread request bytes
    /// ([`Socket::may_hold_unread`]), after the shutdown that sent the last
    /// answer and the end of the stream: reads and discards what the peer
    /// still sends until it stops (its end, an error, or [`LINGER_GAP`]
    /// without a byte), for at most [`LINGER_TIME`] and [`LINGER_BYTES`],
    /// then closes. Closed at once, the kernel would answer the peer's next
    /// bytes with a reset, and a client still sending its body (a 413
    /// answers before it is read) would meet the reset on its write before
    /// it reads the answer. A connection the listener cut, before or while
    /// it lingers, is closed at once: the cut is meant (a lingering
    /// connection looks idle to `crate::lifecycle`, so it is the first one
    /// shed when every slot is taken).
    pub(super) async fn linger(mut self) {
        use tokio::io::AsyncReadExt;
        if self.conn.progress().is_cut() {
            return;
        }
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        // On the heap: allocated by the few connections that linger, not
        // kept in every connection's future.
        let mut buf = vec![0u8; 16 * 1024];
        let mut left = LINGER_BYTES;
        while left > 0 {
            let until = deadline.min(tokio::time::Instant::now() + LINGER_GAP);
            let progress = self.conn.progress();
            let read = tokio::time::timeout_at(until, self.stream.read(&mut buf));
            tokio::select! {
                biased;
                () = std::future::poll_fn(|cx| progress.poll_cut(cx)) => break,
                r = read => match r {
                    Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
                    _ => break,
                },
            }
        }
    }

    /// Closes a connection between requests, as hyper does: with a reset
    /// when the listener cut it as stuck (`check_cut`), otherwise with the
    /// shutdown when one is needed ([`SockPlan`]) and the close.
    pub(super) async fn close(mut self) {
        if self.check_cut().is_ok() {
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut self).await;
        }
    }

    /// Fails once the listener cut the connection (`crate::lifecycle`),
    /// first setting a zero linger time: the close then resets the
    /// connection, and the kernel drops what the peer never read.
    fn check_cut(&self) -> std::io::Result<()> {
        if !self.conn.progress().resets() {
            return Ok(());
        }
        let _ = nix::sys::socket::setsockopt(
            &self.stream,
            nix::sys::socket::sockopt::Linger,
            &libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        );
        Err(std::io::ErrorKind::TimedOut.into())
    }

    /// Counts a write's outcome for the listener's deadlines.
    /// [`Socket::wrote`] for a write held to the ASAP early budget: once the
    /// budget is spent and the rest waits for the handshake, the bytes it
    /// let through leave now instead of waiting in a corked socket for the
    /// rest of the answer (spec/asap.md §4).
    fn early_wrote(
        &self,
        r: std::task::Poll<std::io::Result<usize>>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        if r.is_pending() {
            SockPlan::stalled(&self.conn);
            SockPlan::apply(&self.conn, &self.stream);
        }
        self.wrote(r)
    }

    fn wrote(
        &self,
        r: std::task::Poll<std::io::Result<usize>>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        match &r {
            std::task::Poll::Ready(Ok(n)) => self.conn.progress().wrote(Some(*n)),
            std::task::Poll::Pending => self.conn.progress().wrote(None),
            std::task::Poll::Ready(Err(_)) => {}
        }
        r
    }
}

impl tokio::io::AsyncWrite for Socket {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.check_cut()?;
        SockPlan::apply(&self.conn, &self.stream);
        let this = &mut *self;
        let bufs = [std::io::IoSlice::new(buf)];
        if let Some(r) =
            crate::asap::EarlyBudget::poll_write(&mut this.early, &mut this.stream, cx, &bufs)
        {
            return this.early_wrote(r);
        }
        let r = std::pin::Pin::new(&mut this.stream).poll_write(cx, buf);
        this.wrote(r)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.check_cut()?;
        SockPlan::apply(&self.conn, &self.stream);
        let this = &mut *self;
        if let Some(r) =
            crate::asap::EarlyBudget::poll_write(&mut this.early, &mut this.stream, cx, bufs)
        {
            return this.early_wrote(r);
        }
        let r = std::pin::Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if SockPlan::kept_open(&self.conn) {
            return std::task::Poll::Ready(Ok(()));
        }
        if !SockPlan::needs_shutdown(&self.conn, self.full_read) {
            // The connection is closed next; the close sends what is
            // corked, with the FIN.
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback connection: the accepted side as a [`Socket`], and the
    /// client's end.
    async fn pair() -> (Socket, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = l.accept().await.unwrap();
        (Socket::new(server, ConnState::default(), None), client)
    }

    /// The first bytes of a head are read once, into the replay, and hyper
    /// then reads them from there: a waiting connection holds no buffer,
    /// and a head larger than the read-ahead is left to hyper's reads.
    #[tokio::test]
    async fn the_first_read_waits_for_bytes_and_keeps_what_it_read() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, mut client) = pair().await;
        // Nothing sent yet: the read-ahead waits (the kernel had nothing).
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(50), socket.readable()).await;
        assert!(waited.is_err(), "returned before any byte arrived");
        assert!(!socket.has_replay());
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        socket.readable().await;
        assert_eq!(&socket.replay[..], b"GET / HTTP/1.1\r\n");
        assert!(!socket.full_read);
        let mut got = [0u8; 32];
        let n = socket.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"GET / HTTP/1.1\r\n");
        assert!(!socket.has_replay(), "the replay is released once read");

        // A head longer than the read-ahead: the rest stays in the kernel.
        let long = vec![b'a'; READ_AHEAD + 100];
        client.write_all(&long).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        socket.readable().await;
        assert_eq!(socket.replay.len(), READ_AHEAD);
        assert!(socket.full_read, "a full read-ahead may leave bytes behind");
        let mut rest = Vec::new();
        let mut chunk = [0u8; 4096];
        while rest.len() < long.len() {
            let n = socket.read(&mut chunk).await.unwrap();
            rest.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(rest, long);

        // The peer's end: the read-ahead returns, with nothing to replay,
        // and the next read meets the end.
        drop(client);
        socket.readable().await;
        assert!(!socket.has_replay());
        assert_eq!(socket.read(&mut chunk).await.unwrap(), 0);
    }

    /// hyper's keep-alive rule, which decides whether an answer is corked.
    #[test]
    fn closing_requests_are_recognised() {
        let req = |version, conn: Option<&'static str>| {
            let mut r = Request::new(());
            *r.version_mut() = version;
            if let Some(v) = conn {
                r.headers_mut()
                    .insert(header::CONNECTION, http::HeaderValue::from_static(v));
            }
            r
        };
        use http::Version;
        assert!(!SockPlan::closes(&req(Version::HTTP_11, None)));
        assert!(SockPlan::closes(&req(Version::HTTP_11, Some("close"))));
        assert!(SockPlan::closes(&req(
            Version::HTTP_11,
            Some("X-Hop, Close")
        )));
        assert!(!SockPlan::closes(&req(
            Version::HTTP_11,
            Some("keep-alive")
        )));
        assert!(SockPlan::closes(&req(Version::HTTP_10, None)));
        assert!(!SockPlan::closes(&req(
            Version::HTTP_10,
            Some("Keep-Alive")
        )));
    }
}
