//! The rspamd request path (rspamd profile, "Request", "Cryptography"):
//! `KeyHeader::parse` on the `Key` value, `Keyring::open_request` on the
//! body under a keyring holding a real `rspamadm` key, and `Nm::open` under
//! a fixed `nm`.
//!
//! Input: `Key value \n body` (split at the first LF; no LF: no body).
//!
//! Asserts: `parse` fails only with `bad_key_header` and answers `None`
//! exactly when the trimmed value has no `=`; a parsed header formats to a
//! value that parses to the same header (byte for byte when the input was
//! in rspamc's form); `open_request` fails only with `unknown_key`,
//! `small_order`, `truncated` or `integrity`, agrees with deriving `nm` by
//! hand, and its responder seals a response that `nm` opens; `Nm::open`
//! is `truncated` exactly below 40 bytes, and an opened body re-seals with
//! its own nonce to the same bytes.

#![no_main]

use httpcrypt_fuzz::assert_errors;
use httpcrypt_fuzz::rspamd::{keyring, nm, server_secret};
use httpcrypt_proto::rspamd::cryptobox::{Nm, OVERHEAD};
use httpcrypt_proto::rspamd::keys::ShortId;
use httpcrypt_proto::rspamd::KeyHeader;
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// `Nm::open` contract, and re-sealing an opened body.
fn check_open(nm: &Nm, body: &[u8]) -> Result<Vec<u8>, Error> {
    let r = nm.open(body);
    if body.len() < OVERHEAD {
        assert_eq!(r, Err(Error::Truncated));
    } else {
        assert_errors(&r, &[Error::Integrity]);
    }
    if let Ok(plain) = &r {
        let nonce: [u8; 24] = body[..24].try_into().expect("24 bytes");
        let mut again = Vec::new();
        nm.seal(&nonce, plain, &mut again).expect("seal");
        assert_eq!(again, body, "re-sealed body differs");
    }
    r
}

fuzz_target!(|data: &[u8]| {
    let (value, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };

    check_open(&nm(), body).ok();

    let h = KeyHeader::parse(value);
    assert_errors(&h, &[Error::BadKeyHeader]);
    let trimmed = trim(value);
    let has_eq = trimmed.contains(&b'=');
    assert_eq!(matches!(h, Ok(None)), !has_eq, "None iff no '='");
    let Ok(Some(h)) = h else { return };
    let formatted = h.format();
    assert_eq!(
        KeyHeader::parse(formatted.as_bytes()),
        Ok(Some(h)),
        "format/parse"
    );
    if trimmed.len() == formatted.len() && trimmed.get(8) == Some(&b'=') {
        assert_eq!(
            formatted.as_bytes(),
            trimmed,
            "rspamc form re-formats byte for byte"
        );
    }

    let ring = keyring();
    let opened = ring.open_request(&h, body);
    assert_errors(
        &opened,
        &[
            Error::UnknownKey,
            Error::SmallOrder,
            Error::Truncated,
            Error::Integrity,
        ],
    );
    let server = server_secret();
    let ours = ShortId::of(server.public()) == h.short_id;
    match (&opened, ours) {
        (Err(Error::UnknownKey), mine) => {
            assert!(
                !mine || ring.find(&h.short_id).count() > 1,
                "own key reported unknown"
            )
        }
        (_, false) => {
            assert!(
                ring.find(&h.short_id).next().is_some(),
                "opened under an unknown short ID"
            )
        }
        (r, true) => {
            let by_hand = Nm::derive(&server, &h.client).and_then(|nm| check_open(&nm, body));
            assert_eq!(
                r.as_ref().map(|(inner, _)| inner),
                by_hand.as_ref(),
                "open_request vs Nm"
            );
        }
    }
    let Ok((inner, responder)) = opened else {
        return;
    };
    let mut out = Vec::new();
    responder
        .seal_response_with(&[0x31; 24], &inner, &mut out)
        .expect("seal response");
    let head_end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head")
        + 4;
    let nm = Nm::derive(&server, &h.client).expect("opened, so nm derives");
    assert_eq!(
        check_open(&nm, &out[head_end..]),
        Ok(inner),
        "response round trip"
    );
});
