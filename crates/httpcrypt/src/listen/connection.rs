//! One accepted connection as a task: the ASAP gate's verdict, hyper's
//! HTTP/1.1 over the connection's [`Socket`], and the reasons it closes
//! (its keys expired, the listener drains or cuts it).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tower::ServiceExt;

use super::socket::{SockPlan, Socket};
use super::{ConnectionService, ListenOptions};
use crate::body::HcBody;
use crate::conn::{ConnState, ExpiryWatch};
use crate::error::BoxError;
use crate::lifecycle::RequestBody;

/// How long a connection stays idle between requests before hyper and its
/// buffers are released (see `serve_connection_task`).
const RELEASE_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// One connection of [`accept_loop`], as a task. Its future is allocated
/// once per connection and stays within glibc's thread cache (1,032 bytes;
/// a unit test checks it), so that allocation takes the fast path.
// A function returning a block, not an `async fn`: an `async fn` keeps its
// arguments twice in its future (as arguments and as moved-in locals).
#[allow(clippy::manual_async_fn)]
pub(super) fn serve_connection_task<S>(
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
        let mut hyper_svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let close = SockPlan::closes(&req);
            SockPlan::request(&noted, &req);
            noted.progress().request();
            noted
                .progress()
                .body_open(!http_body::Body::is_end_stream(req.body()));
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
        let mut io = Socket::new(stream, state.clone(), early);
        // No timer per connection (arming one costs a wake-up of the
        // event loop on every new connection): the listener's watch wakes
        // the connections once a key one of them carried has expired.
        // Waiting is enabled before any request can note an expiry.
        let expiry = watch.notified();
        tokio::pin!(expiry);
        expiry.as_mut().enable();
        let (mut cut_seen, mut dropping) = (false, false);
        let cut = std::future::poll_fn(|cx| state.progress().poll_cut(cx));
        tokio::pin!(cut);
        let result = 'connection: loop {
            // Before the first request and between requests, nothing but
            // the socket is held: hyper and its buffers start with the
            // first byte of a request head (or at once, with the bytes
            // of one already read). The listener's deadlines count from
            // the connection's start or the last answer, as before.
            while !io.has_replay() {
                tokio::select! {
                    biased;
                    // Cut: between requests (keep-alive timeout, shed) a
                    // plain close; a silent first head, a reset.
                    _ = cut.as_mut() => {
                        io.close().await;
                        break 'connection Ok(());
                    }
                    _ = expiry.as_mut() => {
                        if watch.draining() || state.expired(crate::clock::unix_now()) {
                            tracing::debug!(%peer, "closing an idle connection: keys expired or draining");
                            io.close().await;
                            break 'connection Ok(());
                        }
                        expiry.set(watch.notified());
                        expiry.as_mut().enable();
                        state.renote();
                    }
                    _ = io.readable() => break,
                }
            }
            // Draining: a connection that sent nothing yet, or nothing
            // since its last answer, is closed without reading (hyper
            // closes one in that state the same way).
            if watch.draining() {
                io.close().await;
                break Ok(());
            }
            // The builder is dropped here, not kept in the task's future;
            // hyper's connection is boxed, so that the task's future stays
            // small while it waits between requests. The head's deadline is
            // the listener's (`Slots`), not hyper's timer, so hyper needs
            // none.
            let mut conn = Box::new(
                hyper::server::conn::http1::Builder::new()
                    .header_read_timeout(None)
                    .keep_alive(true)
                    .half_close(!opts.abandon_on_hangup)
                    .max_header_size(opts.max_head)
                    .max_buf_size(opts.max_head.max(8192))
                    .serve_connection(TokioIo::new(io), hyper_svc),
            );
            let since = state.progress().requests();
            let mut closing = false;
            // hyper is released only once the connection has stayed idle
            // for RELEASE_AFTER: restarting it costs more CPU than a busy
            // keep-alive connection would save in memory, while a client
            // that goes quiet gives its buffers back within that time. The
            // timer is armed when the connection turns idle and checked
            // when it fires (a request in between arms it again), so a busy
            // connection arms it at most once per period, not per request.
            let grace = tokio::time::sleep(RELEASE_AFTER);
            tokio::pin!(grace);
            let mut armed: Option<u32> = None;
            let idle = std::future::poll_fn(|_| {
                if state.progress().idle_since(since) {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            });
            tokio::pin!(idle);
            let ended = loop {
                tokio::select! {
                    biased;
                    r = &mut *conn => break Some(r),
                    _ = cut.as_mut(), if !cut_seen => {
                        cut_seen = true;
                        if state.progress().resets() {
                            // hyper meets the cut at its next read or write
                            // (polled next, first), where the socket resets
                            // the connection.
                            dropping = true;
                        } else {
                            // Idle between requests: closed as keep-alive
                            // ends.
                            std::pin::Pin::new(&mut *conn).graceful_shutdown();
                            closing = true;
                        }
                    }
                    // Cut, and hyper is not reading or writing: the
                    // connection is dropped as is.
                    _ = std::future::ready(()), if dropping => break Some(Ok(())),
                    _ = expiry.as_mut(), if !closing => {
                        if watch.draining() || state.expired(crate::clock::unix_now()) {
                            tracing::debug!(%peer, "closing a connection whose keys expired");
                            std::pin::Pin::new(&mut *conn).graceful_shutdown();
                            closing = true;
                        } else {
                            expiry.set(watch.notified());
                            expiry.as_mut().enable();
                            state.renote();
                        }
                    }
                    // Polled only after hyper, which has just had its
                    // turn: it answered, wrote everything and waits for
                    // the next head.
                    _ = idle.as_mut(), if armed.is_none() && !closing && !cut_seen => {
                        grace.as_mut().reset(tokio::time::Instant::now() + RELEASE_AFTER);
                        armed = Some(state.progress().requests());
                    }
                    _ = grace.as_mut(), if armed.is_some() => {
                        let quiet = armed.take() == Some(state.progress().requests());
                        if quiet && state.progress().idle_since(since) && !closing && !cut_seen {
                            break None;
                        }
                    }
                }
            };
            if let Some(r) = ended {
                // hyper closed its side, and the peer may still be sending
                // a body it did not read: read on before the close
                // (`Socket::linger`). Boxed: the task's future stays small.
                let io = conn.into_parts().io.into_inner();
                if r.is_ok() && io.may_hold_unread() {
                    Box::pin(io.linger()).await;
                }
                break r;
            }
            // hyper is idle: a graceful shutdown closes it at once, without
            // writing or reading a byte, and the socket (kept open) comes
            // back with any bytes of the next head hyper read but did not
            // parse yet.
            SockPlan::keep_open(&state, true);
            std::pin::Pin::new(&mut *conn).graceful_shutdown();
            match futures_util::FutureExt::now_or_never(&mut *conn) {
                Some(Ok(())) => {}
                Some(Err(e)) => break Err(e),
                None => {
                    // Not idle after all (nothing known leads here): hyper
                    // ends the exchange it is in and closes, as on a drain.
                    SockPlan::keep_open(&state, false);
                    tracing::debug!(%peer, "hyper was not idle when released");
                    break (&mut *conn).await;
                }
            }
            let parts = conn.into_parts();
            SockPlan::keep_open(&state, false);
            io = parts.io.into_inner();
            io.replay(parts.read_buf);
            hyper_svc = parts.service;
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
        state.progress().closed();
        drop(permit);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listen::GLIBC_TCACHE_MAX;
    use crate::services::{StaticFiles, Upstream};

    /// The future of a connection's task, allocated once per connection
    /// (`serve_connection_task`), fits glibc's thread cache, for the static
    /// files and for the gateway. Above it the allocation takes glibc's
    /// slow path (keeping hyper's connection builder in the future is what
    /// pushed it over once).
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
}
