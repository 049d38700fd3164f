//! The application token (spec §8): `token::verify_random` and
//! `token::parse_client_random` on fuzz bytes, under a fixed secret and key.
//!
//! Asserts: `verify_random` fails only with `bad_token`, and what it accepts
//! is exactly `format_random` of the client random it returns; a parsed
//! `Client-Random` re-encodes to the same text; `format_random` of any 24
//! bytes verifies, and fails under another secret or key.

#![no_main]

use httpcrypt_fuzz::{assert_errors, session_key, TOKEN_SECRET};
use httpcrypt_proto::keys::SessionKey;
use httpcrypt_proto::{b64, token, Error};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let k = session_key();

    let v = token::verify_random(TOKEN_SECRET, &k, data);
    assert_errors(&v, &[Error::BadToken]);
    if let Ok(cr) = &v {
        assert_eq!(token::format_random(TOKEN_SECRET, &k, cr).as_bytes(), data);
    }

    let p = token::parse_client_random(data);
    assert_errors(&p, &[Error::BadBase64]);
    if let Ok(cr) = &p {
        assert_eq!(b64::encode(cr).as_bytes(), data, "Client-Random re-encodes");
    }

    if let Some(cr) = data.get(..24) {
        let cr: [u8; 24] = cr.try_into().expect("24 bytes");
        let value = token::format_random(TOKEN_SECRET, &k, &cr);
        assert_eq!(
            token::verify_random(TOKEN_SECRET, &k, value.as_bytes()),
            Ok(cr)
        );
        assert_eq!(
            token::verify_random(b"another-secret", &k, value.as_bytes()),
            Err(Error::BadToken)
        );
        let other = SessionKey::from_bytes([0x43; 32]);
        assert_eq!(
            token::verify_random(TOKEN_SECRET, &other, value.as_bytes()),
            Err(Error::BadToken)
        );
        // The secret may be any bytes, the fuzz input's tail included.
        let secret = &data[24..];
        let value = token::format_random(secret, &k, &cr);
        assert_eq!(token::verify_random(secret, &k, value.as_bytes()), Ok(cr));
    }
});
