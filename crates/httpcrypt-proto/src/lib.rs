//! Sans-IO core of HTTPCrypt v1: opportunistic encryption for plain HTTP.
//!
//! This crate turns bytes into events and events into bytes. It opens no
//! sockets, reads no clock and draws no OS randomness: time (unix seconds)
//! and an RNG are always parameters. The project's protocol text is in
//! `spec/httpcrypt.md`; section references (`spec §3`) point there.
//!
//! Map of the crate:
//! - [`keys`]: X25519 key-exchange keys, key IDs, session keys, Ed25519 identity keys;
//! - [`stream`]: sealed streams ([`stream::Sealer`], [`stream::Opener`]);
//! - [`inner`]: the inner HTTP/1.1 message, its limits and the request a server hands to its service;
//! - [`outer`]: what middleboxes see: nonce path, cookie, outer heads, problems;
//! - [`profile`]: the compact request profile 2 (time in the nonce, bound `Host`);
//! - [`server`] and [`client`]: the two ends of one exchange;
//! - [`cert`], [`dns`] and [`tlsa`]: key certificates and their DNS record forms
//!   (TXT, AAAA, identity TXT; TLSA X.509);
//! - [`ticket`], [`token`], [`replay`]: resumption and replay defence;
//! - [`split`]: split serving through untrusted caches (stubs, splicing, content batches);
//! - [`admission`]: the load-aware defence in front of the key agreement;
//! - [`provenance`]: provenance certificates for data sent with the TCP SYN (spec/asap.md);
//! - [`hybrid`]: suite 2, the hybrid X25519 + ML-KEM-768 key agreement
//!   (spec/hybrid.md): its keys, certificates and requests;
//! - [`rspamd`]: the rspamd compatibility profile.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod b64;
pub mod cache;
pub mod cert;
pub mod client;
pub mod dns;
pub mod error;
pub mod hybrid;
pub mod inner;
pub mod keys;
pub mod limits;
pub mod outer;
pub mod profile;
pub mod provenance;
pub mod ratchet;
pub mod replay;
pub mod rspamd;
pub mod server;
pub mod split;
pub mod stream;
pub mod suite;
pub mod ticket;
pub mod tlsa;
pub mod token;

pub use cert::{DiscoveredKey, KeyCert};
pub use error::{Error, Problem, Result, Scope};
pub use keys::{IdentityKey, IdentityPublic, KexPublic, KexSecret, KeyId, SessionKey};
pub use limits::Limits;
pub use profile::Profile;
pub use stream::{Event, Opener, ResponseKey, Sealer};
