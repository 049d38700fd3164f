//! The client side of ASAP's DNS step (spec/asap.md §5): for an authority
//! it asks, all at once and through one name server, for the keys (as
//! [`DnsDiscovery`] does), the provenance certificate (`TXT _hcpc.{host}`)
//! and the host's addresses, so keys, certificate and address cost one
//! round trip together. The addresses then serve the connection
//! ([`Resolve`]) and the certificate the first request ([`ProvenanceSource`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use hickory_proto::rr::RData;
use httpcrypt_proto::provenance;
use httpcrypt_proto::{b64, IdentityPublic};

use crate::client::{BoxFuture, Discovered, Discovery, ProvenanceSource};
use crate::connect::Resolve;
use crate::dns::DnsDiscovery;
use crate::error::{BoxError, Error};

/// Seconds before its expiry that a certificate is no longer presented
/// (it must still be valid when the server checks it).
const MARGIN: u64 = 2;

#[derive(Debug, Default, Clone)]
struct Found {
    addrs: Vec<IpAddr>,
    cert: Option<(String, u64)>,
}

/// DNS discovery with a provenance certificate and the host's addresses.
#[derive(Debug)]
pub struct AsapDiscovery {
    dns: Arc<DnsDiscovery>,
    hosts: Mutex<HashMap<String, Found>>,
}

fn host_of(authority: &str) -> String {
    let h = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => authority,
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

impl AsapDiscovery {
    /// Wraps `dns`, whose name server also answers the certificate and
    /// address queries.
    pub fn new(dns: Arc<DnsDiscovery>) -> Self {
        AsapDiscovery {
            dns,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    async fn certificate_lookup(&self, host: &str) -> Option<(String, u64)> {
        let name = format!("{}.{host}.", provenance::DNS_LABEL);
        let l = match self.dns.resolver().txt_lookup(name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(%host, error = %e, "no provenance certificate");
                return None;
            }
        };
        let text = l
            .as_lookup()
            .records()
            .iter()
            .find_map(|r| match r.data() {
                RData::TXT(t) => Some(t.txt_data().concat()),
                _ => None,
            })?;
        let text = String::from_utf8(text).ok()?;
        let raw = b64::decode(text.as_bytes()).ok()?;
        let claims = provenance::decode_unverified(&raw).ok()?;
        Some((text, claims.expires()))
    }

    fn remember(&self, host: &str, f: impl FnOnce(&mut Found)) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        f(hosts.entry(host.to_string()).or_default());
    }
}

impl Discovery for AsapDiscovery {
    fn discover<'a>(
        &'a self,
        authority: &'a str,
        pinned: Option<&'a IdentityPublic>,
    ) -> BoxFuture<'a, Result<Discovered, Error>> {
        Box::pin(async move {
            let host = host_of(authority);
            let (keys, cert, addrs) = tokio::join!(
                self.dns.discover(authority, pinned),
                self.certificate_lookup(&host),
                self.dns.resolver().lookup_ip(format!("{host}.")),
            );
            let addrs: Vec<IpAddr> = addrs.map(|l| l.iter().collect()).unwrap_or_default();
            self.remember(&host, |f| {
                if !addrs.is_empty() {
                    f.addrs = addrs;
                }
                if cert.is_some() {
                    f.cert = cert;
                }
            });
            keys
        })
    }

    fn forget(&self, authority: &str) {
        self.dns.forget(authority);
    }
}

impl Resolve for AsapDiscovery {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, BoxError>> {
        Box::pin(async move {
            let key = host_of(host);
            let known = self
                .hosts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .map(|f| f.addrs.clone())
                .unwrap_or_default();
            if !known.is_empty() {
                return Ok(known);
            }
            self.dns.resolve(host).await
        })
    }
}

impl ProvenanceSource for AsapDiscovery {
    fn certificate(&self, authority: &str, now: u64) -> Option<String> {
        let hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let (text, expires) = hosts.get(&host_of(authority))?.cert.clone()?;
        (now + MARGIN <= expires).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn hosts() {
        assert_eq!(host_of("WWW.Example.org:8080"), "www.example.org");
        assert_eq!(host_of("www.example.org."), "www.example.org");
        assert_eq!(host_of("www.example.org"), "www.example.org");
    }
}
