//! Where the server records `(kid, n0)` pairs it has accepted (spec §8):
//! a local strike register (at most once per instance) or Redis shared by a
//! fleet (at most once per fleet). A store that cannot answer fails closed
//! with `overloaded`: a request is never accepted unchecked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use httpcrypt_proto::replay::StrikeRegister;
use httpcrypt_proto::{b64, Error, KeyId};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A strike register, local or shared.
pub trait StrikeStore: Send + Sync + std::fmt::Debug {
    /// Records `(kid, n0)` for a request whose `Date` passed the window;
    /// `replay` if it was recorded before.
    fn check<'a>(
        &'a self,
        kid: &'a KeyId,
        n0: &'a [u8; 24],
        date: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// [`StrikeStore::check`] for a store that answers at once (a local
    /// register), without a future; `None` for one that must be awaited.
    fn check_now(
        &self,
        _kid: &KeyId,
        _n0: &[u8; 24],
        _date: u64,
        _now: u64,
    ) -> Option<Result<(), Error>> {
        None
    }
}

/// The in-process register of `httpcrypt_proto::replay`.
#[derive(Debug)]
pub struct LocalStrikes(Mutex<StrikeRegister>);

impl LocalStrikes {
    /// Wraps a register.
    pub fn new(register: StrikeRegister) -> Self {
        LocalStrikes(Mutex::new(register))
    }
}

impl StrikeStore for LocalStrikes {
    fn check<'a>(
        &'a self,
        kid: &'a KeyId,
        n0: &'a [u8; 24],
        date: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(std::future::ready(self.record(kid, n0, date, now)))
    }

    fn check_now(
        &self,
        kid: &KeyId,
        n0: &[u8; 24],
        date: u64,
        now: u64,
    ) -> Option<Result<(), Error>> {
        Some(self.record(kid, n0, date, now))
    }
}

impl LocalStrikes {
    fn record(&self, kid: &KeyId, n0: &[u8; 24], date: u64, now: u64) -> Result<(), Error> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check(kid, n0, date, now)
    }
}

/// A register in Redis: `SET hc1:s:{kid n0} 1 NX EX ttl`, which is atomic,
/// so two instances racing on one replayed request cannot both win.
#[derive(Clone)]
pub struct RedisStrikes {
    conn: redis::aio::ConnectionManager,
    window: u64,
}

impl std::fmt::Debug for RedisStrikes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStrikes")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl RedisStrikes {
    /// Connects to `url` (e.g. `redis://127.0.0.1:6379/`).
    pub async fn connect(url: &str, window: u64) -> Result<Self, crate::Error> {
        let client =
            redis::Client::open(url).map_err(|e| crate::Error::Config(format!("redis: {e}")))?;
        let conn = client
            .get_connection_manager()
            .await
            .map_err(|e| crate::Error::Transport(Box::new(e)))?;
        Ok(RedisStrikes { conn, window })
    }
}

impl StrikeStore for RedisStrikes {
    fn check<'a>(
        &'a self,
        kid: &'a KeyId,
        n0: &'a [u8; 24],
        date: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let mut conn = self.conn.clone();
        let mut key = String::from("hc1:s:");
        b64::encode_to(&[&kid.0[..], &n0[..]].concat(), &mut key);
        // Keep the entry while a replay could still pass the Date check.
        let ttl = (date + self.window).saturating_sub(now).max(1) + 1;
        Box::pin(async move {
            let set: Result<Option<String>, _> = redis::cmd("SET")
                .arg(&key)
                .arg(1)
                .arg("NX")
                .arg("EX")
                .arg(ttl)
                .query_async(&mut conn)
                .await;
            match set {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(Error::Replay),
                Err(e) => {
                    tracing::warn!(error = %e, "redis strike register unavailable");
                    Err(Error::Overloaded)
                }
            }
        })
    }
}
