//! `httpcrypt split-proxy`: an untrusted caching proxy for split serving
//! (spec/split-serving.md). It relays every request to the origin
//! untouched but for the `Httpcrypt-Split` field, relays every ordinary
//! answer untouched, and turns split answers back into ordinary response
//! streams: verbatim records as they are, stubs with payloads from its
//! on-disk cache, fetching the ones it lacks from the origin in batches
//! and checking their BLAKE3 before use. It never holds more than one
//! record per response (plus a few queued frames) in memory.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::Frame;
use http_body_util::BodyExt;
use httpcrypt_proto::split::{
    self, BatchDecoder, BatchEvent, ContentId, SplitDecoder, SplitEvent, Stub,
};
use httpcrypt_proto::Error as ProtoError;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;

use crate::body::{full, plain, HcBody};
use crate::error::BoxError;

/// Proxy settings.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The origin, `http://host:port`.
    pub origin: Uri,
    /// Largest record accepted from the origin (clamped as a receiver's).
    pub max_record: usize,
}

/// Counters of a proxy's cache, for logs, tests and benchmarks.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Stubs served from the cache.
    pub hits: AtomicU64,
    /// Stubs whose payload was fetched from the origin.
    pub misses: AtomicU64,
    /// Payload bytes fetched from the origin.
    pub fetched_bytes: AtomicU64,
    /// Entries evicted.
    pub evicted: AtomicU64,
}

/// Filesystem block every entry is counted at least as (and rounded up to).
pub const BLOCK: u64 = 4096;
/// Bytes counted per entry on top of its blocks: its inode, directory entry
/// and index entry.
pub const ENTRY_OVERHEAD: u64 = 512;
/// Default most entries in the cache.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;
/// Default smallest payload cached: below it a record costs the origin
/// little to send again, and the proxy a whole block and a file to keep.
pub const DEFAULT_MIN_PAYLOAD: usize = 512;

/// The bounds of a [`DiskCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most bytes of disk, each entry counted as [`DiskCache::charge`]
    /// says and each of the 256 subdirectories as one block.
    pub max_bytes: u64,
    /// Most entries.
    pub max_entries: usize,
    /// Payloads shorter than this are not cached (they are fetched again).
    pub min_payload: usize,
}

impl CacheLimits {
    /// `max_bytes` with the default entry cap and threshold.
    pub fn bytes(max_bytes: u64) -> Self {
        CacheLimits {
            max_bytes,
            max_entries: DEFAULT_MAX_ENTRIES,
            min_payload: DEFAULT_MIN_PAYLOAD,
        }
    }
}

/// A bounded, content-addressed cache on disk: one file per content ID
/// (`{dir}/{hex[0..2]}/{hex}`), least recently used evicted first (§S6).
/// The bound counts what the disk really spends: every entry at least one
/// block plus [`ENTRY_OVERHEAD`], every subdirectory one block, and a cap
/// on the number of entries; tiny payloads are not cached at all.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    limits: CacheLimits,
    index: Mutex<Index>,
    /// Counters.
    pub stats: CacheStats,
}

#[derive(Debug)]
struct Index {
    /// Payload length and LRU tick per entry.
    entries: HashMap<ContentId, (u64, u64)>,
    order: BTreeMap<u64, ContentId>,
    tick: u64,
    /// Bytes charged: entries and subdirectories.
    bytes: u64,
    /// Entries per subdirectory (the ID's first byte).
    dirs: [u32; 256],
}

impl Default for Index {
    fn default() -> Self {
        Index {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            dirs: [0; 256],
        }
    }
}

impl Index {
    fn touch(&mut self, id: &ContentId) -> bool {
        self.tick += 1;
        let tick = self.tick;
        let Some(e) = self.entries.get_mut(id) else {
            return false;
        };
        let old = e.1;
        e.1 = tick;
        self.order.remove(&old);
        self.order.insert(tick, *id);
        true
    }

    fn insert(&mut self, id: ContentId, len: u64) {
        if self.entries.contains_key(&id) {
            return;
        }
        self.tick += 1;
        let t = self.tick;
        self.entries.insert(id, (len, t));
        self.order.insert(t, id);
        self.bytes += DiskCache::charge(len);
        let d = &mut self.dirs[usize::from(id.0[0])];
        if *d == 0 {
            self.bytes += BLOCK;
        }
        *d += 1;
    }

    /// Removes an entry; `Some(true)` when its subdirectory is now empty.
    fn remove(&mut self, id: &ContentId) -> Option<bool> {
        let (size, tick) = self.entries.remove(id)?;
        self.order.remove(&tick);
        self.bytes -= DiskCache::charge(size);
        let d = &mut self.dirs[usize::from(id.0[0])];
        *d -= 1;
        if *d == 0 {
            self.bytes -= BLOCK;
        }
        Some(*d == 0)
    }
}

impl DiskCache {
    /// Opens (creating) `dir`, indexing the entries already there, oldest
    /// first, and evicting down to `max_bytes` (default entry cap and
    /// threshold, [`CacheLimits::bytes`]).
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<Self> {
        Self::open_with(dir, CacheLimits::bytes(max_bytes))
    }

    /// Bytes an entry of `len` payload bytes is counted as: whole blocks,
    /// at least one, plus [`ENTRY_OVERHEAD`].
    pub fn charge(len: u64) -> u64 {
        len.div_ceil(BLOCK).max(1) * BLOCK + ENTRY_OVERHEAD
    }

    /// As [`DiskCache::open`], with all of `limits`.
    pub fn open_with(dir: &Path, limits: CacheLimits) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for sub in std::fs::read_dir(dir)? {
            let sub = sub?;
            if !sub.file_type()?.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(sub.path())? {
                let f = f?;
                let name = f.file_name().to_string_lossy().to_string();
                let meta = f.metadata()?;
                match ContentId::from_hex(&name) {
                    Some(id) if meta.is_file() => {
                        let when = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                        found.push((when, id, meta.len()));
                    }
                    // Leftover temporary files of an interrupted write.
                    _ if name.ends_with(".tmp") => {
                        let _ = std::fs::remove_file(f.path());
                    }
                    _ => {}
                }
            }
        }
        found.sort();
        let cache = DiskCache {
            dir: dir.to_path_buf(),
            limits,
            index: Mutex::new(Index::default()),
            stats: CacheStats::default(),
        };
        {
            let mut ix = cache.lock();
            for (_, id, len) in found {
                ix.insert(id, len);
            }
        }
        cache.evict();
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, id: &ContentId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Whether `id` is cached (refreshing its LRU place).
    pub fn contains(&self, id: &ContentId) -> bool {
        self.lock().touch(id)
    }

    /// (entries, bytes charged) in the cache.
    pub fn usage(&self) -> (usize, u64) {
        let ix = self.lock();
        (ix.entries.len(), ix.bytes)
    }

    /// The cached payload, if present and readable.
    pub fn read(&self, id: &ContentId) -> Option<Vec<u8>> {
        if !self.contains(id) {
            return None;
        }
        match std::fs::read(self.path(id)) {
            Ok(b) => Some(b),
            Err(_) => {
                self.forget(id);
                None
            }
        }
    }

    /// Drops an entry (unreadable, or not matching its ID).
    pub fn forget(&self, id: &ContentId) {
        if let Some(empty) = self.lock().remove(id) {
            self.unlink(id, empty);
        }
    }

    /// Removes an entry's file, and its subdirectory once empty.
    fn unlink(&self, id: &ContentId, dir_empty: bool) {
        let path = self.path(id);
        let _ = std::fs::remove_file(&path);
        if dir_empty {
            if let Some(parent) = path.parent() {
                // Fails harmlessly if a concurrent put already refilled it.
                let _ = std::fs::remove_dir(parent);
            }
        }
    }

    /// Stores a payload that was already checked against its ID.
    pub fn put(&self, id: &ContentId, payload: &[u8]) -> std::io::Result<()> {
        let len = payload.len() as u64;
        let l = &self.limits;
        if payload.len() < l.min_payload
            || l.max_entries == 0
            || Self::charge(len) + BLOCK > l.max_bytes
            || self.lock().touch(id)
        {
            return Ok(());
        }
        let path = self.path(id);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Write aside and rename: an entry is whole or absent.
        let tmp = path.with_extension(format!("{}.tmp", rand_suffix()));
        std::fs::write(&tmp, payload)?;
        std::fs::rename(&tmp, &path)?;
        self.lock().insert(*id, len);
        self.evict();
        Ok(())
    }

    fn evict(&self) {
        loop {
            let victim = {
                let mut ix = self.lock();
                if ix.bytes <= self.limits.max_bytes && ix.entries.len() <= self.limits.max_entries
                {
                    return;
                }
                let Some((_, id)) = ix.order.first_key_value().map(|(t, i)| (*t, *i)) else {
                    return;
                };
                let empty = ix.remove(&id).unwrap_or(false);
                (id, empty)
            };
            self.stats.evicted.fetch_add(1, Relaxed);
            self.unlink(&victim.0, victim.1);
        }
    }
}

fn rand_suffix() -> u64 {
    use rand_core::RngCore;
    rand_core::OsRng.next_u64()
}

/// The proxy service.
#[derive(Clone, Debug)]
pub struct SplitProxy {
    client: HyperClient<HttpConnector, HcBody>,
    config: Arc<ProxyConfig>,
    cache: Arc<DiskCache>,
    certs: Arc<Mutex<HashMap<String, CachedCerts>>>,
}

/// An `OPTIONS` answer (the origin's certificate list) kept for its
/// `max-age`: it is public and signed, so an untrusted proxy may serve it
/// like any HTTP cache (spec §6.5); clients in authenticated mode verify it.
#[derive(Debug, Clone)]
struct CachedCerts {
    until: std::time::Instant,
    content_type: HeaderValue,
    body: Bytes,
}

/// Longest time an `OPTIONS` answer is reused, whatever its `max-age`.
const CERTS_TTL_CAP: u64 = 300;
/// Most `OPTIONS` answers kept (one per mount path in practice).
const CERTS_ENTRIES: usize = 16;

impl SplitProxy {
    /// A proxy to `config.origin` with `cache`.
    pub fn new(config: ProxyConfig, cache: Arc<DiskCache>) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        SplitProxy {
            client: HyperClient::builder(TokioExecutor::new()).build(http),
            config: Arc::new(config),
            cache,
            certs: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn cached_certs(&self, key: &str) -> Option<Response<HcBody>> {
        let now = std::time::Instant::now();
        let c = self
            .certs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .filter(|c| c.until > now)
            .cloned()?;
        let mut r = Response::new(full(c.body));
        r.headers_mut().insert(header::CONTENT_TYPE, c.content_type);
        let left = c.until.saturating_duration_since(now).as_secs();
        if let Ok(v) = HeaderValue::from_str(&format!("max-age={left}")) {
            r.headers_mut().insert(header::CACHE_CONTROL, v);
        }
        Some(r)
    }

    /// Relays an `OPTIONS` request, answering from (and filling) the
    /// certificate cache.
    async fn options(
        &self,
        req: Request<HcBody>,
        key: String,
    ) -> Result<Response<HcBody>, BoxError> {
        if let Some(r) = self.cached_certs(&key) {
            return Ok(r);
        }
        let rsp = self.client.request(req).await?;
        let (mut parts, body) = rsp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let max_age = parts
            .headers
            .get(header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.split(',')
                    .find_map(|d| d.trim().strip_prefix("max-age=")?.parse::<u64>().ok())
            })
            .unwrap_or(0)
            .min(CERTS_TTL_CAP);
        let content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
        let body = http_body_util::Limited::new(body, 64 * 1024)
            .collect()
            .await?
            .to_bytes();
        if let (StatusCode::OK, Some(ct), true) = (parts.status, content_type, max_age > 0) {
            let mut certs = self.certs.lock().unwrap_or_else(|p| p.into_inner());
            if certs.len() >= CERTS_ENTRIES {
                certs.clear();
            }
            certs.insert(
                key,
                CachedCerts {
                    until: std::time::Instant::now() + std::time::Duration::from_secs(max_age),
                    content_type: ct,
                    body: body.clone(),
                },
            );
        }
        Ok(Response::from_parts(parts, full(body)))
    }

    /// The cache.
    pub fn cache(&self) -> &Arc<DiskCache> {
        &self.cache
    }

    fn origin_uri(&self, path_and_query: &str) -> Result<Uri, BoxError> {
        let base = &self.config.origin;
        Ok(format!(
            "{}://{}{}{}",
            base.scheme_str().unwrap_or("http"),
            base.authority().map_or("", |a| a.as_str()),
            base.path().trim_end_matches('/'),
            path_and_query
        )
        .parse()?)
    }

    async fn relay(
        self,
        req: Request<crate::runtime::RequestBody>,
    ) -> Result<Response<HcBody>, BoxError> {
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        parts.uri = self.origin_uri(&pq)?;
        strip_hop_by_hop(&mut parts.headers);
        parts
            .headers
            .insert(split::SPLIT_FIELD, HeaderValue::from_static("1"));
        let is_options = parts.method == Method::OPTIONS;
        let req = Request::from_parts(
            parts,
            body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync(),
        );
        if is_options {
            return self.options(req, pq).await;
        }
        let rsp = self.client.request(req).await?;
        let (mut parts, body) = rsp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let is_split = parts.status == StatusCode::OK
            && parts
                .headers
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes() == split::SPLIT_TYPE.as_bytes());
        if !is_split {
            return Ok(Response::from_parts(
                parts,
                body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync(),
            ));
        }
        let content = parts
            .headers
            .remove(split::CONTENT_FIELD)
            .and_then(|v| v.to_str().ok().map(str::to_string))
            .filter(|p| p.starts_with('/') && p.ends_with('/'))
            .ok_or("split answer without a usable Httpcrypt-Content")?;
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        parts
            .headers
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(8);
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.splice(body, &content, &tx).await {
                tracing::warn!(error = %e, "split answer failed; ending the client's response early");
                let _ = tx.send(Err(e)).await;
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(Response::from_parts(
            parts,
            http_body_util::StreamBody::new(stream).boxed_unsync(),
        ))
    }

    /// Reads the split stream and sends the client's stream to `tx`.
    async fn splice(
        &self,
        mut body: Incoming,
        content: &str,
        tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    ) -> Result<(), BoxError> {
        let mut dec = SplitDecoder::new(self.config.max_record);
        let mut queue: Vec<Item> = Vec::new();
        loop {
            // Once the FINAL frame is in, read the answer to its end first:
            // hyper then returns the connection to the pool, and the batch
            // fetch below reuses it instead of opening another.
            let frame = if dec.is_complete() {
                while let Some(f) = body.frame().await {
                    if let Ok(data) = f?.into_data() {
                        dec.receive(&data)?; // anything after FINAL: trailing_data
                    }
                }
                None
            } else {
                body.frame().await
            };
            let ended = match frame {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        dec.receive(&data)?;
                        while let Some(ev) = dec.next_event()? {
                            match ev {
                                SplitEvent::Nonce(b) | SplitEvent::Verbatim(b) => {
                                    queue.push(Item::Bytes(Bytes::copy_from_slice(b)))
                                }
                                SplitEvent::Stub(s) => queue.push(Item::Stub(s)),
                                SplitEvent::End => {}
                            }
                            if queue.len() >= split::MAX_BATCH {
                                self.flush(&mut queue, content, tx).await?;
                            }
                        }
                    }
                    if dec.is_complete() {
                        continue;
                    }
                    false
                }
                Some(Err(e)) => return Err(Box::new(e)),
                None => true,
            };
            self.flush(&mut queue, content, tx).await?;
            if ended {
                dec.finish()?;
                return Ok(());
            }
        }
    }

    /// Sends the queued frames in order, fetching the missing payloads in
    /// one batch request.
    async fn flush(
        &self,
        queue: &mut Vec<Item>,
        content: &str,
        tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    ) -> Result<(), BoxError> {
        if queue.is_empty() {
            return Ok(());
        }
        let mut missing: Vec<ContentId> = Vec::new();
        let mut cached: Vec<Option<Vec<u8>>> = Vec::with_capacity(queue.len());
        for item in queue.iter() {
            match item {
                Item::Stub(s) => {
                    let hit = self.cache.read(&s.id).filter(|p| {
                        let ok = s.check(p).is_ok();
                        if !ok {
                            self.cache.forget(&s.id);
                        }
                        ok
                    });
                    if hit.is_none() && !missing.contains(&s.id) {
                        missing.push(s.id);
                    }
                    cached.push(hit);
                }
                Item::Bytes(_) => cached.push(None),
            }
        }
        let mut batch = if missing.is_empty() {
            None
        } else {
            Some(self.fetch(content, &missing).await?)
        };
        // Payloads fetched in this batch, in stream order: looked up for
        // repeats inside it, then cached. Checked already (`Batch::next`);
        // written once every frame of this flush is on its way to the
        // client, so the disk is off its path.
        let mut fetched: Vec<(ContentId, Bytes)> = Vec::new();
        for (item, hit) in queue.drain(..).zip(cached) {
            let out = match item {
                Item::Bytes(b) => b,
                Item::Stub(s) => {
                    let payload = match hit {
                        Some(p) => {
                            self.cache.stats.hits.fetch_add(1, Relaxed);
                            Bytes::from(p)
                        }
                        None => match fetched.iter().find(|(id, _)| *id == s.id) {
                            Some((_, p)) => p.clone(),
                            None => {
                                let b = batch.as_mut().ok_or("payload missing from the batch")?;
                                let p = b.next(&s).await?;
                                self.cache.stats.misses.fetch_add(1, Relaxed);
                                self.cache
                                    .stats
                                    .fetched_bytes
                                    .fetch_add(p.len() as u64, Relaxed);
                                fetched.push((s.id, p.clone()));
                                p
                            }
                        },
                    };
                    let mut rec = Vec::with_capacity(s.head.len() + payload.len());
                    s.splice(&payload, &mut rec)?;
                    Bytes::from(rec)
                }
            };
            if tx.send(Ok(Frame::data(out))).await.is_err() {
                return Err("client went away".into());
            }
        }
        if let Some(b) = batch {
            b.finish().await?;
        }
        if !fetched.is_empty() {
            let cache = self.cache.clone();
            let written = tokio::task::spawn_blocking(move || {
                for (id, p) in fetched {
                    if let Err(e) = cache.put(&id, &p) {
                        tracing::warn!(error = %e, "cache write failed");
                    }
                }
            });
            written.await?;
        }
        Ok(())
    }

    /// Starts a batch fetch of `ids` from the origin's content endpoint.
    async fn fetch(&self, content: &str, ids: &[ContentId]) -> Result<Batch, BoxError> {
        let mut body = Vec::with_capacity(ids.len() * split::ID_LEN);
        split::encode_batch_request(ids, &mut body);
        let mut req = Request::new(full(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.origin_uri(content)?;
        req.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        let rsp = self.client.request(req).await?;
        if rsp.status() != StatusCode::OK {
            return Err(format!("content batch answered {}", rsp.status()).into());
        }
        Ok(Batch {
            body: rsp.into_body(),
            dec: BatchDecoder::new(ids.len(), self.config.max_record),
            ended: false,
        })
    }
}

enum Item {
    Bytes(Bytes),
    Stub(Stub),
}

/// A batch answer being read entry by entry.
struct Batch {
    body: Incoming,
    dec: BatchDecoder,
    ended: bool,
}

impl Batch {
    /// The next entry, checked against `stub` (`content_mismatch` otherwise).
    async fn next(&mut self, stub: &Stub) -> Result<Bytes, BoxError> {
        loop {
            match self.dec.next_event()? {
                Some(BatchEvent::Found(p)) => {
                    stub.check(p)?;
                    return Ok(Bytes::copy_from_slice(p));
                }
                Some(BatchEvent::Missing) => {
                    return Err(format!("origin does not hold {:?}", stub.id).into())
                }
                None if self.ended => return Err(Box::new(ProtoError::Truncated)),
                None => match self.body.frame().await {
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            self.dec.receive(&d)?;
                        }
                    }
                    Some(Err(e)) => return Err(Box::new(e)),
                    None => self.ended = true,
                },
            }
        }
    }

    async fn finish(mut self) -> Result<(), BoxError> {
        while !self.ended {
            match self.body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        self.dec.receive(&d)?;
                    }
                }
                Some(Err(e)) => return Err(Box::new(e)),
                None => self.ended = true,
            }
        }
        self.dec.finish()?;
        Ok(())
    }
}

impl tower::Service<Request<crate::runtime::RequestBody>> for SplitProxy {
    type Response = Response<HcBody>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<HcBody>, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<crate::runtime::RequestBody>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            Ok(match this.relay(req).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "origin unreachable or misbehaving");
                    plain(StatusCode::BAD_GATEWAY, "bad gateway\n")
                }
            })
        })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Limits holding `n` entries of 4 bytes (each in its own
    /// subdirectory at worst), caching tiny payloads.
    fn room_for(n: u64) -> CacheLimits {
        CacheLimits {
            max_bytes: n * (DiskCache::charge(4) + BLOCK),
            max_entries: DEFAULT_MAX_ENTRIES,
            min_payload: 0,
        }
    }

    #[test]
    fn disk_cache_lru_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open_with(dir.path(), room_for(2)).unwrap();
        let (a, b, d) = (
            ContentId::of(b"a"),
            ContentId::of(b"b"),
            ContentId::of(b"d"),
        );
        c.put(&a, b"aaaa").unwrap();
        c.put(&b, b"bbbb").unwrap();
        assert!(c.contains(&a));
        c.put(&d, b"dddd").unwrap();
        assert!(!c.contains(&b), "b was least recently used");
        assert_eq!(c.read(&a).unwrap(), b"aaaa");
        assert_eq!(c.usage().0, 2);
        assert!(c.usage().1 <= room_for(2).max_bytes);
        assert_eq!(c.stats.evicted.load(Relaxed), 1);
        drop(c);
        let c = DiskCache::open_with(dir.path(), room_for(2)).unwrap();
        assert_eq!(c.usage().0, 2);
        assert_eq!(c.read(&d).unwrap(), b"dddd");
        let c = DiskCache::open_with(dir.path(), room_for(1)).unwrap();
        assert_eq!(c.usage().0, 1, "reopening with a smaller bound evicts");
    }

    /// Bytes the cache directory really takes on disk (files and
    /// subdirectories, as `du` counts them, without the top directory).
    fn disk_use(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let mut total = 0;
        for sub in std::fs::read_dir(dir).unwrap() {
            let sub = sub.unwrap();
            total += sub.metadata().unwrap().blocks() * 512;
            if sub.file_type().unwrap().is_dir() {
                for f in std::fs::read_dir(sub.path()).unwrap() {
                    total += f.unwrap().metadata().unwrap().blocks() * 512;
                }
            }
        }
        total
    }

    #[test]
    fn tiny_entries_stay_within_the_bound() {
        const LIMIT: u64 = 64 * 1024;
        let payload = |i: u32| format!("tiny public record {i:05}").into_bytes();
        // By default tiny payloads are not cached at all.
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open(dir.path(), LIMIT).unwrap();
        for i in 0..1500 {
            let p = payload(i);
            c.put(&ContentId::of(&p), &p).unwrap();
        }
        assert_eq!(c.usage().0, 0);
        assert_eq!(disk_use(dir.path()), 0);
        // Cached anyway, each is counted as a block plus overhead, and
        // each subdirectory as a block: the disk holds what the bound says.
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open_with(
            dir.path(),
            CacheLimits {
                min_payload: 0,
                ..CacheLimits::bytes(LIMIT)
            },
        )
        .unwrap();
        for i in 0..1500 {
            let p = payload(i);
            c.put(&ContentId::of(&p), &p).unwrap();
        }
        let (entries, bytes) = c.usage();
        assert!(bytes <= LIMIT, "{bytes} bytes charged");
        assert!(
            entries as u64 <= LIMIT / (DiskCache::charge(1) + BLOCK) + 1,
            "{entries} entries"
        );
        let used = disk_use(dir.path());
        assert!(used <= LIMIT, "{used} bytes on disk");
        // The entry cap holds whatever the byte bound.
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open_with(
            dir.path(),
            CacheLimits {
                max_bytes: 1 << 30,
                max_entries: 50,
                min_payload: 0,
            },
        )
        .unwrap();
        for i in 0..1500 {
            let p = payload(i);
            c.put(&ContentId::of(&p), &p).unwrap();
        }
        assert_eq!(c.usage().0, 50);
        let files: usize = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
            .sum();
        assert_eq!(files, 50);
    }
}
