//! The layer's state, shared by every request of every connection: its
//! settings, keys, strike register, session cache, defence and split
//! store.

use std::future::Future;
use std::sync::Mutex;

use httpcrypt_proto::cache::SessionCache;
use std::sync::Arc;

use super::config::ServerConfig;
use crate::keys::LiveKeys;
use crate::split::ContentStore;
use crate::strikes::StrikeStore;

pub(super) struct Shared {
    pub(super) config: ServerConfig,
    pub(super) keys: LiveKeys,
    pub(super) strikes: Arc<dyn StrikeStore>,
    pub(super) cache: Option<Mutex<SessionCache>>,
    pub(super) defence: Option<crate::defence::Defence>,
    /// When the cache was last checked for expired kids (unix seconds).
    pub(super) purged: std::sync::atomic::AtomicU64,
    /// What the last purge of the cache saw of the keys (see
    /// [`Shared::purge_cache`]).
    pub(super) purge_seen: Mutex<PurgeSeen>,
    /// Payloads emitted as stubs (split serving).
    pub(super) store: Option<Arc<ContentStore>>,
    /// Random SipHash key of [`Shared::session_id`].
    pub(super) session_id_key: httpcrypt_proto::suite::SipKey,
    /// Short-ticket keys derived lately, for every connection (spec §7.3).
    pub(super) short_keys: std::sync::Mutex<httpcrypt_proto::ticket::ShortKeyMemo>,
}

/// The keys as the last purge of the session cache found them: the key
/// ring's generation ([`LiveKeys::generation`]) and the earliest
/// `not_after` among the live keys. While both hold, no cached entry can
/// belong to a dead key, and the purge skips its scan.
#[derive(Debug, Clone, Copy)]
pub(super) struct PurgeSeen {
    pub(super) generation: u64,
    pub(super) live_until: u64,
}

impl PurgeSeen {
    /// Before any purge: the first one scans.
    pub(super) const NEVER: PurgeSeen = PurgeSeen {
        generation: u64::MAX,
        live_until: 0,
    };
}

/// Slots of [`Shared::short_keys`]: short tickets in use at once that skip
/// the SHA3-256 on a connection's first request (about 80 bytes each).
pub(super) const SHORT_KEY_SLOTS: usize = 1024;

/// `ServiceExt::oneshot` with its future's `Send` stated, which the
/// compiler cannot infer through the generic services of the layers.
pub(crate) fn call<S, R>(
    svc: S,
    req: R,
) -> impl Future<Output = Result<S::Response, S::Error>> + Send
where
    S: tower::Service<R> + Send,
    S::Future: Send,
    R: Send,
{
    tower::ServiceExt::oneshot(svc, req)
}
