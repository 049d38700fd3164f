//! A key directory on disk (spec §6): the identity key, the stored
//! rotation epochs, and the private files that hold them.
//!
//! Layout of a key directory (every secret file is mode 0600, written as
//! spec §6.10 says; [`KeyStore::open`] refuses looser modes):
//!
//! ```text
//! DIR/identity.key      base64url Ed25519 seed
//! DIR/identity.pub      base64url Ed25519 public key (mode 0644)
//! DIR/static            present in static-key mode (embedded use, no forward secrecy)
//! DIR/kex/SERIAL.key    one rotation epoch: "secret <b64u>", "cert hc1 …",
//!                       "ticket <b64u tid> <b64u key>" lines, and with the
//!                       hybrid suite on, "hybrid hc1 …" (its suite-2 certificate)
//! DIR/kem/SERIAL.key    an ML-KEM-768 key made with the kex key of that
//!                       serial: "seed <b64u 64 bytes>" (spec/hybrid.md H4)
//! DIR/fleet             a fleet's shared ratchet state (mode 0600)
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::hybrid::{HybridCert, KemSecret, KEM_SEED_LEN};
use httpcrypt_proto::ticket::TicketKey;
use httpcrypt_proto::{b64, IdentityKey, IdentityPublic, KexSecret, Profile};
use rand_core::OsRng;
use zeroize::Zeroizing;

use crate::clock::unix_now;
use crate::error::Error;

/// Allowed clock skew added to both ends of a certificate's validity.
pub const DEFAULT_SKEW: u64 = 60;
/// Default rotation period R.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(3600);
/// `not_after` of a static key: far in the future.
const STATIC_NOT_AFTER: u32 = u32::MAX;
/// Default `K`: a new ML-KEM key with every `K`-th kex key (spec/hybrid.md H4).
pub const DEFAULT_KEM_EVERY: u32 = 24;

pub use super::epoch::Epoch;
pub(crate) use super::files::{cfg, create_private_dir, write_secret};
pub use super::files::{check_permissions, FLEET_FILE, KEM_DIR};

/// A key directory.
#[derive(Debug)]
pub struct KeyStore {
    pub(super) dir: PathBuf,
    pub(super) identity: IdentityKey,
    static_mode: bool,
    pub(super) profile: Profile,
    /// Hybrid on: a new ML-KEM key with every `K`-th kex key.
    pub(super) kem_every: Option<u32>,
}

/// An ML-KEM key as stored: the serial of the kex key it was made with.
struct StoredKem {
    serial: u32,
    key: Arc<KemSecret>,
}

impl KeyStore {
    /// Creates a key directory with a new identity key (and, in static mode,
    /// the one kex key). Refuses to overwrite an existing identity.
    pub fn create(dir: &Path, static_mode: bool) -> Result<KeyStore, Error> {
        Self::create_with(dir, static_mode, None)
    }

    /// [`KeyStore::create`], with the hybrid suite on when `kem_every` is
    /// given ([`KeyStore::with_hybrid`]): the first ML-KEM key is made at
    /// once (a static key gets its suite-2 certificate with it).
    pub fn create_with(
        dir: &Path,
        static_mode: bool,
        kem_every: Option<u32>,
    ) -> Result<KeyStore, Error> {
        create_private_dir(&dir.join("kex"))?;
        let id_path = dir.join("identity.key");
        if id_path.exists() {
            return Err(cfg(format!(
                "{} exists; refusing to overwrite an identity key",
                id_path.display()
            )));
        }
        let identity = IdentityKey::generate(&mut OsRng);
        write_secret(
            &id_path,
            format!("{}\n", b64::encode(&identity.to_seed()[..])).as_bytes(),
        )?;
        std::fs::write(
            dir.join("identity.pub"),
            format!("{}\n", identity.public().to_b64()),
        )?;
        if static_mode {
            std::fs::write(
                dir.join("static"),
                b"static kex key: no rotation, no forward secrecy\n",
            )?;
        }
        let store = KeyStore {
            dir: dir.to_path_buf(),
            identity,
            static_mode,
            profile: Profile::V1,
            kem_every: kem_every.map(|k| k.max(1)),
        };
        if static_mode {
            store.rotate(unix_now(), DEFAULT_PERIOD)?;
        } else if store.kem_every.is_some() {
            store.kem_for(1)?;
        }
        Ok(store)
    }

    /// Opens an existing key directory, refusing one whose secrets others
    /// can read or replace ([`check_permissions`]).
    pub fn open(dir: &Path) -> Result<KeyStore, Error> {
        check_permissions(dir)?;
        let text = Zeroizing::new(std::fs::read_to_string(dir.join("identity.key")).map_err(
            |e| {
                cfg(format!(
                    "cannot read {}: {e}",
                    dir.join("identity.key").display()
                ))
            },
        )?);
        let seed = Zeroizing::new(b64::decode_array::<32>(text.trim().as_bytes())?);
        create_private_dir(&dir.join("kex"))?;
        Ok(KeyStore {
            dir: dir.to_path_buf(),
            identity: IdentityKey::from_seed(*seed),
            static_mode: dir.join("static").exists(),
            profile: Profile::V1,
            kem_every: None,
        })
    }

    /// The request profile new certificates announce (spec §4.5): with
    /// [`Profile::Compact`] they carry version 2. [`super::start`] re-issues the
    /// stored certificates whose version differs, so a change takes effect
    /// at the next start; the key itself stays.
    pub fn with_profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// Turns the hybrid suite on (spec/hybrid.md H4): every new kex key
    /// gets a suite-2 certificate beside its suite-1 one, naming an ML-KEM
    /// key made anew with every `kem_every`-th kex key (at least 1).
    /// [`super::start`] gives stored keys without one a suite-2 certificate.
    pub fn with_hybrid(mut self, kem_every: u32) -> Self {
        self.kem_every = Some(kem_every.max(1));
        self
    }

    /// Whether new kex keys get suite-2 certificates.
    pub fn is_hybrid(&self) -> bool {
        self.kem_every.is_some()
    }

    /// Re-signs `epoch`'s certificate for this store's profile (same key,
    /// serial and validity) and stores it, if its version differs; with
    /// hybrid on, signs a suite-2 certificate for an epoch without one.
    pub(super) fn reissue(&self, mut epoch: Epoch) -> Result<Epoch, Error> {
        let hybrid_due = self.kem_every.is_some()
            && epoch
                .hybrid
                .as_ref()
                .is_none_or(|h| h.profile != self.profile);
        if epoch.cert.profile == self.profile && !hybrid_due {
            return Ok(epoch);
        }
        let c = &epoch.cert;
        epoch.cert = KeyCert::sign_for(
            &self.identity,
            self.profile,
            c.serial,
            c.not_before,
            c.not_after,
            c.kex_public,
        );
        if hybrid_due {
            let kem = match &epoch.kem {
                Some(k) if epoch.hybrid.is_some() => k.clone(),
                _ => self.kem_for(epoch.cert.serial)?,
            };
            epoch.hybrid = Some(self.sign_hybrid(&epoch.cert, &kem));
            epoch.kem = Some(kem);
        }
        write_secret(
            &self
                .dir
                .join("kex")
                .join(format!("{:010}.key", epoch.cert.serial)),
            epoch.format().as_bytes(),
        )?;
        Ok(epoch)
    }

    /// The identity public key.
    pub fn identity(&self) -> IdentityPublic {
        self.identity.public()
    }

    /// The identity key itself (signs TLSA certificates, spec §6.3).
    pub fn identity_key(&self) -> &IdentityKey {
        &self.identity
    }

    /// Whether this is a static-key directory.
    pub fn is_static(&self) -> bool {
        self.static_mode
    }

    /// The suite-2 certificate of `cert`'s kex key for the ML-KEM key `kem`.
    fn sign_hybrid(&self, cert: &KeyCert, kem: &KemSecret) -> HybridCert {
        HybridCert::sign(
            &self.identity,
            self.profile,
            cert.serial,
            cert.not_before,
            cert.not_after,
            cert.kex_public,
            kem.public().hash(),
        )
    }

    /// Reads the stored ML-KEM keys, lowest serial first.
    fn load_kems(&self) -> Result<Vec<StoredKem>, Error> {
        let mut out = Vec::new();
        let dir = self.dir.join(KEM_DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "key") {
                continue;
            }
            let serial = path
                .file_stem()
                .and_then(|s| s.to_str()?.parse::<u32>().ok())
                .ok_or_else(|| cfg(format!("{}: not SERIAL.key", path.display())))?;
            let text = Zeroizing::new(std::fs::read_to_string(&path)?);
            let seed = text
                .trim()
                .strip_prefix("seed ")
                .ok_or_else(|| cfg(format!("{}: no seed line", path.display())))?;
            let seed = Zeroizing::new(
                b64::decode_array::<KEM_SEED_LEN>(seed.as_bytes())
                    .map_err(|e| cfg(format!("{}: {e}", path.display())))?,
            );
            out.push(StoredKem {
                serial,
                key: Arc::new(KemSecret::from_seed(*seed)),
            });
        }
        out.sort_by_key(|k| k.serial);
        Ok(out)
    }

    /// The ML-KEM key for a new kex key of `serial`: the newest stored one
    /// while it was made fewer than `K` kex keys ago, else a new one stored
    /// as `kem/SERIAL.key` (spec/hybrid.md H4).
    fn kem_for(&self, serial: u32) -> Result<Arc<KemSecret>, Error> {
        let every = self.kem_every.unwrap_or(DEFAULT_KEM_EVERY);
        if let Some(newest) = self.load_kems()?.pop() {
            if serial >= newest.serial && serial - newest.serial < every {
                return Ok(newest.key);
            }
        }
        let kem = KemSecret::generate(&mut OsRng);
        create_private_dir(&self.dir.join(KEM_DIR))?;
        write_secret(
            &self.dir.join(KEM_DIR).join(format!("{serial:010}.key")),
            format!("seed {}\n", b64::encode(&kem.to_seed()[..])).as_bytes(),
        )?;
        Ok(Arc::new(kem))
    }

    /// Reads one stored epoch file (expired or not), for listing.
    pub fn load_file(&self, path: &Path) -> Result<Epoch, Error> {
        let text = Zeroizing::new(std::fs::read_to_string(path)?);
        Epoch::parse(&text).map_err(|e| cfg(format!("{}: {e}", path.display())))
    }

    /// Reads every stored epoch, each with the ML-KEM key its suite-2
    /// certificate names; deletes expired epochs from disk, and ML-KEM keys
    /// no unexpired epoch names but the newest (the next kex keys may take it).
    pub fn load(&self, now: u64) -> Result<Vec<Epoch>, Error> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(self.dir.join("kex"))? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "key") {
                continue;
            }
            let text = Zeroizing::new(std::fs::read_to_string(&path)?);
            let epoch = Epoch::parse(&text).map_err(|e| cfg(format!("{}: {e}", path.display())))?;
            if now > u64::from(epoch.cert.not_after) {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            out.push(epoch);
        }
        out.sort_by_key(|e| e.cert.serial);
        let kems = self.load_kems()?;
        for e in &mut out {
            if let Some(h) = &e.hybrid {
                let kem = kems
                    .iter()
                    .find(|k| k.key.public().hash() == h.kem_hash)
                    .ok_or_else(|| {
                        cfg(format!(
                            "kex key {}: its ML-KEM key is missing from {}",
                            e.cert.serial,
                            self.dir.join(KEM_DIR).display()
                        ))
                    })?;
                e.kem = Some(kem.key.clone());
            }
        }
        let newest = kems.last().map(|k| k.serial);
        for k in &kems {
            if Some(k.serial) == newest {
                continue;
            }
            let named = out.iter().any(|e| {
                e.hybrid
                    .as_ref()
                    .is_some_and(|h| h.kem_hash == k.key.public().hash())
            });
            if !named {
                let _ = std::fs::remove_file(
                    self.dir.join(KEM_DIR).join(format!("{:010}.key", k.serial)),
                );
            }
        }
        Ok(out)
    }

    /// Creates, stores and returns the next epoch, valid from `now − skew`
    /// to `now + 2R + skew` (spec §6, §11).
    pub fn rotate(&self, now: u64, period: Duration) -> Result<Epoch, Error> {
        let serial = self
            .load(now)?
            .last()
            .map_or(1, |e| e.cert.serial.saturating_add(1));
        let secret = KexSecret::generate(&mut OsRng);
        let nb = now.saturating_sub(DEFAULT_SKEW) as u32;
        let na = if self.static_mode {
            STATIC_NOT_AFTER
        } else {
            (now + 2 * period.as_secs() + DEFAULT_SKEW).min(u64::from(u32::MAX)) as u32
        };
        let cert = KeyCert::sign_for(
            &self.identity,
            self.profile,
            serial,
            nb,
            na,
            *secret.public(),
        );
        let (hybrid, kem) = match self.kem_every {
            Some(_) => {
                let kem = self.kem_for(serial)?;
                (Some(self.sign_hybrid(&cert, &kem)), Some(kem))
            }
            None => (None, None),
        };
        let epoch = Epoch {
            secret,
            cert,
            ticket: TicketKey::generate(&mut OsRng),
            hybrid,
            kem,
        };
        write_secret(
            &self.dir.join("kex").join(format!("{serial:010}.key")),
            epoch.format().as_bytes(),
        )?;
        Ok(epoch)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
    }

    fn set_mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    }

    #[test]
    fn planted_tmp_files_and_symlinks_do_not_leak_secrets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = dir.path().join("keys");
        std::fs::create_dir_all(keys.join("kex")).expect("mkdir");
        // The names the old implementation wrote through: a 0644 leftover
        // and a symlink to a world-readable file elsewhere.
        let planted = keys.join("identity.tmp");
        std::fs::write(&planted, b"").expect("plant");
        set_mode(&planted, 0o644);
        let leak = dir.path().join("leak");
        std::fs::write(&leak, b"").expect("leak");
        set_mode(&leak, 0o644);
        std::os::unix::fs::symlink(&leak, keys.join("kex").join("0000000001.tmp")).expect("ln");

        let store = KeyStore::create(&keys, false).expect("create");
        store.rotate(unix_now(), DEFAULT_PERIOD).expect("rotate");

        assert_eq!(mode(&keys.join("identity.key")), 0o600);
        assert_eq!(mode(&keys.join("kex").join("0000000001.key")), 0o600);
        assert_eq!(std::fs::read(&leak).expect("read"), b"");
        assert_eq!(std::fs::read(&planted).expect("read"), b"");
        // No temporary file is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(keys.join("kex"))
            .expect("ls")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        KeyStore::open(&keys).expect("a private directory opens");
    }

    /// With the hybrid suite, kex keys 1..K share the ML-KEM key made with
    /// key 1, key K+1 makes the next; each stored epoch gets its suite-2
    /// certificate and its key back on load; a key no held certificate
    /// names is deleted unless it is the newest.
    #[test]
    fn an_ml_kem_key_serves_k_kex_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = dir.path().join("keys");
        let store = KeyStore::create(&keys, false)
            .expect("create")
            .with_hybrid(2);
        let now = unix_now();
        let epochs: Vec<Epoch> = (0..5)
            .map(|_| store.rotate(now, DEFAULT_PERIOD).expect("rotate"))
            .collect();
        let hash = |i: usize| epochs[i].hybrid.as_ref().expect("suite 2").kem_hash;
        assert_eq!(hash(0), hash(1));
        assert_ne!(hash(1), hash(2));
        assert_eq!(hash(2), hash(3));
        assert_ne!(hash(3), hash(4));
        for e in &epochs {
            let h = e.hybrid.as_ref().expect("suite 2");
            assert_eq!(h.kex_public, e.cert.kex_public);
            h.verify(&store.identity()).expect("signed");
        }
        let kem_files = |n: usize| {
            let mut v: Vec<_> = std::fs::read_dir(keys.join(KEM_DIR))
                .expect("ls")
                .map(|e| e.expect("entry").file_name())
                .collect();
            v.sort();
            assert_eq!(v.len(), n, "{v:?}");
            v
        };
        assert_eq!(
            kem_files(3),
            ["0000000001.key", "0000000003.key", "0000000005.key"]
        );
        assert_eq!(mode(&keys.join(KEM_DIR).join("0000000003.key")), 0o600);
        let loaded = store.load(now).expect("load");
        for (l, e) in loaded.iter().zip(&epochs) {
            assert_eq!(l.hybrid, e.hybrid);
            let kem = l.kem.as_ref().expect("its ML-KEM key");
            assert_eq!(
                Some(kem.public().hash()),
                e.hybrid.as_ref().map(|h| h.kem_hash)
            );
        }
        // Once keys 1..4 are gone, the ML-KEM keys of 1 and 3 go with them.
        for serial in 1..=4 {
            std::fs::remove_file(keys.join("kex").join(format!("{serial:010}.key"))).expect("rm");
        }
        store.load(now).expect("load");
        kem_files(1);
        // A store without suite 2 still reads them.
        let plain = KeyStore::open(&keys).expect("open");
        assert!(plain.load(now).expect("load")[0].kem.is_some());
    }

    #[test]
    fn readable_secret_refuses_to_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = dir.path().join("keys");
        let store = KeyStore::create(&keys, false).expect("create");
        store.rotate(unix_now(), DEFAULT_PERIOD).expect("rotate");

        let kex = keys.join("kex").join("0000000001.key");
        set_mode(&kex, 0o644);
        let msg = KeyStore::open(&keys).expect_err("refused").to_string();
        assert!(
            msg.contains(&format!("chmod 600 {}", kex.display())),
            "{msg}"
        );
        set_mode(&kex, 0o600);

        let id = keys.join("identity.key");
        set_mode(&id, 0o640);
        let msg = KeyStore::open(&keys).expect_err("refused").to_string();
        assert!(
            msg.contains(&format!("chmod 600 {}", id.display())),
            "{msg}"
        );
        set_mode(&id, 0o600);

        set_mode(&keys, 0o777);
        let msg = KeyStore::open(&keys).expect_err("refused").to_string();
        assert!(
            msg.contains(&format!("chmod go-w {}", keys.display())),
            "{msg}"
        );
        set_mode(&keys, 0o755);
        KeyStore::open(&keys).expect("fixed");
    }
}
