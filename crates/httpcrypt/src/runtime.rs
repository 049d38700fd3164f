//! The listeners behind `httpcrypt serve` and `httpcrypt gateway`: an
//! HTTP/1.1 accept loop with keep-alive, a bound on concurrent connections,
//! deadlines and a minimum rate for what peers send and read (shedding the
//! slowest connection when every slot is taken, `crate::lifecycle`) and
//! outer size limits (spec §11), plus the two services it usually runs:
//! static files and a reverse proxy.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::body::HcBody;
use crate::conn::{ConnState, ExpiryWatch};
use crate::error::BoxError;
pub use crate::lifecycle::RequestBody;
use crate::lifecycle::Slots;

/// Connection-level settings.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// Most connections served at once. When every slot is taken, a new
    /// connection takes the slot of the one that made the least progress
    /// among those the server waits on (an idle keep-alive connection
    /// first, then the slowest peer), if one moves less than `min_rate`;
    /// otherwise it waits for a slot.
    pub max_connections: usize,
    /// Longest wait for a complete request head: from the connection's
    /// start for its first request, from the first byte of the head for
    /// later ones (spec §11.6).
    pub header_timeout: Duration,
    /// Longest a keep-alive connection stays open between requests.
    pub keepalive_timeout: Duration,
    /// Longest the server waits, in total, for the bytes of one request
    /// body (the time the service spends elsewhere does not count).
    pub body_deadline: Duration,
    /// Bytes per second a request body must keep coming at, on average
    /// over the time the server waited for it, once `min_rate_grace` has
    /// passed (Apache's mod_reqtimeout `MinRate`); 0 turns the rule off.
    /// Also the rate below which a connection may be shed.
    pub min_rate: u64,
    /// See `min_rate`.
    pub min_rate_grace: Duration,
    /// Longest an answer may make no progress at all because the peer
    /// does not read it; the connection is then reset.
    pub write_timeout: Duration,
    /// Hard limit on an outer head (request line and fields), bytes: above
    /// it hyper answers 431 without calling the service. The finer limits of
    /// spec §11.6 (414, 431) are the layer's, so this sits above their sum.
    pub max_head: usize,
    /// ASAP: checks connections whose first data came with the SYN before
    /// anything reads it (spec/asap.md §4).
    pub gate: Option<Arc<crate::asap::Gate>>,
    /// Whether a request is abandoned as soon as its client closes its end
    /// of the connection before the answer is complete. While an answer is
    /// being produced, hyper then keeps a read pending on the connection,
    /// with a fresh 8 KiB buffer for it. A gateway wants the watch, so that
    /// its upstream request stops with the client; a static-file server
    /// answers at once and does without it (a client that left meets a
    /// reset on the answer's write instead). hyper's `half_close` is the
    /// opposite of this setting.
    pub abandon_on_hangup: bool,
}

impl ListenOptions {
    fn deadlines(&self) -> crate::lifecycle::Deadlines {
        let floor = |d: Duration| d.max(Duration::from_millis(100));
        crate::lifecycle::Deadlines {
            header: floor(self.header_timeout),
            keepalive: floor(self.keepalive_timeout),
            body: floor(self.body_deadline),
            min_rate: self.min_rate,
            grace: self.min_rate_grace,
            write: floor(self.write_timeout),
        }
    }
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(15),
            body_deadline: Duration::from_secs(300),
            min_rate: 500,
            min_rate_grace: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            max_head: 16 * 1024 + 64 * 1024 + 1024,
            gate: None,
            abandon_on_hangup: true,
        }
    }
}

/// A service [`run`] can serve: it answers every request on a connection
/// (never failing: errors are answers too), is cloned per connection, and
/// runs on the runtime's workers. Every such service has it.
pub trait ConnectionService:
    tower::Service<
        Request<RequestBody>,
        Response = Response<HcBody>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> ConnectionService for S where
    S: tower::Service<
            Request<RequestBody>,
            Response = Response<HcBody>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// Serves `svc` on `listener` until `shutdown` resolves.
///
/// The accept loop runs as a task on the runtime's workers, next to the
/// connections it spawns. (Run where `run` is awaited, which for the CLI is
/// `block_on`'s own thread, every accepted connection would cost two
/// cross-thread wake-ups; see the analysis in `bench/REPORT.md`.) Dropping
/// the future returned by `run` stops the accept loop, as before.
pub async fn run<S>(
    listener: TcpListener,
    svc: S,
    opts: ListenOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    S: ConnectionService,
{
    run_draining(listener, svc, opts, shutdown, Duration::ZERO)
        .await
        .map(|_| ())
}

/// How a draining listener ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every connection closed (or there was no drain to do).
    Complete,
    /// The deadline passed with this many connections still open; they are
    /// cut when the runtime stops.
    TimedOut(usize),
}

/// [`run`], draining when `shutdown` resolves: the listener closes at once
/// (no new connection is accepted), every open connection closes after
/// the answer it is sending, idle ones at once, and this returns when the
/// last one is gone or after `drain` (zero: at once, as [`run`]), as nginx
/// does on a graceful stop.
pub async fn run_draining<S>(
    listener: TcpListener,
    svc: S,
    opts: ListenOptions,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<Drained>
where
    S: ConnectionService,
{
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut accepting = AbortOnDrop(tokio::spawn(accept_loop(
        listener, svc, opts, stopped, drain,
    )));
    tokio::pin!(shutdown);
    tokio::select! {
        _ = &mut shutdown => {
            let _ = stop.send(true);
            (&mut accepting.0).await.map_err(std::io::Error::other)?
        }
        r = &mut accepting.0 => r.map_err(std::io::Error::other)?,
    }
}

/// Aborts the task when dropped, so a caller that drops `run` (or aborts
/// the task running it) stops accepting, and the listener closes.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn accept_loop<S>(
    listener: TcpListener,
    svc: S,
    opts: ListenOptions,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    drain: Duration,
) -> std::io::Result<Drained>
where
    S: ConnectionService,
{
    let max = opts.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let slots = Arc::new(Slots::new(opts.deadlines()));
    // One ticker for the expiry of every connection's keys (spec §6) and
    // the deadlines of every connection (`crate::lifecycle`).
    let watch = Arc::new(ExpiryWatch::default());
    let _ticker = AbortOnDrop(tokio::spawn({
        let watch = watch.clone();
        let slots = slots.clone();
        async move {
            let mut every = tokio::time::interval(slots.period());
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                watch.tick(crate::keystore::unix_now());
                slots.check(std::time::Instant::now());
            }
        }
    }));
    // Shared by the connections (cloning it is one reference count).
    let opts = Arc::new(opts);
    let shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    tokio::pin!(shutdown);
    // Every open connection holds a permit: they are all gone when all
    // permits are back.
    let drained = |listener: TcpListener| {
        drop(listener);
        if !drain.is_zero() {
            watch.drain();
        }
        let permits = permits.clone();
        async move {
            if drain.is_zero() {
                return Ok(Drained::Complete);
            }
            let all = u32::try_from(max).unwrap_or(u32::MAX);
            match tokio::time::timeout(drain, permits.acquire_many(all)).await {
                Ok(_) => Ok(Drained::Complete),
                Err(_) => Ok(Drained::TimedOut(
                    max.saturating_sub(permits.available_permits()),
                )),
            }
        }
    };
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return drained(listener).await,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            // Every slot is taken: shed the slowest connection rather than
            // keep the newcomer waiting behind it.
            Err(_) => tokio::select! {
                _ = &mut shutdown => return drained(listener).await,
                p = make_room(&slots, &permits) => p.map_err(std::io::Error::other)?,
            },
        };
        let state = ConnState::watched(watch.clone(), peer);
        slots.add(&state, std::time::Instant::now());
        // Boxed: the task then holds a pointer, so spawning moves 8 bytes, not
        // the connection's whole future (see `serve_connection_task`).
        tokio::spawn(Box::pin(serve_connection_task(
            stream,
            peer,
            svc.clone(),
            opts.clone(),
            watch.clone(),
            state,
            permit,
        )));
    }
}

/// A slot for a connection accepted while every slot is taken: sheds the
/// connection that made the least progress, and waits until its slot is
/// free; while no connection may be shed, looks again every tick.
async fn make_room(
    slots: &Slots,
    permits: &Arc<Semaphore>,
) -> Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError> {
    loop {
        slots.shed(std::time::Instant::now());
        if let Ok(p) = tokio::time::timeout(slots.period(), permits.clone().acquire_owned()).await {
            return p;
        }
    }
}

/// One connection of [`accept_loop`], as a task. Its future is allocated
/// once per connection and stays within glibc's thread cache (1,032 bytes;
/// a unit test checks it), so that allocation takes the fast path.
// A function returning a block, not an `async fn`: an `async fn` keeps its
// arguments twice in its future (as arguments and as moved-in locals).
#[allow(clippy::manual_async_fn)]
fn serve_connection_task<S>(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    svc: S,
    opts: Arc<ListenOptions>,
    watch: Arc<ExpiryWatch>,
    state: ConnState,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> impl Future<Output = ()> + Send
where
    S: ConnectionService,
{
    async move {
        let mut early = None;
        if let Some(gate) = &opts.gate {
            match gate.admit(&stream, peer).await {
                crate::asap::Admission::Refused => {
                    state.progress().closed();
                    drop(permit);
                    return;
                }
                crate::asap::Admission::Established => {}
                crate::asap::Admission::Early(budget) => {
                    state.set_early_room(budget.left());
                    early = Some(budget);
                }
            }
        }
        // The layer notes here the key expiry of every request on this
        // connection; once all of them have expired the connection is
        // closed (after any request in flight), so no idle keep-alive
        // connection outlives the keys it was used with (spec §6). It
        // also remembers the connection's last ticket, issued and
        // opened (spec §7.2, D29).
        let _open = crate::metrics::connection();
        let noted = state.clone();
        let hyper_svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let close = SockPlan::closes(&req);
            SockPlan::request(&noted, &req);
            noted.progress().request();
            let mut req = req.map(|body| RequestBody::new(body, &noted));
            let started = crate::metrics::clock();
            // The peer's address travels in the connection state.
            req.extensions_mut().insert(noted.clone());
            let answered = svc.clone().oneshot(req);
            let conn = noted.clone();
            async move {
                let rsp = answered.await?;
                SockPlan::answer(&conn, close);
                Ok::<_, std::convert::Infallible>(rsp.map(|body| StallBody {
                    body: crate::metrics::timed(body, started),
                    conn,
                }))
            }
        });
        // The builder is dropped here, not kept in the task's future. The
        // head's deadline is the listener's (`Slots`), not hyper's timer.
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .keep_alive(true)
            .half_close(!opts.abandon_on_hangup)
            .max_header_size(opts.max_head)
            .max_buf_size(opts.max_head.max(8192))
            .serve_connection(
                TokioIo::new(Socket {
                    stream,
                    conn: state.clone(),
                    full_read: false,
                    early,
                }),
                hyper_svc,
            );
        tokio::pin!(conn);
        // No timer per connection (arming one costs a wake-up of the
        // event loop on every new connection): the listener's watch wakes
        // the connections once a key one of them carried has expired.
        // Waiting is enabled before any request can note an expiry.
        let expiry = watch.notified();
        tokio::pin!(expiry);
        expiry.as_mut().enable();
        let mut closing = watch.draining();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        let (mut cut_seen, mut dropping) = (false, false);
        let cut = std::future::poll_fn(|cx| state.progress().poll_cut(cx));
        tokio::pin!(cut);
        let result = loop {
            tokio::select! {
                biased;
                r = conn.as_mut() => break r,
                _ = cut.as_mut(), if !cut_seen => {
                    cut_seen = true;
                    if state.progress().resets() {
                        // hyper meets the cut at its next read or write
                        // (polled next, first), where the socket resets the
                        // connection.
                        dropping = true;
                    } else {
                        // Idle between requests: closed as keep-alive ends.
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
                // Cut, and hyper is not reading or writing: the connection
                // is dropped as is.
                _ = std::future::ready(()), if dropping => break Ok(()),
                _ = expiry.as_mut(), if !closing => {
                    if watch.draining() || state.expired(crate::keystore::unix_now()) {
                        tracing::debug!(%peer, "closing a connection whose keys expired");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    } else {
                        expiry.set(watch.notified());
                        expiry.as_mut().enable();
                        state.renote();
                    }
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
        state.progress().closed();
        drop(permit);
    }
}

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
///   a shutdown first sends it (a 413 leaves its body unread). Like nginx,
///   which lingers only then, [`Socket`] skips the system call when no
///   request of the connection carried a body ([`SockPlan::BODY`]) and its
///   last read did not fill hyper's buffer, so the kernel held no more.
struct SockPlan;

impl SockPlan {
    const WANT_NODELAY: u8 = 1;
    const WANT_CORK: u8 = 2;
    const WANT_UNCORK: u8 = 4;
    const NODELAY: u8 = 8;
    const CORKED: u8 = 16;
    /// A request of this connection carried a body (read or not).
    const BODY: u8 = 32;
    const WANTS: u8 = Self::WANT_NODELAY | Self::WANT_CORK | Self::WANT_UNCORK;

    /// A request arrives: notes whether it carries a body.
    fn request<B: http_body::Body>(conn: &ConnState, req: &Request<B>) {
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

    /// Whether hyper closes the connection after answering `req` (its own
    /// rule: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with
    /// `Connection: keep-alive`).
    fn closes<B>(req: &Request<B>) -> bool {
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
    fn answer(conn: &ConnState, close: bool) {
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
    fn stalled(conn: &ConnState) {
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

/// The connection's socket as hyper sees it: socket options are applied
/// before each write, and the shutdown is skipped when the close alone
/// delivers the answer ([`SockPlan`]).
struct Socket {
    stream: tokio::net::TcpStream,
    conn: ConnState,
    /// The last read filled the buffer it was given: the kernel may hold
    /// more.
    full_read: bool,
    /// Admitted by the ASAP gate before its handshake completed: what it
    /// may still send until then (spec/asap.md §4).
    early: Option<Box<crate::asap::EarlyBudget>>,
}

impl tokio::io::AsyncRead for Socket {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.check_cut()?;
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.stream).poll_read(cx, buf);
        // Pending: the kernel had nothing; a short read: it had no more.
        self.full_read = r.is_ready() && buf.remaining() == 0;
        if r.is_ready() {
            self.conn.progress().read(buf.filled().len() - before);
        }
        r
    }
}

impl Socket {
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
        if !SockPlan::needs_shutdown(&self.conn, self.full_read) {
            // The connection is closed next; the close sends what is
            // corked, with the FIN.
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

pin_project_lite::pin_project! {
    /// An answer's body that tells [`SockPlan`] when it waits for data,
    /// and the listener's deadlines when the answer is complete.
    struct StallBody {
        #[pin]
        body: HcBody,
        conn: ConnState,
    }

    impl PinnedDrop for StallBody {
        fn drop(this: Pin<&mut Self>) {
            this.conn.progress().answered();
        }
    }
}

impl http_body::Body for StallBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let r = this.body.poll_frame(cx);
        if r.is_pending() {
            SockPlan::stalled(this.conn);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Binds `addr` and logs the bound address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr).await?;
    tracing::info!(addr = %l.local_addr()?, "listening");
    Ok(l)
}

/// A static-file service for `root` (tower-http `ServeDir`, with an inline
/// fast path for plain GET/HEAD of a regular file).
pub fn static_files(root: &std::path::Path) -> StaticFiles {
    StaticFiles {
        root: Arc::new(root.to_path_buf()),
        dir: Arc::new(
            tower_http::services::ServeDir::new(root).append_index_html_on_directories(true),
        ),
    }
}

/// Static files under a root directory.
///
/// `ServeDir` does every file-system call on tokio's blocking pool: a GET
/// of a small file takes five round trips to a pool thread (directory
/// check, open, metadata, read, read to EOF), each two cross-thread
/// wake-ups, which dominated the server's CPU per request in
/// `bench/REPORT.md`. A plain GET or HEAD of a regular file (no `Range`, no
/// precondition, no `%`-escapes or dot segments in the path) is therefore
/// served inline on the worker, with the same status and header fields
/// `ServeDir` sends; the body is read in 64 KiB pieces as it is polled.
/// Like nginx without `aio threads`, this assumes files in the page cache
/// (or a fast local disk): a slow disk read stalls the worker meanwhile.
/// Everything else goes to `ServeDir`.
#[derive(Clone, Debug)]
pub struct StaticFiles {
    root: Arc<std::path::PathBuf>,
    // Shared: the service is cloned per request, `ServeDir` only for the
    // requests the inline path leaves to it.
    dir: Arc<tower_http::services::ServeDir>,
}

/// Piece size of inline file bodies (`ServeDir`'s default chunk size).
const FILE_CHUNK: u64 = 64 * 1024;

impl StaticFiles {
    /// The inline answer, or `None` when `ServeDir` should handle it.
    fn inline(&self, req: &Request<HcBody>) -> Option<Response<HcBody>> {
        let head = match *req.method() {
            http::Method::GET => false,
            http::Method::HEAD => true,
            _ => return None,
        };
        let h = req.headers();
        if [
            header::RANGE,
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_UNMODIFIED_SINCE,
            header::IF_RANGE,
        ]
        .iter()
        .any(|n| h.contains_key(n))
        {
            return None;
        }
        let path = req.uri().path();
        if path.contains('%') || path.ends_with('/') {
            return None;
        }
        let mut file_path =
            std::path::PathBuf::with_capacity(self.root.as_os_str().len() + path.len());
        file_path.push(self.root.as_ref());
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            if seg == "." || seg == ".." || seg.contains('\\') || seg.contains(':') {
                return None;
            }
            file_path.push(seg);
        }
        let file = std::fs::File::open(&file_path).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() {
            return None;
        }
        let mime = mime_guess::from_path(&file_path)
            .first_raw()
            .unwrap_or("application/octet-stream");
        let len = meta.len();
        let body = if head {
            http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed_unsync()
        } else {
            InlineFile { file, left: len }.boxed_unsync()
        };
        let mut rsp = Response::new(body);
        let fields = rsp.headers_mut();
        fields.insert(header::CONTENT_TYPE, http::HeaderValue::from_static(mime));
        fields.insert(
            header::ACCEPT_RANGES,
            http::HeaderValue::from_static("bytes"),
        );
        if let Some(v) = meta.modified().ok().and_then(|t| {
            // An IMF-fixdate is 29 bytes: formatted on the stack.
            use std::io::Write as _;
            let mut date = [0u8; 29];
            write!(&mut date[..], "{}", httpdate::HttpDate::from(t)).ok()?;
            http::HeaderValue::from_bytes(&date).ok()
        }) {
            fields.insert(header::LAST_MODIFIED, v);
        }
        fields.insert(header::CONTENT_LENGTH, http::HeaderValue::from(len));
        Some(rsp)
    }
}

impl tower::Service<Request<HcBody>> for StaticFiles {
    type Response = Response<HcBody>;
    type Error = BoxError;
    type Future = futures_util::future::Either<
        std::future::Ready<Result<Response<HcBody>, BoxError>>,
        std::pin::Pin<Box<dyn Future<Output = Result<Response<HcBody>, BoxError>> + Send>>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<HcBody>) -> Self::Future {
        use futures_util::future::Either;
        if let Some(rsp) = self.inline(&req) {
            return Either::Left(std::future::ready(Ok(rsp)));
        }
        let fut = tower::Service::call(&mut self.dir.as_ref().clone(), req);
        Either::Right(Box::pin(async move {
            let rsp = fut.await.map_err(|e| -> BoxError { Box::new(e) })?;
            Ok(rsp.map(|b| b.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync()))
        }))
    }
}

/// A regular file's body, read on the polling thread (see [`StaticFiles`]).
struct InlineFile {
    file: std::fs::File,
    left: u64,
}

impl http_body::Body for InlineFile {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        use std::io::Read;
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(FILE_CHUNK) as usize;
        let mut buf = bytes::BytesMut::zeroed(n);
        let r = match self.file.read(&mut buf) {
            Ok(0) => Err(BoxError::from("file shrank while being served")),
            Ok(got) => {
                buf.truncate(got);
                self.left -= got as u64;
                Ok(http_body::Frame::data(buf.freeze()))
            }
            Err(e) => Err(Box::new(e) as BoxError),
        };
        if r.is_err() {
            self.left = 0;
        }
        std::task::Poll::Ready(Some(r))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// Fields a proxy must not forward (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A streaming reverse proxy to `upstream` (`http://host:port`): method,
/// target, fields (but hop-by-hop ones), status and bodies of any size pass
/// through unchanged.
///
/// Cloning it is one reference count: the layer holds a clone in every
/// sealed request's future, which stays within glibc's thread cache only
/// while the service is small (the client alone is ≈ 300 bytes).
#[derive(Clone, Debug)]
pub struct Upstream {
    inner: Arc<UpstreamInner>,
}

#[derive(Debug)]
struct UpstreamInner {
    client: HyperClient<HttpConnector, HcBody>,
    base: Uri,
    /// Lower-case prefix of the allow-listed outer fields (see
    /// [`Upstream::with_outer_prefix`]).
    outer_prefix: String,
    opts: UpstreamOptions,
}

/// Which fields tell the upstream who the client is (the TCP peer of the
/// gateway). Fields of these names a client sent are removed first: only
/// the gateway's word reaches the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Forwarded {
    /// None (and none passed on from the client).
    None,
    /// `X-Forwarded-For` and `X-Forwarded-Proto`, as most proxies send.
    #[default]
    Xff,
    /// `Forwarded` (RFC 7239).
    Forwarded,
    /// Both kinds.
    Both,
}

/// How [`Upstream`] treats its upstream.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// Longest wait for the connection and the answer's head; past it the
    /// client gets 504.
    pub timeout: Duration,
    /// Idle keep-alive connections kept to the upstream.
    pub pool_idle: usize,
    /// How long an idle upstream connection is kept.
    pub pool_idle_timeout: Duration,
    /// The client fields added for the upstream.
    pub forwarded: Forwarded,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        UpstreamOptions {
            timeout: Duration::from_secs(60),
            pool_idle: 32,
            pool_idle_timeout: Duration::from_secs(90),
            forwarded: Forwarded::Xff,
        }
    }
}

impl Upstream {
    /// A proxy to `base`.
    pub fn new(base: Uri) -> Self {
        Self::with_options(base, UpstreamOptions::default())
    }

    /// A proxy to `base` with `opts`.
    pub fn with_options(base: Uri, opts: UpstreamOptions) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(opts.timeout));
        Upstream {
            inner: Arc::new(UpstreamInner {
                client: HyperClient::builder(TokioExecutor::new())
                    .pool_max_idle_per_host(opts.pool_idle)
                    .pool_idle_timeout(opts.pool_idle_timeout)
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .build(http),
                base,
                outer_prefix: httpcrypt_proto::inner::DEFAULT_OUTER_PREFIX.to_ascii_lowercase(),
                opts,
            }),
        }
    }

    /// The same proxy handing the request's [`crate::server::OuterFields`]
    /// (the outer fields the operator allow-listed, unauthenticated) to the
    /// upstream as `{prefix}{name}`, never under their own names (erratum
    /// E1); default `Httpcrypt-Outer-`. Inner fields starting with the
    /// prefix are dropped whether or not any outer field is passed: a
    /// client must not be able to say what the proxy in front said. An
    /// empty prefix means the default: outer fields never travel under
    /// their own names.
    pub fn with_outer_prefix(self, prefix: &str) -> Self {
        let prefix = match prefix {
            "" => httpcrypt_proto::inner::DEFAULT_OUTER_PREFIX,
            p => p,
        };
        let inner = UpstreamInner {
            client: self.inner.client.clone(),
            base: self.inner.base.clone(),
            outer_prefix: prefix.to_ascii_lowercase(),
            opts: self.inner.opts.clone(),
        };
        Upstream {
            inner: Arc::new(inner),
        }
    }
}

/// Adds the client fields of `how` for the TCP peer `peer` (spec: none;
/// this is the gateway's convention, as nginx's and Caddy's).
fn add_forwarded(h: &mut http::HeaderMap, how: Forwarded, peer: Option<SocketAddr>) {
    for name in [
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "forwarded",
    ] {
        h.remove(name);
    }
    let Some(peer) = peer else { return };
    let ip = peer.ip();
    if matches!(how, Forwarded::Xff | Forwarded::Both) {
        if let Ok(v) = http::HeaderValue::from_str(&ip.to_string()) {
            h.insert("x-forwarded-for", v);
        }
        h.insert("x-forwarded-proto", http::HeaderValue::from_static("http"));
    }
    if matches!(how, Forwarded::Forwarded | Forwarded::Both) {
        let node = match ip {
            std::net::IpAddr::V4(v4) => v4.to_string(),
            std::net::IpAddr::V6(v6) => format!("\"[{v6}]\""),
        };
        if let Ok(v) = http::HeaderValue::from_str(&format!("for={node};proto=http")) {
            h.insert(header::FORWARDED, v);
        }
    }
}

/// The gateway's own answer when the upstream fails: an RFC 9457 problem
/// document (`about:blank`, the status's reason as title), as nginx and
/// Caddy answer 502 and 504. The detail does not name the upstream (the
/// log does).
fn gateway_problem(status: http::StatusCode, detail: &str) -> Response<HcBody> {
    let doc = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Bad Gateway"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut r = Response::new(
        http_body_util::Full::new(Bytes::from(doc.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    r
}

impl tower::Service<Request<HcBody>> for Upstream {
    type Response = Response<HcBody>;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response<HcBody>, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<HcBody>) -> Self::Future {
        let up = self.inner.clone();
        Box::pin(async move {
            let base = &up.base;
            let pq = req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            let prefix = base.path().trim_end_matches('/');
            let uri: Uri = format!(
                "{}://{}{}{}",
                base.scheme_str().unwrap_or("http"),
                base.authority().map_or("", |a| a.as_str()),
                prefix,
                pq
            )
            .parse()?;
            *req.uri_mut() = uri;
            strip_hop_by_hop(req.headers_mut());
            pass_outer(&mut req, &up.outer_prefix);
            let peer = req
                .extensions()
                .get::<ConnState>()
                .and_then(ConnState::peer);
            add_forwarded(req.headers_mut(), up.opts.forwarded, peer);
            let rsp = match tokio::time::timeout(up.opts.timeout, up.client.request(req)).await {
                Ok(Ok(rsp)) => rsp,
                Ok(Err(e)) => {
                    // The connect timeout is an io::Error a few sources down.
                    let mut cause = std::error::Error::source(&e);
                    let mut timed_out = false;
                    for _ in 0..8 {
                        let Some(c) = cause else { break };
                        timed_out |= c
                            .downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
                        cause = c.source();
                    }
                    tracing::warn!(upstream = %base, error = %crate::error::Chain(&e), "upstream request failed");
                    return Ok(if timed_out {
                        gateway_problem(
                            http::StatusCode::GATEWAY_TIMEOUT,
                            "the upstream service did not answer in time",
                        )
                    } else {
                        gateway_problem(
                            http::StatusCode::BAD_GATEWAY,
                            "the upstream service could not be reached or failed",
                        )
                    });
                }
                Err(_) => {
                    tracing::warn!(upstream = %base, timeout_s = up.opts.timeout.as_secs_f64(), "upstream timed out");
                    return Ok(gateway_problem(
                        http::StatusCode::GATEWAY_TIMEOUT,
                        "the upstream service did not answer in time",
                    ));
                }
            };
            let (mut parts, body) = rsp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(
                parts,
                body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync(),
            ))
        })
    }
}

fn strip_hop_by_hop(h: &mut http::HeaderMap) {
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| {
            v.split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    for n in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(named) {
        h.remove(n.as_str());
    }
}

/// Drops the request's fields named `{prefix}…` and adds its allow-listed
/// outer fields (the [`crate::server::OuterFields`] extension) under that
/// prefix; `prefix` is lower case.
fn pass_outer(req: &mut Request<HcBody>, prefix: &str) {
    let forged: Vec<http::HeaderName> = req
        .headers()
        .keys()
        .filter(|n| n.as_str().starts_with(prefix))
        .cloned()
        .collect();
    for n in forged {
        req.headers_mut().remove(n);
    }
    let Some(crate::server::OuterFields(outer)) = req.extensions_mut().remove() else {
        return;
    };
    for (n, v) in &outer {
        if let Ok(name) = http::HeaderName::from_bytes(format!("{prefix}{n}").as_bytes()) {
            req.headers_mut().append(name, v.clone());
        }
    }
}

/// Bytes of a body, for small responses in tests and tools.
pub async fn collect(body: HcBody) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}

/// glibc's largest allocation served from its per-thread cache, the fast
/// path of `malloc` and `free` (tcache, 64 bins of 16 bytes up to 1,032):
/// the bound of the tests that keep per-connection and per-request futures
/// within it.
#[cfg(test)]
pub(crate) const GLIBC_TCACHE_MAX: usize = 1032;

#[cfg(test)]
mod tests {
    use super::*;

    /// The future of a connection's task, allocated once per connection
    /// (`serve_connection_task`), fits glibc's thread cache, for the static
    /// files and for the gateway. Above it the allocation takes glibc's
    /// slow path; it failed at 1,064 bytes while hyper's connection builder
    /// was kept in the future.
    #[test]
    fn a_connection_future_fits_the_thread_cache() {
        fn returned_size<F, A, B, C, D, E, G, H, R>(_: F) -> usize
        where
            F: FnOnce(A, B, C, D, E, G, H) -> R,
        {
            std::mem::size_of::<R>()
        }
        let files =
            returned_size(serve_connection_task::<crate::server::HttpCryptService<StaticFiles>>);
        let gateway =
            returned_size(serve_connection_task::<crate::server::HttpCryptService<Upstream>>);
        assert!(files <= GLIBC_TCACHE_MAX, "static files: {files} bytes");
        assert!(gateway <= GLIBC_TCACHE_MAX, "gateway: {gateway} bytes");
    }

    /// A loopback listener handed to `serve` (a call of [`run`]), run as a
    /// task: its address, and the task (abort it to stop).
    async fn serve_local<F>(
        serve: impl FnOnce(TcpListener) -> F,
    ) -> (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)
    where
        F: Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let listener = bind("127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        (addr, tokio::spawn(serve(listener)))
    }

    fn get(path: &str, extra: Option<(header::HeaderName, &'static str)>) -> Request<HcBody> {
        let mut r = Request::new(
            http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *r.uri_mut() = path.parse().expect("a valid path");
        if let Some((n, v)) = extra {
            r.headers_mut().insert(n, http::HeaderValue::from_static(v));
        }
        r
    }

    /// The inline path answers exactly as `ServeDir` does, and leaves what
    /// it does not handle to `ServeDir`.
    #[tokio::test]
    async fn inline_files_match_serve_dir() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a.txt"), vec![b'x'; 200_000]).expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let files = static_files(dir.path());
        let mut dir_svc = files.dir.as_ref().clone();
        for (path, extra) in [
            ("/a.txt", None),
            ("/sub/../a.txt", None),
            ("/a.txt", Some((header::RANGE, "bytes=0-9"))),
            ("/missing", None),
            ("/sub", None),
            ("/%61.txt", None),
        ] {
            let inline = files.inline(&get(path, extra.clone()));
            let expect_inline = path == "/a.txt" && extra.is_none();
            assert_eq!(inline.is_some(), expect_inline, "{path}");
            let ours = tower::Service::call(&mut files.clone(), get(path, extra.clone()))
                .await
                .expect("static files");
            let theirs = tower::Service::call(&mut dir_svc, get(path, extra))
                .await
                .expect("ServeDir");
            assert_eq!(ours.status(), theirs.status(), "{path}");
            assert_eq!(ours.headers(), theirs.headers(), "{path}");
            let a = collect(ours.into_body()).await.expect("our body");
            let b = theirs
                .into_body()
                .collect()
                .await
                .expect("their body")
                .to_bytes();
            assert_eq!(a, b, "{path}");
        }
    }

    /// Aborting the task that runs `run` stops the accept loop it spawned.
    #[tokio::test]
    async fn dropping_run_closes_the_listener() {
        let svc = tower::service_fn(|_req: Request<RequestBody>| async {
            Ok::<_, std::convert::Infallible>(Response::new(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            ))
        });
        let (addr, server) =
            serve_local(|l| run(l, svc, ListenOptions::default(), std::future::pending())).await;
        tokio::net::TcpStream::connect(addr).await.expect("serving");
        server.abort();
        let _ = server.await;
        let mut refused = false;
        for _ in 0..50 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused, "the listener should close once run is dropped");
    }

    /// A client that closes its end right after its request: with
    /// `abandon_on_hangup` the service's answer is dropped unsent (the
    /// gateway's setting, which stops the upstream request); without it the
    /// answer still goes out (static files).
    #[tokio::test]
    async fn a_hangup_abandons_the_request_only_when_asked() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        for abandon in [true, false] {
            let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
            let svc = tower::service_fn(move |_req: Request<RequestBody>| {
                let done = done_tx.clone();
                async move {
                    // Long enough for the hang-up to arrive first.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let _ = done.send(());
                    Ok::<_, std::convert::Infallible>(Response::new(crate::body::full(
                        &b"answer"[..],
                    )))
                }
            });
            let opts = ListenOptions {
                abandon_on_hangup: abandon,
                ..Default::default()
            };
            let (addr, server) = serve_local(|l| run(l, svc, opts, std::future::pending())).await;
            let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            tcp.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .expect("send");
            tcp.shutdown().await.expect("half-close");
            let mut got = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
                .await
                .expect("the connection ends");
            let text = String::from_utf8_lossy(&got);
            if abandon {
                assert!(got.is_empty(), "answered a client that hung up: {text}");
                // The service future was dropped before it finished.
                tokio::time::sleep(Duration::from_millis(500)).await;
                assert!(done_rx.try_recv().is_err(), "the abandoned service ran on");
            } else {
                read.expect("read");
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                assert!(text.ends_with("answer"), "{text}");
            }
            server.abort();
        }
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

    /// An answer given before the request's body was read still reaches
    /// the client when the connection closes with the body's bytes unread
    /// in the kernel: the close would reset the connection and drop the
    /// answer, so the shutdown that sends it first is kept for connections
    /// whose requests carry a body, and after a read that filled hyper's
    /// buffer.
    #[tokio::test]
    async fn an_answer_leaves_before_an_unread_body_resets_the_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let svc = tower::service_fn(|_req: Request<RequestBody>| async {
            // The body arrives meanwhile and is never read.
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok::<_, std::convert::Infallible>(Response::new(crate::body::full(
                &b"refused unread"[..],
            )))
        });
        let (addr, server) =
            serve_local(|l| run(l, svc, ListenOptions::default(), std::future::pending())).await;
        // A body, sent after the head was read; then no body, but more bytes
        // after the request than hyper's first read takes.
        for case in [0, 0, 1, 1] {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            if case == 0 {
                tcp.write_all(
                    b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 4000\r\n\r\n",
                )
                .await
                .expect("send the head");
                tokio::time::sleep(Duration::from_millis(30)).await;
                tcp.write_all(&[b'x'; 4000]).await.expect("send the body");
            } else {
                let mut bytes = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec();
                bytes.resize(bytes.len() + 40_000, b'x');
                tcp.write_all(&bytes).await.expect("send");
            }
            let mut got = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
                .await
                .expect("the connection ends");
            let text = String::from_utf8_lossy(&got);
            assert!(read.is_ok(), "reset before the answer: {read:?} {text}");
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(text.ends_with("refused unread"), "{text}");
        }
        server.abort();
    }

    /// The last answer of a connection is corked so that it leaves with the
    /// FIN; when its body waits for data, what was written goes out at once
    /// instead of after the kernel's 200 ms cork limit. Then the close
    /// delivers the rest and the end of the stream.
    #[tokio::test]
    async fn a_stalled_last_answer_is_not_held_back() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let first_sent = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
        let marks = first_sent.clone();
        let svc = tower::service_fn(move |_req: Request<RequestBody>| {
            let marks = marks.clone();
            async move {
                let chunks = futures_util::stream::unfold(0u8, move |i| {
                    let marks = marks.clone();
                    async move {
                        match i {
                            0 => {
                                *marks.lock().expect("lock") = Some(std::time::Instant::now());
                                Some((Bytes::from_static(b"first;"), 1))
                            }
                            1 => {
                                tokio::time::sleep(Duration::from_secs(2)).await;
                                Some((Bytes::from_static(b"second"), 2))
                            }
                            _ => None,
                        }
                    }
                });
                let body =
                    http_body_util::StreamBody::new(futures_util::StreamExt::map(chunks, |b| {
                        Ok::<_, BoxError>(http_body::Frame::data(b))
                    }));
                Ok::<_, std::convert::Infallible>(Response::new(body.boxed_unsync()))
            }
        });
        let (addr, server) =
            serve_local(|l| run(l, svc, ListenOptions::default(), std::future::pending())).await;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .expect("send");
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(6).any(|w| w == b"first;") {
            let n = tcp.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before the first chunk");
            got.extend_from_slice(&buf[..n]);
        }
        let waited = first_sent.lock().expect("lock").expect("sent").elapsed();
        assert!(
            waited < Duration::from_millis(150),
            "the first chunk was held back {waited:?}"
        );
        tcp.read_to_end(&mut got).await.expect("read to the end");
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("second"), "{text}");
        server.abort();
    }
}
