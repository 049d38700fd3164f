//! The private files of a key directory: written atomically with mode 0600
//! from the first instant, and refused when others could read or replace
//! them (spec §6.10).

use crate::error::Error;
use httpcrypt_proto::b64;
use rand_core::OsRng;
use std::io::Write;
use std::path::Path;

/// Name of a fleet's ratchet state file in a key directory.
pub const FLEET_FILE: &str = "fleet";
/// Subdirectory of a key directory holding the ML-KEM seeds.
pub const KEM_DIR: &str = "kem";

pub(crate) fn cfg(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// Writes a secret file atomically and privately: the bytes go to a fresh
/// temporary name in the same directory, created exclusively (never an
/// existing file or a symlink someone planted there) with mode 0600 from
/// the first instant, are fsynced, renamed over `path`, and the directory is
/// fsynced so the rename survives a crash.
pub(crate) fn write_secret(path: &Path, contents: &[u8]) -> Result<(), Error> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| cfg(format!("{}: not a file name", path.display())))?;
    let mut rnd = [0u8; 8];
    rand_core::RngCore::fill_bytes(&mut OsRng, &mut rnd);
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        b64::encode(&rnd[..])
    ));
    let written = (|| -> std::io::Result<()> {
        let mut opts = std::fs::OpenOptions::new();
        // create_new is O_CREAT|O_EXCL: it fails on any existing name,
        // a dangling symlink included.
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        #[cfg(unix)]
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(())
}

/// Refuses a key directory whose secrets others could read or replace, as
/// ssh does for its keys: the directory (and `kex/`) must not be writable
/// by group or others, and no secret file (`identity.key`, `kex/*.key`,
/// `fleet`) may be readable or writable by them. The error names the file
/// and the `chmod` that fixes it. ML-KEM seeds (`kem/*.key`) follow the
/// same rules as kex secrets.
pub fn check_permissions(dir: &Path) -> Result<(), Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| -> Result<Option<u32>, Error> {
            match std::fs::symlink_metadata(p) {
                Ok(m) => Ok(Some(m.permissions().mode() & 0o7777)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(cfg(format!("cannot inspect {}: {e}", p.display()))),
            }
        };
        for d in [dir.to_path_buf(), dir.join("kex"), dir.join(KEM_DIR)] {
            if let Some(m) = mode(&d)? {
                if m & 0o022 != 0 {
                    return Err(cfg(format!(
                        "key directory {} is writable by others (mode {m:04o}); \
                         fix it with `chmod go-w {}`",
                        d.display(),
                        d.display()
                    )));
                }
            }
        }
        let mut secrets = vec![dir.join("identity.key"), dir.join(FLEET_FILE)];
        for sub in ["kex", KEM_DIR] {
            if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
                for e in entries {
                    let p = e?.path();
                    if p.extension().is_some_and(|x| x == "key") {
                        secrets.push(p);
                    }
                }
            }
        }
        for p in secrets {
            if let Some(m) = mode(&p)? {
                if m & 0o077 != 0 {
                    return Err(cfg(format!(
                        "secret key file {} is accessible by others (mode {m:04o}); \
                         fix it with `chmod 600 {}`",
                        p.display(),
                        p.display()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Creates `dir` and its missing parents with mode 0700 (an existing
/// directory keeps its mode).
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), Error> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)?;
    Ok(())
}
