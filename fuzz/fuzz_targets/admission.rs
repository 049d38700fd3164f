//! Load-aware admission on the wire (spec §14.3, §14.4): the cookie a
//! client echoes (`AdmitCookie::parse`, `parse_echo`, `find_echo`) and the
//! refusal a client reads (`parse_refusal`), on fuzz bytes.
//!
//! Input: `mode u8 | rest`. Mode 0: `rest` is a cookie text; 1: an echo
//! text; 2: `Cookie` field values separated by `\n`; 3: a problem document.
//!
//! Asserts: errors are `bad_admission`; what parses re-encodes to the same
//! text; an echo splits into a cookie and a solution that format back to it.

#![no_main]

use httpcrypt_fuzz::{assert_errors, Input};
use httpcrypt_proto::admission::{self, AdmitCookie};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8() % 4;
    let rest = input.rest();
    match mode {
        0 => {
            let c = AdmitCookie::parse(rest);
            assert_errors(&c, &[Error::BadAdmission]);
            if let Ok(c) = c {
                let mut text = String::new();
                c.encode_to(&mut text);
                assert_eq!(text.as_bytes(), rest, "a cookie re-encodes");
            }
        }
        1 => {
            let e = admission::parse_echo(rest);
            assert_errors(&e, &[Error::BadAdmission]);
            if let Ok((c, s)) = e {
                assert_eq!(admission::format_echo(&c, &s).as_bytes(), rest);
            }
        }
        2 => {
            let fields: Vec<&[u8]> = rest.split(|b| *b == b'\n').collect();
            if let Some(v) = admission::find_echo(fields.iter().copied()) {
                let inside = fields
                    .iter()
                    .any(|f| f.windows(v.len().max(1)).any(|w| w == v) || v.is_empty());
                assert!(inside, "the echo comes from the fields");
                assert_errors(&admission::parse_echo(v), &[Error::BadAdmission]);
            }
        }
        _ => {
            assert_errors(&admission::parse_refusal(rest), &[Error::BadAdmission]);
        }
    }
});
