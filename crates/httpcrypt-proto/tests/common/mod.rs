//! Helpers shared by the integration tests: JSON field access, feeding
//! input at every split, test-side parsing of outer HTTP requests.
#![allow(dead_code)]

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

/// The parts of an outer HTTP/1.1 request the server judges.
pub struct Outer {
    pub method: String,
    pub target: String,
    pub host: Option<Vec<u8>>,
    pub cookies: Vec<Vec<u8>>,
    pub content_length: Option<u64>,
    pub body: Vec<u8>,
}

/// Parses an outer request with httparse (the IO side's job in production).
pub fn parse_outer(bytes: &[u8]) -> Outer {
    let mut storage = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut storage);
    let n = match req.parse(bytes).expect("outer request parses") {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => panic!("partial outer request"),
    };
    let find = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.to_vec())
    };
    Outer {
        method: req.method.unwrap_or_default().to_string(),
        target: req.path.unwrap_or_default().to_string(),
        host: find("host"),
        cookies: req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
            .map(|h| h.value.to_vec())
            .collect(),
        content_length: find("content-length")
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok()),
        body: bytes[n..].to_vec(),
    }
}
