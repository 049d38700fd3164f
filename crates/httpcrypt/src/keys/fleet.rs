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

use std::path::{Path, PathBuf};
use std::time::Duration;

use httpcrypt_proto::ratchet::{EpochKeys, Ratchet};
use httpcrypt_proto::IdentityKey;
use rand_core::{OsRng, RngCore};
use zeroize::Zeroizing;

use super::live::LiveKeys;
pub use super::store::FLEET_FILE;
use super::store::{write_secret, Epoch, DEFAULT_SKEW};
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
) -> Result<(Vec<EpochKeys>, Ratchet), Error> {
    let text = Zeroizing::new(std::fs::read_to_string(path)?);
    let mut r = Ratchet::from_text(&text)?;
    let keys = r.advance(now, identity);
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
/// ratchet at every epoch boundary.
pub fn start(path: PathBuf, identity: IdentityKey, live: LiveKeys) -> Result<LiveKeys, Error> {
    let now = unix_now();
    let (keys, r) = advance(&path, &identity, now)?;
    let mut newest = keys.last().map_or(0, |k| k.epoch);
    for k in keys {
        live.add(to_epoch(k));
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
            match advance(&path, &identity, now) {
                Ok((keys, r)) => {
                    let seen = newest;
                    for k in keys.into_iter().filter(|k| k.epoch > seen) {
                        newest = k.epoch;
                        tracing::info!(epoch = k.epoch, kid = %k.cert.kid().to_b64(), "fleet epoch");
                        task.add(to_epoch(k));
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
