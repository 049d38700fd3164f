//! Oblivious HTTP (RFC 9458) with the `ohttp` crate and Binary HTTP
//! (RFC 9292) with `bhttp`, built with `rust-hpke` (RustCrypto: x25519-dalek,
//! chacha20poly1305, hkdf/sha2) because the crate's other backend is NSS.
//! Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, the
//! closest to HTTPCrypt's suite 1. What goes over the client's link is an
//! HTTP/1.1 POST to the relay with the encapsulated request as its body,
//! and the relay's 200 with the encapsulated response.

use anyhow::{anyhow, bail, Result};
use bhttp::{Message, Mode};
use ohttp::hpke::{Aead, Kdf, Kem};
use ohttp::{ClientRequest, KeyConfig, Server, SymmetricSuite};

use crate::meter::{Dir, Payload, Phase, Run, Side};

/// The OHTTP variants.
pub const VARIANTS: &[&str] = &["x25519-chacha"];

/// The gateway's key configuration and server.
pub struct Lab {
    server: Server,
    config: Vec<u8>,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ohttp::Lab")
    }
}

fn bhttp_of(http1: &[u8]) -> Result<Vec<u8>> {
    let msg = Message::read_http(&mut std::io::Cursor::new(http1))
        .map_err(|e| anyhow!("bhttp read: {e:?}"))?;
    let mut out = Vec::new();
    msg.write_bhttp(Mode::KnownLength, &mut out)
        .map_err(|e| anyhow!("bhttp write: {e:?}"))?;
    Ok(out)
}

/// The relay-facing HTTP/1.1 heads (RFC 9458 §4, §5).
fn outer_request_head(len: usize) -> String {
    format!("POST /relay HTTP/1.1\r\nHost: relay.example\r\nContent-Type: message/ohttp-req\r\nContent-Length: {len}\r\n\r\n")
}
fn outer_response_head(len: usize) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: message/ohttp-res\r\nContent-Length: {len}\r\n\r\n")
}

impl Lab {
    /// A fresh gateway key.
    pub fn new(variant: &str) -> Result<Lab> {
        if variant != "x25519-chacha" {
            bail!("unknown OHTTP variant {variant}");
        }
        let kc = KeyConfig::new(
            1,
            Kem::X25519Sha256,
            vec![SymmetricSuite::new(Kdf::HkdfSha256, Aead::ChaCha20Poly1305)],
        )
        .map_err(|e| anyhow!("{e:?}"))?;
        let server = Server::new(kc).map_err(|e| anyhow!("{e:?}"))?;
        let config = server.config().encode().map_err(|e| anyhow!("{e:?}"))?;
        Ok(Lab { server, config })
    }

    /// Size of the key configuration a client fetches first.
    pub fn config_len(&self) -> usize {
        self.config.len()
    }

    /// One encapsulated request and response.
    pub fn exchange(&mut self, p: &Payload, run: &mut Run) -> Result<()> {
        let req = bhttp_of(&p.request())?;
        let rsp = bhttp_of(&p.response())?;
        let config = &self.config;
        let (enc, client_rsp) = run
            .step(
                Side::Client,
                Phase::Handshake,
                "HPKE encap (X25519) + seal request",
                || ClientRequest::from_encoded_config(config)?.encapsulate(&req),
            )
            .map_err(|e| anyhow!("{e:?}"))?;
        let wire_req = outer_request_head(enc.len()).len() + enc.len();
        run.send(Dir::C2s, wire_req, true, "request via relay");
        let server = &self.server;
        let (opened, server_rsp) = run
            .step(
                Side::Server,
                Phase::Handshake,
                "HPKE decap (X25519) + open request",
                || server.decapsulate(&enc),
            )
            .map_err(|e| anyhow!("{e:?}"))?;
        if opened != req {
            bail!("OHTTP: gateway opened something else");
        }
        let enc_rsp = run
            .step(Side::Server, Phase::Protect, "seal response", || {
                server_rsp.encapsulate(&rsp)
            })
            .map_err(|e| anyhow!("{e:?}"))?;
        run.send(
            Dir::S2c,
            outer_response_head(enc_rsp.len()).len() + enc_rsp.len(),
            true,
            "response via relay",
        );
        let got = run
            .step(Side::Client, Phase::Protect, "open response", || {
                client_rsp.decapsulate(&enc_rsp)
            })
            .map_err(|e| anyhow!("{e:?}"))?;
        if got != rsp {
            bail!("OHTTP: client opened something else");
        }
        Ok(())
    }
}
