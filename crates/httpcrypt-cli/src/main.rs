//! The `httpcrypt` command: keys, servers, a gateway, and a curl-like client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

mod asap;
mod demo;
mod dns;
mod fetch;
mod flood;
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
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a key directory; prints the identity public key (base64url).
    Keygen(KeygenArgs),
    /// Serve a directory of static files over HTTPCrypt.
    Serve(ServeArgs),
    /// Put HTTPCrypt in front of an existing plaintext HTTP service.
    Gateway(GatewayArgs),
    /// Fetch a URL over HTTPCrypt, like curl; the body goes to stdout.
    Fetch(fetch::FetchArgs),
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
    #[arg(long, default_value_t = httpcrypt::split_proxy::DEFAULT_MAX_ENTRIES)]
    cache_entries: usize,
    /// Records shorter than this many bytes are not cached (fetched from
    /// the origin each time).
    #[arg(long, default_value_t = httpcrypt::split_proxy::DEFAULT_MIN_PAYLOAD)]
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
}

/// Options shared by `serve` and `gateway`.
#[derive(Args, Clone)]
struct ServerOpts {
    /// Key directory (see `httpcrypt keygen`); required by the v1 profile.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Protocol: HTTPCrypt v1, or rspamd's (answers `rspamc --key`).
    #[arg(long, value_enum, default_value = "v1")]
    profile: rspamd::Profile,
    /// rspamd profile: an `rspamadm keypair` file (repeatable: several keys).
    #[arg(long)]
    keypair: Vec<PathBuf>,
    /// rspamd profile: refuse plaintext requests instead of passing them on.
    #[arg(long)]
    encrypted_only: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Path prefix under which HTTPCrypt is served.
    #[arg(long, default_value = "")]
    mount: String,
    /// Worker threads (1: a single event loop on the main thread).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Key rotation period R in seconds (the DNS TTL).
    #[arg(long, default_value_t = 3600)]
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
    /// Turn off the Date freshness check and the strike register.
    #[arg(long)]
    no_replay_check: bool,
    /// Do not issue tickets.
    #[arg(long)]
    no_tickets: bool,
    /// Most concurrent connections.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Largest outer request body (or decoded GET query) in bytes; above it 413.
    #[arg(long, default_value_t = httpcrypt::proto::Limits::default().max_body)]
    max_body: usize,
    /// Seconds a client may take to send a complete request head.
    #[arg(long, default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a request body may stall before the request fails.
    #[arg(long, default_value_t = 30)]
    body_timeout: u64,
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
    #[command(flatten)]
    publish: dns::PublishOpts,
    #[command(flatten)]
    defence: flood::DefenceOpts,
    #[command(flatten)]
    asap: asap::ListenOpts,
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
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
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
            let store = httpcrypt::keystore::KeyStore::create(&dir, a.static_key)?;
            println!("{}", store.identity().to_b64());
            Ok(0)
        }
        Cmd::Serve(a) => {
            if !a.root.is_dir() {
                bail!("--root {} is not a directory", a.root.display());
            }
            let svc = httpcrypt::runtime::static_files(&a.root);
            if a.server.profile == rspamd::Profile::Rspamd {
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
            let upstream = httpcrypt::runtime::Upstream::new(a.upstream);
            if a.server.profile == rspamd::Profile::Rspamd {
                rspamd::serve(&a.server, upstream).await?;
                return Ok(0);
            }
            serve(&a.server, upstream, /* abandon_on_hangup */ true).await?;
            Ok(0)
        }
        Cmd::Fetch(a) if a.profile == rspamd::Profile::Rspamd => rspamd::fetch(&a).await,
        Cmd::Fetch(a) => fetch::run(a).await,
        Cmd::Certs(a) => certs(a).await,
        Cmd::Demo(a) => demo::run(a).await,
        Cmd::Fleet(FleetCmd::Init {
            keys,
            period,
            origin,
        }) => {
            open_store(&keys)?;
            let path = httpcrypt::fleet::init(&keys, Duration::from_secs(period.max(1)), origin)?;
            println!("{}", path.display());
            Ok(0)
        }
        Cmd::Fleet(FleetCmd::Reseed { keys, at, ahead }) => {
            open_store(&keys)?;
            let (epoch, start) = httpcrypt::fleet::reseed(&keys, at, ahead)?;
            println!("{epoch} {start}");
            eprintln!(
                "httpcrypt: reseed at epoch {epoch} (unix {start}); copy {} to every instance before then",
                keys.join(httpcrypt::fleet::FLEET_FILE).display()
            );
            Ok(0)
        }
        Cmd::Dns(a) => dns::run(a).await,
        Cmd::SplitProxy(a) => split_proxy(a).await,
        Cmd::Flood(a) => flood::run(a).await,
    }
}

async fn split_proxy(a: SplitProxyArgs) -> Result<i32> {
    if a.origin.scheme_str() != Some("http") || a.origin.authority().is_none() {
        bail!("--origin must be an http:// URL with a host");
    }
    let limits = httpcrypt::split_proxy::CacheLimits {
        max_bytes: a.cache_size,
        max_entries: a.cache_entries,
        min_payload: a.cache_min_record,
    };
    let cache = httpcrypt::split_proxy::DiskCache::open_with(&a.cache_dir, limits)
        .with_context(|| format!("opening cache directory {}", a.cache_dir.display()))?;
    let proxy = httpcrypt::split_proxy::SplitProxy::new(
        httpcrypt::split_proxy::ProxyConfig {
            origin: a.origin.clone(),
            max_record: a.max_record,
        },
        std::sync::Arc::new(cache),
    );
    let listener = httpcrypt::runtime::bind(a.listen).await?;
    eprintln!(
        "httpcrypt: split proxy on http://{} for {}",
        listener.local_addr()?,
        a.origin
    );
    let listen = httpcrypt::runtime::ListenOptions {
        max_connections: a.max_connections,
        ..Default::default()
    };
    let cache = proxy.cache().clone();
    httpcrypt::runtime::run(listener, proxy, listen, async {
        let _ = tokio::signal::ctrl_c().await;
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
/// `abandon_on_hangup`: see [`httpcrypt::runtime::ListenOptions`] (yes for a
/// gateway, no for static files).
async fn serve<S>(opts: &ServerOpts, svc: S, abandon_on_hangup: bool) -> Result<()>
where
    S: tower::Service<
            http::Request<httpcrypt::server::HcBody>,
            Response = http::Response<httpcrypt::server::HcBody>,
            Error = httpcrypt::BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let (layer, listener) = prepare(opts).await?;
    let gate = asap::prepare_listener(&opts.asap, &listener, opts.keys.as_deref())?;
    let svc = tower::Layer::layer(&layer, svc);
    let listen = httpcrypt::runtime::ListenOptions {
        max_connections: opts.max_connections,
        header_timeout: Duration::from_secs(opts.header_timeout.max(1)),
        gate,
        abandon_on_hangup,
        ..Default::default()
    };
    httpcrypt::runtime::run(listener, svc, listen, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

async fn prepare(
    opts: &ServerOpts,
) -> Result<(httpcrypt::HttpCryptLayer, tokio::net::TcpListener)> {
    if !opts.keypair.is_empty() || opts.encrypted_only {
        bail!("--keypair and --encrypted-only belong to --profile rspamd");
    }
    let dir = opts
        .keys
        .as_deref()
        .context("--keys is required (a key directory from `httpcrypt keygen --dir`)")?;
    let store = open_store(dir)?.with_profile(if opts.compact {
        httpcrypt::proto::Profile::Compact
    } else {
        httpcrypt::proto::Profile::V1
    });
    let identity = store.identity().to_b64();
    let keys = httpcrypt::keystore::start(store, Duration::from_secs(opts.rotation.max(1)))?;
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
        ..Default::default()
    };
    let listener = httpcrypt::runtime::bind(opts.listen).await?;
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
    Ok((layer, listener))
}

fn open_store(dir: &Path) -> Result<httpcrypt::keystore::KeyStore> {
    httpcrypt::keystore::KeyStore::open(dir).with_context(|| {
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
    let now = httpcrypt::keystore::unix_now();
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
