//! Parsing a complete inner head (httparse) under the inner limits, and the
//! field rules every inner head obeys (spec §4.3): the [`Head`] trait and its
//! owned request and response heads.

use crate::error::{Error, Result};
use crate::limits::Limits;

use super::{field, is_bodiless_answer, Field, RequestHead, ResponseHead};

/// Inner fields that must not appear (spec §4.3): the stream does the framing.
pub const FORBIDDEN: &[&str] = &["transfer-encoding", "connection", "keep-alive", "upgrade"];

/// A message head that [`Decoder`](super::Decoder) can parse.
pub trait Head: Sized {
    /// Parses a complete head (through the blank line) under `limits`.
    fn parse(head: &[u8], limits: &Limits) -> Result<Self>;
    /// Whether a parsed head keeps the head's bytes (then
    /// [`Decoder`](super::Decoder) may hand it the bytes it holds through
    /// [`Head::parse_owned`] instead of a view).
    const OWNS_BYTES: bool = false;
    /// [`Head::parse`] of bytes the head may keep.
    fn parse_owned(head: bytes::Bytes, limits: &Limits) -> Result<Self> {
        Self::parse(&head, limits)
    }
    /// The value of the first field named `name` (ASCII case-insensitive).
    fn field(&self, name: &str) -> Option<&[u8]>;
    /// Whether the message has no body whatever its `Content-Length` says:
    /// a 304, whose `Content-Length` is the representation's (erratum E2,
    /// spec §4.3).
    fn is_bodiless(&self) -> bool {
        false
    }
}

/// Checks that shared by request and response heads: CRLF line ends only.
fn check_line_ends(head: &[u8]) -> Result<()> {
    // Every CR is followed by LF and every LF preceded by CR.
    let mut i = 0;
    while let Some(off) = memchr::memchr2(b'\r', b'\n', &head[i..]) {
        let at = i + off;
        if head[at] == b'\n' || head.get(at + 1) != Some(&b'\n') {
            return Err(Error::MalformedInner);
        }
        i = at + 2;
    }
    if head.first().is_some_and(|b| b.is_ascii_whitespace()) {
        return Err(Error::MalformedInner);
    }
    Ok(())
}

/// The field rules of every inner head (spec §4.3): no framing fields, at
/// most one `Content-Length`, made of digits.
fn check_fields(raw: &[httparse::Header<'_>]) -> Result<()> {
    let mut content_length = 0;
    for h in raw {
        if FORBIDDEN.iter().any(|f| h.name.eq_ignore_ascii_case(f)) {
            return Err(Error::ForbiddenHeader);
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            content_length += 1;
            if content_length > 1 || parse_content_length(h.value).is_none() {
                return Err(Error::ContentLengthMismatch);
            }
        }
    }
    Ok(())
}

fn convert_fields(raw: &[httparse::Header<'_>]) -> Result<Vec<Field>> {
    check_fields(raw)?;
    Ok(owned_fields(raw))
}

fn owned_fields(raw: &[httparse::Header<'_>]) -> Vec<Field> {
    raw.iter().map(|h| Field::new(h.name, h.value)).collect()
}

/// Digits only, at most 19 of them (spec §11).
pub(super) fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Field slots kept on the stack; larger limits use the heap.
const STACK_FIELDS: usize = 100;

fn field_storage<'s, 'h>(
    stack: &'s mut [httparse::Header<'h>; STACK_FIELDS],
    heap: &'s mut Vec<httparse::Header<'h>>,
    n: usize,
) -> &'s mut [httparse::Header<'h>] {
    if n <= STACK_FIELDS {
        &mut stack[..n]
    } else {
        heap.resize(n, httparse::EMPTY_HEADER);
        &mut heap[..]
    }
}

fn map_parse_error(e: httparse::Error) -> Error {
    match e {
        httparse::Error::TooManyHeaders => Error::InnerHeadTooLarge,
        _ => Error::MalformedInner,
    }
}

/// Parses a complete inner request head and hands its parts to `f`.
pub(super) fn parse_request<R>(
    head: &[u8],
    limits: &Limits,
    f: impl FnOnce(&str, &str, &[httparse::Header<'_>]) -> Result<R>,
) -> Result<R> {
    check_line_ends(head)?;
    // Slots httparse fills without their being initialised first (a
    // server parses one inner request head per request).
    let mut stack = [const { std::mem::MaybeUninit::uninit() }; STACK_FIELDS];
    let mut heap = Vec::new();
    let slots = if limits.max_inner_fields <= STACK_FIELDS {
        &mut stack[..limits.max_inner_fields]
    } else {
        heap.resize_with(limits.max_inner_fields, std::mem::MaybeUninit::uninit);
        &mut heap[..]
    };
    let mut req = httparse::Request::new(&mut []);
    match req
        .parse_with_uninit_headers(head, slots)
        .map_err(map_parse_error)?
    {
        httparse::Status::Complete(n) if n == head.len() => {}
        _ => return Err(Error::MalformedInner),
    }
    if req.version != Some(1) {
        return Err(Error::MalformedInner);
    }
    let method = req.method.ok_or(Error::MalformedInner)?;
    let target = req.path.ok_or(Error::MalformedInner)?;
    check_fields(req.headers)?;
    f(method, target, req.headers)
}

impl Head for RequestHead {
    fn parse(head: &[u8], limits: &Limits) -> Result<Self> {
        parse_request(head, limits, |method, target, raw| {
            Ok(RequestHead {
                method: method.to_string(),
                target: target.to_string(),
                fields: owned_fields(raw),
            })
        })
    }

    fn field(&self, name: &str) -> Option<&[u8]> {
        field(&self.fields, name)
    }
}

impl Head for ResponseHead {
    fn parse(head: &[u8], limits: &Limits) -> Result<Self> {
        check_line_ends(head)?;
        let mut stack = [httparse::EMPTY_HEADER; STACK_FIELDS];
        let mut heap = Vec::new();
        let mut rsp = httparse::Response::new(field_storage(
            &mut stack,
            &mut heap,
            limits.max_inner_fields,
        ));
        match rsp.parse(head).map_err(map_parse_error)? {
            httparse::Status::Complete(n) if n == head.len() => {}
            _ => return Err(Error::MalformedInner),
        }
        if rsp.version != Some(1) {
            return Err(Error::MalformedInner);
        }
        let status = rsp.code.ok_or(Error::MalformedInner)?;
        if status < 200 {
            return Err(Error::MalformedInner);
        }
        let reason = rsp.reason.unwrap_or("").to_string();
        let fields = convert_fields(rsp.headers)?;
        Ok(ResponseHead {
            status,
            reason,
            fields,
        })
    }

    fn field(&self, name: &str) -> Option<&[u8]> {
        field(&self.fields, name)
    }

    fn is_bodiless(&self) -> bool {
        is_bodiless_answer("", self.status)
    }
}
