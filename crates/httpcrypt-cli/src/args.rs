//! The command line: every subcommand's arguments and the parsers of their
//! values (clap), and the server options `serve` and `gateway` share.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::{asap, demo, diagnose, dns, flood, manual, ops, profile, request};

#[derive(Parser)]
#[command(
    name = "httpcrypt",
    version,
    about = "Opportunistic encryption for plain HTTP, without a TLS handshake"
)]
pub(crate) struct Cli {
    /// Log filter (e.g. info, debug, httpcrypt=trace); also RUST_LOG.
    #[arg(long, global = true, env = "RUST_LOG", default_value = "warn")]
    pub(crate) log: String,
    /// Log format on stderr: text (colour only on a terminal) or json (one
    /// object per line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
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
pub(crate) struct SplitProxyArgs {
    /// The origin, e.g. http://127.0.0.1:8080
    #[arg(long)]
    pub(crate) origin: http::Uri,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub(crate) listen: SocketAddr,
    /// Directory of the content-addressed cache.
    #[arg(long)]
    pub(crate) cache_dir: PathBuf,
    /// Cache bound in bytes of disk (suffixes K, M, G: powers of 1024);
    /// each entry counts at least one 4 KiB block plus 512 bytes, each
    /// cache subdirectory one block.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub(crate) cache_size: u64,
    /// Most entries in the cache.
    #[arg(long, default_value_t = httpcrypt::services::split_proxy::DEFAULT_MAX_ENTRIES)]
    pub(crate) cache_entries: usize,
    /// Records shorter than this many bytes are not cached (fetched from
    /// the origin each time).
    #[arg(long, default_value_t = httpcrypt::services::split_proxy::DEFAULT_MIN_PAYLOAD)]
    pub(crate) cache_min_record: usize,
    /// Largest record accepted from the origin, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub(crate) max_record: usize,
    /// Worker threads (1: a single event loop on the main thread).
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Most concurrent client connections.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_connections: usize,
    /// Speak HTTP/2 with prior knowledge to the origin (its `--h2-listen`
    /// address in --origin): HPACK turns the fields that every request and
    /// answer repeat into a byte or two each (spec/split-serving.md §S11).
    #[arg(long)]
    pub(crate) origin_h2: bool,
}

pub(crate) fn parse_size(text: &str) -> std::result::Result<u64, String> {
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
pub(crate) struct CheckConfigArgs {
    /// The configuration file.
    pub(crate) file: PathBuf,
    /// The command it is for, when the file does not say (`command = ...`).
    #[arg(long, value_parser = ["serve", "gateway"])]
    pub(crate) command: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum KeysCmd {
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

pub(crate) fn parse_rotation(text: &str) -> std::result::Result<u64, String> {
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
pub(crate) fn parse_listen(text: &str) -> std::result::Result<SocketAddr, String> {
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
pub(crate) enum FleetCmd {
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
pub(crate) struct KeygenArgs {
    /// Key directory to create (with `--format rspamd`: the directory for
    /// `keypair.ucl`; without it the block goes to stdout).
    #[arg(long, required_unless_present = "format")]
    pub(crate) dir: Option<PathBuf>,
    /// `httpcrypt`: a v1 key directory; `rspamd`: an `rspamadm keypair`
    /// block for `--profile rspamd` and rspamd workers.
    #[arg(long, value_enum)]
    pub(crate) format: Option<profile::KeyFormat>,
    /// One long-lived kex key, no rotation (embedded use; no forward secrecy).
    #[arg(long = "static")]
    pub(crate) static_key: bool,
    /// Make the first ML-KEM-768 key now (spec/hybrid.md H4): a static key
    /// gets its suite-2 certificate at once. Without it, `serve --pq on`
    /// makes the key when it first starts.
    #[arg(long)]
    pub(crate) pq: bool,
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
pub(crate) struct ServerOpts {
    /// Key directory (see `httpcrypt keygen`); required by the v1 profile.
    #[arg(long)]
    pub(crate) keys: Option<PathBuf>,
    /// Protocol: HTTPCrypt v1, or rspamd's (answers `rspamc --key`).
    #[arg(long, value_enum, default_value = "v1")]
    pub(crate) profile: profile::Profile,
    /// rspamd profile: an `rspamadm keypair` file (repeatable: several keys).
    #[arg(long)]
    pub(crate) keypair: Vec<PathBuf>,
    /// rspamd profile: refuse plaintext requests instead of passing them on.
    #[arg(long)]
    pub(crate) encrypted_only: bool,
    /// Address to listen on: HOST:PORT (a name such as localhost too),
    /// :PORT (every IPv4 address) or PORT.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub(crate) listen: SocketAddr,
    /// Configuration file (TOML): its keys are these flags without the
    /// dashes; flags given here override it. See `httpcrypt check-config`.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Path prefix under which HTTPCrypt is served.
    #[arg(long, default_value = "")]
    pub(crate) mount: String,
    /// Worker threads (1: a single event loop on the main thread).
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Key rotation period R in seconds (the DNS TTL), 1 to 2592000.
    #[arg(long, default_value_t = 3600, value_parser = parse_rotation)]
    pub(crate) rotation: u64,
    /// Hand plaintext requests outside the mount to the service instead of 404.
    #[arg(long)]
    pub(crate) pass_through: bool,
    /// Announce request profile 2 (compact, spec §4.5) in the key
    /// certificates (version 2). Requests of both profiles are accepted
    /// either way; clients that know only v1 refuse version-2 certificates.
    /// A reverse proxy in front must pass `Host` through unchanged.
    #[arg(long)]
    pub(crate) compact: bool,
    /// Post-quantum hybrid key agreement (spec/hybrid.md): `on` takes both
    /// suites and publishes suite-2 certificates beside the v1 ones, `only`
    /// refuses classical fresh-key requests.
    #[arg(long, value_enum, default_value = "off")]
    pub(crate) pq: PqMode,
    /// With --pq: a new ML-KEM-768 key with every K-th kex key (K rotations
    /// of --rotation; the post-quantum forward-secrecy window).
    #[arg(long, value_name = "K", default_value_t = httpcrypt::keys::DEFAULT_KEM_EVERY,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kem_every: u32,
    /// Turn off the Date freshness check and the strike register.
    #[arg(long)]
    pub(crate) no_replay_check: bool,
    /// Do not issue tickets.
    #[arg(long)]
    pub(crate) no_tickets: bool,
    /// Most concurrent connections. When all are taken, a new client takes
    /// the slot of the connection that made the least progress (an idle
    /// keep-alive one first, then the slowest below --min-rate).
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_connections: usize,
    /// Access log (`--log info`): also log each request's inner method and
    /// target (otherwise only the outer path, which is random).
    #[arg(long)]
    pub(crate) log_targets: bool,
    /// Largest outer request body (or decoded GET query) in bytes; above it 413.
    #[arg(long, default_value_t = httpcrypt::proto::Limits::default().max_body)]
    pub(crate) max_body: usize,
    /// Seconds a client may take to send a complete request head (from the
    /// connection's start for the first, from the head's first byte after).
    #[arg(long, default_value_t = 10)]
    pub(crate) header_timeout: u64,
    /// Seconds a request body may stall before the request fails (408).
    #[arg(long, default_value_t = 30)]
    pub(crate) body_timeout: u64,
    /// Seconds the server waits, in total, for the bytes of one request body.
    #[arg(long, default_value_t = listen_default().body_deadline.as_secs())]
    pub(crate) body_deadline: u64,
    /// Bytes per second a request body must average once --min-rate-grace
    /// has passed (0: no rule); also the rate below which a connection may
    /// be shed when every slot is taken.
    #[arg(long, default_value_t = listen_default().min_rate, value_name = "BYTES/S")]
    pub(crate) min_rate: u64,
    /// Seconds of waiting for a request body before --min-rate applies.
    #[arg(long, default_value_t = listen_default().min_rate_grace.as_secs())]
    pub(crate) min_rate_grace: u64,
    /// Seconds an answer may make no progress because the client does not
    /// read it; the connection is then reset.
    #[arg(long, default_value_t = listen_default().write_timeout.as_secs())]
    pub(crate) write_timeout: u64,
    /// Seconds a keep-alive connection may stay idle between requests.
    #[arg(long, default_value_t = listen_default().keepalive_timeout.as_secs())]
    pub(crate) keepalive_timeout: u64,
    /// Seconds to finish the requests in flight after SIGTERM or SIGINT
    /// before exiting anyway (0: exit at once).
    #[arg(long, default_value_t = 30)]
    pub(crate) shutdown_timeout: u64,
    /// Share the strike register through Redis (e.g. redis://127.0.0.1:6379/),
    /// so a replay is refused fleet-wide, not just by this instance.
    #[arg(long)]
    pub(crate) redis: Option<String>,
    /// Seconds a Redis strike outlives twice the freshness window: the
    /// largest clock difference between instances it absorbs. Every strike
    /// lives exactly 2W + this, whatever any clock says.
    #[arg(long, default_value_t = httpcrypt::strikes::DEFAULT_REDIS_TTL_MARGIN)]
    pub(crate) redis_ttl_margin: u64,
    /// Session-cache capacity in entries (0 turns it off).
    #[arg(long, default_value_t = 65_536)]
    pub(crate) session_cache: usize,
    /// Demand a `Random` token before side-effecting methods (inner 425 otherwise).
    #[arg(long)]
    pub(crate) require_token: bool,
    /// Split serving: inner paths whose GET 200 answers are public (glob:
    /// `*` within a segment, `**` across), e.g. '/static/**'; repeatable.
    /// Matched after normalisation; a path with an encoded `.`, `/` or `\`,
    /// a dot segment or `//`, and any answer to a request with `Cookie` or
    /// `Authorization` or with `Set-Cookie` or `Cache-Control: private` /
    /// `no-store`, is never public (split-serving.md §S1).
    #[arg(long = "public")]
    pub(crate) public: Vec<String>,
    /// Split serving without globs: only answers the application marks
    /// `HC-Public: 1` are public (implied by --public).
    #[arg(long)]
    pub(crate) split: bool,
    /// Split serving: payload bytes per public record.
    #[arg(long, default_value_t = httpcrypt::proto::split::DEFAULT_PUBLIC_RECORD)]
    pub(crate) public_record: usize,
    /// Split serving: bytes of emitted payloads kept for proxies (suffixes K, M, G).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub(crate) content_store: u64,
    /// The server's name: the service's `Host` for a sealed request that
    /// carries none inside (an unauthenticated outer `Host` never reaches
    /// the service). Without it such a request has no `Host`.
    #[arg(long, value_parser = parse_field_value)]
    pub(crate) server_name: Option<http::HeaderValue>,
    /// An outer field to pass on, e.g. `X-Forwarded-For` set by a trusted
    /// proxy in front (repeatable; none by default). It is unauthenticated:
    /// the gateway forwards it under --outer-prefix, never under its own
    /// name, and the service's request itself holds only what the client
    /// sealed.
    #[arg(long = "pass-outer", value_parser = parse_field_name)]
    pub(crate) pass_outer: Vec<http::HeaderName>,
    #[command(flatten)]
    pub(crate) publish: dns::PublishOpts,
    #[command(flatten)]
    pub(crate) defence: flood::DefenceOpts,
    #[command(flatten)]
    pub(crate) asap: asap::ListenOpts,
    /// Serve Prometheus metrics (/metrics) and a health check (/healthz) on
    /// this address, e.g. 127.0.0.1:9090; off by default.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub(crate) metrics: Option<SocketAddr>,
    /// Also serve HTTP/2 with prior knowledge (h2c, and nothing else) on
    /// ADDR: the leg split proxies keep to the origin
    /// (`split-proxy --origin-h2`, spec/split-serving.md §S11). Serves the
    /// same mount and files as --listen.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub(crate) h2_listen: Option<SocketAddr>,
}

pub(crate) fn listen_default() -> httpcrypt::listen::ListenOptions {
    httpcrypt::listen::ListenOptions::default()
}

impl ServerOpts {
    /// The listener's bounds on connections (the same for every profile).
    pub(crate) fn listen_options(&self) -> httpcrypt::listen::ListenOptions {
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
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) server: ServerOpts,
    /// Directory of files to serve.
    #[arg(long)]
    pub(crate) root: PathBuf,
}

#[derive(Args)]
pub(crate) struct GatewayArgs {
    #[command(flatten)]
    pub(crate) server: ServerOpts,
    /// The plaintext service, e.g. http://127.0.0.1:3000
    #[arg(long)]
    pub(crate) upstream: http::Uri,
    /// Prefix of the --pass-outer fields sent upstream; fields of the
    /// client's sealed request that start with it are dropped.
    #[arg(long, default_value = httpcrypt::proto::inner::DEFAULT_OUTER_PREFIX, value_parser = parse_outer_prefix)]
    pub(crate) outer_prefix: String,
    /// Seconds to wait for the upstream's connection and answer head;
    /// past it the client gets 504 (a refused or failed upstream: 502).
    #[arg(long, default_value_t = 60)]
    pub(crate) upstream_timeout: u64,
    /// Idle keep-alive connections kept open to the upstream.
    #[arg(long, default_value_t = 32)]
    pub(crate) upstream_pool_idle: usize,
    /// Seconds an idle upstream connection is kept.
    #[arg(long, default_value_t = 90)]
    pub(crate) upstream_idle_timeout: u64,
    /// Client fields added for the upstream from the TCP peer (the client's
    /// own fields of these names are dropped): X-Forwarded-For and
    /// X-Forwarded-Proto, Forwarded (RFC 7239), both, or none.
    #[arg(long, value_enum, default_value = "xff")]
    pub(crate) forwarded: ForwardedArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ForwardedArg {
    None,
    Xff,
    Forwarded,
    Both,
}

pub(crate) fn parse_field_name(text: &str) -> std::result::Result<http::HeaderName, String> {
    http::HeaderName::from_bytes(text.trim().as_bytes())
        .map_err(|_| format!("not a field name: {text:?}"))
}

pub(crate) fn parse_field_value(text: &str) -> std::result::Result<http::HeaderValue, String> {
    http::HeaderValue::from_str(text.trim()).map_err(|_| format!("not a field value: {text:?}"))
}

/// A prefix that makes a field name of any field name appended to it.
pub(crate) fn parse_outer_prefix(text: &str) -> std::result::Result<String, String> {
    match parse_field_name(&format!("{text}x")) {
        Ok(_) if !text.is_empty() => Ok(text.to_string()),
        _ => Err(format!("not a field-name prefix: {text:?}")),
    }
}

#[derive(Args)]
pub(crate) struct CertsArgs {
    /// Server URL, e.g. http://127.0.0.1:8080/
    pub(crate) url: http::Uri,
    /// The server's mount path.
    #[arg(long, default_value = "")]
    pub(crate) mount: String,
    /// Pinned identity key (base64url): only certificates it signed count.
    /// A base64url key may begin with `-`: the value after the flag is
    /// always the key.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) identity: Option<String>,
    #[command(flatten)]
    pub(crate) discovery: dns::DiscoveryOpts,
}
