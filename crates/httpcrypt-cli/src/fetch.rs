//! `httpcrypt fetch`: a curl-like HTTPCrypt client. The body goes to stdout
//! record by record, only after each record verified (or to `-o FILE`,
//! which appears only once the whole stream verified); any protocol
//! failure ends with a non-zero exit.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use http_body_util::BodyExt;
use httpcrypt::client::OuterExchange;

#[derive(Args)]
pub struct FetchArgs {
    /// The inner target, e.g. http://127.0.0.1:8080/index.html
    pub url: http::Uri,
    /// The server's mount path.
    #[arg(long, default_value = "")]
    pub mount: String,
    /// Pinned identity key (base64url): authenticated mode.
    #[arg(long)]
    pub identity: Option<String>,
    /// HTTP forward proxy (also HTTP_PROXY / http_proxy).
    #[arg(long)]
    pub proxy: Option<http::Uri>,
    /// Request method.
    #[arg(short = 'X', long = "request", default_value = "GET")]
    pub method: String,
    /// Extra request field, "Name: value" (repeatable); sealed inside the
    /// request with every other field, never sent in the clear.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(short = 'd', long = "data", conflicts_with = "data_file")]
    pub data: Option<String>,
    /// Request body from a file (streamed).
    #[arg(long = "data-file")]
    pub data_file: Option<PathBuf>,
    /// Write the body here instead of stdout. It is written to a new
    /// temporary file beside FILE and renamed to FILE only after the whole
    /// response verified; on any failure the temporary file is removed and
    /// FILE is left as it was. (A FILE that exists and is not a regular
    /// file, such as /dev/null, is written directly.)
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Show what a middlebox sees next to the decrypted exchange (stderr).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Always use the POST form, even for small requests.
    #[arg(long)]
    pub no_get_form: bool,
    /// Keep the v1 layout even with a key that announces request profile 2
    /// (spec §4.5).
    #[arg(long)]
    pub no_compact: bool,
    /// Reuse one key pair per host (the server's session cache applies).
    #[arg(long)]
    pub reuse_key: bool,
    /// Print the inner response status and fields before the body.
    #[arg(short = 'i', long = "include")]
    pub include: bool,
    /// Send the request N times through one client (later requests resume
    /// with the server's ticket); prints one line per request on stderr,
    /// `request I: status S, credential key|ticket`, and the last body.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: Option<u32>,
    /// Protocol: HTTPCrypt v1, or rspamd's (as `rspamc --key`).
    #[arg(long, value_enum, default_value = "v1")]
    pub profile: crate::rspamd::Profile,
    /// rspamd profile: the server's public key (rspamd base32, what
    /// `rspamc --key` takes) or its `rspamadm keypair` file.
    #[arg(long)]
    pub server_key: Option<String>,
    #[command(flatten)]
    pub discovery: crate::dns::DiscoveryOpts,
    #[command(flatten)]
    pub asap: crate::asap::FetchOpts,
}

pub fn client_for(a: &FetchArgs) -> Result<httpcrypt::Client> {
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
        key_policy: if a.reuse_key {
            httpcrypt::KeyPolicy::ReusePerHost
        } else {
            httpcrypt::KeyPolicy::FreshPerRequest
        },
        ..Default::default()
    };
    a.discovery.apply(&mut config)?;
    a.asap.apply(&mut config, a.discovery.nameserver())?;
    Ok(httpcrypt::Client::new(config))
}

pub fn build_request(a: &FetchArgs) -> Result<http::request::Builder> {
    let method = if a.method == "GET" && (a.data.is_some() || a.data_file.is_some()) {
        "POST"
    } else {
        a.method.as_str()
    };
    let mut b = http::Request::builder().method(method).uri(a.url.clone());
    for h in &a.headers {
        let (n, v) = h
            .split_once(':')
            .with_context(|| format!("header {h:?} is not 'Name: value'"))?;
        b = b.header(n.trim(), v.trim());
    }
    Ok(b)
}

pub async fn run(a: FetchArgs) -> Result<i32> {
    if a.url.scheme_str() != Some("http") {
        bail!("fetch takes an http:// URL (HTTPCrypt replaces TLS)");
    }
    let client = client_for(&a)?;
    let started = std::time::Instant::now();
    let times = a.repeat.unwrap_or(1);
    for i in 1..times {
        let rsp = exchange(&client, &a).await?;
        report_repeat(&a, i, &rsp);
        let mut body = rsp.into_body();
        while let Some(frame) = body.frame().await {
            frame
                .map_err(httpcrypt::error::from_box)
                .context("response body")?;
        }
    }
    let rsp = exchange(&client, &a).await?;
    let first_byte = started.elapsed();
    report_repeat(&a, times, &rsp);
    let mut out = Sink::open(a.output.as_deref())?;
    if a.include {
        writeln!(out, "HTTP/1.1 {}", rsp.status())?;
        for (n, v) in rsp.headers() {
            writeln!(out, "{}: {}", n, String::from_utf8_lossy(v.as_bytes()))?;
        }
        writeln!(out)?;
    }
    let mut body = rsp.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(httpcrypt::error::from_box)
            .context("response body")?;
        if let Ok(data) = frame.into_data() {
            out.write_all(&data)?;
        }
    }
    out.finish()?;
    if a.asap.timing {
        eprintln!(
            "timing: first_byte_ms={:.3} total_ms={:.3}",
            first_byte.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(0)
}

/// Where a body goes: stdout, or `-o FILE` by way of a temporary file
/// beside FILE (a unique name, created exclusively) that becomes FILE only
/// in [`Sink::finish`], once the whole response verified. A sink dropped
/// unfinished (an integrity failure, a write error) removes its temporary
/// file, so FILE never holds a partial or unverified body.
pub enum Sink {
    /// Standard output.
    Stdout(std::io::Stdout),
    /// The temporary file and FILE.
    File {
        tmp: std::io::BufWriter<tempfile::NamedTempFile>,
        dest: PathBuf,
    },
    /// A FILE that is not a regular file (`/dev/null`, a pipe): written
    /// as it is, since it cannot be replaced by a rename.
    Special(std::fs::File),
}

impl Sink {
    /// A sink for `output` (stdout when `None`).
    pub fn open(output: Option<&Path>) -> Result<Sink> {
        let Some(dest) = output else {
            return Ok(Sink::Stdout(std::io::stdout()));
        };
        if std::fs::metadata(dest).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dest)
                .with_context(|| format!("opening {}", dest.display()))?;
            return Ok(Sink::Special(f));
        }
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = dest
            .file_name()
            .with_context(|| format!("{} names no file", dest.display()))?;
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".part");
        // Like a file the shell creates: 0666 less the umask (a temporary
        // file is 0600 otherwise).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder
            .tempfile_in(dir)
            .with_context(|| format!("creating a temporary file for {}", dest.display()))?;
        Ok(Sink::File {
            tmp: std::io::BufWriter::new(tmp),
            dest: dest.to_path_buf(),
        })
    }

    /// Flushes; a file sink's temporary file becomes FILE.
    pub fn finish(self) -> Result<()> {
        match self {
            Sink::Stdout(mut s) => Ok(s.flush()?),
            Sink::Special(mut f) => Ok(f.flush()?),
            Sink::File { tmp, dest } => {
                let tmp = tmp.into_inner().map_err(|e| e.into_error())?;
                tmp.as_file().sync_all()?;
                tmp.persist(&dest)
                    .map_err(|e| e.error)
                    .with_context(|| format!("renaming to {}", dest.display()))?;
                Ok(())
            }
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Stdout(s) => s.write(buf),
            Sink::File { tmp, .. } => tmp.write(buf),
            Sink::Special(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Stdout(s) => s.write_all(buf),
            Sink::File { tmp, .. } => tmp.write_all(buf),
            Sink::Special(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stdout(s) => s.flush(),
            Sink::File { tmp, .. } => tmp.flush(),
            Sink::Special(f) => f.flush(),
        }
    }
}

/// One request and its verified response head; a sealed protocol problem
/// (`urn:httpcrypt:…`) is an error, not a document.
async fn exchange(
    client: &httpcrypt::Client,
    a: &FetchArgs,
) -> Result<http::Response<httpcrypt::client::ResponseBody>> {
    let builder = build_request(a)?;
    let rsp = match &a.data_file {
        Some(path) => {
            let file = tokio::fs::File::open(path)
                .await
                .with_context(|| format!("opening {}", path.display()))?;
            let len = file.metadata().await?.len();
            let req = builder.body(file_body(file, len))?;
            client.send_streaming(req).await?
        }
        None => {
            let body = Bytes::from(a.data.clone().unwrap_or_default());
            client.send(builder.body(body)?).await?
        }
    };
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
/// outer cookie carried (a ticket's value is 115+ characters, a key's 43–59).
fn report_repeat<B>(a: &FetchArgs, i: u32, rsp: &http::Response<B>) {
    if a.repeat.is_none() {
        return;
    }
    let credential = rsp
        .extensions()
        .get::<OuterExchange>()
        .and_then(|x| x.request_headers.get(http::header::COOKIE))
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .and_then(|pair| pair.split_once('='))
        .map_or("none", |(_, v)| {
            if v.trim().len() >= 115 {
                "ticket"
            } else {
                "key"
            }
        });
    eprintln!(
        "request {i}: status {}, credential {credential}",
        rsp.status().as_u16()
    );
}

/// An error if the (authenticated) inner response is a problem document
/// of the protocol itself (`urn:httpcrypt:…`: integrity, replay, stale, …)
/// rather than an answer of the application.
pub fn refuse_inner_problem(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: Option<&[u8]>,
) -> Result<()> {
    let is_problem = headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == httpcrypt::proto::outer::PROBLEM_TYPE.as_bytes());
    if !is_problem {
        return Ok(());
    }
    let Some(p) = body.and_then(|b| httpcrypt::proto::outer::parse_problem(b).ok()) else {
        return Ok(());
    };
    if p.type_uri.starts_with("urn:httpcrypt:") {
        bail!(
            "the server reported a protocol failure (sealed, so it is the server's word): {} {}",
            status.as_u16(),
            p.type_uri
        );
    }
    Ok(())
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
