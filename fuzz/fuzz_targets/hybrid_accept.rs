//! The server's judgement of a hybrid request (spec/hybrid.md H3):
//! `hybrid::exchange::accept` on a fuzzer-built POST or GET whose cookie and
//! body (or query) come from the input, against a fixed `HybridKeys`; then
//! `hybrid::exchange::open_request`.
//!
//! Input: `flags u8 | cookie_len u16 | cookie | body`. flags bit 0: GET form
//! (the body becomes the base64url query); bit 1: the cookie is prefixed by
//! the fixture's suite-2 key ID (so the agreement runs on fuzzer bytes).
//!
//! Asserts: errors are outer errors with an outer problem (the hybrid ones
//! included), or stream and inner errors once the key is agreed; an
//! accepted fresh-key request names the fixture's suite-2 key ID and its
//! session key is the one `HybridServerKey::agree` gives for its cookie and
//! ciphertext; the GET query stream is the decoded query after the
//! ciphertext.

#![no_main]

use httpcrypt_fuzz::{
    assert_errors, hybrid_fixture, hybrid_keys, Input, INNER_ERRORS, NOW, STREAM_ERRORS,
};
use httpcrypt_proto::b64;
use httpcrypt_proto::error::Scope;
use httpcrypt_proto::hybrid::exchange;
use httpcrypt_proto::hybrid::CIPHERTEXT_LEN;
use httpcrypt_proto::outer::{Credential, Mount};
use httpcrypt_proto::server::{Accept, CookieFields, OuterRequest};
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
    Error::BadCiphertext,
    Error::HybridRequired,
];

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let cookie_len = usize::from(input.u16());
    let cookie_raw = input.bytes(cookie_len);
    let body = input.rest();
    let (cert, _) = hybrid_fixture();
    let keys = hybrid_keys();
    let mut cookie = Vec::new();
    if flags & 2 != 0 {
        cookie.extend_from_slice(cert.kid().to_b64().as_bytes());
        cookie.push(b'=');
    }
    cookie.extend_from_slice(cookie_raw);
    let get = flags & 1 != 0;
    let n0 = b64::encode(&[7u8; 24]);
    let target = if get {
        format!("/hc/{n0}?{}", b64::encode(body))
    } else {
        format!("/hc/{n0}")
    };
    let req = OuterRequest {
        method: if get { "GET" } else { "POST" },
        target: &target,
        host: Some(b"example.com"),
        cookies: CookieFields::from_slice(&[&cookie]),
        content_length: (!get).then_some(body.len() as u64),
        has_body: !get && !body.is_empty(),
    };
    let mount = Mount::new("/hc").expect("a valid mount");
    let limits = Limits::default();
    let post_body: &[u8] = if get { &[] } else { body };
    let a = exchange::accept(keys, &mount, &req, post_body, &limits, NOW);
    assert_errors(&a, OUTER_ERRORS);
    if let Err(e) = &a {
        assert_eq!(e.problem().map(|p| p.scope), Some(Scope::Outer));
    }
    let Ok(Accept::Request(accepted)) = a else {
        return;
    };
    if let Credential::Key { kid, client_public } = &accepted.credential {
        assert_eq!(*kid, cert.kid());
        let k = keys
            .key(kid, NOW)
            .expect("the key is held")
            .agree(client_public, body)
            .expect("the agreement succeeded once");
        assert_eq!(&k, accepted.session_key());
        if get {
            assert_eq!(
                accepted.query_stream.as_deref(),
                Some(&body[CIPHERTEXT_LEN..])
            );
        }
    }
    let opened = exchange::open_request(&accepted, post_body, &limits);
    let mut allowed = STREAM_ERRORS.to_vec();
    allowed.extend_from_slice(INNER_ERRORS);
    assert_errors(&opened, &allowed);
});
