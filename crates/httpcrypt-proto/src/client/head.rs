//! The inner request head a client sends (spec §4.2, §4.5, §8): the
//! caller's method, target and fields, with what the protocol adds
//! (`Host`, a corrected `Date`, `Content-Length`, the token fields) and
//! without what the sealed stream frames itself.

use rand_core::RngCore;

use crate::b64;
use crate::inner::{self, Field, RequestHead};
use crate::profile::Profile;
use crate::replay;
use crate::ticket::{ASK_SHORT, DECLINE, TICKET_FIELD};
use crate::token::{self, CLIENT_RANDOM_FIELD, RANDOM_FIELD};

/// What the protocol adds to the caller's request.
#[derive(Debug, Clone, Copy)]
pub struct HeadPlan<'a> {
    /// The outer `Host` (`host[:port]`): the inner `Host` unless the caller
    /// set one (profile 1; profile 2 binds the outer one instead).
    pub authority: &'a str,
    /// The request profile: profile 2 sends neither `Host` nor `Date`
    /// unless the caller set them (spec §4.5).
    pub profile: Profile,
    /// The client's corrected clock (unix seconds) for the `Date` field.
    pub now: u64,
    /// After a `stale` answer the corrected clock replaces a `Date` the
    /// caller set.
    pub own_date: bool,
    /// The body's length when known in advance.
    pub body_len: Option<u64>,
    /// A `Random` token the server issued under this request's session key
    /// (spec §8): it proves an earlier round trip.
    pub token: Option<&'a [u8]>,
    /// Ask for a short ticket (spec §7.3): adds `Ticket: short`.
    pub ask_ticket: bool,
    /// Decline any ticket for this answer (spec §7.3): adds `Ticket: none`
    /// unless `ask_ticket`.
    pub decline_ticket: bool,
}

/// The inner request head for `method` and `target` with the caller's
/// `fields` (name, value). Fields the stream frames (`Content-Length`,
/// hop-by-hop ones) are dropped; a method that is not safe carries the
/// token, if any, and a fresh `Client-Random` drawn from `rng`.
pub fn request_head<'f>(
    method: &str,
    target: &str,
    fields: impl IntoIterator<Item = (&'f str, &'f [u8])>,
    plan: &HeadPlan<'_>,
    rng: &mut impl RngCore,
) -> RequestHead {
    let compact = plan.profile == Profile::Compact;
    let mut head = RequestHead::new(method, target);
    let mut has_host = false;
    let mut has_date = false;
    for (name, value) in fields {
        let is_date = name.eq_ignore_ascii_case("date");
        if inner::FORBIDDEN
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f))
            || name.eq_ignore_ascii_case("content-length")
            || (plan.own_date && is_date)
        {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        has_date |= is_date;
        head.fields.push(Field::new(name, value));
    }
    if !has_host && !compact {
        head.fields.insert(0, Field::new("Host", plan.authority));
    }
    if !compact && !has_date {
        head.fields
            .push(Field::new("Date", replay::format_date(plan.now)));
    }
    if let Some(len) = plan.body_len {
        if len > 0 || method == "POST" || method == "PUT" {
            head.fields
                .push(Field::new("Content-Length", len.to_string()));
        }
    }
    if plan.ask_ticket {
        head.fields.push(Field::new(TICKET_FIELD, ASK_SHORT));
    } else if plan.decline_ticket {
        head.fields.push(Field::new(TICKET_FIELD, DECLINE));
    }
    if !token::is_safe(method) {
        if let Some(t) = plan.token {
            head.fields.push(Field::new(RANDOM_FIELD, t));
        }
        let mut cr = [0u8; 24];
        rng.fill_bytes(&mut cr);
        head.fields
            .push(Field::new(CLIENT_RANDOM_FIELD, b64::encode(&cr)));
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl RngCore for Fixed {
        fn next_u32(&mut self) -> u32 {
            0
        }
        fn next_u64(&mut self) -> u64 {
            0
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            dest.fill(7);
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
            dest.fill(7);
            Ok(())
        }
    }

    fn plan(profile: Profile) -> HeadPlan<'static> {
        HeadPlan {
            authority: "example.org:8080",
            profile,
            now: 1_700_000_000,
            own_date: false,
            body_len: None,
            token: None,
            ask_ticket: false,
            decline_ticket: false,
        }
    }

    fn names(h: &RequestHead) -> Vec<&str> {
        h.fields.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn profile_1_adds_host_first_and_a_date_last() {
        let fields = [("accept", &b"*/*"[..]), ("connection", b"close")];
        let h = request_head("GET", "/x", fields, &plan(Profile::V1), &mut Fixed);
        assert_eq!(names(&h), ["Host", "accept", "Date"]);
        assert_eq!(
            inner::field(&h.fields, "host"),
            Some(&b"example.org:8080"[..])
        );
        assert_eq!(
            inner::field(&h.fields, "date"),
            Some(replay::format_date(1_700_000_000).as_bytes())
        );
    }

    #[test]
    fn profile_2_adds_neither_host_nor_date() {
        let h = request_head("GET", "/", [], &plan(Profile::Compact), &mut Fixed);
        assert!(h.fields.is_empty());
        let own = [("host", &b"other"[..]), ("date", b"d")];
        let h = request_head("GET", "/", own, &plan(Profile::Compact), &mut Fixed);
        assert_eq!(names(&h), ["host", "date"]);
    }

    #[test]
    fn the_callers_date_stays_until_the_clock_is_corrected() {
        let fields = [("date", &b"Thu, 01 Jan 1970 00:00:00 GMT"[..])];
        let h = request_head("GET", "/", fields, &plan(Profile::V1), &mut Fixed);
        assert_eq!(names(&h), ["Host", "date"]);
        let p = HeadPlan {
            own_date: true,
            ..plan(Profile::V1)
        };
        let h = request_head("GET", "/", fields, &p, &mut Fixed);
        assert_eq!(names(&h), ["Host", "Date"]);
    }

    #[test]
    fn content_length_comes_from_the_body_not_the_caller() {
        let fields = [("content-length", &b"99"[..])];
        let mut p = plan(Profile::Compact);
        p.body_len = Some(0);
        assert!(request_head("GET", "/", fields, &p, &mut Fixed)
            .fields
            .is_empty());
        for m in ["POST", "PUT"] {
            let h = request_head(m, "/", fields, &p, &mut Fixed);
            assert_eq!(inner::field(&h.fields, "content-length"), Some(&b"0"[..]));
        }
        p.body_len = Some(5);
        let h = request_head("GET", "/", fields, &p, &mut Fixed);
        assert_eq!(inner::field(&h.fields, "content-length"), Some(&b"5"[..]));
    }

    #[test]
    fn unsafe_methods_carry_the_token_and_a_client_random() {
        let mut p = plan(Profile::Compact);
        p.token = Some(b"tok");
        let h = request_head("GET", "/", [], &p, &mut Fixed);
        assert!(h.fields.is_empty());
        let h = request_head("DELETE", "/", [], &p, &mut Fixed);
        assert_eq!(names(&h), [RANDOM_FIELD, CLIENT_RANDOM_FIELD]);
        assert_eq!(inner::field(&h.fields, RANDOM_FIELD), Some(&b"tok"[..]));
        let cr = b64::encode(&[7u8; 24]);
        assert_eq!(
            inner::field(&h.fields, CLIENT_RANDOM_FIELD),
            Some(cr.as_bytes())
        );
    }
}
