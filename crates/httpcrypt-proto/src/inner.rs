//! The inner HTTP/1.1 message carried by a sealed stream (spec §4.3):
//! encode, incremental parse (httparse) under the inner limits, and the
//! request a server hands to its service, built from the inner message
//! alone (erratum E1).

use crate::error::{Error, Result};
use crate::limits::Limits;

/// One header field. Names keep their case; comparisons ignore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name.
    pub name: String,
    /// Field value (bytes: HTTP allows obs-text).
    pub value: Vec<u8>,
}

impl Field {
    /// A field from a name and value.
    pub fn new(name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Field {
            name: name.into(),
            value: value.into(),
        }
    }

    /// Whether this field is named `name` (ASCII case-insensitive).
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }
}

/// The value of the first field named `name`.
pub fn field<'a>(fields: &'a [Field], name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|f| f.is(name))
        .map(|f| f.value.as_slice())
}

/// Inner fields that must not appear (spec §4.3): the stream does the framing.
pub const FORBIDDEN: &[&str] = &["transfer-encoding", "connection", "keep-alive", "upgrade"];

/// Whether an inner answer to a `request_method` request with `status`
/// carries the representation's `Content-Length` (if any) and an empty body:
/// the answer to `HEAD`, and a 304 (erratum E2, spec §4.3). Every other
/// answer's `Content-Length` is its body's length.
pub fn is_bodiless_answer(request_method: &str, status: u16) -> bool {
    request_method == "HEAD" || status == 304
}

/// The head of an inner request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method token.
    pub method: String,
    /// Request target (origin form, or whatever the client sent).
    pub target: String,
    /// Header fields in order.
    pub fields: Vec<Field>,
}

/// The head of an inner response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code (200–999; informational codes are refused).
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Header fields in order.
    pub fields: Vec<Field>,
}

fn encode_fields(fields: &[Field], out: &mut Vec<u8>) {
    for f in fields {
        encode_field(&f.name, &f.value, out);
    }
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn encode_field(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn encode_status_line(status: u16, reason: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Encodes a response head field by field, for callers that hold the fields
/// in a store of their own (a server's header map) and would otherwise copy
/// them into a [`ResponseHead`] first. The bytes equal
/// [`ResponseHead::encode`] of the same status, reason and fields.
#[derive(Debug)]
pub struct ResponseHeadWriter {
    out: Vec<u8>,
}

impl ResponseHeadWriter {
    /// Starts with the status line.
    pub fn new(status: u16, reason: &str) -> Self {
        Self::with_capacity(status, reason, 256)
    }

    /// [`ResponseHeadWriter::new`] with room for `capacity` bytes, so that a
    /// caller can append the body after the head without a reallocation.
    pub fn with_capacity(status: u16, reason: &str, capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        encode_status_line(status, reason, &mut out);
        ResponseHeadWriter { out }
    }

    /// Appends the field `name: value`.
    pub fn field(&mut self, name: &str, value: &[u8]) {
        encode_field(name, value, &mut self.out);
    }

    /// Bytes the head will have when finished now (its empty line included).
    pub fn finished_len(&self) -> usize {
        self.out.len() + 2
    }

    /// The head, ended by its empty line.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(b"\r\n");
        self.out
    }
}

impl RequestHead {
    /// A head with no fields.
    pub fn new(method: impl Into<String>, target: impl Into<String>) -> Self {
        RequestHead {
            method: method.into(),
            target: target.into(),
            fields: Vec::new(),
        }
    }

    /// Appends `METHOD SP target SP HTTP/1.1 CRLF fields CRLF` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        encode_fields(&self.fields, out);
    }
}

impl ResponseHead {
    /// A head with no fields.
    pub fn new(status: u16, reason: impl Into<String>) -> Self {
        ResponseHead {
            status,
            reason: reason.into(),
            fields: Vec::new(),
        }
    }

    /// Appends `HTTP/1.1 SP status SP reason CRLF fields CRLF` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_status_line(self.status, &self.reason, out);
        encode_fields(&self.fields, out);
    }
}

/// A message head that [`Decoder`] can parse.
pub trait Head: Sized {
    /// Parses a complete head (through the blank line) under `limits`.
    fn parse(head: &[u8], limits: &Limits) -> Result<Self>;
    /// Whether a parsed head keeps the head's bytes (then [`Decoder`] may
    /// hand it the bytes it holds through [`Head::parse_owned`] instead of a
    /// view).
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
fn parse_content_length(v: &[u8]) -> Option<u64> {
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
fn parse_request<R>(
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

/// Where a part of a [`PackedRequestHead`] lies in its bytes.
type Span = (u32, u32);

/// An inner request head kept as the bytes it was parsed from, with where
/// its method, target and fields lie in them: one allocation for the whole
/// head instead of one per string, and values a server hands on as views
/// of those bytes. Parsed and checked exactly as [`RequestHead`] is.
#[derive(Debug, Clone)]
pub struct PackedRequestHead {
    bytes: bytes::Bytes,
    method: Span,
    target: Span,
    fields: smallvec::SmallVec<[(Span, Span); 6]>,
}

impl PackedRequestHead {
    fn at(&self, (a, b): Span) -> &[u8] {
        &self.bytes[a as usize..b as usize]
    }

    fn str_at(&self, span: Span) -> &str {
        // Spans of names, method and target come from httparse's `&str`s.
        std::str::from_utf8(self.at(span)).unwrap_or_default()
    }

    /// The method token.
    pub fn method(&self) -> &str {
        self.str_at(self.method)
    }

    /// The request target.
    pub fn target(&self) -> &str {
        self.str_at(self.target)
    }

    /// The request target as a view of the head's bytes.
    pub fn target_bytes(&self) -> bytes::Bytes {
        self.bytes
            .slice(self.target.0 as usize..self.target.1 as usize)
    }

    /// The fields in order, names as sent.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.fields
            .iter()
            .map(|&(n, v)| (self.str_at(n), self.at(v)))
    }

    /// The fields in order, names as bytes and values as views of the
    /// head's bytes.
    pub fn shared_fields(&self) -> impl Iterator<Item = (&[u8], bytes::Bytes)> + '_ {
        self.fields
            .iter()
            .map(|&(n, (a, b))| (self.at(n), self.bytes.slice(a as usize..b as usize)))
    }

    /// How many fields the head has.
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// Whether some field is named `name` (ASCII case-insensitive).
    pub fn has_field(&self, name: &str) -> bool {
        Head::field(self, name).is_some()
    }

    /// The same head with owned parts.
    pub fn to_head(&self) -> RequestHead {
        RequestHead {
            method: self.method().to_string(),
            target: self.target().to_string(),
            fields: self.fields().map(|(n, v)| Field::new(n, v)).collect(),
        }
    }
}

impl Head for PackedRequestHead {
    const OWNS_BYTES: bool = true;

    fn parse(head: &[u8], limits: &Limits) -> Result<Self> {
        Self::parse_owned(bytes::Bytes::copy_from_slice(head), limits)
    }

    fn parse_owned(bytes: bytes::Bytes, limits: &Limits) -> Result<Self> {
        let head = &bytes[..];
        let base = head.as_ptr() as usize;
        // Offsets of httparse's slices, which borrow from `head` (an empty
        // one may point anywhere); a head longer than 4 GiB is refused.
        let span = |part: &[u8]| -> Result<Span> {
            let a = (part.as_ptr() as usize)
                .checked_sub(base)
                .filter(|a| a + part.len() <= head.len());
            let Some(a) = a else {
                return if part.is_empty() {
                    Ok((0, 0))
                } else {
                    Err(Error::MalformedInner)
                };
            };
            let b = a + part.len();
            Ok((
                u32::try_from(a).map_err(|_| Error::InnerHeadTooLarge)?,
                u32::try_from(b).map_err(|_| Error::InnerHeadTooLarge)?,
            ))
        };
        let (method, target, fields) = parse_request(head, limits, |method, target, raw| {
            let mut fields = smallvec::SmallVec::with_capacity(raw.len());
            for h in raw {
                fields.push((span(h.name.as_bytes())?, span(h.value)?));
            }
            Ok((span(method.as_bytes())?, span(target.as_bytes())?, fields))
        })?;
        Ok(PackedRequestHead {
            method,
            target,
            fields,
            bytes,
        })
    }

    fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|&&(n, _)| self.at(n).eq_ignore_ascii_case(name.as_bytes()))
            .map(|&(_, v)| self.at(v))
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

/// What a [`Decoder`] yields.
#[derive(Debug, PartialEq, Eq)]
pub enum InnerEvent<'a, H> {
    /// The parsed head (exactly once, first).
    Head(H),
    /// Body bytes (never empty).
    Body(&'a [u8]),
}

/// Incremental inner-message decoder: push stream plaintext in with
/// [`Decoder::receive`], pull the head and body chunks out with
/// [`Decoder::next_event`], and call [`Decoder::finish`] when the stream ends.
#[derive(Debug)]
pub struct Decoder<H> {
    limits: Limits,
    // A head that keeps its bytes (`Head::OWNS_BYTES`) may take them from
    // here without a copy.
    buf: bytes::BytesMut,
    pos: usize,
    scanned: usize,
    head_done: bool,
    content_length: Option<u64>,
    body_len: u64,
    // The message answers a HEAD request: its `Content-Length` is the
    // representation's and its body is empty (erratum E2).
    answers_head: bool,
    failed: Option<Error>,
    _head: core::marker::PhantomData<H>,
}

/// Decoder for inner requests (server side).
pub type RequestDecoder = Decoder<RequestHead>;
/// Decoder for inner responses (client side).
pub type ResponseDecoder = Decoder<ResponseHead>;

impl<H: Head> Decoder<H> {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            buf: bytes::BytesMut::new(),
            pos: 0,
            scanned: 0,
            head_done: false,
            content_length: None,
            body_len: 0,
            answers_head: false,
            failed: None,
            _head: core::marker::PhantomData,
        }
    }

    /// Pushes plaintext.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.pos > 0 {
            bytes::Buf::advance(&mut self.buf, self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn fail(&mut self, e: Error) -> Error {
        self.failed = Some(e.clone());
        self.buf = bytes::BytesMut::new();
        self.pos = 0;
        e
    }

    /// The next event, or `Ok(None)` when more plaintext is needed.
    pub fn next_event(&mut self) -> Result<Option<InnerEvent<'_, H>>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.head_done {
            let from = self.scanned.saturating_sub(3);
            let end = match find_head_end(&self.buf[from..]) {
                Some(i) => from + i + 4,
                None => {
                    self.scanned = self.buf.len();
                    if self.buf.len() >= self.limits.max_inner_head {
                        return Err(self.fail(Error::InnerHeadTooLarge));
                    }
                    return Ok(None);
                }
            };
            if end > self.limits.max_inner_head {
                return Err(self.fail(Error::InnerHeadTooLarge));
            }
            // A shared head keeps the whole buffer alive while it lives, so
            // the buffer is shared only when the head is most of it (a GET's
            // stream is its head alone); else the head copies its bytes.
            let parsed = if H::OWNS_BYTES && self.buf.capacity() <= 2 * end {
                H::parse_owned(self.buf.split_to(end).freeze(), &self.limits)
            } else {
                self.pos = end;
                H::parse(&self.buf[..end], &self.limits)
            };
            let head = match parsed {
                Ok(h) => h,
                Err(e) => return Err(self.fail(e)),
            };
            // An answer to HEAD and a 304 carry the representation's length
            // (any valid one, checked by the head's parser) and no body.
            self.content_length = if self.answers_head || head.is_bodiless() {
                Some(0)
            } else {
                head.field("content-length").and_then(parse_content_length)
            };
            self.head_done = true;
            return Ok(Some(InnerEvent::Head(head)));
        }
        let avail = self.buf.len() - self.pos;
        if avail == 0 {
            return Ok(None);
        }
        self.body_len += avail as u64;
        if self.content_length.is_some_and(|cl| self.body_len > cl) {
            return Err(self.fail(Error::ContentLengthMismatch));
        }
        let start = self.pos;
        self.pos = self.buf.len();
        Ok(Some(InnerEvent::Body(&self.buf[start..])))
    }

    /// Call at the end of the stream: the head must be complete and the body
    /// must match a declared Content-Length. Pull all events before calling.
    pub fn finish(self) -> Result<()> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if !self.head_done {
            return Err(Error::MalformedInner);
        }
        if self.pos != self.buf.len() {
            return Err(Error::MalformedInner);
        }
        match self.content_length {
            Some(cl) if cl != self.body_len => Err(Error::ContentLengthMismatch),
            _ => Ok(()),
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\r', buf).find(|&i| buf[i..].starts_with(b"\r\n\r\n"))
}

impl Decoder<ResponseHead> {
    /// A decoder for the answer to a request with method `request_method`:
    /// the answer to `HEAD` carries the length a GET would get, with an
    /// empty body (erratum E2, spec §4.3); any body is refused with
    /// `content_length_mismatch`.
    pub fn answering(request_method: &str, limits: Limits) -> Self {
        let mut d = Self::new(limits);
        d.answers_head = is_bodiless_answer(request_method, 0);
        d
    }
}

/// A complete inner message decoded from whole plaintext.
pub fn decode_all<H: Head>(plaintext: &[u8], limits: &Limits) -> Result<(H, Vec<u8>)> {
    drain(Decoder::<H>::new(*limits), plaintext)
}

/// A complete inner response to a `request_method` request decoded from
/// whole plaintext ([`Decoder::answering`]).
pub fn decode_response(
    plaintext: &[u8],
    request_method: &str,
    limits: &Limits,
) -> Result<(ResponseHead, Vec<u8>)> {
    drain(Decoder::answering(request_method, *limits), plaintext)
}

fn drain<H: Head>(mut d: Decoder<H>, plaintext: &[u8]) -> Result<(H, Vec<u8>)> {
    d.receive(plaintext)?;
    let mut head = None;
    let mut body = Vec::new();
    while let Some(ev) = d.next_event()? {
        match ev {
            InnerEvent::Head(h) => head = Some(h),
            InnerEvent::Body(b) => body.extend_from_slice(b),
        }
    }
    d.finish()?;
    Ok((head.ok_or(Error::MalformedInner)?, body))
}

/// Inner request fields that belong to the protocol, not to the service
/// (spec §4.3, erratum E1): the freshness `Date` (§8.1), the token fields
/// `Client-Random` and `Random` (§8.4) and `Ticket` (§7.2). A server
/// consumes them; they never reach the service.
pub const PROTOCOL_FIELDS: &[&str] = &["date", "client-random", "random", "ticket"];

/// Whether the inner request field `name` is handed to the service (spec
/// §4.3): every inner field but the protocol's own ([`PROTOCOL_FIELDS`]).
pub fn is_service_field(name: &str) -> bool {
    !PROTOCOL_FIELDS.iter().any(|p| p.eq_ignore_ascii_case(name))
}

/// Inner response fields that only the server itself writes (spec §7.2,
/// §8.4): a service's own field of one of these names is dropped, so that
/// the client never takes it for the server's ticket or token.
pub const PROTOCOL_RESPONSE_FIELDS: &[&str] = &["ticket", "random"];

/// Whether a service's response field `name` goes into the inner response:
/// every field but [`PROTOCOL_RESPONSE_FIELDS`].
pub fn is_service_response_field(name: &str) -> bool {
    !PROTOCOL_RESPONSE_FIELDS
        .iter()
        .any(|p| p.eq_ignore_ascii_case(name))
}

/// The `Host` the service sees (spec §4.3, erratum E1): the inner `Host`
/// if the inner head has one; else the outer `Host` where the stream's
/// associated data binds it (`bound`, profile 2, §4.5); else the name the
/// server is configured with for the mount; else none. An outer `Host`
/// that nothing authenticated never reaches the service.
pub fn service_host<'a>(
    inner: Option<&'a [u8]>,
    bound: Option<&'a [u8]>,
    configured: Option<&'a [u8]>,
) -> Option<&'a [u8]> {
    inner.or(bound).or(configured)
}

/// The fields of the request the service sees (spec §4.3, erratum E1),
/// built from authenticated data alone: the `Host` of [`service_host`]
/// first when the inner head has none, then the inner fields in their
/// order, minus the protocol's own. No outer field takes part; an
/// operator's allow-listed outer fields travel apart from these.
pub fn service_fields(
    inner: &[Field],
    bound: Option<&[u8]>,
    configured: Option<&[u8]>,
) -> Vec<Field> {
    let mut out = Vec::with_capacity(inner.len() + 1);
    if field(inner, "host").is_none() {
        if let Some(h) = service_host(None, bound, configured) {
            out.push(Field::new("Host", h));
        }
    }
    out.extend(inner.iter().filter(|f| is_service_field(&f.name)).cloned());
    out
}

/// The prefix under which a gateway hands allow-listed outer fields to its
/// upstream by default (erratum E1: never under their own names). A
/// gateway also drops inner fields that start with its prefix, so a client
/// cannot pose as the proxy in front of the server.
pub const DEFAULT_OUTER_PREFIX: &str = "Httpcrypt-Outer-";

/// The tokens of `Connection` values (comma-separated, whitespace trimmed,
/// case kept), without allocating.
pub fn connection_token_iter<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> impl Iterator<Item = &'a [u8]> {
    values
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packed head parses and refuses exactly what [`RequestHead`] does,
    /// and holds the same method, target and fields.
    #[test]
    fn a_packed_head_is_the_request_head() {
        let heads: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nDate: Tue, 24 Nov 2026 20:00:00 GMT\r\n\r\n",
            b"POST /p HTTP/1.1\r\nContent-Length: 3\r\nX-Empty:\r\nX-Sp:   v  \r\n\r\nabc",
            b"POST /p HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc",
            b"POST /p HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nKeep-Alive: 1\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
            b"GET / HTTP/1.1\nHost: x\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nObs: a\x80b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n",
        ];
        let limits = Limits::default();
        for &h in heads {
            let owned = decode_all::<RequestHead>(h, &limits);
            let packed = decode_all::<PackedRequestHead>(h, &limits);
            let packed = packed.map(|(p, body)| {
                let fields: Vec<Field> = p.fields().map(|(n, v)| Field::new(n, v)).collect();
                assert_eq!(fields, p.to_head().fields);
                assert_eq!(p.target_bytes(), p.target().as_bytes());
                for ((n, v), (m, w)) in p.fields().zip(p.shared_fields()) {
                    assert_eq!((n.as_bytes(), v), (m, &w[..]));
                    assert!(p.has_field(&n.to_ascii_uppercase()));
                    assert_eq!(p.field(n), owned.as_ref().ok().and_then(|o| o.0.field(n)));
                }
                (p.to_head(), body)
            });
            assert_eq!(packed, owned, "{:?}", String::from_utf8_lossy(h));
        }
        let tight = Limits {
            max_inner_fields: 1,
            ..limits
        };
        let two = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n";
        assert_eq!(
            decode_all::<PackedRequestHead>(two, &tight).map(|(p, b)| (p.to_head(), b)),
            decode_all::<RequestHead>(two, &tight)
        );
    }

    /// The end of a head is the first `CRLF CRLF`, on every string up to 8
    /// bytes over CR, LF and one other byte.
    #[test]
    fn the_head_end_is_the_first_empty_line() {
        fn all(s: &mut Vec<u8>, depth: usize) {
            let want = s.windows(4).position(|w| w == b"\r\n\r\n");
            assert_eq!(find_head_end(s), want, "{s:?}");
            if depth == 0 {
                return;
            }
            for c in [b'\r', b'\n', b'a'] {
                s.push(c);
                all(s, depth - 1);
                s.pop();
            }
        }
        all(&mut Vec::new(), 8);
    }

    #[test]
    fn the_head_writer_encodes_like_a_response_head() {
        let mut head = ResponseHead::new(404, "Not Found");
        head.fields.push(Field::new("Content-Type", "text/plain"));
        head.fields
            .push(Field::new("Date", "Tue, 24 Nov 2026 20:00:00 GMT"));
        let mut want = Vec::new();
        head.encode(&mut want);
        let mut w = ResponseHeadWriter::new(404, "Not Found");
        for f in &head.fields {
            w.field(&f.name, &f.value);
        }
        assert_eq!(w.finish(), want);
    }

    fn req(bytes: &[u8]) -> Result<(RequestHead, Vec<u8>)> {
        decode_all::<RequestHead>(bytes, &Limits::default())
    }

    #[test]
    fn request_round_trip() {
        let mut head = RequestHead::new("POST", "/api?q=1");
        head.fields.push(Field::new("Content-Length", "5"));
        head.fields.push(Field::new("X-A", "b"));
        let mut bytes = Vec::new();
        head.encode(&mut bytes);
        bytes.extend_from_slice(b"hello");
        let (h, body) = req(&bytes).unwrap();
        assert_eq!(h, head);
        assert_eq!(body, b"hello");
    }

    #[test]
    fn inner_rules() {
        assert_eq!(
            req(b"GET / HTTP/1.0\r\n\r\n").err(),
            Some(Error::MalformedInner)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\n\n").err(),
            Some(Error::MalformedInner)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nA: b\n\r\n").err(),
            Some(Error::MalformedInner)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n").err(),
            Some(Error::MalformedInner)
        );
        assert_eq!(
            req(b"\r\nGET / HTTP/1.1\r\n\r\n").err(),
            Some(Error::MalformedInner)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").err(),
            Some(Error::ForbiddenHeader)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").err(),
            Some(Error::ForbiddenHeader)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nContent-Length: 2\r\n\r\nabc").err(),
            Some(Error::ContentLengthMismatch)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nContent-Length: 4\r\n\r\nabc").err(),
            Some(Error::ContentLengthMismatch)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc").err(),
            Some(Error::ContentLengthMismatch)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc").err(),
            Some(Error::ContentLengthMismatch)
        );
        assert_eq!(
            req(b"GET / HTTP/1.1\r\n").err(),
            Some(Error::MalformedInner)
        );
        assert!(req(b"GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").is_ok());
    }

    #[test]
    fn head_limits() {
        let limits = Limits {
            max_inner_fields: 2,
            max_inner_head: 64,
            ..Limits::default()
        };
        let three = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(
            decode_all::<RequestHead>(three, &limits).err(),
            Some(Error::InnerHeadTooLarge)
        );
        let long = [b"GET /".as_slice(), &[b'a'; 80], b" HTTP/1.1\r\n\r\n"].concat();
        assert_eq!(
            decode_all::<RequestHead>(&long, &limits).err(),
            Some(Error::InnerHeadTooLarge)
        );
    }

    #[test]
    fn responses() {
        let (h, b) = decode_all::<ResponseHead>(
            b"HTTP/1.1 404 Not Found\r\nA: b\r\n\r\nxy",
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            (h.status, h.reason.as_str(), b.as_slice()),
            (404, "Not Found", b"xy".as_slice())
        );
        assert_eq!(
            decode_all::<ResponseHead>(b"HTTP/1.1 101 Switching\r\n\r\n", &Limits::default()).err(),
            Some(Error::MalformedInner)
        );
    }

    /// Erratum E2: the answer to HEAD and a 304 carry the representation's
    /// length with an empty body; a body is refused; any other answer's
    /// length is its body's. Fed whole and byte by byte.
    #[test]
    fn head_and_304_carry_the_representation_length() {
        fn decode(msg: &[u8], method: &str) -> Result<(ResponseHead, Vec<u8>)> {
            let whole = decode_response(msg, method, &Limits::default());
            let mut d = Decoder::answering(method, Limits::default());
            let mut bytewise = Ok(());
            for b in msg {
                bytewise = d.receive(std::slice::from_ref(b)).and_then(|()| {
                    while d.next_event()?.is_some() {}
                    Ok(())
                });
                if bytewise.is_err() {
                    break;
                }
            }
            let bytewise = bytewise.and_then(|()| d.finish());
            assert_eq!(whole.as_ref().err(), bytewise.err().as_ref(), "{method}");
            whole
        }
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
        assert!(decode(head, "HEAD").is_ok_and(|(_, b)| b.is_empty()));
        assert_eq!(
            decode(head, "GET").err(),
            Some(Error::ContentLengthMismatch)
        );
        let with_body = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            decode(with_body, "HEAD").err(),
            Some(Error::ContentLengthMismatch)
        );
        assert!(decode(with_body, "GET").is_ok());
        let no_length_body = b"HTTP/1.1 200 OK\r\n\r\nhello";
        assert_eq!(
            decode(no_length_body, "HEAD").err(),
            Some(Error::ContentLengthMismatch)
        );
        assert!(decode(b"HTTP/1.1 200 OK\r\n\r\n", "HEAD").is_ok());
        assert_eq!(
            decode(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "HEAD").err(),
            Some(Error::ContentLengthMismatch)
        );
        let not_modified = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n";
        for method in ["GET", "HEAD", "POST"] {
            assert!(decode(not_modified, method).is_ok());
        }
        assert_eq!(
            decode(b"HTTP/1.1 304 Not Modified\r\n\r\nx", "GET").err(),
            Some(Error::ContentLengthMismatch)
        );
        // Methods are case-sensitive: `head` is not HEAD.
        assert_eq!(
            decode(head, "head").err(),
            Some(Error::ContentLengthMismatch)
        );
    }

    /// The service's request holds the inner fields alone (erratum E1):
    /// no outer field, not even one the inner head lacks; the protocol's
    /// own fields are consumed; `Host` comes from the inner head, else the
    /// bound outer one, else the configured name, else nowhere.
    #[test]
    fn the_service_sees_the_inner_fields_only() {
        let inner = vec![
            Field::new("Host", "app.example"),
            Field::new("ACCEPT", "c"),
            Field::new("Date", "Tue, 24 Nov 2026 20:00:00 GMT"),
            Field::new("Client-Random", "x"),
            Field::new("random", "y"),
            Field::new("Ticket", "z"),
            Field::new("Content-Type", "text/plain"),
            Field::new("Accept", "d"),
        ];
        assert_eq!(
            service_fields(&inner, Some(b"bound.example"), Some(b"conf.example")),
            vec![
                Field::new("Host", "app.example"),
                Field::new("ACCEPT", "c"),
                Field::new("Content-Type", "text/plain"),
                Field::new("Accept", "d"),
            ]
        );
        let no_host = &inner[1..2];
        let with = |bound: Option<&[u8]>, conf: Option<&[u8]>| service_fields(no_host, bound, conf);
        assert_eq!(
            with(Some(b"bound.example"), Some(b"conf.example"))[0],
            Field::new("Host", "bound.example")
        );
        assert_eq!(
            with(None, Some(b"conf.example"))[0],
            Field::new("Host", "conf.example")
        );
        assert_eq!(with(None, None), vec![Field::new("ACCEPT", "c")]);
        for name in ["Host", "date", "Client-Random", "RANDOM", "ticket"] {
            assert_eq!(is_service_field(name), name == "Host", "{name}");
        }
        for name in ["Date", "Ticket", "random", "Content-Type"] {
            let service = name == "Date" || name == "Content-Type";
            assert_eq!(is_service_response_field(name), service, "{name}");
        }
    }
}
