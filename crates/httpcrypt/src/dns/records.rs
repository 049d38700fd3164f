//! The records a server publishes for one host (spec §6), as hickory
//! record sets and as zone-file lines. The formats themselves come from
//! `httpcrypt_proto::dns` and `httpcrypt_proto::tlsa`; this file only
//! decides which certificates go where.
//!
//! - `_httpcrypt.{host}` TXT: every unexpired certificate, newest first;
//! - `_httpcrypt.{host}` AAAA: the nine-address set of the newest
//!   certificate valid now (one set only: the reader needs exactly nine);
//! - `_{port}._tcp.{host}` TLSA `3 0 0`: the X.509 form of every unexpired
//!   certificate;
//! - `_httpcrypt-id.{host}` TXT: `hc1-id {identity}`;
//! - with the hybrid suite (spec/hybrid.md H4, [`hybrid_rrsets`]):
//!   `_httpcrypt-pq.{host}` TXT, every suite-2 certificate; `_httpcrypt-pq.{host}`
//!   AAAA, the eleven-address set of the newest one; `_httpcrypt-kem.{host}`
//!   TXT, each ML-KEM key text those certificates name, in strings of at
//!   most 255 characters.
//!
//! "Unexpired" includes certificates whose validity has not started yet,
//! so a key made ahead of time is in caches by the time it is used.

use std::net::{IpAddr, Ipv6Addr};

use hickory_proto::rr::rdata::tlsa::{CertUsage, Matching, Selector};
use hickory_proto::rr::rdata::{A, AAAA, TLSA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::hybrid::{cert as hybrid_cert, HybridCert, KemPublic};
use httpcrypt_proto::{dns, tlsa, IdentityKey};

use crate::error::Error;

/// Where and how long a host's records are published.
#[derive(Debug, Clone)]
pub struct Publication {
    /// The host clients connect to (`www.example.com`).
    pub host: Name,
    /// The TCP port of the HTTPCrypt service (for the TLSA owner name).
    pub port: u16,
    /// Record TTL in seconds; spec §6.6 makes it the rotation period R.
    pub ttl: u32,
}

impl Publication {
    /// A publication for `host` (absolute or not; a trailing dot is implied).
    pub fn new(host: &str, port: u16, ttl: u32) -> Result<Self, Error> {
        Ok(Publication {
            host: fqdn(host)?,
            port,
            ttl,
        })
    }

    /// `_httpcrypt.{host}.`
    pub fn cert_name(&self) -> Name {
        self.owner(&dns::cert_name(&self.host_text()))
    }

    /// `_httpcrypt-id.{host}.`
    pub fn identity_name(&self) -> Name {
        self.owner(&dns::identity_name(&self.host_text()))
    }

    /// `_{port}._tcp.{host}.`
    pub fn tlsa_name(&self) -> Name {
        self.owner(&dns::tlsa_name(self.port, &self.host_text()))
    }

    fn host_text(&self) -> String {
        self.host.to_ascii()
    }

    fn owner(&self, text: &str) -> Name {
        fqdn(text).expect("a label prefixed to a valid name is valid")
    }
}

/// Parses a domain name and makes it absolute.
pub fn fqdn(text: &str) -> Result<Name, Error> {
    let mut n = Name::from_ascii(text.trim_end_matches('.'))
        .map_err(|e| Error::Config(format!("{text:?} is not a domain name: {e}")))?;
    n.set_fqdn(true);
    Ok(n.to_lowercase())
}

/// The records of one owner name and type, replaced as a whole.
#[derive(Debug, Clone)]
pub struct RrSet {
    /// Owner name.
    pub name: Name,
    /// Record type.
    pub rtype: RecordType,
    /// The records (empty: the set is to be deleted).
    pub records: Vec<Record>,
}

/// The four record sets of `p` for the certificates held at `now`
/// (expired ones are left out, so replacing the sets removes them).
pub fn rrsets(p: &Publication, identity: &IdentityKey, certs: &[KeyCert], now: u64) -> Vec<RrSet> {
    let mut live: Vec<&KeyCert> = certs
        .iter()
        .filter(|c| now <= u64::from(c.not_after))
        .collect();
    live.sort_by_key(|c| std::cmp::Reverse((c.serial, c.not_before)));
    let record = |name: &Name, rdata: RData| Record::from_rdata(name.clone(), p.ttl, rdata);
    let cert_name = p.cert_name();
    let txt = live
        .iter()
        .map(|c| record(&cert_name, RData::TXT(TXT::new(vec![dns::format_txt(c)]))))
        .collect();
    let newest = live
        .iter()
        .find(|c| c.is_valid_at(now))
        .or(live.first())
        .copied();
    let aaaa = newest
        .map(|c| {
            dns::format_aaaa(c)
                .iter()
                .map(|a| record(&cert_name, RData::AAAA(AAAA(Ipv6Addr::from(*a)))))
                .collect()
        })
        .unwrap_or_default();
    let tlsa_name = p.tlsa_name();
    let tlsa = live
        .iter()
        .map(|c| {
            let der = tlsa::encode(identity, c);
            record(
                &tlsa_name,
                RData::TLSA(TLSA::new(
                    CertUsage::DaneEe,
                    Selector::Full,
                    Matching::Raw,
                    der,
                )),
            )
        })
        .collect();
    let id_name = p.identity_name();
    let id = vec![record(
        &id_name,
        RData::TXT(TXT::new(vec![dns::format_identity_txt(&identity.public())])),
    )];
    vec![
        RrSet {
            name: cert_name.clone(),
            rtype: RecordType::TXT,
            records: txt,
        },
        RrSet {
            name: cert_name,
            rtype: RecordType::AAAA,
            records: aaaa,
        },
        RrSet {
            name: tlsa_name,
            rtype: RecordType::TLSA,
            records: tlsa,
        },
        RrSet {
            name: id_name,
            rtype: RecordType::TXT,
            records: id,
        },
    ]
}

/// The suite-2 record sets of `p` (spec/hybrid.md H4) for the suite-2
/// certificates held at `now`, each with the ML-KEM key it names; none at
/// all when no suite-2 certificate is held (a server without the hybrid
/// suite leaves these names alone).
pub fn hybrid_rrsets(p: &Publication, certs: &[(HybridCert, KemPublic)], now: u64) -> Vec<RrSet> {
    let mut live: Vec<&(HybridCert, KemPublic)> = certs
        .iter()
        .filter(|(c, _)| now <= u64::from(c.not_after))
        .collect();
    if live.is_empty() {
        return Vec::new();
    }
    live.sort_by_key(|(c, _)| std::cmp::Reverse((c.serial, c.not_before)));
    let record = |name: &Name, rdata: RData| Record::from_rdata(name.clone(), p.ttl, rdata);
    let pq_name = p.owner(&hybrid_cert::hybrid_cert_name(&p.host_text()));
    let kem_name = p.owner(&hybrid_cert::kem_name(&p.host_text()));
    let txt = live
        .iter()
        .map(|(c, _)| record(&pq_name, RData::TXT(TXT::new(vec![c.to_text()]))))
        .collect();
    let newest = live
        .iter()
        .find(|(c, _)| c.is_valid_at(now))
        .or(live.first())
        .map(|(c, _)| c);
    let aaaa = newest
        .map(|c| {
            hybrid_cert::format_aaaa(c)
                .iter()
                .map(|a| record(&pq_name, RData::AAAA(AAAA(Ipv6Addr::from(*a)))))
                .collect()
        })
        .unwrap_or_default();
    let mut kems: Vec<&KemPublic> = Vec::new();
    for (_, k) in &live {
        if !kems.iter().any(|x| x.hash() == k.hash()) {
            kems.push(k);
        }
    }
    let kem_txt = kems
        .iter()
        .map(|k| {
            let text = k.to_text();
            // base64url and `hck1 `: ASCII, so any byte offset is a
            // character boundary.
            let strings = text
                .as_bytes()
                .chunks(255)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            record(&kem_name, RData::TXT(TXT::new(strings)))
        })
        .collect();
    vec![
        RrSet {
            name: pq_name.clone(),
            rtype: RecordType::TXT,
            records: txt,
        },
        RrSet {
            name: pq_name,
            rtype: RecordType::AAAA,
            records: aaaa,
        },
        RrSet {
            name: kem_name,
            rtype: RecordType::TXT,
            records: kem_txt,
        },
    ]
}

/// A and AAAA record sets for the host itself (for a zone that the
/// embedded server answers alone). Empty types are left out.
pub fn address_sets(p: &Publication, addrs: &[IpAddr]) -> Vec<RrSet> {
    let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = addrs.iter().partition(|a| a.is_ipv4());
    let set = |rtype, addrs: Vec<IpAddr>| RrSet {
        name: p.host.clone(),
        rtype,
        records: addrs
            .into_iter()
            .map(|a| {
                let rdata = match a {
                    IpAddr::V4(a) => RData::A(A(a)),
                    IpAddr::V6(a) => RData::AAAA(AAAA(a)),
                };
                Record::from_rdata(p.host.clone(), p.ttl, rdata)
            })
            .collect(),
    };
    [set(RecordType::A, v4), set(RecordType::AAAA, v6)]
        .into_iter()
        .filter(|s| !s.records.is_empty())
        .collect()
}

/// One zone-file line (RFC 1035 master format) for a record of [`rrsets`].
pub fn zone_line(r: &Record) -> String {
    let data = match r.data() {
        RData::TXT(t) => t
            .txt_data()
            .iter()
            // Our strings are base64url, `hc1 ` and `hc1-id `: nothing to escape.
            .map(|s| format!("\"{}\"", String::from_utf8_lossy(s)))
            .collect::<Vec<_>>()
            .join(" "),
        RData::TLSA(t) => tlsa::format_rdata(t.cert_data()),
        other => other.to_string(),
    };
    format!("{} {} IN {} {}", r.name(), r.ttl(), r.record_type(), data)
}

/// Zone-file text for all `sets`, one line per record.
pub fn zone_text(sets: &[RrSet]) -> String {
    let mut s = String::new();
    for set in sets {
        for r in &set.records {
            s.push_str(&zone_line(r));
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpcrypt_proto::KexPublic;

    #[test]
    fn sets_and_lines() {
        let id = IdentityKey::from_seed([1; 32]);
        let certs = vec![
            KeyCert::sign(&id, 1, 0, 100, KexPublic([1; 32])),
            KeyCert::sign(&id, 2, 50, 150, KexPublic([2; 32])),
            KeyCert::sign(&id, 3, 200, 300, KexPublic([3; 32])),
            KeyCert::sign(&id, 4, 0, 10, KexPublic([4; 32])),
        ];
        let p = Publication::new("WWW.Example.com.", 8080, 300).unwrap();
        let sets = rrsets(&p, &id, &certs, 60);
        assert_eq!(sets[0].name.to_ascii(), "_httpcrypt.www.example.com.");
        assert_eq!(sets[0].records.len(), 3, "expired serial 4 is left out");
        assert_eq!(sets[1].records.len(), 9);
        // The AAAA set holds the newest certificate valid now (serial 2).
        let addrs: Vec<[u8; 16]> = sets[1]
            .records
            .iter()
            .map(|r| match r.data() {
                RData::AAAA(a) => a.0.octets(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(dns::parse_aaaa(&addrs).unwrap().serial, 2);
        assert_eq!(sets[2].name.to_ascii(), "_8080._tcp.www.example.com.");
        assert_eq!(sets[2].records.len(), 3);
        let text = zone_text(&sets);
        assert_eq!(text.lines().count(), 3 + 9 + 3 + 1);
        assert!(text.contains("_httpcrypt-id.www.example.com. 300 IN TXT \"hc1-id "));
        assert!(text.contains("_8080._tcp.www.example.com. 300 IN TLSA 3 0 0 30"));
        assert!(text.contains("_httpcrypt.www.example.com. 300 IN AAAA fd00:"));
    }
}
