//! HTTPCrypt through `httpcrypt-proto`, both ends in this process: fresh
//! client key (POST and GET forms), a session-cache hit, a ticket, and the
//! rspamd profile (spec §4, §7, §10).

use anyhow::{anyhow, bail, Result};
use httpcrypt_proto::cache::SessionCache;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::rspamd;
use httpcrypt_proto::server::{self, Accept, Agreement, ParsedOuter, ServerKey, ServerKeys};
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey};
use httpcrypt_proto::{
    replay, IdentityKey, IdentityPublic, KexSecret, KeyCert, Limits, SessionKey,
};
use rand_core::{OsRng, RngCore};

use crate::meter::{Dir, Payload, Phase, Run, Side};

/// Record size the server and client seal with (the CLI's default).
pub const RECORD: usize = 16 * 1024;
pub(crate) const HOST: &str = "example.com";
/// Cookie padding: 8 characters, the mean of the client's uniform 0-16.
pub const PAD: &str = "AbCdEfGh";
/// Profile-2 cookie pads: 3 and 4 characters, the mean (3.5 each) of the
/// client's uniform 0-7.
pub(crate) const COMPACT_PADS: (&str, &str) = ("AbC", "dEfG");

/// The HTTPCrypt variants (`compact-*`: request profile 2, spec §4.5).
pub const VARIANTS: &[&str] = &[
    "fresh-post",
    "fresh-get",
    "cached",
    "ticket",
    "compact-post",
    "compact-ticket",
    "rspamd",
];

/// A server with one key, a ticket key and a session cache, and a client
/// that knows its certificate.
pub struct Lab {
    identity: IdentityPublic,
    cert: KeyCert,
    keys: ServerKeys,
    cache: SessionCache,
    mount: Mount,
    limits: Limits,
    now: u64,
    /// The client's reused key pair (for `cached`).
    client_key: KexSecret,
    /// A ticket and its key from an earlier exchange (for `ticket`).
    ticket: Option<(Ticket, SessionKey)>,
    rspamd_keyring: rspamd::server::Keyring,
    rspamd_public: httpcrypt_proto::KexPublic,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hc::Lab")
    }
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1_800_000_000)
}

pub(crate) fn nonce() -> [u8; 24] {
    let mut n = [0u8; 24];
    OsRng.fill_bytes(&mut n);
    n
}

pub(crate) fn split_head(wire: &[u8]) -> Result<usize> {
    wire.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .ok_or_else(|| anyhow!("no end of head"))
}

/// The inner request the client seals: the common payload's request with the
/// `Date` field v1 requires (spec §8); profile 2 sends neither `Host` nor
/// `Date` inside (spec §4.5).
pub(crate) fn inner_request(p: &Payload, now: u64, compact: bool) -> (RequestHead, Vec<u8>) {
    let mut head = RequestHead::new("POST", "/api");
    if !compact {
        head.fields.push(Field::new("Host", HOST));
    }
    head.fields
        .push(Field::new("Content-Length", p.req_body.to_string()));
    if !compact {
        head.fields
            .push(Field::new("Date", replay::format_date(now)));
    }
    (head, vec![b'q'; p.req_body])
}

impl Lab {
    /// Keys, certificate, ticket key; then one unmeasured exchange so that
    /// the cache holds the client's key and the client holds a ticket.
    pub fn new() -> Result<Lab> {
        let now = now();
        let identity = IdentityKey::generate(&mut OsRng);
        let kex = KexSecret::generate(&mut OsRng);
        let cert = KeyCert::sign(
            &identity,
            1,
            (now - 60) as u32,
            (now + 7260) as u32,
            *kex.public(),
        );
        let mut keys = ServerKeys::new();
        keys.add_key(kex, cert.clone());
        keys.add_ticket_key(TicketKey::generate(&mut OsRng), now + 7260);
        let rk = KexSecret::generate(&mut OsRng);
        let rspamd_public = *rk.public();
        let rspamd_keyring = [rk].into_iter().collect();
        let mut lab = Lab {
            identity: identity.public(),
            cert,
            keys,
            cache: SessionCache::new(1024, [7; 16]),
            mount: Mount::new("/hc").map_err(|e| anyhow!("{e}"))?,
            limits: Limits::default(),
            now,
            client_key: KexSecret::generate(&mut OsRng),
            ticket: None,
            rspamd_keyring,
            rspamd_public,
        };
        let mut warm = Run::unmarked();
        lab.exchange(
            "cached",
            &Payload {
                req_body: 0,
                rsp_body: 0,
            },
            &mut warm,
        )?;
        Ok(lab)
    }

    /// The size of the certificate a client fetches before its first request
    /// (binary form; the DNS TXT text form is longer).
    pub fn cert_len(&self) -> usize {
        self.cert.to_text().len()
    }

    /// One exchange of `variant` carrying `p`.
    pub fn exchange(&mut self, variant: &str, p: &Payload, run: &mut Run) -> Result<()> {
        if variant == "rspamd" {
            return self.rspamd(p, run);
        }
        let now = self.now;
        let compact = variant.starts_with("compact");
        let (head, body) = inner_request(p, now, compact);
        let form = if variant == "fresh-get" {
            Form::Get
        } else {
            Form::Post
        };
        // Client: check the certificate (first use of it), agree, seal.
        if variant.starts_with("fresh") || variant == "compact-post" {
            let (cert, id) = (&self.cert, &self.identity);
            run.step(
                Side::Client,
                Phase::Auth,
                "verify certificate (Ed25519)",
                || cert.verify(id),
            )
            .map_err(|e| anyhow!("{e}"))?;
        }
        let n0 = if compact {
            Profile::Compact
        } else {
            Profile::V1
        }
        .request_n0(now, &mut OsRng);
        // The client draws 0-16 pad characters for each (profile 2: 0-7);
        // the lab fixes them at the mean so that byte counts repeat exactly.
        let pads = if compact {
            (COMPACT_PADS.0.to_string(), COMPACT_PADS.1.to_string())
        } else {
            (PAD.to_string(), PAD.to_string())
        };
        let fresh_key;
        let credential = match variant {
            "fresh-post" | "fresh-get" | "compact-post" => {
                fresh_key = run.step(
                    Side::Client,
                    Phase::KeyAgreement,
                    "generate X25519 key",
                    || KexSecret::generate(&mut OsRng),
                );
                ClientCredential::Key(&fresh_key)
            }
            "cached" => ClientCredential::Key(&self.client_key),
            "ticket" | "compact-ticket" => {
                let (t, k) = self.ticket.as_ref().ok_or_else(|| anyhow!("no ticket"))?;
                ClientCredential::Ticket(t, k)
            }
            other => bail!("unknown HTTPCrypt variant {other}"),
        };
        let cert = &self.cert;
        let label = if variant.ends_with("ticket") {
            "take k from the ticket"
        } else {
            "derive k (X25519 + HChaCha20)"
        };
        let prepared = run
            .step(Side::Client, Phase::KeyAgreement, label, || {
                let p = PreparedRequest::new(cert, credential, n0, &pads.0, &pads.1)?;
                if compact {
                    p.compact(HOST)
                } else {
                    Ok(p)
                }
            })
            .map_err(|e| anyhow!("{e}"))?;
        let mount = &self.mount;
        let wire = run
            .step(Side::Client, Phase::Protect, "seal request", || {
                let stream = prepared.seal_message(&head, &body, RECORD)?;
                Ok::<_, httpcrypt_proto::Error>(prepared.encode_outer(form, mount, HOST, &stream))
            })
            .map_err(|e| anyhow!("{e}"))?;
        run.send(Dir::C2s, wire.len(), true, "request");

        // Server: parse and route, agree (or hit the cache, or open the ticket).
        let (keys, limits, cache) = (&self.keys, &self.limits, &mut self.cache);
        let accepted = run
            .step(
                Side::Server,
                Phase::KeyAgreement,
                "accept: parse, cookie, k (X25519, cache or ticket)",
                || {
                    let o = ParsedOuter::parse(&wire).ok_or(httpcrypt_proto::Error::Truncated)?;
                    let a = server::accept(
                        keys,
                        mount,
                        &o.as_request(),
                        limits,
                        now,
                        &mut CacheFirst(&mut *cache),
                    )?;
                    Ok::<_, httpcrypt_proto::Error>((a, o.body))
                },
            )
            .map_err(|e| anyhow!("{e}"))?;
        let (Accept::Request(accepted), outer_body) = accepted else {
            bail!("server did not take the request as HTTPCrypt");
        };
        let (ihead, ibody) = run
            .step(Side::Server, Phase::Protect, "open request", || {
                server::open_request(&accepted, &outer_body, limits)
            })
            .map_err(|e| anyhow!("{e}"))?;
        if ihead.target != "/api" || ibody.len() != p.req_body {
            bail!("server decrypted something else");
        }
        // The exchange is the first of its session on a connection, whose
        // answer carries a fresh ticket (the `serve` default, spec §7.2 D29;
        // later answers of the session on that connection carry none).
        let ticket = run.step(Side::Server, Phase::KeyAgreement, "issue ticket", || {
            let tk = keys.ticket_key(now)?;
            Some(tk.seal(
                &TicketContents {
                    key: accepted.session_key().clone(),
                    kid: accepted.kid,
                    expiry: (now + 3600) as u32,
                },
                nonce(),
            ))
        });
        let rsp_body = vec![b'r'; p.rsp_body];
        let outer_rsp = run
            .step(Side::Server, Phase::Protect, "seal response", || {
                let mut rsp = ResponseHead::new(200, "OK");
                if let Some(t) = &ticket {
                    rsp.fields.push(Field::new("Ticket", t.to_field()));
                }
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

        // Client: open, keep the ticket.
        let split = split_head(&outer_rsp)?;
        let (rhead, rbody) = run
            .step(Side::Client, Phase::Protect, "open response", || {
                prepared.open_response(&outer_rsp[split..], limits)
            })
            .map_err(|e| anyhow!("{e}"))?;
        if rhead.status != 200 || rbody.len() != p.rsp_body {
            bail!("client opened something else");
        }
        if let Some(t) = inner::field(&rhead.fields, "ticket") {
            let t = Ticket::from_field(t).map_err(|e| anyhow!("{e}"))?;
            self.ticket = Some((t, prepared.session_key().clone()));
        }
        Ok(())
    }

    /// rspamd's format: `Key` header, `nonce || tag || box` body, one
    /// X25519 per request on both sides, no tickets, no rotation.
    fn rspamd(&mut self, p: &Payload, run: &mut Run) -> Result<()> {
        let inner = p.request();
        let public = self.rspamd_public;
        let mut wire = Vec::new();
        let client = run
            .step(
                Side::Client,
                Phase::Handshake,
                "X25519 + seal request",
                || {
                    rspamd::client::Client::seal_request(
                        &mut OsRng, &public, HOST, &inner, &mut wire,
                    )
                },
            )
            .map_err(|e| anyhow!("{e}"))?;
        run.send(Dir::C2s, wire.len(), true, "request");
        let keyring = &self.rspamd_keyring;
        let rsp = p.response();
        let out = run
            .step(
                Side::Server,
                Phase::Handshake,
                "X25519 + open request + seal response",
                || {
                    let mut storage = [httparse::EMPTY_HEADER; 32];
                    let mut req = httparse::Request::new(&mut storage);
                    let Ok(httparse::Status::Complete(n)) = req.parse(&wire) else {
                        return Err(httpcrypt_proto::Error::Truncated);
                    };
                    let key = req
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("key"))
                        .ok_or(httpcrypt_proto::Error::UnknownKey)?;
                    let key = rspamd::keys::KeyHeader::parse(key.value)?
                        .ok_or(httpcrypt_proto::Error::UnknownKey)?;
                    let (opened, responder) = keyring.open_request(&key, &wire[n..])?;
                    if opened.len() != inner.len() {
                        return Err(httpcrypt_proto::Error::Integrity);
                    }
                    // Head and sealed body.
                    let mut out = Vec::new();
                    responder.seal_response(&mut OsRng, &rsp, &mut out)?;
                    Ok(out)
                },
            )
            .map_err(|e| anyhow!("{e}"))?;
        run.send(Dir::S2c, out.len(), true, "response");
        let split = split_head(&out)?;
        let opened = run
            .step(Side::Client, Phase::Protect, "open response", || {
                client.open_response(&out[split..])
            })
            .map_err(|e| anyhow!("{e}"))?;
        if opened != p.response() {
            bail!("rspamd client opened something else");
        }
        Ok(())
    }
}

/// Sizes of the fields of a fresh POST request and its response, from the
/// spec (§3, §4.1, §4.2, §7.2), for the size-breakdown table and the test
/// that checks the measured total against them.
pub fn post_field_sizes(p: &Payload, now: u64) -> Vec<(&'static str, usize)> {
    let (head, _) = inner_request(p, now, false);
    let mut inner_req = Vec::new();
    head.encode(&mut inner_req);
    let inner_req_len = inner_req.len() + p.req_body;
    let records = |n: usize| n.div_ceil(RECORD).max(1);
    let stream_req = inner_req_len + records(inner_req_len) * 20;
    let req_head_fixed = format!(
        "POST /hc/{} HTTP/1.1\r\nHost: {HOST}\r\nCookie: {}={}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        "n".repeat(32),
        "i".repeat(14),
        "p".repeat(43),
        stream_req
    )
    .len();
    vec![
        (
            "request: outer HTTP head (method, mount, Host, field names, framing)",
            req_head_fixed - 32 - 14 - 43,
        ),
        ("request: nonce n0 (32 b64u chars in the path)", 32),
        ("request: key ID (14 b64u chars, cookie name)", 14),
        (
            "request: client X25519 public key (43 b64u chars, cookie value)",
            43,
        ),
        (
            "request: cookie padding (two pads of 8, the mean of 0-16)",
            2 * PAD.len(),
        ),
        (
            "request: record headers + tags (20 B per record)",
            records(inner_req_len) * 20,
        ),
        ("request: inner head (with Date)", inner_req.len()),
        ("request: body", p.req_body),
    ]
}

/// The session cache in front of the X25519, as the layer keeps it.
struct CacheFirst<'a>(&'a mut SessionCache);

impl Agreement for CacheFirst<'_> {
    fn cached(
        &mut self,
        sk: &ServerKey,
        peer: &httpcrypt_proto::KexPublic,
    ) -> Option<httpcrypt_proto::SessionKey> {
        self.0.get(&sk.cert.kex_public.kid(), peer)
    }

    fn agree(
        &mut self,
        sk: &ServerKey,
        peer: &httpcrypt_proto::KexPublic,
    ) -> httpcrypt_proto::Result<httpcrypt_proto::SessionKey> {
        let k = sk.secret.session_key(peer)?;
        self.0.insert(&sk.cert.kex_public.kid(), peer, k.clone());
        Ok(k)
    }
}
