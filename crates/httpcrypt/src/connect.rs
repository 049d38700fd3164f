//! The client's connector: direct TCP, or every connection to an HTTP
//! forward proxy, which then receives absolute-form request targets.
//! Host names go to the system resolver unless a [`Resolve`] is given
//! (e.g. the DNS server that discovery uses). Direct connections may use
//! TCP Fast Open ([`Tfo`], spec/asap.md §5).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpSocket, TcpStream};

use crate::error::BoxError;
use crate::sockopt;

/// TCP Fast Open use on the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tfo {
    /// An ordinary three-way handshake.
    #[default]
    Off,
    /// `TCP_FASTOPEN_CONNECT`: data rides in the SYN once the kernel holds
    /// a cookie from an earlier connection to the server; the first
    /// connection fetches one.
    Cookie,
    /// As `Cookie`, plus `TCP_FASTOPEN_NO_COOKIE`: data rides in the SYN
    /// without a cookie, for servers that check provenance themselves.
    NoCookie,
}

/// Connects to `addr` with TCP Fast Open as `tfo` says. With a cookie
/// (or `NoCookie`), `connect` returns at once and the first write sends the
/// SYN with the data; without one the kernel falls back to an ordinary
/// handshake (asking for a cookie), so the caller never sees a difference
/// except in timing. If the SYN's data is dropped or ignored, the kernel
/// sends it again after the handshake.
pub async fn connect_tfo(addr: SocketAddr, tfo: Tfo) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if tfo != Tfo::Off {
        sockopt::connect_fastopen(&socket, tfo == Tfo::NoCookie)?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Resolves a host name to addresses for a connection.
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// The addresses of `host`, best first.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, BoxError>> + Send + 'a>>;
}

/// Connects directly, or always to `proxy`.
#[derive(Debug, Clone)]
pub struct Connector {
    http: HttpConnector,
    proxy: Option<Uri>,
    resolver: Option<Arc<dyn Resolve>>,
    tfo: Tfo,
}

impl Connector {
    /// A connector; `proxy` is an `http://host:port` forward proxy.
    pub fn new(proxy: Option<Uri>) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(true);
        Connector {
            http,
            proxy,
            resolver: None,
            tfo: Tfo::Off,
        }
    }

    /// Connects with TCP Fast Open as `tfo` says (direct connections only).
    pub fn with_tfo(mut self, tfo: Tfo) -> Self {
        self.tfo = tfo;
        self
    }

    /// Gives up a TCP connection attempt after `timeout` (an io error of
    /// kind `TimedOut`).
    pub fn with_connect_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.http.set_connect_timeout(timeout);
        self
    }

    /// Resolves host names with `resolver` instead of the system's.
    pub fn with_resolver(mut self, resolver: Option<Arc<dyn Resolve>>) -> Self {
        self.resolver = resolver;
        self
    }
}

/// A TCP stream that remembers whether it leads to a proxy.
#[derive(Debug)]
pub struct Stream {
    io: TokioIo<TcpStream>,
    proxied: bool,
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tower::Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let proxied = self.proxy.is_some();
        let target = self.proxy.clone().unwrap_or(dst);
        let mut http = self.http.clone();
        let resolver = self.resolver.clone();
        let tfo = if proxied { Tfo::Off } else { self.tfo };
        Box::pin(async move {
            let target = match (&resolver, target.host()) {
                (Some(r), Some(host)) if host.parse::<IpAddr>().is_err() => {
                    let host = host.trim_end_matches('.');
                    let addr = *r
                        .resolve(host)
                        .await?
                        .first()
                        .ok_or_else(|| format!("{host}: no address"))?;
                    let port = target.port_u16().unwrap_or(80);
                    let ip = match addr {
                        IpAddr::V4(a) => a.to_string(),
                        IpAddr::V6(a) => format!("[{a}]"),
                    };
                    // The Host field is set from the request, not from this URI.
                    format!("http://{ip}:{port}/").parse::<Uri>()?
                }
                _ => target,
            };
            if tfo != Tfo::Off {
                let host = target.host().unwrap_or_default();
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let port = target.port_u16().unwrap_or(80);
                let addr = match host.parse::<IpAddr>() {
                    Ok(ip) => SocketAddr::new(ip, port),
                    Err(_) => tokio::net::lookup_host((host, port))
                        .await?
                        .next()
                        .ok_or_else(|| format!("{host}: no address"))?,
                };
                let io = TokioIo::new(connect_tfo(addr, tfo).await?);
                return Ok(Stream { io, proxied });
            }
            let io = tower::Service::call(&mut http, target).await?;
            Ok(Stream { io, proxied })
        })
    }
}

/// The proxy named by `HTTP_PROXY` / `http_proxy`, unless `NO_PROXY` covers `host`.
pub fn proxy_from_env(host: &str) -> Option<Uri> {
    let no_proxy = std::env::var("NO_PROXY")
        .or_else(|_| std::env::var("no_proxy"))
        .unwrap_or_default();
    let skip = no_proxy
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .any(|p| {
            p == "*"
                || host == p.trim_start_matches('.')
                || host.ends_with(&format!(".{}", p.trim_start_matches('.')))
        });
    if skip {
        return None;
    }
    let v = std::env::var("HTTP_PROXY")
        .or_else(|_| std::env::var("http_proxy"))
        .ok()?;
    v.parse().ok()
}
