//! The `httpcrypt` command: keys, servers, a gateway, and a curl-like client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

mod access;
mod asap;
mod config;
mod demo;
mod diagnose;
mod dns;
mod fetch;
mod flood;
mod keyops;
mod manual;
mod metrics;
mod ops;
mod output;
mod profile;
mod request;
mod rspamd;

#[derive(Parser)]
#[command(
    name = "httpcrypt",
    version,
    about = "Opportunistic encryption for plain HTTP, without a TLS handshake"
)]
struct Cli {
    /// Log filter (e.g. info, debug, httpcrypt=trace); also RUST_LOG.
    #[arg(long, global = true, env = "RUST_LOG", default_value = "warn")]
    log: String,
    /// Log format on stderr: text (colour only on a terminal) or json (one
    /// object per line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a key directory; prints the identity public key (base64url).
    Keygen(KeygenArgs),
    /// Serve a directory of static files over HTTPCrypt.
    #[command(after_help = ops::SIGNALS_HELP, args_override_self = true)]
    Serve(ServeArgs),
    /// Put HTTPCrypt in front of an existing plaintext HTTP service.
    #[command(after_help = ops::SIGNALS_HELP, args_override_self = true)]
    Gateway(GatewayArgs),
    /// Check a configuration file of `serve` or `gateway` (TOML; see
    /// `--config`) and print the whole effective configuration.
    CheckConfig(CheckConfigArgs),
    /// Key directory operations.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Fetch a URL over HTTPCrypt, like curl; the body goes to stdout.
    #[command(after_help = diagnose::EXIT_CODES)]
    Fetch(request::FetchArgs),
    /// Print a server's certificates and their validity.
    Certs(CertsArgs),
    /// Run a local server on temporary keys and show encrypted fetches.
    Demo(demo::DemoArgs),
    /// Fleet mode: several instances that decrypt each other's clients.
    #[command(subcommand)]
    Fleet(FleetCmd),
    /// Publish keys in the DNS: zone-file lines, RFC 2136 updates, an authoritative server.
    Dns(dns::DnsArgs),
    /// An untrusted caching proxy for split serving: clients reach it
    /// instead of the origin (spec/split-serving.md).
    SplitProxy(SplitProxyArgs),
    /// Load a server on loopback: attacks (junk key agreements, slow heads,
    /// huge headers) from many source addresses, or legitimate-client probes.
    Flood(flood::FloodArgs),
    /// Print a shell completion script (bash, zsh, fish, ...) to stdout.
    Completions(manual::CompletionsArgs),
    /// Write the man pages (httpcrypt.1 to stdout, or one per subcommand to --dir).
    Man(manual::ManArgs),
}

#[derive(Args)]
struct SplitProxyArgs {
    /// The origin, e.g. http://127.0.0.1:8080
    #[arg(long)]
    origin: http::Uri,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// Directory of the content-addressed cache.
    #[arg(long)]
    cache_dir: PathBuf,
    /// Cache bound in bytes of disk (suffixes K, M, G: powers of 1024);
    /// each entry counts at least one 4 KiB block plus 512 bytes, each
    /// cache subdirectory one block.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    cache_size: u64,
    /// Most entries in the cache.
    #[arg(long, default_value_t = httpcrypt::services::split_proxy::DEFAULT_MAX_ENTRIES)]
    cache_entries: usize,
    /// Records shorter than this many bytes are not cached (fetched from
    /// the origin each time).
    #[arg(long, default_value_t = httpcrypt::services::split_proxy::DEFAULT_MIN_PAYLOAD)]
    cache_min_record: usize,
    /// Largest record accepted from the origin, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_record: usize,
    /// Worker threads (1: a single event loop on the main thread).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Most concurrent client connections.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
}

fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("not a size: {text}"))
}

#[derive(Args)]
struct CheckConfigArgs {
    /// The configuration file.
    file: PathBuf,
    /// The command it is for, when the file does not say (`command = ...`).
    #[arg(long, value_parser = ["serve", "gateway"])]
    command: Option<String>,
}

#[derive(Subcommand)]
enum KeysCmd {
    /// List the identity, the kex keys and their ticket keys with their
    /// validity (UTC), and when the next rotation is due.
    Show {
        /// Key directory.
        #[arg(long)]
        keys: PathBuf,
        /// The rotation period R the server runs with, seconds.
        #[arg(long, default_value_t = 3600, value_parser = parse_rotation)]
        rotation: u64,
    },
}

/// Longest rotation period: a key lives 2R, and a month-long key gives
/// little forward secrecy.
const MAX_ROTATION: u64 = 30 * 86_400;

fn parse_rotation(text: &str) -> std::result::Result<u64, String> {
    let r: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if r == 0 || r > MAX_ROTATION {
        return Err(format!(
            "{r} s is out of range: the rotation period must be 1 s to {MAX_ROTATION} s (30 days); \
             3600 is usual, below 60 only for tests"
        ));
    }
    Ok(r)
}

/// A listen address: `HOST:PORT` with an IP or a name (`localhost:8080`),
/// `:PORT` (every IPv4 address) or a bare port.
fn parse_listen(text: &str) -> std::result::Result<SocketAddr, String> {
    let t = text.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    use std::net::ToSocketAddrs;
    match t.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{t:?} resolves to no address")),
        Err(e) => Err(format!(
            "{t:?} is not an address to listen on (HOST:PORT, :PORT or PORT): {e}"
        )),
    }
}

#[derive(Subcommand)]
enum FleetCmd {
    /// Add a shared key ratchet to a key directory; copy the directory to
    /// every instance before starting them (then `serve`/`gateway` derive
    /// their keys from it).
    Init {
        /// Key directory (see `httpcrypt keygen`).
        #[arg(long)]
        keys: PathBuf,
        /// Rotation period R in seconds.
        #[arg(long, default_value_t = 3600)]
        period: u64,
        /// Start of epoch 0 (unix seconds).
        #[arg(long, default_value_t = 0)]
        origin: u64,
    },
    /// Announce fresh randomness for a future epoch of the fleet ratchet,
    /// so that a state stolen before it reveals no key from that epoch on.
    /// Copy the new fleet file to every instance before the epoch begins.
    Reseed {
        /// Key directory holding the fleet file.
        #[arg(long)]
        keys: PathBuf,
        /// The epoch the reseed takes effect at.
        #[arg(long, conflicts_with = "ahead")]
        at: Option<u64>,
        /// Or: this many epochs after the current one.
        #[arg(long, default_value_t = 2)]
        ahead: u64,
    },
}

#[derive(Args)]
struct KeygenArgs {
    /// Key directory to create (with `--format rspamd`: the directory for
    /// `keypair.ucl`; without it the block goes to stdout).
    #[arg(long, required_unless_present = "format")]
    dir: Option<PathBuf>,
    /// `httpcrypt`: a v1 key directory; `rspamd`: an `rspamadm keypair`
    /// block for `--profile rspamd` and rspamd workers.
    #[arg(long, value_enum)]
    format: Option<rspamd::KeyFormat>,
    /// One long-lived kex key, no rotation (embedded use; no forward secrecy).
    #[arg(long = "static")]
    static_key: bool,
    /// Make the first ML-KEM-768 key now (spec/hybrid.md H4): a static key
    /// gets its suite-2 certificate at once. Without it, `serve --pq on`
    /// makes the key when it first starts.
    #[arg(long)]
    pq: bool,
}

/// `--pq`: which key agreements a server takes (spec/hybrid.md H4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PqMode {
    /// X25519 only (suite 1).
    Off,
    /// Both suites: X25519, and X25519 + ML-KEM-768 (suite 2).
    On,
    /// Suite 2 only: classical fresh-key requests are refused (`hybrid_required`).
    Only,
}

/// Options shared by `serve` and `gateway`.
#[derive(Args, Clone)]
struct ServerOpts {
    /// Key directory (see `httpcrypt keygen`); required by the v1 profile.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Protocol: HTTPCrypt v1, or rspamd's (answers `rspamc --key`).
    #[arg(long, value_enum, default_value = "v1")]
    profile: profile::Profile,
    /// rspamd profile: an `rspamadm keypair` file (repeatable: several keys).
    #[arg(long)]
    keypair: Vec<PathBuf>,
    /// rspamd profile: refuse plaintext requests instead of passing them on.
    #[arg(long)]
    encrypted_only: bool,
    /// Address to listen on: HOST:PORT (a name such as localhost too),
    /// :PORT (every IPv4 address) or PORT.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    listen: SocketAddr,
    /// Configuration file (TOML): its keys are these flags without the
    /// dashes; flags given here override it. See `httpcrypt check-config`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Path prefix under which HTTPCrypt is served.
    #[arg(long, default_value = "")]
    mount: String,
    /// Worker threads (1: a single event loop on the main thread).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Key rotation period R in seconds (the DNS TTL), 1 to 2592000.
    #[arg(long, default_value_t = 3600, value_parser = parse_rotation)]
    rotation: u64,
    /// Hand plaintext requests outside the mount to the service instead of 404.
    #[arg(long)]
    pass_through: bool,
    /// Announce request profile 2 (compact, spec §4.5) in the key
    /// certificates (version 2). Requests of both profiles are accepted
    /// either way; clients that know only v1 refuse version-2 certificates.
    /// A reverse proxy in front must pass `Host` through unchanged.
    #[arg(long)]
    compact: bool,
    /// Post-quantum hybrid key agreement (spec/hybrid.md): `on` takes both
    /// suites and publishes suite-2 certificates beside the v1 ones, `only`
    /// refuses classical fresh-key requests.
    #[arg(long, value_enum, default_value = "off")]
    pub(crate) pq: PqMode,
    /// With --pq: a new ML-KEM-768 key with every K-th kex key (K rotations
    /// of --rotation; the post-quantum forward-secrecy window).
    #[arg(long, value_name = "K", default_value_t = httpcrypt::keys::DEFAULT_KEM_EVERY,
          value_parser = clap::value_parser!(u32).range(1..))]
    kem_every: u32,
    /// Turn off the Date freshness check and the strike register.
    #[arg(long)]
    no_replay_check: bool,
    /// Do not issue tickets.
    #[arg(long)]
    no_tickets: bool,
    /// Most concurrent connections. When all are taken, a new client takes
    /// the slot of the connection that made the least progress (an idle
    /// keep-alive one first, then the slowest below --min-rate).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Access log (`--log info`): also log each request's inner method and
    /// target (otherwise only the outer path, which is random).
    #[arg(long)]
    log_targets: bool,
    /// Largest outer request body (or decoded GET query) in bytes; above it 413.
    #[arg(long, default_value_t = httpcrypt::proto::Limits::default().max_body)]
    max_body: usize,
    /// Seconds a client may take to send a complete request head (from the
    /// connection's start for the first, from the head's first byte after).
    #[arg(long, default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a request body may stall before the request fails (408).
    #[arg(long, default_value_t = 30)]
    body_timeout: u64,
    /// Seconds the server waits, in total, for the bytes of one request body.
    #[arg(long, default_value_t = listen_default().body_deadline.as_secs())]
    body_deadline: u64,
    /// Bytes per second a request body must average once --min-rate-grace
    /// has passed (0: no rule); also the rate below which a connection may
    /// be shed when every slot is taken.
    #[arg(long, default_value_t = listen_default().min_rate, value_name = "BYTES/S")]
    min_rate: u64,
    /// Seconds of waiting for a request body before --min-rate applies.
    #[arg(long, default_value_t = listen_default().min_rate_grace.as_secs())]
    min_rate_grace: u64,
    /// Seconds an answer may make no progress because the client does not
    /// read it; the connection is then reset.
    #[arg(long, default_value_t = listen_default().write_timeout.as_secs())]
    write_timeout: u64,
    /// Seconds a keep-alive connection may stay idle between requests.
    #[arg(long, default_value_t = listen_default().keepalive_timeout.as_secs())]
    keepalive_timeout: u64,
    /// Seconds to finish the requests in flight after SIGTERM or SIGINT
    /// before exiting anyway (0: exit at once).
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    /// Share the strike register through Redis (e.g. redis://127.0.0.1:6379/),
    /// so a replay is refused fleet-wide, not just by this instance.
    #[arg(long)]
    redis: Option<String>,
    /// Seconds a Redis strike outlives twice the freshness window: the
    /// largest clock difference between instances it absorbs. Every strike
    /// lives exactly 2W + this, whatever any clock says.
    #[arg(long, default_value_t = httpcrypt::strikes::DEFAULT_REDIS_TTL_MARGIN)]
    redis_ttl_margin: u64,
    /// Session-cache capacity in entries (0 turns it off).
    #[arg(long, default_value_t = 65_536)]
    session_cache: usize,
    /// Demand a `Random` token before side-effecting methods (inner 425 otherwise).
    #[arg(long)]
    require_token: bool,
    /// Split serving: inner paths whose GET 200 answers are public (glob:
    /// `*` within a segment, `**` across), e.g. '/static/**'; repeatable.
    /// Matched after normalisation; a path with an encoded `.`, `/` or `\`,
    /// a dot segment or `//`, and any answer to a request with `Cookie` or
    /// `Authorization` or with `Set-Cookie` or `Cache-Control: private` /
    /// `no-store`, is never public (split-serving.md §S1).
    #[arg(long = "public")]
    public: Vec<String>,
    /// Split serving without globs: only answers the application marks
    /// `HC-Public: 1` are public (implied by --public).
    #[arg(long)]
    split: bool,
    /// Split serving: payload bytes per public record.
    #[arg(long, default_value_t = httpcrypt::proto::split::DEFAULT_PUBLIC_RECORD)]
    public_record: usize,
    /// Split serving: bytes of emitted payloads kept for proxies (suffixes K, M, G).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    content_store: u64,
    /// The server's name: the service's `Host` for a sealed request that
    /// carries none inside (an unauthenticated outer `Host` never reaches
    /// the service). Without it such a request has no `Host`.
    #[arg(long, value_parser = parse_field_value)]
    server_name: Option<http::HeaderValue>,
    /// An outer field to pass on, e.g. `X-Forwarded-For` set by a trusted
    /// proxy in front (repeatable; none by default). It is unauthenticated:
    /// the gateway forwards it under --outer-prefix, never under its own
    /// name, and the service's request itself holds only what the client
    /// sealed.
    #[arg(long = "pass-outer", value_parser = parse_field_name)]
    pass_outer: Vec<http::HeaderName>,
    #[command(flatten)]
    publish: dns::PublishOpts,
    #[command(flatten)]
    defence: flood::DefenceOpts,
    #[command(flatten)]
    asap: asap::ListenOpts,
    /// Serve Prometheus metrics (/metrics) and a health check (/healthz) on
    /// this address, e.g. 127.0.0.1:9090; off by default.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    metrics: Option<SocketAddr>,
}

fn listen_default() -> httpcrypt::listen::ListenOptions {
    httpcrypt::listen::ListenOptions::default()
}

impl ServerOpts {
    /// The listener's bounds on connections (the same for every profile).
    fn listen_options(&self) -> httpcrypt::listen::ListenOptions {
        let secs = |s: u64| Duration::from_secs(s.max(1));
        httpcrypt::listen::ListenOptions {
            max_connections: self.max_connections,
            header_timeout: secs(self.header_timeout),
            keepalive_timeout: secs(self.keepalive_timeout),
            body_deadline: secs(self.body_deadline),
            min_rate: self.min_rate,
            min_rate_grace: Duration::from_secs(self.min_rate_grace),
            write_timeout: secs(self.write_timeout),
            ..listen_default()
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    server: ServerOpts,
    /// Directory of files to serve.
    #[arg(long)]
    root: PathBuf,
}

#[derive(Args)]
struct GatewayArgs {
    #[command(flatten)]
    server: ServerOpts,
    /// The plaintext service, e.g. http://127.0.0.1:3000
    #[arg(long)]
    upstream: http::Uri,
    /// Prefix of the --pass-outer fields sent upstream; fields of the
    /// client's sealed request that start with it are dropped.
    #[arg(long, default_value = httpcrypt::proto::inner::DEFAULT_OUTER_PREFIX, value_parser = parse_outer_prefix)]
    outer_prefix: String,
    /// Seconds to wait for the upstream's connection and answer head;
    /// past it the client gets 504 (a refused or failed upstream: 502).
    #[arg(long, default_value_t = 60)]
    upstream_timeout: u64,
    /// Idle keep-alive connections kept open to the upstream.
    #[arg(long, default_value_t = 32)]
    upstream_pool_idle: usize,
    /// Seconds an idle upstream connection is kept.
    #[arg(long, default_value_t = 90)]
    upstream_idle_timeout: u64,
    /// Client fields added for the upstream from the TCP peer (the client's
    /// own fields of these names are dropped): X-Forwarded-For and
    /// X-Forwarded-Proto, Forwarded (RFC 7239), both, or none.
    #[arg(long, value_enum, default_value = "xff")]
    forwarded: ForwardedArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ForwardedArg {
    None,
    Xff,
    Forwarded,
    Both,
}

fn parse_field_name(text: &str) -> std::result::Result<http::HeaderName, String> {
    http::HeaderName::from_bytes(text.trim().as_bytes())
        .map_err(|_| format!("not a field name: {text:?}"))
}

fn parse_field_value(text: &str) -> std::result::Result<http::HeaderValue, String> {
    http::HeaderValue::from_str(text.trim()).map_err(|_| format!("not a field value: {text:?}"))
}

/// A prefix that makes a field name of any field name appended to it.
fn parse_outer_prefix(text: &str) -> std::result::Result<String, String> {
    match parse_field_name(&format!("{text}x")) {
        Ok(_) if !text.is_empty() => Ok(text.to_string()),
        _ => Err(format!("not a field-name prefix: {text:?}")),
    }
}

#[derive(Args)]
struct CertsArgs {
    /// Server URL, e.g. http://127.0.0.1:8080/
    url: http::Uri,
    /// The server's mount path.
    #[arg(long, default_value = "")]
    mount: String,
    /// Pinned identity key (base64url): only certificates it signed count.
    #[arg(long)]
    identity: Option<String>,
    #[command(flatten)]
    discovery: dns::DiscoveryOpts,
}

fn main() {
    let argv = match config::expand(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("httpcrypt: {e:#}");
            std::process::exit(2);
        }
    };
    let cli = Cli::parse_from(argv);
    ops::init_logging(&cli.log, cli.log_format == LogFormat::Json);
    let workers = match &cli.cmd {
        Cmd::Serve(a) => a.server.workers,
        Cmd::Gateway(a) => a.server.workers,
        Cmd::SplitProxy(a) => a.workers,
        _ => 1,
    };
    // One worker is one event loop on the main thread, as an nginx worker
    // is: no work-stealing scheduler and no cross-thread wake-ups. More
    // workers share the multi-threaded scheduler.
    let rt = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    };
    let code = match rt
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(cli.cmd)))
    {
        Ok(code) => code,
        Err(e) => {
            eprintln!("httpcrypt: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(cmd: Cmd) -> Result<i32> {
    match cmd {
        Cmd::Keygen(a) if a.format == Some(rspamd::KeyFormat::Rspamd) => {
            if a.static_key {
                bail!("--static belongs to --format httpcrypt (an rspamd key pair never rotates)");
            }
            rspamd::keygen(a.dir.as_deref())
        }
        Cmd::Keygen(a) => {
            let dir = a.dir.context("--dir is required")?;
            let store = httpcrypt::keys::KeyStore::create_with(
                &dir,
                a.static_key,
                a.pq.then_some(httpcrypt::keys::DEFAULT_KEM_EVERY),
            )?;
            println!("{}", store.identity().to_b64());
            Ok(0)
        }
        Cmd::Serve(a) => {
            if !a.root.is_dir() {
                bail!("--root {} is not a directory", a.root.display());
            }
            let svc = httpcrypt::services::static_files(&a.root);
            if a.server.profile == profile::Profile::Rspamd {
                rspamd::serve(&a.server, svc).await?;
                return Ok(0);
            }
            serve(&a.server, svc, /* abandon_on_hangup */ false).await?;
            Ok(0)
        }
        Cmd::Gateway(a) => {
            if a.upstream.scheme_str() != Some("http") || a.upstream.authority().is_none() {
                bail!("--upstream must be an http:// URL with a host");
            }
            if a.upstream_timeout == 0 {
                bail!("--upstream-timeout must be at least 1 second");
            }
            let upstream = httpcrypt::services::Upstream::with_options(
                a.upstream,
                httpcrypt::services::UpstreamOptions {
                    timeout: Duration::from_secs(a.upstream_timeout),
                    pool_idle: a.upstream_pool_idle,
                    pool_idle_timeout: Duration::from_secs(a.upstream_idle_timeout.max(1)),
                    forwarded: match a.forwarded {
                        ForwardedArg::None => httpcrypt::services::Forwarded::None,
                        ForwardedArg::Xff => httpcrypt::services::Forwarded::Xff,
                        ForwardedArg::Forwarded => httpcrypt::services::Forwarded::Forwarded,
                        ForwardedArg::Both => httpcrypt::services::Forwarded::Both,
                    },
                },
            )
            .with_outer_prefix(&a.outer_prefix);
            if a.server.profile == profile::Profile::Rspamd {
                rspamd::serve(&a.server, upstream).await?;
                return Ok(0);
            }
            serve(&a.server, upstream, /* abandon_on_hangup */ true).await?;
            Ok(0)
        }
        Cmd::Fetch(a) if a.profile == profile::Profile::Rspamd => rspamd::fetch(&a).await,
        Cmd::Fetch(a) => fetch::run(a).await,
        Cmd::Certs(a) => certs(a).await,
        Cmd::CheckConfig(a) => check_config(a),
        Cmd::Keys(KeysCmd::Show { keys, rotation }) => keyops::show(&keys, rotation),
        Cmd::Demo(a) => demo::run(a).await,
        Cmd::Fleet(FleetCmd::Init {
            keys,
            period,
            origin,
        }) => {
            open_store(&keys)?;
            let path =
                httpcrypt::keys::fleet::init(&keys, Duration::from_secs(period.max(1)), origin)?;
            println!("{}", path.display());
            Ok(0)
        }
        Cmd::Fleet(FleetCmd::Reseed { keys, at, ahead }) => {
            open_store(&keys)?;
            let (epoch, start) = httpcrypt::keys::fleet::reseed(&keys, at, ahead)?;
            println!("{epoch} {start}");
            eprintln!(
                "httpcrypt: reseed at epoch {epoch} (unix {start}); copy {} to every instance before then",
                keys.join(httpcrypt::keys::fleet::FLEET_FILE).display()
            );
            Ok(0)
        }
        Cmd::Dns(a) => dns::run(a).await,
        Cmd::SplitProxy(a) => split_proxy(a).await,
        Cmd::Flood(a) => flood::run(a).await,
        Cmd::Completions(a) => manual::completions(a, <Cli as clap::CommandFactory>::command()),
        Cmd::Man(a) => manual::man(a, <Cli as clap::CommandFactory>::command()),
    }
}

/// `httpcrypt check-config FILE`: the file parsed as `serve` or `gateway`
/// would parse it, its key directory opened, and the effective
/// configuration printed (a file that gives the same result).
fn check_config(a: CheckConfigArgs) -> Result<i32> {
    use clap::{CommandFactory, FromArgMatches};
    let (command, _) = config::read(&a.file)?;
    let command = command.or(a.command).unwrap_or_else(|| "serve".to_string());
    let argv = config::expand(vec![
        "httpcrypt".into(),
        command.clone().into(),
        "--config".into(),
        a.file.clone().into(),
    ])?;
    let mut cmd = Cli::command();
    cmd.build();
    let matches = match cmd.clone().try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e) => bail!(
            "{} (as `httpcrypt {command}`): {}",
            a.file.display(),
            e.render()
                .to_string()
                .trim_start_matches("error: ")
                .trim_end()
        ),
    };
    let cli = Cli::from_arg_matches(&matches)?;
    let opts = match &cli.cmd {
        Cmd::Serve(s) => &s.server,
        Cmd::Gateway(g) => &g.server,
        _ => unreachable!("expand only produces serve and gateway command lines"),
    };
    if let Some(dir) = &opts.keys {
        open_store(dir)?;
    }
    let sub = cmd
        .find_subcommand(&command)
        .context("the command of the file")?;
    let (_, sub_matches) = matches.subcommand().context("a subcommand")?;
    print!("{}", config::format(sub, sub_matches, &command));
    eprintln!(
        "httpcrypt: {} is a valid `{command}` configuration",
        a.file.display()
    );
    Ok(0)
}

async fn split_proxy(a: SplitProxyArgs) -> Result<i32> {
    if a.origin.scheme_str() != Some("http") || a.origin.authority().is_none() {
        bail!("--origin must be an http:// URL with a host");
    }
    let limits = httpcrypt::services::split_proxy::CacheLimits {
        max_bytes: a.cache_size,
        max_entries: a.cache_entries,
        min_payload: a.cache_min_record,
    };
    let cache = httpcrypt::services::split_proxy::DiskCache::open_with(&a.cache_dir, limits)
        .with_context(|| format!("opening cache directory {}", a.cache_dir.display()))?;
    let proxy = httpcrypt::services::split_proxy::SplitProxy::new(
        httpcrypt::services::split_proxy::ProxyConfig {
            origin: a.origin.clone(),
            max_record: a.max_record,
        },
        std::sync::Arc::new(cache),
    );
    let listener = httpcrypt::listen::bind(a.listen).await?;
    eprintln!(
        "httpcrypt: split proxy on http://{} for {}",
        listener.local_addr()?,
        a.origin
    );
    let listen = httpcrypt::listen::ListenOptions {
        max_connections: a.max_connections,
        ..Default::default()
    };
    let cache = proxy.cache().clone();
    let stop = ops::stop_signal()?;
    httpcrypt::listen::run(listener, proxy, listen, async {
        stop.await;
    })
    .await?;
    let s = &cache.stats;
    use std::sync::atomic::Ordering::Relaxed;
    tracing::info!(
        hits = s.hits.load(Relaxed),
        misses = s.misses.load(Relaxed),
        fetched = s.fetched_bytes.load(Relaxed),
        "split proxy stopped"
    );
    Ok(0)
}

/// Builds the layer for `opts` and runs the listener until Ctrl-C;
/// `abandon_on_hangup`: see [`httpcrypt::listen::ListenOptions`] (yes for a
/// gateway, no for static files).
async fn serve<S>(opts: &ServerOpts, svc: S, abandon_on_hangup: bool) -> Result<()>
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
    let (layer, listener, live, identity) = prepare(opts).await?;
    let gate = asap::prepare_listener(&opts.asap, &listener, opts.keys.as_deref())?;
    let endpoint = metrics::start(opts.metrics, &layer).await?;
    let svc = access::Inner::new(
        svc,
        access::Options {
            targets: opts.log_targets,
        },
    );
    let svc = access::Outer::new(tower::Layer::layer(&layer, svc));
    let listen = httpcrypt::listen::ListenOptions {
        gate,
        abandon_on_hangup,
        ..opts.listen_options()
    };
    ops::Reloader {
        keys: opts.keys.clone().map(|dir| (dir, identity, live)),
        config: opts.config.clone().map(ops::config_reloader).transpose()?,
    }
    .on_hangup()?;
    let stop = ops::stop_signal()?;
    let drained = httpcrypt::listen::run_draining(
        listener,
        svc,
        listen,
        async {
            let name = stop.await;
            if let Some(e) = &endpoint {
                e.draining();
            }
            tracing::info!(
                signal = name,
                deadline_s = opts.shutdown_timeout,
                "draining: no new connections; finishing the requests in flight"
            );
        },
        Duration::from_secs(opts.shutdown_timeout),
    )
    .await?;
    match drained {
        httpcrypt::listen::Drained::Complete => tracing::info!("stopped"),
        httpcrypt::listen::Drained::TimedOut(open) => tracing::warn!(
            open,
            "stopped at the --shutdown-timeout deadline; cutting the connections still open"
        ),
    }
    Ok(())
}

/// The layer, the bound listener, the running keys and the identity.
async fn prepare(
    opts: &ServerOpts,
) -> Result<(
    httpcrypt::HttpCryptLayer,
    tokio::net::TcpListener,
    httpcrypt::keys::LiveKeys,
    httpcrypt::proto::IdentityPublic,
)> {
    if !opts.keypair.is_empty() || opts.encrypted_only {
        bail!("--keypair and --encrypted-only belong to --profile rspamd");
    }
    let dir = opts
        .keys
        .as_deref()
        .context("--keys is required (a key directory from `httpcrypt keygen --dir`)")?;
    let mut store = open_store(dir)?.with_profile(if opts.compact {
        httpcrypt::proto::Profile::Compact
    } else {
        httpcrypt::proto::Profile::V1
    });
    if opts.pq != PqMode::Off {
        store = store.with_hybrid(opts.kem_every);
    }
    let rotates = keyops::lock(dir)?;
    let identity_key = store.identity();
    let identity = identity_key.to_b64();
    let keys = if rotates {
        httpcrypt::keys::start(store, Duration::from_secs(opts.rotation.max(1)))?
    } else {
        keyops::follow(dir, store, opts.rotation).await?
    };
    let config = httpcrypt::ServerConfig {
        mount: httpcrypt::proto::outer::Mount::new(&opts.mount)?,
        outside: if opts.pass_through {
            httpcrypt::server::Outside::PassThrough
        } else {
            httpcrypt::server::Outside::Refuse
        },
        freshness: if opts.no_replay_check {
            None
        } else {
            Some(httpcrypt::proto::replay::DEFAULT_WINDOW)
        },
        tickets: !opts.no_tickets,
        limits: httpcrypt::proto::Limits {
            max_body: opts.max_body,
            ..Default::default()
        },
        body_timeout: Duration::from_secs(opts.body_timeout.max(1)),
        session_cache: opts.session_cache,
        require_token: opts.require_token,
        split: if opts.public.is_empty() && !opts.split {
            None
        } else {
            Some(httpcrypt::split::SplitConfig {
                public: httpcrypt::proto::split::PublicPaths::new(opts.public.iter().cloned())
                    .map_err(|_| anyhow::anyhow!("--public globs must start with /"))?,
                public_record: opts.public_record.clamp(1, 1 << 24),
                store_bytes: usize::try_from(opts.content_store).unwrap_or(usize::MAX),
            })
        },
        admission: opts.defence.config(),
        authority: opts.server_name.clone(),
        pass_outer: opts.pass_outer.clone(),
        pq: match opts.pq {
            PqMode::Off => httpcrypt::server::Pq::Off,
            PqMode::On => httpcrypt::server::Pq::On,
            PqMode::Only => httpcrypt::server::Pq::Only,
        },
        ..Default::default()
    };
    let listener = httpcrypt::listen::bind(opts.listen).await?;
    dns::start_publisher(
        &opts.publish,
        dir,
        &keys,
        opts.rotation.max(1),
        listener.local_addr()?.port(),
    )?;
    eprintln!(
        "httpcrypt: listening on http://{} (identity {identity})",
        listener.local_addr()?
    );
    let live = keys.clone();
    let layer = match &opts.redis {
        Some(url) => {
            let window = config
                .freshness
                .unwrap_or(httpcrypt::proto::replay::DEFAULT_WINDOW);
            let strikes = httpcrypt::strikes::RedisStrikes::connect(url, window)
                .await
                .with_context(|| format!("connecting to {url}"))?
                .with_margin(opts.redis_ttl_margin);
            httpcrypt::HttpCryptLayer::with_strikes(keys, config, std::sync::Arc::new(strikes))
        }
        None => httpcrypt::HttpCryptLayer::new(keys, config),
    };
    Ok((layer, listener, live, identity_key))
}

fn open_store(dir: &Path) -> Result<httpcrypt::keys::KeyStore> {
    httpcrypt::keys::KeyStore::open(dir).with_context(|| {
        format!(
            "opening key directory {} (create it with `httpcrypt keygen --dir`)",
            dir.display()
        )
    })
}

async fn certs(a: CertsArgs) -> Result<i32> {
    let identity = a
        .identity
        .as_deref()
        .map(httpcrypt::proto::IdentityPublic::from_b64)
        .transpose()
        .context("--identity")?;
    let mut config = httpcrypt::ClientConfig {
        mount: httpcrypt::proto::outer::Mount::new(&a.mount)?,
        identity,
        ..Default::default()
    };
    a.discovery.apply(&mut config)?;
    let dns = config.discovery.is_some();
    let client = httpcrypt::Client::new(config);
    let authority = a
        .url
        .authority()
        .context("URL needs a host")?
        .as_str()
        .to_string();
    let scheme = a.url.scheme_str().unwrap_or("http");
    let now = httpcrypt::clock::unix_now();
    if dns {
        let (keys, source) = client.refresh_keys(scheme, &authority).await?;
        println!("source {source}");
        for k in &keys {
            let state = if k.is_valid_at(now) {
                "valid"
            } else {
                "not valid now"
            };
            println!(
                "serial {} kid {} valid {}..{} ({state}, {}s left)",
                k.serial,
                k.kid().to_b64(),
                k.not_before,
                k.not_after,
                u64::from(k.not_after).saturating_sub(now)
            );
        }
        return Ok(0);
    }
    let certs = client.refresh_certs(scheme, &authority).await?;
    for c in &certs {
        let state = if c.is_valid_at(now) {
            "valid"
        } else {
            "not valid now"
        };
        let signed = match &identity {
            Some(id) if c.verify(id).is_ok() => ", signature verified",
            Some(_) => ", BAD SIGNATURE",
            None => "",
        };
        println!(
            "serial {} kid {} valid {}..{} ({}{signed}, {}s left)",
            c.serial,
            c.kid().to_b64(),
            c.not_before,
            c.not_after,
            state,
            u64::from(c.not_after).saturating_sub(now)
        );
        println!("  {}", c.to_text());
    }
    Ok(0)
}
