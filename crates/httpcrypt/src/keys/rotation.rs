//! Keeping [`LiveKeys`] fresh: the rotation task of a server ([`start`]),
//! re-reading a directory on demand ([`reload`]) or periodically for a
//! process that only publishes ([`follow`]). A running server creates a new
//! kex key every rotation period R, keeps every unexpired one, and deletes
//! (in memory: zeroizes) expired ones.

use std::path::Path;
use std::time::Duration;

use httpcrypt_proto::{IdentityKey, IdentityPublic, Profile};

use super::live::LiveKeys;
use super::store::{cfg, KeyStore, DEFAULT_SKEW, FLEET_FILE};
use crate::clock::unix_now;
use crate::error::Error;

/// Loads a key store into [`LiveKeys`], making sure a current key exists,
/// and (unless static) spawns the rotation task on the current tokio runtime.
/// A directory with a fleet file derives its keys from the shared ratchet
/// instead ([`super::fleet`]; the period is then the fleet's).
pub fn start(store: KeyStore, period: Duration) -> Result<LiveKeys, Error> {
    let fleet = store.dir.join(FLEET_FILE);
    if fleet.exists() {
        if store.profile != Profile::V1 {
            // Fleet certificates come from the shared ratchet, byte for byte
            // the same on every instance; they are version 1.
            return Err(cfg("profile 2 (--compact) is not available for fleets"));
        }
        let identity = IdentityKey::from_seed(*store.identity.to_seed());
        return super::fleet::start(fleet, identity, LiveKeys::new(), store.kem_every);
    }
    let live = LiveKeys::new();
    let now = unix_now();
    let epochs = store.load(now)?;
    let fresh_enough = epochs.last().is_some_and(|e| {
        store.is_static() || u64::from(e.cert.not_before) + DEFAULT_SKEW + period.as_secs() > now
    });
    for e in epochs {
        let mut e = store.reissue(e)?;
        // A server without the hybrid suite holds no suite-2 key, and so
        // publishes none, whatever its files still hold.
        if !store.is_hybrid() {
            e.hybrid = None;
            e.kem = None;
        }
        live.add(e);
    }
    if !fresh_enough {
        live.add(store.rotate(now, period)?);
    }
    if store.is_static() {
        return Ok(live);
    }
    live.set_next_rotation(now + period.as_secs());
    let task_keys = live.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = unix_now();
            match store.rotate(now, period) {
                Ok(epoch) => {
                    tracing::info!(serial = epoch.cert.serial, kid = %epoch.cert.kid().to_b64(), "rotated key");
                    task_keys.add(epoch);
                    crate::metrics::rotation(true);
                }
                Err(e) => {
                    tracing::error!(error = %e, "key rotation failed; keeping the current keys");
                    crate::metrics::rotation(false);
                }
            }
            task_keys.remove_expired(now);
            let _ = store.load(now);
            task_keys.set_next_rotation(now + period.as_secs());
        }
    });
    Ok(live)
}

/// Re-reads a key directory into running keys (`httpcrypt serve` on
/// SIGHUP): adds every stored epoch not held yet (a key copied in by an
/// operator, say), drops expired ones, and returns how many were added.
/// Never creates keys, so it does not disturb the rotation task. A fleet
/// directory's keys come from the ratchet, not from files: nothing to do.
/// The identity is not reloaded: a directory whose identity is no longer
/// `identity` is refused (a restart takes a new identity).
pub fn reload(dir: &Path, identity: &IdentityPublic, live: &LiveKeys) -> Result<usize, Error> {
    if dir.join(FLEET_FILE).exists() {
        return Ok(0);
    }
    let store = KeyStore::open(dir)?;
    if store.identity().to_b64() != identity.to_b64() {
        return Err(cfg(format!(
            "{}: the identity key changed; restart to use the new identity",
            dir.display()
        )));
    }
    let now = unix_now();
    let mut added = 0;
    for e in store.load(now)? {
        if !live.holds(&e.cert) {
            live.add(e);
            added += 1;
        }
    }
    live.remove_expired(now);
    Ok(added)
}

/// A read-only [`LiveKeys`] that follows a key directory another process
/// rotates (for `httpcrypt dns serve`): re-reads it every `interval`,
/// adding new epochs and dropping expired ones. Never creates keys.
pub fn follow(store: KeyStore, interval: Duration) -> Result<LiveKeys, Error> {
    let live = LiveKeys::new();
    let load = |live: &LiveKeys, store: &KeyStore| -> Result<(), Error> {
        let now = unix_now();
        for e in store.load(now)? {
            if !live.holds(&e.cert) {
                live.add(e);
            }
        }
        live.remove_expired(now);
        Ok(())
    };
    load(&live, &store)?;
    let task_keys = live.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = load(&task_keys, &store) {
                tracing::warn!(error = %e, "re-reading the key directory failed");
            }
        }
    });
    Ok(live)
}
