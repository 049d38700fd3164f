//! The in-process half of the protocol lab: each protocol's real
//! implementation driven through one exchange, with its flights and the CPU
//! of every step recorded by [`meter::Run`].

pub mod hc;
pub mod hc_pq;
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
    v.extend(hc_pq::VARIANTS.iter().map(|x| ("httpcrypt", *x)));
    v.extend(tls::VARIANTS.iter().map(|x| ("tls-rustls", *x)));
    v.extend(ohttp::VARIANTS.iter().map(|x| ("ohttp", *x)));
    v.extend(noise::VARIANTS.iter().map(|x| ("noise", *x)));
    v
}

/// One protocol's set-up, ready for exchanges.
#[derive(Debug)]
pub enum Lab {
    /// HTTPCrypt (any variant; the variant is passed per exchange).
    Hc(Box<hc::Lab>, String),
    /// HTTPCrypt suite 2 (hybrid X25519 + ML-KEM-768; `pq-*` variants).
    HcPq(Box<hc_pq::Lab>, String),
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
            "httpcrypt" if hc_pq::VARIANTS.contains(&variant) => {
                Lab::HcPq(Box::new(hc_pq::Lab::new()?), variant.to_string())
            }
            "httpcrypt" => {
                if !hc::VARIANTS.contains(&variant) {
                    bail!("unknown HTTPCrypt variant {variant}");
                }
                Lab::Hc(Box::new(hc::Lab::new()?), variant.to_string())
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
            Lab::HcPq(l, v) => l.exchange(v, p, run),
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
        let p = Payload {
            req_body: n,
            rsp_body: n,
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use meter::Dir;

    fn one(proto: &str, variant: &str) -> Run {
        let mut lab = Lab::new(proto, variant).expect("set-up");
        let mut run = Run::unmarked();
        lab.exchange(
            &Payload {
                req_body: 100,
                rsp_body: 100,
            },
            &mut run,
        )
        .expect("exchange");
        run
    }

    #[test]
    fn httpcrypt_request_is_the_sum_of_its_fields() {
        let p = Payload {
            req_body: 100,
            rsp_body: 100,
        };
        let run = one("httpcrypt", "fresh-post");
        let fields: usize = hc::post_field_sizes(&p, 1_800_000_000)
            .iter()
            .map(|(_, n)| n)
            .sum();
        assert_eq!(run.bytes(Dir::C2s), fields);
        // Spec §4.1: 32 + 14 + 43 base64url characters, one record of 20 bytes.
        assert_eq!(run.rtts_first_byte(), Some(1));
        assert_eq!(run.flights.len(), 2);
    }

    /// Profile 2 (spec §4.5) leaves out the inner `Host` and `Date` (in the
    /// base64url query of a GET, or the POST body here), shortens the pads,
    /// adds the `2` of the nonce segment; the answer drops 8 bytes of nonce
    /// and the inner `Date` and `Content-Length`.
    #[test]
    fn compact_profile_is_smaller_by_the_fields_it_leaves_out() {
        let v1 = one("httpcrypt", "fresh-post");
        let v2 = one("httpcrypt", "compact-post");
        let host = "Host: example.com\r\n".len();
        let date = "Date: Sun, 17 Jan 2027 08:00:00 GMT\r\n".len();
        let pads = 2 * 8 - (3 + 4);
        assert_eq!(
            v1.bytes(Dir::C2s) - v2.bytes(Dir::C2s),
            host + date + pads - 1
        );
        // Both answers carry a ticket; the compact one has no inner Date or
        // Content-Length (one record) and a 16-byte random instead of 24.
        let cl = "Content-Length: 100\r\n".len();
        assert_eq!(v1.bytes(Dir::S2c) - v2.bytes(Dir::S2c), date + cl + 8);
        assert_eq!(v2.rtts_first_byte(), Some(1));
        let t = one("httpcrypt", "compact-ticket");
        assert_eq!(t.rtts_first_byte(), Some(1));
    }

    #[test]
    fn httpcrypt_message_overhead_grows_by_one_record_per_16_kib() {
        let mut lab = Lab::new("httpcrypt", "fresh-post").expect("set-up");
        let (a, _) = lab.message_overhead(999).expect("999");
        let (b, _) = lab.message_overhead(1000).expect("1000");
        // The inner Content-Length grows by a digit, as the plain one does.
        assert_eq!(b, a);
        let (c, _) = lab.message_overhead(64 * 1024).expect("64k");
        assert!(
            c > a + 3 * 20,
            "a 64 KiB body needs at least four 20-byte record overheads"
        );
    }

    /// Suite 2 (spec/hybrid.md H3): a fresh request is the v1 request with
    /// the 1,088-byte ML-KEM ciphertext in front of the stream (and so one
    /// more Content-Length digit here); its answer is the v1 answer. A
    /// ticket of a hybrid session is sent exactly as a v1 ticket, and a
    /// reused client key changes nothing on the wire.
    #[test]
    fn hybrid_rows_differ_from_v1_by_the_ciphertext_only() {
        let v1 = one("httpcrypt", "fresh-post");
        let pq = one("httpcrypt", "pq-fresh-post");
        let digits = |n: usize| n.to_string().len();
        // The v1 body: record overhead, inner head, inner body (spec §4.1).
        let v1_body: usize = hc::post_field_sizes(
            &Payload {
                req_body: 100,
                rsp_body: 100,
            },
            1_800_000_000,
        )
        .iter()
        .filter(|(f, _)| {
            f.starts_with("request: record")
                || f.starts_with("request: inner")
                || *f == "request: body"
        })
        .map(|(_, n)| n)
        .sum();
        let pq_body = v1_body + 1088;
        assert_eq!(
            pq.bytes(Dir::C2s),
            v1.bytes(Dir::C2s) + 1088 + digits(pq_body) - digits(v1_body)
        );
        assert_eq!(pq.bytes(Dir::S2c), v1.bytes(Dir::S2c));
        assert_eq!(pq.rtts_first_byte(), Some(1));
        let get = one("httpcrypt", "pq-fresh-get");
        assert_eq!(get.rtts_first_byte(), Some(1));
        // base64url of ciphertext and stream in the query, no body.
        assert!(get.bytes(Dir::C2s) > pq.bytes(Dir::C2s) + 1088 / 3);
        let cached = one("httpcrypt", "pq-cached");
        assert_eq!(cached.bytes(Dir::C2s), pq.bytes(Dir::C2s));
        // Profile 2 as profile 2's suite-1 row, plus the ciphertext.
        let c = one("httpcrypt", "pq-compact-post");
        let v1c = one("httpcrypt", "compact-post");
        let c_len = c.bytes(Dir::C2s) as i64 - v1c.bytes(Dir::C2s) as i64;
        assert!((1088..=1090).contains(&c_len), "{c_len}");
        assert_eq!(c.bytes(Dir::S2c), v1c.bytes(Dir::S2c));
        let t = one("httpcrypt", "pq-ticket");
        let v1t = one("httpcrypt", "ticket");
        assert_eq!(t.bytes(Dir::C2s), v1t.bytes(Dir::C2s));
        assert_eq!(t.bytes(Dir::S2c), v1t.bytes(Dir::S2c));
        assert_eq!(t.rtts_first_byte(), Some(1));
    }

    #[test]
    fn tls_counts_are_plausible() {
        let full = one("tls-rustls", "tls13-full");
        let total = full.bytes(Dir::C2s) + full.bytes(Dir::S2c);
        // A ClientHello, a certificate of a few hundred bytes, two tickets.
        assert!((1000..5000).contains(&total), "{total} bytes");
        assert_eq!(full.rtts_first_byte(), Some(2));
        assert_eq!(one("tls-rustls", "tls12-full").rtts_first_byte(), Some(3));
        assert_eq!(one("tls-rustls", "tls13-0rtt").rtts_first_byte(), Some(1));
        let pq = one("tls-rustls", "tls13-full-pq");
        // An ML-KEM-768 key share (1,184 bytes) and its ciphertext (1,088).
        assert!(pq.bytes(Dir::C2s) > full.bytes(Dir::C2s) + 1184);
        // (less a few bytes: the two ECDSA signatures' DER lengths differ by one or two)
        assert!(pq.bytes(Dir::S2c) > full.bytes(Dir::S2c) + 1080);
    }

    #[test]
    fn tls_record_overhead_matches_the_record_layer() {
        let mut lab = tls::Lab::new("tls13-full").expect("set-up");
        // TLS 1.3: 5-byte header, 1-byte content type, 16-byte tag per record.
        assert_eq!(lab.message_overhead(100).expect("100"), 22);
        assert_eq!(lab.message_overhead(16 * 1024 + 1).expect("16k+1"), 44);
    }

    #[test]
    fn noise_overhead_formula_matches_snow() {
        let mut lab = noise::Lab::new("nk").expect("set-up");
        for n in [0, 100, 65519, 65520, 200_000] {
            assert_eq!(
                lab.transport_bytes(n).expect("transport"),
                n + noise::Lab::message_overhead(n),
                "{n}"
            );
        }
    }

    #[test]
    fn round_trips_count_client_flight_groups() {
        let mut r = Run::unmarked();
        r.send(Dir::C2s, 10, false, "a");
        r.send(Dir::S2c, 10, false, "b");
        r.send(Dir::C2s, 10, false, "c");
        r.send(Dir::C2s, 10, true, "d");
        assert_eq!(r.rtts_first_byte(), None);
        r.send(Dir::S2c, 10, false, "e");
        r.send(Dir::S2c, 10, true, "f");
        assert_eq!(r.rtts_first_byte(), Some(2));
        r.send(Dir::S2c, 0, true, "empty flights are not flights");
        assert_eq!(r.flights.len(), 6);
    }
}
