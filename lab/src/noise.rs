//! Noise with `snow` (its default RustCrypto resolver: x25519-dalek,
//! chacha20poly1305, blake2; snow has no aws-lc-rs resolver). NK: the client
//! knows the server's static key, one message each way carries the request
//! and the response. IK: the client also sends its own static key
//! (encrypted), so the server learns who it is. Each Noise message travels
//! with the 2-byte length prefix the Noise spec suggests for TCP.

use anyhow::{bail, Result};
use snow::{Builder, Keypair};

use crate::meter::{Dir, Payload, Phase, Run, Side};

/// The Noise variants.
pub const VARIANTS: &[&str] = &["nk", "ik"];
const MAX_MSG: usize = 65535;
const TAG: usize = 16;

/// Static keys for one pattern.
pub struct Lab {
    pattern: &'static str,
    server: Keypair,
    client: Keypair,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "noise::Lab({})", self.pattern)
    }
}

fn params(pattern: &str) -> Result<snow::params::NoiseParams> {
    Ok(format!("Noise_{pattern}_25519_ChaChaPoly_BLAKE2s").parse()?)
}

impl Lab {
    /// Static keys for `variant` (`nk` or `ik`).
    pub fn new(variant: &str) -> Result<Lab> {
        let pattern = match variant {
            "nk" => "NK",
            "ik" => "IK",
            other => bail!("unknown Noise variant {other}"),
        };
        let b = Builder::new(params(pattern)?);
        Ok(Lab {
            pattern,
            server: b.generate_keypair()?,
            client: Builder::new(params(pattern)?).generate_keypair()?,
        })
    }

    /// One handshake whose two messages carry the request and the response.
    pub fn exchange(&mut self, p: &Payload, run: &mut Run) -> Result<()> {
        let req = p.request();
        let rsp = p.response();
        if req.len() + 200 > MAX_MSG || rsp.len() + 200 > MAX_MSG {
            bail!("a Noise handshake message holds at most 64 KiB");
        }
        let pattern = self.pattern;
        let (server_pub, client_priv) = (&self.server.public, &self.client.private);
        let mut hs = run.step(
            Side::Client,
            Phase::KeyAgreement,
            "initiator set-up",
            || {
                let b = Builder::new(params(pattern)?).remote_public_key(server_pub);
                let b = if pattern == "IK" {
                    b.local_private_key(client_priv)
                } else {
                    b
                };
                Ok::<_, anyhow::Error>(b.build_initiator()?)
            },
        )?;
        let mut m1 = vec![0u8; MAX_MSG];
        let n1 = run.step(
            Side::Client,
            Phase::Handshake,
            "message 1 (e, es[, s, ss]) + request",
            || hs.write_message(&req, &mut m1),
        )?;
        run.send(Dir::C2s, n1 + 2, true, "message 1");
        let server_priv = &self.server.private;
        let mut rs = run.step(
            Side::Server,
            Phase::KeyAgreement,
            "responder set-up",
            || {
                Builder::new(params(pattern)?)
                    .local_private_key(server_priv)
                    .build_responder()
                    .map_err(anyhow::Error::from)
            },
        )?;
        let mut got = vec![0u8; MAX_MSG];
        let g = run.step(Side::Server, Phase::Handshake, "read message 1", || {
            rs.read_message(&m1[..n1], &mut got)
        })?;
        if got[..g] != req[..] {
            bail!("Noise: server read something else");
        }
        let mut m2 = vec![0u8; MAX_MSG];
        let n2 = run.step(
            Side::Server,
            Phase::Handshake,
            "message 2 (e, ee, se) + response",
            || rs.write_message(&rsp, &mut m2),
        )?;
        run.send(Dir::S2c, n2 + 2, true, "message 2");
        let g = run.step(Side::Client, Phase::Handshake, "read message 2", || {
            hs.read_message(&m2[..n2], &mut got)
        })?;
        if got[..g] != rsp[..] {
            bail!("Noise: client read something else");
        }
        Ok(())
    }

    /// Bytes of `n` application bytes in transport messages (chunks of at
    /// most 65,535 bytes with their tags and length prefixes), minus `n`.
    pub fn message_overhead(n: usize) -> usize {
        let chunk = MAX_MSG - TAG;
        let msgs = n.div_ceil(chunk).max(1);
        msgs * (TAG + 2)
    }

    /// Seals `n` bytes in transport messages for real and returns the wire
    /// size, to check [`Lab::message_overhead`].
    pub fn transport_bytes(&mut self, n: usize) -> Result<usize> {
        let mut run = Run::unmarked();
        let p = Payload {
            req_body: 0,
            rsp_body: 0,
        };
        // A fresh handshake, then the client's transport state.
        let b = Builder::new(params(self.pattern)?).remote_public_key(&self.server.public);
        let b = if self.pattern == "IK" {
            b.local_private_key(&self.client.private)
        } else {
            b
        };
        let mut hs = b.build_initiator()?;
        let mut rs = Builder::new(params(self.pattern)?)
            .local_private_key(&self.server.private)
            .build_responder()?;
        let mut m = vec![0u8; MAX_MSG];
        let mut g = vec![0u8; MAX_MSG];
        let n1 = hs.write_message(&p.request(), &mut m)?;
        rs.read_message(&m[..n1], &mut g)?;
        let n2 = rs.write_message(&p.response(), &mut m)?;
        hs.read_message(&m[..n2], &mut g)?;
        run.send(Dir::C2s, n1, false, "");
        let mut tc = hs.into_transport_mode()?;
        let data = vec![b'm'; n];
        let mut total = 0;
        let chunks: Vec<&[u8]> = if n == 0 {
            vec![&data[..]]
        } else {
            data.chunks(MAX_MSG - TAG).collect()
        };
        for c in chunks {
            total += tc.write_message(c, &mut m)? + 2;
        }
        Ok(total)
    }
}
