//! The `rspamadm keypair` text form (rspamd profile, "Keys and text
//! encoding"): `rspamd::keypair::parse` on fuzz text.
//!
//! Asserts: errors are `bad_keypair`; a parsed key pair formats (with
//! `keypair::format`) to text that parses to the same key, and that text is a
//! fixed point of format ∘ parse.

#![no_main]

use httpcrypt_fuzz::assert_errors;
use httpcrypt_proto::rspamd::keypair;
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let r = keypair::parse(text);
    assert_errors(&r, &[Error::BadKeypair]);
    let Ok(secret) = r else { return };
    let formatted = keypair::format(&secret);
    let again = keypair::parse(&formatted).expect("formatted key pair parses");
    assert_eq!(again.public(), secret.public(), "format/parse");
    assert_eq!(
        *keypair::format(&again),
        *formatted,
        "format is a fixed point"
    );
});
