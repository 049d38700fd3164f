//! Inner messages of the rspamd profile (profile "Request", "Response"):
//! the complete HTTP/1.x request or response sealed in one body.
//!
//! rspamd hands the decrypted bytes to its ordinary HTTP parser, so the inner
//! message is plain HTTP/1.0 or HTTP/1.1 (rspamc 3.4 seals `HTTP/1.0`
//! requests, rspamd answers `HTTP/1.1`). The body is framed by
//! `Content-Length` alone: no chunked coding, and a request body needs the
//! field (rspamd would read bytes after a head without it as a second
//! request). [`Request::encode`] and [`Response::encode`] write the framing
//! themselves and leave out the caller's framing and hop-by-hop fields
//! ([`FRAMING`]); [`Request::decode`] and [`Response::decode`] check it
//! under the inner [`Limits`]. Errors reuse the v1 inner codes
//! (`malformed_inner`, `inner_head_too_large`, `forbidden_header`,
//! `content_length_mismatch`).

use crate::error::{Error, Result};
use crate::inner::Field;
use crate::limits::Limits;

/// Fields the encoders never copy from the caller: the body framing, which
/// they write themselves, and hop-by-hop fields, which mean nothing inside
/// a sealed body (RFC 9110 §7.6.1).
pub const FRAMING: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// An inner request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Method token (`GET`, `POST`, …).
    pub method: String,
    /// Request target in origin form (`/checkv2`).
    pub target: String,
    /// Fields in order; framing fields are ignored by [`Request::encode`].
    pub fields: Vec<Field>,
    /// The body.
    pub body: Vec<u8>,
}

/// An inner response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code (200–999).
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Fields in order; framing fields are ignored by [`Response::encode`].
    pub fields: Vec<Field>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// Appends `METHOD target HTTP/1.1`, the fields, `Content-Length` (when
    /// there is a body, and always for POST, PUT and PATCH, as rspamc does),
    /// the blank line and the body. A method that is not a token, a target
    /// that is empty or holds a space or control character, or a field that
    /// could break the head is [`Error::MalformedInner`]; nothing is
    /// appended then.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        if !is_token(&self.method) || !is_target(&self.target) {
            return Err(Error::MalformedInner);
        }
        check_fields(&self.fields)?;
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let length =
            !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH");
        encode_fields(&self.fields, length.then_some(self.body.len()), out);
        out.extend_from_slice(&self.body);
        Ok(())
    }

    /// Parses a complete inner request (HTTP/1.0 or HTTP/1.1).
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Request> {
        let mut headers = vec![httparse::EMPTY_HEADER; limits.max_inner_fields];
        let mut req = httparse::Request::new(&mut headers);
        let head_len = match req.parse(bytes) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Err(Error::MalformedInner),
            Err(httparse::Error::TooManyHeaders) => return Err(Error::InnerHeadTooLarge),
            Err(_) => return Err(Error::MalformedInner),
        };
        if head_len > limits.max_inner_head {
            return Err(Error::InnerHeadTooLarge);
        }
        let (Some(method), Some(target), Some(0 | 1)) = (req.method, req.path, req.version) else {
            return Err(Error::MalformedInner);
        };
        let fields = collect_fields(req.headers)?;
        let body = &bytes[head_len..];
        match content_length(&fields)? {
            Some(n) if n != body.len() as u64 => return Err(Error::ContentLengthMismatch),
            None if !body.is_empty() => return Err(Error::ContentLengthMismatch),
            _ => {}
        }
        Ok(Request {
            method: method.to_string(),
            target: target.to_string(),
            fields,
            body: body.to_vec(),
        })
    }
}

impl Response {
    /// Appends `HTTP/1.1 status reason`, the fields, `Content-Length`, the
    /// blank line and the body. A status outside 200–999, a reason with a
    /// control character, or a field that could break the head is
    /// [`Error::MalformedInner`]; nothing is appended then.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        if !(200..=999).contains(&self.status)
            || self
                .reason
                .bytes()
                .any(|b| b.is_ascii_control() && b != b'\t')
        {
            return Err(Error::MalformedInner);
        }
        check_fields(&self.fields)?;
        out.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", self.status, self.reason).as_bytes());
        encode_fields(&self.fields, Some(self.body.len()), out);
        out.extend_from_slice(&self.body);
        Ok(())
    }

    /// Parses a complete inner response (HTTP/1.0 or HTTP/1.1). Without
    /// `Content-Length` the body is the rest of the bytes.
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Response> {
        let mut headers = vec![httparse::EMPTY_HEADER; limits.max_inner_fields];
        let mut rsp = httparse::Response::new(&mut headers);
        let head_len = match rsp.parse(bytes) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Err(Error::MalformedInner),
            Err(httparse::Error::TooManyHeaders) => return Err(Error::InnerHeadTooLarge),
            Err(_) => return Err(Error::MalformedInner),
        };
        if head_len > limits.max_inner_head {
            return Err(Error::InnerHeadTooLarge);
        }
        let (Some(status @ 200..=999), Some(0 | 1)) = (rsp.code, rsp.version) else {
            return Err(Error::MalformedInner);
        };
        let reason = rsp.reason.unwrap_or_default().to_string();
        let fields = collect_fields(rsp.headers)?;
        let body = &bytes[head_len..];
        if content_length(&fields)?.is_some_and(|n| n != body.len() as u64) {
            return Err(Error::ContentLengthMismatch);
        }
        Ok(Response {
            status,
            reason,
            fields,
            body: body.to_vec(),
        })
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_target(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic())
}

fn is_framing(name: &str) -> bool {
    FRAMING.iter().any(|f| name.eq_ignore_ascii_case(f))
}

fn check_fields(fields: &[Field]) -> Result<()> {
    let ok = fields.iter().all(|f| {
        is_token(&f.name)
            && f.value
                .iter()
                .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
    });
    if ok {
        Ok(())
    } else {
        Err(Error::MalformedInner)
    }
}

fn encode_fields(fields: &[Field], length: Option<usize>, out: &mut Vec<u8>) {
    for f in fields.iter().filter(|f| !is_framing(&f.name)) {
        out.extend_from_slice(f.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(f.value.trim_ascii());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(n) = length {
        out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// Fields as parsed; any transfer coding is [`Error::ForbiddenHeader`].
fn collect_fields(headers: &[httparse::Header<'_>]) -> Result<Vec<Field>> {
    let fields: Vec<Field> = headers
        .iter()
        .map(|h| Field::new(h.name, h.value))
        .collect();
    if fields.iter().any(|f| f.is("transfer-encoding")) {
        return Err(Error::ForbiddenHeader);
    }
    Ok(fields)
}

/// The one `Content-Length` (1–19 digits, surrounding whitespace ignored),
/// if any; a repeated or malformed one is [`Error::ContentLengthMismatch`].
fn content_length(fields: &[Field]) -> Result<Option<u64>> {
    let mut values = fields.iter().filter(|f| f.is("content-length"));
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Error::ContentLengthMismatch);
    }
    let v = first.value.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Error::ContentLengthMismatch);
    }
    // At most 19 digits: always fits a u64.
    Ok(std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn what_rspamc_seals_decodes() {
        // The two inner requests decrypted from rspamc 3.4 captures (profile §3).
        let stat = b"GET /stat HTTP/1.0\r\nUser-Agent: rspamc\r\nFilename: stdin\r\nFlags: body_block\r\n\r\n";
        let r = Request::decode(stat, &limits()).unwrap();
        assert_eq!((r.method.as_str(), r.target.as_str()), ("GET", "/stat"));
        assert_eq!(r.fields.len(), 3);
        assert!(r.body.is_empty());
        let msg =
            b"From: a@example.org\r\nTo: b@example.org\r\nSubject: hi\r\n\r\nhello rspamd\r\n";
        let mut check = format!(
            "POST /checkv2 HTTP/1.0\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\
             User-Agent: rspamc\r\nFilename: msg.eml\r\nFlags: body_block\r\n\r\n",
            msg.len()
        )
        .into_bytes();
        check.extend_from_slice(msg);
        let r = Request::decode(&check, &limits()).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.body, msg);
    }

    #[test]
    fn request_round_trip_and_exact_bytes() {
        let req = Request {
            method: "POST".into(),
            target: "/checkv2?x=1".into(),
            fields: vec![
                Field::new("Host", "h:1"),
                Field::new("Content-Length", "999"),
                Field::new("Connection", "keep-alive"),
                Field::new("Transfer-Encoding", "chunked"),
                Field::new("Filename", " m.eml "),
            ],
            body: b"hello".to_vec(),
        };
        let mut out = b"..".to_vec();
        req.encode(&mut out).unwrap();
        assert_eq!(
            out,
            b"..POST /checkv2?x=1 HTTP/1.1\r\nHost: h:1\r\nFilename: m.eml\r\n\
              Content-Length: 5\r\n\r\nhello"
        );
        let back = Request::decode(&out[2..], &limits()).unwrap();
        assert_eq!(back.target, "/checkv2?x=1");
        assert_eq!(back.body, b"hello");
        assert_eq!(back.fields.len(), 3);

        // GET without a body: no Content-Length; POST always has one.
        let mut out = Vec::new();
        let get = Request {
            method: "GET".into(),
            target: "/stat".into(),
            fields: vec![],
            body: vec![],
        };
        get.encode(&mut out).unwrap();
        assert_eq!(out, b"GET /stat HTTP/1.1\r\n\r\n");
        out.clear();
        Request {
            method: "POST".into(),
            ..get
        }
        .encode(&mut out)
        .unwrap();
        assert_eq!(out, b"POST /stat HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    }

    #[test]
    fn request_encode_refuses_what_would_break_the_head() {
        let ok = Request {
            method: "GET".into(),
            target: "/".into(),
            fields: vec![],
            body: vec![],
        };
        let bad = [
            Request {
                method: "G T".into(),
                ..ok.clone()
            },
            Request {
                target: "/a b".into(),
                ..ok.clone()
            },
            Request {
                target: String::new(),
                ..ok.clone()
            },
            Request {
                fields: vec![Field::new("X", "a\r\nInjected: 1")],
                ..ok.clone()
            },
            Request {
                fields: vec![Field::new("X:Y", "a")],
                ..ok.clone()
            },
        ];
        for r in bad {
            let mut out = Vec::new();
            assert_eq!(r.encode(&mut out), Err(Error::MalformedInner), "{r:?}");
            assert!(out.is_empty());
        }
    }

    #[test]
    fn request_decode_failures() {
        let cases: &[(&[u8], Error)] = &[
            (b"GET / HTTP/1.0\r\n", Error::MalformedInner),
            (b"GET / HTTP/2.0\r\n\r\n", Error::MalformedInner),
            (b"\r\n\r\n", Error::MalformedInner),
            (b"GET / HTTP/1.0\r\n\r\nbody", Error::ContentLengthMismatch),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\nabc",
                Error::ContentLengthMismatch,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
                Error::ContentLengthMismatch,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: +3\r\n\r\nabc",
                Error::ContentLengthMismatch,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                Error::ForbiddenHeader,
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                Request::decode(bytes, &limits()).err().as_ref(),
                Some(want),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..101 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(
            Request::decode(&many, &limits()).err(),
            Some(Error::InnerHeadTooLarge)
        );
        let small = Limits {
            max_inner_head: 20,
            ..limits()
        };
        assert_eq!(
            Request::decode(b"GET /a-long-target HTTP/1.1\r\n\r\n", &small).err(),
            Some(Error::InnerHeadTooLarge)
        );
    }

    #[test]
    fn response_round_trip_and_failures() {
        let rsp = Response {
            status: 200,
            reason: "OK".into(),
            fields: vec![
                Field::new("Content-Type", "application/json"),
                Field::new("Transfer-Encoding", "chunked"),
                Field::new("Content-Length", "1"),
            ],
            body: b"{}".to_vec(),
        };
        let mut out = Vec::new();
        rsp.encode(&mut out).unwrap();
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        let back = Response::decode(&out, &limits()).unwrap();
        assert_eq!((back.status, back.body.as_slice()), (200, &b"{}"[..]));
        // rspamd's own inner answers; no Content-Length means "the rest".
        let r = Response::decode(
            b"HTTP/1.0 404 Not Found\r\nServer: rspamd\r\n\r\nnope",
            &limits(),
        )
        .unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), r.body.as_slice()),
            (404, "Not Found", &b"nope"[..])
        );

        for bytes in [
            &b"HTTP/1.1 100 Continue\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/3 200 OK\r\n\r\n",
            b"junk",
        ] {
            assert_eq!(
                Response::decode(bytes, &limits()).err(),
                Some(Error::MalformedInner)
            );
        }
        assert_eq!(
            Response::decode(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab", &limits()).err(),
            Some(Error::ContentLengthMismatch)
        );
        for bad in [
            Response {
                status: 101,
                ..rsp.clone()
            },
            Response {
                reason: "O\nK".into(),
                ..rsp.clone()
            },
        ] {
            let mut out = Vec::new();
            assert_eq!(bad.encode(&mut out), Err(Error::MalformedInner));
            assert!(out.is_empty());
        }
    }

    #[test]
    fn decoders_never_panic_on_prefixes() {
        let mut req = Vec::new();
        Request {
            method: "POST".into(),
            target: "/checkv2".into(),
            fields: vec![Field::new("Filename", "x")],
            body: b"0123456789".to_vec(),
        }
        .encode(&mut req)
        .unwrap();
        for i in 0..req.len() {
            assert!(Request::decode(&req[..i], &limits()).is_err(), "prefix {i}");
        }
        let mut rsp = Vec::new();
        Response {
            status: 200,
            reason: "OK".into(),
            fields: vec![],
            body: b"0123456789".to_vec(),
        }
        .encode(&mut rsp)
        .unwrap();
        for i in 0..rsp.len() {
            assert!(
                Response::decode(&rsp[..i], &limits()).is_err(),
                "prefix {i}"
            );
        }
    }
}
