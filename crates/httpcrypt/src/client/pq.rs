//! Suite 2 for the [`Client`] (spec/hybrid.md H4, H5): its discovery (the
//! [`super::Discovery`] hook's DNS forms, then `OPTIONS {mount}/pq`) and
//! the ML-KEM-768 encapsulation of a fresh hybrid request. What an answer
//! means (the pin, a downgrade, the key texts by hash) is decided by
//! proto's `PqState`; this file asks and feeds it.

use http::header;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Empty};
use httpcrypt_proto::client::pq::pq_path;
use httpcrypt_proto::client::{options_max_age, HybridKey, PROBLEM_LIMIT};
use httpcrypt_proto::hybrid::{Encapsulation, CIPHERTEXT_LEN};
use httpcrypt_proto::KexSecret;
use zeroize::Zeroizing;

use super::discovery::KeySource;
use super::read::read_limited;
use super::Client;
use crate::clock::unix_now;
use crate::error::Error;

impl Client {
    /// Looks for a suite-2 key of `authority`: the discovery hook's DNS
    /// forms first (TXT or AAAA at `_httpcrypt-pq`, the key text at
    /// `_httpcrypt-kem`), then, unless turned off, `OPTIONS {mount}/pq`.
    /// `None`: the server offers no suite 2 and the client may use v1
    /// (`prefer`, origin not pinned); `hybrid_downgrade` when suite 2 is
    /// required or pinned.
    pub async fn refresh_pq(
        &self,
        scheme: &str,
        authority: &str,
    ) -> Result<Option<HybridKey>, Error> {
        let pq = self.config.pq;
        let require = self.config.require_identity;
        if let Some(d) = &self.config.discovery {
            let identity = self.identity_for(authority);
            match d.discover_hybrid(authority).await {
                Ok(found) if !found.certs.is_empty() => {
                    let now = unix_now();
                    let source = found.source;
                    let took = self.hosts.with(authority, |h| {
                        let r = h.state.pq_mut().took_certs(
                            found.certs,
                            found.kems,
                            identity.as_ref(),
                            require,
                            found.ttl.max(1),
                            now,
                        );
                        if let (Ok(Some(_)), Some(s)) = (&r, source) {
                            h.source = Some(s);
                        }
                        r
                    });
                    match took {
                        Ok(Some(k)) => return Ok(Some(k)),
                        Ok(None) => {
                            tracing::debug!(%authority, "DNS suite-2 certificates unusable or without a known key text")
                        }
                        Err(e) => {
                            tracing::debug!(%authority, error = %e, "DNS suite-2 certificates refused")
                        }
                    }
                }
                Ok(found) => {
                    tracing::debug!(%authority, reason = %found.detail, "no suite 2 in DNS")
                }
                Err(e) => tracing::debug!(%authority, error = %e, "suite-2 DNS lookup failed"),
            }
            if !self.config.options_fallback {
                let now = unix_now();
                self.hosts
                    .with(authority, |h| h.state.pq_mut().took_none(pq, now))?;
                return Ok(None);
            }
        }
        let uri: Uri = format!("{scheme}://{authority}{}", pq_path(&self.config.mount))
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
        let req = Request::builder()
            .method(Method::OPTIONS)
            .uri(uri)
            .body(Empty::new().map_err(|never| match never {}).boxed_unsync())
            .map_err(|e| Error::Config(e.to_string()))?;
        let rsp = self.http.request(req).await?;
        let status = rsp.status().as_u16();
        let max_age = options_max_age(
            rsp.headers()
                .get(header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok()),
        );
        let body = if status == 200 {
            read_limited(rsp.into_body(), PROBLEM_LIMIT).await?
        } else {
            // Only the status counts; the body is drained for the connection.
            read_limited(rsp.into_body(), PROBLEM_LIMIT)
                .await
                .unwrap_or_default()
        };
        let identity = self.identity_for(authority);
        let now = unix_now();
        let took = self.hosts.with(authority, |h| {
            let r = h.state.pq_mut().took_answer(
                pq,
                status,
                &body,
                identity.as_ref(),
                require,
                max_age,
                now,
            );
            if let Ok(Some(_)) = &r {
                h.source = Some(KeySource::PqOptions);
            }
            r
        })?;
        Ok(took)
    }
}

/// The hybrid agreement of one fresh request to `key` with the client's
/// X25519 key `client`: ML-KEM-768 encapsulation by aws-lc-rs (which draws
/// its own randomness, four times faster than the sans-IO core's
/// `Encapsulation::new`, spec/hybrid.md H7), combined by proto. For
/// drivers of the core's requests (`HybridRequest::from_encapsulation`).
pub fn encapsulate(key: &HybridKey, client: &KexSecret) -> Result<Encapsulation, Error> {
    use aws_lc_rs::kem::{EncapsulationKey, ML_KEM_768};
    let bad = |_| Error::Protocol(httpcrypt_proto::Error::BadCertificate);
    let ek = EncapsulationKey::new(&ML_KEM_768, key.kem.as_bytes()).map_err(bad)?;
    let (ct, ss) = ek
        .encapsulate()
        .map_err(|_| Error::Protocol(httpcrypt_proto::Error::BadCertificate))?;
    let ct_m: Box<[u8; CIPHERTEXT_LEN]> = Box::new(
        ct.as_ref()
            .try_into()
            .map_err(|_| Error::Protocol(httpcrypt_proto::Error::BadCiphertext))?,
    );
    let mut ss_m = Zeroizing::new([0u8; 32]);
    if ss.as_ref().len() != ss_m.len() {
        return Err(Error::Protocol(httpcrypt_proto::Error::BadCiphertext));
    }
    ss_m.copy_from_slice(ss.as_ref());
    Ok(Encapsulation::from_parts(
        &key.cert.kex_public,
        client,
        ct_m,
        &ss_m,
    )?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use httpcrypt_proto::hybrid::{HybridCert, HybridServerKey, KemSecret};
    use httpcrypt_proto::{IdentityKey, Profile};
    use ml_kem::kem::Decapsulate as _;

    use super::*;

    /// The client's encapsulation (aws-lc-rs, its own randomness) gives the
    /// session key the server agrees on, its ML-KEM secret is the one
    /// RustCrypto's decapsulation finds, and no two are alike.
    #[test]
    fn the_clients_encapsulation_meets_the_server_and_another_library() {
        let seed = [4; 64];
        let kem = Arc::new(KemSecret::from_seed(seed));
        let kex = KexSecret::from_bytes([8; 32]);
        let cert = HybridCert::sign(
            &IdentityKey::from_seed([1; 32]),
            Profile::V1,
            1,
            0,
            u32::MAX,
            *kex.public(),
            kem.public().hash(),
        );
        let key = HybridKey::new(cert.clone(), Arc::new(kem.public().clone())).unwrap();
        let server = HybridServerKey::new(kex, kem.clone(), cert).unwrap();
        let client = KexSecret::from_bytes([9; 32]);

        let e = encapsulate(&key, &client).unwrap();
        assert_eq!(e.ct_x, *client.public());
        assert_eq!(
            &server.agree(&e.ct_x, &e.ct_m[..]).unwrap(),
            e.session_key()
        );
        // The same ciphertext through RustCrypto's decapsulation and the
        // core's combiner (the deterministic path of the test vectors).
        let rustcrypto = ml_kem::ml_kem_768::DecapsulationKey::from_seed(seed.into());
        let ct = ml_kem::ml_kem_768::Ciphertext::try_from(&e.ct_m[..]).unwrap();
        let ss: [u8; 32] = rustcrypto.decapsulate(&ct).as_slice().try_into().unwrap();
        let again =
            Encapsulation::from_parts(&key.cert.kex_public, &client, e.ct_m.clone(), &ss).unwrap();
        assert_eq!(again.session_key(), e.session_key());

        let other = encapsulate(&key, &client).unwrap();
        assert_ne!(other.ct_m, e.ct_m);
        assert_ne!(other.session_key(), e.session_key());
    }
}
