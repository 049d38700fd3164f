//! The attacker of `adversary.rs` and what it attacks: an HTTP relay that
//! edits the outer messages it carries ([`Mitm`]), an upstream that records
//! what it receives ([`Recorder`]), and the attacks: every class of outer
//! request field added, changed, duplicated and removed, a re-framed body
//! ([`attacks`]), and fields added to outer responses ([`response_attack`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use httpcrypt::proto::inner;
use hyper::body::Incoming;

/// The runtime of the servers written here (recorder, relay), apart from
/// the tests' own blocking sockets.
pub static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

pub type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// Serves `handle` with HTTP/1.1 on a loopback port of [`RT`].
pub fn http_server<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    RT.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let handle = handle.clone();
                    async move { Ok::<_, Infallible>(handle(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// A request as a service received it: field names lower case, in order.
#[derive(Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub fields: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v)))
            .collect();
        f.debug_struct("Seen")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("fields", &fields)
            .field("body", &format_args!("{} bytes", self.body.len()))
            .finish()
    }
}

impl Seen {
    /// What a service should see of an inner request: every sealed field
    /// but the protocol's own (erratum E1).
    pub fn sealed(method: &str, target: &str, fields: &[(&str, &str)], body: &[u8]) -> Seen {
        let mut all: Vec<(String, Vec<u8>)> = fields
            .iter()
            .filter(|(n, _)| inner::is_service_field(n))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect();
        if !body.is_empty() {
            all.push(("content-length".into(), body.len().to_string().into_bytes()));
        }
        Seen {
            method: method.into(),
            target: target.into(),
            fields: all,
            body: body.to_vec(),
        }
    }

    pub fn sorted(mut self) -> Seen {
        self.fields.sort();
        self
    }
}

pub fn fields_of(h: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    h.iter()
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect()
}

/// An upstream that records every complete request it receives and
/// answers 200 `upstream ok` with `X-Upstream: yes`.
pub struct Recorder {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    pub fn start() -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let addr = http_server(move |req: Request<Incoming>| {
            let log = log.clone();
            async move {
                let (parts, body) = req.into_parts();
                // A body that fails (the client's stream did not verify)
                // is no request the service saw.
                let Ok(body) = body.collect().await else {
                    return Response::new(full("body failed"));
                };
                log.lock().unwrap().push(Seen {
                    method: parts.method.to_string(),
                    target: parts.uri.to_string(),
                    fields: fields_of(&parts.headers),
                    body: body.to_bytes().to_vec(),
                });
                let mut r = Response::new(full("upstream ok"));
                r.headers_mut()
                    .insert("x-upstream", HeaderValue::from_static("yes"));
                // Fields only the server may write inside: dropped.
                r.headers_mut()
                    .insert("ticket", HeaderValue::from_static("upstream-ticket"));
                r.headers_mut()
                    .insert("random", HeaderValue::from_static("upstream-random"));
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                r
            }
        });
        Recorder { addr, seen }
    }

    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// What the relay does to the outer messages it carries.
pub type Edit = Arc<dyn Fn(&mut HeaderMap) + Send + Sync>;

/// A request body passed on without its size, so the relay's client
/// re-frames it (chunked).
pub struct Unsized(Incoming);

impl http_body::Body for Unsized {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
    }
}

/// The attacker: an HTTP relay to `target` that applies `request` to
/// every outer request head (and, with `rechunk`, re-frames its body) and
/// `response` to every outer response head. It keeps the outer request
/// heads it received, as the client sent them.
pub struct Mitm {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<HeaderMap>>>,
}

impl Mitm {
    pub fn start(target: SocketAddr, request: Edit, rechunk: bool, response: Edit) -> Mitm {
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http::<Body>();
        let addr = http_server(move |req: Request<Incoming>| {
            let (log, client, request, response) = (
                log.clone(),
                client.clone(),
                request.clone(),
                response.clone(),
            );
            async move {
                let (mut parts, body) = req.into_parts();
                log.lock().unwrap().push(parts.headers.clone());
                request(&mut parts.headers);
                let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                parts.uri = format!("http://{target}{pq}").parse().unwrap();
                let body: Body = if rechunk {
                    parts.headers.remove(header::CONTENT_LENGTH);
                    Unsized(body).map_err(Into::into).boxed()
                } else {
                    body.map_err(Into::into).boxed()
                };
                match client.request(Request::from_parts(parts, body)).await {
                    Ok(rsp) => {
                        let (mut parts, body) = rsp.into_parts();
                        response(&mut parts.headers);
                        Response::from_parts(parts, body.map_err(Into::into).boxed())
                    }
                    Err(e) => {
                        let mut r = Response::new(full(format!("relay: {e}")));
                        *r.status_mut() = http::StatusCode::BAD_GATEWAY;
                        r
                    }
                }
            }
        });
        Mitm { addr, received }
    }

    pub fn received(&self) -> Vec<HeaderMap> {
        self.received.lock().unwrap().clone()
    }
}

pub fn keep() -> Edit {
    Arc::new(|_: &mut HeaderMap| {})
}

pub fn set(h: &mut HeaderMap, name: &'static str, value: &'static str) {
    h.insert(
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    );
}

pub fn add(h: &mut HeaderMap, name: &'static str, value: &'static str) {
    h.append(
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    );
}

/// Fields an attacker adds to make a service act on its word: credentials,
/// method overrides, client addresses, codings, ranges and preconditions,
/// origins, and the request's own representation metadata.
pub const INJECTED: &[(&str, &str)] = &[
    ("authorization", "Basic ZXZpbDpldmls"),
    ("x-http-method-override", "DELETE"),
    ("x-method-override", "DELETE"),
    ("x-forwarded-for", "6.6.6.6"),
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-proto", "https"),
    ("x-real-ip", "6.6.6.6"),
    ("forwarded", "for=6.6.6.6;host=evil.example;proto=https"),
    ("via", "1.1 evil"),
    ("content-encoding", "gzip"),
    ("content-language", "xx"),
    ("range", "bytes=0-4"),
    ("if-none-match", "*"),
    ("if-match", "\"nope\""),
    ("if-modified-since", "Thu, 01 Jan 2099 00:00:00 GMT"),
    ("if-unmodified-since", "Thu, 01 Jan 1970 00:00:00 GMT"),
    ("if-range", "\"nope\""),
    ("origin", "http://evil.example"),
    ("referer", "http://evil.example/"),
    ("user-agent", "evil-agent"),
    ("accept", "application/evil"),
    ("accept-encoding", "gzip, br"),
    ("accept-language", "xx"),
    ("max-forwards", "0"),
    ("x-custom", "injected"),
    ("date", "Thu, 01 Jan 1970 00:00:00 GMT"),
    ("client-random", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    ("random", "AAAA"),
    ("ticket", "AAAA"),
];

/// One attack: a name, what the relay does, and whether the server should
/// still serve the request (else: refuse it, and the service sees nothing).
pub struct Attack {
    pub name: &'static str,
    pub request: Edit,
    pub rechunk: bool,
    pub served: bool,
}

pub fn attack(
    name: &'static str,
    served: bool,
    edit: impl Fn(&mut HeaderMap) + Send + Sync + 'static,
) -> Attack {
    Attack {
        name,
        request: Arc::new(edit),
        rechunk: false,
        served,
    }
}

/// Every class of outer request field, added, changed, duplicated and
/// removed; and a re-framed body.
pub fn attacks() -> Vec<Attack> {
    let mut all = vec![
        attack("nothing", true, |_| {}),
        attack("inject every class", true, |h| {
            for (n, v) in INJECTED {
                add(h, n, v);
            }
        }),
        attack("another host", true, |h| set(h, "host", "evil.example")),
        attack("cookie extras", true, |h| {
            let mine = h.get(header::COOKIE).and_then(|v| v.to_str().ok());
            let more = match mine {
                Some(mine) => format!("{mine}; session=evil; admin=1"),
                None => "session=evil; admin=1".to_string(),
            };
            h.insert(header::COOKIE, HeaderValue::from_str(&more).unwrap());
            add(h, "cookie", "second=field");
        }),
        attack("another content type", true, |h| {
            set(h, "content-type", "application/x-www-form-urlencoded")
        }),
        attack("duplicated fields", true, |h| {
            for n in [header::CONTENT_TYPE, header::COOKIE] {
                let vs: Vec<HeaderValue> = h.get_all(&n).iter().cloned().collect();
                for v in vs {
                    h.append(n.clone(), v);
                }
            }
            add(h, "x-custom", "one");
            add(h, "x-custom", "two");
        }),
        attack("connection-named fields", true, |h| {
            set(h, "connection", "keep-alive, x-hop, authorization");
            add(h, "x-hop", "1");
            add(h, "authorization", "Bearer evil");
            add(h, "keep-alive", "timeout=5");
            add(h, "te", "trailers");
        }),
        attack("no content type", true, |h| {
            h.remove(header::CONTENT_TYPE);
        }),
        attack("no cookie", false, |h| {
            h.remove(header::COOKIE);
        }),
        attack("a foreign cookie only", false, |h| {
            set(h, "cookie", "session=evil")
        }),
    ];
    all.push(Attack {
        name: "re-chunked body with injected fields",
        request: Arc::new(|h: &mut HeaderMap| {
            add(h, "authorization", "Basic ZXZpbDpldmls");
            add(h, "content-encoding", "gzip");
        }),
        rechunk: true,
        served: true,
    });
    all
}

/// Response edits: fields an attacker adds to, or changes in, the outer
/// response.
pub fn response_attack() -> Edit {
    Arc::new(|h: &mut HeaderMap| {
        add(h, "set-cookie", "session=evil; Path=/");
        add(h, "x-injected", "1");
        add(h, "content-encoding", "identity");
        add(h, "ticket", "AAAA");
        add(h, "location", "http://evil.example/");
        add(h, "www-authenticate", "Basic realm=evil");
    })
}
