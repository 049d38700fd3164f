//! The application-level token of spec §8: the client sends
//! `Client-Random: b64u(24 bytes)`, the server answers
//! `Random: b64u(client_random || server_random)` where `server_random` is
//! a keyed hash the server can recheck later without keeping state.

use subtle::ConstantTimeEq;

use crate::b64;
use crate::error::{Error, Result};
use crate::keys::SessionKey;
use crate::suite::sha3_256;

/// Inner request field with the client's random.
pub const CLIENT_RANDOM_FIELD: &str = "Client-Random";
/// Inner response field with the token.
pub const RANDOM_FIELD: &str = "Random";
const LABEL: &[u8] = b"hc1-token";

/// The session key a `Random` in an answer is bound to (spec §7.3, §8.4):
/// the short ticket's `k'` when the answer issues one, since its client's
/// next request runs under it; else `request_key`, the key of the request
/// it answers.
pub fn bound_key<'a>(
    request_key: &'a SessionKey,
    short: Option<&'a crate::ticket::ShortTicket>,
) -> &'a SessionKey {
    short.map_or(request_key, |t| t.key())
}

/// Whether `method` is safe (RFC 9110 §9.2.1): it changes nothing, so its
/// request carries no `Client-Random` and the server demands no token.
/// Every other method is treated as one that may change state.
pub fn is_safe(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

/// `SHA3-256("hc1-token" || token_secret || k || client_random)[0..16]`.
pub fn server_random(token_secret: &[u8], k: &SessionKey, client_random: &[u8; 24]) -> [u8; 16] {
    sha3_256(&[LABEL, token_secret, k.as_bytes(), client_random])[..16]
        .try_into()
        .expect("hash is longer than 16 bytes")
}

/// Parses a `Client-Random` value.
pub fn parse_client_random(value: &[u8]) -> Result<[u8; 24]> {
    b64::decode_array::<24>(value)
}

/// The `Random` value answering `client_random`.
pub fn format_random(token_secret: &[u8], k: &SessionKey, client_random: &[u8; 24]) -> String {
    let sr = server_random(token_secret, k, client_random);
    b64::encode(&[client_random.as_slice(), &sr].concat())
}

/// Rechecks a `Random` value; returns the client random it vouches for.
pub fn verify_random(token_secret: &[u8], k: &SessionKey, value: &[u8]) -> Result<[u8; 24]> {
    let raw = b64::decode_array::<40>(value).map_err(|_| Error::BadToken)?;
    let cr: [u8; 24] = raw[..24].try_into().expect("fixed layout");
    let expected = server_random(token_secret, k, &cr);
    if bool::from(expected.ct_eq(&raw[24..])) {
        Ok(cr)
    } else {
        Err(Error::BadToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trip() {
        let k = SessionKey::from_bytes([1; 32]);
        let v = format_random(b"secret", &k, &[2; 24]);
        assert_eq!(v.len(), 54);
        assert_eq!(verify_random(b"secret", &k, v.as_bytes()).unwrap(), [2; 24]);
        assert_eq!(
            verify_random(b"other", &k, v.as_bytes()),
            Err(Error::BadToken)
        );
        assert_eq!(verify_random(b"secret", &k, b"AAAA"), Err(Error::BadToken));
    }
}
