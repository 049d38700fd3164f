//! The IO side of the load-aware defence (spec §14): feeds the sans-IO
//! [`Admission`] with the clock, the peer address and fresh secrets, and
//! builds the outer 429 answers. The decision logic and the formats live in
//! `httpcrypt_proto::admission`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use httpcrypt_proto::admission::{self, Admission, AdmissionConfig, AdmissionCounts, Verdict};
use rand_core::{OsRng, RngCore};

use crate::body::{full, HcBody};

/// The TCP peer of a request, for a listener of its own to put in the
/// request's extensions (the listener of [`crate::listen::run`] records it
/// in the connection's [`crate::conn::ConnState`]); the defence's budgets
/// and cookies are keyed by its address. Without either every request
/// counts as one source, `0.0.0.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The peer address of a request, if the listener recorded it.
pub fn peer_ip(ext: &http::Extensions) -> IpAddr {
    ext.get::<crate::conn::ConnState>()
        .and_then(|c| c.peer())
        .or_else(|| ext.get::<PeerAddr>().map(|p| p.0))
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip())
}

/// Milliseconds since the unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The defence of one server: an [`Admission`] behind a lock.
#[derive(Debug)]
pub struct Defence {
    state: Mutex<Admission>,
}

impl Defence {
    /// A defence with `config`, drawing its secrets from the OS.
    pub fn new(config: AdmissionConfig) -> Self {
        let mut secret = [0u8; 32];
        let mut seed = [0u8; 16];
        OsRng.fill_bytes(&mut secret);
        OsRng.fill_bytes(&mut seed);
        Defence {
            state: Mutex::new(Admission::new(config, secret, seed, unix_ms())),
        }
    }

    /// Judges a fresh-key request about to need an X25519 (spec §14.2).
    pub fn judge(&self, addr: IpAddr, n0: &[u8; 24], echo: Option<&[u8]>) -> Verdict {
        let now = unix_ms();
        let mut a = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if a.rotation_due(now) {
            let mut secret = [0u8; 32];
            OsRng.fill_bytes(&mut secret);
            a.rotate(secret, now);
        }
        a.judge(now, addr, n0, echo)
    }

    /// Whether the defence is on now.
    pub fn is_on(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_on(unix_ms())
    }

    /// Decisions so far.
    pub fn counts(&self) -> AdmissionCounts {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .counts()
    }
}

/// The outer 429 for a challenge or a spent budget (spec §14.4):
/// `application/problem+json`, `Cache-Control: no-store`, and `Retry-After`.
pub fn refusal_response(verdict: &Verdict) -> Response<HcBody> {
    crate::metrics::rejected(match verdict {
        Verdict::Busy { .. } => "busy",
        _ => "admission_required",
    });
    let mut doc = String::with_capacity(160);
    admission::format_refusal(verdict, &mut doc);
    let retry = match verdict {
        Verdict::Busy { retry_after_ms } => admission::retry_after_secs(*retry_after_ms),
        _ => 0,
    };
    let mut r = Response::new(full(doc));
    *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(httpcrypt_proto::outer::PROBLEM_TYPE),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::RETRY_AFTER, HeaderValue::from(retry));
    r
}
