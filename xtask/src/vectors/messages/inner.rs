//! Inner request and response messages (spec §4.3): framing fields, lengths,
//! limits, and the HEAD/304 rule (erratum E2).

use httpcrypt_proto::inner::{self, Field, RequestHead};
use httpcrypt_proto::{Error, Limits};
use serde_json::{json, Value};

use crate::vectors::{check, hx, Case};

fn fields_json(fields: &[Field]) -> Value {
    json!(fields
        .iter()
        .map(|f| json!([f.name, String::from_utf8_lossy(&f.value)]))
        .collect::<Vec<_>>())
}

fn inner_request_case(
    name: &str,
    why: &str,
    msg: &[u8],
    limits: Option<Limits>,
    want: Result<(), Error>,
) -> Case {
    let l = limits.unwrap_or_default();
    let mut input = json!({"message": hx(msg)});
    if let Some(l) = limits {
        input["max_inner_head"] = json!(l.max_inner_head);
        input["max_inner_fields"] = json!(l.max_inner_fields);
    }
    let got = inner::decode_all::<RequestHead>(msg, &l);
    match want {
        Ok(()) => {
            let (h, body) = got.unwrap_or_else(|e| panic!("{name}: {e:?}"));
            Case::ok(
                "inner_request",
                name,
                why,
                input,
                json!({"method": h.method, "target": h.target, "fields": fields_json(&h.fields), "body": hx(body)}),
            )
        }
        Err(e) => {
            check(name, got, &e);
            Case::err("inner_request", name, why, input, e)
        }
    }
}

pub(super) fn inner_cases() -> Vec<Case> {
    let mut v = Vec::new();
    let ok = |n: &str, w: &str, m: &[u8]| inner_request_case(n, w, m, None, Ok(()));
    let bad = |n: &str, w: &str, m: &[u8], e: Error| inner_request_case(n, w, m, None, Err(e));
    v.push(ok("inner-request-get", "a GET with no body", b"GET /index.html?a=1 HTTP/1.1\r\nHost: example.com\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\n\r\n"));
    v.push(ok(
        "inner-request-post-length",
        "a body with a matching Content-Length",
        b"POST /api HTTP/1.1\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
    ));
    v.push(ok(
        "inner-request-post-no-length",
        "without Content-Length the body is the rest of the stream",
        b"PUT /x HTTP/1.1\r\n\r\nbinary\x00\xff",
    ));
    v.push(bad(
        "inner-request-http10",
        "the inner version is HTTP/1.1",
        b"GET / HTTP/1.0\r\n\r\n",
        Error::MalformedInner,
    ));
    v.push(bad(
        "inner-request-bare-lf",
        "CRLF line ends only",
        b"GET / HTTP/1.1\nHost: a\n\n",
        Error::MalformedInner,
    ));
    v.push(bad(
        "inner-request-obs-fold",
        "no obsolete line folding",
        b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
        Error::MalformedInner,
    ));
    v.push(bad(
        "inner-request-no-blank-line",
        "the head must end with an empty line",
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        Error::MalformedInner,
    ));
    v.push(bad(
        "inner-request-garbage",
        "not an HTTP request",
        b"\x16\x03\x01\x00\xa5",
        Error::MalformedInner,
    ));
    v.push(bad(
        "inner-request-leading-crlf",
        "no empty lines before the request line",
        b"\r\nGET / HTTP/1.1\r\n\r\n",
        Error::MalformedInner,
    ));
    v.push(bad(
        "inner-request-transfer-encoding",
        "the stream frames the body",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        Error::ForbiddenHeader,
    ));
    v.push(bad(
        "inner-request-connection",
        "hop-by-hop fields are forbidden inside",
        b"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
        Error::ForbiddenHeader,
    ));
    v.push(bad(
        "inner-request-upgrade",
        "no upgrades inside",
        b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
        Error::ForbiddenHeader,
    ));
    v.push(bad(
        "inner-request-length-short",
        "Content-Length must equal the body length",
        b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
        Error::ContentLengthMismatch,
    ));
    v.push(bad(
        "inner-request-length-long",
        "Content-Length must equal the body length",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nabc",
        Error::ContentLengthMismatch,
    ));
    v.push(bad(
        "inner-request-length-twice",
        "Content-Length at most once",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        Error::ContentLengthMismatch,
    ));
    v.push(bad(
        "inner-request-length-sign",
        "Content-Length is digits only",
        b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
        Error::ContentLengthMismatch,
    ));
    let small = Limits {
        max_inner_fields: 3,
        max_inner_head: 128,
        ..Limits::default()
    };
    v.push(inner_request_case(
        "inner-request-too-many-fields",
        "more header fields than the limit",
        b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
        Some(small),
        Err(Error::InnerHeadTooLarge),
    ));
    let long = [b"GET /".as_slice(), &[b'a'; 200], b" HTTP/1.1\r\n\r\n"].concat();
    v.push(inner_request_case(
        "inner-request-head-too-large",
        "a head longer than the limit",
        &long,
        Some(small),
        Err(Error::InnerHeadTooLarge),
    ));

    // `method`: the request's method, where the case is about it (erratum
    // E2: the answer to HEAD, and a 304, carry the representation's length
    // with an empty body); absent means GET.
    let answer = |name: &str,
                  why: &str,
                  method: Option<&str>,
                  msg: &[u8],
                  want: Result<(), Error>| {
        let got = inner::decode_response(msg, method.unwrap_or("GET"), &Limits::default());
        let mut input = json!({"message": hx(msg)});
        if let Some(m) = method {
            input["request_method"] = json!(m);
        }
        match want {
            Ok(()) => {
                let (h, body) = got.unwrap();
                Case::ok(
                    "inner_response",
                    name,
                    why,
                    input,
                    json!({"status": h.status, "reason": h.reason, "fields": fields_json(&h.fields), "body": hx(body)}),
                )
            }
            Err(e) => {
                check(name, got, &e);
                Case::err("inner_response", name, why, input, e)
            }
        }
    };
    let rsp = |name: &str, why: &str, msg: &[u8], want: Result<(), Error>| {
        answer(name, why, None, msg, want)
    };
    v.push(rsp(
        "inner-response-ok",
        "a response with a body",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
        Ok(()),
    ));
    v.push(rsp(
        "inner-response-informational",
        "1xx cannot be the inner response",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        Err(Error::MalformedInner),
    ));
    v.push(rsp(
        "inner-response-chunked",
        "the stream frames the body",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        Err(Error::ForbiddenHeader),
    ));
    let head_length: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nDate: Fri, 27 Nov 2026 12:00:00 GMT\r\n\r\n";
    v.push(answer(
        "inner-response-head-length",
        "the answer to HEAD carries the length a GET would get, with an empty body",
        Some("HEAD"),
        head_length,
        Ok(()),
    ));
    v.push(answer(
        "inner-response-head-length-to-get",
        "the same answer to a GET: Content-Length must equal the body length",
        Some("GET"),
        head_length,
        Err(Error::ContentLengthMismatch),
    ));
    v.push(answer(
        "inner-response-304-length",
        "a 304 carries the representation's length, with an empty body",
        Some("GET"),
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n",
        Ok(()),
    ));
    v.push(answer(
        "inner-response-head-body",
        "an answer to HEAD carries no body",
        Some("HEAD"),
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        Err(Error::ContentLengthMismatch),
    ));
    v.push(answer(
        "inner-response-head-no-length",
        "an answer to HEAD need not carry a length",
        Some("HEAD"),
        b"HTTP/1.1 200 OK\r\n\r\n",
        Ok(()),
    ));
    v.push(answer(
        "inner-response-head-bad-length",
        "the length of an answer to HEAD is still digits only",
        Some("HEAD"),
        b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
        Err(Error::ContentLengthMismatch),
    ));
    v
}
