//! Server metrics: requests by outcome, refusals by reason (the codes of
//! spec §12), key agreements, rotations, connections and request durations,
//! counted where the layer ([`crate::server`]), the defence, the key store
//! and the listener ([`crate::listen`]) already decide these; plus gauges
//! read when a scrape asks ([`observe`]): key expiry, the defence's state.
//!
//! They go through the [`metrics`] facade, as logs go through `tracing`:
//! the application installs a recorder (`httpcrypt serve --metrics` installs
//! the Prometheus exporter), then calls [`enable`], which registers every
//! series once. Until then each point is one atomic load and a branch: no
//! allocation, no lock, no clock read. Once enabled a point is an atomic
//! add on a handle registered up front (the exporter's counters and gauges
//! are atomics; its histograms lock-free buckets, drained at each scrape or
//! upkeep), never a look-up by name.

use std::sync::OnceLock;
use std::time::Instant;

use metrics::{Counter, Gauge, Histogram};

use crate::body::HcBody;

/// Requests by outcome (label `outcome`).
pub const REQUESTS: &str = "httpcrypt_requests_total";
/// Refusals by reason (label `reason`).
pub const REJECTIONS: &str = "httpcrypt_rejections_total";
/// Key agreements run (label `suite`: `1` X25519, `2` the hybrid of spec/hybrid.md).
pub const KEY_AGREEMENTS: &str = "httpcrypt_key_agreements_total";
/// Key rotations (label `result`: `ok`, `failed`).
pub const ROTATIONS: &str = "httpcrypt_key_rotations_total";
/// Seconds until the newest kex key expires.
pub const KEY_EXPIRY: &str = "httpcrypt_key_expiry_seconds";
/// Seconds until the next rotation.
pub const NEXT_ROTATION: &str = "httpcrypt_next_rotation_seconds";
/// Kex keys held.
pub const KEYS: &str = "httpcrypt_keys";
/// 1 while the load-aware defence is on.
pub const DEFENCE_ACTIVE: &str = "httpcrypt_defence_active";
/// The defence's decisions (label `decision`).
pub const ADMISSIONS: &str = "httpcrypt_admission_decisions_total";
/// Connections open now.
pub const CONNECTIONS_OPEN: &str = "httpcrypt_connections_open";
/// Connections accepted.
pub const CONNECTIONS: &str = "httpcrypt_connections_total";
/// Request durations, from the head's arrival to the answer's last byte.
pub const DURATION: &str = "httpcrypt_request_duration_seconds";

/// Histogram buckets of [`DURATION`], seconds: from a cached small answer
/// on loopback to a large download.
pub const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// How the layer handled a request, as the `outcome` label of [`REQUESTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A sealed request whose session key took an X25519.
    FreshKey,
    /// A sealed request whose session key came from the session cache (spec §7.1).
    SessionCache,
    /// A sealed request resumed with a ticket (spec §7.2).
    Ticket,
    /// A plaintext request handed to the service (outside the mount).
    Plaintext,
    /// `OPTIONS {mount}/`: the certificate list.
    Certificates,
    /// The split-serving content endpoint.
    Content,
    /// Refused at admission (see [`REJECTIONS`] for why). The outcome is
    /// counted where it is decided, so the rare request refused after its
    /// key agreement (a small-order key, a malformed GET query) counts
    /// under `fresh_key` too; refusals after the request is opened (stale,
    /// replay, ...) are sealed answers and count only in [`REJECTIONS`].
    Refused,
}

impl Outcome {
    const ALL: [Outcome; 7] = [
        Outcome::FreshKey,
        Outcome::SessionCache,
        Outcome::Ticket,
        Outcome::Plaintext,
        Outcome::Certificates,
        Outcome::Content,
        Outcome::Refused,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::FreshKey => "fresh_key",
            Outcome::SessionCache => "session_cache",
            Outcome::Ticket => "ticket",
            Outcome::Plaintext => "plaintext",
            Outcome::Certificates => "certificates",
            Outcome::Content => "content",
            Outcome::Refused => "refused",
        }
    }
}

/// The `reason` label values of [`REJECTIONS`]: every code of spec §12 a
/// server reports for a request (outer or inner scope), then the outer
/// HTTP refusals of spec §11.6 and the routes, then `other`.
pub const REASONS: &[&str] = &[
    "bad_base64",
    "bad_host",
    "bad_nonce_path",
    "bad_query",
    "no_cookie",
    "bad_cookie",
    "unknown_key",
    "small_order",
    "body_too_large",
    "record_too_large",
    "integrity",
    "clear_in_request",
    "truncated",
    "trailing_data",
    "too_many_records",
    "malformed_inner",
    "inner_head_too_large",
    "forbidden_header",
    "content_length_mismatch",
    "bad_date",
    "stale",
    "replay",
    "token_required",
    "overloaded",
    "admission_required",
    "busy",
    "bad_ciphertext",
    "hybrid_required",
    "request_line_too_long",
    "header_section_too_large",
    "transfer_coding_not_implemented",
    "not_found",
    "method_not_allowed",
    "other",
];

/// The registered handles.
struct Handles {
    requests: [Counter; Outcome::ALL.len()],
    rejections: Vec<Counter>,
    key_agreements: Counter,
    key_agreements_hybrid: Counter,
    rotations_ok: Counter,
    rotations_failed: Counter,
    connections_open: Gauge,
    connections: Counter,
    duration: Histogram,
    key_expiry: Gauge,
    next_rotation: Gauge,
    keys: Gauge,
    defence_active: Gauge,
    /// admitted while on, admitted while off, challenged, busy.
    admissions: [Counter; 4],
}

static HANDLES: OnceLock<Handles> = OnceLock::new();

/// Registers every series with the global recorder installed before (see
/// [`metrics::set_global_recorder`]); from then on the server counts. Call
/// it once, after installing the recorder; later calls do nothing and
/// return `false`.
pub fn enable() -> bool {
    let mut fresh = false;
    HANDLES.get_or_init(|| {
        fresh = true;
        register()
    });
    fresh
}

/// Whether [`enable`] was called.
pub fn enabled() -> bool {
    HANDLES.get().is_some()
}

fn register() -> Handles {
    use metrics::{
        counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
    };
    describe_counter!(
        REQUESTS,
        "Requests by outcome: fresh_key, session_cache and ticket (how a sealed request's \
         session key was obtained), plaintext, certificates, content, refused"
    );
    describe_counter!(
        REJECTIONS,
        "Refused requests by reason (spec section 12 error codes, outer HTTP limits, routes)"
    );
    describe_counter!(KEY_AGREEMENTS, "X25519 key agreements run");
    describe_counter!(ROTATIONS, "Key rotations by result");
    describe_gauge!(
        KEY_EXPIRY,
        Unit::Seconds,
        "Seconds until the newest kex key expires"
    );
    describe_gauge!(
        NEXT_ROTATION,
        Unit::Seconds,
        "Seconds until the next key rotation"
    );
    describe_gauge!(KEYS, "Kex keys held");
    describe_gauge!(DEFENCE_ACTIVE, "1 while the load-aware defence is on");
    describe_counter!(ADMISSIONS, "Decisions of the load-aware defence");
    describe_gauge!(CONNECTIONS_OPEN, "Connections open");
    describe_counter!(CONNECTIONS, "Connections accepted");
    describe_histogram!(
        DURATION,
        Unit::Seconds,
        "Request duration, from the request head to the answer's last byte"
    );
    Handles {
        requests: Outcome::ALL.map(|o| counter!(REQUESTS, "outcome" => o.label())),
        rejections: REASONS
            .iter()
            .map(|r| counter!(REJECTIONS, "reason" => *r))
            .collect(),
        key_agreements: counter!(KEY_AGREEMENTS, "suite" => "1"),
        key_agreements_hybrid: counter!(KEY_AGREEMENTS, "suite" => "2"),
        rotations_ok: counter!(ROTATIONS, "result" => "ok"),
        rotations_failed: counter!(ROTATIONS, "result" => "failed"),
        connections_open: gauge!(CONNECTIONS_OPEN),
        connections: counter!(CONNECTIONS),
        duration: histogram!(DURATION),
        key_expiry: gauge!(KEY_EXPIRY),
        next_rotation: gauge!(NEXT_ROTATION),
        keys: gauge!(KEYS),
        defence_active: gauge!(DEFENCE_ACTIVE),
        admissions: ["admitted_on", "admitted_off", "challenged", "busy"]
            .map(|d| counter!(ADMISSIONS, "decision" => d)),
    }
}

#[inline]
fn on(f: impl FnOnce(&Handles)) {
    if let Some(h) = HANDLES.get() {
        f(h)
    }
}

/// Counts a request under `outcome`.
#[inline]
pub(crate) fn request(outcome: Outcome) {
    on(|h| h.requests[outcome as usize].increment(1));
}

/// Counts a refusal for `reason` (a [`REASONS`] value; others count as `other`).
#[inline]
pub(crate) fn rejected(reason: &str) {
    on(|h| {
        let i = REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(REASONS.len() - 1);
        h.rejections[i].increment(1);
    });
}

/// A request refused before a session key existed, for `reason`.
#[inline]
pub(crate) fn refused(reason: &str) {
    request(Outcome::Refused);
    rejected(reason);
}

/// The key agreement of a fresh-key request (label `suite` of
/// [`KEY_AGREEMENTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suite {
    /// Suite 1: one X25519 (`suite="1"`).
    Classical,
    /// Suite 2: X25519 and ML-KEM-768 (`suite="2"`, spec/hybrid.md).
    Hybrid,
}

/// One key agreement for a fresh-key request.
#[inline]
pub(crate) fn key_agreement(suite: Suite) {
    on(|h| {
        match suite {
            Suite::Classical => h.key_agreements.increment(1),
            Suite::Hybrid => h.key_agreements_hybrid.increment(1),
        }
        h.requests[Outcome::FreshKey as usize].increment(1);
    });
}

/// A rotation that created a key (`ok`) or failed to.
pub(crate) fn rotation(ok: bool) {
    on(|h| {
        if ok {
            h.rotations_ok.increment(1)
        } else {
            h.rotations_failed.increment(1)
        }
    });
}

/// An open connection, counted in [`CONNECTIONS_OPEN`] until dropped.
#[derive(Debug)]
pub(crate) struct OpenConnection(());

impl Drop for OpenConnection {
    fn drop(&mut self) {
        on(|h| h.connections_open.decrement(1.0));
    }
}

/// Counts an accepted connection; keep the guard while it is open.
#[inline]
pub(crate) fn connection() -> Option<OpenConnection> {
    let h = HANDLES.get()?;
    h.connections.increment(1);
    h.connections_open.increment(1.0);
    Some(OpenConnection(()))
}

/// The arrival of a request head, when durations are measured.
#[inline]
pub(crate) fn clock() -> Option<Instant> {
    HANDLES.get().map(|_| Instant::now())
}

/// The answer's body, which records the request's duration when it is
/// dropped (sent in full, or abandoned); `body` itself when not measured.
#[inline]
pub(crate) fn timed(body: HcBody, started: Option<Instant>) -> HcBody {
    match started {
        None => body,
        Some(started) => http_body_util::BodyExt::boxed_unsync(Timed { body, started }),
    }
}

pin_project_lite::pin_project! {
    struct Timed {
        #[pin]
        body: HcBody,
        started: Instant,
    }

    impl PinnedDrop for Timed {
        fn drop(this: Pin<&mut Self>) {
            let started = this.started;
            on(|h| h.duration.record(started.elapsed().as_secs_f64()));
        }
    }
}

impl http_body::Body for Timed {
    type Data = bytes::Bytes;
    type Error = crate::error::BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// What a scrape reads from a server at one moment
/// ([`crate::server::HttpCryptLayer::observe_metrics`] fills it in).
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    /// Kex keys held.
    pub keys_held: usize,
    /// The newest held key's `not_after`, if any key is held.
    pub newest_not_after: Option<u64>,
    /// Seconds until the next rotation.
    pub seconds_to_rotation: u64,
    /// The load-aware defence: whether it is on, and its decisions so far.
    pub defence: Option<(bool, httpcrypt_proto::admission::AdmissionCounts)>,
}

/// Sets the gauges a scrape reads: key expiry and the next rotation, keys
/// held, the defence's state and its decisions so far.
pub fn observe(s: &Snapshot) {
    on(|h| {
        let now = crate::clock::unix_now();
        h.keys.set(s.keys_held as f64);
        h.key_expiry
            .set(s.newest_not_after.map_or(0, |t| t.saturating_sub(now)) as f64);
        h.next_rotation.set(s.seconds_to_rotation as f64);
        match s.defence {
            Some((active, c)) => {
                h.defence_active.set(if active { 1.0 } else { 0.0 });
                for (counter, v) in
                    h.admissions
                        .iter()
                        .zip([c.admitted_on, c.admitted_off, c.challenged, c.busy])
                {
                    counter.absolute(v);
                }
            }
            None => h.defence_active.set(0.0),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpcrypt_proto::Error;

    /// Every error a server reports for a request (one with a problem of
    /// spec §4.4) has a reason of its own, not `other`; a new code that can
    /// reach a client fails here until it is listed.
    #[test]
    fn every_request_problem_has_a_reason() {
        for e in Error::ALL {
            if e.problem().is_some() {
                assert!(REASONS.contains(&e.code()), "{} has no reason", e.code());
            }
        }
        let mut sorted = REASONS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), REASONS.len(), "a reason is listed twice");
        assert_eq!(REASONS.last(), Some(&"other"));
    }

    /// The `outcome` labels are distinct and indexed by the enum's order.
    #[test]
    fn outcomes_index_their_handles() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i, "{}", o.label());
        }
    }
}
