//! The listeners behind `httpcrypt serve` and `httpcrypt gateway`: an
//! HTTP/1.1 accept loop with keep-alive, a header timeout, a bound on
//! concurrent connections and outer size limits (spec §11), plus the two
//! services it usually runs: static files and a reverse proxy.

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

use crate::error::BoxError;
use crate::server::{ConnState, HcBody};

/// Connection-level settings.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// Most connections served at once; further ones wait in the backlog.
    pub max_connections: usize,
    /// Longest wait for a complete request head.
    pub header_timeout: Duration,
    /// Hard limit on an outer head (request line and fields), bytes: above
    /// it hyper answers 431 without calling the service. The finer limits of
    /// spec §11.6 (414, 431) are the layer's, so this sits above their sum.
    pub max_head: usize,
    /// ASAP: checks connections whose first data came with the SYN before
    /// anything reads it (spec/asap.md §4).
    pub gate: Option<Arc<crate::asap::Gate>>,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            max_head: 16 * 1024 + 64 * 1024 + 1024,
            gate: None,
        }
    }
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
    S: tower::Service<
            Request<Incoming>,
            Response = Response<HcBody>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut accepting = AbortOnDrop(tokio::spawn(accept_loop(listener, svc, opts, stopped)));
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
) -> std::io::Result<()>
where
    S: tower::Service<
            Request<Incoming>,
            Response = Response<HcBody>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            p = permits.clone().acquire_owned() => p.map_err(std::io::Error::other)?,
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let svc = svc.clone();
        let opts = opts.clone();
        tokio::spawn(async move {
            if let Some(gate) = &opts.gate {
                if !gate.admit(&stream, peer).await {
                    drop(permit);
                    return;
                }
            }
            // The layer notes here the key expiry of every request on this
            // connection; once all of them have expired the connection is
            // closed (after any request in flight), so no idle keep-alive
            // connection outlives the keys it was used with (spec §6). It
            // also remembers the connection's last ticket, issued and
            // opened (spec §7.2, D29).
            let state = ConnState::default();
            let noted = state.clone();
            let hyper_svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(noted.clone());
                req.extensions_mut().insert(crate::defence::PeerAddr(peer));
                svc.clone().oneshot(req)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(opts.header_timeout)
                .keep_alive(true)
                .max_header_size(opts.max_head)
                .max_buf_size(opts.max_head.max(8192));
            let conn = builder.serve_connection(TokioIo::new(stream), hyper_svc);
            tokio::pin!(conn);
            // One timer per connection, re-armed when it fires (a new
            // `sleep` on every poll of the connection would churn the timer
            // wheel on each wake-up).
            let check = tokio::time::sleep(Duration::from_secs(1));
            tokio::pin!(check);
            let mut closing = false;
            let result = loop {
                tokio::select! {
                    r = conn.as_mut() => break r,
                    _ = check.as_mut(), if !closing => {
                        if state.expired(crate::keystore::unix_now()) {
                            tracing::debug!(%peer, "closing a connection whose keys expired");
                            conn.as_mut().graceful_shutdown();
                            closing = true;
                        } else {
                            check.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(1));
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
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
        dir: tower_http::services::ServeDir::new(root).append_index_html_on_directories(true),
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
    dir: tower_http::services::ServeDir,
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
        let mut file_path = self.root.as_ref().clone();
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
        if let Some(v) = meta
            .modified()
            .ok()
            .and_then(|t| http::HeaderValue::from_str(&httpdate::fmt_http_date(t)).ok())
        {
            fields.insert(header::LAST_MODIFIED, v);
        }
        fields.insert(header::CONTENT_LENGTH, http::HeaderValue::from(len));
        Some(rsp)
    }
}

impl tower::Service<Request<HcBody>> for StaticFiles {
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

    fn call(&mut self, req: Request<HcBody>) -> Self::Future {
        if let Some(rsp) = self.inline(&req) {
            return Box::pin(std::future::ready(Ok(rsp)));
        }
        let fut = tower::Service::call(&mut self.dir, req);
        Box::pin(async move {
            let rsp = fut.await.map_err(|e| -> BoxError { Box::new(e) })?;
            Ok(rsp.map(|b| b.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync()))
        })
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
#[derive(Clone, Debug)]
pub struct Upstream {
    client: HyperClient<HttpConnector, HcBody>,
    base: Uri,
}

impl Upstream {
    /// A proxy to `base`.
    pub fn new(base: Uri) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        Upstream {
            client: HyperClient::builder(TokioExecutor::new()).build(http),
            base,
        }
    }
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
        let client = self.client.clone();
        let base = self.base.clone();
        Box::pin(async move {
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
            let rsp = client.request(req).await?;
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

/// Bytes of a body, for small responses in tests and tools.
pub async fn collect(body: HcBody) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut dir_svc = files.dir.clone();
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
        let listener = bind("127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        let svc = tower::service_fn(|_req: Request<Incoming>| async {
            Ok::<_, std::convert::Infallible>(Response::new(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            ))
        });
        let server = tokio::spawn(run(
            listener,
            svc,
            ListenOptions::default(),
            std::future::pending(),
        ));
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
}
