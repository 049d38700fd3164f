//! HTTPCrypt for hyper and tower: the IO side of the protocol.
//!
//! - [`HttpCryptLayer`]: a tower layer that makes any hyper/axum service speak
//!   HTTPCrypt under a mount path;
//! - [`Client`]: an HTTPCrypt client over hyper, with certificate discovery,
//!   retries, forward proxies and streaming bodies ([`client`] drives
//!   `httpcrypt_proto::client`; [`connect`] makes its connections);
//! - [`keys`]: keys on disk, the rotation that keeps them fresh, fleets;
//! - [`dns`]: publishing keys in DNS (zone lines, RFC 2136 updates, an
//!   embedded authoritative server) and discovering them;
//! - [`rspamd`]: the rspamd compatibility profile (`rspamc --key`): a client
//!   and a layer;
//! - [`asap`]: the request in the TCP SYN, with provenance certificates (spec/asap.md);
//! - [`defence`]: the load-aware defence in front of the key agreement;
//! - [`metrics`]: counters of the server, through the `metrics` facade;
//! - [`listen`]: the listener behind `httpcrypt serve` and `httpcrypt gateway`;
//! - [`services`]: what the listener runs behind the layer: static files, the
//!   gateway's upstream, and `httpcrypt split-proxy`;
//! - [`split`]: split serving through untrusted caches, the origin's side;
//! - [`conn`]: what the listener and the layer know about one connection;
//! - [`clock`], [`nonce`], [`sockopt`]: the wall clock, public random
//!   values, and TCP Fast Open socket options, which every part above uses.
//!
//! All wire-format logic lives in [`httpcrypt_proto`]; this crate drives it.
// One function may use `unsafe`: the strike register's prefetch
// (`strikes::prefetch_read`), a hint that reads nothing.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod asap;
pub mod body;
pub mod client;
pub mod clock;
pub mod conn;
pub mod connect;
pub mod defence;
pub mod dns;
pub mod error;
pub mod keys;
mod lifecycle;
pub mod listen;
pub mod metrics;
pub mod nonce;
pub mod rspamd;
pub mod server;
pub mod services;
pub mod sockopt;
pub mod split;
pub mod strikes;

pub use client::{Client, ClientConfig, KeyPolicy};
pub use error::{BoxError, Error};
pub use httpcrypt_proto as proto;
pub use server::{HttpCryptLayer, OuterFields, ServerConfig};
