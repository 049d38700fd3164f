//! Static files under a root directory: tower-http's `ServeDir`, with an
//! inline fast path for plain GET/HEAD of a regular file.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response};
use http_body_util::BodyExt;

use crate::body::HcBody;
use crate::error::BoxError;

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
        let (content_type, file) = FieldMemo::values(mime, meta.modified().ok(), len);
        fields.insert(header::CONTENT_TYPE, content_type);
        fields.insert(header::ACCEPT_RANGES, ACCEPT_BYTES.clone());
        if let Some(v) = file.last_modified {
            fields.insert(header::LAST_MODIFIED, v);
        }
        fields.insert(header::CONTENT_LENGTH, file.content_length);
        Some(rsp)
    }
}

/// `Accept-Ranges: bytes`, checked once at compile time.
static ACCEPT_BYTES: http::HeaderValue = http::HeaderValue::from_static("bytes");

/// The last field values a worker thread built for an inline answer: its
/// `Content-Type`, and the `Last-Modified` and `Content-Length` of a file's
/// modification time and length. The next answer of the same type, or for
/// a file of the same time and length, takes clones (a reference count)
/// instead of checking the type's bytes, formatting the date and the length
/// and allocating for them again: a few hundred instructions and two
/// allocations per answer, where files are fetched repeatedly.
#[derive(Default)]
struct FieldMemo {
    content_type: Option<(&'static str, http::HeaderValue)>,
    file: Option<FileMemo>,
}

/// A file's `Last-Modified` and `Content-Length`, and the modification time
/// and length they were built for.
#[derive(Clone)]
struct FileMemo {
    of: (Option<std::time::SystemTime>, u64),
    last_modified: Option<http::HeaderValue>,
    content_length: http::HeaderValue,
}

thread_local! {
    static FIELD_MEMO: std::cell::RefCell<FieldMemo> = std::cell::RefCell::default();
}

impl FieldMemo {
    /// The `Content-Type` for a file of type `mime` (one of `mime_guess`'s
    /// static names), and the fields of a file modified at `modified`, of
    /// `len` bytes: from this thread's memo when it holds them.
    fn values(
        mime: &'static str,
        modified: Option<std::time::SystemTime>,
        len: u64,
    ) -> (http::HeaderValue, FileMemo) {
        FIELD_MEMO.with_borrow_mut(|memo| {
            let content_type = match &memo.content_type {
                // The same static name: compared by address and length.
                Some((m, v)) if std::ptr::eq(*m, mime) => v.clone(),
                _ => {
                    let v = http::HeaderValue::from_static(mime);
                    memo.content_type = Some((mime, v.clone()));
                    v
                }
            };
            let file = match &memo.file {
                Some(f) if f.of == (modified, len) => f.clone(),
                _ => memo
                    .file
                    .insert(FileMemo {
                        of: (modified, len),
                        last_modified: modified.and_then(last_modified),
                        content_length: http::HeaderValue::from(len),
                    })
                    .clone(),
            };
            (content_type, file)
        })
    }
}

/// A `Last-Modified` value: the IMF-fixdate of `t` (29 bytes, formatted on
/// the stack).
fn last_modified(t: std::time::SystemTime) -> Option<http::HeaderValue> {
    use std::io::Write as _;
    let mut date = [0u8; 29];
    write!(&mut date[..], "{}", httpdate::HttpDate::from(t)).ok()?;
    http::HeaderValue::from_bytes(&date).ok()
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
        let n = self.left.min(FILE_CHUNK);
        // Read into the vector's spare capacity: std's `File` reads into
        // memory it has not initialised, so a piece costs no zeroing (64 KiB
        // of `memset` per piece with a zeroed buffer). `take` stops at the
        // piece, so the full vector becomes `Bytes` without a copy.
        let mut buf = Vec::with_capacity(n as usize);
        let r = match (&self.file).take(n).read_to_end(&mut buf) {
            Ok(0) => Err(BoxError::from("file shrank while being served")),
            Ok(got) => {
                self.left -= got as u64;
                Ok(http_body::Frame::data(Bytes::from(buf)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::collect;

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

    /// The worker's memo of `Content-Type`, `Last-Modified` and
    /// `Content-Length` never hands out a stale value: across files of other
    /// types, times and lengths, and after a file's modification time
    /// changes, every inline answer's fields are those `ServeDir` computes
    /// afresh.
    #[tokio::test]
    async fn memoised_fields_follow_type_and_modification() {
        let dir = tempfile::tempdir().expect("temp dir");
        let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        // d.txt: a.txt's type and time, another length.
        for (name, secs, body) in [
            ("a.txt", 1_700_000_000, &b"{}"[..]),
            ("b.json", 1_700_000_001, b"{}"),
            ("c", 1_600_000_000, b"{}"),
            ("d.txt", 1_700_000_000, b"{ }\n"),
        ] {
            std::fs::write(dir.path().join(name), body).expect("write");
            let f = std::fs::File::options()
                .write(true)
                .open(dir.path().join(name))
                .expect("open");
            f.set_modified(at(secs)).expect("set mtime");
        }
        let files = static_files(dir.path());
        let mut dir_svc = files.dir.as_ref().clone();
        let mut check = async |path: &str| {
            let ours = files.inline(&get(path, None)).expect("inline");
            let theirs = tower::Service::call(&mut dir_svc, get(path, None))
                .await
                .expect("ServeDir");
            assert_eq!(ours.headers(), theirs.headers(), "{path}");
            ours.headers()[header::LAST_MODIFIED].clone()
        };
        let first = check("/a.txt").await;
        for path in [
            "/b.json", "/a.txt", "/d.txt", "/a.txt", "/c", "/c", "/a.txt",
        ] {
            check(path).await;
        }
        std::fs::File::options()
            .write(true)
            .open(dir.path().join("a.txt"))
            .expect("open")
            .set_modified(at(1_800_000_000))
            .expect("set mtime");
        let later = check("/a.txt").await;
        assert_ne!(first, later);
        assert_eq!(later, "Fri, 15 Jan 2027 08:00:00 GMT");
    }
}
