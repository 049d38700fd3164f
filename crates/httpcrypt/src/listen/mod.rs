//! The listener behind `httpcrypt serve` and `httpcrypt gateway`: an
//! HTTP/1.1 accept loop with keep-alive, a bound on concurrent connections,
//! deadlines and a minimum rate for what peers send and read (shedding the
//! slowest connection when every slot is taken, `crate::lifecycle`),
//! draining on shutdown, and outer size limits (spec §11). Each accepted
//! connection runs as one task (`connection`) over a socket that applies
//! the options its answers ask for (`socket`).

mod connection;
mod h2;
mod socket;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::body::HcBody;
use crate::conn::{ConnState, ExpiryWatch};
pub use crate::lifecycle::RequestBody;
use crate::lifecycle::Slots;
use connection::serve_connection_task;
pub use h2::{run_h2, H2Options};

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
                watch.tick(crate::clock::unix_now());
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

/// Binds `addr` and logs the bound address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr).await?;
    tracing::info!(addr = %l.local_addr()?, "listening");
    Ok(l)
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
    use crate::error::BoxError;
    use bytes::Bytes;
    use http_body_util::BodyExt;

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

    /// A client that sends its whole body before it reads the answer (as
    /// most do) still gets an answer given before the body was read: the
    /// closing connection reads and discards the body (`Socket::linger`),
    /// where a close with the body unread would reset the connection and
    /// fail the client's write. The body is larger than what the kernel's
    /// buffers hold, so without lingering the write cannot complete.
    #[tokio::test]
    async fn a_client_that_sends_its_whole_body_first_still_reads_an_early_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let svc = tower::service_fn(|_req: Request<RequestBody>| async {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(413)
                    .body(crate::body::full(&b"too large"[..]))
                    .expect("a response"),
            )
        });
        let (addr, server) =
            serve_local(|l| run(l, svc, ListenOptions::default(), std::future::pending())).await;
        const BODY: usize = 12 << 20;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {BODY}\r\n\r\n");
        tcp.write_all(head.as_bytes()).await.expect("send the head");
        let body = vec![b'x'; BODY];
        let sent = tokio::time::timeout(Duration::from_secs(10), tcp.write_all(&body))
            .await
            .expect("the body is taken within 10 s");
        assert!(sent.is_ok(), "the body's write failed: {sent:?}");
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
            .await
            .expect("the connection ends");
        let text = String::from_utf8_lossy(&got);
        assert!(
            read.is_ok(),
            "reset before the answer was read: {read:?} {text}"
        );
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        assert!(text.ends_with("too large"), "{text}");
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
        // A held-back chunk arrives after the cork's 200 ms every time; a
        // busy machine may delay one that was sent at once, so up to three
        // connections try.
        let mut waits = Vec::new();
        for _ in 0..3 {
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
            waits.push(waited);
            if waited < Duration::from_millis(150) {
                tcp.read_to_end(&mut got).await.expect("read to the end");
                let text = String::from_utf8_lossy(&got);
                assert!(text.contains("second"), "{text}");
                server.abort();
                return;
            }
        }
        panic!("the first chunk was held back on every connection: {waits:?}");
    }

    /// A service answering every request with its path.
    fn echo_path() -> impl ConnectionService {
        tower::service_fn(|req: Request<RequestBody>| async move {
            let path = req.uri().path().to_string();
            Ok::<_, std::convert::Infallible>(Response::new(crate::body::full(path.into_bytes())))
        })
    }

    /// Reads from `tcp` until `want` answers have arrived in full (each
    /// ends with its body, the path `/<n>`), returns the text.
    async fn read_answers(tcp: &mut tokio::net::TcpStream, want: &[&str]) -> String {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).to_string();
            if text.matches("HTTP/1.1 200").count() == want.len()
                && want.last().is_some_and(|w| text.ends_with(w))
            {
                return text;
            }
            let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
                .await
                .expect("answers in time")
                .expect("read");
            assert!(n > 0, "closed after {text}");
            got.extend_from_slice(&buf[..n]);
        }
    }

    /// hyper starts on a connection's first byte and is released between
    /// requests: a connection silent at first is served once it speaks;
    /// keep-alive answers carry no `Connection: close` and the connection
    /// stays open across the release; pipelined requests, and a head
    /// split across the release, are all answered in order.
    #[tokio::test]
    async fn requests_are_served_across_the_release_of_hyper() {
        use tokio::io::AsyncWriteExt;
        let (addr, server) = serve_local(|l| {
            run(
                l,
                echo_path(),
                ListenOptions::default(),
                std::future::pending(),
            )
        })
        .await;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tokio::time::sleep(Duration::from_millis(300)).await;
        tcp.write_all(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("send");
        let first = read_answers(&mut tcp, &["/1"]).await;
        // Idle: hyper is released; the next request starts a new one.
        tokio::time::sleep(Duration::from_millis(200)).await;
        tcp.write_all(
            b"GET /2 HTTP/1.1\r\nHost: t\r\n\r\nGET /3 HTTP/1.1\r\nHost: t\r\n\r\nGET /4 HT",
        )
        .await
        .expect("send pipelined");
        let second = read_answers(&mut tcp, &["/2", "/3"]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        tcp.write_all(b"TP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("send the rest");
        let third = read_answers(&mut tcp, &["/4"]).await;
        for text in [&first, &second, &third] {
            assert!(
                !text.to_ascii_lowercase().contains("connection: close"),
                "{text}"
            );
        }
        assert!(second.find("/2").expect("/2") < second.find("/3").expect("/3"));
        // Still open: one more request is answered.
        tcp.write_all(b"GET /5 HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("send");
        read_answers(&mut tcp, &["/5"]).await;
        server.abort();
    }

    /// A draining listener closes at once a connection that waits for its
    /// first byte, and one that waits between requests.
    #[tokio::test]
    async fn a_drain_closes_connections_waiting_for_a_byte() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = bind("127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(run_draining(
            listener,
            echo_path(),
            ListenOptions::default(),
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(10),
        ));
        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut kept = tokio::net::TcpStream::connect(addr).await.expect("connect");
        kept.write_all(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("send");
        read_answers(&mut kept, &["/1"]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let _ = stop.send(());
        let drained = tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("drained in time")
            .expect("task")
            .expect("run");
        assert_eq!(drained, Drained::Complete);
        assert!(started.elapsed() < Duration::from_secs(2));
        for tcp in [&mut silent, &mut kept] {
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut buf))
                .await
                .expect("closed")
                .unwrap_or(0);
            assert_eq!(n, 0, "the connection stays open");
        }
    }
}
