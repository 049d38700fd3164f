//! `httpcrypt demo`: a local HTTPCrypt server on temporary keys serving a
//! small built-in site, and encrypted fetches against it, printing what a
//! middlebox sees next to what the two ends decrypt.

use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Args;
use http_body_util::BodyExt;
use httpcrypt::body::HcBody;
use httpcrypt::client::OuterExchange;
use httpcrypt::BoxError;

#[derive(Args)]
pub struct DemoArgs {
    /// Address for the demo server (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
}

const SITE: &[(&str, &str)] = &[
    ("index.html", "<!doctype html><title>httpcrypt demo</title><p>Served over HTTPCrypt: no TLS handshake, first request already encrypted.</p>\n"),
    ("hello.txt", "hello from the encrypted side\n"),
];

/// The demo site: static files, plus `POST /echo` which answers its body.
fn site(
    root: &std::path::Path,
) -> impl tower::Service<
    http::Request<HcBody>,
    Response = http::Response<HcBody>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let files = httpcrypt::services::static_files(root);
    tower::service_fn(move |req: http::Request<HcBody>| {
        let mut files = files.clone();
        async move {
            if req.method() == http::Method::POST && req.uri().path() == "/echo" {
                let body = req.into_body().collect().await?.to_bytes();
                let mut r = http::Response::new(
                    http_body_util::Full::new(body)
                        .map_err(|never| match never {})
                        .boxed_unsync(),
                );
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain"),
                );
                return Ok(r);
            }
            tower::Service::call(&mut files, req).await
        }
    })
}

pub async fn run(a: DemoArgs) -> Result<i32> {
    let tmp = tempfile::tempdir()?;
    let keys_dir = tmp.path().join("keys");
    let root = tmp.path().join("site");
    std::fs::create_dir_all(&root)?;
    for (name, text) in SITE {
        std::fs::write(root.join(name), text)?;
    }
    let store = httpcrypt::keys::KeyStore::create(&keys_dir, false)?;
    let identity = store.identity();
    let keys = httpcrypt::keys::start(store, Duration::from_secs(3600))?;
    let layer = httpcrypt::HttpCryptLayer::new(keys, httpcrypt::ServerConfig::default());
    let listener = httpcrypt::listen::bind(a.listen).await?;
    let addr = listener.local_addr()?;
    let svc = tower::Layer::layer(&layer, site(&root));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(httpcrypt::listen::run(
        listener,
        svc,
        Default::default(),
        async {
            let _ = stopped.await;
        },
    ));
    println!(
        "httpcrypt demo: server on http://{addr}, temporary keys in {}",
        keys_dir.display()
    );
    println!(
        "identity key (pin it with --identity): {}\n",
        identity.to_b64()
    );

    let client = httpcrypt::Client::new(httpcrypt::ClientConfig {
        identity: Some(identity),
        ..Default::default()
    });
    let certs = client
        .refresh_certs("http", &addr.to_string())
        .await
        .context("fetching certificates")?;
    println!(
        "OPTIONS / -> {} certificate(s), signature verified against the pinned identity",
        certs.len()
    );
    for c in &certs {
        println!("  {}", c.to_text());
    }
    println!();

    let base = format!("http://{addr}");
    let requests: Vec<(http::Request<Bytes>, &str)> = vec![
        (http::Request::get(format!("{base}/hello.txt")).body(Bytes::new())?, "a small GET travels in the GET form"),
        (
            http::Request::post(format!("{base}/echo")).header("content-type", "text/plain").body(Bytes::from(format!("card=4111-1111-1111-1111&memo={}", "x".repeat(2000))))?,
            "a larger POST travels in the POST form; the first response's ticket resumes the session",
        ),
        (http::Request::get(format!("{base}/")).body(Bytes::new())?, "the index page, resumed with the ticket again"),
    ];
    for (req, what) in requests {
        let inner_line = format!("{} {}", req.method(), req.uri().path());
        let rsp = client
            .send(req)
            .await
            .with_context(|| format!("fetching {inner_line}"))?;
        let outer = rsp
            .extensions()
            .get::<OuterExchange>()
            .cloned()
            .context("no outer exchange recorded")?;
        let status = rsp.status();
        let body = rsp
            .into_body()
            .collect()
            .await
            .map_err(httpcrypt::error::from_box)?
            .to_bytes();
        println!("== {what}");
        println!(
            "  middlebox sees:  {} {} -> {}",
            outer.method,
            shorten(outer.uri.path_and_query().map_or("/", |p| p.as_str())),
            outer.status
        );
        if let Some(c) = outer.request_headers.get(http::header::COOKIE) {
            println!(
                "                   Cookie: {}",
                shorten(&String::from_utf8_lossy(c.as_bytes()))
            );
        }
        println!(
            "  client decrypts: {inner_line} -> {status}, {} bytes: {}",
            body.len(),
            shorten(String::from_utf8_lossy(&body).trim_end())
        );
        println!();
    }
    let _ = stop.send(());
    server.await??;
    println!("demo finished: every request and response above was encrypted and authenticated");
    Ok(0)
}

fn shorten(s: &str) -> String {
    if s.len() > 72 && s.is_char_boundary(60) {
        format!("{}…({} chars)", &s[..60], s.len())
    } else {
        s.to_string()
    }
}
