//! What the client remembers per server, behind one lock: proto's
//! [`HostState`] (keys, ticket, token, clock offset, admission cookie),
//! where the keys came from, and the key pair reused per host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use httpcrypt_proto::client::HostState;
use httpcrypt_proto::KexSecret;

use super::discovery::KeySource;

/// One server's entry.
#[derive(Debug, Default)]
pub(crate) struct Host {
    pub(crate) state: HostState,
    pub(crate) source: Option<KeySource>,
    /// The key pair of [`super::KeyPolicy::ReusePerHost`].
    pub(crate) key: Option<Arc<KexSecret>>,
}

/// Every server's entry, by authority (`host[:port]`).
#[derive(Debug, Default)]
pub(crate) struct Hosts(Mutex<HashMap<String, Host>>);

impl Hosts {
    /// Runs `f` on the entry of `authority` (created empty if missing).
    /// `f` must not wait: the lock is held while it runs.
    pub(crate) fn with<R>(&self, authority: &str, f: impl FnOnce(&mut Host) -> R) -> R {
        let mut hosts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = hosts.get_mut(authority) {
            return f(h);
        }
        f(hosts.entry(authority.to_string()).or_default())
    }
}
