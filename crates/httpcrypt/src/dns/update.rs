//! Publication by RFC 2136 dynamic update, signed with TSIG (RFC 8945),
//! to the primary server of a zone; and [`spawn_publisher`], the task that
//! republishes after every rotation of a running server.
//!
//! One UPDATE message replaces all four record sets of [`super::records`]:
//! for each it deletes the RRset and adds the current records. A primary
//! applies an UPDATE atomically (RFC 2136 §3.4.2), so resolvers never see
//! a half-replaced set (an AAAA set of mixed certificates would not parse),
//! and expired certificates vanish with the deletion.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use hickory_client::client::Client;
use hickory_proto::dnssec::rdata::tsig::TsigAlgorithm;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::op::{
    Message, MessageFinalizer, MessageType, OpCode, Query, ResponseCode, UpdateMessage,
};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::runtime::TokioRuntimeProvider;
use hickory_proto::tcp::TcpClientStream;
use hickory_proto::xfer::{DnsHandle, FirstAnswer};
use httpcrypt_proto::IdentityKey;

use super::records::{self, Publication, RrSet};
use crate::clock::unix_now;
use crate::error::Error;
use crate::keys::LiveKeys;

/// A TSIG key (RFC 8945) as BIND and Knot configure it.
#[derive(Clone)]
pub struct Tsig {
    /// Key name, e.g. `httpcrypt-update.`
    pub name: Name,
    /// The shared secret.
    pub secret: Vec<u8>,
    /// MAC algorithm.
    pub algorithm: TsigAlgorithm,
}

impl std::fmt::Debug for Tsig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tsig({} {})", self.name, self.algorithm)
    }
}

impl Drop for Tsig {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.secret);
    }
}

impl Tsig {
    /// A key from its name, its secret in standard base64 (the form in
    /// `tsig-keygen` and `keymgr -t` output) and an algorithm name
    /// (`hmac-sha256`, `hmac-sha384`, `hmac-sha512`).
    pub fn new(name: &str, secret_b64: &str, algorithm: &str) -> Result<Self, Error> {
        let mut secret = zeroize::Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(secret_b64.trim())
                .map_err(|e| Error::Config(format!("TSIG secret is not base64: {e}")))?,
        );
        let algorithm = match algorithm.to_ascii_lowercase().as_str() {
            "hmac-sha256" => TsigAlgorithm::HmacSha256,
            "hmac-sha384" => TsigAlgorithm::HmacSha384,
            "hmac-sha512" => TsigAlgorithm::HmacSha512,
            other => {
                return Err(Error::Config(format!(
                "TSIG algorithm {other} is not supported (hmac-sha256, hmac-sha384, hmac-sha512)"
            )))
            }
        };
        Ok(Tsig {
            name: records::fqdn(name)?,
            secret: std::mem::take(&mut *secret),
            algorithm,
        })
    }
}

/// Where updates go.
#[derive(Debug, Clone)]
pub struct UpdateTarget {
    /// The zone's primary server.
    pub server: SocketAddr,
    /// The zone the names belong to.
    pub zone: Name,
    /// TSIG key; `None` sends unsigned updates (for servers that allow them by address).
    pub tsig: Option<Tsig>,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// The UPDATE message replacing `sets` in `zone` (RFC 2136 §2.5.2 delete,
/// §2.5.1 add).
pub fn update_message(zone: &Name, sets: &[RrSet]) -> Message {
    let mut zone_q = Query::new();
    zone_q
        .set_name(zone.clone())
        .set_query_class(DNSClass::IN)
        .set_query_type(RecordType::SOA);
    let mut m = Message::new();
    m.set_id(rand_core::RngCore::next_u32(&mut rand_core::OsRng) as u16)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Update)
        .set_recursion_desired(false);
    m.add_zone(zone_q);
    for set in sets {
        let mut delete = Record::update0(set.name.clone(), 0, set.rtype);
        delete.set_dns_class(DNSClass::ANY);
        delete.set_data(RData::Update0(set.rtype));
        m.add_update(delete);
        for r in &set.records {
            m.add_update(r.clone());
        }
    }
    m
}

/// Sends one UPDATE replacing `sets` (over TCP: the TLSA records alone
/// exceed 512 bytes). Any response code but NOERROR is an error.
pub async fn replace(target: &UpdateTarget, sets: &[RrSet]) -> Result<(), Error> {
    for s in sets {
        if !target.zone.zone_of(&s.name) {
            return Err(Error::Config(format!(
                "{} is not in zone {}",
                s.name, target.zone
            )));
        }
    }
    let signer: Option<Arc<dyn MessageFinalizer>> = match &target.tsig {
        Some(t) => Some(Arc::new(
            TSigner::new(t.secret.clone(), t.algorithm.clone(), t.name.clone(), 300)
                .map_err(|e| Error::Config(format!("TSIG: {e}")))?,
        )),
        None => None,
    };
    let (stream, handle) = TcpClientStream::new(
        target.server,
        None,
        Some(target.timeout),
        TokioRuntimeProvider::new(),
    );
    let (client, bg) = Client::with_timeout(stream, handle, target.timeout, signer)
        .await
        .map_err(|e| Error::Dns(format!("connecting to {}: {e}", target.server)))?;
    let bg = tokio::spawn(bg);
    let result = client
        .send(update_message(&target.zone, sets))
        .first_answer()
        .await;
    bg.abort();
    let rsp = result.map_err(|e| Error::Dns(format!("update to {}: {e}", target.server)))?;
    match rsp.response_code() {
        ResponseCode::NoError => Ok(()),
        code => Err(Error::Dns(format!(
            "update of zone {} refused by {}: {code}",
            target.zone, target.server
        ))),
    }
}

/// Publishes `live`'s certificates under `publication` now and again
/// whenever the key set changes (a rotation, an expiry), until the
/// returned task is aborted. A failed update is retried with backoff
/// (1 s doubling to at most R/4, at least 1 s), so a primary that was
/// down catches up as soon as it answers.
pub fn spawn_publisher(
    live: LiveKeys,
    identity: IdentityKey,
    publication: Publication,
    target: UpdateTarget,
) -> tokio::task::JoinHandle<()> {
    let mut changes = live.subscribe();
    tokio::spawn(async move {
        let max_backoff = Duration::from_secs(u64::from(publication.ttl / 4).max(1));
        loop {
            changes.borrow_and_update();
            let now = unix_now();
            let mut sets = records::rrsets(&publication, &identity, &live.certs(), now);
            sets.extend(records::hybrid_rrsets(
                &publication,
                &live.hybrid_certs(),
                now,
            ));
            let serials: Vec<u32> = live.certs().iter().map(|c| c.serial).collect();
            let mut backoff = Duration::from_secs(1);
            loop {
                match replace(&target, &sets).await {
                    Ok(()) => {
                        tracing::info!(zone = %target.zone, ?serials, "published keys in DNS");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?backoff, "DNS update failed");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(max_backoff);
                        if changes.has_changed().unwrap_or(false) {
                            break; // publish the newer set instead
                        }
                    }
                }
            }
            if changes.has_changed().unwrap_or(false) {
                continue;
            }
            if changes.changed().await.is_err() {
                return; // the key store is gone
            }
        }
    })
}
