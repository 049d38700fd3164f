//! Which protocol a command speaks (HTTPCrypt v1, or rspamd's), and which
//! key format `keygen` writes for it.

use clap::ValueEnum;

/// Which protocol a command speaks.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// HTTPCrypt v1 (`spec/httpcrypt.md`).
    #[default]
    V1,
    /// rspamd's HTTPCrypt, as `rspamc --key` and rspamd 3.x speak it.
    Rspamd,
}

/// The key formats `keygen` writes.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyFormat {
    /// A v1 key directory (identity, rotating kex keys, certificates).
    #[default]
    Httpcrypt,
    /// One `rspamadm keypair` block (UCL): for `--profile rspamd`, and for
    /// an rspamd worker's `keypair { }` section.
    Rspamd,
}
