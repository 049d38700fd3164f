//! The rspamd compatibility profile (`spec/rspamd-profile.md`): the
//! HTTPCrypt that rspamd's `rspamc --key`, workers and proxy speak.
//!
//! It shares primitives with v1 (X25519, HChaCha20, XChaCha20, Poly1305) but
//! nothing else: one sealed body per message, no AD, no cookie.
//! - [`base32`]: rspamd's base32 (least significant bit first);
//! - [`keys`]: key IDs (BLAKE2b-512) and the `Key` request header;
//! - [`cryptobox`]: the shared key `nm` and `nonce || tag || ct` bodies;
//! - [`client`] and [`server`]: the two ends of one exchange, outer bytes included;
//! - [`message`]: the inner HTTP/1.x request and response;
//! - [`keypair`]: the `rspamadm keypair` text form.

pub mod base32;
pub mod client;
pub mod cryptobox;
pub mod keypair;
pub mod keys;
pub mod message;
pub mod server;
#[cfg(test)]
mod testdata;

pub use client::Client;
pub use cryptobox::Nm;
pub use keys::{KeyHeader, KeyId, ShortId};
pub use server::{Keyring, Responder};
