//! `--profile rspamd`: the CLI side of the rspamd compatibility profile
//! (`spec/rspamd-profile.md`). `fetch` talks to rspamd's workers as
//! `rspamc --key` does; `gateway` and `serve` answer `rspamc --key`;
//! `keygen --format rspamd` writes what `rspamadm keypair` writes, and every
//! command reads that form.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use httpcrypt::proto::rspamd::keys::{public_from_base32, public_to_base32, ShortId};
use httpcrypt::proto::rspamd::{keypair, Keyring};
use httpcrypt::proto::KexPublic;
use httpcrypt::rspamd::{RspamdClient, RspamdClientConfig, RspamdConfig, RspamdLayer};
use httpcrypt::Error;

use crate::args::ServerOpts;
use crate::output::{refuse_inner_problem, Sink};
use crate::request::{build_request, FetchArgs};

/// `keygen --format rspamd`: the block on stdout, or `DIR/keypair.ucl`
/// with the public key (what `rspamc --key` takes) on stdout.
pub fn keygen(dir: Option<&Path>) -> Result<i32> {
    match dir {
        None => {
            let secret = httpcrypt::rspamd::generate();
            std::io::stdout().write_all(keypair::format(&secret).as_bytes())?;
        }
        Some(dir) => {
            let (path, secret) = httpcrypt::rspamd::write_keypair(dir)?;
            eprintln!("httpcrypt: wrote {}", path.display());
            println!("{}", public_to_base32(secret.public()));
        }
    }
    Ok(0)
}

/// The server key of `--server-key`: 52 (or 51) base32 characters, or the
/// path of an `rspamadm keypair` file.
fn server_key(text: &str) -> Result<KexPublic> {
    if let Ok(k) = public_from_base32(text.trim().as_bytes()) {
        return Ok(k);
    }
    let path = Path::new(text);
    if path.is_file() {
        let secret = httpcrypt::rspamd::read_keypair(path)
            .with_context(|| format!("reading the key pair {}", path.display()))?;
        return Ok(*secret.public());
    }
    bail!(
        "--server-key: {text:?} is neither an rspamd base32 public key (52 characters, \
         as `rspamc --key` takes) nor a key-pair file"
    )
}

/// `fetch --profile rspamd`.
pub async fn fetch(a: &FetchArgs) -> Result<i32> {
    if a.url.scheme_str() != Some("http") {
        bail!("fetch takes an http:// URL");
    }
    if a.identity.is_some()
        || a.reuse_key
        || !a.mount.is_empty()
        || a.pq != crate::request::PqMode::Off
    {
        bail!("--identity, --reuse-key, --mount and --pq belong to the v1 profile");
    }
    let text = a.server_key.as_deref().context(
        "--profile rspamd needs --server-key: the pubkey of the rspamd worker's keypair \
         (what `rspamc --key` takes), or the key-pair file",
    )?;
    let server = server_key(text)?;
    let host = a.url.host().context("URL needs a host")?;
    let proxy = a
        .proxy
        .clone()
        .or_else(|| httpcrypt::connect::proxy_from_env(host));
    let client = RspamdClient::new(
        server,
        RspamdClientConfig {
            proxy,
            ..Default::default()
        },
    );
    let body = match (a.data_bytes()?, &a.data_file) {
        (Some(d), _) => d,
        (None, Some(p)) => Bytes::from(
            tokio::fs::read(p)
                .await
                .with_context(|| format!("reading {}", p.display()))?,
        ),
        (None, None) => Bytes::new(),
    };
    let req = build_request(a)?.body(body)?;
    if a.verbose {
        eprintln!(
            "* rspamd profile: sealed to key {} (short ID {}), one request per connection",
            public_to_base32(&server),
            ShortId::of(&server).to_base32()
        );
    }
    let rsp = client.send(req).await.map_err(explain)?;
    if a.verbose {
        eprintln!("* decrypted response:");
        eprintln!("< HTTP/1.1 {}", rsp.status());
        for (n, v) in rsp.headers() {
            eprintln!("< {}: {}", n, String::from_utf8_lossy(v.as_bytes()));
        }
        eprintln!("<");
    }
    refuse_inner_problem(rsp.status(), rsp.headers(), Some(rsp.body()))?;
    let mut out = Sink::open(a.output.as_deref())?;
    if a.include {
        writeln!(out, "HTTP/1.1 {}", rsp.status())?;
        for (n, v) in rsp.headers() {
            writeln!(out, "{}: {}", n, String::from_utf8_lossy(v.as_bytes()))?;
        }
        writeln!(out)?;
    }
    out.write_all(rsp.body())?;
    out.finish()?;
    Ok(0)
}

/// What an rspamd-profile failure means, in words.
fn explain(e: Error) -> anyhow::Error {
    match e {
        Error::NoAnswer => anyhow!(
            "the server closed the connection without answering: an rspamd scan worker does \
             this when it cannot decrypt the request (unknown key or bad tag); check that \
             --server-key is the pubkey of the worker's keypair"
        ),
        Error::RefusedText { status, text } => anyhow!(
            "the server refused the request in plaintext: {status} {text:?}{}",
            if status == 500 {
                " (rspamd's controller answers so when it does not hold the key: check --server-key)"
            } else {
                ""
            }
        ),
        Error::Refused { status, type_uri } => anyhow!(
            "the server refused the request in plaintext: {status} {type_uri}{}",
            if type_uri.ends_with(":unknown-key") {
                " (it holds no key with this short ID: check --server-key)"
            } else {
                ""
            }
        ),
        Error::Protocol(p) if matches!(p.code(), "integrity" | "truncated") => anyhow!(
            "the response failed authentication ({}): it was not sealed under this exchange's \
             key, or it was altered on the way; nothing of it is shown",
            p.code()
        ),
        other => anyhow::Error::from(other),
    }
}

/// `serve`/`gateway --profile rspamd`: `svc` behind [`RspamdLayer`] until Ctrl-C.
pub async fn serve<S>(opts: &ServerOpts, svc: S) -> Result<()>
where
    S: tower::Service<
            http::Request<httpcrypt::body::HcBody>,
            Response = http::Response<httpcrypt::body::HcBody>,
            Error = httpcrypt::BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    if opts.keys.is_some() {
        bail!("--keys is a v1 key directory; the rspamd profile takes --keypair FILE");
    }
    if opts.h2_listen.is_some() {
        bail!("--h2-listen serves split proxies (spec/split-serving.md §S11); the rspamd profile has none");
    }
    if opts.redis.is_some()
        || opts.require_token
        || !opts.mount.is_empty()
        || opts.metrics.is_some()
    {
        bail!("--redis, --require-token, --mount and --metrics belong to the v1 profile");
    }
    if opts.pq != crate::args::PqMode::Off {
        bail!("--pq belongs to the v1 profile (rspamd's protocol has no hybrid suite)");
    }
    if opts.keypair.is_empty() {
        bail!(
            "--profile rspamd needs --keypair FILE (an `rspamadm keypair` block; \
             `httpcrypt keygen --format rspamd` writes one)"
        );
    }
    let mut keys = Keyring::new();
    let mut names = Vec::new();
    for path in &opts.keypair {
        let secret = httpcrypt::rspamd::read_keypair(path)
            .with_context(|| format!("reading the key pair {}", path.display()))?;
        names.push(public_to_base32(secret.public()));
        keys.insert(secret);
    }
    let layer = RspamdLayer::new(
        keys,
        RspamdConfig {
            limits: httpcrypt::proto::Limits {
                max_body: opts.max_body,
                ..Default::default()
            },
            body_timeout: Duration::from_secs(opts.body_timeout.max(1)),
            encrypted_only: opts.encrypted_only,
            authority: opts.server_name.clone(),
            pass_outer: opts.pass_outer.clone(),
        },
    );
    let listener = httpcrypt::listen::bind(opts.listen).await?;
    eprintln!(
        "httpcrypt: listening on http://{} (rspamd profile, key {})",
        listener.local_addr()?,
        names.join(", ")
    );
    let listen = opts.listen_options();
    let stop = crate::ops::stop_signal()?;
    let drained = httpcrypt::listen::run_draining(
        listener,
        tower::Layer::layer(&layer, svc),
        listen,
        async {
            let name = stop.await;
            tracing::info!(signal = name, "draining");
        },
        Duration::from_secs(opts.shutdown_timeout),
    )
    .await?;
    if let httpcrypt::listen::Drained::TimedOut(open) = drained {
        tracing::warn!(open, "stopped at the --shutdown-timeout deadline");
    }
    Ok(())
}
