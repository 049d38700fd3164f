//! The in-process half of the protocol lab: each protocol's real
//! implementation driven through one exchange, with its flights and the CPU
//! of every step recorded by [`meter::Run`].

pub mod hc;
pub mod meter;
pub mod noise;
pub mod ohttp;
pub mod tls;

use anyhow::{bail, Result};

use meter::{Payload, Run};

/// Every in-process protocol and its variants.
pub fn catalogue() -> Vec<(&'static str, &'static str)> {
    let mut v = Vec::new();
    v.extend(hc::VARIANTS.iter().map(|x| ("httpcrypt", *x)));
    v.extend(tls::VARIANTS.iter().map(|x| ("tls-rustls", *x)));
    v.extend(ohttp::VARIANTS.iter().map(|x| ("ohttp", *x)));
    v.extend(noise::VARIANTS.iter().map(|x| ("noise", *x)));
    v
}

/// One protocol's set-up, ready for exchanges.
#[derive(Debug)]
pub enum Lab {
    /// HTTPCrypt (any variant; the variant is passed per exchange).
    Hc(hc::Lab, String),
    /// TLS via rustls.
    Tls(tls::Lab),
    /// Noise via snow.
    Noise(noise::Lab),
    /// Oblivious HTTP.
    Ohttp(ohttp::Lab),
}

impl Lab {
    /// Set-up for one protocol and variant.
    pub fn new(proto: &str, variant: &str) -> Result<Lab> {
        Ok(match proto {
            "httpcrypt" => {
                if !hc::VARIANTS.contains(&variant) {
                    bail!("unknown HTTPCrypt variant {variant}");
                }
                Lab::Hc(hc::Lab::new()?, variant.to_string())
            }
            "tls-rustls" => Lab::Tls(tls::Lab::new(variant)?),
            "noise" => Lab::Noise(noise::Lab::new(variant)?),
            "ohttp" => Lab::Ohttp(ohttp::Lab::new(variant)?),
            other => bail!("unknown protocol {other}"),
        })
    }

    /// One exchange carrying `p`, recorded in `run`.
    pub fn exchange(&mut self, p: &Payload, run: &mut Run) -> Result<()> {
        match self {
            Lab::Hc(l, v) => l.exchange(v, p, run),
            Lab::Tls(l) => l.exchange(p, run),
            Lab::Noise(l) => l.exchange(p, run),
            Lab::Ohttp(l) => l.exchange(p, run),
        }
    }

    /// Bytes above the plaintext HTTP/1.1 message for one request of `n`
    /// body bytes: (client→server, server→client). For session protocols
    /// this is inside an established session (data records only); for
    /// message protocols, the whole message.
    pub fn message_overhead(&mut self, n: usize) -> Result<(usize, usize)> {
        let p = Payload { req_body: n, rsp_body: n };
        match self {
            Lab::Tls(l) => {
                let o = l.message_overhead(p.request().len())?;
                Ok((o, o))
            }
            Lab::Noise(_) => {
                let o = noise::Lab::message_overhead(p.request().len());
                Ok((o, noise::Lab::message_overhead(p.response().len())))
            }
            _ => {
                let mut run = Run::unmarked();
                self.exchange(&p, &mut run)?;
                let c2s = run.bytes(meter::Dir::C2s);
                let s2c = run.bytes(meter::Dir::S2c);
                Ok((
                    c2s.saturating_sub(p.request().len()),
                    s2c.saturating_sub(p.response().len()),
                ))
            }
        }
    }
}
