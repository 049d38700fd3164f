//! rspamd base32 (rspamd profile, "Keys and text encoding"):
//! `base32::decode`, `decode_array`, `decode_key`, and the key-ID and
//! public-key text forms built on them.
//!
//! Asserts: errors are `bad_base32`; decoding accepts only what `encode`
//! produces (decode ⇒ encode gives the same text, of `encoded_len`);
//! `decode_array::<N>` agrees with `decode` plus a length check;
//! `decode_key` accepts the 52-character form and the 51-character form of a
//! key with its top bit clear, nothing else; `KeyId::from_base32` and
//! `public_from_base32` round-trip; `encode` of the raw bytes decodes back.

#![no_main]

use httpcrypt_fuzz::assert_errors;
use httpcrypt_proto::rspamd::base32;
use httpcrypt_proto::rspamd::keys::{public_from_base32, public_to_base32, KeyId};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fn check_array<const N: usize>(text: &[u8], decoded: &Result<Vec<u8>, Error>) {
    let a = base32::decode_array::<N>(text);
    assert_errors(&a, &[Error::BadBase32]);
    let expected = decoded.as_ref().ok().filter(|d| d.len() == N);
    assert_eq!(
        a.as_ref().ok().map(|a| &a[..]),
        expected.map(|d| &d[..]),
        "decode_array::<{N}>"
    );
}

fuzz_target!(|data: &[u8]| {
    let d = base32::decode(data);
    assert_errors(&d, &[Error::BadBase32]);
    if let Ok(bytes) = &d {
        assert_eq!(base32::encode(bytes).as_bytes(), data, "decode/encode");
        assert_eq!(base32::encoded_len(bytes.len()), data.len());
        assert!(data.iter().all(|c| base32::ALPHABET.contains(c)));
    }
    check_array::<5>(data, &d);
    check_array::<32>(data, &d);
    check_array::<64>(data, &d);

    let k = base32::decode_key(data);
    assert_errors(&k, &[Error::BadBase32]);
    if let Ok(key) = &k {
        let text = base32::encode(key);
        match data.len() {
            52 => assert_eq!(text.as_bytes(), data, "52-char key"),
            51 => {
                assert_eq!(key[31] & 0x80, 0, "51 chars carry 255 bits");
                assert_eq!(&text.as_bytes()[..51], data, "51-char key");
            }
            n => panic!("decode_key accepted {n} characters"),
        }
        let pk = public_from_base32(data).expect("same decoder");
        assert_eq!(&pk.0, key);
        assert_eq!(public_to_base32(&pk), text);
    } else {
        assert!(public_from_base32(data).is_err());
    }

    let id = KeyId::from_base32(data);
    assert_errors(&id, &[Error::BadBase32]);
    if let Ok(id) = &id {
        assert_eq!(id.to_base32().as_bytes(), data, "KeyId round trip");
        assert_eq!(id.short().to_base32().as_bytes(), &data[..8]);
    }

    let text = base32::encode(data);
    assert_eq!(text.len(), base32::encoded_len(data.len()));
    assert_eq!(
        base32::decode(text.as_bytes()).as_deref(),
        Ok(data),
        "encode/decode"
    );
    let mut appended = String::from("x");
    base32::encode_to(data, &mut appended);
    assert_eq!(appended[1..], text);
});
