//! The server's answer: a complete inner response sealed into one
//! response stream (spec §4.3, §4.5), and the inner problem response for
//! an inner error (spec §4.4).

use crate::error::{Error, Result};
use crate::inner::{self, Field, ResponseHead};
use crate::outer;
use crate::profile::Profile;
use crate::replay;
use crate::stream::{self, ResponseKey, Sealer};
use crate::suite::NONCE_LEN;

/// Seals a complete inner response: `n0 || stream` (profile 2: `random ||
/// stream`) with records of at most `record_size` bytes. `fresh` is 24
/// bytes from a CSPRNG ([`Sealer::response`]). v1 adds `Date` and
/// `Content-Length` when absent; profile 2 adds `Date` only to a 425
/// answer (`stale`, `replay`, `token_required`) and drops `Content-Length`
/// when the whole response fits in one record (spec §4.5).
///
/// An empty body keeps a stated `Content-Length` as it is in both profiles,
/// and a 304 gets none added: the answer to `HEAD`, and a 304, state the
/// representation's length (erratum E2, spec §4.3).
pub fn seal_response(
    key: ResponseKey,
    fresh: [u8; NONCE_LEN],
    head: &ResponseHead,
    body: &[u8],
    now: u64,
    record_size: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let profile = key.profile();
    let compact = profile == Profile::Compact;
    let record_size = record_size.max(1);
    let add_date = inner::field(&head.fields, "date").is_none() && (!compact || head.status == 425);
    let has_length = inner::field(&head.fields, "content-length").is_some();
    // A stated length that is not the body's (HEAD, 304) stays as stated.
    let keep_length = has_length && (body.is_empty() || head.status == 304);
    let sealer = Sealer::response(key, fresh, out);
    // The head is encoded where the first record's plaintext goes, so an
    // answer that fits one record is sealed where it lies.
    let start = out.len();
    out.reserve(stream::RECORD_OVERHEAD + 256 + body.len().min(record_size));
    out.resize(start + stream::RECORD_OVERHEAD, 0);
    let head_at = out.len();
    inner::encode_status_line(head.status, &head.reason, out);
    for f in &head.fields {
        // Profile 2 states the length itself, or leaves it out (below).
        if !(compact && !keep_length && f.is("content-length")) {
            inner::encode_field(&f.name, &f.value, out);
        }
    }
    if add_date {
        replay::with_date(now, |d| inner::encode_field("Date", d.as_bytes(), out));
    }
    let add_length = if keep_length || head.status == 304 || (has_length && !compact) {
        false
    } else if compact {
        // The head's length once ended by its empty line.
        let head_len = out.len() - head_at + 2;
        !profile.omits_content_length(head_len, body.len() as u64, record_size)
    } else {
        true
    };
    if add_length {
        let mut digits = itoa::Buffer::new();
        inner::encode_field("Content-Length", digits.format(body.len()).as_bytes(), out);
    }
    out.extend_from_slice(b"\r\n");
    if out.len() - head_at + body.len() <= record_size {
        out.extend_from_slice(body);
        let sealed = sealer.finish_in_place(&mut out[start..]);
        if sealed.is_err() {
            out.truncate(start);
        }
        return sealed;
    }
    let mut plaintext = Vec::with_capacity(out.len() - head_at + body.len());
    plaintext.extend_from_slice(&out[head_at..]);
    plaintext.extend_from_slice(body);
    out.truncate(start);
    stream::seal_all(sealer, &plaintext, record_size, out)
}

/// The inner problem response for an inner error (spec §4.4): status,
/// `application/problem+json`, and the server's `Date`.
pub fn problem_response(err: &Error) -> Option<(ResponseHead, Vec<u8>)> {
    let (status, doc) = outer::format_problem(err, &[])?;
    let mut head = ResponseHead::new(status, reason_phrase(status));
    head.fields
        .push(Field::new("Content-Type", outer::PROBLEM_TYPE));
    Some((head, doc.into_bytes()))
}

/// Reason phrases for the statuses this protocol produces.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        425 => "Too Early",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
