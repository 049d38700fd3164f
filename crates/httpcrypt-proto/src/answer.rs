//! The head of a sealed answer to a service's response, planned in one
//! place (spec §4.3, §4.5, erratum E2): which `Content-Length` it states,
//! whether the server adds `Date`, and when profile 2 leaves the length
//! out. A server that streams the service's answer writes the head through
//! [`AnswerHead`]; answers the protocol makes itself, whole, are sealed by
//! `server::seal_response`.

use crate::inner::ResponseHeadWriter;
use crate::profile::Profile;
use crate::replay;

/// The inner head of a sealed answer to a service's response, written in
/// three parts: the service's fields ([`AnswerHead::service_field`]), then
/// the protocol's own ([`AnswerHead::field`]: a ticket, the token), then
/// [`AnswerHead::finish`].
///
/// - The answer to `HEAD`, and a 304, state the representation's length as
///   the service declared it and carry no body (erratum E2).
/// - Any other answer states the body's exact length when it is known,
///   else the declared one; a 204 states none.
/// - v1 states the length, and adds `Date` when the service gave none,
///   right after the service's fields.
/// - Profile 2 adds no `Date` to a service's answer, and states the length
///   last, and only when head and body do not go out as one FINAL record of
///   an exactly sized body.
#[derive(Debug)]
pub struct AnswerHead {
    head: ResponseHeadWriter,
    profile: Profile,
    bodiless: bool,
    /// The body's exact length, when known.
    exact: Option<u64>,
    /// The length the head states, where it states one.
    length: Option<u64>,
    has_date: bool,
}

impl AnswerHead {
    /// A head for status `status` (`reason`) under `profile`. `bodiless`:
    /// the answer carries no body (`inner::is_bodiless_answer`); `exact`:
    /// the body's exact length, when known; `declared`: the length the
    /// service stated. `capacity` bytes are reserved, so that a caller can
    /// append the start of the body without a reallocation.
    pub fn new(
        profile: Profile,
        status: u16,
        reason: &str,
        bodiless: bool,
        exact: Option<u64>,
        declared: Option<u64>,
        capacity: usize,
    ) -> Self {
        let length = if bodiless {
            declared
        } else {
            exact.or(declared).filter(|_| status != 204)
        };
        AnswerHead {
            head: ResponseHeadWriter::with_capacity(status, reason, capacity),
            profile,
            bodiless,
            exact,
            length,
            has_date: false,
        }
    }

    /// Appends a field of the service's answer (the caller leaves out its
    /// hop-by-hop fields, its `Content-Length`, and the fields
    /// `inner::is_service_response_field` refuses).
    pub fn service_field(&mut self, name: &str, value: &[u8]) {
        self.has_date |= name.eq_ignore_ascii_case("date");
        self.head.field(name, value);
    }

    /// Ends the service's fields: v1 states the length here, and adds the
    /// server's `Date` (at `now`) when the service gave none.
    pub fn end_service_fields(&mut self, now: u64) {
        if self.profile == Profile::Compact {
            return;
        }
        if let Some(len) = self.length {
            self.head
                .field("Content-Length", itoa::Buffer::new().format(len).as_bytes());
        }
        if !self.has_date {
            replay::with_date(now, |d| self.head.field("Date", d.as_bytes()));
        }
    }

    /// Appends a field of the protocol's own (a ticket, the token).
    pub fn field(&mut self, name: &str, value: &[u8]) {
        self.head.field(name, value);
    }

    /// The encoded head, ended by its empty line. Profile 2 states the
    /// length here, unless head and body fit one record of `record_size`.
    pub fn finish(mut self, record_size: usize) -> Vec<u8> {
        if let (Some(len), Profile::Compact) = (self.length, self.profile) {
            // Only an exact length lays the stream out in full records.
            let omit = !self.bodiless
                && self.exact.is_some_and(|e| {
                    self.profile
                        .omits_content_length(self.head.finished_len(), e, record_size)
                });
            if !omit {
                self.head
                    .field("Content-Length", itoa::Buffer::new().format(len).as_bytes());
            }
        }
        self.head.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(profile: Profile, status: u16, bodiless: bool, exact: Option<u64>) -> String {
        let mut h = AnswerHead::new(profile, status, "R", bodiless, exact, Some(7), 64);
        h.service_field("Content-Type", b"text/plain");
        h.end_service_fields(1_790_000_000);
        h.field("Ticket", b"t");
        String::from_utf8(h.finish(16_384)).unwrap()
    }

    /// The length and date rules of both profiles, for a plain answer, a
    /// bodiless one (HEAD, 304), a 204, and a streamed body.
    #[test]
    fn the_head_states_length_and_date_by_profile() {
        let date = format!("Date: {}\r\n", replay::format_date(1_790_000_000));
        assert_eq!(
            head(Profile::V1, 200, false, Some(3)),
            format!("HTTP/1.1 200 R\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n{date}Ticket: t\r\n\r\n")
        );
        assert_eq!(
            head(Profile::V1, 304, true, Some(0)),
            format!("HTTP/1.1 304 R\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n{date}Ticket: t\r\n\r\n")
        );
        assert_eq!(
            head(Profile::V1, 204, false, Some(0)),
            format!("HTTP/1.1 204 R\r\nContent-Type: text/plain\r\n{date}Ticket: t\r\n\r\n")
        );
        assert_eq!(
            head(Profile::V1, 200, false, None),
            format!("HTTP/1.1 200 R\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n{date}Ticket: t\r\n\r\n")
        );
        // Profile 2: no Date; the length only when not one FINAL record.
        assert_eq!(
            head(Profile::Compact, 200, false, Some(3)),
            "HTTP/1.1 200 R\r\nContent-Type: text/plain\r\nTicket: t\r\n\r\n"
        );
        assert_eq!(
            head(Profile::Compact, 200, false, None),
            "HTTP/1.1 200 R\r\nContent-Type: text/plain\r\nTicket: t\r\nContent-Length: 7\r\n\r\n"
        );
        assert_eq!(
            head(Profile::Compact, 200, true, Some(0)),
            "HTTP/1.1 200 R\r\nContent-Type: text/plain\r\nTicket: t\r\nContent-Length: 7\r\n\r\n"
        );
        // A service's own Date stays, and no second one is added.
        let mut h = AnswerHead::new(Profile::V1, 200, "R", false, Some(0), None, 64);
        h.service_field("date", b"x");
        h.end_service_fields(1_790_000_000);
        assert_eq!(
            String::from_utf8(h.finish(16_384)).unwrap(),
            "HTTP/1.1 200 R\r\ndate: x\r\nContent-Length: 0\r\n\r\n"
        );
    }
}
