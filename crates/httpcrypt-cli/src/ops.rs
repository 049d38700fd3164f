//! Running `serve` and `gateway` as a service: signals (SIGTERM and SIGINT
//! drain, SIGHUP reloads), following the conventions of nginx and systemd.

use std::future::Future;
use std::path::PathBuf;

use anyhow::Result;
use tokio::signal::unix::{signal, SignalKind};

/// Resolves at the first SIGTERM or SIGINT, with the signal's name. A
/// second one while the server drains ends the process at once (exit
/// status 1), as a second Ctrl-C does in most servers.
pub fn stop_signal() -> Result<impl Future<Output = &'static str>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("httpcrypt: second stop signal: exiting without draining");
            std::process::exit(1);
        });
        name
    })
}

/// The reload handle of the log filter (SIGHUP with `--config`).
static LOG_FILTER: std::sync::OnceLock<
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>,
> = std::sync::OnceLock::new();

/// Logs to stderr with `filter` (an `EnvFilter` directive; `warn` if it
/// does not parse), as text or as JSON lines; colour only on a terminal,
/// so log files and journald get plain text.
pub fn init_logging(filter: &str, json: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let _ = LOG_FILTER.set(handle);
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .init();
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .init();
    }
}

/// Replaces the log filter of [`init_logging`].
pub fn set_log_filter(filter: &str) -> Result<()> {
    let f = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| anyhow::anyhow!("log filter {filter:?}: {e}"))?;
    if let Some(h) = LOG_FILTER.get() {
        h.reload(f)?;
    }
    Ok(())
}

/// The reload of a configuration file: applies its `log` filter and warns
/// about changed settings that need a restart.
pub fn config_reloader(path: PathBuf) -> Result<Box<dyn Fn() -> Result<()> + Send + Sync>> {
    let split = |flags: Vec<std::ffi::OsString>| {
        let mut log = None;
        let mut rest = Vec::new();
        let mut it = flags.into_iter();
        while let Some(f) = it.next() {
            if f == "--log" {
                log = it.next();
            } else {
                rest.push(f);
            }
        }
        (log, rest)
    };
    let (_, start) = split(crate::config::read(&path)?.1);
    Ok(Box::new(move || {
        let (log, rest) = split(crate::config::read(&path)?.1);
        if let Some(log) = log {
            set_log_filter(&log.to_string_lossy())?;
        }
        if rest != start {
            tracing::warn!(
                file = %path.display(),
                "settings other than `log` changed; they take effect at the next start"
            );
        }
        Ok(())
    }))
}

/// What SIGHUP reloads while connections stay open.
pub struct Reloader {
    /// The key directory and the identity the server started with.
    pub keys: Option<(
        PathBuf,
        httpcrypt::proto::IdentityPublic,
        httpcrypt::keys::LiveKeys,
    )>,
    /// Re-reads the configuration file's reloadable parts (none without `--config`).
    pub config: Option<Box<dyn Fn() -> Result<()> + Send + Sync>>,
}

impl Reloader {
    /// Reloads everything; a failure is logged and the running state kept.
    pub fn reload(&self) {
        if let Some(config) = &self.config {
            match config() {
                Ok(()) => tracing::info!("configuration reloaded"),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "configuration reload failed; keeping the running configuration")
                }
            }
        }
        if let Some((dir, identity, live)) = &self.keys {
            match httpcrypt::keys::reload(dir, identity, live) {
                Ok(added) => tracing::info!(added, dir = %dir.display(), "key directory reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "key reload failed; keeping the running keys")
                }
            }
        }
    }

    /// Reloads on every SIGHUP, on a task of the current runtime.
    pub fn on_hangup(self) -> Result<()> {
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading");
                self.reload();
            }
        });
        Ok(())
    }
}

/// `--help` text of `serve` and `gateway` on signals.
pub const SIGNALS_HELP: &str = "\
Signals:
  SIGTERM, SIGINT  drain: stop accepting, finish the requests in flight (at
                   most --shutdown-timeout), then exit 0; a second one exits at once
  SIGHUP           reload without dropping connections: the key directory
                   (keys added or expired since; not the identity) and, with
                   --config, the file's `log` filter; other settings need a
                   restart (a changed one is logged)";
