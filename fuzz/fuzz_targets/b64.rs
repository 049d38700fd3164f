//! Strict base64url (spec §1): `b64::decode` and `b64::decode_array`.
//!
//! Asserts: errors are `bad_base64`; decoding succeeds only on canonical
//! text, so decode ⇒ `encode` gives the same text and `encoded_len` its
//! length; `decode_array::<N>` agrees with `decode` plus a length check;
//! `encode` of the raw bytes decodes back to them and stays in the alphabet.

#![no_main]

use httpcrypt_fuzz::assert_errors;
use httpcrypt_proto::{b64, Error};
use libfuzzer_sys::fuzz_target;

fn check_array<const N: usize>(text: &[u8], decoded: &Result<Vec<u8>, Error>) {
    let a = b64::decode_array::<N>(text);
    assert_errors(&a, &[Error::BadBase64]);
    let expected = decoded.as_ref().ok().filter(|d| d.len() == N);
    assert_eq!(
        a.as_ref().ok().map(|a| &a[..]),
        expected.map(|d| &d[..]),
        "decode_array::<{N}>"
    );
}

fuzz_target!(|data: &[u8]| {
    let d = b64::decode(data);
    assert_errors(&d, &[Error::BadBase64]);
    if let Ok(bytes) = &d {
        assert_eq!(b64::encode(bytes).as_bytes(), data, "decode/encode");
        assert_eq!(b64::encoded_len(bytes.len()), data.len());
        assert!(data.iter().all(|c| b64::is_alphabet(*c)));
    }
    check_array::<10>(data, &d);
    check_array::<24>(data, &d);
    check_array::<32>(data, &d);

    let text = b64::encode(data);
    assert_eq!(text.len(), b64::encoded_len(data.len()));
    assert!(text.bytes().all(b64::is_alphabet));
    assert_eq!(
        b64::decode(text.as_bytes()).as_deref(),
        Ok(data),
        "encode/decode"
    );
    let mut appended = String::from("x");
    b64::encode_to(data, &mut appended);
    assert_eq!(appended[1..], text);
});
