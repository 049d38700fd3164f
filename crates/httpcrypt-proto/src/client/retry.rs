//! When one call sends its request again (spec §11.5, §14.5): the
//! [`Attempts`] of a call and why an attempt gave no answer ([`Retry`]).

use crate::error::Error;

/// Most admission challenges and busy answers one call follows (spec §14.5).
pub const ADMISSION_RETRIES: u32 = 3;
/// Longest wait, in seconds, that a busy answer imposes on one retry.
pub const MAX_BUSY_WAIT: u64 = 5;
/// Methods a client may send again after a connection closed before any
/// answer (RFC 9110 §9.2.2).
pub fn is_idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}

/// Why an attempt gave its caller no answer, when another may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// `unknown-key`: the keys were refreshed.
    UnknownKey,
    /// `stale`: the clock was corrected.
    Stale,
    /// `token-required`: the answer carried the token.
    TokenRequired,
    /// An admission challenge: its cookie was kept.
    Admission,
    /// `busy`: wait this many seconds.
    Busy(u64),
    /// A 400 `malformed` answer to a request that presented a short ticket
    /// (spec §7.3: its ticket key is gone): the ticket was dropped.
    ShortTicket,
}

impl Retry {
    /// The error a call ends with when it may not try again.
    pub fn error(self) -> Error {
        match self {
            Retry::UnknownKey => Error::UnknownKey,
            Retry::Stale => Error::Stale,
            Retry::TokenRequired => Error::TokenRequired,
            Retry::Admission => Error::AdmissionRequired,
            Retry::Busy(_) => Error::Busy,
            Retry::ShortTicket => Error::NoCookie,
        }
    }
}

/// The attempts of one call (spec §11.5, §14.5): `unknown-key`, `stale`
/// and `token-required` are each followed once, admission challenges and
/// busy answers together up to [`ADMISSION_RETRIES`] times, and a
/// connection closed before any answer once for an idempotent method. A
/// call whose body cannot be replayed makes one attempt.
#[derive(Debug, Clone)]
pub struct Attempts {
    sent: u32,
    replayable: bool,
    idempotent: bool,
    unknown_key: bool,
    stale: bool,
    token: bool,
    closed: bool,
    short: bool,
    admission: u32,
}

impl Attempts {
    /// A call of `method` whose body can be sent again.
    pub fn new(method: &str) -> Self {
        Attempts {
            sent: 0,
            replayable: true,
            idempotent: is_idempotent(method),
            unknown_key: false,
            stale: false,
            token: false,
            closed: false,
            short: false,
            admission: 0,
        }
    }

    /// A call whose body streams, so it is sent once.
    pub fn once() -> Self {
        Attempts {
            replayable: false,
            ..Attempts::new("POST")
        }
    }

    /// Starts an attempt; returns its number (1 for the first).
    pub fn begin(&mut self) -> u32 {
        self.sent += 1;
        self.sent
    }

    /// Whether the client's corrected clock replaces a `Date` the caller
    /// set (after a `stale` answer).
    pub fn own_date(&self) -> bool {
        self.stale
    }

    /// After an attempt that ended for `why`: `Some(seconds)` to wait
    /// before the next attempt, `None` when the call ends with
    /// [`Retry::error`].
    pub fn after(&mut self, why: Retry) -> Option<u64> {
        if !self.replayable {
            return None;
        }
        let once = |done: &mut bool| (!std::mem::replace(done, true)).then_some(0);
        match why {
            Retry::UnknownKey => once(&mut self.unknown_key),
            Retry::Stale => once(&mut self.stale),
            Retry::TokenRequired => once(&mut self.token),
            Retry::ShortTicket => once(&mut self.short),
            Retry::Admission | Retry::Busy(_) if self.admission < ADMISSION_RETRIES => {
                self.admission += 1;
                Some(match why {
                    Retry::Busy(secs) => secs.min(MAX_BUSY_WAIT),
                    _ => 0,
                })
            }
            Retry::Admission | Retry::Busy(_) => None,
        }
    }

    /// After an attempt whose connection closed before any answer (a
    /// pooled connection the peer closed while idle): whether to send
    /// again, on a new connection. Only an idempotent method, only once;
    /// otherwise the call ends with the transport's error.
    pub fn after_closed(&mut self) -> bool {
        self.replayable && self.idempotent && !std::mem::replace(&mut self.closed, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_is_followed_once() {
        for why in [
            Retry::UnknownKey,
            Retry::Stale,
            Retry::TokenRequired,
            Retry::ShortTicket,
        ] {
            let mut a = Attempts::new("POST");
            assert_eq!(a.after(why), Some(0), "{why:?}");
            assert_eq!(a.after(why), None, "{why:?}");
        }
        // Different answers each get their own retry.
        let mut a = Attempts::new("GET");
        for why in [Retry::UnknownKey, Retry::Stale, Retry::TokenRequired] {
            assert_eq!(a.after(why), Some(0), "{why:?}");
        }
        assert!(a.after_closed());
    }

    #[test]
    fn the_corrected_clock_takes_over_after_stale() {
        let mut a = Attempts::new("GET");
        assert_eq!(a.begin(), 1);
        assert!(!a.own_date());
        a.after(Retry::Stale);
        assert_eq!(a.begin(), 2);
        assert!(a.own_date());
    }

    #[test]
    fn admission_and_busy_share_three_retries_and_busy_waits_at_most_five_seconds() {
        let mut a = Attempts::new("GET");
        assert_eq!(a.after(Retry::Admission), Some(0));
        assert_eq!(a.after(Retry::Busy(60)), Some(MAX_BUSY_WAIT));
        assert_eq!(a.after(Retry::Busy(2)), Some(2));
        assert_eq!(a.after(Retry::Admission), None);
        assert_eq!(a.after(Retry::Busy(1)), None);
        assert_eq!(Retry::Admission.error(), Error::AdmissionRequired);
        assert_eq!(Retry::Busy(1).error(), Error::Busy);
        assert_eq!(Retry::Stale.error(), Error::Stale);
    }

    #[test]
    fn a_closed_connection_is_retried_once_for_idempotent_methods_only() {
        for m in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"] {
            let mut a = Attempts::new(m);
            assert!(a.after_closed(), "{m}");
            assert!(!a.after_closed(), "{m}");
        }
        for m in ["POST", "PATCH"] {
            assert!(!Attempts::new(m).after_closed(), "{m}");
        }
    }

    #[test]
    fn a_streaming_call_is_sent_once() {
        let mut a = Attempts::once();
        for why in [
            Retry::UnknownKey,
            Retry::Stale,
            Retry::TokenRequired,
            Retry::Admission,
            Retry::Busy(0),
        ] {
            assert_eq!(a.after(why), None, "{why:?}");
        }
        assert!(!a.after_closed());
    }
}
