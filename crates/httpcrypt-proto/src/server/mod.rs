//! The server's side of one exchange, without IO: classify the outer
//! request, find the key, derive `k`, open the request stream, seal the
//! response (spec §4, §7.2, §11).

use crate::error::{Error, Result};
use crate::inner::{self, RequestHead};
use crate::keys::{KexPublic, KeyId, SessionKey};
use crate::limits::Limits;
use crate::outer::{self, Credential, Mount, Route};
use crate::profile::{self, Profile};
use crate::replay;
use crate::stream::{self, Opener, ResponseKey};
use crate::suite::NONCE_LEN;
use crate::ticket::{TicketContents, TicketKey, SEALED_TICKET_LEN};

mod keys;
mod response;

pub use keys::{ServerKey, ServerKeys};
pub use response::{problem_response, reason_phrase, seal_response};

/// The `Cookie` field values of an outer request, in order: inline up to
/// two (a protocol request carries one), so a view of the head allocates
/// nothing.
pub type CookieFields<'a> = smallvec::SmallVec<[&'a [u8]; 2]>;

/// The parts of the outer request the server looks at.
#[derive(Debug, Clone, Default)]
pub struct OuterRequest<'a> {
    /// Method.
    pub method: &'a str,
    /// Request target as received (origin form).
    pub target: &'a str,
    /// The `Host` field value.
    pub host: Option<&'a [u8]>,
    /// Every `Cookie` field value.
    pub cookies: CookieFields<'a>,
    /// The declared body length (Content-Length), if any.
    pub content_length: Option<u64>,
    /// Whether the request has a body (declared length > 0 or chunked).
    pub has_body: bool,
}

/// An outer request parsed from raw HTTP/1.1 bytes (httparse), owning its
/// parts: for simple servers, tools and tests that have the bytes at hand
/// (a hyper server builds an [`OuterRequest`] from its own parse instead).
/// Only `Content-Length` framing is understood; `body` is everything after
/// the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedOuter {
    /// Method.
    pub method: String,
    /// Request target as received.
    pub target: String,
    /// The `Host` field value.
    pub host: Option<Vec<u8>>,
    /// Every `Cookie` field value.
    pub cookies: Vec<Vec<u8>>,
    /// The declared Content-Length, if any.
    pub content_length: Option<u64>,
    /// The bytes after the head.
    pub body: Vec<u8>,
}

impl ParsedOuter {
    /// Parses a complete request head (up to 64 fields) and takes the rest as
    /// the body; `None` for bytes that are not one.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let mut storage = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut storage);
        let httparse::Status::Complete(n) = req.parse(bytes).ok()? else {
            return None;
        };
        let find = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value.to_vec())
        };
        Some(ParsedOuter {
            method: req.method?.to_string(),
            target: req.path?.to_string(),
            host: find("host"),
            cookies: req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
                .map(|h| h.value.to_vec())
                .collect(),
            content_length: find("content-length")
                .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok()),
            body: bytes[n..].to_vec(),
        })
    }

    /// The view [`accept`] judges.
    pub fn as_request(&self) -> OuterRequest<'_> {
        OuterRequest {
            method: &self.method,
            target: &self.target,
            host: self.host.as_deref(),
            cookies: self.cookies.iter().map(Vec::as_slice).collect(),
            content_length: self.content_length,
            has_body: !self.body.is_empty(),
        }
    }
}

/// Accepts, opens and parses a complete outer request held in memory: the
/// whole server side of one exchange for callers that have the bytes.
pub fn serve_bytes(
    keys: &ServerKeys,
    mount: &Mount,
    limits: &Limits,
    now: u64,
    outer: &[u8],
) -> Result<Option<(Accepted, RequestHead, Vec<u8>)>> {
    let o = ParsedOuter::parse(outer).ok_or(Error::Truncated)?;
    let view = o.as_request();
    match accept(keys, mount, &view, limits, now, &mut Plain)? {
        Accept::Request(a) => {
            let (head, body) = open_request(&a, &o.body, limits)?;
            Ok(Some((a, head, body)))
        }
        _ => Ok(None),
    }
}

/// How to answer an outer request.
// Built once per request and matched at once: boxing the large variant
// would only add an allocation to every request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Accept {
    /// Not under the mount: not ours.
    Outside,
    /// `OPTIONS {mount}/`: answer with [`ServerKeys::cert_lines`].
    Options,
    /// 405 under the mount.
    MethodNotAllowed,
    /// 404 under the mount.
    NotFound,
    /// An HTTPCrypt request whose key is known.
    Request(Accepted),
}

/// A request whose key agreement succeeded: ready to open its stream.
#[derive(Debug)]
pub struct Accepted {
    /// The kex key ID the session runs under (inside the ticket, for tickets).
    pub kid: KeyId,
    /// The request stream's nonce.
    pub n0: [u8; NONCE_LEN],
    /// The GET form's decoded stream; `None` for POST (the body is the stream).
    pub query_stream: Option<Vec<u8>>,
    /// What the cookie carried.
    pub credential: Credential,
    /// The request profile (spec §4.5).
    pub profile: Profile,
    /// Profile 2: the bound outer `Host` as `u16(len) || host` (empty for v1).
    bound_host: Vec<u8>,
    key: SessionKey,
}

impl Accepted {
    /// The session key.
    pub fn session_key(&self) -> &SessionKey {
        &self.key
    }

    /// The outer `Host` the stream's associated data binds (profile 2,
    /// spec §4.5), as sent; `None` for v1, which binds no outer field.
    pub fn bound_host(&self) -> Option<&[u8]> {
        self.bound_host
            .get(2..)
            .filter(|_| self.profile == Profile::Compact)
    }

    /// An opener for the request stream.
    pub fn opener(&self, limits: &Limits) -> Opener {
        match self.profile {
            Profile::V1 => Opener::request(&self.key, self.n0, limits.record_limit()),
            Profile::Compact => Opener::request_prebound(
                &self.key,
                self.n0,
                &self.bound_host,
                limits.record_limit(),
            ),
        }
    }

    /// The freshness check of spec §8.1 for this request: the inner `Date`
    /// (v1) or the time in the nonce (profile 2). Returns the request time.
    pub fn check_time(&self, date: Option<&[u8]>, now: u64, window: u64) -> Result<u64> {
        match self.profile {
            Profile::V1 => replay::check_date(date, now, window),
            Profile::Compact => profile::check_nonce_time(&self.n0, now, window),
        }
    }

    /// The key that may seal this request's one response.
    pub fn into_response_key(self) -> ResponseKey {
        ResponseKey::for_profile(self.key, self.n0, self.profile)
    }
}

/// The caller's part in accepting a request: where the session key of a
/// fresh-key request comes from, whether its X25519 may run, and how a
/// ticket is opened. Every method has the plain answer as its default (no
/// cache, no gate, each ticket opened anew), so [`Plain`] is an empty impl.
///
/// [`accept`] asks in the order the spec fixes: [`Agreement::cached`] first;
/// on a miss [`Agreement::admit`] (the load-aware defence of spec §14, which
/// runs after every check that needs no X25519 and before the one that
/// does), then [`Agreement::agree`]. A ticket goes to
/// [`Agreement::open_ticket`] and never through the gate.
pub trait Agreement {
    /// The session key of `(sk.kid, peer)` known without an X25519 (a
    /// session cache, spec §7.1), if any.
    fn cached(&mut self, sk: &ServerKey, peer: &KexPublic) -> Option<SessionKey> {
        let _ = (sk, peer);
        None
    }

    /// Whether the fresh-key request `req` with stream nonce `n0` may cost
    /// an X25519; an error refuses it (`busy`, `admission_required`).
    fn admit(&mut self, req: &OuterRequest<'_>, n0: &[u8; NONCE_LEN]) -> Result<()> {
        let _ = (req, n0);
        Ok(())
    }

    /// The key agreement itself: one X25519 (a caller may count it, or keep
    /// its result for [`Agreement::cached`]; the project's layer keeps it
    /// only once the request's stream has opened under it, spec D31).
    fn agree(&mut self, sk: &ServerKey, peer: &KexPublic) -> Result<SessionKey> {
        sk.secret.session_key(peer)
    }

    /// Opens a ticket under its unexpired ticket key. A caller may answer
    /// from tickets it has already opened, as long as it keeps
    /// [`TicketKey::open`]'s expiry rule.
    fn open_ticket(
        &mut self,
        tk: &TicketKey,
        sealed: &[u8; SEALED_TICKET_LEN],
        now: u64,
    ) -> Result<TicketContents> {
        tk.open(sealed, now)
    }

    /// The key of the short ticket `(tk, h)` issued for a session under
    /// `kid` (spec §7.3), asked only once the ticket key and the kex key are
    /// known to be unexpired. A caller may answer from short tickets it has
    /// already derived under the same ticket key.
    fn short_key(
        &mut self,
        tk: &TicketKey,
        kid: &KeyId,
        h: &[u8; crate::ticket::SHORT_H_LEN],
    ) -> SessionKey {
        tk.short_key(kid, h)
    }
}

/// An [`Agreement`] with one X25519 for every fresh-key request, no gate,
/// and every ticket opened anew.
#[derive(Debug, Clone, Copy, Default)]
pub struct Plain;

impl Agreement for Plain {}

/// Judges an outer request head in the order of spec §11: route, Host,
/// nonce path, body/query, cookie, key agreement (`agreement` decides how,
/// see [`Agreement`]). A GET query is only checked for shape before the
/// cookie (spec §11.1 step 4) and decoded after the key agreement, so a
/// refused request allocates nothing.
pub fn accept(
    keys: &ServerKeys,
    mount: &Mount,
    req: &OuterRequest<'_>,
    limits: &Limits,
    now: u64,
    agreement: &mut (impl Agreement + ?Sized),
) -> Result<Accept> {
    let route = outer::route(req.method, req.target, mount);
    match route {
        Ok(Route::Outside) => return Ok(Accept::Outside),
        Ok(Route::Options) => return Ok(Accept::Options),
        Ok(Route::MethodNotAllowed) => return Ok(Accept::MethodNotAllowed),
        Ok(Route::NotFound) => return Ok(Accept::NotFound),
        _ => {}
    }
    let host = match req.host {
        Some(h) if !h.is_empty() => h,
        _ => return Err(Error::BadHost),
    };
    let (n0, profile, query_stream) = match route? {
        Route::Post { n0, profile } => {
            if req
                .content_length
                .is_some_and(|l| l > limits.max_body as u64)
            {
                return Err(Error::BodyTooLarge);
            }
            (n0, profile, None)
        }
        Route::Get { n0, query, profile } => {
            if req.has_body {
                return Err(Error::BadQuery);
            }
            outer::check_query(query, limits.max_body)?;
            (n0, profile, Some(query))
        }
        _ => unreachable!("other routes returned above"),
    };
    // Spec §11.1 step 3: a profile-2 request must be able to bind its Host
    // (checked here, bound after the cookie so that a refusal allocates nothing).
    if profile == Profile::Compact {
        profile::check_bound_host(host)?;
    }
    let credential = outer::scan_cookies(req.cookies.iter().copied(), |id| keys.lookup(id, now))?;
    let (kid, key) = match &credential {
        Credential::Key { kid, client_public } => {
            let sk = keys.key(kid, now).ok_or(Error::UnknownKey)?;
            let key = match agreement.cached(sk, client_public) {
                Some(k) => k,
                None => {
                    agreement.admit(req, &n0)?;
                    agreement.agree(sk, client_public)?
                }
            };
            (*kid, key)
        }
        Credential::Ticket { tid, sealed } => {
            let tk = keys.ticket_key_by_id(tid, now).ok_or(Error::UnknownKey)?;
            let contents = agreement.open_ticket(tk, sealed, now)?;
            if keys.key(&contents.kid, now).is_none() {
                return Err(Error::UnknownKey);
            }
            (contents.kid, contents.key)
        }
        Credential::ShortTicket { tid, h } => {
            let (kid, tk) = keys.short_ticket_key(tid, now)?;
            (kid, agreement.short_key(tk, &kid, h))
        }
    };
    let query_stream = match query_stream {
        Some(q) => Some(outer::decode_query(q, limits.max_body)?),
        None => None,
    };
    let bound_host = match profile {
        Profile::V1 => Vec::new(),
        Profile::Compact => profile::bound_host(host)?,
    };
    Ok(Accept::Request(Accepted {
        kid,
        n0,
        query_stream,
        credential,
        profile,
        bound_host,
        key,
    }))
}

/// Opens a whole request stream (the body, or the GET query) and parses the
/// inner request.
pub fn open_request(
    accepted: &Accepted,
    body: &[u8],
    limits: &Limits,
) -> Result<(RequestHead, Vec<u8>)> {
    open_request_as(accepted, body, limits)
}

/// [`open_request`] into another head type, such as
/// [`inner::PackedRequestHead`] (one allocation for the whole head, where
/// [`RequestHead`] makes one per string). Parsed and checked the same way.
pub fn open_request_as<H: inner::Head>(
    accepted: &Accepted,
    body: &[u8],
    limits: &Limits,
) -> Result<(H, Vec<u8>)> {
    let stream_bytes = accepted.query_stream.as_deref().unwrap_or(body);
    let plaintext = stream::open_all(accepted.opener(limits), stream_bytes)?;
    inner::decode_all::<H>(&plaintext, limits)
}

/// Freshness and anti-replay settings (spec §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// The window W in seconds.
    pub window: u64,
}

impl Default for Freshness {
    fn default() -> Self {
        Freshness {
            window: replay::DEFAULT_WINDOW,
        }
    }
}

#[cfg(test)]
mod tests;
