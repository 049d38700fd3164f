//! The origin's side of split serving (spec/split-serving.md): which
//! responses are public, the split-stream body sent to a proxy that asked
//! for one, the bounded store of emitted payloads, and the content
//! endpoint that serves them. Wire logic is `httpcrypt_proto::split`.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use httpcrypt_proto::split::{self, ContentId, PublicPaths, SplitSealer};
use httpcrypt_proto::stream::{Sealer, RECORD_OVERHEAD};
use pin_project_lite::pin_project;

use crate::body::{full, plain, HcBody};
use crate::error::BoxError;

/// Split-serving settings of an origin.
#[derive(Debug, Clone)]
pub struct SplitConfig {
    /// Inner request paths whose GET 200 responses are public (§S1).
    pub public: PublicPaths,
    /// Payload size of public records (§S2).
    pub public_record: usize,
    /// Bytes of emitted payloads kept for the content endpoint (§S5).
    pub store_bytes: usize,
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig {
            public: PublicPaths::default(),
            public_record: split::DEFAULT_PUBLIC_RECORD,
            store_bytes: 256 << 20,
        }
    }
}

/// Payloads the origin emitted as stubs, bounded by bytes, least recently
/// used evicted first (§S5).
#[derive(Debug)]
pub struct ContentStore {
    max_bytes: usize,
    inner: Mutex<StoreInner>,
}

#[derive(Debug, Default)]
struct StoreInner {
    map: HashMap<ContentId, (Bytes, u64)>,
    order: BTreeMap<u64, ContentId>,
    tick: u64,
    bytes: usize,
}

impl ContentStore {
    /// An empty store holding at most `max_bytes` of payloads.
    pub fn new(max_bytes: usize) -> Self {
        ContentStore {
            max_bytes,
            inner: Mutex::new(StoreInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or refreshes) a payload under its ID.
    pub fn insert(&self, id: ContentId, payload: Bytes) {
        if payload.len() > self.max_bytes {
            return;
        }
        let mut s = self.lock();
        s.tick += 1;
        let tick = s.tick;
        if let Some((_, old)) = s.map.get(&id).map(|(b, t)| (b.len(), *t)) {
            s.order.remove(&old);
            s.order.insert(tick, id);
            if let Some(e) = s.map.get_mut(&id) {
                e.1 = tick;
            }
            return;
        }
        s.bytes += payload.len();
        s.map.insert(id, (payload, tick));
        s.order.insert(tick, id);
        while s.bytes > self.max_bytes {
            let Some((_, victim)) = s.order.pop_first() else {
                break;
            };
            if let Some((b, _)) = s.map.remove(&victim) {
                s.bytes -= b.len();
            }
        }
    }

    /// The payload for `id`, refreshing its place in the LRU order.
    pub fn get(&self, id: &ContentId) -> Option<Bytes> {
        let mut s = self.lock();
        s.tick += 1;
        let tick = s.tick;
        let (payload, old) = s.map.get(id).map(|(b, t)| (b.clone(), *t))?;
        s.order.remove(&old);
        s.order.insert(tick, *id);
        if let Some(e) = s.map.get_mut(id) {
            e.1 = tick;
        }
        Some(payload)
    }

    /// (entries, bytes) held.
    pub fn usage(&self) -> (usize, usize) {
        let s = self.lock();
        (s.map.len(), s.bytes)
    }
}

/// Whether the service's answer (`status`, `fields`) to a `method` request
/// for `target` is public (§S1); `credentials`: the request the service saw
/// carried `Cookie` or `Authorization` ([`carries_credentials`]). The rule
/// is `httpcrypt_proto::split::public`: GET, 200, a normalised path matching
/// a glob or `HC-Public: 1`, unless `HC-Public: 0`; never a path that may
/// resolve elsewhere, never a personal answer.
pub fn is_public(
    method: &str,
    target: &str,
    credentials: bool,
    status: StatusCode,
    fields: &HeaderMap,
    globs: &PublicPaths,
) -> bool {
    split::public::Exchange {
        method,
        target,
        credentials,
        status: status.as_u16(),
        opt: fields.get(split::PUBLIC_FIELD).map(HeaderValue::as_bytes),
        sets_cookie: fields.contains_key(header::SET_COOKIE),
        private: split::public::forbids_sharing(
            fields
                .get_all(header::CACHE_CONTROL)
                .iter()
                .map(HeaderValue::as_bytes),
        ),
    }
    .is_public(globs)
}

/// Whether a request carries `Cookie` or `Authorization` (its answer is
/// then never public, §S1).
pub fn carries_credentials(fields: &HeaderMap) -> bool {
    fields.contains_key(header::COOKIE) || fields.contains_key(header::AUTHORIZATION)
}

/// Bytes of stubs gathered into one frame at most (77 stubs: 1.2 MiB of
/// body in 16 KiB records).
const COALESCE: usize = 4096;

pin_project! {
    /// A public response as a split stream (§S2, §S4): the head in
    /// encrypted verbatim records, the body in CLEAR records of exactly
    /// `public_record` bytes (the last may be shorter) sent as stubs, and
    /// an empty FINAL record. Every payload goes into the store.
    pub struct SplitSealBody<B> {
        #[pin]
        inner: B,
        sealer: Option<SplitSealer>,
        start: Option<Vec<u8>>,
        pending: BytesMut,
        size: usize,
        store: Arc<ContentStore>,
        total: Option<u64>,
    }
}

impl<B: Body> SplitSealBody<B> {
    /// `prefix` is the response nonce that [`Sealer::response`] wrote.
    pub fn new(
        sealer: Sealer,
        prefix: Vec<u8>,
        head: &[u8],
        inner: B,
        public_record: usize,
        store: Arc<ContentStore>,
    ) -> Result<Self, httpcrypt_proto::Error> {
        let size = public_record.clamp(1, httpcrypt_proto::limits::RECORD_CEILING);
        let mut s = SplitSealer::new(sealer);
        let mut start = prefix;
        s.seal_head(head, size, &mut start)?;
        let total = inner.size_hint().exact().map(|body| {
            start.len() as u64
                + body.div_ceil(size as u64) * split::STUB_LEN as u64
                + 1
                + RECORD_OVERHEAD as u64
        });
        Ok(SplitSealBody {
            inner,
            sealer: Some(s),
            start: Some(start),
            pending: BytesMut::new(),
            size,
            store,
            total,
        })
    }
}

impl<B> Body for SplitSealBody<B>
where
    B: Body,
    B::Data: bytes::Buf,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        // What is ready goes out as one frame: the head's records with the
        // stubs of the body's chunks that are ready at once (and the FINAL
        // record), up to COALESCE bytes of stubs. An HTTP/2 leg sends each
        // frame as a DATA frame of its own, often in a segment of its own
        // (§S11); the bound keeps a large body's first stubs from waiting
        // for the whole body to be sealed.
        let mut out = this.start.take().unwrap_or_default();
        let start = out.len();
        loop {
            if this.sealer.is_none() {
                return Poll::Ready((!out.is_empty()).then(|| Ok(Frame::data(Bytes::from(out)))));
            }
            let ended = match crate::body::poll_pending(this.inner.as_mut(), cx, &mut *this.pending)
            {
                Poll::Pending if !out.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
                }
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(ended)) => ended,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
            };
            let size = *this.size;
            let sealer = this.sealer.as_mut().expect("checked above");
            while this.pending.len() >= size || (ended && !this.pending.is_empty()) {
                let n = size.min(this.pending.len());
                let payload = this.pending.split_to(n).freeze();
                let id = sealer.seal_public(&payload, &mut out)?;
                this.store.insert(id, payload);
            }
            if ended {
                this.sealer
                    .take()
                    .expect("checked above")
                    .finish(&mut out)?;
            }
            if ended || out.len() >= start + COALESCE {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.sealer.is_none() && self.start.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.total {
            Some(t) if self.start.is_some() => SizeHint::with_exact(t),
            _ => SizeHint::default(),
        }
    }
}

/// Answers the content endpoint (§S5); `rest` is the path after
/// `{mount}/.content/`.
pub async fn content_response<B>(
    store: &ContentStore,
    method: &Method,
    rest: &str,
    body: B,
) -> Response<HcBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    match (method, rest) {
        (&Method::GET | &Method::HEAD, id) if !id.is_empty() => {
            let Ok(id) = ContentId::from_b64(id.as_bytes()) else {
                return plain(StatusCode::BAD_REQUEST, "bad content id\n");
            };
            let Some(payload) = store.get(&id) else {
                return plain(StatusCode::NOT_FOUND, "unknown content id\n");
            };
            let len = payload.len();
            let mut r = Response::new(if method == Method::HEAD {
                full(Bytes::new())
            } else {
                full(payload)
            });
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            );
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            r
        }
        (&Method::POST, "") => {
            let limit = split::MAX_BATCH * split::ID_LEN;
            let collected = http_body_util::Limited::new(body, limit).collect().await;
            let Ok(bytes) = collected.map(|c| c.to_bytes()) else {
                return plain(StatusCode::BAD_REQUEST, "bad batch\n");
            };
            let Ok(ids) = split::decode_batch_request(&bytes) else {
                return plain(StatusCode::BAD_REQUEST, "bad batch\n");
            };
            let mut frames: Vec<Result<Frame<Bytes>, BoxError>> = Vec::with_capacity(2 * ids.len());
            let mut len = 0u64;
            for id in &ids {
                let payload = store.get(id);
                let word = payload.as_ref().map_or(split::MISSING, |p| p.len() as u32);
                frames.push(Ok(Frame::data(Bytes::copy_from_slice(&word.to_be_bytes()))));
                len += 4;
                if let Some(p) = payload {
                    len += p.len() as u64;
                    frames.push(Ok(Frame::data(p)));
                }
            }
            let stream = futures_util::stream::iter(frames);
            let mut r = Response::new(http_body_util::StreamBody::new(stream).boxed_unsync());
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(split::BATCH_TYPE),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            r
        }
        _ => {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn store_evicts_least_recently_used() {
        let s = ContentStore::new(10);
        let (a, b, c) = (
            ContentId::of(b"a"),
            ContentId::of(b"b"),
            ContentId::of(b"c"),
        );
        s.insert(a, Bytes::from_static(b"aaaa"));
        s.insert(b, Bytes::from_static(b"bbbb"));
        assert!(s.get(&a).is_some()); // a is now the most recent
        s.insert(c, Bytes::from_static(b"cccc"));
        assert!(s.get(&b).is_none(), "b was least recently used");
        assert!(s.get(&a).is_some() && s.get(&c).is_some());
        assert_eq!(s.usage(), (2, 8));
        s.insert(ContentId::of(b"big"), Bytes::from(vec![0u8; 11]));
        assert_eq!(s.usage(), (2, 8), "a payload above the bound is not kept");
    }

    /// The IO side reads the facts of §S1 from the header maps: the
    /// opt-in and opt-out, `Set-Cookie`, `Cache-Control`, credentials, and
    /// the normalised path (split-serving §S1).
    #[test]
    fn public_rules() {
        let g = PublicPaths::new(["/static/**".to_string()]).unwrap();
        let none = HeaderMap::new();
        let with = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            h
        };
        let ok = StatusCode::OK;
        assert!(is_public("GET", "/static/a", false, ok, &none, &g));
        assert!(!is_public(
            "GET",
            "/static/a",
            false,
            ok,
            &with("hc-public", "0"),
            &g
        ));
        assert!(is_public(
            "GET",
            "/api/x",
            false,
            ok,
            &with("hc-public", "1"),
            &g
        ));
        assert!(!is_public("POST", "/static/a", false, ok, &none, &g));
        assert!(!is_public(
            "GET",
            "/static/a",
            false,
            StatusCode::NOT_FOUND,
            &none,
            &g
        ));
        assert!(!is_public("GET", "/private", false, ok, &none, &g));
        assert!(!is_public(
            "GET",
            "/static/%2e%2e/private",
            false,
            ok,
            &none,
            &g
        ));
        assert!(!is_public("GET", "/static/a", true, ok, &none, &g));
        assert!(!is_public(
            "GET",
            "/static/a",
            false,
            ok,
            &with("set-cookie", "s=1"),
            &g
        ));
        for cc in ["private", "no-store", "max-age=9, Private"] {
            assert!(!is_public(
                "GET",
                "/static/a",
                false,
                ok,
                &with("cache-control", cc),
                &g
            ));
        }
        assert!(is_public(
            "GET",
            "/static/a",
            false,
            ok,
            &with("cache-control", "public"),
            &g
        ));
        assert!(carries_credentials(&with("cookie", "s=1")));
        assert!(carries_credentials(&with("authorization", "Basic eDp5")));
        assert!(!carries_credentials(&with("accept", "*/*")));
    }
}
