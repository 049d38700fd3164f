//! [`DnsDiscovery`]: the client's [`Discovery`] over DNS (spec §6), with
//! hickory-resolver against a configurable name server.
//!
//! For `host[:port]` it sends four queries at once: TXT and AAAA at
//! `_httpcrypt.{host}`, TLSA at `_{port}._tcp.{host}`, and TXT at
//! `_httpcrypt-id.{host}`. It then takes the first method, in the order
//! TXT → AAAA → TLSA, that yields a key valid now; the client falls back to
//! `OPTIONS` when none does. Asking in parallel costs three extra small
//! queries but no extra round trip, and a network that drops TXT queries
//! delays the answer only by the resolver's timeout, not by the sum of them.
//!
//! Trust (spec §6.4, §6.7): with a pinned identity every form's signature
//! must verify under it. Without one, the `_httpcrypt-id` record counts only
//! if the resolver set the AD bit in its answer, i.e. validated it with
//! DNSSEC; that query goes straight to the name server with the AD and DO
//! bits set (hickory-resolver does not expose the AD bit). The resolver is
//! trusted to validate, so it should be on the same host or behind a secure
//! channel. A record without AD is ignored, and the keys are then used
//! opportunistically.
//!
//! Suite 2 (spec/hybrid.md H4), asked only by a client that wants it: TXT
//! and AAAA at `_httpcrypt-pq.{host}` (one certificate text per TXT
//! record; or the eleven-address form) and the key text as TXT at
//! `_httpcrypt-kem.{host}`, three queries at once. The client checks the
//! certificates under the identity in force, as it does for `OPTIONS
//! {mount}/pq`; without a known key text it asks that `OPTIONS` next.
//!
//! Caching: hickory-resolver caches the records for their TTL; on top of
//! that the parsed (and verified) result is kept per host until the
//! earliest of the records' TTL and the last `not_after` among its keys.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_client::client::Client;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use hickory_proto::runtime::TokioRuntimeProvider;
use hickory_proto::udp::UdpClientStream;
use hickory_proto::xfer::Protocol;
use hickory_proto::xfer::{DnsHandle, FirstAnswer};
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::lookup::Lookup;
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolveError, TokioResolver};
use httpcrypt_proto::cert::{self, DiscoveredKey, KeyCert};
use httpcrypt_proto::{dns, tlsa, IdentityPublic};

use super::records::Publication;
use crate::client::{BoxFuture, Discovered, Discovery, HybridDiscovered, KeySource};
use crate::clock::unix_now;
use crate::connect::Resolve;
use crate::error::{BoxError, Error};
use httpcrypt_proto::hybrid::cert::{self as hybrid_cert, HybridCert};
use httpcrypt_proto::hybrid::KemPublic;

/// DNS discovery of HTTPCrypt keys; also resolves host addresses for
/// connections through the same server ([`Resolve`]).
#[derive(Debug)]
pub struct DnsDiscovery {
    resolver: TokioResolver,
    nameserver: SocketAddr,
    timeout: Duration,
    cache: Mutex<HashMap<CacheKey, (Instant, Discovered)>>,
}

/// Authority and pinned identity: a result checked under one pin is not
/// reused under another.
type CacheKey = (String, Option<[u8; 32]>);

/// How one method turned out.
type Outcome = Result<(Vec<DiscoveredKey>, u64), String>;

impl DnsDiscovery {
    /// Discovery through `nameserver` (UDP, TCP on truncation), or through
    /// the system's first name server (`/etc/resolv.conf`) when `None`.
    /// `timeout` bounds each query.
    pub fn new(nameserver: Option<SocketAddr>, timeout: Duration) -> Result<Self, Error> {
        let (config, mut opts) = match nameserver {
            Some(addr) => {
                let mut c = ResolverConfig::new();
                c.add_name_server(NameServerConfig::new(addr, Protocol::Udp));
                c.add_name_server(NameServerConfig::new(addr, Protocol::Tcp));
                (c, ResolverOpts::default())
            }
            None => hickory_resolver::system_conf::read_system_conf().map_err(|e| {
                Error::Dns(format!("reading the system resolver configuration: {e}"))
            })?,
        };
        let nameserver = config
            .name_servers()
            .first()
            .map(|n| n.socket_addr)
            .ok_or_else(|| Error::Dns("no name server configured".into()))?;
        opts.timeout = timeout;
        opts.attempts = 1;
        opts.edns0 = true;
        opts.ndots = 0;
        let resolver =
            TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
                .with_options(opts)
                .build();
        Ok(DnsDiscovery {
            resolver,
            nameserver,
            timeout,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The resolver behind discovery (for the ASAP lookups, `crate::asap`).
    pub fn resolver(&self) -> &TokioResolver {
        &self.resolver
    }

    /// Forgets the parsed results (hickory's record cache stays).
    pub fn clear_cache(&self) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Looks `authority` up without the parsed-result cache.
    pub async fn lookup(
        &self,
        authority: &str,
        pinned: Option<&IdentityPublic>,
    ) -> Result<Discovered, Error> {
        let (host, port) = split_authority(authority)?;
        let p = Publication::new(host, port, 0)?;
        let cert_name = p.cert_name();
        let (txt, aaaa, tlsa_rrs, id) = tokio::join!(
            self.resolver.lookup(cert_name.clone(), RecordType::TXT),
            self.resolver.lookup(cert_name, RecordType::AAAA),
            self.resolver.lookup(p.tlsa_name(), RecordType::TLSA),
            async {
                match pinned {
                    Some(_) => Ok(None),
                    None => self.validated_identity(p.identity_name()).await,
                }
            },
        );
        let mut detail = Vec::new();
        let identity = match (pinned, id) {
            (Some(pin), _) => Some(*pin),
            (None, Ok(found)) => found,
            (None, Err(why)) => {
                detail.push(format!("identity: {why}"));
                None
            }
        };
        let now = unix_now();
        let methods: [(KeySource, Outcome); 3] = [
            (KeySource::DnsTxt, from_txt(txt, identity.as_ref(), now)),
            (KeySource::DnsAaaa, from_aaaa(aaaa, identity.as_ref(), now)),
            (
                KeySource::DnsTlsa,
                from_tlsa(tlsa_rrs, identity.as_ref(), now),
            ),
        ];
        for (source, outcome) in methods {
            match outcome {
                Ok((keys, ttl)) => {
                    return Ok(Discovered {
                        keys,
                        source: Some(source),
                        ttl,
                        identity,
                        detail: detail.join("; "),
                    })
                }
                Err(why) => {
                    tracing::debug!(%authority, method = %source, %why, "DNS method unusable");
                    detail.push(format!("{source}: {why}"));
                }
            }
        }
        Ok(Discovered {
            keys: Vec::new(),
            source: None,
            ttl: 0,
            identity,
            detail: detail.join("; "),
        })
    }

    /// Looks up the suite-2 records of `authority` (no parsed-result
    /// cache: hickory's record cache serves repeats).
    pub async fn lookup_hybrid(&self, authority: &str) -> Result<HybridDiscovered, Error> {
        let (host, _) = split_authority(authority)?;
        let name =
            |s: String| Name::from_ascii(&s).map_err(|e| Error::Dns(format!("bad name {s}: {e}")));
        let cert_name = name(hybrid_cert::hybrid_cert_name(host))?;
        let kem_name = name(hybrid_cert::kem_name(host))?;
        let (txt, aaaa, kem) = tokio::join!(
            self.resolver.lookup(cert_name.clone(), RecordType::TXT),
            self.resolver.lookup(cert_name, RecordType::AAAA),
            self.resolver.lookup(kem_name, RecordType::TXT),
        );
        let mut found = HybridDiscovered::default();
        let mut detail = Vec::new();
        match records(&kem) {
            Ok(l) => {
                for rec in l.records() {
                    let RData::TXT(t) = rec.data() else { continue };
                    match std::str::from_utf8(&t.txt_data().concat())
                        .map_err(|_| httpcrypt_proto::Error::BadCertificate)
                        .and_then(KemPublic::from_text)
                    {
                        Ok(k) => found.kems.push(k),
                        Err(e) => detail.push(format!("_httpcrypt-kem: {}", e.code())),
                    }
                }
            }
            Err(why) => detail.push(format!("_httpcrypt-kem: {why}")),
        }
        match records(&txt) {
            Ok(l) => {
                for rec in l.records() {
                    let RData::TXT(t) = rec.data() else { continue };
                    match std::str::from_utf8(&t.txt_data().concat())
                        .map_err(|_| httpcrypt_proto::Error::BadCertificate)
                        .and_then(HybridCert::from_text)
                    {
                        Ok(c) => found.certs.push(c),
                        Err(e) => detail.push(format!("dns-pq-txt: {}", e.code())),
                    }
                }
                if !found.certs.is_empty() {
                    found.source = Some(KeySource::DnsPqTxt);
                    found.ttl = ttl_of(l);
                }
            }
            Err(why) => detail.push(format!("dns-pq-txt: {why}")),
        }
        if found.certs.is_empty() {
            match records(&aaaa) {
                Ok(l) => {
                    let addrs: Vec<[u8; 16]> = l
                        .records()
                        .iter()
                        .filter_map(|rec| match rec.data() {
                            RData::AAAA(a) => Some(a.0.octets()),
                            _ => None,
                        })
                        .collect();
                    match hybrid_cert::parse_aaaa(&addrs) {
                        Ok(c) => {
                            found.certs.push(c);
                            found.source = Some(KeySource::DnsPqAaaa);
                            found.ttl = ttl_of(l);
                        }
                        Err(e) => detail.push(format!("dns-pq-aaaa: {}", e.code())),
                    }
                }
                Err(why) => detail.push(format!("dns-pq-aaaa: {why}")),
            }
        }
        found.detail = detail.join("; ");
        Ok(found)
    }

    /// The identity in `_httpcrypt-id`, if the resolver vouched for it with
    /// the AD bit; `Ok(None)` when there is no record or no AD bit.
    async fn validated_identity(&self, name: Name) -> Result<Option<IdentityPublic>, String> {
        let stream = UdpClientStream::builder(self.nameserver, TokioRuntimeProvider::new())
            .with_timeout(Some(self.timeout))
            .build();
        let (client, bg) = Client::connect(stream).await.map_err(|e| e.to_string())?;
        let bg = tokio::spawn(bg);
        let mut m = Message::new();
        m.set_id(rand_core::RngCore::next_u32(&mut rand_core::OsRng) as u16)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .set_authentic_data(true);
        m.add_query(Query::query(name, RecordType::TXT));
        let mut edns = Edns::new();
        edns.set_max_payload(1232).set_dnssec_ok(true);
        m.set_edns(edns);
        let rsp = client.send(m).first_answer().await;
        bg.abort();
        let rsp = rsp.map_err(|e| e.to_string())?;
        match rsp.response_code() {
            ResponseCode::NoError => {}
            ResponseCode::NXDomain => return Ok(None),
            // A validating resolver answers bogus data with SERVFAIL.
            code => return Err(format!("_httpcrypt-id lookup failed: {code}")),
        }
        let texts: Vec<Vec<u8>> = rsp
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::TXT(t) => Some(t.txt_data().concat()),
                _ => None,
            })
            .collect();
        let Some(text) = texts.first() else {
            return Ok(None);
        };
        if texts.len() > 1 {
            return Err("more than one _httpcrypt-id record".into());
        }
        let id =
            dns::parse_identity_txt(text).map_err(|e| format!("_httpcrypt-id: {}", e.code()))?;
        if !rsp.authentic_data() {
            tracing::debug!("_httpcrypt-id without the AD bit: not trusted");
            return Err(
                "_httpcrypt-id present but not DNSSEC-validated (no AD bit); ignored".into(),
            );
        }
        Ok(Some(id))
    }
}

fn split_authority(authority: &str) -> Result<(&str, u16), Error> {
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, _)) if !h.ends_with(']') && h.contains(':') => (authority, None),
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| Error::Config(format!("bad port in {authority}")))?,
        None => 80,
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return Err(Error::Dns(format!(
            "{bare} is an address, not a name: nothing to look up"
        )));
    }
    Ok((host, port))
}

fn ttl_of(l: &Lookup) -> u64 {
    l.valid_until()
        .saturating_duration_since(Instant::now())
        .as_secs()
}

fn records(r: &Result<Lookup, ResolveError>) -> Result<&Lookup, String> {
    match r {
        Ok(l) if !l.records().is_empty() => Ok(l),
        Ok(_) => Err("no records".into()),
        Err(e) if e.is_no_records_found() => Err("no records".into()),
        Err(e) => Err(format!("lookup failed: {e}")),
    }
}

/// Keeps the keys that verify (authenticated mode) and reports whether any
/// is valid now.
fn conclude(keys: Vec<DiscoveredKey>, errors: Vec<&'static str>, ttl: u64, now: u64) -> Outcome {
    if cert::choose_key(&keys, now).is_ok() {
        Ok((keys, ttl))
    } else if errors.is_empty() {
        Err("no key valid now".into())
    } else {
        Err(format!("no usable record ({})", errors.join(", ")))
    }
}

fn check_cert(
    c: KeyCert,
    identity: Option<&IdentityPublic>,
) -> Result<DiscoveredKey, &'static str> {
    if let Some(id) = identity {
        c.verify(id).map_err(|e| e.code())?;
    }
    Ok(DiscoveredKey::from(&c))
}

fn from_txt(
    r: Result<Lookup, ResolveError>,
    identity: Option<&IdentityPublic>,
    now: u64,
) -> Outcome {
    let l = records(&r)?;
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    for rec in l.records() {
        let RData::TXT(t) = rec.data() else { continue };
        match dns::parse_txt(&t.txt_data().concat())
            .map_err(|e| e.code())
            .and_then(|c| check_cert(c, identity))
        {
            Ok(k) => keys.push(k),
            Err(code) => errors.push(code),
        }
    }
    conclude(keys, errors, ttl_of(l), now)
}

fn from_aaaa(
    r: Result<Lookup, ResolveError>,
    identity: Option<&IdentityPublic>,
    now: u64,
) -> Outcome {
    let l = records(&r)?;
    let addrs: Vec<[u8; 16]> = l
        .records()
        .iter()
        .filter_map(|rec| match rec.data() {
            RData::AAAA(a) => Some(a.0.octets()),
            _ => None,
        })
        .collect();
    let key = dns::parse_aaaa(&addrs)
        .map_err(|e| e.code())
        .and_then(|c| check_cert(c, identity))
        .map_err(|code| format!("no usable record ({code})"))?;
    conclude(vec![key], Vec::new(), ttl_of(l), now)
}

fn from_tlsa(
    r: Result<Lookup, ResolveError>,
    identity: Option<&IdentityPublic>,
    now: u64,
) -> Outcome {
    let l = records(&r)?;
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    for rec in l.records() {
        let RData::TLSA(t) = rec.data() else { continue };
        let read = tlsa::parse_record(
            t.cert_usage().into(),
            t.selector().into(),
            t.matching().into(),
            t.cert_data(),
        )
        .and_then(|c| {
            if let Some(id) = identity {
                c.verify(id)?;
            }
            Ok(c.key())
        });
        match read {
            Ok(k) => keys.push(k),
            // TLSA records for other uses may share the name (RFC 6698).
            Err(e) => errors.push(e.code()),
        }
    }
    conclude(keys, errors, ttl_of(l), now)
}

impl Discovery for DnsDiscovery {
    fn discover<'a>(
        &'a self,
        authority: &'a str,
        pinned: Option<&'a IdentityPublic>,
    ) -> BoxFuture<'a, Result<Discovered, Error>> {
        Box::pin(async move {
            let key = (authority.to_ascii_lowercase(), pinned.map(|p| p.to_bytes()));
            let now = unix_now();
            if let Some((until, found)) = self
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
            {
                let left = until.saturating_duration_since(Instant::now());
                if !left.is_zero() && cert::choose_key(&found.keys, now).is_ok() {
                    let mut found = found.clone();
                    found.ttl = left.as_secs().max(1);
                    return Ok(found);
                }
            }
            let found = self.lookup(authority, pinned).await?;
            if !found.keys.is_empty() {
                let last = found
                    .keys
                    .iter()
                    .map(|k| u64::from(k.not_after))
                    .max()
                    .unwrap_or(0);
                let keep = found.ttl.min(last.saturating_sub(now));
                self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(
                    key,
                    (Instant::now() + Duration::from_secs(keep), found.clone()),
                );
            }
            Ok(found)
        })
    }

    fn discover_hybrid<'a>(
        &'a self,
        authority: &'a str,
    ) -> BoxFuture<'a, Result<HybridDiscovered, Error>> {
        Box::pin(self.lookup_hybrid(authority))
    }

    fn forget(&self, authority: &str) {
        let authority = authority.to_ascii_lowercase();
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(a, _), _| *a != authority);
    }
}

impl Resolve for DnsDiscovery {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, BoxError>> {
        Box::pin(async move {
            let l = self.resolver.lookup_ip(host).await?;
            Ok(l.iter().collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(
            split_authority("a.example:8080").unwrap(),
            ("a.example", 8080)
        );
        assert_eq!(split_authority("a.example").unwrap(), ("a.example", 80));
        assert!(split_authority("127.0.0.1:80").is_err());
        assert!(split_authority("[::1]:80").is_err());
        assert!(split_authority("a.example:x").is_err());
    }
}
