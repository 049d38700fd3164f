//! Vectors for the request the service sees (spec §4.3, erratum E1): built
//! from the inner request alone. Every outer request here carries fields an
//! on-path relay added (and, where the profile leaves it unbound, a `Host`
//! of its own); none of them reaches the service. The protocol's own inner
//! fields are consumed; `Host` comes from the inner head, else the outer
//! `Host` a profile-2 stream binds, else the configured name, else nowhere;
//! outer fields an operator allow-lists travel apart (`outer_fields`).

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner;
use httpcrypt_proto::outer::{Form, Mount};
use httpcrypt_proto::stream;
use httpcrypt_proto::{KexSecret, Limits};
use serde_json::{json, Value};

use super::compact::{n0_at, server2};
use super::exchange::{self, replace, Server};
use super::{bytes, hx, Case};

const NOW: u64 = 1_700_000_000;
const HOST: &str = "www.example.com";

/// What an on-path relay adds to the outer request.
const RELAY_FIELDS: &str = "Authorization: Basic YTpi\r\nX-HTTP-Method-Override: DELETE\r\nX-Forwarded-For: 6.6.6.6\r\nContent-Encoding: gzip\r\nRange: bytes=0-1\r\nIf-None-Match: \"x\"\r\nOrigin: http://evil.example\r\n";

/// The service's request for an outer request, as the Rust layer builds it:
/// `inner::service_fields` over the opened inner head, and the outer
/// fields named in `pass_outer` (each name in list order, its values in
/// outer order, spelled as the outer request spells them).
pub fn service_request(
    keys: &httpcrypt_proto::server::ServerKeys,
    mount: &Mount,
    outer: &[u8],
    authority: Option<&str>,
    pass_outer: &[&str],
) -> Value {
    let (accepted, head, body) = exchange::serve(keys, mount, &Limits::default(), NOW, outer)
        .expect("service vectors are accepted");
    let fields = inner::service_fields(
        &head.fields,
        accepted.bound_host(),
        authority.map(str::as_bytes),
    );
    let mut storage = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut storage);
    req.parse(outer).expect("outer head parses");
    let mut passed = Vec::new();
    for name in pass_outer {
        for h in req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
        {
            passed.push(json!([h.name, String::from_utf8_lossy(h.value)]));
        }
    }
    json!({
        "method": head.method,
        "target": head.target,
        "fields": pairs(fields.iter().map(|f| (f.name.as_str(), f.value.as_slice()))),
        "outer_fields": passed,
        "body": hx(&body),
    })
}

fn pairs<'a>(it: impl Iterator<Item = (&'a str, &'a [u8])>) -> Value {
    json!(it
        .map(|(n, v)| json!([n, String::from_utf8_lossy(v)]))
        .collect::<Vec<_>>())
}

/// A sealed outer request (POST form) for `inner` under `/hc`; `compact`
/// binds the outer `Host` (profile 2).
fn outer_request(s: &Server, label: &str, compact: bool, inner: &[u8]) -> Vec<u8> {
    let client = KexSecret::from_bytes(bytes(&format!("{label}-client")));
    let n0 = if compact {
        n0_at(&format!("{label}-n0"), NOW)
    } else {
        bytes(&format!("{label}-n0"))
    };
    let mut p = PreparedRequest::new(&s.cert, ClientCredential::Key(&client), n0, "", "").unwrap();
    if compact {
        p = p.compact(HOST).unwrap();
    }
    let mut st = Vec::new();
    stream::seal_all(p.sealer(), inner, 16384, &mut st).unwrap();
    p.encode_outer(Form::Post, &Mount::new("/hc").unwrap(), HOST, &st)
}

#[allow(clippy::too_many_arguments)]
fn case(
    v: &mut Vec<Case>,
    name: &str,
    why: &str,
    compact: bool,
    inner: &[u8],
    authority: Option<&str>,
    pass_outer: &[&str],
    want_fields: &[(&str, &str)],
    want_outer: &[(&str, &str)],
) {
    let s = if compact {
        server2()
    } else {
        exchange::server()
    };
    let sealed = outer_request(&s, name, compact, inner);
    // The relay's additions; a v1 stream binds no outer field, so the relay
    // also names another host there.
    let host_line = format!("Host: {HOST}\r\n");
    let relayed = if compact {
        format!("{host_line}{RELAY_FIELDS}")
    } else {
        format!("Host: evil.example\r\n{RELAY_FIELDS}")
    };
    let outer = replace(&sealed, &host_line, &relayed);
    let m = Mount::new("/hc").unwrap();
    let got = service_request(&s.keys(), &m, &outer, authority, pass_outer);
    let want = |p: &[(&str, &str)]| json!(p.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>());
    assert_eq!(got["fields"], want(want_fields), "{name}: service fields");
    assert_eq!(
        got["outer_fields"],
        want(want_outer),
        "{name}: outer fields"
    );
    let mut input = s.json(NOW, "/hc");
    if compact {
        input["cert"]["version"] = json!(2);
    }
    input["outer_request"] = json!(hx(&outer));
    if let Some(a) = authority {
        input["authority"] = json!(a);
    }
    if !pass_outer.is_empty() {
        input["pass_outer"] = json!(pass_outer);
    }
    v.push(Case::ok("service_request", name, why, input, got));
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    case(
        &mut v,
        "service-request-outer-fields-ignored",
        "the relay's outer fields and Host change nothing: the service sees exactly the inner method, target, fields and body; the inner Host also stands before the configured name",
        false,
        b"POST /api/v1/items HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: hc-test/1\r\nAuthorization: Bearer inner-token\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"name\":\"widget\",\"qty\":12}\n",
        Some("api.internal.example"),
        &[],
        &[
            ("Host", "www.example.com"),
            ("User-Agent", "hc-test/1"),
            ("Authorization", "Bearer inner-token"),
            ("Content-Type", "application/json"),
            ("Content-Length", "27"),
        ],
        &[],
    );
    case(
        &mut v,
        "service-request-protocol-fields-consumed",
        "the inner Date and Client-Random belong to the protocol: the service does not see them",
        false,
        b"GET /status HTTP/1.1\r\nHost: www.example.com\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\nClient-Random: AAECAwQFBgcICQoLDA0ODw\r\nAccept: text/plain\r\n\r\n",
        None,
        &[],
        &[("Host", "www.example.com"), ("Accept", "text/plain")],
        &[],
    );
    case(
        &mut v,
        "service-request-host-configured",
        "no inner Host, v1 binds no outer field: the service's Host is the configured name, not the outer one",
        false,
        b"GET /status HTTP/1.1\r\nAccept: text/plain\r\n\r\n",
        Some("api.internal.example"),
        &[],
        &[("Host", "api.internal.example"), ("Accept", "text/plain")],
        &[],
    );
    case(
        &mut v,
        "service-request-host-none",
        "no inner Host, v1 binds no outer field, no configured name: the service sees no Host at all",
        false,
        b"GET /status HTTP/1.1\r\nAccept: text/plain\r\n\r\n",
        None,
        &[],
        &[("Accept", "text/plain")],
        &[],
    );
    case(
        &mut v,
        "service-request-pass-outer",
        "an allow-listed outer field travels apart from the request; the request's fields stay the inner ones",
        false,
        b"GET /status HTTP/1.1\r\nHost: www.example.com\r\nAccept: text/plain\r\n\r\n",
        None,
        &["X-Forwarded-For"],
        &[("Host", "www.example.com"), ("Accept", "text/plain")],
        &[("X-Forwarded-For", "6.6.6.6")],
    );
    case(
        &mut v,
        "service-request-compact-bound-host",
        "profile 2, no inner Host: the outer Host the stream binds is the service's Host, ahead of the configured name",
        true,
        b"GET /status HTTP/1.1\r\nAccept: text/plain\r\n\r\n",
        Some("api.internal.example"),
        &[],
        &[("Host", HOST), ("Accept", "text/plain")],
        &[],
    );
    v
}
