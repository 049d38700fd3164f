//! `httpcrypt fetch`: a curl-like HTTPCrypt client. The body goes to stdout
//! record by record, only after each record verified (or to `-o FILE`,
//! which appears only once the whole stream verified); any protocol
//! failure ends with a non-zero exit. Failures are diagnosed with the codes
//! every client shares (spec §12, "client diagnoses") and curl's exit codes
//! ([`EXIT_CODES`]).

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
    /// Request body; `@FILE` reads it from FILE (newlines dropped, as curl
    /// does); repeated, the parts are joined with `&`.
    #[arg(short = 'd', long = "data", conflicts_with = "data_file")]
    pub data: Vec<String>,
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
    /// Fail on an inner status of 400 or more: no body, exit code 22.
    #[arg(short = 'f', long = "fail")]
    pub fail: bool,
    /// Silent: no error messages, no progress meter.
    #[arg(short = 's', long = "silent")]
    pub silent: bool,
    /// With -s, still show error messages.
    #[arg(short = 'S', long = "show-error")]
    pub show_error: bool,
    /// Follow redirects (3xx with Location) to the same origin (scheme,
    /// host and port); others are not followed.
    #[arg(short = 'L', long = "location")]
    pub location: bool,
    /// Most redirects followed with -L (exit code 47 beyond).
    #[arg(long, default_value_t = 10)]
    pub max_redirs: u32,
    /// HEAD: print the inner status and fields only.
    #[arg(short = 'I', long = "head")]
    pub head: bool,
    /// Write the body to a file named like the URL's last path segment.
    #[arg(short = 'O', long = "remote-name", conflicts_with = "output")]
    pub remote_name: bool,
    /// After the transfer, print FORMAT to stdout: %{http_code},
    /// %{size_download}, %{time_total}, %{url_effective},
    /// %{num_redirects}, %{exitcode}; \n is a newline.
    #[arg(short = 'w', long = "write-out")]
    pub write_out: Option<String>,
    /// Seconds to wait for the TCP connection (0: no limit).
    #[arg(long, default_value_t = 10.0)]
    pub connect_timeout: f64,
    /// Seconds the whole transfer may take (0: no limit).
    #[arg(short = 'm', long, default_value_t = 0.0)]
    pub max_time: f64,
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
        connect_timeout: (a.connect_timeout > 0.0)
            .then(|| std::time::Duration::from_secs_f64(a.connect_timeout)),
        ..Default::default()
    };
    a.discovery.apply(&mut config)?;
    a.asap.apply(&mut config, a.discovery.nameserver())?;
    Ok(httpcrypt::Client::new(config))
}

pub fn build_request(a: &FetchArgs) -> Result<http::request::Builder> {
    let method = if a.method == "GET" && (!a.data.is_empty() || a.data_file.is_some()) {
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

/// `--help` text: the exit codes, as curl's.
pub const EXIT_CODES: &str = "\
Exit codes (curl's numbers):
  0   success (with -f: an inner status below 400)
  1   any other failure (a protocol failure the server reported, say)
  3   malformed URL
  6   the host name did not resolve (connect_failed)
  7   cannot connect (connect_failed)
  22  -f and an inner status of 400 or more
  23  cannot write the output
  26  cannot read a local file (-d @FILE, --data-file)
  28  timed out (--connect-timeout, --max-time) (timeout)
  35  not an HTTPCrypt server, or no endpoint at --mount (not_httpcrypt, no_endpoint)
  47  more redirects than --max-redirs
  60  the certificates are not signed by the pinned identity (bad_signature)
Errors name their diagnosis code (spec §12, client diagnoses), e.g.
  httpcrypt: connect_failed: cannot connect to 127.0.0.1:8080: Connection refused";

/// A failed fetch: its exit code, its diagnosis code (spec §12) if any,
/// and the message.
#[derive(Debug)]
pub struct Failure {
    pub exit: i32,
    pub code: Option<&'static str>,
    pub message: String,
}

impl Failure {
    fn new(exit: i32, code: Option<&'static str>, message: impl Into<String>) -> Self {
        Failure {
            exit,
            code,
            message: message.into(),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::new(1, None, format!("{e:#}"))
    }
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

fn secs(d: f64) -> String {
    if d.fract() == 0.0 {
        format!("{d:.0}")
    } else {
        format!("{d}")
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

/// The host and port of an `http://` URL (port 80 by default).
fn host_port(url: &http::Uri) -> String {
    let host = url.host().unwrap_or_default();
    format!("{host}:{}", url.port_u16().unwrap_or(80))
}

/// Names a failure (spec §12, client diagnoses); `options`: of the
/// `OPTIONS` request for the certificates (only its refusal says that the
/// server is not an HTTPCrypt server or that the mount is wrong).
fn diagnose(e: httpcrypt::Error, a: &FetchArgs, url: &http::Uri, options: bool) -> Failure {
    let hp = host_port(url);
    // OPTIONS goes to `{mount}/`; the mount is named as the user gave it.
    let options_path = format!("{}/", a.mount.trim_end_matches('/'));
    let mount = if a.mount.is_empty() {
        "/"
    } else {
        a.mount.as_str()
    };
    match &e {
        httpcrypt::Error::Refused {
            status: 404,
            type_uri,
        } if options && type_uri.is_empty() => Failure::new(
            35,
            Some("no_endpoint"),
            format!("no HTTPCrypt endpoint at {mount} on {hp}: wrong --mount?"),
        ),
        httpcrypt::Error::Refused { status, type_uri } if options && type_uri.is_empty() => {
            Failure::new(
                35,
                Some("not_httpcrypt"),
                format!(
                    "{hp} is not an HTTPCrypt server (OPTIONS {options_path} answered {status})"
                ),
            )
        }
        httpcrypt::Error::RefusedText { status, .. } if options => Failure::new(
            35,
            Some("not_httpcrypt"),
            format!("{hp} is not an HTTPCrypt server (OPTIONS {options_path} answered {status})"),
        ),
        httpcrypt::Error::Protocol(p) if p.code() == "bad_signature" => Failure::new(
            60,
            Some("bad_signature"),
            "the certificates are not signed by the pinned identity",
        ),
        httpcrypt::Error::Transport(t) => {
            // The connect error sits a few sources down.
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(t.as_ref());
            let mut text = Vec::new();
            let mut io_kind = None;
            for _ in 0..16 {
                let Some(c) = cause else { break };
                text.push(c.to_string());
                if let Some(io) = c.downcast_ref::<std::io::Error>() {
                    io_kind = Some((io.kind(), io.to_string()));
                }
                cause = c.source();
            }
            let joined = text.join(": ");
            if joined.contains("dns error") {
                let reason = text.last().cloned().unwrap_or_default();
                return Failure::new(
                    6,
                    Some("connect_failed"),
                    format!(
                        "cannot connect to {hp}: cannot resolve {}: {reason}",
                        url.host().unwrap_or_default()
                    ),
                );
            }
            match io_kind {
                Some((std::io::ErrorKind::TimedOut, _)) if joined.contains("connect") => {
                    Failure::new(
                        28,
                        Some("timeout"),
                        format!(
                            "timed out after {} s while connecting to {hp}",
                            secs(a.connect_timeout)
                        ),
                    )
                }
                Some((_, reason)) if joined.contains("tcp connect") => Failure::new(
                    7,
                    Some("connect_failed"),
                    format!("cannot connect to {hp}: {reason}"),
                ),
                _ => Failure::new(1, None, e.to_string()),
            }
        }
        httpcrypt::Error::Protocol(_) if a.identity.is_none() => {
            // A 200 to OPTIONS without a certificate list.
            Failure::new(1, None, e.to_string())
        }
        _ => Failure::new(1, None, e.to_string()),
    }
}

/// The request body of `-d` (joined with `&`, `@FILE` read) as curl builds it.
impl FetchArgs {
    pub fn data_bytes(&self) -> Result<Option<Bytes>> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let mut parts = Vec::new();
        for d in &self.data {
            match d.strip_prefix('@') {
                Some(path) => {
                    let mut bytes =
                        std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
                    // curl's -d drops carriage returns and newlines of a file.
                    bytes.retain(|b| *b != b'\r' && *b != b'\n');
                    parts.push(bytes);
                }
                None => parts.push(d.as_bytes().to_vec()),
            }
        }
        Ok(Some(Bytes::from(parts.join(&b'&'))))
    }
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
        client
            .refresh_certs("http", authority)
            .await
            .map_err(|e| diagnose(e, a, &a.url, true))?;
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
