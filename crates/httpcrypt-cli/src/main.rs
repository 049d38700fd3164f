//! The `httpcrypt` command: keys, servers, a gateway, and a curl-like client.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;

mod access;
mod args;
mod asap;
mod config;
mod demo;
mod diagnose;
mod dns;
mod fetch;
mod flood;
mod heap;
mod keyops;
mod manual;
mod metrics;
mod ops;
mod output;
mod profile;
mod request;
mod rspamd;

use args::*;

/// The system allocator, with tokio's 128-byte aligned blocks carved from
/// plain `malloc` (`heap`: two per accepted connection).
#[global_allocator]
static GLOBAL: heap::Heap = heap::Heap;

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
        Cmd::Keygen(a) if a.format == Some(profile::KeyFormat::Rspamd) => {
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
            h2: a.origin_h2,
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
    // The HTTP/2 leg for split proxies: the same service, stopped when the
    // HTTP/1.1 listener starts draining.
    let (h2_stop, h2_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(addr) = opts.h2_listen {
        let l = httpcrypt::listen::bind(addr).await?;
        eprintln!(
            "httpcrypt: HTTP/2 (prior knowledge) on http://{}",
            l.local_addr()?
        );
        let svc = svc.clone();
        tokio::spawn(async move {
            let stopped = async {
                let _ = h2_stopped.await;
            };
            if let Err(e) =
                httpcrypt::listen::run_h2(l, svc, httpcrypt::listen::H2Options::default(), stopped)
                    .await
            {
                tracing::error!(error = %e, "the HTTP/2 listener failed");
            }
        });
    }
    let drained = httpcrypt::listen::run_draining(
        listener,
        svc,
        listen,
        async {
            let name = stop.await;
            let _ = h2_stop.send(());
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
