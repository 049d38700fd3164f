//! The key cookie (spec §4.1, §7.2, §11): `outer::scan_cookies` over
//! fuzzer-provided `Cookie` fields with a lookup that knows one kex key ID
//! and one ticket-key ID.
//!
//! Input: `pads u8 | fields`, fields separated by `\n`.
//!
//! Asserts: errors are `no_cookie`, `bad_cookie` or `unknown_key`; the
//! result does not depend on how pairs are spread over fields (all fields
//! joined with `;` scan the same); a credential names a known ID of the
//! right kind, and re-formatted with `format_cookie` (with fuzzer-chosen
//! pads) it scans to the same credential, alone or in front of the fields.

#![no_main]

use httpcrypt_fuzz::{assert_errors, Input};
use httpcrypt_proto::keys::KeyId;
use httpcrypt_proto::outer::{self, Credential, IdKind, MAX_PAD};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

const KEY_ID: KeyId = KeyId([0x01; 10]);
const TICKET_ID: KeyId = KeyId([0x7e; 10]);

fn lookup(id: &KeyId) -> Option<IdKind> {
    match *id {
        KEY_ID => Some(IdKind::Key),
        TICKET_ID => Some(IdKind::Ticket),
        _ => None,
    }
}

fn scan(fields: &[&[u8]]) -> Result<Credential, Error> {
    outer::scan_cookies(fields.iter().copied(), lookup)
}

const PAD: &str = "abcdefghijklmnopqrstuvwxyz-_0123456789";

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let pads = input.u8();
    let text = input.rest();
    let fields: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();

    let r = scan(&fields);
    assert_errors(&r, &[Error::NoCookie, Error::BadCookie, Error::UnknownKey]);

    let joined = fields.join(&b';');
    assert_eq!(scan(&[&joined]), r, "joining fields changed the result");

    let Ok(cred) = r else { return };
    let (id, value): (KeyId, Vec<u8>) = match &cred {
        Credential::Key { kid, client_public } => {
            assert_eq!(lookup(kid), Some(IdKind::Key));
            (*kid, client_public.0.to_vec())
        }
        Credential::Ticket { tid, sealed } => {
            assert_eq!(lookup(tid), Some(IdKind::Ticket));
            (*tid, sealed.to_vec())
        }
        Credential::ShortTicket { tid, h } => {
            assert_eq!(lookup(tid), Some(IdKind::Ticket));
            (*tid, h.to_vec())
        }
    };
    let name_pad = &PAD[..usize::from(pads & 0x0f) % (MAX_PAD + 1)];
    let value_pad = &PAD[PAD.len() - usize::from(pads >> 4) % (MAX_PAD + 1)..];
    for (np, vp) in [("", ""), (name_pad, value_pad)] {
        let cookie = outer::format_cookie(&id, &value, np, vp).expect("valid pads");
        assert_eq!(
            scan(&[cookie.as_bytes()]).as_ref(),
            Ok(&cred),
            "re-formatted {cookie}"
        );
        let mut front = fields.clone();
        front.insert(0, cookie.as_bytes());
        assert_eq!(scan(&front).as_ref(), Ok(&cred), "re-formatted in front");
        let with_ows = format!(" other=1 ;\t{cookie} ");
        assert_eq!(scan(&[with_ows.as_bytes()]).as_ref(), Ok(&cred), "with OWS");
    }
});
