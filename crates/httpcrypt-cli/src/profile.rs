//! Which protocol a command speaks: HTTPCrypt v1, or rspamd's.

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
