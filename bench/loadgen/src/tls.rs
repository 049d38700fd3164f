//! TLS configurations of the harness (rustls, aws-lc-rs provider): the
//! client used against every TLS server, and the rustls TLS 1.3 baseline
//! server.
//!
//! By default both ends offer X25519 and P-256 only. rustls' default
//! provider also offers the X25519MLKEM768 hybrid, whose 1.2 KB key share
//! would inflate every ClientHello; the paper's comparison (and nginx 1.22
//! with OpenSSL 3.0) is about classical ECDHE, so the classical baselines
//! leave it out. The post-quantum pair (`rustls-tls13-pq`, beside
//! HTTPCrypt's suite 2) takes it: the client offers it first, as rustls'
//! default does, and the server takes nothing else.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

fn provider(groups: &[&'static dyn rustls::crypto::SupportedKxGroup]) -> CryptoProvider {
    let mut p = aws_lc_rs::default_provider();
    p.kx_groups = groups.to_vec();
    p
}

/// The client: TLS 1.3 and 1.2 offered (the server picks), X25519 and
/// P-256 (with `pq`, X25519MLKEM768 before them: its key share and an
/// X25519 one go in the ClientHello, as with rustls' default provider),
/// resumption only when `resume` (then sessions are shared by all
/// connections of the run, as a browser shares them per host).
pub fn client_config(resume: bool, pq: bool) -> Result<Arc<rustls::ClientConfig>> {
    let classical = [aws_lc_rs::kx_group::X25519, aws_lc_rs::kx_group::SECP256R1];
    let provider = Arc::new(if pq {
        provider(&[
            aws_lc_rs::kx_group::X25519MLKEM768,
            classical[0],
            classical[1],
        ])
    } else {
        provider(&classical)
    });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SignatureOnly(provider)))
        .with_no_client_auth();
    cfg.resumption = if resume {
        Resumption::in_memory_sessions(1024)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(cfg))
}

/// The name the client sends in SNI.
pub fn server_name() -> ServerName<'static> {
    ServerName::try_from("localhost").expect("a valid DNS name")
}

/// The rustls baseline server: TLS 1.3 only, X25519 only (with `pq`,
/// X25519MLKEM768 only), no session storage and no tickets, so every
/// connection is a full handshake.
pub fn server_config(cert: &Path, key: &Path, pq: bool) -> Result<Arc<rustls::ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let provider = Arc::new(provider(&[if pq {
        aws_lc_rs::kx_group::X25519MLKEM768
    } else {
        aws_lc_rs::kx_group::X25519
    }]));
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    Ok(Arc::new(cfg))
}

/// Checks the server's handshake signature (as every client must, so the
/// client's work stays realistic) but not the certificate chain: the
/// harness uses one self-signed certificate and no CA.
#[derive(Debug)]
struct SignatureOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for SignatureOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
