//! Session tickets (spec §7.2): `TicketKey::open` on fuzz bytes under the
//! fixture ticket key, and `Ticket::from_field` on the same bytes as text.
//!
//! Input: `now u64 | bytes`; the first 86 bytes are the sealed ticket
//! (`ticket[10..]`, zero-filled when shorter).
//!
//! Asserts: `open` fails only with `unknown_key`; an opened ticket has not
//! expired at `now` and re-seals with its own nonce to the same bytes; a
//! `Ticket` field parses only from canonical base64url of 96 bytes, and
//! `to_field`, `tid` and `sealed` give back what was parsed. A short
//! ticket field (spec §7.3) parses only from canonical base64url of 58
//! bytes and formats back to the same text; `AnyTicket` takes either.

#![no_main]

use httpcrypt_fuzz::{assert_errors, ticket_key, Input};
use httpcrypt_proto::b64;
use httpcrypt_proto::ticket::{
    AnyTicket, ShortTicket, Ticket, SEALED_TICKET_LEN, SHORT_TICKET_LEN, TICKET_LEN,
};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let now = input.u64();
    let rest = input.rest();

    let tk = ticket_key();
    let mut sealed = [0u8; SEALED_TICKET_LEN];
    let n = rest.len().min(SEALED_TICKET_LEN);
    sealed[..n].copy_from_slice(&rest[..n]);
    let opened = tk.open(&sealed, now);
    assert_errors(&opened, &[Error::UnknownKey]);
    if let Ok(contents) = &opened {
        assert!(now <= u64::from(contents.expiry), "expired ticket opened");
        let nonce: [u8; 24] = sealed[..24].try_into().expect("24 bytes");
        let again = tk.seal(contents, nonce);
        assert_eq!(again.tid(), tk.tid());
        assert_eq!(again.sealed(), &sealed[..], "re-sealed ticket differs");
        assert_eq!(
            tk.open(&sealed, u64::from(contents.expiry)).as_ref(),
            Ok(contents)
        );
        if contents.expiry < u32::MAX {
            assert_eq!(
                tk.open(&sealed, u64::from(contents.expiry) + 1),
                Err(Error::UnknownKey)
            );
        }
    }

    let t = Ticket::from_field(rest);
    assert_errors(&t, &[Error::BadBase64]);
    assert_eq!(
        t.is_ok(),
        b64::decode(rest).is_ok_and(|b| b.len() == TICKET_LEN),
        "from_field accepts exactly canonical 96-byte base64url"
    );
    if let Ok(t) = &t {
        assert_eq!(t.to_field().as_bytes(), rest, "from_field/to_field");
        assert_eq!(t.tid().0[..], t.0[..10]);
        assert_eq!(t.sealed(), &t.0[10..]);
        if t.tid() == tk.tid() {
            let s: [u8; SEALED_TICKET_LEN] = t.sealed().try_into().expect("fixed layout");
            assert_errors(&tk.open(&s, now), &[Error::UnknownKey]);
        }
    }

    let short = ShortTicket::from_field(rest);
    assert_errors(&short, &[Error::BadBase64]);
    assert_eq!(
        short.is_ok(),
        b64::decode(rest).is_ok_and(|b| b.len() == SHORT_TICKET_LEN),
        "from_field accepts exactly canonical 58-byte base64url"
    );
    if let Ok(s) = &short {
        assert_eq!(s.to_field().as_bytes(), rest, "short from_field/to_field");
    }
    match AnyTicket::from_field(rest) {
        Ok(AnyTicket::V1(a)) => assert_eq!(t.as_ref(), Ok(&a)),
        Ok(AnyTicket::Short(a)) => assert_eq!(short.as_ref(), Ok(&a)),
        Err(e) => {
            assert_eq!(e, Error::BadBase64);
            assert!(t.is_err() && short.is_err());
        }
    }
});
