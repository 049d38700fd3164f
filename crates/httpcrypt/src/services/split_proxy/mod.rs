//! `httpcrypt split-proxy`: an untrusted caching proxy for split serving
//! (spec/split-serving.md). It relays every request to the origin
//! untouched but for the `Httpcrypt-Split` field (asking for the short
//! outer head, §S3), relays every ordinary
//! answer untouched, and turns split answers back into ordinary response
//! streams: verbatim records as they are, stubs with payloads from its
//! on-disk cache, fetching the ones it lacks from the origin in batches
//! and checking their BLAKE3 before use. It never holds more than one
//! record per response (plus a few queued frames) in memory. The cache
//! itself ([`DiskCache`]) is in `cache`.

mod cache;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
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

use super::strip_hop_by_hop;
use crate::body::{full, plain, HcBody};
use crate::error::BoxError;

pub use cache::{
    CacheLimits, CacheStats, DiskCache, BLOCK, DEFAULT_MAX_ENTRIES, DEFAULT_MIN_PAYLOAD,
    ENTRY_OVERHEAD,
};

/// Proxy settings.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The origin, `http://host:port`.
    pub origin: Uri,
    /// Largest record accepted from the origin (clamped as a receiver's).
    pub max_record: usize,
    /// Speak HTTP/2 with prior knowledge to the origin (spec/split-serving.md
    /// §S11), on one multiplexed connection, instead of HTTP/1.1 on a pool.
    pub h2: bool,
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
            client: HyperClient::builder(TokioExecutor::new())
                .http2_only(config.h2)
                .build(http),
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
        req: Request<crate::lifecycle::RequestBody>,
    ) -> Result<Response<HcBody>, BoxError> {
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let path = parts.uri.path().to_string();
        parts.uri = self.origin_uri(&pq)?;
        strip_hop_by_hop(&mut parts.headers);
        // The short head (§S3): the origin leaves out what this proxy
        // derives or sets itself.
        parts.headers.insert(
            split::SPLIT_FIELD,
            HeaderValue::from_static(split::SPLIT_SHORT),
        );
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
        // An origin that gave the full head names the content endpoint;
        // with the short head it is the mount of the request's path.
        let content = match parts.headers.remove(split::CONTENT_FIELD) {
            Some(v) => v.to_str().ok().map(str::to_string),
            None => split::content_prefix(&path),
        }
        .filter(|p| p.starts_with('/') && p.ends_with('/'))
        .ok_or("split answer without a usable content endpoint")?;
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

impl tower::Service<Request<crate::lifecycle::RequestBody>> for SplitProxy {
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

    fn call(&mut self, req: Request<crate::lifecycle::RequestBody>) -> Self::Future {
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
