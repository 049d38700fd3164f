//! Vectors for the small codecs: base64url, key agreement, inner messages,
//! outer routing, cookies, dates.

use httpcrypt_proto::inner::{self, Field, RequestHead};
use httpcrypt_proto::keys::{KexPublic, KexSecret, KeyId};
use httpcrypt_proto::outer::{self, IdKind, Mount, Route};
use httpcrypt_proto::{b64, replay, Error, Limits};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

fn b64u_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (name, raw) in [
        ("b64u-empty", &b""[..]),
        ("b64u-one", b"\xfb"),
        ("b64u-two", b"\xfb\xff"),
        ("b64u-three", b"\x00\x10\x83"),
    ] {
        let text = b64::encode(raw);
        assert_eq!(b64::decode(text.as_bytes()).unwrap(), raw);
        v.push(Case::ok(
            "b64u",
            name,
            "canonical unpadded base64url",
            json!({"text": text}),
            json!({"hex": hx(raw)}),
        ));
    }
    for (name, text, why) in [
        ("b64u-padding", "-w==", "padding characters are refused"),
        (
            "b64u-standard-alphabet",
            "+/8",
            "characters of the standard alphabet are refused",
        ),
        (
            "b64u-trailing-bits",
            "-_9",
            "non-zero unused trailing bits are refused",
        ),
        (
            "b64u-bad-length",
            "AAAAA",
            "a length of 1 mod 4 cannot occur",
        ),
        ("b64u-space", "AA A", "whitespace is refused"),
    ] {
        check(name, b64::decode(text.as_bytes()), &Error::BadBase64);
        v.push(Case::err(
            "b64u",
            name,
            why,
            json!({"text": text}),
            Error::BadBase64,
        ));
    }
    v
}

fn kex_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for i in 0..2 {
        let a = KexSecret::from_bytes(bytes(&format!("kex-a-{i}")));
        let b = KexSecret::from_bytes(bytes(&format!("kex-b-{i}")));
        let shared = a.agree_raw(b.public()).unwrap();
        let k = a.session_key(b.public()).unwrap();
        assert_eq!(k, b.session_key(a.public()).unwrap());
        v.push(Case::ok(
            "kex",
            &format!("kex-agreement-{i}"),
            "X25519 public key, key ID = SHA3-256(public)[0..10], shared secret, k = HChaCha20(shared, 0^16)",
            json!({"secret": hx(*a.to_bytes()), "peer_public": hx(b.public().0)}),
            json!({"public": hx(a.public().0), "kid": hx(a.kid().0), "shared": hx(*shared), "session_key": hx(k.as_bytes())}),
        ));
    }
    // Small-order points (RFC 7748 §6.1 note; the usual blocklist).
    let points: [(&str, &str); 4] = [
        (
            "zero",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ),
        (
            "one",
            "0100000000000000000000000000000000000000000000000000000000000000",
        ),
        (
            "order-8",
            "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
        ),
        (
            "p-minus-1",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        ),
    ];
    let s = KexSecret::from_bytes(bytes("kex-small-order"));
    for (label, p) in points {
        let peer = KexPublic(hex::decode(p).unwrap().try_into().unwrap());
        let name = format!("kex-small-order-{label}");
        check(&name, s.session_key(&peer), &Error::SmallOrder);
        v.push(Case::err(
            "kex",
            &name,
            "an all-zero X25519 output must be refused",
            json!({"secret": hx(*s.to_bytes()), "peer_public": p}),
            Error::SmallOrder,
        ));
    }
    v
}

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

fn inner_cases() -> Vec<Case> {
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

fn route_cases() -> Vec<Case> {
    let n0 = bytes::<24>("route-n0");
    let p = format!("/hc/{}", b64::encode(&n0));
    let mut v = Vec::new();
    let mut add = |name: &str, why: &str, method: &str, target: String, mount: &str, want: &str| {
        let m = Mount::new(mount).unwrap();
        let input = json!({"method": method, "target": target, "mount": mount});
        match outer::route(method, &target, &m) {
            Ok(r) => {
                let out = match r {
                    Route::Outside => json!({"route": "outside"}),
                    Route::Options => json!({"route": "options"}),
                    Route::MethodNotAllowed => json!({"route": "method_not_allowed"}),
                    Route::NotFound => json!({"route": "not_found"}),
                    Route::Post { n0, profile } => {
                        json!({"route": "post", "n0": hx(n0), "profile": profile.number()})
                    }
                    Route::Get { n0, query, profile } => {
                        json!({"route": "get", "n0": hx(n0), "query": query, "profile": profile.number()})
                    }
                };
                assert_eq!(out["route"], want, "{name}");
                v.push(Case::ok("route", name, why, input, out));
            }
            Err(e) => {
                assert_eq!(e.code(), want, "{name}");
                v.push(Case::err("route", name, why, input, e));
            }
        }
    };
    add(
        "route-post",
        "POST under the mount; a query is ignored",
        "POST",
        format!("{p}?ignored=1"),
        "/hc",
        "post",
    );
    add(
        "route-get",
        "GET form: the whole query is the stream",
        "GET",
        format!("{p}?AAAA"),
        "/hc",
        "get",
    );
    let p2 = format!("/hc/2{}", b64::encode(&n0));
    add(
        "compact-route-post",
        "profile 2: `2` before the 32 nonce characters",
        "POST",
        p2.clone(),
        "/hc",
        "post",
    );
    add(
        "compact-route-get",
        "profile 2, GET form",
        "GET",
        format!("{p2}?AAAA"),
        "/hc",
        "get",
    );
    add(
        "compact-route-root",
        "profile 2 under the root mount",
        "POST",
        format!("/2{}", b64::encode(&n0)),
        "",
        "post",
    );
    add(
        "compact-route-other-mark",
        "a 33-character segment must start with `2`",
        "POST",
        format!("/hc/3{}", b64::encode(&n0)),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "compact-route-long",
        "`2` and 33 characters is too long",
        "POST",
        format!("{p2}A"),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-options",
        "OPTIONS at {mount}/",
        "OPTIONS",
        "/hc/".into(),
        "/hc",
        "options",
    );
    add(
        "route-outside",
        "outside the mount",
        "GET",
        "/index.html".into(),
        "/hc",
        "outside",
    );
    add(
        "route-put",
        "other methods under the mount",
        "PUT",
        p.clone(),
        "/hc",
        "method_not_allowed",
    );
    add(
        "route-root-mount",
        "the default mount is empty",
        "POST",
        format!("/{}", b64::encode(&n0)),
        "",
        "post",
    );
    add(
        "route-short-nonce",
        "31 characters",
        "POST",
        p[..p.len() - 1].to_string(),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-percent",
        "no percent-decoding",
        "POST",
        format!("{}%41", &p[..p.len() - 1]),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-extra-segment",
        "nothing after the nonce",
        "POST",
        format!("{p}/x"),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-nonce-std-alphabet",
        "the nonce is base64url, not base64",
        "POST",
        format!("{}+", &p[..p.len() - 1]),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-get-no-query",
        "a GET without ?",
        "GET",
        p.clone(),
        "/hc",
        "bad_query",
    );
    v
}

fn cookie_cases() -> Vec<Case> {
    let kid = KeyId(bytes("cookie-kid"));
    let tid = KeyId(bytes("cookie-tid"));
    let foreign = KeyId(bytes("cookie-foreign"));
    let pubkey = bytes::<32>("cookie-pub");
    let sealed = bytes::<86>("cookie-ticket");
    let ids = json!([{"id": hx(kid.0), "kind": "key"}, {"id": hx(tid.0), "kind": "ticket"}]);
    let lookup = |id: &KeyId| {
        if *id == kid {
            Some(IdKind::Key)
        } else if *id == tid {
            Some(IdKind::Ticket)
        } else {
            None
        }
    };
    let key_cookie = outer::format_cookie(&kid, &pubkey, "Zq9", "x_-0AbCdEfGhIjKl").unwrap();
    let ticket_cookie = outer::format_cookie(&tid, &sealed, "", "").unwrap();
    let foreign_cookie = outer::format_cookie(&foreign, &pubkey, "", "").unwrap();
    let mut v = Vec::new();
    let mut add = |name: &str, why: &str, fields: Vec<String>, want: Option<Error>| {
        let got = outer::scan_cookies(fields.iter().map(|f| f.as_bytes()), lookup);
        let input = json!({"fields": fields, "ids": ids});
        match want {
            None => {
                let out = match got.unwrap_or_else(|e| panic!("{name}: {e:?}")) {
                    outer::Credential::Key { kid, client_public } => {
                        json!({"kind": "key", "id": hx(kid.0), "value": hx(client_public.0)})
                    }
                    outer::Credential::Ticket { tid, sealed } => {
                        json!({"kind": "ticket", "id": hx(tid.0), "value": hx(sealed)})
                    }
                };
                v.push(Case::ok("cookie_scan", name, why, input, out));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("cookie_scan", name, why, input, e));
            }
        }
    };
    add(
        "cookie-key-padded",
        "name and value padding are ignored",
        vec![key_cookie.clone()],
        None,
    );
    add(
        "cookie-ticket",
        "a ticket cookie",
        vec![ticket_cookie.clone()],
        None,
    );
    add(
        "cookie-among-foreign",
        "other cookies, added by middleboxes, come first",
        vec![format!(
            "session=abc; {foreign_cookie};  {key_cookie} ; theme=dark"
        )],
        None,
    );
    add(
        "cookie-second-field",
        "every Cookie field is scanned",
        vec!["a=b".into(), key_cookie.clone()],
        None,
    );
    add(
        "cookie-none",
        "no pair with the HTTPCrypt shape",
        vec!["session=abc; theme=dark".into()],
        Some(Error::NoCookie),
    );
    add(
        "cookie-empty",
        "no Cookie field at all",
        vec![],
        Some(Error::NoCookie),
    );
    add(
        "cookie-unknown-id",
        "HTTPCrypt shape, but the ID is unknown (e.g. an expired key)",
        vec![foreign_cookie.clone()],
        Some(Error::UnknownKey),
    );
    add(
        "cookie-value-truncated",
        "known ID, value too short",
        vec![format!("{}={}", kid.to_b64(), &b64::encode(&pubkey)[..42])],
        Some(Error::BadCookie),
    );
    add(
        "cookie-value-bad-char",
        "known ID, a character outside base64url",
        vec![format!("{}={}!", kid.to_b64(), &b64::encode(&pubkey)[..42])],
        Some(Error::BadCookie),
    );
    add(
        "cookie-pad-too-long",
        "known ID, 17 padding characters",
        vec![format!(
            "{}={}{}",
            kid.to_b64(),
            b64::encode(&pubkey),
            "A".repeat(17)
        )],
        Some(Error::BadCookie),
    );
    add(
        "cookie-name-pad-bad",
        "known ID, padding with a foreign character",
        vec![format!("{}.x={}", kid.to_b64(), b64::encode(&pubkey))],
        Some(Error::BadCookie),
    );
    add(
        "cookie-ticket-as-key",
        "a ticket ID with a public-key-sized value",
        vec![format!("{}={}", tid.to_b64(), b64::encode(&pubkey))],
        Some(Error::BadCookie),
    );
    add(
        "cookie-value-bad-bits",
        "known ID, non-canonical base64url in the value",
        vec![format!(
            "{}={}B",
            kid.to_b64(),
            &b64::encode(&[0u8; 32])[..42]
        )],
        Some(Error::BadCookie),
    );
    v
}

fn date_cases() -> Vec<Case> {
    let now = 1_700_000_000u64;
    let mut v = Vec::new();
    let mut add =
        |name: &str, why: &str, date: Option<String>, now: u64, want: Result<u64, Error>| {
            let got = replay::check_date(date.as_deref().map(str::as_bytes), now, 60);
            let input = json!({"date": date, "now": now, "window": 60});
            match want {
                Ok(d) => {
                    assert_eq!(got, Ok(d), "{name}");
                    v.push(Case::ok("date_check", name, why, input, json!({"date": d})));
                }
                Err(e) => {
                    check(name, got, &e);
                    v.push(Case::err("date_check", name, why, input, e));
                }
            }
        };
    let d = replay::format_date(now);
    add("date-fresh", "exactly now", Some(d.clone()), now, Ok(now));
    add(
        "date-edge-late",
        "|Date - now| = W is accepted",
        Some(d.clone()),
        now + 60,
        Ok(now),
    );
    add(
        "date-edge-early",
        "|Date - now| = W is accepted",
        Some(d.clone()),
        now - 60,
        Ok(now),
    );
    add(
        "date-stale",
        "W + 1 seconds old",
        Some(d.clone()),
        now + 61,
        Err(Error::Stale),
    );
    add(
        "date-future",
        "W + 1 seconds ahead",
        Some(d),
        now - 61,
        Err(Error::Stale),
    );
    add(
        "date-missing",
        "a missing Date is stale",
        None,
        now,
        Err(Error::Stale),
    );
    add(
        "date-garbage",
        "an unparseable Date",
        Some("yesterday".into()),
        now,
        Err(Error::BadDate),
    );
    v
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    [
        b64u_cases(),
        kex_cases(),
        inner_cases(),
        route_cases(),
        cookie_cases(),
        date_cases(),
    ]
    .concat()
}
