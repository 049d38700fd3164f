//! [`LiveKeys`]: the keys a running server holds, shared by the rotation
//! task, the request handlers and DNS publication.

use std::sync::{Arc, RwLock};

use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::hybrid::{HybridKeys, HybridServerKey};
use httpcrypt_proto::server::ServerKeys;
use httpcrypt_proto::ticket::TicketKey;

use super::store::Epoch;

/// The keys a running server uses, shared between the rotation task and
/// the request handlers (and DNS publication, which [`LiveKeys::subscribe`]s
/// to changes). Epochs with a suite-2 certificate are also held as
/// [`HybridKeys`] (spec/hybrid.md), with the same ticket keys.
#[derive(Debug, Clone, Default)]
pub struct LiveKeys {
    keys: Arc<RwLock<ServerKeys>>,
    hybrid: Arc<RwLock<HybridKeys>>,
    next_rotation: Arc<std::sync::atomic::AtomicU64>,
    /// Bumped whenever a key is added or removed.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl LiveKeys {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an epoch.
    pub fn add(&self, epoch: Epoch) {
        let expires = u64::from(epoch.cert.not_after);
        if let (Some(cert), Some(kem)) = (epoch.hybrid, epoch.kem) {
            let kex = httpcrypt_proto::KexSecret::from_bytes(*epoch.secret.to_bytes());
            match HybridServerKey::new(kex, kem, cert) {
                Ok(key) => {
                    let mut h = self.hybrid.write().unwrap_or_else(|p| p.into_inner());
                    let kid = key.kid();
                    h.add_key(key);
                    h.add_ticket_key_for(
                        TicketKey::new(epoch.ticket.tid(), *epoch.ticket.to_bytes()),
                        kid,
                        expires,
                    );
                }
                Err(e) => tracing::error!(
                    serial = epoch.cert.serial,
                    code = e.code(),
                    "a suite-2 certificate that does not match its keys; serving suite 1 only"
                ),
            }
        }
        let mut k = self.keys.write().unwrap_or_else(|p| p.into_inner());
        let kid = epoch.cert.kid();
        k.add_key(epoch.secret, epoch.cert);
        k.add_ticket_key_for(epoch.ticket, kid, expires);
        drop(k);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Whether a key with this certificate's key ID is held.
    pub fn holds(&self, cert: &KeyCert) -> bool {
        self.with(|k| k.keys().iter().any(|x| x.cert.kid() == cert.kid()))
    }

    /// The certificates of every key held (expired ones are gone after
    /// [`LiveKeys::remove_expired`]), lowest serial first.
    pub fn certs(&self) -> Vec<KeyCert> {
        let mut v: Vec<KeyCert> = self.with(|k| k.keys().iter().map(|x| x.cert.clone()).collect());
        v.sort_by_key(|c| (c.serial, c.not_before));
        v
    }

    /// A receiver that sees a new value whenever a key is added or removed.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many times a key has been added or removed so far: equal
    /// values mean the same set of keys.
    pub fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Runs `f` with read access to the keys.
    pub fn with<R>(&self, f: impl FnOnce(&ServerKeys) -> R) -> R {
        f(&self.keys.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The suite-2 certificates held, each with the ML-KEM key it names,
    /// for publication.
    pub fn hybrid_certs(
        &self,
    ) -> Vec<(
        httpcrypt_proto::hybrid::HybridCert,
        httpcrypt_proto::hybrid::KemPublic,
    )> {
        self.with_hybrid(|h| {
            h.keys()
                .iter()
                .map(|k| (k.cert().clone(), k.kem().public().clone()))
                .collect()
        })
    }

    /// Runs `f` with read access to the suite-2 keys.
    pub fn with_hybrid<R>(&self, f: impl FnOnce(&HybridKeys) -> R) -> R {
        f(&self.hybrid.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Drops (zeroizes) expired keys.
    pub fn remove_expired(&self, now: u64) {
        self.hybrid
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove_expired(now);
        let mut k = self.keys.write().unwrap_or_else(|p| p.into_inner());
        let before = k.keys().len();
        k.remove_expired(now);
        let removed = k.keys().len() != before;
        drop(k);
        if removed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// Seconds until the next rotation (86400 when there is none).
    pub fn seconds_to_rotation(&self, now: u64) -> u64 {
        match self
            .next_rotation
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => 86_400,
            t => t.saturating_sub(now),
        }
    }

    pub(crate) fn set_next_rotation(&self, t: u64) {
        self.next_rotation
            .store(t, std::sync::atomic::Ordering::Relaxed);
    }
}
