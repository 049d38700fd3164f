//! The server's judgement of an outer request (spec §4.1, §11):
//! `server::accept` on a fuzzer-built `OuterRequest` against a fixed
//! `ServerKeys`, then `server::open_request` on the body; plus `outer::route`,
//! `outer::parse_nonce` and `outer::decode_query` on the same target.
//!
//! Input: `flags u8 | content_length u64 | plan u32 | text`, where text is
//! `method \n target \n host \n cookie… \n \n body` (the body is everything
//! after the first blank line).
//! - flags bit 0: the Host field is present; bit 1: Content-Length present;
//!   bit 2: `has_body`; bits 3–4: mount index; bits 5–6: limits preset.
//!
//! Asserts: errors are outer errors with an outer problem; `accept` agrees
//! with `route` (non-request routes map one to one, route errors come back
//! unless Host is missing, which comes first); an accepted request names the
//! current server key, carries the credential `scan_cookies` finds and the
//! session key the fixture keys derive; the GET query stream is
//! `decode_query`'s; `open_request` fails only with stream or inner errors
//! and agrees with opening the stream in pieces; a parsed nonce or query
//! re-encodes to the same text.

#![no_main]

use httpcrypt_fuzz::{
    assert_errors, decode_pieces, limits, open_pieces, server_keys, split, ticket_key, Input,
    INNER_ERRORS, MOUNTS, NOW, SERVER_SECRET, STREAM_ERRORS,
};
use httpcrypt_proto::b64;
use httpcrypt_proto::error::Scope;
use httpcrypt_proto::inner::RequestHead;
use httpcrypt_proto::keys::KexSecret;
use httpcrypt_proto::outer::{self, Credential, Mount, Route};
use httpcrypt_proto::profile::{self, Profile};
use httpcrypt_proto::server::{self, Accept, CookieFields, OuterRequest};
use httpcrypt_proto::{Error, Limits};
use libfuzzer_sys::fuzz_target;

const OUTER_ERRORS: &[Error] = &[
    Error::BadHost,
    Error::BadNoncePath,
    Error::BadQuery,
    Error::NoCookie,
    Error::BadCookie,
    Error::UnknownKey,
    Error::SmallOrder,
    Error::BodyTooLarge,
];

fn check_route(method: &str, target: &str, mount: &Mount, limits: &Limits) {
    let r = outer::route(method, target, mount);
    assert_errors(&r, &[Error::BadNoncePath, Error::BadQuery]);
    let path = target.split('?').next().unwrap_or("");
    match r {
        Ok(Route::Post { n0, profile }) => {
            assert_eq!(method, "POST");
            assert_eq!(
                path,
                mount.nonce_path_for(profile, &n0),
                "nonce path round trip"
            );
        }
        Ok(Route::Get { n0, query, profile }) => {
            assert_eq!(method, "GET");
            assert_eq!(
                path,
                mount.nonce_path_for(profile, &n0),
                "nonce path round trip"
            );
            assert!(target.ends_with(query) && target.len() > query.len());
            if let Ok(stream) = outer::decode_query(query, limits.max_body) {
                assert_eq!(
                    mount.get_target_for(profile, &n0, &stream),
                    target,
                    "GET target round trip"
                );
            }
        }
        Ok(Route::Options) => {
            assert_eq!((method, path), ("OPTIONS", mount.options_path().as_str()))
        }
        _ => {}
    }
}

fn check_text_parsers(text: &str, max_body: usize) {
    let n = outer::parse_nonce(text);
    assert_errors(&n, &[Error::BadNoncePath]);
    if let Ok(n0) = n {
        assert_eq!(b64::encode(&n0), text, "nonce re-encodes");
    }
    let q = outer::decode_query(text, max_body);
    assert_errors(&q, &[Error::BadQuery, Error::BodyTooLarge]);
    if let Ok(stream) = q {
        assert_eq!(b64::encode(&stream), text, "query re-encodes");
    }
}

/// A request that passed route, Host and body checks failed on its cookie:
/// the error is `scan_cookies`'s, or the key agreement's, or the ticket's.
fn check_cookie_error(cookies: &[&[u8]], e: Error) {
    let keys = server_keys();
    match outer::scan_cookies(cookies.iter().copied(), |id| keys.lookup(id, NOW)) {
        Err(se) => assert_eq!(e, se),
        Ok(Credential::Key { .. }) => assert_eq!(e, Error::SmallOrder),
        Ok(Credential::Ticket { .. } | Credential::ShortTicket { .. }) => {
            assert_eq!(e, Error::UnknownKey)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let content_length = input.u64();
    let plan = input.u32();
    let text = input.rest();

    let (head, body) = match text.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&text[..i], &text[i + 2..]),
        None => (text, &[][..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let method = String::from_utf8_lossy(lines.next().unwrap_or_default());
    let target = String::from_utf8_lossy(lines.next().unwrap_or_default());
    let host_line = lines.next().unwrap_or_default();
    let cookies: Vec<&[u8]> = lines.collect();

    let mount =
        Mount::new(MOUNTS[usize::from(flags >> 3 & 3) % MOUNTS.len()]).expect("fixed mount");
    let limits = limits(flags >> 5 & 3);
    let req = OuterRequest {
        method: &method,
        target: &target,
        host: (flags & 1 != 0).then_some(host_line),
        cookies: CookieFields::from_slice(&cookies),
        content_length: (flags & 2 != 0).then_some(content_length),
        has_body: flags & 4 != 0,
    };

    check_route(&method, &target, &mount, &limits);
    check_text_parsers(&target, limits.max_body);
    if let Some((_, q)) = target.split_once('?') {
        check_text_parsers(q, limits.max_body);
    }

    let keys = server_keys();
    let accepted = server::accept(keys, &mount, &req, &limits, NOW, &mut server::Plain);
    assert_errors(&accepted, OUTER_ERRORS);
    if let Err(e) = &accepted {
        let p = e.problem().expect("request errors have a problem");
        assert_eq!(p.scope, Scope::Outer, "{e:?} must be reported outside");
    }

    let route = outer::route(&method, &target, &mount);
    // A profile-2 request must also be able to bind its Host (spec §4.5).
    let compact = matches!(
        route,
        Ok(Route::Post {
            profile: Profile::Compact,
            ..
        } | Route::Get {
            profile: Profile::Compact,
            ..
        })
    );
    let host_ok = req
        .host
        .is_some_and(|h| !h.is_empty() && !(compact && h.len() > profile::MAX_BOUND_HOST));
    let acc = match (&route, accepted) {
        (Ok(Route::Outside), r) => return assert!(matches!(r, Ok(Accept::Outside))),
        (Ok(Route::Options), r) => return assert!(matches!(r, Ok(Accept::Options))),
        (Ok(Route::MethodNotAllowed), r) => {
            return assert!(matches!(r, Ok(Accept::MethodNotAllowed)))
        }
        (Ok(Route::NotFound), r) => return assert!(matches!(r, Ok(Accept::NotFound))),
        (_, Err(e)) if !host_ok => return assert_eq!(e, Error::BadHost),
        (Err(re), r) => return assert_eq!(r.err().as_ref(), Some(re)),
        (Ok(Route::Post { .. }), Err(e)) => {
            if req
                .content_length
                .is_some_and(|l| l > limits.max_body as u64)
            {
                return assert_eq!(e, Error::BodyTooLarge);
            }
            return check_cookie_error(&cookies, e);
        }
        (Ok(Route::Get { query, .. }), Err(e)) => {
            if req.has_body {
                return assert_eq!(e, Error::BadQuery);
            }
            if let Err(qe) = outer::decode_query(query, limits.max_body) {
                return assert_eq!(e, qe);
            }
            return check_cookie_error(&cookies, e);
        }
        (Ok(Route::Post { n0, profile }), Ok(Accept::Request(acc))) => {
            assert_eq!((acc.n0, acc.profile), (*n0, *profile));
            assert!(acc.query_stream.is_none());
            assert!(content_length <= limits.max_body as u64 || flags & 2 == 0);
            acc
        }
        (Ok(Route::Get { n0, query, profile }), Ok(Accept::Request(acc))) => {
            assert_eq!((acc.n0, acc.profile), (*n0, *profile));
            assert!(!req.has_body);
            assert_eq!(
                acc.query_stream.as_ref(),
                outer::decode_query(query, limits.max_body).ok().as_ref()
            );
            acc
        }
        (Ok(_), Ok(other)) => panic!("route {route:?} but accept gave {other:?}"),
    };

    // The credential is what scan_cookies finds, and the session key is
    // the one the fixture keys derive for it.
    assert!(host_ok);
    let server_secret = KexSecret::from_bytes(SERVER_SECRET);
    assert_eq!(
        acc.kid,
        server_secret.kid(),
        "accepted under the current key only"
    );
    let scanned = outer::scan_cookies(cookies.iter().copied(), |id| keys.lookup(id, NOW));
    assert_eq!(scanned.as_ref(), Ok(&acc.credential));
    match &acc.credential {
        Credential::Key { kid, client_public } => {
            assert_eq!(*kid, acc.kid);
            let k = server_secret
                .session_key(client_public)
                .expect("accepted key agrees");
            assert_eq!(&k, acc.session_key());
        }
        Credential::Ticket { tid, sealed } => {
            assert_eq!(*tid, ticket_key().tid());
            let contents = ticket_key()
                .open(sealed, NOW)
                .expect("accepted ticket opens");
            assert_eq!(contents.kid, acc.kid);
            assert_eq!(&contents.key, acc.session_key());
        }
        Credential::ShortTicket { tid, h } => {
            // Spec §7.3: the ticket key names its kex key; k' is derived.
            assert_eq!(*tid, ticket_key().tid());
            assert_eq!(acc.kid, httpcrypt_fuzz::server_cert().kid());
            assert_eq!(&ticket_key().short_key(&acc.kid, h), acc.session_key());
        }
    }

    // The stream: whole (open_request) against pieces.
    let opened = server::open_request(&acc, body, &limits);
    let all_errors = [STREAM_ERRORS, INNER_ERRORS].concat();
    assert_errors(&opened, &all_errors);
    let stream_bytes = acc.query_stream.as_deref().unwrap_or(body);
    let pieces = split(stream_bytes, plan);
    let by_pieces =
        open_pieces(acc.opener(&limits), &pieces, plan & 0x100 != 0).and_then(|records| {
            let plaintext: Vec<u8> = records.into_iter().flat_map(|(p, _)| p).collect();
            decode_pieces::<RequestHead>(limits, &split(&plaintext, plan.rotate_left(16)))
        });
    assert_eq!(
        opened, by_pieces,
        "open_request disagrees with the piecewise path"
    );
    if let Ok((head, _)) = &opened {
        let date = httpcrypt_proto::inner::field(&head.fields, "date");
        let d = acc.check_time(date, NOW, 60);
        assert_errors(&d, &[Error::Stale, Error::BadDate]);
    }
});
