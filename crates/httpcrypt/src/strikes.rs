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

    /// Starts bringing the memory a later check of `(kid, n0)` reads into
    /// the cache, without waiting for it (a local register); does nothing
    /// by default.
    fn prefetch(&self, _kid: &KeyId, _n0: &[u8; 24]) {}
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

    fn prefetch(&self, kid: &KeyId, n0: &[u8; 24]) {
        // A busy lock means another request is checking now: skip the hint.
        if let Ok(r) = self.0.try_lock() {
            if let Some(p) = r.check_start(kid, n0) {
                prefetch_read(p);
            }
        }
    }
}

/// Asks the CPU to bring the cache line at `p` in and goes on at once.
///
/// The register's check is one random access into tens of megabytes (a
/// cache and TLB miss). The layer knows `(kid, n0)` at admission, before it
/// opens the request; prefetching there lets the miss overlap that work. A
/// plain read would not: it sits under the register's mutex, whose release
/// (a locked exchange) waits for the read to complete. A prefetch is not a
/// read in the memory model: it neither faults nor waits, whatever `p` is.
#[allow(unsafe_code)]
fn prefetch_read(p: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache; it dereferences nothing
    // and never faults, for any address (Intel SDM, PREFETCHh). SSE is part
    // of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl LocalStrikes {
    fn record(&self, kid: &KeyId, n0: &[u8; 24], date: u64, now: u64) -> Result<(), Error> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check(kid, n0, date, now)
    }
}

/// Seconds a Redis strike outlives `2W` by default: the largest clock
/// difference between two instances of a fleet it absorbs.
pub const DEFAULT_REDIS_TTL_MARGIN: u64 = 60;

/// A register in Redis: `SET hc1:s:{kid n0} 1 NX EX ttl`, which is atomic,
/// so two instances racing on one replayed request cannot both win.
///
/// The TTL is fixed, `2W + margin`, and depends on no clock: an entry
/// computed from the recording instance's clock (`Date + W − now`) expires
/// early when that clock runs ahead of another instance's, which then still
/// accepts the `Date` (spec §8.2). A `Date` passes §8.1 on an instance for
/// at most `2W` of that instance's time, so with clocks within `margin` of
/// each other a replay finds the entry wherever it lands.
#[derive(Clone)]
pub struct RedisStrikes {
    conn: redis::aio::ConnectionManager,
    window: u64,
    margin: u64,
}

impl std::fmt::Debug for RedisStrikes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStrikes")
            .field("window", &self.window)
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

impl RedisStrikes {
    /// Connects to `url` (e.g. `redis://127.0.0.1:6379/`).
    pub async fn connect(url: &str, window: u64) -> Result<Self, crate::error::Error> {
        let client = redis::Client::open(url)
            .map_err(|e| crate::error::Error::Config(format!("redis: {e}")))?;
        let conn = client
            .get_connection_manager()
            .await
            .map_err(|e| crate::error::Error::Transport(Box::new(e)))?;
        Ok(RedisStrikes {
            conn,
            window,
            margin: DEFAULT_REDIS_TTL_MARGIN,
        })
    }

    /// Keeps strikes `2W + margin` seconds (default
    /// [`DEFAULT_REDIS_TTL_MARGIN`]).
    pub fn with_margin(mut self, margin: u64) -> Self {
        self.margin = margin;
        self
    }

    /// The TTL of every strike, seconds.
    pub fn ttl(&self) -> u64 {
        self.window
            .saturating_mul(2)
            .saturating_add(self.margin)
            .max(1)
    }
}

impl StrikeStore for RedisStrikes {
    fn check<'a>(
        &'a self,
        kid: &'a KeyId,
        n0: &'a [u8; 24],
        _date: u64,
        _now: u64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let mut conn = self.conn.clone();
        let mut key = String::from("hc1:s:");
        b64::encode_to(&[&kid.0[..], &n0[..]].concat(), &mut key);
        // Keep the entry while a replay could still pass the Date check on
        // any instance, whatever its clock says (see the type's docs).
        let ttl = self.ttl();
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
