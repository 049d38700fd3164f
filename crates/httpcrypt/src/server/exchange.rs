//! One admitted request, from its sealed body to the service's answer:
//! open the stream and the inner head, check freshness and replay (spec
//! §8), decide the extra fields (ticket, token), build the service's
//! request (erratum E1), call the service, and hand the answer to
//! [`super::answer`] for sealing.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use httpcrypt_proto::inner::{self, Field, Head, PackedRequestHead, ResponseHead};
use httpcrypt_proto::outer;
use httpcrypt_proto::server as core;
use httpcrypt_proto::ticket::TicketAsk;
use httpcrypt_proto::token;

use super::admission::Admitted;
use super::answer::{
    failure_response, inner_problem, inner_problem_to_head, inner_problem_with, outer_problem,
    seal_response, sealed_outer, SplitPlan,
};
use super::config::Encrypted;
use super::service_request::{build_inner_request, SplitAsked};
use super::sessions::{current_tid, issue_short_ticket, issue_ticket, Held, TicketOut};
use super::shared::{call, Shared};
use crate::body::{full, plain, FailureSlot, HcBody, OpenBody, DEFAULT_RECORD};
use crate::conn::ConnState;
use crate::error::{BoxError, Error};

/// Opens, serves and seals an admitted request; every failure becomes an
/// answer (sealed where the session key allows it). Four plain steps:
/// [`open`] the request (awaiting its head and the strike register),
/// [`prepare`] the service's request and what the answer will need, call
/// the service, and [`answer`].
///
/// The future is boxed once per request, so its size is what each request
/// allocates and copies: an `async` block rather than an `async fn` (which
/// would hold every argument twice). The opened stream lives across two
/// awaits, so it would stay in the part of the future all states share; it
/// is boxed on its own instead (and handed to the service in that box),
/// which keeps the future within glibc's thread cache (1,032 bytes), where
/// `malloc` takes its fast path (a unit test checks the size).
#[allow(clippy::manual_async_fn)] // deliberate: see above
pub(super) fn serve_sealed<S, B, RB>(
    shared: Arc<Shared>,
    inner: S,
    admitted: Admitted<B>,
) -> impl Future<Output = Result<Response<HcBody>, Infallible>> + Send
where
    S: tower::Service<Request<HcBody>, Response = Response<RB>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    // Taken apart here, outside the block, so that it captures each part
    // once.
    let Admitted {
        mut parts,
        body,
        mut accepted,
        held,
        now,
    } = admitted;
    async move {
        let opened = match open(&shared, &mut accepted, held.agreed, body, now).await {
            Ok(o) => o,
            Err(stop) => return Ok(stop.answer(accepted, now)),
        };
        let (inner_req, pending) = match prepare(&shared, &mut parts, &accepted, held, opened, now)
        {
            Ok(p) => p,
            Err(stop) => return Ok(stop.answer(accepted, now)),
        };
        let rsp = call(inner, inner_req).await;
        Ok(answer(&shared, accepted, pending, rsp, now))
    }
}

/// An opened request: its inner head, and its body still to be read.
pub(super) struct Opened<B> {
    head: PackedRequestHead,
    /// Boxed at once (see [`serve_sealed`]: the future's size).
    body: Box<OpenBody<B, PackedRequestHead>>,
    /// Where a body that streams in reports a failure met while the service
    /// reads it.
    slot: Option<FailureSlot>,
}

/// What the answer needs that the request decided, kept across the
/// service's await.
pub(super) struct Pending<'a> {
    /// See [`Opened::slot`].
    slot: Option<FailureSlot>,
    /// Extra inner fields of the answer: a ticket and the token.
    extra: Vec<Field>,
    /// The ticket among them, to record once an answer carries it.
    ticket_out: Option<TicketOut>,
    split: Option<SplitPlan<'a>>,
    /// The answer to HEAD keeps its length and has no body (E2).
    answers_head: bool,
    /// Held as 4 bytes, beside the flag above, to keep the future within
    /// the thread cache.
    record_size: u32,
}

/// Why an exchange stops before the service answers, and so which answer
/// the client gets instead.
pub(super) enum Stop {
    /// A sealed inner problem (spec §4.4).
    Inner(httpcrypt_proto::Error),
    /// A sealed inner problem in answer to `HEAD` (erratum E2).
    InnerToHead(httpcrypt_proto::Error),
    /// A sealed inner problem with extra fields (a ticket, a token).
    InnerWith(httpcrypt_proto::Error, Vec<Field>),
    /// An outer problem: the body was too large to be read.
    TooLarge,
    /// A failure outside the protocol (a slow or broken client).
    Failure(Error),
}

impl Stop {
    /// A stop for an error of the opened body.
    fn from_body(e: Error) -> Self {
        match e {
            Error::Protocol(httpcrypt_proto::Error::BodyTooLarge) => Stop::TooLarge,
            Error::Protocol(e) => Stop::Inner(e),
            e => Stop::Failure(e),
        }
    }

    /// The answer, sealed under the request's key where it can be.
    fn answer(self, accepted: core::Accepted, now: u64) -> Response<HcBody> {
        match self {
            Stop::Inner(e) => inner_problem(accepted.into_response_key(), &e, now),
            Stop::InnerToHead(e) => inner_problem_to_head(accepted.into_response_key(), &e, now),
            Stop::InnerWith(e, extra) => {
                inner_problem_with(accepted.into_response_key(), &e, now, extra)
            }
            Stop::TooLarge => outer_problem(&httpcrypt_proto::Error::BodyTooLarge, &[]),
            Stop::Failure(e) => failure_response(&BoxError::from(e)),
        }
    }
}

/// Step 1: opens the request stream and its inner head, caches a session
/// whose key took an X25519 (`agreed`) once the head has opened under it,
/// then checks freshness and replay (spec §8): first error wins after
/// stream and parse.
async fn open<B>(
    shared: &Shared,
    accepted: &mut core::Accepted,
    agreed: bool,
    body: B,
    now: u64,
) -> Result<Opened<B>, Stop>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let cfg = &shared.config;
    let (outer_body, initial) = match accepted.query_stream.take() {
        Some(q) => (None, q),
        None => (Some(body), Vec::new()),
    };
    // A stream given whole is judged before the service runs (below); only
    // one that streams in can fail while the service reads it.
    let slot: Option<FailureSlot> = outer_body.as_ref().map(|_| Arc::new(Mutex::new(None)));
    let mut opened = match OpenBody::new(
        accepted.opener(&cfg.limits),
        inner::Decoder::<PackedRequestHead>::new(cfg.limits),
        outer_body,
        initial,
    ) {
        Ok(o) => o,
        Err(Error::Protocol(e)) => return Err(Stop::Inner(e)),
        Err(e) => return Err(Stop::Failure(e)),
    };
    opened
        .set_idle_timeout(cfg.body_timeout)
        .set_limit(cfg.limits.max_body as u64)
        .set_failure_slot(slot.clone());
    let head = opened
        .head()
        .await
        .and_then(|h| opened.complete_now().map(|()| h))
        .map_err(Stop::from_body)?;
    // Before the freshness check: a client told `stale` retries under the
    // same key.
    if agreed
        && TicketAsk::of(head.field(httpcrypt_proto::ticket::TICKET_FIELD)) != TicketAsk::Decline
    {
        shared.cache_session(accepted);
    }
    if let Some(window) = cfg.freshness {
        let checked = match accepted.check_time(head.field("date"), now, window) {
            Ok(date) => {
                match shared
                    .strikes
                    .check_now(&accepted.kid, &accepted.n0, date, now)
                {
                    Some(r) => r,
                    None => {
                        shared
                            .strikes
                            .check(&accepted.kid, &accepted.n0, date, now)
                            .await
                    }
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            return Err(if head.method() == "HEAD" {
                Stop::InnerToHead(e)
            } else {
                Stop::Inner(e)
            });
        }
    }
    Ok(Opened {
        head,
        body: opened,
        slot,
    })
}

/// Step 2: decides the answer's extra fields (a ticket, the token; spec
/// §7.2, §8), applies the token rule, plans a split answer, and builds the
/// service's request.
fn prepare<'a, B>(
    shared: &'a Shared,
    parts: &mut http::request::Parts,
    accepted: &core::Accepted,
    held: Held,
    opened: Opened<B>,
    now: u64,
) -> Result<(Request<HcBody>, Pending<'a>), Stop>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let cfg = &shared.config;
    let Opened { head, body, slot } = opened;
    let client_random = head
        .field(token::CLIENT_RANDOM_FIELD)
        .map(token::parse_client_random);
    let mut extra = Vec::new();
    // The ticket that goes out, if any: its ticket key, and the connection
    // to tell once it has gone out in an answer.
    let mut ticket_out: Option<TicketOut> = None;
    // A session resumed from the cache that got a ticket under the current
    // ticket key on an earlier connection gets none (spec §7.2, D29): its
    // client reuses its key pair, so it is linkable by that anyway, and a new
    // ticket would differ from the one it holds only in its nonce.
    //
    // Short tickets (spec §7.3) go out only when asked, whatever the request
    // came with; a request that presents one and does not ask gets none: its
    // client has opted in and decides itself when it wants a new one.
    //
    // A request that declines (`Ticket: none`, §7.3) gets no ticket at all:
    // its client will not resume.
    let ask = TicketAsk::of(head.field(httpcrypt_proto::ticket::TICKET_FIELD));
    let short = if cfg.tickets && ask == TicketAsk::Short {
        issue_short_ticket(shared, accepted, now)
    } else {
        None
    };
    if let Some(t) = &short {
        extra.push(Field::new(
            httpcrypt_proto::ticket::TICKET_FIELD,
            t.to_field(),
        ));
    } else if cfg.tickets
        && ask != TicketAsk::Decline
        && !matches!(accepted.credential, outer::Credential::ShortTicket { .. })
        && (held.ticket.is_none() || held.ticket != shared.keys.with(|k| current_tid(k, now)))
    {
        let conn = parts.extensions.get::<ConnState>();
        let session = conn.map(|_| shared.session_id(&accepted.kid, accepted.session_key()));
        if conn.zip(session).is_none_or(|(c, s)| c.wants_ticket(s)) {
            if let Some((t, tid)) = issue_ticket(shared, accepted, now) {
                extra.push(Field::new(httpcrypt_proto::ticket::TICKET_FIELD, t));
                ticket_out = Some(TicketOut {
                    tid,
                    conn: conn.cloned().zip(session),
                });
            }
        }
    }
    if let (Some(Ok(cr)), Some(secret)) = (&client_random, cfg.token_secret) {
        extra.push(Field::new(
            token::RANDOM_FIELD,
            // Bound to a short ticket's key when one goes out with it, so
            // the retry after `token-required` carries it (spec §7.3, §8.4).
            token::format_random(
                &secret,
                token::bound_key(accepted.session_key(), short.as_ref()),
                cr,
            ),
        ));
    }
    if cfg.require_token && !token::is_safe(head.method()) {
        let valid = cfg.token_secret.is_some_and(|secret| {
            head.field(token::RANDOM_FIELD)
                .is_some_and(|v| token::verify_random(&secret, accepted.session_key(), v).is_ok())
        });
        if !valid {
            if let Some(t) = &ticket_out {
                t.gone_out(shared, accepted);
            }
            return Err(Stop::InnerWith(
                httpcrypt_proto::Error::TokenRequired,
                extra,
            ));
        }
    }
    let mut split = match (&cfg.split, &shared.store) {
        (Some(sc), Some(store)) => Some(SplitPlan {
            config: sc,
            store: store.clone(),
            asked: false,
            short_head: false,
            method: head.method().to_string(),
            target: head.target().to_string(),
            credentials: false,
            mount: cfg.mount.as_str().to_string(),
        }),
        _ => None,
    };
    let answers_head = head.method() == "HEAD";
    let record_size = u32::try_from(answer_record_size(
        cfg.record_size,
        parts
            .extensions
            .get::<ConnState>()
            .map_or(0, ConnState::take_early_room),
    ))
    .unwrap_or(u32::MAX);
    let (mut inner_req, split_asked) =
        build_inner_request(parts, head, body.boxed_unsync(), accepted.bound_host(), cfg)
            .map_err(Stop::Inner)?;
    if let Some(plan) = split.as_mut() {
        plan.asked = split_asked != SplitAsked::No;
        plan.short_head = split_asked == SplitAsked::Short;
        plan.credentials = crate::split::carries_credentials(inner_req.headers());
    }
    // The facts of the session, next to the outer request's extensions
    // (build_inner_request).
    inner_req.extensions_mut().insert(Encrypted {
        kid: accepted.kid,
        resumed: accepted.credential.is_ticket(),
        cached: held.cached,
    });
    Ok((
        inner_req,
        Pending {
            slot,
            extra,
            ticket_out,
            split,
            answers_head,
            record_size,
        },
    ))
}

/// Step 4: the answer to the service's `rsp`, sealed.
fn answer<RB, E>(
    shared: &Shared,
    accepted: core::Accepted,
    pending: Pending<'_>,
    rsp: Result<Response<RB>, E>,
    now: u64,
) -> Response<HcBody>
where
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    E: Into<BoxError>,
{
    // A body failure is often why the service failed (a gateway's upstream
    // request dies with it): report the protocol error it really is.
    let failure = pending
        .slot
        .as_ref()
        .and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).take());
    if let Some(e) = failure {
        if e == httpcrypt_proto::Error::BodyTooLarge {
            return outer_problem(&e, &[]);
        }
        return inner_problem(accepted.into_response_key(), &e, now);
    }
    let rsp = match rsp {
        Ok(r) => r,
        Err(e) => {
            let e: BoxError = e.into();
            tracing::warn!(error = %e, "service failed on a sealed request");
            let head = ResponseHead::new(500, "Internal Server Error");
            let n0 = crate::nonce::nonce24();
            let mut out = Vec::new();
            return match core::seal_response(
                accepted.into_response_key(),
                n0,
                &head,
                b"",
                now,
                DEFAULT_RECORD,
                &mut out,
            ) {
                Ok(()) => sealed_outer(full(out)),
                Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "sealing failed\n"),
            };
        }
    };
    if let Some(t) = &pending.ticket_out {
        t.gone_out(shared, &accepted);
    }
    seal_response(
        pending.record_size as usize,
        accepted.into_response_key(),
        rsp,
        pending.answers_head,
        pending.extra,
        now,
        pending.split,
    )
}

/// The record size of an answer: the configured one, or, on a connection
/// the ASAP gate admitted before its handshake with `early_room` bytes to
/// send until then, one whose first record fits in that room with the
/// outer head beside it (spec/asap.md §4), so the client can verify the
/// answer's head one round trip early.
pub(super) fn answer_record_size(configured: usize, early_room: usize) -> usize {
    /// The outer response head and the stream's framing, at most.
    const OUTER: usize = 512;
    /// Records are never made smaller than this.
    const SMALLEST: usize = 256;
    if early_room == 0 {
        return configured;
    }
    configured.min(early_room.saturating_sub(OUTER).max(SMALLEST))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An early-admitted connection's first answer has records that fit
    /// its room beside the outer head; other answers keep the configured
    /// size, and no record is made tiny.
    #[test]
    fn an_early_answer_fits_its_first_record_in_the_room() {
        assert_eq!(answer_record_size(16384, 0), 16384);
        assert_eq!(answer_record_size(16384, 3504), 3504 - 512);
        assert_eq!(answer_record_size(1024, 3504), 1024);
        assert_eq!(answer_record_size(16384, 300), 256);
    }

    /// The future of a sealed request for the static-file service and for
    /// the gateway fits glibc's thread cache, 1,032 bytes: above it every
    /// request's allocation of the future takes the allocator's slow path
    /// (`serve_sealed`).
    #[test]
    fn a_sealed_request_future_fits_the_thread_cache() {
        use crate::listen::GLIBC_TCACHE_MAX as TCACHE_MAX;
        fn returned_size<F, A, B, C, R>(_: F) -> usize
        where
            F: FnOnce(A, B, C) -> R,
        {
            std::mem::size_of::<R>()
        }
        let files = returned_size(
            serve_sealed::<crate::services::StaticFiles, hyper::body::Incoming, HcBody>,
        );
        assert!(
            files <= TCACHE_MAX,
            "the static files' future is {files} bytes"
        );
        let gateway =
            returned_size(serve_sealed::<crate::services::Upstream, hyper::body::Incoming, HcBody>);
        assert!(
            gateway <= TCACHE_MAX,
            "the gateway's future is {gateway} bytes"
        );
    }
}
