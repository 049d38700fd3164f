//! An embedded authoritative DNS server (hickory-server, UDP and TCP) for
//! a zone holding the HTTPCrypt names of one host, answered from the live
//! key store: after a rotation the next query already sees the new key.
//!
//! It answers only its zone: SOA and NS at the apex, the record sets of
//! [`super::records`], NODATA (with the SOA, for negative caching) for
//! other types at existing names and for empty non-terminals such as
//! `_tcp.{host}`, NXDOMAIN elsewhere in the zone, REFUSED outside it; `ANY`
//! gets one RRset (RFC 8482). UDP answers respect the size the query allows
//! and a rate per source prefix ([`super::limit`]). It is
//! meant to be delegated to (or stub-zoned by a resolver), not to be a
//! general-purpose server: no zone transfers, no updates, no DNSSEC.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{NS, SOA};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use hickory_proto::xfer::Protocol;
use hickory_server::authority::MessageResponseBuilder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::ServerFuture;
use httpcrypt_proto::IdentityKey;
use tokio::net::{TcpListener, UdpSocket};

use super::limit::{RateLimiter, ResponseLimits, Verdict};
use super::records::{self, Publication, RrSet};
use crate::clock::unix_now;
use crate::error::Error;
use crate::keys::LiveKeys;

#[derive(Debug)]
struct Zone {
    apex: Name,
    ttl: u32,
    soa: Record,
    ns: Record,
    records: Vec<Record>,
}

/// The zone's contents, shared between the server and whatever updates it.
#[derive(Debug, Clone)]
pub struct Authority {
    zone: Arc<RwLock<Zone>>,
    limiter: Arc<RateLimiter>,
}

/// What a query gets.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    /// Response code.
    pub code: ResponseCode,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section (the SOA of a negative answer).
    pub soa: Vec<Record>,
}

impl Authority {
    /// An empty zone at `apex`, its SOA and NS naming `ns.{apex}`; negative
    /// answers are cached for at most `ttl` seconds.
    pub fn new(apex: &str, ttl: u32) -> Result<Self, Error> {
        let apex = records::fqdn(apex)?;
        let ns_name = records::fqdn(&format!("ns.{apex}"))?;
        let soa = soa_record(&apex, ttl, 1);
        let ns = Record::from_rdata(apex.clone(), ttl, RData::NS(NS(ns_name)));
        Ok(Authority {
            zone: Arc::new(RwLock::new(Zone {
                apex,
                ttl,
                soa,
                ns,
                records: Vec::new(),
            })),
            limiter: Arc::new(RateLimiter::new(ResponseLimits::default())),
        })
    }

    /// The same zone, its UDP answers held to `limits`.
    pub fn with_limits(mut self, limits: ResponseLimits) -> Self {
        self.limiter = Arc::new(RateLimiter::new(limits));
        self
    }

    /// Sends `answers` and `soa` (authority section) under `header` as the
    /// response to `request`. Over UDP the response rate limit applies
    /// (a response over it is dropped or slipped as an empty truncated
    /// answer), and an answer larger than the query allows (512 bytes
    /// without EDNS, the offered EDNS size up to the cap) goes out empty
    /// with TC set, so the client asks again over TCP.
    pub(crate) async fn respond<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response: R,
        mut header: Header,
        answers: &[Record],
        soa: &[Record],
    ) -> ResponseInfo {
        let mut builder = MessageResponseBuilder::from_message_request(request);
        let offered = request.edns().map(|e| e.max_payload());
        let limits = self.limiter.limits();
        let mut edns_out = None;
        if let Some(offered) = offered {
            let mut edns = Edns::new();
            edns.set_max_payload(offered.clamp(512, limits.edns_max.max(512)));
            builder.edns(edns.clone());
            edns_out = Some(edns);
        }
        let mut truncate = false;
        if request.protocol() == Protocol::Udp {
            match self
                .limiter
                .check(request.src().ip(), std::time::Instant::now())
            {
                Verdict::Answer => {}
                Verdict::Slip => truncate = true,
                Verdict::Drop => {
                    tracing::debug!(src = %request.src(), "dns: over the response rate; dropped");
                    return header.into();
                }
            }
            if !truncate {
                let size = encoded_len(request, header, answers, soa, edns_out);
                truncate = size.is_none_or(|n| n > limits.udp_max(offered));
            }
        }
        let sent = if truncate {
            header.set_truncated(true);
            response
                .send_response(builder.build_no_records(header))
                .await
        } else {
            response
                .send_response(builder.build(
                    header,
                    answers.iter(),
                    soa.iter(),
                    std::iter::empty(),
                    std::iter::empty(),
                ))
                .await
        };
        sent.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "cannot send a DNS response");
            let mut h = Header::response_from_request(request.header());
            h.set_response_code(ResponseCode::ServFail);
            h.into()
        })
    }

    /// Replaces the zone's records with `sets`; the SOA serial becomes `serial`.
    pub fn set(&self, sets: &[RrSet], serial: u32) -> Result<(), Error> {
        let mut z = self.zone.write().unwrap_or_else(|p| p.into_inner());
        for s in sets {
            if !z.apex.zone_of(&s.name) {
                return Err(Error::Config(format!(
                    "{} is not in zone {}",
                    s.name, z.apex
                )));
            }
        }
        z.records = sets
            .iter()
            .flat_map(|s| s.records.iter().cloned())
            .collect();
        z.soa = soa_record(&z.apex, z.ttl, serial);
        Ok(())
    }

    /// The answer to `(name, rtype)`.
    pub fn answer(&self, name: &Name, rtype: RecordType) -> Answer {
        let z = self.zone.read().unwrap_or_else(|p| p.into_inner());
        let name = name.to_lowercase();
        if !z.apex.zone_of(&name) {
            return Answer {
                code: ResponseCode::Refused,
                answers: Vec::new(),
                soa: Vec::new(),
            };
        }
        let apex_records = [&z.soa, &z.ns];
        let all = z.records.iter().chain(apex_records);
        let answers: Vec<Record> = all
            .clone()
            .filter(|r| r.name() == &name && (rtype == RecordType::ANY || r.record_type() == rtype))
            .cloned()
            .collect();
        if let Some(first) = answers.first().filter(|_| rtype == RecordType::ANY) {
            // RFC 8482 §4.2: one RRset is a complete answer to ANY.
            let kind = first.record_type();
            return Answer {
                code: ResponseCode::NoError,
                answers: answers
                    .into_iter()
                    .filter(|r| r.record_type() == kind)
                    .collect(),
                soa: Vec::new(),
            };
        }
        if !answers.is_empty() {
            return Answer {
                code: ResponseCode::NoError,
                answers,
                soa: Vec::new(),
            };
        }
        // The name exists if it owns records or has descendants that do.
        let exists = all.clone().any(|r| name.zone_of(r.name()));
        Answer {
            code: if exists {
                ResponseCode::NoError
            } else {
                ResponseCode::NXDomain
            },
            answers: Vec::new(),
            soa: vec![z.soa.clone()],
        }
    }

    /// Keeps the zone in step with `live`: fills it now and again on every
    /// change of the key set; `extra` sets (the host's addresses) stay.
    pub fn follow(
        &self,
        live: LiveKeys,
        identity: IdentityKey,
        publication: Publication,
        extra: Vec<RrSet>,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        let mut changes = live.subscribe();
        tokio::spawn(async move {
            loop {
                changes.borrow_and_update();
                let certs = live.certs();
                let now = unix_now();
                let mut sets = records::rrsets(&publication, &identity, &certs, now);
                sets.extend(records::hybrid_rrsets(
                    &publication,
                    &live.hybrid_certs(),
                    now,
                ));
                sets.extend(extra.iter().cloned());
                let serial = certs.iter().map(|c| c.serial).max().unwrap_or(0);
                // Expired keys leave the zone with the next change; the
                // serial grows with every rotation.
                if let Err(e) = me.set(&sets, serial) {
                    tracing::error!(error = %e, "cannot serve the HTTPCrypt records");
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}

fn soa_record(apex: &Name, ttl: u32, serial: u32) -> Record {
    let name = |label: &str| {
        Name::from_ascii(label)
            .and_then(|n| n.append_domain(apex))
            .expect("a short label under a valid name is valid")
    };
    let interval = i32::try_from(ttl).unwrap_or(i32::MAX);
    Record::from_rdata(
        apex.clone(),
        ttl,
        RData::SOA(SOA::new(
            name("ns"),
            name("hostmaster"),
            serial,
            interval,
            interval,
            1_209_600,
            ttl,
        )),
    )
}

#[async_trait::async_trait]
impl RequestHandler for Authority {
    async fn handle_request<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let builder = MessageResponseBuilder::from_message_request(request);
        let mut header = Header::response_from_request(request.header());
        header.set_message_type(MessageType::Response);
        let sent = if request.op_code() != OpCode::Query {
            response
                .send_response(builder.error_msg(request.header(), ResponseCode::NotImp))
                .await
        } else {
            match request.request_info() {
                Err(_) => {
                    response
                        .send_response(builder.error_msg(request.header(), ResponseCode::FormErr))
                        .await
                }
                Ok(info) => {
                    let name: Name = LowerName::into(info.query.name().clone());
                    let a = self.answer(&name, info.query.query_type());
                    header.set_response_code(a.code);
                    header.set_authoritative(a.code != ResponseCode::Refused);
                    header.set_recursion_available(false);
                    return self
                        .respond(request, response, header, &a.answers, &a.soa)
                        .await;
                }
            }
        };
        sent.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "cannot send a DNS response");
            let mut h = Header::response_from_request(request.header());
            h.set_response_code(ResponseCode::ServFail);
            h.into()
        })
    }
}

/// The wire size of the response `respond` would send (`None`: it does not
/// encode).
fn encoded_len(
    request: &Request,
    header: Header,
    answers: &[Record],
    soa: &[Record],
    edns: Option<Edns>,
) -> Option<usize> {
    let mut m = Message::new();
    m.set_header(header);
    if let Ok(info) = request.request_info() {
        m.add_query(info.query.original().clone());
    }
    m.add_answers(answers.iter().cloned());
    m.add_name_servers(soa.iter().cloned());
    if let Some(e) = edns {
        m.set_edns(e);
    }
    m.to_vec().ok().map(|v| v.len())
}

/// Serves `authority` on `udp` and `tcp` until the returned server is
/// shut down or dropped with its task.
pub fn serve(authority: Authority, udp: UdpSocket, tcp: TcpListener) -> ServerFuture<Authority> {
    let mut server = ServerFuture::new(authority);
    server.register_socket(udp);
    server.register_listener(tcp, Duration::from_secs(10));
    server
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpcrypt_proto::{KexPublic, KeyCert};

    #[test]
    fn answers() {
        let id = IdentityKey::from_seed([1; 32]);
        let certs = vec![KeyCert::sign(&id, 1, 0, u32::MAX, KexPublic([1; 32]))];
        let p = Publication::new("www.example.org", 80, 60).unwrap();
        let auth = Authority::new("example.org", 60).unwrap();
        auth.set(&records::rrsets(&p, &id, &certs, 10), 1).unwrap();
        let n = |s: &str| records::fqdn(s).unwrap();
        let a = auth.answer(&n("_httpcrypt.WWW.example.org"), RecordType::TXT);
        assert_eq!((a.code, a.answers.len()), (ResponseCode::NoError, 1));
        let a = auth.answer(&n("_httpcrypt.www.example.org"), RecordType::AAAA);
        assert_eq!(a.answers.len(), 9);
        let a = auth.answer(&n("_httpcrypt.www.example.org"), RecordType::ANY);
        assert!(!a.answers.is_empty());
        assert!(a
            .answers
            .iter()
            .all(|r| r.record_type() == a.answers[0].record_type()));
        let a = auth.answer(&n("_80._tcp.www.example.org"), RecordType::TLSA);
        assert_eq!(a.answers.len(), 1);
        let a = auth.answer(&n("_tcp.www.example.org"), RecordType::TLSA);
        assert_eq!(
            (a.code, a.answers.len(), a.soa.len()),
            (ResponseCode::NoError, 0, 1)
        );
        let a = auth.answer(&n("_httpcrypt.www.example.org"), RecordType::MX);
        assert_eq!((a.code, a.answers.len()), (ResponseCode::NoError, 0));
        let a = auth.answer(&n("nothing.example.org"), RecordType::A);
        assert_eq!(a.code, ResponseCode::NXDomain);
        let a = auth.answer(&n("example.org"), RecordType::SOA);
        assert_eq!(a.answers.len(), 1);
        let a = auth.answer(&n("example.com"), RecordType::SOA);
        assert_eq!(a.code, ResponseCode::Refused);
        assert!(auth
            .set(
                &records::rrsets(&Publication::new("x.net", 80, 1).unwrap(), &id, &certs, 0),
                2
            )
            .is_err());
    }
}
