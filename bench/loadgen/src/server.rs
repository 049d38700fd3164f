//! The rustls TLS 1.3 baseline server: the same tokio runtime, hyper
//! HTTP/1.1 connection code and static-file service (`httpcrypt::services::
//! static_files`, tower-http `ServeDir`) as `httpcrypt serve`, with TLS in
//! place of the HTTPCrypt layer. Full handshakes only (no session storage,
//! no tickets), X25519 (`--pq`: X25519MLKEM768), the harness's ECDSA P-256
//! certificate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Settings of `loadgen serve-tls`.
#[derive(Debug, clap::Args)]
pub struct ServeTlsArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9443")]
    pub listen: SocketAddr,
    /// PEM certificate chain.
    #[arg(long)]
    pub cert: PathBuf,
    /// PEM private key.
    #[arg(long)]
    pub key: PathBuf,
    /// Directory of files to serve.
    #[arg(long)]
    pub root: PathBuf,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Take only the X25519MLKEM768 hybrid key exchange group (the
    /// post-quantum baseline) instead of X25519.
    #[arg(long)]
    pub pq: bool,
}

/// Runs the server until killed.
pub fn run(a: ServeTlsArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.workers.max(1))
        .enable_all()
        .build()?;
    rt.block_on(serve(a))
}

async fn serve(a: ServeTlsArgs) -> Result<()> {
    let acceptor = TlsAcceptor::from(crate::tls::server_config(&a.cert, &a.key, a.pq)?);
    let files = httpcrypt::services::static_files(&a.root);
    let listener = TcpListener::bind(a.listen).await?;
    eprintln!("serve-tls: listening on https://{}", listener.local_addr()?);
    let limit = Arc::new(tokio::sync::Semaphore::new(1024));
    loop {
        let permit = limit.clone().acquire_owned().await?;
        let (tcp, _) = match listener.accept().await {
            Ok(a) => a,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, files) = (acceptor.clone(), files.clone());
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let req = req.map(|b| {
                    b.map_err(|e| -> httpcrypt::BoxError { Box::new(e) })
                        .boxed_unsync()
                });
                // Always ready (see `StaticFiles::poll_ready`).
                let fut = tower::Service::call(&mut files.clone(), req);
                async move {
                    Ok::<_, std::convert::Infallible>(fut.await.unwrap_or_else(|_| {
                        let mut r = hyper::Response::new(
                            http_body_util::Empty::new()
                                .map_err(|never| match never {})
                                .boxed_unsync(),
                        );
                        *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                        r
                    }))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .keep_alive(true)
                .serve_connection(TokioIo::new(tls), svc)
                .await;
            drop(permit);
        });
    }
}
