//! One call of the [`Client`]: its attempts (as proto's [`Attempts`]
//! decides), and each attempt's steps: choose the credential, seal the
//! request (GET form when it fits, else a streamed POST), send it, and read
//! the answer: a refusal (unauthenticated hints only), or the opened inner
//! response, whose ticket and token the client keeps for itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Empty, Full};
use httpcrypt_proto::admission::{self, AdmitCookie};
use httpcrypt_proto::client::pq::parse_hybrid_certs;
use httpcrypt_proto::client::{
    is_own_field, judge_refusal, needs_problem_body, request_head, Attempts, ClientCredential,
    HeadPlan, Pq, PreparedRequest, Refusal, Retry, ServerKey, Suite, PROBLEM_LIMIT,
};
use httpcrypt_proto::hybrid::HybridRequest;
use httpcrypt_proto::inner::{self, ResponseHead};
use httpcrypt_proto::outer;
use httpcrypt_proto::profile::Profile;
use httpcrypt_proto::{token, KexSecret};
use hyper::body::Incoming;
use rand_core::{OsRng, RngCore};

use super::config::{KeyPolicy, OuterExchange};
use super::discovery::KeySource;
use super::read::read_limited;
use super::{Client, OuterBody, ResponseBody};
use crate::body::{OpenBody, SealBody};
use crate::clock::unix_now;
use crate::error::{BoxError, Error};
use crate::nonce::ThreadRng;

/// What one attempt came to.
enum Outcome {
    /// The authenticated answer, for the caller.
    Done(Response<ResponseBody>),
    /// No answer for the caller; another attempt may help.
    Again(Retry),
}

/// A sealed request ready to send, and what opening its answer needs.
struct Sealed {
    outer: Request<OuterBody>,
    prepared: PreparedRequest,
    /// The key agreement the request's session key came from.
    suite: Suite,
    /// The request presented a short ticket (spec §7.3).
    short: bool,
}

impl Client {
    /// Sends a request whose body is in memory; retries once on
    /// `unknown-key` and once on `stale`. `req`'s URI is the inner target,
    /// absolute (`http://host[:port]/path?query`).
    pub async fn send(&self, req: Request<Bytes>) -> Result<Response<ResponseBody>, Error> {
        let (parts, body) = req.into_parts();
        let mut attempts = Attempts::new(parts.method.as_str());
        loop {
            let n = attempts.begin();
            let b = Full::new(body.clone())
                .map_err(|never| match never {})
                .boxed_unsync();
            let r = Request::from_parts(parts.clone(), b);
            let why = match self.attempt(r, n, attempts.own_date()).await {
                Ok(Outcome::Done(rsp)) => return Ok(rsp),
                Ok(Outcome::Again(why)) => why,
                // A pooled connection the peer (often a proxy) closed after
                // its last answer: seal the request afresh on a new one.
                Err(e) if closed_before_answer(&e) && attempts.after_closed() => continue,
                Err(e) => return Err(e),
            };
            match attempts.after(why) {
                Some(secs) => {
                    if let Retry::Busy(_) = why {
                        tokio::time::sleep(Duration::from_secs(secs)).await;
                    }
                }
                None => return Err(why.error().into()),
            }
        }
    }

    /// Sends a request with a streaming body. No retry is possible once the
    /// body has been consumed, so `unknown-key` and `stale` are errors
    /// (certificates and clock offset are refreshed for the next request).
    pub async fn send_streaming<B>(&self, req: Request<B>) -> Result<Response<ResponseBody>, Error>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let req = req.map(|b| b.map_err(Into::into).boxed_unsync());
        let mut attempts = Attempts::once();
        match self.attempt(req, attempts.begin(), false).await? {
            Outcome::Done(rsp) => Ok(rsp),
            Outcome::Again(why) => Err(why.error().into()),
        }
    }

    /// One attempt, number `attempt` of its call. `own_date`: after a
    /// `stale` answer the client's corrected clock replaces any `Date` the
    /// caller set.
    async fn attempt(
        &self,
        req: Request<OuterBody>,
        attempt: u32,
        own_date: bool,
    ) -> Result<Outcome, Error> {
        let (parts, body) = req.into_parts();
        let scheme = parts.uri.scheme_str().unwrap_or("http").to_string();
        if scheme != "http" {
            return Err(Error::Config(format!(
                "HTTPCrypt runs over plain http, not {scheme}"
            )));
        }
        let authority = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| Error::Config("the request URI needs a host".into()))?;
        let server_key = self.current_key(&scheme, &authority).await?;
        let Sealed {
            outer,
            prepared,
            suite,
            short,
        } = self
            .seal(&parts, body, &scheme, &authority, &server_key, own_date)
            .await?;
        let sent_method = outer.method().clone();
        let sent_uri = outer.uri().clone();
        let sent_headers = outer.headers().clone();

        let rsp = self.http.request(outer).await?;
        let (rparts, rbody) = rsp.into_parts();
        if rparts.status != StatusCode::OK {
            return self.refused(&authority, rparts.status, rbody, short).await;
        }
        let (inner_head, body) = match self
            .open(&parts, &authority, &prepared, suite, rbody)
            .await?
        {
            Ok(opened) => opened,
            Err(why) => return Ok(Outcome::Again(why)),
        };
        let mut out = Response::new(body);
        *out.status_mut() = StatusCode::from_u16(inner_head.status)
            .map_err(|_| httpcrypt_proto::Error::MalformedInner)?;
        // The ticket and the token are for this client (kept when the head
        // was opened), not for its caller: what the caller gets is the
        // application's answer.
        for f in inner_head.fields.iter().filter(|f| !is_own_field(f)) {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(f.name.as_bytes()),
                HeaderValue::from_bytes(&f.value),
            ) {
                out.headers_mut().append(n, v);
            }
        }
        out.extensions_mut().insert(OuterExchange {
            method: sent_method,
            uri: sent_uri,
            request_headers: sent_headers,
            status: rparts.status,
            response_headers: rparts.headers,
            attempts: attempt,
            suite,
        });
        Ok(Outcome::Done(out))
    }

    /// Seals the caller's request for `authority` under `server_key`: the
    /// credential (a ticket, a fresh hybrid encapsulation for a suite-2 key,
    /// or a key pair per the policy), the profile the key announces (spec
    /// §4.5), the inner head, the admission echo, and the outer request in
    /// the GET form when it fits, else a POST (a hybrid request's ML-KEM
    /// ciphertext first in either).
    async fn seal(
        &self,
        parts: &Parts,
        body: OuterBody,
        scheme: &str,
        authority: &str,
        server_key: &ServerKey,
        own_date: bool,
    ) -> Result<Sealed, Error> {
        let now = unix_now();
        let config = &self.config;
        // A one-shot client asks for no ticket: it declines (below).
        let short_policy = config
            .short_tickets
            .filter(|_| config.tickets && !config.one_shot);
        let (ticket, ask_ticket, reused, corrected, admit) = self.hosts.with(authority, |h| {
            // A short ticket first (spec §7.3), counted as used; then a v1 one.
            let short = short_policy.and_then(|_| {
                h.state
                    .short_ticket_for(server_key)
                    .map(|(t, suite)| (Held::Short(t.clone()), suite))
            });
            let ask_ticket = short_policy.is_some_and(|p| h.state.asks_ticket(&p, now));
            if short.is_some() {
                h.state.used_short_ticket(now);
            }
            if ask_ticket {
                h.state.asked_ticket(now);
            }
            let ticket = if !config.tickets || config.one_shot {
                None
            } else if short.is_some() {
                short
            } else {
                h.state
                    .ticket_for(server_key)
                    .map(|((t, k), suite)| (Held::V1(t.clone(), k.clone()), suite))
            };
            if config.key_policy == KeyPolicy::ReusePerHost && h.key.is_none() {
                h.key = Some(Arc::new(KexSecret::generate(&mut OsRng)));
            }
            let admit = h.state.admit_cookie(now, ticket.is_some());
            (
                ticket,
                ask_ticket,
                h.key.clone(),
                h.state.corrected(now),
                admit,
            )
        });
        // Profile 2 (spec §4.5) when the key announces it: the corrected
        // time goes into the nonce, the Host into record 0's associated data.
        // Suite-2 keys announce it the same way (spec/hybrid.md H3).
        let profile = if config.compact {
            server_key.profile()
        } else {
            Profile::V1
        };
        let n0 = profile.request_n0(corrected, &mut ThreadRng);
        let name_pad = outer::random_pad_for(profile, &mut ThreadRng);
        let value_pad = outer::random_pad_for(profile, &mut ThreadRng);
        let (mut prepared, suite) = match (&ticket, server_key) {
            (Some((held, suite)), _) => (
                PreparedRequest::for_key(
                    server_key.kex_public(),
                    match held {
                        Held::V1(t, k) => ClientCredential::Ticket(t, k),
                        Held::Short(t) => ClientCredential::ShortTicket(t),
                    },
                    n0,
                    &name_pad,
                    &value_pad,
                )?,
                *suite,
            ),
            (None, ServerKey::Hybrid(hk)) => {
                // spec/hybrid.md H3: a fresh X25519 key for every hybrid
                // request, whatever the key policy.
                let client = KexSecret::generate(&mut OsRng);
                let e = super::pq::encapsulate(hk, &client)?;
                let h = HybridRequest::from_encapsulation(&hk.cert, e, n0, &name_pad, &value_pad)?;
                (PreparedRequest::from(h), Suite::Hybrid)
            }
            (None, ServerKey::Classical(k)) => {
                let fresh;
                let key: &KexSecret = match &reused {
                    Some(r) => r,
                    None => {
                        fresh = KexSecret::generate(&mut OsRng);
                        &fresh
                    }
                };
                let p = PreparedRequest::for_key(
                    &k.kex_public,
                    ClientCredential::Key(key),
                    n0,
                    &name_pad,
                    &value_pad,
                )?;
                (p, Suite::Classical)
            }
        };
        if profile == Profile::Compact {
            prepared = prepared.compact(authority)?;
        }

        let method = parts.method.as_str();
        let token = if token::is_safe(method) {
            None
        } else {
            self.hosts.with(authority, |h| {
                h.state
                    .token_for(prepared.session_key())
                    .map(<[u8]>::to_vec)
            })
        };
        let exact = body.size_hint().exact();
        let head = request_head(
            method,
            parts.uri.path_and_query().map_or("/", |p| p.as_str()),
            parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_bytes())),
            &HeadPlan {
                authority,
                profile,
                now: corrected,
                own_date,
                body_len: exact,
                token: token.as_deref(),
                ask_ticket,
                // A token-required retry presents the ticket of the answer
                // that refused (§8.4), so only safe requests decline.
                decline_ticket: config.one_shot && token::is_safe(method),
            },
            &mut ThreadRng,
        );
        let mut head_bytes = Vec::new();
        head.encode(&mut head_bytes);

        let host_value =
            HeaderValue::from_str(authority).map_err(|e| Error::Config(e.to_string()))?;
        let cookie = match admit {
            Some(c) => HeaderValue::from_str(&format!(
                "{}; {}",
                prepared.cookie(),
                admit_pair(c, *prepared.n0()).await?
            )),
            None => HeaderValue::from_str(prepared.cookie()),
        }
        .map_err(|e| Error::Config(e.to_string()))?;
        // A fresh hybrid request goes as a POST unless asked otherwise: in
        // the GET form its ML-KEM ciphertext would cost a third more as
        // base64url (spec/hybrid.md H3).
        let use_get = config.get_form
            && (config.hybrid_get_form || !prepared.is_hybrid())
            && exact.is_some_and(|l| {
                prepared.fits_get_form(&config.mount, head_bytes.len().saturating_add(l as usize))
            });
        let mut outer_req = if use_get {
            let plain = read_limited(body, 4096).await?;
            let mut all = head_bytes;
            all.extend_from_slice(&plain);
            let mut stream = Vec::new();
            httpcrypt_proto::stream::seal_all(
                prepared.sealer(),
                &all,
                all.len().max(1),
                &mut stream,
            )?;
            let path = prepared.get_target(&config.mount, &stream);
            let mut r = Request::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
            *r.method_mut() = Method::GET;
            *r.uri_mut() = format!("{scheme}://{authority}{path}")
                .parse()
                .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
            r
        } else {
            let sealed = SealBody::new(
                prepared.sealer(),
                prepared.stream_prefix().to_vec(),
                head_bytes,
                body,
                config.record_size,
            );
            let mut r = Request::new(sealed.boxed_unsync());
            *r.method_mut() = Method::POST;
            let path = prepared.nonce_path(&config.mount);
            *r.uri_mut() = format!("{scheme}://{authority}{path}")
                .parse()
                .map_err(|e: http::uri::InvalidUri| Error::Config(e.to_string()))?;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(outer::OCTET_STREAM),
            );
            r
        };
        let h = outer_req.headers_mut();
        h.insert(header::HOST, host_value);
        h.insert(header::COOKIE, cookie);
        if let Some(pc) = config
            .provenance
            .as_ref()
            .and_then(|p| p.certificate(authority, now))
        {
            if let Ok(v) = HeaderValue::from_str(&pc) {
                h.insert(httpcrypt_proto::provenance::FIELD, v);
            }
        }
        Ok(Sealed {
            outer: outer_req,
            prepared,
            suite,
            short: matches!(ticket, Some((Held::Short(_), _))),
        })
    }

    /// A non-200 outer answer: unauthenticated, so only hints for another
    /// attempt (new keys, an admission cookie, a wait), never data.
    async fn refused(
        &self,
        authority: &str,
        status: StatusCode,
        body: Incoming,
        short: bool,
    ) -> Result<Outcome, Error> {
        let body = read_limited(body, PROBLEM_LIMIT).await.unwrap_or_default();
        let refusal = judge_refusal(status.as_u16(), &body);
        if short && refusal.drops_short_ticket(status.as_u16()) {
            self.hosts.with(authority, |h| h.state.drop_short_ticket());
            return Ok(Outcome::Again(Retry::ShortTicket));
        }
        match refusal {
            Refusal::UnknownKey(certs) => {
                let identity = self.identity_for(authority);
                let require = self.config.require_identity;
                let now = unix_now();
                let pq = self.config.pq;
                let hybrid = match pq {
                    Pq::Off => Vec::new(),
                    _ => parse_hybrid_certs(&body),
                };
                self.hosts.with(authority, |h| {
                    let settled = h.state.took_unknown_key_hybrid(
                        pq,
                        &hybrid,
                        identity.as_ref(),
                        require,
                        now,
                    );
                    if settled
                        || h.state
                            .took_unknown_key(certs, identity.as_ref(), require, now)
                    {
                        h.source = Some(KeySource::UnknownKey);
                    }
                });
                // So do the discovery's cached answers (spec §6.4.1).
                if let Some(d) = &self.config.discovery {
                    d.forget(authority);
                }
                Ok(Outcome::Again(Retry::UnknownKey))
            }
            Refusal::Admission(c) => {
                let at = unix_now();
                self.hosts
                    .with(authority, |h| h.state.took_admission(c, at));
                Ok(Outcome::Again(Retry::Admission))
            }
            Refusal::Busy(secs) => Ok(Outcome::Again(Retry::Busy(secs))),
            Refusal::Other(type_uri) => Err(Error::Refused {
                status: status.as_u16(),
                type_uri,
            }),
        }
    }

    /// Opens a 200 answer: the inner head (its ticket and token kept for
    /// this client) and the verified body; or, for a `stale` or
    /// `token-required` problem, why to try again.
    async fn open(
        &self,
        parts: &Parts,
        authority: &str,
        prepared: &PreparedRequest,
        suite: Suite,
        body: Incoming,
    ) -> Result<Result<(ResponseHead, ResponseBody), Retry>, Error> {
        let method = parts.method.as_str();
        let opener = prepared.response_opener(&self.config.limits);
        let mut opened = OpenBody::new(
            opener,
            // The answer to HEAD has no body (erratum E2).
            inner::ResponseDecoder::answering(method, self.config.limits),
            Some(body),
            Vec::new(),
        )?;
        let head: ResponseHead = opened.head().await?;
        if head.fields.iter().any(is_own_field) {
            self.hosts.with(authority, |h| {
                h.state
                    .took_head_in(&head.fields, prepared.session_key(), suite)
            });
        }
        let body: ResponseBody = opened.boxed_unsync();
        if !needs_problem_body(&head) {
            return Ok(Ok((head, body)));
        }
        // Read the (small, authenticated) problem to tell stale from replay.
        let bytes = read_limited(body, PROBLEM_LIMIT).await?;
        let now = unix_now();
        if let Some(why) = self.hosts.with(authority, |h| {
            h.state.took_problem(method, &head, &bytes, now)
        }) {
            return Ok(Err(why));
        }
        let body = Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync();
        Ok(Ok((head, body)))
    }
}

/// The `hc1-admit` pair for request nonce `n0`: the puzzle is solved off
/// the async workers (it can take tens of milliseconds at high difficulty).
async fn admit_pair(cookie: AdmitCookie, n0: [u8; 24]) -> Result<String, Error> {
    let d = cookie.difficulty();
    if d > admission::MAX_DIFFICULTY {
        return Err(httpcrypt_proto::Error::BadAdmission.into());
    }
    let start = OsRng.next_u64();
    // 2^(d+6) tries fail with probability about e^-64.
    let tries = 1u64 << (u32::from(d) + 6).min(40);
    let solution = if d == 0 {
        Some([0u8; admission::SOLUTION_LEN])
    } else {
        tokio::task::spawn_blocking(move || admission::solve_puzzle(&cookie, &n0, start, tries))
            .await
            .map_err(|e| Error::Config(e.to_string()))?
    };
    let solution = solution.ok_or(httpcrypt_proto::Error::BadAdmission)?;
    Ok(format!(
        "{}={}",
        admission::ADMIT_COOKIE,
        admission::format_echo(&cookie, &solution)
    ))
}

/// Whether a transport error is a connection that closed before any answer.
fn closed_before_answer(e: &Error) -> bool {
    let Error::Transport(b) = e else { return false };
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(b.as_ref());
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        // A pooled connection the server closed while idle (its header
        // timeout) answers the request written on it with a reset.
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cur = err.source();
    }
    false
}

/// The ticket a request presents: a v1 ticket with its session key, or a
/// short ticket (spec §7.3), which carries its own.
enum Held {
    V1(httpcrypt_proto::ticket::Ticket, httpcrypt_proto::SessionKey),
    Short(httpcrypt_proto::ticket::ShortTicket),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connection error")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn transport(kind: std::io::ErrorKind) -> Error {
        Error::Transport(Box::new(Wrapped(std::io::Error::from(kind))))
    }

    #[test]
    fn a_reset_or_broken_pipe_counts_as_closed_before_the_answer() {
        use std::io::ErrorKind::*;
        for k in [ConnectionReset, ConnectionAborted, BrokenPipe] {
            assert!(closed_before_answer(&transport(k)), "{k:?}");
        }
        for k in [ConnectionRefused, TimedOut, InvalidData] {
            assert!(!closed_before_answer(&transport(k)), "{k:?}");
        }
        assert!(!closed_before_answer(&Error::Config("x".into())));
    }
}
