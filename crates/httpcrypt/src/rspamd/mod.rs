//! The rspamd compatibility profile over the network
//! (`spec/rspamd-profile.md`): the HTTPCrypt that `rspamc --key` and
//! rspamd's workers speak.
//!
//! - [`RspamdClient`]: talks to an rspamd scan worker or controller (or to
//!   our own profile server) the way `rspamc --key` does;
//! - [`RspamdLayer`]: a tower layer that answers `rspamc --key` in front of
//!   any service: `httpcrypt gateway --profile rspamd` puts it before a
//!   plaintext rspamd, `httpcrypt serve --profile rspamd` before files.
//!
//! Every format (base32, `Key` header, cryptobox, inner messages, key-pair
//! files) lives in [`httpcrypt_proto::rspamd`]; this module only moves bytes.

mod client;
mod server;

pub use client::{RspamdClient, RspamdClientConfig};
pub use server::{RspamdConfig, RspamdLayer, RspamdService};

use httpcrypt_proto::rspamd::keypair;
use httpcrypt_proto::KexSecret;

use crate::error::Error;

/// Reads an `rspamadm keypair` file (UCL, or its `-j` JSON form).
pub fn read_keypair(path: &std::path::Path) -> Result<KexSecret, Error> {
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path)?);
    keypair::parse(&text).map_err(Error::Protocol)
}

/// A new key pair from the OS's CSPRNG.
pub fn generate() -> KexSecret {
    KexSecret::generate(&mut rand_core::OsRng)
}

/// Name of the key-pair file [`write_keypair`] creates.
pub const KEYPAIR_FILE: &str = "keypair.ucl";

/// Creates `dir` (mode 0700) holding a new key pair in the `rspamadm
/// keypair` form, `dir/keypair.ucl` (mode 0600); refuses to overwrite one.
/// Returns the file and the key.
pub fn write_keypair(dir: &std::path::Path) -> Result<(std::path::PathBuf, KexSecret), Error> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let path = dir.join(KEYPAIR_FILE);
    let secret = generate();
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            Error::Config(format!(
                "{} exists; refusing to overwrite a key pair",
                path.display()
            ))
        } else {
            Error::Io(e)
        }
    })?;
    f.write_all(keypair::format(&secret).as_bytes())?;
    f.sync_all()?;
    Ok((path, secret))
}
