//! ASAP options (spec/asap.md): TCP Fast Open and provenance checks on the
//! listener of `serve`/`gateway`, certificate issuing in `dns serve`, and
//! `fetch --asap`/`--tfo`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use httpcrypt::asap::{self, AsapDiscovery, Gate};
use httpcrypt::connect::Tfo;
use httpcrypt::dns::DnsDiscovery;
use httpcrypt::proto::provenance::{ProvenanceKey, ServerId};

/// Listener options of `serve` and `gateway`.
#[derive(Args, Clone)]
pub struct ListenOpts {
    /// TCP Fast Open: accept data in the SYN, with at most this many
    /// connections waiting for their handshake (0: off). Needs the server
    /// bit (2) in `net.ipv4.tcp_fastopen`.
    #[arg(long, default_value_t = 0)]
    pub tfo: u32,
    /// Accept SYN data without a Fast Open cookie; requires
    /// --provenance-key, whose check replaces the cookie.
    #[arg(long, requires = "provenance_key")]
    pub tfo_no_cookie: bool,
    /// Provenance key file shared with `dns serve` (see `dns provenance-key`):
    /// SYN data is answered at once only with a valid certificate.
    #[arg(long)]
    pub provenance_key: Option<PathBuf>,
    /// Seconds to wait for the handshake of SYN data without a valid
    /// certificate before closing the connection.
    #[arg(long, default_value_t = 3)]
    pub handshake_wait: u64,
    /// Bytes a connection verified by its certificate may be sent before
    /// its handshake completes, per byte its SYN carried (QUIC's
    /// anti-amplification factor); the rest of the answer waits for the
    /// client's ACK.
    #[arg(long, default_value_t = asap::gate::DEFAULT_EARLY_FACTOR)]
    pub early_factor: usize,
}

/// Reads a provenance key file.
pub fn read_key(path: &Path) -> Result<ProvenanceKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading provenance key {}", path.display()))?;
    ProvenanceKey::parse(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Writes a fresh provenance key to `path` (mode 0600, not overwriting).
pub fn write_key(path: &Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let key = ProvenanceKey::generate(&mut rand_core::OsRng);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{}", key.format().as_str())?;
    eprintln!("httpcrypt: wrote provenance key {}", path.display());
    Ok(())
}

/// Sets Fast Open on `listener` and builds the gate, as `o` says.
pub fn prepare_listener(
    o: &ListenOpts,
    listener: &tokio::net::TcpListener,
    keys: Option<&Path>,
) -> Result<Option<Arc<Gate>>> {
    if o.tfo > 0 {
        httpcrypt::sockopt::listen_fastopen(listener, o.tfo, o.tfo_no_cookie)
            .context("setting TCP_FASTOPEN on the listener")?;
        eprintln!(
            "httpcrypt: TCP Fast Open, queue {}{}",
            o.tfo,
            if o.tfo_no_cookie { ", no cookie" } else { "" }
        );
    }
    let Some(path) = &o.provenance_key else {
        return Ok(None);
    };
    let key = read_key(path)?;
    let dir = keys.context("--provenance-key needs --keys (the server identity)")?;
    let store = httpcrypt::keys::KeyStore::open(dir)
        .with_context(|| format!("opening key directory {}", dir.display()))?;
    let server = ServerId::of(&store.identity());
    Ok(Some(Arc::new(
        Gate::new(
            vec![key],
            server,
            Duration::from_secs(o.handshake_wait.max(1)),
        )
        .with_early_factor(o.early_factor),
    )))
}

/// `--tfo` values of `fetch`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TfoMode {
    /// Ordinary handshake.
    Off,
    /// Data in the SYN once the kernel holds a cookie for the server.
    Cookie,
    /// Data in the SYN without a cookie.
    NoCookie,
}

/// Client options of `fetch`.
#[derive(Args, Clone)]
pub struct FetchOpts {
    /// TCP Fast Open for the connection.
    #[arg(long, value_enum)]
    pub tfo: Option<TfoMode>,
    /// ASAP mode: keys, provenance certificate and address in one DNS round
    /// trip (through --resolver), then the request in the SYN
    /// (--tfo no-cookie unless given); falls back to the handshake by itself.
    #[arg(long, requires = "resolver")]
    pub asap: bool,
    /// Print `timing: first_byte_ms=… total_ms=…` on stderr (from before
    /// the DNS lookup to the response head and to the end of the body).
    #[arg(long)]
    pub timing: bool,
}

impl FetchOpts {
    /// Sets the ASAP fields of `config`; `dns` is the discovery's name
    /// server and per-query timeout.
    pub fn apply(
        &self,
        config: &mut httpcrypt::ClientConfig,
        dns: (Option<std::net::SocketAddr>, Duration),
    ) -> Result<()> {
        config.tfo = match self.tfo {
            Some(TfoMode::Off) => Tfo::Off,
            Some(TfoMode::Cookie) => Tfo::Cookie,
            Some(TfoMode::NoCookie) => Tfo::NoCookie,
            None if self.asap => Tfo::NoCookie,
            None => Tfo::Off,
        };
        if self.asap {
            let d = Arc::new(AsapDiscovery::new(Arc::new(DnsDiscovery::new(
                dns.0, dns.1,
            )?)));
            config.discovery = Some(d.clone());
            config.resolver = Some(d.clone());
            config.provenance = Some(d);
            config.options_fallback = true;
        }
        Ok(())
    }
}
