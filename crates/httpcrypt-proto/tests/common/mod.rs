//! Helpers shared by the integration tests: JSON field access and feeding
//! input at every split.
#![allow(dead_code)]

pub mod hybrid;
pub mod rspamd;

use serde_json::Value;

/// A string member.
pub fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("member {k} is a string"))
}

/// An integer member.
pub fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("member {k} is an integer"))
}

/// A hex member as bytes.
pub fn hx(v: &Value, k: &str) -> Vec<u8> {
    hex::decode(s(v, k)).unwrap_or_else(|_| panic!("member {k} is hex"))
}

/// A hex member as a fixed-size array.
pub fn arr<const N: usize>(v: &Value, k: &str) -> [u8; N] {
    hx(v, k)
        .try_into()
        .unwrap_or_else(|_| panic!("member {k} has {N} bytes"))
}

/// Calls `f` with the input whole, byte by byte, and split in two at every
/// offset (inputs above 4 KiB: at 64 spread offsets, to bound the cost).
pub fn for_every_split(input: &[u8], mut f: impl FnMut(&[&[u8]])) {
    f(&[input]);
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    f(&bytes);
    let step = if input.len() > 4096 {
        input.len() / 64
    } else {
        1
    };
    for at in (0..=input.len()).step_by(step.max(1)) {
        let (a, b) = input.split_at(at);
        f(&[a, b]);
    }
}
