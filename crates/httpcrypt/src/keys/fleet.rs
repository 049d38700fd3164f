//! Fleet mode: several instances behind one name decrypt each other's
//! clients because they derive every epoch's keys from a shared ratchet
//! (`httpcrypt_proto::ratchet`) instead of drawing them at random. Each
//! instance advances its own copy of the state file and overwrites it, so
//! the seeds of past epochs are gone from every disk (forward secrecy).
//!
//! `DIR/fleet` holds `hc1-ratchet ORIGIN PERIOD SKEW EPOCH SEED [AT FRESH]`;
//! create it once with [`init`] (`httpcrypt fleet init`), copy the key
//! directory (identity key and fleet file) to every instance before
//! starting them, and destroy the copy `init` wrote wherever no instance
//! runs: anyone holding a state derives every later epoch's keys.
//!
//! [`reseed`] (`httpcrypt fleet reseed`) bounds that: it announces fresh
//! randomness for a future epoch `AT`; copy the new file to every instance
//! before `AT` begins (each re-reads its file at every epoch boundary) and
//! they all switch there. A state stolen before the reseed reveals nothing
//! from `AT` on.
//!
//! With the hybrid suite, every `K` epochs share one ML-KEM key whose seed
//! the ratchet gives at the window's first epoch `w = K·⌊e/K⌋`
//! (`kem_seed_w`, spec/hybrid.md H4). The ratchet forgets `seed_w` as it
//! moves on, so the derived ML-KEM seed is kept in `DIR/kem/w.key` (mode
//! 0600) while an epoch of its window lives. The window the fleet file
//! starts in takes the seed of the file's own epoch (the ratchet holds no
//! older one): instances started from copies of one file agree on it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use httpcrypt_proto::hybrid::{HybridCert, KemSecret, KEM_SEED_LEN};
use httpcrypt_proto::ratchet::{EpochKeys, Ratchet};
use httpcrypt_proto::{b64, IdentityKey, Profile};
use rand_core::{OsRng, RngCore};
use zeroize::Zeroizing;

use super::live::LiveKeys;
pub use super::store::FLEET_FILE;
use super::store::{write_secret, Epoch, DEFAULT_SKEW, KEM_DIR};
use crate::clock::unix_now;
use crate::error::Error;

/// Creates `dir/fleet` with a fresh seed, epochs of `period` from `origin`.
pub fn init(dir: &Path, period: Duration, origin: u64) -> Result<PathBuf, Error> {
    let path = dir.join(FLEET_FILE);
    if path.exists() {
        return Err(Error::Config(format!(
            "{} exists; refusing to replace a fleet seed",
            path.display()
        )));
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    OsRng.fill_bytes(&mut seed[..]);
    let secs = period.as_secs().max(1);
    let epoch = unix_now().saturating_sub(origin) / secs;
    let r = Ratchet::new(origin, secs, DEFAULT_SKEW, epoch, *seed)?;
    write_secret(&path, r.to_text().as_bytes())?;
    Ok(path)
}

/// Announces a reseed of `dir/fleet` at epoch `at`, or `ahead` epochs
/// after the current one: draws fresh randomness and writes the state back.
/// Returns the epoch and the unix second it begins.
pub fn reseed(dir: &Path, at: Option<u64>, ahead: u64) -> Result<(u64, u64), Error> {
    let path = dir.join(FLEET_FILE);
    let text = Zeroizing::new(
        std::fs::read_to_string(&path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?,
    );
    let mut r = Ratchet::from_text(&text)?;
    let now = unix_now();
    let current = r.epoch_at(now).max(r.epoch());
    let at = at.unwrap_or(current + ahead.max(1));
    let mut fresh = Zeroizing::new([0u8; 32]);
    OsRng.fill_bytes(&mut fresh[..]);
    r.schedule_reseed(now, at, *fresh).map_err(|_| {
        Error::Config(match r.reseed_at() {
            Some(p) if at > current => format!("a reseed at epoch {p} is already pending"),
            _ => format!("epoch {at} is not in the future (the current epoch is {current})"),
        })
    })?;
    write_secret(&path, r.to_text().as_bytes())?;
    Ok((at, r.epoch_start(at)))
}

/// The fleet's hybrid suite: `K`, and the ML-KEM keys of the windows read
/// so far.
struct FleetKem {
    every: u64,
    dir: PathBuf,
    keys: Vec<(u64, Arc<KemSecret>)>,
}

impl FleetKem {
    fn path(&self, window: u64) -> PathBuf {
        self.dir.join(format!("{window:010}.key"))
    }

    /// Stores the ML-KEM seed of `window` unless it is stored already.
    fn store(&self, window: u64, seed: &[u8; KEM_SEED_LEN]) -> Result<(), Error> {
        let path = self.path(window);
        if path.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let text = Zeroizing::new(format!("seed {}\n", b64::encode(&seed[..])));
        write_secret(&path, text.as_bytes())
    }

    /// The ML-KEM key of `window`, if its seed is stored.
    fn key(&mut self, window: u64) -> Option<Arc<KemSecret>> {
        if let Some((_, k)) = self.keys.iter().find(|(w, _)| *w == window) {
            return Some(k.clone());
        }
        let text = Zeroizing::new(std::fs::read_to_string(self.path(window)).ok()?);
        let seed = text.trim().strip_prefix("seed ")?;
        let seed = Zeroizing::new(b64::decode_array::<KEM_SEED_LEN>(seed.as_bytes()).ok()?);
        let key = Arc::new(KemSecret::from_seed(*seed));
        self.keys.push((window, key.clone()));
        Some(key)
    }

    /// Forgets (in memory and on disk) the windows before `window`.
    fn drop_before(&mut self, window: u64) {
        self.keys.retain(|(w, _)| *w >= window);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let old = p
                .file_stem()
                .and_then(|s| s.to_str()?.parse::<u64>().ok())
                .is_some_and(|w| w < window);
            if old && p.extension().is_some_and(|x| x == "key") {
                let _ = std::fs::remove_file(p);
            }
        }
    }

    /// The epoch as served: with its suite-2 certificate when its window's
    /// ML-KEM key is known.
    fn epoch(&mut self, k: EpochKeys, identity: &IdentityKey) -> Epoch {
        let kem = self.key(k.epoch / self.every * self.every);
        let hybrid = kem.as_ref().map(|kem| {
            HybridCert::sign(
                identity,
                Profile::V1,
                k.cert.serial,
                k.cert.not_before,
                k.cert.not_after,
                k.cert.kex_public,
                kem.public().hash(),
            )
        });
        Epoch {
            hybrid,
            kem,
            ..to_epoch(k)
        }
    }
}

/// The epoch as served, with or without the hybrid suite.
fn served(kem: &mut Option<FleetKem>, k: EpochKeys, identity: &IdentityKey) -> Epoch {
    match kem {
        Some(kem) => kem.epoch(k, identity),
        None => to_epoch(k),
    }
}

fn to_epoch(k: EpochKeys) -> Epoch {
    Epoch {
        secret: k.secret,
        cert: k.cert,
        ticket: k.ticket,
        hybrid: None,
        kem: None,
    }
}

fn advance(
    path: &Path,
    identity: &IdentityKey,
    now: u64,
    kem: Option<&FleetKem>,
) -> Result<(Vec<EpochKeys>, Ratchet), Error> {
    let text = Zeroizing::new(std::fs::read_to_string(path)?);
    let mut r = Ratchet::from_text(&text)?;
    let keys = match kem {
        Some(kem) => {
            // The window the state starts in, when nothing is stored for it:
            // the state's own seed is the oldest the ratchet has.
            let first = r.epoch() / kem.every * kem.every;
            if !kem.path(first).exists() {
                kem.store(first, &r.kem_seed())?;
            }
            let (keys, window) = r.advance_with_kem(now, identity, kem.every);
            // Stored before the ratchet's new state: after it, the seed
            // cannot be derived again.
            if let Some((w, seed)) = window {
                kem.store(w, &seed)?;
            }
            keys
        }
        None => r.advance(now, identity),
    };
    write_secret(path, r.to_text().as_bytes())?;
    Ok((keys, r))
}

/// Time left until unix second `t` (zero if it has passed).
fn until(t: u64) -> Duration {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(t);
    at.duration_since(std::time::SystemTime::now())
        .unwrap_or_default()
}

/// Loads the live epochs into `live` and spawns the task that advances the
/// ratchet at every epoch boundary. With `kem_every` (the hybrid suite),
/// every epoch also gets a suite-2 certificate for its window's ML-KEM key.
pub fn start(
    path: PathBuf,
    identity: IdentityKey,
    live: LiveKeys,
    kem_every: Option<u32>,
) -> Result<LiveKeys, Error> {
    let now = unix_now();
    let mut kem = kem_every.map(|k| FleetKem {
        every: u64::from(k.max(1)),
        dir: path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(KEM_DIR),
        keys: Vec::new(),
    });
    let (keys, r) = advance(&path, &identity, now, kem.as_ref())?;
    let mut newest = keys.last().map_or(0, |k| k.epoch);
    if let (Some(kem), Some(oldest)) = (kem.as_mut(), keys.first()) {
        kem.drop_before(oldest.epoch / kem.every * kem.every);
    }
    for k in keys {
        live.add(served(&mut kem, k, &identity));
    }
    let period = r.period();
    let next = r.epoch_start(newest + 1);
    live.set_next_rotation(next);
    let task = live.clone();
    tokio::spawn(async move {
        let mut next = next;
        loop {
            // To the millisecond: instances that woke up to a whole second
            // late would advertise the new epoch's key while others still
            // refuse it (spec §6.7).
            tokio::time::sleep(until(next) + Duration::from_millis(20)).await;
            let now = unix_now();
            match advance(&path, &identity, now, kem.as_ref()) {
                Ok((keys, r)) => {
                    let seen = newest;
                    if let (Some(kem), Some(oldest)) = (kem.as_mut(), keys.first()) {
                        kem.drop_before(oldest.epoch / kem.every * kem.every);
                    }
                    for k in keys.into_iter().filter(|k| k.epoch > seen) {
                        newest = k.epoch;
                        tracing::info!(epoch = k.epoch, kid = %k.cert.kid().to_b64(), "fleet epoch");
                        task.add(served(&mut kem, k, &identity));
                        crate::metrics::rotation(true);
                    }
                    next = r.epoch_start(newest + 1);
                }
                Err(e) => {
                    tracing::error!(error = %e, "fleet ratchet failed; keeping current keys");
                    crate::metrics::rotation(false);
                    next = now + period;
                }
            }
            task.remove_expired(now);
            task.set_next_rotation(next);
        }
    });
    Ok(live)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::keys::store::{KeyStore, DEFAULT_PERIOD};

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
    }

    #[test]
    fn fleet_state_is_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = dir.path().join("keys");
        KeyStore::create(&keys, false).expect("create");
        let path = init(&keys, DEFAULT_PERIOD, 0).expect("fleet");
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o604)).expect("chmod");
        let msg = KeyStore::open(&keys).expect_err("refused").to_string();
        assert!(msg.contains("chmod 600"), "{msg}");
    }
}
