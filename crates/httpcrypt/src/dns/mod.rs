//! HTTPCrypt keys in the DNS (spec §6): the IO side of publication and
//! discovery. The record formats are `httpcrypt_proto::dns` and
//! `httpcrypt_proto::tlsa`; this module moves them through real DNS.
//!
//! - [`records`]: which certificates become which records, for one host;
//!   zone-file lines (`httpcrypt dns records`);
//! - [`update`]: RFC 2136 dynamic update with TSIG to a zone's primary,
//!   and the task that republishes after every rotation;
//! - [`authority`]: an embedded authoritative server answering from the
//!   live key store (`httpcrypt dns serve`);
//! - [`limit`]: what keeps that server from amplifying: UDP size limits
//!   with truncation, response rate limiting per source prefix;
//! - [`discovery`]: the client side, TXT → AAAA → TLSA with DNSSEC-aware
//!   trust in the identity record.

pub mod authority;
pub mod discovery;
pub mod limit;
pub mod records;
pub mod update;

pub use authority::Authority;
pub use discovery::DnsDiscovery;
pub use records::{Publication, RrSet};
pub use update::{Tsig, UpdateTarget};
