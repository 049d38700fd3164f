//! TLS 1.2 and 1.3 with rustls and its aws-lc-rs provider (the primitives
//! `httpcrypt-proto` uses), both ends in this process: full handshakes,
//! resumption and 0-RTT, with an ECDSA P-256 leaf certificate issued by a
//! one-level CA that the client verifies for real (webpki).

use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::client::Resumption;
use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use crate::meter::{Dir, Payload, Phase, Run, Side};

/// The TLS variants (`-pq`: the X25519MLKEM768 hybrid group).
pub const VARIANTS: &[&str] = &[
    "tls13-full",
    "tls13-resumed",
    "tls13-0rtt",
    "tls13-full-pq",
    "tls12-full",
    "tls12-resumed",
];

/// Client and server configurations for one variant.
pub struct Lab {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    variant: String,
    /// Size of the leaf certificate (DER).
    pub leaf_len: usize,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tls::Lab({})", self.variant)
    }
}

fn provider(pq: bool) -> CryptoProvider {
    let mut p = aws_lc_rs::default_provider();
    p.kx_groups = if pq {
        // The hybrid first, as rustls' prefer-post-quantum default has it.
        vec![
            aws_lc_rs::kx_group::X25519MLKEM768,
            aws_lc_rs::kx_group::X25519,
        ]
    } else {
        // Classical X25519 only: the same key agreement as HTTPCrypt.
        vec![aws_lc_rs::kx_group::X25519]
    };
    p
}

impl Lab {
    /// Certificates and configurations; for the resumed and 0-RTT variants
    /// one unmeasured handshake leaves a session in the client's cache.
    pub fn new(variant: &str) -> Result<Lab> {
        if !VARIANTS.contains(&variant) {
            bail!("unknown TLS variant {variant}");
        }
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "lab CA");
        let ca = ca_params.self_signed(&ca_key)?;
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let leaf = rcgen::CertificateParams::new(vec!["example.com".to_string()])?
            .signed_by(&leaf_key, &ca, &ca_key)?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone())?;

        let pq = variant.ends_with("-pq");
        let version: &'static rustls::SupportedProtocolVersion = if variant.starts_with("tls12") {
            &rustls::version::TLS12
        } else {
            &rustls::version::TLS13
        };
        let p = Arc::new(provider(pq));
        let mut client = ClientConfig::builder_with_provider(p.clone())
            .with_protocol_versions(&[version])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.resumption = if variant.contains("resumed") || variant.contains("0rtt") {
            Resumption::in_memory_sessions(16)
        } else {
            Resumption::disabled()
        };
        client.enable_early_data = variant.contains("0rtt");
        let leaf_der: CertificateDer<'static> = leaf.der().clone();
        let leaf_len = leaf_der.len();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut server = ServerConfig::builder_with_provider(p)
            .with_protocol_versions(&[version])?
            .with_no_client_auth()
            .with_single_cert(vec![leaf_der], key)?;
        // Stateless tickets, like HTTPCrypt's; rustls' defaults otherwise
        // (two TLS 1.3 tickets after every full handshake). rustls accepts
        // early data only with its stateful session cache, so the 0-RTT
        // variant keeps that instead.
        if variant.contains("0rtt") {
            server.max_early_data_size = 16 * 1024;
            // Answer the early request in the server's first flight.
            server.send_half_rtt_data = true;
        } else {
            server.ticketer = aws_lc_rs::Ticketer::new()?;
        }
        let mut lab = Lab {
            client: Arc::new(client),
            server: Arc::new(server),
            variant: variant.to_string(),
            leaf_len,
        };
        if variant.contains("resumed") || variant.contains("0rtt") {
            let mut warm = Run::unmarked();
            lab.handshake_and_exchange(
                &Payload {
                    req_body: 0,
                    rsp_body: 0,
                },
                &mut warm,
                false,
            )?;
        }
        Ok(lab)
    }

    /// One connection carrying `p`.
    pub fn exchange(&mut self, p: &Payload, run: &mut Run) -> Result<()> {
        let early = self.variant.contains("0rtt");
        self.handshake_and_exchange(p, run, early)
    }

    /// Per-message overhead in an established session: the bytes of `n`
    /// application bytes sent client to server, minus `n`.
    pub fn message_overhead(&mut self, n: usize) -> Result<usize> {
        let mut run = Run::unmarked();
        let (mut c, mut s) = self.connect(&mut run)?;
        c.set_buffer_limit(None);
        s.set_buffer_limit(None);
        let data = vec![b'm'; n];
        c.writer().write_all(&data)?;
        let wire = drain(&mut c)?;
        let got = feed_server(&mut s, &wire)?;
        if got.len() != n {
            bail!("server read {} of {n} bytes", got.len());
        }
        Ok(wire.len() - n)
    }

    fn connect(&self, run: &mut Run) -> Result<(ClientConnection, ServerConnection)> {
        let name = ServerName::try_from("example.com")?;
        let mut c = ClientConnection::new(self.client.clone(), name)?;
        let mut s = ServerConnection::new(self.server.clone())?;
        for _ in 0..8 {
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok((c, s));
            }
            let w = drain(&mut c)?;
            run.send(Dir::C2s, w.len(), false, "handshake");
            feed_server(&mut s, &w)?;
            let w = drain_server(&mut s)?;
            run.send(Dir::S2c, w.len(), false, "handshake");
            feed_client(&mut c, &w)?;
        }
        bail!("handshake did not finish")
    }

    fn handshake_and_exchange(&mut self, p: &Payload, run: &mut Run, early: bool) -> Result<()> {
        let req = p.request();
        let rsp = p.response();
        let name = ServerName::try_from("example.com")?;
        let cfg = self.client.clone();
        let mut c = run.step(
            Side::Client,
            Phase::Handshake,
            "ClientHello (key share)",
            || ClientConnection::new(cfg, name),
        )?;
        let mut sent_early = false;
        if early {
            if let Some(mut ed) = c.early_data() {
                run.step(
                    Side::Client,
                    Phase::Protect,
                    "seal request (early data)",
                    || ed.write_all(&req),
                )?;
                sent_early = true;
            } else {
                bail!("no early data possible: no resumable session");
            }
        }
        let w = run.step(Side::Client, Phase::Handshake, "write ClientHello", || {
            drain(&mut c)
        })?;
        run.send(
            Dir::C2s,
            w.len(),
            sent_early,
            if sent_early {
                "ClientHello + early data"
            } else {
                "ClientHello"
            },
        );
        let scfg = self.server.clone();
        let mut s = run.step(
            Side::Server,
            Phase::Handshake,
            "ClientHello -> ServerHello..Finished",
            || {
                let mut s = ServerConnection::new(scfg)?;
                feed_server_hs(&mut s, &w)?;
                Ok::<_, anyhow::Error>(s)
            },
        )?;
        let mut server_got = Vec::new();
        if sent_early {
            if let Some(mut ed) = s.early_data() {
                ed.read_to_end(&mut server_got)?;
            }
            if server_got != req {
                bail!("server did not accept the early data");
            }
        }
        let mut responded = false;
        let mut w = run.step(
            Side::Server,
            Phase::Handshake,
            "write server flight",
            || drain_server(&mut s),
        )?;
        if sent_early {
            // 0.5-RTT: the response goes out with the server's first flight.
            let r = run.step(Side::Server, Phase::Protect, "seal response", || {
                s.writer().write_all(&rsp)?;
                drain_server(&mut s)
            })?;
            w.extend_from_slice(&r);
            responded = true;
        }
        run.send(Dir::S2c, w.len(), responded, "server handshake flight");
        run.step(
            Side::Client,
            Phase::Handshake,
            "server flight (verify chain + signature, ECDHE)",
            || feed_client(&mut c, &w),
        )?;
        // The client's last handshake flight; TLS 1.2 (full) then waits for
        // the server's Finished, TLS 1.3 and resumed 1.2 send the request
        // right behind it in the same flight.
        for _ in 0..4 {
            if !c.wants_write() {
                break;
            }
            let w = run.step(
                Side::Client,
                Phase::Handshake,
                "client key exchange / Finished",
                || drain(&mut c),
            )?;
            run.send(Dir::C2s, w.len(), false, "client handshake flight");
            run.step(Side::Server, Phase::Handshake, "client flight", || {
                feed_server_hs(&mut s, &w)
            })?;
            if c.is_handshaking() {
                let w = run.step(
                    Side::Server,
                    Phase::Handshake,
                    "write server Finished",
                    || drain_server(&mut s),
                )?;
                run.send(Dir::S2c, w.len(), false, "server Finished");
                run.step(Side::Client, Phase::Handshake, "server Finished", || {
                    feed_client(&mut c, &w)
                })?;
            }
        }
        if responded {
            // The tickets for the next connection follow the client's Finished.
            let t = run.step(Side::Server, Phase::Handshake, "write tickets", || {
                drain_server(&mut s)
            })?;
            run.send(Dir::S2c, t.len(), false, "tickets");
            run.step(Side::Client, Phase::Handshake, "tickets", || {
                feed_client(&mut c, &t)
            })?;
            let mut got = Vec::new();
            let _ = c.reader().read_to_end(&mut got);
            if got != rsp {
                bail!("client did not read the 0.5-RTT response");
            }
            return Ok(());
        }
        let w = run.step(Side::Client, Phase::Protect, "seal request", || {
            c.writer().write_all(&req)?;
            drain(&mut c)
        })?;
        run.send(Dir::C2s, w.len(), true, "request");
        let got = run.step(Side::Server, Phase::Protect, "open request", || {
            feed_server(&mut s, &w)
        })?;
        if got != req {
            bail!("server read {} bytes, not the request", got.len());
        }
        let t = run.step(Side::Server, Phase::Handshake, "write tickets", || {
            drain_server(&mut s)
        })?;
        run.send(Dir::S2c, t.len(), false, "tickets");
        let w = run.step(Side::Server, Phase::Protect, "seal response", || {
            s.writer().write_all(&rsp)?;
            drain_server(&mut s)
        })?;
        run.send(Dir::S2c, w.len(), true, "response");
        let mut all = t;
        all.extend_from_slice(&w);
        let got = run.step(Side::Client, Phase::Protect, "open response", || {
            feed_client(&mut c, &all)?;
            let mut got = Vec::new();
            let _ = c.reader().read_to_end(&mut got);
            Ok::<_, anyhow::Error>(got)
        })?;
        if got != rsp {
            bail!("client read {} bytes, not the response", got.len());
        }
        Ok(())
    }
}

fn drain(c: &mut ClientConnection) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if !c.wants_write() {
            break;
        }
        c.write_tls(&mut out)?;
    }
    Ok(out)
}

fn drain_server(s: &mut ServerConnection) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if !s.wants_write() {
            break;
        }
        s.write_tls(&mut out)?;
    }
    Ok(out)
}

fn feed_client(c: &mut ClientConnection, mut wire: &[u8]) -> Result<()> {
    for _ in 0..100_000 {
        if wire.is_empty() {
            return Ok(());
        }
        c.read_tls(&mut wire)?;
        c.process_new_packets().context("client")?;
    }
    Err(anyhow!("client did not consume its input"))
}

fn feed_server_hs(s: &mut ServerConnection, mut wire: &[u8]) -> Result<()> {
    for _ in 0..100_000 {
        if wire.is_empty() {
            return Ok(());
        }
        s.read_tls(&mut wire)?;
        s.process_new_packets().context("server")?;
    }
    Err(anyhow!("server did not consume its input"))
}

fn feed_server(s: &mut ServerConnection, mut wire: &[u8]) -> Result<Vec<u8>> {
    let mut got = Vec::new();
    for _ in 0..100_000 {
        if wire.is_empty() {
            break;
        }
        s.read_tls(&mut wire)?;
        s.process_new_packets().context("server")?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match s.reader().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
    }
    Ok(got)
}
