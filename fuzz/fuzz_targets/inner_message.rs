//! The inner HTTP/1.1 message (spec §4.3): `inner::Decoder<RequestHead>`
//! and `Decoder<ResponseHead>` fed in fuzzer-chosen pieces against
//! `inner::decode_all`.
//!
//! Input: `flags u8 | plan u32 | plaintext`; flags bit 0 picks responses,
//! bits 1–2 the limits preset.
//!
//! Asserts: errors are inner errors; any split gives the same result as
//! the whole input; a parsed message has no forbidden field, a body that
//! matches its Content-Length, and re-encoded (`encode` + body) parses to
//! the same head and body, with an encoding that is then a fixed point.
//! Requests are also decoded as `PackedRequestHead`, whole and in the same
//! pieces, which must agree with `RequestHead` on every input.

#![no_main]

use httpcrypt_fuzz::{assert_errors, decode_pieces, limits, split, Input, INNER_ERRORS};
use httpcrypt_proto::inner::{
    self, Field, Head, PackedRequestHead, RequestHead, ResponseHead, FORBIDDEN,
};
use httpcrypt_proto::Limits;
use libfuzzer_sys::fuzz_target;

trait Encode {
    fn encode_to(&self, out: &mut Vec<u8>);
    fn fields_of(&self) -> &[Field];
}

impl Encode for RequestHead {
    fn encode_to(&self, out: &mut Vec<u8>) {
        self.encode(out)
    }
    fn fields_of(&self) -> &[Field] {
        &self.fields
    }
}

impl Encode for ResponseHead {
    fn encode_to(&self, out: &mut Vec<u8>) {
        self.encode(out)
    }
    fn fields_of(&self) -> &[Field] {
        &self.fields
    }
}

fn check<H>(limits: Limits, plan: u32, plaintext: &[u8])
where
    H: Head + Encode + Clone + PartialEq + core::fmt::Debug,
{
    let whole = inner::decode_all::<H>(plaintext, &limits);
    assert_errors(&whole, INNER_ERRORS);
    let pieces = split(plaintext, plan);
    let by_pieces = decode_pieces::<H>(limits, &pieces);
    assert_eq!(whole, by_pieces, "split {plan:#x} changed the result");

    let Ok((head, body)) = whole else { return };
    for f in head.fields_of() {
        assert!(
            !FORBIDDEN.iter().any(|n| f.is(n)),
            "forbidden field {:?}",
            f.name
        );
    }
    if let Some(cl) = inner::field(head.fields_of(), "content-length") {
        let cl: u64 = std::str::from_utf8(cl)
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("accepted Content-Length is a number");
        assert_eq!(cl, body.len() as u64, "body length");
    }
    assert!(head.fields_of().len() <= limits.max_inner_fields);

    // Re-encoding may lengthen the head (`Name:v` → `Name: v`): allow it.
    let relaxed = Limits {
        max_inner_head: usize::MAX,
        ..limits
    };
    let mut encoded = Vec::new();
    head.encode_to(&mut encoded);
    let head_len = encoded.len();
    encoded.extend_from_slice(&body);
    let again = inner::decode_all::<H>(&encoded, &relaxed);
    assert_eq!(
        again.as_ref(),
        Ok(&(head.clone(), body.clone())),
        "re-encoded message"
    );
    let mut twice = Vec::new();
    again.expect("checked above").0.encode_to(&mut twice);
    assert_eq!(twice, encoded[..head_len], "encoding is not a fixed point");
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let plan = input.u32();
    let plaintext = input.rest();
    let limits = limits(flags >> 1 & 3);
    if flags & 1 == 0 {
        check::<RequestHead>(limits, plan, plaintext);
        let owned = inner::decode_all::<RequestHead>(plaintext, &limits);
        let packed = inner::decode_all::<PackedRequestHead>(plaintext, &limits)
            .map(|(p, body)| (p.to_head(), body));
        assert_eq!(packed, owned, "packed and owned request heads differ");
        // The packed head takes the decoder's bytes as they are split.
        let pieces = split(plaintext, plan);
        let packed_pieces = decode_pieces::<PackedRequestHead>(limits, &pieces)
            .map(|(p, body)| (p.to_head(), body));
        assert_eq!(packed_pieces, owned, "split {plan:#x} changed the packed head");
    } else {
        check::<ResponseHead>(limits, plan, plaintext);
    }
});
