//! [`Client`]: HTTPCrypt over hyper. Finds the server's keys (a
//! [`Discovery`] hook such as DNS, then `OPTIONS {mount}/`), encrypts the
//! very first request, streams bodies both ways, and retries once on
//! `unknown-key` and once on `stale` (spec §11), and up to three times on
//! the load-aware defence's `admission` and `busy` answers (spec §14). It
//! never hands unauthenticated bytes to its caller: a non-200 outer answer
//! is an error.
//!
//! The client is a driver: every decision about what goes on the wire and
//! what an answer means is made by `httpcrypt_proto::client` (the request
//! head, the per-server state, the retry rules); this module finds keys,
//! sends, reads and waits.
//!
//! - [`discovery`]: the hooks that find keys ([`Discovery`]) and provenance
//!   certificates ([`ProvenanceSource`]) before the server is asked;
//! - [`config`]: the settings, and what the caller learns of the outer exchange;
//! - `keys`: the keys of a server: cached, discovered, or from `OPTIONS`;
//! - `pq`: suite 2: its discovery (DNS, `OPTIONS {mount}/pq`) and the
//!   ML-KEM encapsulation of a hybrid request;
//! - `send`: one call: its attempts, each sealed, sent and opened;
//! - `hosts`, `read`: the per-server memory, and reading small bodies.

pub mod config;
pub mod discovery;
mod hosts;
mod keys;
mod pq;
mod read;
mod send;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;

use crate::connect::Connector;
use crate::error::BoxError;
use hosts::Hosts;

pub use config::{ClientConfig, KeyPolicy, OuterExchange};
pub use discovery::{
    BoxFuture, Discovered, Discovery, HybridDiscovered, KeySource, ProvenanceSource,
};
pub use httpcrypt_proto::client::{Pq, ServerKey, Suite};
pub use pq::encapsulate;

type OuterBody = UnsyncBoxBody<Bytes, BoxError>;
/// The body of a decrypted response.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// An HTTPCrypt client. Cheap to clone; clones share connections and caches.
#[derive(Clone)]
pub struct Client {
    http: HyperClient<Connector, OuterBody>,
    config: Arc<ClientConfig>,
    hosts: Arc<Hosts>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client with `config`.
    pub fn new(config: ClientConfig) -> Self {
        let http = HyperClient::builder(TokioExecutor::new()).build(
            Connector::new(config.proxy.clone())
                .with_resolver(config.resolver.clone())
                .with_tfo(config.tfo)
                .with_connect_timeout(config.connect_timeout),
        );
        Client {
            http,
            config: Arc::new(config),
            hosts: Arc::new(Hosts::default()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }
}
