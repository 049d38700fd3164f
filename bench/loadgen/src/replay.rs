//! `loadgen replay`: one `httpcrypt::Client` fetches a list of URLs in
//! turn, as one browser would: it keeps the server's keys, its tickets
//! (short ones by default, spec §7.3) and its connections across the
//! requests. `bench/split` replays its trace through a split proxy with it,
//! next to one new `httpcrypt fetch` process per request.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::BodyExt;
use httpcrypt::proto::outer::CookieForm;

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// A file with one URL per line (http://host:port/path), fetched in
    /// order; at most 100,000.
    #[arg(long)]
    urls: std::path::PathBuf,
    /// The server's mount path.
    #[arg(long, default_value = "/hc")]
    mount: String,
    /// Take v1 tickets (spec §7.2) instead of asking for short ones.
    #[arg(long)]
    v1_tickets: bool,
    /// Seconds any one request may take.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
}

/// Fetches every URL of the list and prints a JSON object: the requests,
/// the body bytes, the credential each request presented (`key`, `ticket`
/// or `short`: what its cookie carried) and each request's time in seconds.
pub fn run(a: ReplayArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.urls).with_context(|| a.urls.display().to_string())?;
    let urls = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(100_000)
        .map(|l| l.trim().parse::<http::Uri>().with_context(|| l.to_string()))
        .collect::<Result<Vec<_>>>()?;
    let mut config = httpcrypt::ClientConfig {
        mount: httpcrypt::proto::outer::Mount::new(&a.mount)?,
        ..Default::default()
    };
    if a.v1_tickets {
        config.short_tickets = None;
    }
    let client = httpcrypt::Client::new(config);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let limit = std::time::Duration::from_secs_f64(a.timeout);
    let (mut times, mut bytes) = (Vec::with_capacity(urls.len()), 0u64);
    let mut credentials = std::collections::BTreeMap::<&str, u64>::new();
    rt.block_on(async {
        for url in &urls {
            let started = Instant::now();
            let req = http::Request::get(url.clone()).body(Bytes::new())?;
            let rsp = tokio::time::timeout(limit, async {
                let rsp = client.send(req).await?;
                let credential = credential(&rsp);
                let status = rsp.status();
                let body = rsp
                    .into_body()
                    .collect()
                    .await
                    .map_err(httpcrypt::error::from_box)?
                    .to_bytes();
                anyhow::Ok((status, credential, body.len()))
            })
            .await
            .with_context(|| format!("{url}: no answer within {} s", a.timeout))?
            .with_context(|| url.to_string())?;
            let (status, credential, len) = rsp;
            if status != http::StatusCode::OK {
                bail!("{url}: status {status}");
            }
            times.push(started.elapsed().as_secs_f64());
            bytes += len as u64;
            *credentials.entry(credential).or_default() += 1;
        }
        anyhow::Ok(())
    })?;
    println!(
        "{}",
        serde_json::json!({
            "requests": times.len(),
            "bytes": bytes,
            "credentials": credentials,
            "times": times,
        })
    );
    Ok(())
}

/// What the request's outer cookie carried: `short`, `key` or `ticket`.
fn credential<B>(rsp: &http::Response<B>) -> &'static str {
    rsp.extensions()
        .get::<httpcrypt::client::OuterExchange>()
        .and_then(httpcrypt::client::OuterExchange::credential_form)
        .map_or("none", |form| match form {
            CookieForm::ShortTicket => "short",
            CookieForm::Key => "key",
            CookieForm::Ticket => "ticket",
        })
}
