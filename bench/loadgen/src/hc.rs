//! HTTPCrypt requests straight from the sans-IO core (`httpcrypt-proto`),
//! the way `httpcrypt::Client` builds them (GET form, random cookie pads,
//! inner `Host` and `Date`; with a version-2 certificate profile 2: the
//! time in the nonce and the `Host` bound, spec §4.5), without its hyper
//! client: the generator's one HTTP/1.1 code path carries the bytes, so the
//! client-side machinery is the same for every protocol.

use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use httpcrypt_proto::client::{ShortPolicy, ShortUse};
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::stream::{self, Opener, Sealer};
use httpcrypt_proto::ticket::{AnyTicket, ShortTicket, ASK_SHORT, TICKET_FIELD};
use httpcrypt_proto::{KexPublic, KexSecret, KeyCert, KeyId, Limits, SessionKey};
use rand_core::OsRng;

use crate::http1::{self, Buffers, Reply};
use crate::sink::SealedSink;

/// How the client keys its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMode {
    /// A fresh X25519 key pair per request: one X25519 on the server.
    Fresh,
    /// One key pair for the whole run: the server's session cache hits.
    Reuse,
    /// Short tickets (spec §7.3) as `httpcrypt::Client` uses them by
    /// default: the first request asks, later ones present the ticket held
    /// and ask again on its last use under [`ShortPolicy::default`].
    Ticket,
}

/// Shared client state for one run.
#[derive(Debug)]
pub struct HcClient {
    server: KexPublic,
    kid: KeyId,
    profile: Profile,
    mount: Mount,
    host: String,
    mode: KeyMode,
    limits: Limits,
    reused: Option<(KexSecret, SessionKey)>,
    ticket: Mutex<Option<HeldShort>>,
    /// Whether a request may ask for a new short ticket (see
    /// [`HcClient::stop_asking`]).
    asks: std::sync::atomic::AtomicBool,
}

/// The short ticket held, and its use so far.
#[derive(Debug)]
struct HeldShort {
    ticket: Arc<ShortTicket>,
    used: ShortUse,
}

/// What is needed to open one response.
#[derive(Debug)]
pub struct Pending {
    key: SessionKey,
    n0: [u8; 24],
}

impl Pending {
    /// The session key the request was sealed under.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The request's nonce.
    pub fn n0(&self) -> &[u8; 24] {
        &self.n0
    }
}

impl HcClient {
    /// A client for the server whose certificate list is `certs` (the body
    /// of `OPTIONS {mount}/`).
    pub fn new(certs: &[u8], mount: &str, host: &str, mode: KeyMode) -> Result<Self> {
        let certs = httpcrypt_proto::cert::parse_cert_list(certs).context("certificate list")?;
        let now = unix_now();
        let cert: &KeyCert = httpcrypt_proto::cert::choose(&certs, now, None)?;
        let server = cert.kex_public;
        let reused = match mode {
            KeyMode::Reuse => {
                let secret = KexSecret::generate(&mut OsRng);
                let k = secret.session_key(&server)?;
                Some((secret, k))
            }
            _ => None,
        };
        Ok(HcClient {
            kid: server.kid(),
            profile: cert.profile,
            server,
            mount: Mount::new(mount)?,
            host: host.to_string(),
            mode,
            limits: Limits::default(),
            reused,
            ticket: Mutex::new(None),
            asks: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// From now on, requests present the short ticket held without asking
    /// for a new one: for requests sealed ahead of time, whose answers are
    /// never read here, so a new ticket could not be taken. They are the
    /// client's requests between two asks (15 of every 16 by default).
    pub fn stop_asking(&self) {
        self.asks.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Seals a GET for `path` and writes the outer request into `out`.
    pub fn request(&self, path: &str, close: bool, out: &mut Vec<u8>) -> Result<Pending> {
        let p = self.profile;
        let n0 = p.request_n0(unix_now(), &mut OsRng);
        let name_pad = outer::random_pad_for(p, &mut OsRng);
        let value_pad = outer::random_pad_for(p, &mut OsRng);
        // The client's rule (`HostState::asks_ticket`, `ShortUse`): ask when
        // no ticket is held, on the held ticket's last use, or once it is
        // old; a request that asks starts the count again.
        let (ticket, ask) = match self.mode {
            KeyMode::Ticket => {
                let policy = ShortPolicy::default();
                let now = unix_now();
                let mut slot = self.ticket.lock().unwrap_or_else(|p| p.into_inner());
                match slot.as_mut() {
                    Some(h) => {
                        let ask = h.used.asks(&policy, now)
                            && self.asks.load(std::sync::atomic::Ordering::Relaxed);
                        h.used.used(now);
                        if ask {
                            h.used.asked(now);
                        }
                        (Some(h.ticket.clone()), ask)
                    }
                    None => (None, true),
                }
            }
            _ => (None, false),
        };
        let (key, cookie) = if let Some(t) = ticket {
            let cookie = outer::format_cookie(&t.tid(), t.h(), &name_pad, &value_pad)?;
            (t.key().clone(), cookie)
        } else if let Some((secret, k)) = &self.reused {
            let cookie =
                outer::format_cookie(&self.kid, &secret.public().0, &name_pad, &value_pad)?;
            (k.clone(), cookie)
        } else {
            let secret = KexSecret::generate(&mut OsRng);
            let k = secret.session_key(&self.server)?;
            let cookie =
                outer::format_cookie(&self.kid, &secret.public().0, &name_pad, &value_pad)?;
            (k, cookie)
        };
        let mut head = RequestHead::new("GET", path);
        let sealer = match p {
            Profile::V1 => {
                head.fields.push(Field::new("Host", self.host.as_str()));
                head.fields.push(Field::new(
                    "Date",
                    httpcrypt_proto::replay::format_date(unix_now()),
                ));
                Sealer::request(&key, n0)
            }
            Profile::Compact => Sealer::request_bound(&key, n0, self.host.as_bytes())?,
        };
        if ask {
            head.fields.push(Field::new(TICKET_FIELD, ASK_SHORT));
        }
        let mut plain = Vec::with_capacity(128);
        head.encode(&mut plain);
        let mut sealed = Vec::with_capacity(plain.len() + 32);
        stream::seal_all(sealer, &plain, plain.len(), &mut sealed)?;
        if !httpcrypt_proto::client::fits_get_form_for(p, &self.mount, sealed.len()) {
            bail!("request does not fit the GET form");
        }
        let target = self.mount.get_target_for(p, &n0, &sealed);
        out.clear();
        outer::encode_request_head(Form::Get, &target, &self.host, &cookie, 0, out);
        if close {
            // Outer hop-by-hop field; the inner message never carries it.
            out.truncate(out.len() - 2);
            out.extend_from_slice(b"Connection: close\r\n\r\n");
        }
        Ok(Pending { key, n0 })
    }

    /// Sends `req`, sealed for `pending`, on `io` and opens the answer,
    /// which must be an inner 200. Returns the reply and the length of the
    /// outer (sealed) body.
    pub async fn exchange<S>(
        &self,
        io: &mut S,
        req: &[u8],
        bufs: &mut Buffers,
        pending: Pending,
    ) -> Result<(Reply, u64)>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let client = self;
        let opener = Opener::response_for(
            &pending.key,
            pending.n0,
            self.profile,
            self.limits.record_limit(),
        );
        let mut sink = SealedSink::new(opener, self.limits, |h| client.took_head(h));
        let reply = http1::exchange(io, req, bufs, &mut sink).await?;
        Ok((reply, sink.ok_len()?))
    }

    /// Keeps the short ticket an answer carries (ticket mode).
    fn took_head(&self, h: &ResponseHead) -> Result<()> {
        if self.mode == KeyMode::Ticket {
            if let Some(v) = inner::field(&h.fields, TICKET_FIELD) {
                let ticket = match AnyTicket::from_field(v)? {
                    AnyTicket::Short(t) => t,
                    AnyTicket::V1(_) => bail!(
                        "the server answered a short-ticket ask with a v1 ticket: it predates \
                         spec §7.3, which the generator's ticket mode needs"
                    ),
                };
                let mut slot = self.ticket.lock().unwrap_or_else(|p| p.into_inner());
                *slot = Some(HeldShort {
                    ticket: Arc::new(ticket),
                    used: ShortUse::default(),
                });
            }
        }
        Ok(())
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
