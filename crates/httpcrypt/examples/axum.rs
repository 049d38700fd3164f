//! An axum application behind HTTPCrypt: one layer around the router.
//!
//! ```sh
//! cargo run -p httpcrypt --example axum            # listens on 127.0.0.1:3000, keys in a temp dir
//! httpcrypt fetch --mount /hc http://127.0.0.1:3000/hello
//! curl http://127.0.0.1:3000/health                # plaintext outside the mount still works
//! ```

use std::time::Duration;

use axum::extract::Extension;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use httpcrypt::keys::{self, KeyStore};
use httpcrypt::proto::outer::Mount;
use httpcrypt::server::{Encrypted, Outside};
use httpcrypt::{HttpCryptLayer, ServerConfig};
use tower::{Layer, ServiceExt};

/// The application, unaware of encryption except for the optional extension.
pub fn app() -> Router {
    Router::new()
        .route("/hello", get(hello))
        .route("/echo", post(|body: Bytes| async move { body }))
        .route("/health", get(|| async { "ok\n" }))
}

async fn hello(enc: Option<Extension<Encrypted>>) -> String {
    match enc {
        Some(Extension(e)) => format!(
            "hello over HTTPCrypt (key {}, resumed: {})\n",
            e.kid.to_b64(),
            e.resumed
        ),
        None => "hello in plaintext\n".to_string(),
    }
}

/// Serves `app()` behind the layer on `listener`: HTTPCrypt under `/hc`,
/// plaintext elsewhere. Returns the identity public key.
pub async fn serve(
    listener: tokio::net::TcpListener,
    keys_dir: &std::path::Path,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let store = if keys_dir.join("identity.key").exists() {
        KeyStore::open(keys_dir)?
    } else {
        KeyStore::create(keys_dir, false)?
    };
    let identity = store.identity().to_b64();
    let keys = keys::start(store, Duration::from_secs(3600))?;
    let layer = HttpCryptLayer::new(
        keys,
        ServerConfig {
            mount: Mount::new("/hc")?,
            outside: Outside::PassThrough,
            ..Default::default()
        },
    );
    // axum::serve wants axum's body type in responses.
    let svc = ServiceExt::<axum::extract::Request>::map_response(layer.layer(app()), |r| {
        r.map(axum::body::Body::new)
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, tower::make::Shared::new(svc)).await {
            eprintln!("server error: {e}");
        }
    });
    Ok(identity)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    let identity = serve(listener, dir.path()).await?;
    println!("axum + HTTPCrypt on http://127.0.0.1:3000 (mount /hc), identity {identity}");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
