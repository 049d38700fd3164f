//! A second listener that speaks HTTP/2 with prior knowledge (h2c, RFC 9113
//! §3.3) only: the leg a split proxy keeps to its origin
//! (spec/split-serving.md §S11). HPACK sends the fields every request and
//! answer on that leg repeat (`Host`, `Httpcrypt-Split`, the split answer's
//! `Content-Type`, `Date`) as table indexes after the first, and codes the
//! base64url of the target and the cookie in about six bits a character.
//!
//! It serves the same service as the HTTP/1.1 listener, with HTTP/2's own
//! bounds per connection (concurrent streams, the size of a field block,
//! flow-control windows) and these of its own: a bound on connections, a
//! deadline for each answer's head (which covers reading the request
//! body), and an idle timeout for a connection without a stream. A peer that
//! stops answering `PING`s is dropped.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use super::ConnectionService;
use crate::lifecycle::RequestBody;

/// Settings of [`run_h2`].
#[derive(Debug, Clone)]
pub struct H2Options {
    /// Most connections served at once; a new one waits for a slot.
    pub max_connections: usize,
    /// Most streams (requests) open at once on one connection.
    pub max_streams: u32,
    /// Largest field block of a request (HPACK-decoded), bytes.
    pub max_head: u32,
    /// Longest the service may take to produce an answer's head, reading
    /// the request's body included; then the answer is a `408`.
    pub answer_timeout: Duration,
    /// A connection without an open stream for this long is closed
    /// (`GOAWAY`, then the close).
    pub idle_timeout: Duration,
}

impl Default for H2Options {
    fn default() -> Self {
        let l = super::ListenOptions::default();
        H2Options {
            max_connections: 256,
            max_streams: 256,
            max_head: u32::try_from(l.max_head).unwrap_or(u32::MAX),
            answer_timeout: Duration::from_secs(60),
            idle_timeout: l.keepalive_timeout.max(Duration::from_secs(60)),
        }
    }
}

/// Serves `svc` over HTTP/2 with prior knowledge on `listener` until
/// `shutdown` resolves; then the open connections get a `GOAWAY` and
/// finish their streams in the background.
pub async fn run_h2<S>(
    listener: TcpListener,
    svc: S,
    opts: H2Options,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    S: ConnectionService,
{
    let permits = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let opts = Arc::new(opts);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = shutdown.as_mut() => break,
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.as_mut() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "h2 accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let task = serve_h2_connection(stream, peer, svc.clone(), opts.clone(), stop_rx.clone());
        tokio::spawn(async move {
            if let Err(e) = task.await {
                tracing::debug!(%peer, error = %e, "h2 connection ended with an error");
            }
            drop(permit);
        });
    }
    let _ = stop_tx.send(true);
    Ok(())
}

/// One HTTP/2 connection: hyper's server, its idle watch, and the
/// listener's stop.
async fn serve_h2_connection<S>(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    svc: S,
    opts: Arc<H2Options>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    S: ConnectionService,
{
    let activity = Arc::new(Activity::new());
    let seen = activity.clone();
    let answer_timeout = opts.answer_timeout;
    // The peer's address and the tickets issued on this connection (D29:
    // a ticket whenever the session changes) travel with each request.
    let state = crate::conn::ConnState::multiplexed(peer);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let guard = seen.open();
        let mut req = req.map(RequestBody::detached);
        req.extensions_mut().insert(state.clone());
        let answered = svc.clone().oneshot(req);
        async move {
            let rsp = match tokio::time::timeout(answer_timeout, answered).await {
                Ok(r) => r?,
                Err(_) => crate::body::plain(StatusCode::REQUEST_TIMEOUT, "request timed out\n"),
            };
            // The stream counts as open until its answer's body is done:
            // the body owns the guard.
            Ok::<_, std::convert::Infallible>(rsp.map(|body| {
                use http_body_util::BodyExt;
                body.map_frame(move |frame| {
                    let _open = &guard;
                    frame
                })
                .boxed_unsync()
            }))
        }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(opts.max_streams)
        .max_header_list_size(opts.max_head)
        .keep_alive_interval(Some(opts.idle_timeout / 2))
        .keep_alive_timeout(Duration::from_secs(20));
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let idle = opts.idle_timeout;
    let mut tick = tokio::time::interval((idle / 4).max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = false;
    // After an idle `GOAWAY`, hyper waits for the peer to acknowledge a
    // `PING` before it closes; a peer that never does is dropped.
    let gone = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(gone);
    loop {
        tokio::select! {
            r = conn.as_mut() => return r,
            _ = stop.changed(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = tick.tick(), if !closing => {
                if activity.idle_for() >= idle {
                    tracing::debug!("closing an idle h2 connection");
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                    gone.as_mut().reset(tokio::time::Instant::now() + idle.min(Duration::from_secs(10)));
                }
            }
            _ = gone.as_mut(), if closing => {
                if activity.idle_for() >= idle {
                    return Ok(());
                }
                gone.as_mut().reset(tokio::time::Instant::now() + idle);
            }
        }
    }
}

/// Streams open on one connection, and when the last one closed.
#[derive(Debug)]
struct Activity {
    open: AtomicUsize,
    start: Instant,
    /// Milliseconds since `start` when a stream last closed (or began).
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            open: AtomicUsize::new(0),
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn open(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Relaxed);
        self.last.store(self.now_ms(), Relaxed);
        StreamGuard(self.clone())
    }

    /// How long the connection has had no open stream (zero while one is).
    fn idle_for(&self) -> Duration {
        if self.open.load(Relaxed) > 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(self.now_ms().saturating_sub(self.last.load(Relaxed)))
    }
}

/// One open stream of an [`Activity`], until dropped.
#[derive(Debug)]
struct StreamGuard(Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.last.store(self.0.now_ms(), Relaxed);
        self.0.open.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::HcBody;
    use bytes::Bytes;
    use http::Response;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::{connect::HttpConnector, Client};

    /// Answers with the request's method, path and body, after `delay`.
    fn echo(
        delay: Duration,
    ) -> impl ConnectionService<
        Future = impl Future<Output = Result<Response<HcBody>, std::convert::Infallible>> + Send,
    > {
        tower::service_fn(move |req: Request<RequestBody>| async move {
            tokio::time::sleep(delay).await;
            let head = format!("{} {} {:?} ", req.method(), req.uri().path(), req.version());
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let mut out = head.into_bytes();
            out.extend_from_slice(&body);
            Ok::<_, std::convert::Infallible>(Response::new(crate::body::full(out)))
        })
    }

    async fn start<S: ConnectionService>(
        svc: S,
        opts: H2Options,
    ) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run_h2(l, svc, opts, async {
            let _ = rx.await;
        }));
        (addr, tx)
    }

    fn h2_client() -> Client<HttpConnector, Full<Bytes>> {
        Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(HttpConnector::new())
    }

    #[tokio::test]
    async fn serves_requests_over_h2c() {
        let (addr, _stop) = start(echo(Duration::ZERO), H2Options::default()).await;
        let client = h2_client();
        let mut answers = Vec::new();
        for i in 0..8 {
            let req = Request::post(format!("http://{addr}/p{i}"))
                .body(Full::new(Bytes::from(vec![b'x'; i])))
                .unwrap();
            answers.push(client.request(req));
        }
        for (i, a) in answers.into_iter().enumerate() {
            let rsp = a.await.unwrap();
            assert_eq!(rsp.version(), http::Version::HTTP_2);
            let body = rsp.into_body().collect().await.unwrap().to_bytes();
            let want = format!("POST /p{i} HTTP/2.0 {}", "x".repeat(i));
            assert_eq!(body, Bytes::from(want));
        }
    }

    #[tokio::test]
    async fn an_answer_late_past_its_deadline_is_a_408() {
        let opts = H2Options {
            answer_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        let (addr, _stop) = start(echo(Duration::from_secs(30)), opts).await;
        let req = Request::get(format!("http://{addr}/slow"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let started = Instant::now();
        let rsp = h2_client().request(req).await.unwrap();
        assert_eq!(rsp.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// Sends `bytes` on a new connection and reads until the server
    /// closes it; `None` if it is still open after 10 s.
    async fn until_closed(addr: std::net::SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(bytes).await.unwrap();
        let mut sink = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut sink))
            .await
            .ok()
            .map(|_| sink)
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed() {
        let opts = H2Options {
            idle_timeout: Duration::from_millis(200),
            ..Default::default()
        };
        let (addr, _stop) = start(echo(Duration::ZERO), opts).await;
        // The preface and an empty SETTINGS frame, then nothing.
        let sink = until_closed(
            addr,
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0",
        )
        .await
        .expect("the server kept an idle connection open");
        // Its SETTINGS, the ACK of ours, then a GOAWAY (frame type 7).
        let mut at = 0;
        let mut types = Vec::new();
        while at + 9 <= sink.len() {
            let len = usize::from(sink[at]) << 16
                | usize::from(sink[at + 1]) << 8
                | usize::from(sink[at + 2]);
            types.push(sink[at + 3]);
            at += 9 + len;
        }
        assert!(types.contains(&7), "frames {types:?}");
    }

    #[tokio::test]
    async fn http1_is_refused() {
        let (addr, _stop) = start(echo(Duration::ZERO), H2Options::default()).await;
        let sink = until_closed(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("the server kept a connection without the preface");
        assert!(!sink.starts_with(b"HTTP/1.1 200"));
    }
}
