//! One rotation epoch as stored in a key directory: the kex key and its
//! certificates, its ticket key, and with the hybrid suite the ML-KEM key.

use crate::error::Error;
use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::hybrid::{HybridCert, KemSecret};
use httpcrypt_proto::ticket::TicketKey;
use httpcrypt_proto::{b64, KexSecret, KeyId};
use std::sync::Arc;
use zeroize::Zeroizing;

use super::files::cfg;

/// One rotation epoch as stored: the kex key, its certificate, its ticket
/// key, and with the hybrid suite its suite-2 certificate and the ML-KEM key
/// that certificate names (spec/hybrid.md H4).
#[derive(Debug)]
pub struct Epoch {
    /// The X25519 secret.
    pub secret: KexSecret,
    /// Its certificate.
    pub cert: KeyCert,
    /// The ticket key that lives and dies with it.
    pub ticket: TicketKey,
    /// The suite-2 certificate of the same kex key, when hybrid is on.
    pub hybrid: Option<HybridCert>,
    /// The ML-KEM key `hybrid` names ([`KeyStore::load`] finds it in
    /// `kem/`; [`KeyStore::load_file`] leaves it out).
    pub kem: Option<Arc<KemSecret>>,
}

impl Epoch {
    pub(super) fn format(&self) -> Zeroizing<String> {
        let hybrid = self
            .hybrid
            .as_ref()
            .map(|h| format!("hybrid {}\n", h.to_text()))
            .unwrap_or_default();
        Zeroizing::new(format!(
            "secret {}\ncert {}\nticket {} {}\n{hybrid}",
            b64::encode(&self.secret.to_bytes()[..]),
            self.cert.to_text(),
            self.ticket.tid().to_b64(),
            b64::encode(&self.ticket.to_bytes()[..]),
        ))
    }

    pub(super) fn parse(text: &str) -> Result<Epoch, Error> {
        let mut secret = None;
        let mut cert = None;
        let mut ticket = None;
        let mut hybrid = None;
        for line in text.lines() {
            let (k, v) = line
                .split_once(' ')
                .ok_or_else(|| cfg("malformed key file line"))?;
            match k {
                "secret" => {
                    secret = Some(KexSecret::from_bytes(b64::decode_array::<32>(
                        v.as_bytes(),
                    )?))
                }
                "cert" => cert = Some(KeyCert::from_text(v)?),
                "ticket" => {
                    let (tid, key) = v
                        .split_once(' ')
                        .ok_or_else(|| cfg("malformed ticket line"))?;
                    let key = Zeroizing::new(b64::decode_array::<32>(key.as_bytes())?);
                    ticket = Some(TicketKey::new(
                        KeyId(b64::decode_array::<10>(tid.as_bytes())?),
                        *key,
                    ));
                }
                "hybrid" => hybrid = Some(HybridCert::from_text(v)?),
                _ => return Err(cfg(format!("unknown key file field {k}"))),
            }
        }
        let secret = secret.ok_or_else(|| cfg("key file without secret"))?;
        let cert = cert.ok_or_else(|| cfg("key file without cert"))?;
        if cert.kex_public != *secret.public() {
            return Err(cfg("key file: certificate does not match the secret"));
        }
        let ticket = ticket.ok_or_else(|| cfg("key file without ticket key"))?;
        if hybrid
            .as_ref()
            .is_some_and(|h| h.kex_public != *secret.public())
        {
            return Err(cfg(
                "key file: the hybrid certificate does not match the secret",
            ));
        }
        Ok(Epoch {
            secret,
            cert,
            ticket,
            hybrid,
            kem: None,
        })
    }
}
