//! What `httpcrypt fetch` is asked ([`FetchArgs`]: curl's flags and the
//! protocol's), and the caller's request built from it, for either
//! profile's client.

use std::path::PathBuf;

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Args;

#[derive(Args)]
pub struct FetchArgs {
    /// The inner target, e.g. http://127.0.0.1:8080/index.html
    pub url: http::Uri,
    /// The server's mount path.
    #[arg(long, default_value = "")]
    pub mount: String,
    /// Pinned identity key (base64url): authenticated mode.
    /// A base64url key may begin with `-`: the value after the flag is
    /// always the key.
    #[arg(long, allow_hyphen_values = true)]
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
    /// Suite 2, the hybrid X25519 + ML-KEM-768 agreement (spec/hybrid.md):
    /// off (v1 only), prefer (suite 2 when the server offers it, asked at
    /// `OPTIONS {mount}/pq` or in DNS first), require (suite 2 or fail with
    /// hybrid_downgrade, exit code 35).
    #[arg(long, value_enum, default_value = "off")]
    pub pq: PqMode,
    /// Reuse one key pair per host (the server's session cache applies).
    #[arg(long)]
    pub reuse_key: bool,
    /// Never ask for short tickets (spec §7.3): resume with the v1
    /// tickets the server sends on each new connection (§7.2).
    #[arg(long)]
    pub v1_tickets: bool,
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
    /// `request I: status S, credential key|ticket|ticket (short)`, and
    /// the last body.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: Option<u32>,
    /// Protocol: HTTPCrypt v1, or rspamd's (as `rspamc --key`).
    #[arg(long, value_enum, default_value = "v1")]
    pub profile: crate::profile::Profile,
    /// rspamd profile: the server's public key (rspamd base32, what
    /// `rspamc --key` takes) or its `rspamadm keypair` file.
    #[arg(long)]
    pub server_key: Option<String>,
    #[command(flatten)]
    pub discovery: crate::dns::DiscoveryOpts,
    #[command(flatten)]
    pub asap: crate::asap::FetchOpts,
}

/// `--pq`: which suites `fetch` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PqMode {
    /// v1 only.
    Off,
    /// Suite 2 when offered, else v1.
    Prefer,
    /// Suite 2 or nothing.
    Require,
}

impl From<PqMode> for httpcrypt::client::Pq {
    fn from(m: PqMode) -> Self {
        match m {
            PqMode::Off => httpcrypt::client::Pq::Off,
            PqMode::Prefer => httpcrypt::client::Pq::Prefer,
            PqMode::Require => httpcrypt::client::Pq::Require,
        }
    }
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
