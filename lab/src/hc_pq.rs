//! HTTPCrypt's suite 2 (spec/hybrid.md: X25519 + ML-KEM-768 under the
//! X-Wing combiner) through `httpcrypt-proto`, both ends in this process:
//! a fresh hybrid request in the POST and GET forms, a request with a
//! reused client X25519 key, and a request resumed with a ticket issued to
//! a hybrid session.
//!
//! The client encapsulates as the Rust client does (`httpcrypt`'s, with
//! aws-lc-rs); everything else is the core's.
//!
//! The client learns the server's suite-2 certificate and ML-KEM key by
//! parsing the `OPTIONS {mount}/pq` answer the server formats, as a client
//! that discovers over HTTP does; that answer is the out-of-band discovery
//! size reported beside the exchange.

use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use httpcrypt_proto::client::pq::HybridKey;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::hybrid::cert::{parse_cert_list, HYBRID_CERT_LEN};
use httpcrypt_proto::hybrid::exchange::{self, HybridKeys, HybridRequest, HybridServerKey};
use httpcrypt_proto::hybrid::{HybridCert, KemSecret};
use httpcrypt_proto::inner::{self, Field, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::server::{self, Accept, ParsedOuter};
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{IdentityKey, IdentityPublic, KexSecret, Limits, Profile, SessionKey};
use rand_core::OsRng;

use crate::hc::{inner_request, nonce, now, split_head, COMPACT_PADS, HOST, PAD, RECORD};
use crate::meter::{Dir, Payload, Phase, Run, Side};

/// The suite-2 variants. `pq-cached` reuses the client's X25519 key pair
/// as the classical `cached` row does, but no cache answers it: the server
/// keeps hybrid sessions out of its session cache (spec/hybrid.md H3), so
/// the row costs what a fresh request costs the server. (The project's
/// client never reuses a key for a hybrid request; the row is there to show
/// that reuse saves the server nothing under suite 2.)
pub const VARIANTS: &[&str] = &[
    "pq-fresh-post",
    "pq-fresh-get",
    "pq-compact-post",
    "pq-cached",
    "pq-ticket",
];

/// What each variant's row means, for the report.
pub fn note(variant: &str) -> &'static str {
    match variant {
        "pq-fresh-post" => "fresh client X25519 key, fresh ML-KEM-768 encapsulation; body = ct_M || stream",
        "pq-fresh-get" => "as pq-fresh-post, ct_M || stream in the base64url query",
        "pq-compact-post" => {
            "as pq-fresh-post in request profile 2 (httpcrypt.md §4.5): what the Rust client sends \
             to a key whose certificate announces profile 2"
        }
        "pq-cached" => {
            "client reuses its X25519 key (and, as the cached row, checks no certificate); the \
             server has no cache for hybrid sessions, so it still runs X25519 + ML-KEM \
             decapsulation (no cache hit exists under suite 2)"
        }
        "pq-ticket" => "ticket issued to a hybrid session: the hybrid k, no ciphertext, no public-key operation",
        _ => "",
    }
}

/// A suite-2 server (one hybrid key, a ticket key) and a client that
/// learned its certificate and ML-KEM key from the `OPTIONS {mount}/pq`
/// answer.
pub struct Lab {
    identity: IdentityPublic,
    /// The client's copy of the certificate and ML-KEM key, paired as
    /// `httpcrypt::Client` holds them for encapsulating.
    key: HybridKey,
    keys: HybridKeys,
    /// The ticket key the server seals hybrid sessions' tickets with (the
    /// same key `keys` opens them with).
    ticket_key: TicketKey,
    /// The `OPTIONS {mount}/pq` answer body.
    options_answer: String,
    mount: Mount,
    limits: Limits,
    now: u64,
    /// The client's reused key pair (for `pq-cached`).
    client_key: KexSecret,
    /// A ticket of a hybrid session and its key (for `pq-ticket`).
    ticket: Option<(Ticket, SessionKey)>,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hc_pq::Lab")
    }
}

impl Lab {
    /// Keys, certificate, ticket key; the client parses the server's
    /// `OPTIONS {mount}/pq` answer; then one unmeasured exchange so that the
    /// client holds a ticket of a hybrid session.
    pub fn new() -> Result<Lab> {
        let now = now();
        let identity = IdentityKey::generate(&mut OsRng);
        let kex = KexSecret::generate(&mut OsRng);
        let kem = KemSecret::generate(&mut OsRng);
        let server_cert = HybridCert::sign(
            &identity,
            Profile::V1,
            1,
            (now - 60) as u32,
            (now + 7260) as u32,
            *kex.public(),
            kem.public().hash(),
        );
        let mut keys = HybridKeys::new();
        keys.add_key(
            HybridServerKey::new(kex, Arc::new(kem), server_cert).map_err(|e| anyhow!("{e}"))?,
        );
        let tk = TicketKey::generate(&mut OsRng);
        keys.add_ticket_key(TicketKey::new(tk.tid(), *tk.to_bytes()), now + 7260);
        let options_answer = keys.cert_list(now);
        let list = parse_cert_list(options_answer.as_bytes()).map_err(|e| anyhow!("{e}"))?;
        let cert = list
            .hybrid()
            .next()
            .cloned()
            .ok_or_else(|| anyhow!("no suite-2 certificate in the OPTIONS answer"))?;
        let ek = list
            .kem_for(&cert)
            .cloned()
            .ok_or_else(|| anyhow!("no key text for the certificate in the OPTIONS answer"))?;
        let key = HybridKey::new(cert, Arc::new(ek)).map_err(|e| anyhow!("{e}"))?;
        let mut lab = Lab {
            identity: identity.public(),
            key,
            keys,
            ticket_key: tk,
            options_answer,
            mount: Mount::new("/hc").map_err(|e| anyhow!("{e}"))?,
            limits: Limits::default(),
            now,
            client_key: KexSecret::generate(&mut OsRng),
            ticket: None,
        };
        let mut warm = Run::unmarked();
        lab.exchange(
            "pq-fresh-post",
            &Payload {
                req_body: 0,
                rsp_body: 0,
            },
            &mut warm,
        )?;
        Ok(lab)
    }

    /// The `OPTIONS {mount}/pq` answer body a client fetches before its
    /// first hybrid request: the certificate's text line and the ML-KEM
    /// key's `hck1` line.
    pub fn discovery_len(&self) -> usize {
        self.options_answer.len()
    }

    /// The certificate's binary size and the key text's length.
    pub fn discovery_parts(&self) -> (usize, usize) {
        (HYBRID_CERT_LEN, self.key.kem.to_text().len())
    }

    /// One exchange of `variant` carrying `p`.
    pub fn exchange(&mut self, variant: &str, p: &Payload, run: &mut Run) -> Result<()> {
        let now = self.now;
        // Request profile 1 except in `pq-compact-post` (spec/hybrid.md H3:
        // the client uses the profile the certificate announces).
        let compact = variant == "pq-compact-post";
        let (head, body) = inner_request(p, now, compact);
        let form = if variant == "pq-fresh-get" {
            Form::Get
        } else {
            Form::Post
        };
        if variant.starts_with("pq-fresh") || compact {
            let (cert, ek, id) = (&self.key.cert, &*self.key.kem, &self.identity);
            run.step(
                Side::Client,
                Phase::Auth,
                "verify suite-2 certificate (Ed25519) and its key text",
                || {
                    cert.verify(id)?;
                    ek.check(cert)
                },
            )
            .map_err(|e| anyhow!("{e}"))?;
        }
        let n0 = if compact {
            Profile::Compact
        } else {
            Profile::V1
        }
        .request_n0(now, &mut OsRng);
        // Pads fixed at the mean, as in the classical rows.
        let pads = if compact { COMPACT_PADS } else { (PAD, PAD) };
        let fresh_key;
        let (cert, key) = (&self.key.cert, &self.key);
        let prepared = match variant {
            "pq-fresh-post" | "pq-fresh-get" | "pq-compact-post" | "pq-cached" => {
                let client = if variant == "pq-cached" {
                    &self.client_key
                } else {
                    fresh_key = run.step(
                        Side::Client,
                        Phase::KeyAgreement,
                        "generate X25519 key",
                        || KexSecret::generate(&mut OsRng),
                    );
                    &fresh_key
                };
                run.step(
                    Side::Client,
                    Phase::KeyAgreement,
                    "derive k (ML-KEM-768 encapsulation + X25519 + SHA3-256 combiner)",
                    || -> Result<PreparedRequest> {
                        // The Rust client's encapsulation (aws-lc-rs).
                        let e = httpcrypt::client::encapsulate(key, client)?;
                        let h = PreparedRequest::from(HybridRequest::from_encapsulation(
                            cert, e, n0, pads.0, pads.1,
                        )?);
                        Ok(if compact { h.compact(HOST)? } else { h })
                    },
                )?
            }
            "pq-ticket" => {
                let (t, k) = self.ticket.as_ref().ok_or_else(|| anyhow!("no ticket"))?;
                run.step(
                    Side::Client,
                    Phase::KeyAgreement,
                    "take k from the ticket",
                    || {
                        PreparedRequest::for_key(
                            &cert.kex_public,
                            ClientCredential::Ticket(t, k),
                            n0,
                            PAD,
                            PAD,
                        )
                    },
                )
                .map_err(|e| anyhow!("{e}"))?
            }
            other => bail!("unknown HTTPCrypt suite-2 variant {other}"),
        };
        let mount = &self.mount;
        let wire = run
            .step(Side::Client, Phase::Protect, "seal request", || {
                let stream = prepared.seal_message(&head, &body, RECORD)?;
                Ok::<_, httpcrypt_proto::Error>(prepared.encode_outer(form, mount, HOST, &stream))
            })
            .map_err(|e| anyhow!("{e}"))?;
        if form == Form::Get && !wire.starts_with(b"GET ") {
            bail!("the GET form did not come out as GET");
        }
        run.send(Dir::C2s, wire.len(), true, "request");

        // Server: parse and route, then the hybrid agreement (X25519 and
        // ML-KEM decapsulation) or the ticket; no session cache.
        let (keys, limits) = (&self.keys, &self.limits);
        let accepted = run
            .step(
                Side::Server,
                Phase::KeyAgreement,
                "accept: parse, cookie, k (X25519 + ML-KEM-768 decapsulation, or ticket)",
                || {
                    let o = ParsedOuter::parse(&wire).ok_or(httpcrypt_proto::Error::Truncated)?;
                    let a = exchange::accept(keys, mount, &o.as_request(), &o.body, limits, now)?;
                    Ok::<_, httpcrypt_proto::Error>((a, o.body))
                },
            )
            .map_err(|e| anyhow!("{e}"))?;
        let (Accept::Request(accepted), outer_body) = accepted else {
            bail!("server did not take the request as HTTPCrypt");
        };
        if accepted.kid != self.key.cert.kid() {
            bail!("server accepted the request under another key than the suite-2 one");
        }
        let (ihead, ibody) = run
            .step(Side::Server, Phase::Protect, "open request", || {
                exchange::open_request(&accepted, &outer_body, limits)
            })
            .map_err(|e| anyhow!("{e}"))?;
        if ihead.target != "/api" || ibody.len() != p.req_body {
            bail!("server decrypted something else");
        }
        // As the classical rows: the first answer of the session on a
        // connection carries a fresh ticket, sealing the hybrid k and the
        // suite-2 key ID, valid as long as the certificate.
        let (tk, expiry) = (&self.ticket_key, self.key.cert.not_after);
        let ticket = run.step(Side::Server, Phase::KeyAgreement, "issue ticket", || {
            tk.seal(
                &TicketContents {
                    key: accepted.session_key().clone(),
                    kid: accepted.kid,
                    expiry,
                },
                nonce(),
            )
        });
        let rsp_body = vec![b'r'; p.rsp_body];
        let outer_rsp = run
            .step(Side::Server, Phase::Protect, "seal response", || {
                let mut rsp = ResponseHead::new(200, "OK");
                rsp.fields.push(Field::new("Ticket", ticket.to_field()));
                let mut sealed = Vec::new();
                server::seal_response(
                    accepted.into_response_key(),
                    nonce(),
                    &rsp,
                    &rsp_body,
                    now,
                    RECORD,
                    &mut sealed,
                )?;
                let mut out = Vec::with_capacity(sealed.len() + 128);
                outer::encode_response_head(sealed.len(), &mut out);
                out.extend_from_slice(&sealed);
                Ok::<_, httpcrypt_proto::Error>(out)
            })
            .map_err(|e| anyhow!("{e}"))?;
        run.send(Dir::S2c, outer_rsp.len(), true, "response");

        // Client: open, keep the ticket with the hybrid session's key.
        let split = split_head(&outer_rsp)?;
        let (rhead, rbody) = run
            .step(Side::Client, Phase::Protect, "open response", || {
                prepared.open_response(&outer_rsp[split..], limits)
            })
            .map_err(|e| anyhow!("{e}"))?;
        if rhead.status != 200 || rbody.len() != p.rsp_body {
            bail!("client opened something else");
        }
        let t = inner::field(&rhead.fields, "ticket").ok_or_else(|| anyhow!("no ticket"))?;
        let t = Ticket::from_field(t).map_err(|e| anyhow!("{e}"))?;
        self.ticket = Some((t, prepared.session_key().clone()));
        Ok(())
    }
}
