//! `httpcrypt fetch`: a curl-like HTTPCrypt client. The body goes to stdout
//! record by record, only after each record verified (or to `-o FILE`,
//! which appears only once the whole stream verified); any protocol
//! failure ends with a non-zero exit. Failures are diagnosed with the codes
//! every client shares (spec §12, "client diagnoses") and curl's exit codes
//! (`diagnose.rs`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::BodyExt;
use httpcrypt::client::OuterExchange;
use httpcrypt::proto::outer::CookieForm;

use crate::diagnose::{diagnose, secs, Failure};
use crate::output::{refuse_inner_problem, Sink};
use crate::request::{build_request, FetchArgs};

pub fn client_for(a: &FetchArgs) -> Result<httpcrypt::Client> {
    Ok(httpcrypt::Client::new(config_for(a)?))
}

/// The client's settings for `a`.
fn config_for(a: &FetchArgs) -> Result<httpcrypt::ClientConfig> {
    let host = a.url.host().context("URL needs a host")?;
    let proxy = a
        .proxy
        .clone()
        .or_else(|| httpcrypt::connect::proxy_from_env(host));
    let identity = a
        .identity
        .as_deref()
        .map(httpcrypt::proto::IdentityPublic::from_b64)
        .transpose()
        .context("--identity")?;
    let mut config = httpcrypt::ClientConfig {
        mount: httpcrypt::proto::outer::Mount::new(&a.mount)?,
        identity,
        proxy,
        get_form: !a.no_get_form,
        compact: !a.no_compact,
        pq: a.pq.into(),
        key_policy: if a.reuse_key {
            httpcrypt::KeyPolicy::ReusePerHost
        } else {
            httpcrypt::KeyPolicy::FreshPerRequest
        },
        // One request per process (without --repeat): a ticket could never
        // be presented.
        one_shot: a.repeat.unwrap_or(1) <= 1,
        connect_timeout: (a.connect_timeout > 0.0)
            .then(|| std::time::Duration::from_secs_f64(a.connect_timeout)),
        ..Default::default()
    };
    if a.v1_tickets {
        config.short_tickets = None;
    }
    a.discovery.apply(&mut config)?;
    a.asap.apply(&mut config, a.discovery.nameserver())?;
    Ok(config)
}

/// Where a fetch is, for the `timeout` diagnosis.
#[derive(Debug, Clone, Default)]
struct Phase(std::sync::Arc<std::sync::Mutex<&'static str>>);

impl Phase {
    fn set(&self, p: &'static str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }
    fn get(&self) -> &'static str {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs a fetch; failures are reported on stderr (unless `-s` without
/// `-S`) and become the exit code.
pub async fn run(a: FetchArgs) -> Result<i32> {
    let quiet = a.silent && !a.show_error;
    let started = std::time::Instant::now();
    let phase = Phase::default();
    phase.set("connecting");
    let work = run_phases(&a, &phase, started);
    let result = if a.max_time > 0.0 {
        match tokio::time::timeout(std::time::Duration::from_secs_f64(a.max_time), work).await {
            Ok(r) => r,
            Err(_) => Err(Failure::new(
                28,
                Some("timeout"),
                format!(
                    "timed out after {} s while {}",
                    secs(a.max_time),
                    phase.get()
                ),
            )),
        }
    } else {
        work.await
    };
    let (exit, code, written) = match result {
        Ok(w) => (0, w.status, Some(w)),
        Err(f) => {
            if !quiet {
                match f.code {
                    Some(c) => eprintln!("httpcrypt: {c}: {}", f.message),
                    None => eprintln!("httpcrypt: {}", f.message),
                }
            }
            (f.exit, 0, None)
        }
    };
    if let Some(fmt) = &a.write_out {
        let w = written.unwrap_or_default();
        let text = write_out(fmt, code, &w, started.elapsed().as_secs_f64(), exit);
        let mut out = std::io::stdout();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
    Ok(exit)
}

/// What `-w` reports of a transfer.
#[derive(Debug, Default)]
struct Written {
    status: u16,
    bytes: u64,
    url: String,
    redirects: u32,
}

fn write_out(fmt: &str, status: u16, w: &Written, total: f64, exit: i32) -> String {
    fmt.replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("%{http_code}", &format!("{status:03}"))
        .replace("%{response_code}", &format!("{status:03}"))
        .replace("%{size_download}", &w.bytes.to_string())
        .replace("%{time_total}", &format!("{total:.6}"))
        .replace("%{url_effective}", &w.url)
        .replace("%{num_redirects}", &w.redirects.to_string())
        .replace("%{exitcode}", &exit.to_string())
}

async fn run_phases(
    a: &FetchArgs,
    phase: &Phase,
    started: std::time::Instant,
) -> Result<Written, Failure> {
    if a.url.scheme_str() != Some("http") || a.url.host().is_none() {
        return Err(Failure::new(
            3,
            None,
            "fetch takes an http:// URL with a host (HTTPCrypt replaces TLS)",
        ));
    }
    let data = a
        .data_bytes()
        .map_err(|e| Failure::new(26, None, format!("{e:#}")))?;
    let client = client_for(a)?;
    if client.config().discovery.is_none() {
        // The certificates first, as the client would fetch them anyway:
        // a refusal of this OPTIONS is then told apart from one of the
        // request (not an HTTPCrypt server, a wrong mount, another identity).
        let authority = a.url.authority().map_or("", |au| au.as_str());
        phase.set("fetching the certificates");
        // Suite 2 first when wanted (spec/hybrid.md H4): `OPTIONS {mount}/pq`;
        // v1's `OPTIONS {mount}/` only when the server offers no suite 2.
        let hybrid = if a.pq == crate::request::PqMode::Off {
            None
        } else {
            client
                .refresh_pq("http", authority)
                .await
                .map_err(|e| diagnose(e, a, &a.url, false))?
        };
        if hybrid.is_none() {
            client
                .refresh_certs("http", authority)
                .await
                .map_err(|e| diagnose(e, a, &a.url, true))?;
        }
    }
    let times = a.repeat.unwrap_or(1);
    for i in 1..times {
        let rsp = exchange(&client, a, &a.url, data.clone(), phase).await?;
        report_repeat(a, i, &rsp);
        let mut body = rsp.into_body();
        while let Some(frame) = body.frame().await {
            frame
                .map_err(httpcrypt::error::from_box)
                .context("response body")?;
        }
    }
    let mut url = a.url.clone();
    let mut redirects = 0;
    let rsp = loop {
        let rsp = exchange(&client, a, &url, data.clone(), phase).await?;
        let next = if a.location && rsp.status().is_redirection() {
            rsp.headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| resolve_location(&url, l))
        } else {
            None
        };
        let Some(next) = next else { break rsp };
        if next.scheme() != url.scheme() || next.authority() != url.authority() {
            if !a.silent {
                eprintln!("httpcrypt: not following a redirect to another origin: {next}");
            }
            break rsp;
        }
        if redirects >= a.max_redirs {
            return Err(Failure::new(
                47,
                None,
                format!("more than {} redirects (--max-redirs)", a.max_redirs),
            ));
        }
        redirects += 1;
        url = next;
    };
    let first_byte = started.elapsed();
    report_repeat(a, times, &rsp);
    let status = rsp.status().as_u16();
    if a.fail && status >= 400 {
        return Err(Failure::new(
            22,
            None,
            format!("the server answered {status} (-f)"),
        ));
    }
    let output = match (&a.output, a.remote_name) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => {
            let name = url.path().rsplit('/').next().unwrap_or_default();
            if name.is_empty() || name == "." || name == ".." {
                return Err(Failure::new(23, None, format!("-O: no file name in {url}")));
            }
            Some(PathBuf::from(name))
        }
        (None, false) => None,
    };
    let mut out =
        Sink::open(output.as_deref()).map_err(|e| Failure::new(23, None, format!("{e:#}")))?;
    let write_err =
        |e: std::io::Error| Failure::new(23, None, format!("cannot write the output: {e}"));
    if a.include || a.head {
        writeln!(out, "HTTP/1.1 {}", rsp.status()).map_err(write_err)?;
        for (n, v) in rsp.headers() {
            writeln!(out, "{}: {}", n, String::from_utf8_lossy(v.as_bytes())).map_err(write_err)?;
        }
        writeln!(out).map_err(write_err)?;
    }
    phase.set("reading the response body");
    let total = rsp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let mut meter = Progress::new(a, output.is_some(), total);
    let mut bytes = 0u64;
    let mut body = rsp.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(httpcrypt::error::from_box)
            .context("response body")?;
        if let Ok(data) = frame.into_data() {
            bytes += data.len() as u64;
            out.write_all(&data).map_err(write_err)?;
            meter.update(bytes);
        }
    }
    meter.finish(bytes);
    out.finish()
        .map_err(|e| Failure::new(23, None, format!("cannot write the output: {e:#}")))?;
    if a.asap.timing {
        eprintln!(
            "timing: first_byte_ms={:.3} total_ms={:.3}",
            first_byte.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(Written {
        status,
        bytes,
        url: url.to_string(),
        redirects,
    })
}

/// A `Location` value against the URL it answered.
fn resolve_location(base: &http::Uri, location: &str) -> Option<http::Uri> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().ok();
    }
    let authority = base.authority()?.as_str();
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    format!("http://{authority}{path}").parse().ok()
}

/// curl's progress meter, on stderr, only when stderr is a terminal and
/// the body is not going to it.
struct Progress {
    on: bool,
    total: Option<u64>,
    last: std::time::Instant,
    start: std::time::Instant,
}

impl Progress {
    fn new(a: &FetchArgs, to_file: bool, total: Option<u64>) -> Self {
        use std::io::IsTerminal;
        let on = !a.silent
            && std::io::stderr().is_terminal()
            && (to_file || !std::io::stdout().is_terminal());
        let now = std::time::Instant::now();
        Progress {
            on,
            total,
            last: now,
            start: now,
        }
    }

    fn update(&mut self, bytes: u64) {
        if !self.on || self.last.elapsed() < std::time::Duration::from_millis(200) {
            return;
        }
        self.last = std::time::Instant::now();
        self.show(bytes);
    }

    fn show(&self, bytes: u64) {
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        let rate = bytes as f64 / secs / 1e6;
        match self.total {
            Some(t) if t > 0 => eprint!(
                "\r{:5.1}%  {:>10} of {} bytes  {rate:7.2} MB/s ",
                bytes as f64 * 100.0 / t as f64,
                bytes,
                t
            ),
            _ => eprint!("\r{bytes:>10} bytes  {rate:7.2} MB/s "),
        }
    }

    fn finish(&self, bytes: u64) {
        if self.on && self.start.elapsed() > std::time::Duration::from_millis(200) {
            self.show(bytes);
            eprintln!();
        }
    }
}

/// One request and its verified response head; a sealed protocol problem
/// (`urn:httpcrypt:…`) is an error, not a document.
async fn exchange(
    client: &httpcrypt::Client,
    a: &FetchArgs,
    url: &http::Uri,
    data: Option<Bytes>,
    phase: &Phase,
) -> Result<http::Response<httpcrypt::client::ResponseBody>, Failure> {
    let mut builder = build_request(a)?.uri(url.clone());
    if a.head {
        builder = builder.method(http::Method::HEAD);
    }
    let no_ctype = builder
        .headers_ref()
        .is_some_and(|h| !h.contains_key(http::header::CONTENT_TYPE));
    if data.is_some() && no_ctype {
        // As curl's -d.
        builder = builder.header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        );
    }
    phase.set("waiting for the response");
    let rsp = match &a.data_file {
        Some(path) => {
            let file = tokio::fs::File::open(path).await.map_err(|e| {
                Failure::new(26, None, format!("cannot read {}: {e}", path.display()))
            })?;
            let len = file
                .metadata()
                .await
                .map_err(|e| {
                    Failure::new(26, None, format!("cannot read {}: {e}", path.display()))
                })?
                .len();
            let req = builder
                .body(file_body(file, len))
                .map_err(anyhow::Error::from)?;
            client.send_streaming(req).await
        }
        None => {
            let req = builder
                .body(data.unwrap_or_default())
                .map_err(anyhow::Error::from)?;
            client.send(req).await
        }
    }
    .map_err(|e| diagnose(e, a, url, false))?;
    if a.verbose {
        if let Some(source) = a
            .url
            .authority()
            .and_then(|au| client.key_source(au.as_str()))
        {
            eprintln!("* server key from {source}");
        }
        if let Some(x) = rsp.extensions().get::<OuterExchange>() {
            show_outer(x);
            if x.suite == httpcrypt::client::Suite::Hybrid {
                eprintln!("* suite 2 (X25519 + ML-KEM-768, spec/hybrid.md)");
            }
        }
        eprintln!("* decrypted response:");
        eprintln!("< HTTP/1.1 {}", rsp.status());
        for (n, v) in rsp.headers() {
            eprintln!("< {}: {}", n, String::from_utf8_lossy(v.as_bytes()));
        }
        eprintln!("<");
    }
    // A protocol failure the server reported inside (sealed, so authentic)
    // is a failure of the fetch, not a document to print.
    let is_problem = rsp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == httpcrypt::proto::outer::PROBLEM_TYPE.as_bytes());
    let mut rsp = rsp;
    if is_problem {
        let (parts, body) = rsp.into_parts();
        let bytes = http_body_util::Limited::new(body, 64 * 1024)
            .collect()
            .await
            .map_err(httpcrypt::error::from_box)
            .context("response body")?
            .to_bytes();
        refuse_inner_problem(parts.status, &parts.headers, Some(&bytes))?;
        rsp = http::Response::from_parts(
            parts,
            http_body_util::Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
    }
    Ok(rsp)
}

/// The `--repeat` line for request `i`: its inner status and what the
/// outer cookie carried (spec §7.3 tells the forms by the value's length).
fn report_repeat<B>(a: &FetchArgs, i: u32, rsp: &http::Response<B>) {
    if a.repeat.is_none() {
        return;
    }
    let credential = rsp
        .extensions()
        .get::<OuterExchange>()
        .and_then(OuterExchange::credential_form)
        .map_or("none", |form| match form {
            CookieForm::ShortTicket => "ticket (short)",
            CookieForm::Key => "key",
            CookieForm::Ticket => "ticket",
        });
    eprintln!(
        "request {i}: status {}, credential {credential}",
        rsp.status().as_u16()
    );
}

fn show_outer(x: &OuterExchange) {
    eprintln!("* what a middlebox sees:");
    eprintln!(
        "> {} {} HTTP/1.1",
        x.method,
        x.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    for (n, v) in &x.request_headers {
        eprintln!("> {}: {}", n, String::from_utf8_lossy(v.as_bytes()));
    }
    eprintln!(">");
    eprintln!("< HTTP/1.1 {}", x.status);
    for (n, v) in &x.response_headers {
        eprintln!("< {}: {}", n, String::from_utf8_lossy(v.as_bytes()));
    }
    eprintln!("<");
    if x.attempts > 1 {
        eprintln!("* {} attempts (one retry)", x.attempts);
    }
}

pin_project_lite::pin_project! {
    /// A streamed body whose total length is known (so the request keeps a
    /// fixed record layout and a Content-Length).
    pub struct SizedBody<B> {
        #[pin]
        inner: B,
        len: u64,
    }
}

impl<B: http_body::Body> http_body::Body for SizedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

/// A file as a body, 64 KiB at a time.
pub fn file_body(
    file: tokio::fs::File,
    len: u64,
) -> SizedBody<impl http_body::Body<Data = Bytes, Error = std::io::Error> + Send + 'static> {
    use futures_util::StreamExt;
    let frames = tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024)
        .map(|r| r.map(http_body::Frame::data));
    SizedBody {
        inner: http_body_util::StreamBody::new(frames),
        len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> FetchArgs {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            fetch: FetchArgs,
        }
        let mut all = vec!["fetch"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).unwrap().fetch
    }

    /// A fetch of one request declines tickets (spec §7.3); with --repeat
    /// it keeps them for its later requests.
    #[test]
    fn one_request_is_one_shot() {
        let c = config_for(&args(&["http://example.org/"])).unwrap();
        assert!(c.one_shot);
        let c = config_for(&args(&["--repeat", "1", "http://example.org/"])).unwrap();
        assert!(c.one_shot);
        let c = config_for(&args(&["--repeat", "2", "http://example.org/"])).unwrap();
        assert!(!c.one_shot);
    }

    /// A pinned identity whose base64url begins with `-` is the flag's
    /// value, not another flag.
    #[test]
    fn an_identity_may_begin_with_a_hyphen() {
        let key = "-Ky86kOPOW0aMMtX8RsPQwlyU7O0RpG1pwXTXLdtuEK";
        let a = args(&["--identity", key, "http://example.org/"]);
        assert_eq!(a.identity.as_deref(), Some(key));
    }
}
