//! `httpcrypt dns …`: publishing a key directory in the DNS (zone-file
//! lines, RFC 2136 updates, an embedded authoritative server), plus the
//! options that `serve`/`gateway` (publication at every rotation) and
//! `fetch`/`certs` (discovery) share.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use httpcrypt::dns::{self, Authority, DnsDiscovery, Publication, Tsig, UpdateTarget};
use httpcrypt::keys::{self, KeyStore, LiveKeys};
use zeroize::Zeroizing;

/// Publish keys in the DNS.
#[derive(Args)]
pub struct DnsArgs {
    #[command(subcommand)]
    cmd: DnsCmd,
}

#[derive(Subcommand)]
enum DnsCmd {
    /// Print zone-file lines (TXT, AAAA set, TLSA, identity TXT) for the
    /// certificates in a key directory.
    Records(RecordsArgs),
    /// Replace the records in a zone by RFC 2136 dynamic update (TSIG-signed).
    Publish(PublishArgs),
    /// Run an authoritative DNS server (UDP and TCP) for the records,
    /// following the key directory as a running server rotates it.
    Serve(ServeArgs),
    /// Write a new provenance key file for `dns serve` and `serve`/`gateway`
    /// `--provenance-key` (spec/asap.md).
    ProvenanceKey {
        /// File to create.
        #[arg(long)]
        out: PathBuf,
    },
}

/// The host whose records are made.
#[derive(Args, Clone)]
struct Names {
    /// Key directory (see `httpcrypt keygen`).
    #[arg(long)]
    keys: PathBuf,
    /// Host name clients connect to (the records go under it).
    #[arg(long)]
    host: Option<String>,
    /// TCP port of the HTTPCrypt service (TLSA owner `_{port}._tcp.{host}`).
    #[arg(long, default_value_t = 80)]
    port: u16,
    /// Record TTL in seconds: the server's rotation period R (spec §6.6).
    #[arg(long, default_value_t = 3600)]
    ttl: u32,
    /// Also publish A/AAAA records of the host (repeatable).
    #[arg(long)]
    address: Vec<std::net::IpAddr>,
}

impl Names {
    fn publication(&self, default_host: Option<&str>) -> Result<Publication> {
        let host = self
            .host
            .as_deref()
            .or(default_host)
            .context("--host is required")?;
        Ok(Publication::new(host, self.port, self.ttl)?)
    }
}

#[derive(Args)]
struct RecordsArgs {
    #[command(flatten)]
    names: Names,
}

/// A TSIG key for RFC 2136 updates.
#[derive(Args, Clone)]
pub struct TsigArgs {
    /// TSIG key name.
    #[arg(long)]
    tsig_name: Option<String>,
    /// TSIG secret, base64 (as in `tsig-keygen` or `keymgr -t` output).
    /// On the command line it is visible to every local user (ps,
    /// /proc/PID/cmdline): prefer --tsig-secret-file or the environment.
    #[arg(long, env = "HTTPCRYPT_TSIG_SECRET", hide_env_values = true)]
    tsig_secret: Option<String>,
    /// File holding the TSIG secret: the base64 secret alone, or a BIND key
    /// file as `tsig-keygen` writes it (its `secret "…";` is used).
    #[arg(long, conflicts_with = "tsig_secret")]
    tsig_secret_file: Option<PathBuf>,
    /// TSIG algorithm: hmac-sha256, hmac-sha384 or hmac-sha512.
    #[arg(long, default_value = "hmac-sha256")]
    tsig_alg: String,
}

impl TsigArgs {
    fn tsig(&self) -> Result<Option<Tsig>> {
        let secret = match (&self.tsig_secret, &self.tsig_secret_file) {
            (Some(s), _) => {
                if secret_on_command_line() {
                    eprintln!(
                        "httpcrypt: warning: --tsig-secret on the command line is visible to \
                         every local user (ps, /proc/PID/cmdline); use --tsig-secret-file or \
                         HTTPCRYPT_TSIG_SECRET"
                    );
                }
                Some(Zeroizing::new(s.clone()))
            }
            (None, Some(path)) => Some(read_tsig_secret(path)?),
            (None, None) => None,
        };
        match (&self.tsig_name, secret) {
            (Some(n), Some(s)) => Ok(Some(Tsig::new(n, &s, &self.tsig_alg)?)),
            (None, None) => Ok(None),
            _ => bail!("--tsig-name goes with --tsig-secret-file (or --tsig-secret)"),
        }
    }
}

/// Whether `--tsig-secret` was given as an argument (not by environment).
fn secret_on_command_line() -> bool {
    std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == "--tsig-secret" || a.starts_with("--tsig-secret=")
    })
}

/// The secret of a TSIG key file: a BIND `key` clause's `secret "…";`, or
/// the whole file as base64.
fn read_tsig_secret(path: &Path) -> Result<Zeroizing<String>> {
    let text = Zeroizing::new(
        std::fs::read_to_string(path)
            .with_context(|| format!("reading TSIG secret {}", path.display()))?,
    );
    let secret = text
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("secret"))
        .and_then(|rest| rest.split('"').nth(1))
        .unwrap_or(text.trim());
    if secret.is_empty() {
        bail!("{}: no TSIG secret", path.display());
    }
    Ok(Zeroizing::new(secret.to_string()))
}

#[derive(Args)]
struct PublishArgs {
    #[command(flatten)]
    names: Names,
    /// The zone's primary server, e.g. 127.0.0.1:53.
    #[arg(long)]
    server: SocketAddr,
    /// The zone to update (the host must be in it).
    #[arg(long)]
    zone: String,
    #[command(flatten)]
    tsig: TsigArgs,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    names: Names,
    /// The zone to serve (the host defaults to its apex).
    #[arg(long)]
    zone: String,
    /// Address for UDP and TCP.
    #[arg(long, default_value = "127.0.0.1:5353")]
    listen: SocketAddr,
    /// Seconds between re-reads of the key directory.
    #[arg(long, default_value_t = 5)]
    reload: u64,
    /// Issue provenance certificates (`TXT _hcpc.{host}`) under this key
    /// file, shared with the HTTP server (spec/asap.md).
    #[arg(long)]
    provenance_key: Option<PathBuf>,
    /// Seconds a provenance certificate stays valid.
    #[arg(long, default_value_t = 600)]
    provenance_lifetime: u32,
    /// Largest EDNS UDP payload honoured (answers beyond the size a query
    /// allows, 512 bytes without EDNS, are truncated with TC set).
    #[arg(long, default_value_t = dns::limit::DEFAULT_EDNS_MAX)]
    edns_max: u16,
    /// UDP responses per second per source /24 (IPv4) or /56 (IPv6);
    /// 0 turns response rate limiting off.
    #[arg(long, default_value_t = dns::limit::DEFAULT_RATE)]
    rrl_rate: u32,
    /// Every Nth response over the rate is sent as an empty truncated
    /// answer (the client retries over TCP) instead of dropped; 0 drops all.
    #[arg(long, default_value_t = dns::limit::DEFAULT_SLIP)]
    rrl_slip: u32,
    /// Most source prefixes tracked by the rate limit at once.
    #[arg(long, default_value_t = dns::limit::DEFAULT_PREFIXES)]
    rrl_prefixes: usize,
}

/// Options of `serve`/`gateway`: publish by RFC 2136 at every rotation.
#[derive(Args, Clone)]
pub struct PublishOpts {
    /// Primary server of the zone to update at every rotation.
    #[arg(long, requires = "publish_zone")]
    publish_server: Option<SocketAddr>,
    /// Zone to update.
    #[arg(long)]
    publish_zone: Option<String>,
    /// Host name the records are for (default: the zone apex).
    #[arg(long)]
    publish_host: Option<String>,
    /// Port for the TLSA name (default: the listening port).
    #[arg(long)]
    publish_port: Option<u16>,
    #[command(flatten)]
    tsig: TsigArgs,
}

/// Starts publication for a running server, if asked for.
pub fn start_publisher(
    opts: &PublishOpts,
    keys: &Path,
    live: &LiveKeys,
    rotation: u64,
    listen_port: u16,
) -> Result<()> {
    let Some(server) = opts.publish_server else {
        return Ok(());
    };
    let zone = opts.publish_zone.as_deref().context("--publish-zone")?;
    let host = opts.publish_host.as_deref().unwrap_or(zone);
    let ttl = u32::try_from(rotation).unwrap_or(u32::MAX);
    let publication = Publication::new(host, opts.publish_port.unwrap_or(listen_port), ttl)?;
    let store = open(keys)?;
    let identity = httpcrypt::proto::IdentityKey::from_seed(*store.identity_key().to_seed());
    let target = UpdateTarget {
        server,
        zone: dns::records::fqdn(zone)?,
        tsig: opts.tsig.tsig()?,
        timeout: Duration::from_secs(5),
    };
    eprintln!("httpcrypt: publishing keys for {host} in zone {zone} at {server}");
    dns::update::spawn_publisher(live.clone(), identity, publication, target);
    Ok(())
}

/// How `fetch`/`certs` find keys.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// DNS only (TXT, AAAA, TLSA); no fallback.
    Dns,
    /// `OPTIONS {mount}/` only.
    Http,
    /// DNS, then `OPTIONS`.
    Auto,
}

/// Discovery options of `fetch` and `certs`.
#[derive(Args, Clone)]
pub struct DiscoveryOpts {
    /// Key discovery: dns, http or auto (default: auto with --resolver, else http).
    #[arg(long, value_enum)]
    discovery: Option<Method>,
    /// DNS server for discovery and for the host's address (default: the system's).
    #[arg(long)]
    resolver: Option<SocketAddr>,
    /// Authenticated mode with the identity key from a DNSSEC-validated
    /// `_httpcrypt-id` record (the resolver must set the AD bit).
    #[arg(long, conflicts_with = "identity")]
    dnssec_identity: bool,
    /// Seconds to wait for each DNS answer.
    #[arg(long, default_value_t = 3)]
    dns_timeout: u64,
}

impl DiscoveryOpts {
    /// The name server (`--resolver`) and per-query timeout.
    pub fn nameserver(&self) -> (Option<SocketAddr>, Duration) {
        (self.resolver, Duration::from_secs(self.dns_timeout.max(1)))
    }

    /// Sets the discovery fields of `config`.
    pub fn apply(&self, config: &mut httpcrypt::ClientConfig) -> Result<()> {
        let method = self.discovery.unwrap_or(if self.resolver.is_some() {
            Method::Auto
        } else {
            Method::Http
        });
        config.require_identity = self.dnssec_identity;
        if self.dnssec_identity && method == Method::Http {
            bail!("--dnssec-identity needs DNS discovery (--discovery dns or auto)");
        }
        if method == Method::Http {
            return Ok(());
        }
        let d = Arc::new(DnsDiscovery::new(
            self.resolver,
            Duration::from_secs(self.dns_timeout.max(1)),
        )?);
        config.discovery = Some(d.clone());
        config.options_fallback = method == Method::Auto;
        if self.resolver.is_some() {
            config.resolver = Some(d);
        }
        Ok(())
    }
}

fn open(dir: &Path) -> Result<KeyStore> {
    KeyStore::open(dir).with_context(|| format!("opening key directory {}", dir.display()))
}

fn current_sets(store: &KeyStore, p: &Publication) -> Result<Vec<dns::RrSet>> {
    let now = httpcrypt::clock::unix_now();
    let epochs = store.load(now)?;
    let hybrid: Vec<_> = epochs
        .iter()
        .filter_map(|e| Some((e.hybrid.clone()?, e.kem.as_ref()?.public().clone())))
        .collect();
    let certs: Vec<_> = epochs.into_iter().map(|e| e.cert).collect();
    if certs.is_empty() {
        bail!(
            "no unexpired key in the directory (start `httpcrypt serve` first, or keygen --static)"
        );
    }
    let mut sets = dns::records::rrsets(p, store.identity_key(), &certs, now);
    sets.extend(dns::records::hybrid_rrsets(p, &hybrid, now));
    Ok(sets)
}

fn with_addresses(mut sets: Vec<dns::RrSet>, p: &Publication, names: &Names) -> Vec<dns::RrSet> {
    sets.extend(dns::records::address_sets(p, &names.address));
    sets
}

pub async fn run(a: DnsArgs) -> Result<i32> {
    match a.cmd {
        DnsCmd::Records(a) => {
            let store = open(&a.names.keys)?;
            let p = a.names.publication(None)?;
            let sets = with_addresses(current_sets(&store, &p)?, &p, &a.names);
            print!("{}", dns::records::zone_text(&sets));
        }
        DnsCmd::Publish(a) => {
            let store = open(&a.names.keys)?;
            let p = a.names.publication(None)?;
            let sets = with_addresses(current_sets(&store, &p)?, &p, &a.names);
            let target = UpdateTarget {
                server: a.server,
                zone: dns::records::fqdn(&a.zone)?,
                tsig: a.tsig.tsig()?,
                timeout: Duration::from_secs(5),
            };
            dns::update::replace(&target, &sets).await?;
            let n: usize = sets.iter().map(|s| s.records.len()).sum();
            eprintln!(
                "httpcrypt: replaced {} record sets ({n} records) in {}",
                sets.len(),
                a.zone
            );
        }
        DnsCmd::Serve(a) => serve(a).await?,
        DnsCmd::ProvenanceKey { out } => crate::asap::write_key(&out)?,
    }
    Ok(0)
}

async fn serve(a: ServeArgs) -> Result<()> {
    let store = open(&a.names.keys)?;
    let p = a.names.publication(Some(&a.zone))?;
    let identity = httpcrypt::proto::IdentityKey::from_seed(*store.identity_key().to_seed());
    let identity_public = identity.public();
    let live = keys::follow(store, Duration::from_secs(a.reload.max(1)))?;
    let authority = Authority::new(&a.zone, a.names.ttl)?.with_limits(dns::limit::ResponseLimits {
        edns_max: a.edns_max,
        rate: a.rrl_rate,
        slip: a.rrl_slip,
        prefixes: a.rrl_prefixes.max(1),
    });
    let addresses = dns::records::address_sets(&p, &a.names.address);
    authority.follow(live, identity, p.clone(), addresses);
    let udp = tokio::net::UdpSocket::bind(a.listen)
        .await
        .with_context(|| format!("binding UDP {}", a.listen))?;
    let tcp = tokio::net::TcpListener::bind(udp.local_addr()?)
        .await
        .with_context(|| format!("binding TCP {}", a.listen))?;
    eprintln!(
        "httpcrypt: DNS for zone {} (host {}) on {} udp+tcp",
        a.zone,
        p.host,
        udp.local_addr()?
    );
    if let Some(path) = &a.provenance_key {
        let key = crate::asap::read_key(path)?;
        let server = httpcrypt::proto::provenance::ServerId::of(&identity_public);
        let authority = httpcrypt::asap::ProvenanceAuthority::new(
            authority,
            &p.host,
            key,
            server,
            a.provenance_lifetime,
        )?;
        eprintln!(
            "httpcrypt: issuing provenance certificates at _hcpc.{}",
            p.host
        );
        let mut server = httpcrypt::asap::issuer::serve(authority, udp, tcp);
        tokio::select! {
            r = server.block_until_done() => r.context("DNS server")?,
            _ = tokio::signal::ctrl_c() => {}
        }
        return Ok(());
    }
    let mut server = dns::authority::serve(authority, udp, tcp);
    tokio::select! {
        r = server.block_until_done() => r.context("DNS server")?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
