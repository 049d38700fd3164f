//! Suite-2 (hybrid, spec/hybrid.md) HTTPCrypt requests straight from the
//! sans-IO core, the way `httpcrypt::Client` builds them with `--pq`: the
//! server's suite-2 certificate and ML-KEM-768 encapsulation key learnt once
//! from `OPTIONS {mount}/pq`, then for every request a fresh X25519 key and
//! a fresh encapsulation (the client's, `httpcrypt::client::encapsulate`,
//! into a `HybridRequest`), the v1 layout (inner `Host` and
//! `Date`, random cookie pads), the 1,088-byte ciphertext in front of the
//! sealed stream in the GET query when the request line fits, else in a POST
//! body. In ticket mode the first answer's ticket (of the hybrid session)
//! keys every later request, which then carries no ciphertext.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use httpcrypt_proto::client::pq::HybridKey;
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::hybrid::cert::parse_cert_list;
use httpcrypt_proto::hybrid::HybridRequest;
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::stream::{self, Opener};
use httpcrypt_proto::ticket::{Ticket, TICKET_FIELD};
use httpcrypt_proto::{KexSecret, Limits, Profile, SessionKey};
use rand_core::OsRng;

use crate::hc::unix_now;
use crate::http1::{self, Buffers, Reply};
use crate::sink::SealedSink;

/// How the hybrid client keys its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PqMode {
    /// A fresh X25519 key and a fresh ML-KEM encapsulation per request:
    /// one X25519 and one ML-KEM-768 decapsulation on the server.
    Fresh,
    /// The ticket of the first (hybrid) answer, then ticket cookies.
    Ticket,
}

/// Shared client state for one run.
#[derive(Debug)]
pub struct HcPqClient {
    key: HybridKey,
    mount: Mount,
    host: String,
    mode: PqMode,
    /// Also the GET form for a fresh hybrid request where it fits (its
    /// query's base64url costs a third more bytes than a POST body).
    get: bool,
    limits: Limits,
    ticket: Mutex<Option<Arc<(Ticket, SessionKey)>>>,
}

/// What is needed to open one response.
#[derive(Debug)]
pub struct PqPending {
    key: SessionKey,
    n0: [u8; 24],
    profile: Profile,
}

impl PqPending {
    /// The session key the request was sealed under.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The request's nonce.
    pub fn n0(&self) -> &[u8; 24] {
        &self.n0
    }
}

impl HcPqClient {
    /// A client for the server whose suite-2 list is `list` (the body of
    /// `OPTIONS {mount}/pq`): the valid suite-2 certificate with the
    /// highest serial, and the encapsulation key it signs.
    pub fn new(list: &[u8], mount: &str, host: &str, mode: PqMode, get: bool) -> Result<Self> {
        let list = parse_cert_list(list).context("suite-2 certificate list")?;
        let now = unix_now();
        let cert = list
            .hybrid()
            .filter(|c| c.is_valid_at(now))
            .max_by_key(|c| (c.serial, c.not_before))
            .context("no valid suite-2 certificate in the list")?;
        let kem = list
            .kem_for(cert)
            .context("the list lacks the encapsulation key of its certificate")?;
        Ok(HcPqClient {
            key: HybridKey::new(cert.clone(), Arc::new(kem.clone()))?,
            mount: Mount::new(mount)?,
            host: host.to_string(),
            mode,
            get,
            limits: Limits::default(),
            ticket: Mutex::new(None),
        })
    }

    /// Seals a GET for `path` and writes the outer request into `out`: GET
    /// form when it fits (and POST was not asked for), else POST.
    pub fn request(&self, path: &str, close: bool, out: &mut Vec<u8>) -> Result<PqPending> {
        let now = unix_now();
        // The profile the certificate announces (spec/hybrid.md H3), as the
        // Rust client does: profile 2 puts the time in the nonce and binds
        // the Host instead of sending inner `Host` and `Date`.
        let p = self.key.cert.profile;
        let n0 = p.request_n0(now, &mut OsRng);
        let name_pad = outer::random_pad_for(p, &mut OsRng);
        let value_pad = outer::random_pad_for(p, &mut OsRng);
        let ticket = match self.mode {
            PqMode::Ticket => self
                .ticket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            PqMode::Fresh => None,
        };
        let mut prepared = match ticket {
            Some(t) => PreparedRequest::for_key(
                &self.key.cert.kex_public,
                ClientCredential::Ticket(&t.0, &t.1),
                n0,
                &name_pad,
                &value_pad,
            )?,
            None => {
                // spec/hybrid.md H3: a fresh X25519 key for every hybrid request.
                // The encapsulation is `httpcrypt::Client`'s (aws-lc-rs).
                let client = KexSecret::generate(&mut OsRng);
                let e = httpcrypt::client::encapsulate(&self.key, &client)?;
                PreparedRequest::from(HybridRequest::from_encapsulation(
                    &self.key.cert,
                    e,
                    n0,
                    &name_pad,
                    &value_pad,
                )?)
            }
        };
        let mut head = RequestHead::new("GET", path);
        match p {
            Profile::V1 => {
                head.fields.push(Field::new("Host", self.host.as_str()));
                head.fields.push(Field::new(
                    "Date",
                    httpcrypt_proto::replay::format_date(now),
                ));
            }
            Profile::Compact => prepared = prepared.compact(&self.host)?,
        }
        let mut plain = Vec::with_capacity(128);
        head.encode(&mut plain);
        let mut sealed = Vec::with_capacity(plain.len() + 32);
        stream::seal_all(prepared.sealer(), &plain, plain.len(), &mut sealed)?;
        // POST for a fresh hybrid request unless the GET form was asked
        // for, as the Rust client's default (`hybrid_get_form`); a resumed
        // request carries no ciphertext and takes the GET form when it fits.
        let get_ok = self.get || !prepared.is_hybrid();
        let form = if get_ok && prepared.fits_get_form(&self.mount, plain.len()) {
            Form::Get
        } else {
            Form::Post
        };
        *out = prepared.encode_outer(form, &self.mount, &self.host, &sealed);
        if close {
            // Outer hop-by-hop field, after the head's last field.
            let end = out
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .context("outer request head")?;
            out.splice(end + 2..end + 2, b"Connection: close\r\n".iter().copied());
        }
        Ok(PqPending {
            key: prepared.session_key().clone(),
            n0: *prepared.n0(),
            profile: p,
        })
    }

    /// Sends `req`, sealed for `pending`, on `io` and opens the answer,
    /// which must be an inner 200. Returns the reply and the length of the
    /// outer (sealed) body.
    pub async fn exchange<S>(
        &self,
        io: &mut S,
        req: &[u8],
        bufs: &mut Buffers,
        pending: PqPending,
    ) -> Result<(Reply, u64)>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let client = self;
        let key = pending.key.clone();
        let opener = Opener::response_for(
            &pending.key,
            pending.n0,
            pending.profile,
            self.limits.record_limit(),
        );
        let mut sink = SealedSink::new(opener, self.limits, |h| client.took_head(h, &key));
        let reply = http1::exchange(io, req, bufs, &mut sink).await?;
        Ok((reply, sink.ok_len()?))
    }

    /// Keeps the first ticket an answer carries, with the session key it
    /// resumes (ticket mode).
    fn took_head(&self, h: &ResponseHead, key: &SessionKey) -> Result<()> {
        if self.mode == PqMode::Ticket {
            if let Some(v) = inner::field(&h.fields, TICKET_FIELD) {
                let mut slot = self.ticket.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_none() {
                    *slot = Some(Arc::new((Ticket::from_field(v)?, key.clone())));
                }
            }
        }
        Ok(())
    }
}
