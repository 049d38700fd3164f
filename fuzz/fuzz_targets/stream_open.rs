//! Sealed-stream opener (spec §3): `Opener::request` / `Opener::response`
//! under a fixed key, fed in fuzzer-chosen pieces, against `stream::open_all`.
//!
//! Input: `mode u8 | max_record u16 | plan u32 | stream bytes`.
//! - mode bit 0: response stream (else request);
//! - mode bit 1: pull events after every piece (else only at the end);
//! - mode bit 2: `max_record = usize::MAX` (the opener clamps it) instead of the u16;
//! - mode bit 3: instead of opening, seal the bytes with `Sealer` (pieces
//!   as records, bit 4 makes response records CLEAR) and check the round
//!   trip and that a flipped bit (at the u16 % len) is refused.
//!
//! Asserts: no panic; the record limit is `max_record` clamped to
//! `RECORD_FLOOR..=RECORD_CEILING` and judged on the header alone; errors
//! are stream errors (never `ClearInRequest` on a response, never `Data`
//! with `clear` on a request); the record sequence is the same for any
//! split and any event-pull schedule; the plaintext is `open_all`'s.

#![no_main]

use httpcrypt_fuzz::{open_pieces, session_key, split, Input, Record, REQUEST_N0, STREAM_ERRORS};
use httpcrypt_proto::limits::{RECORD_CEILING, RECORD_FLOOR};
use httpcrypt_proto::stream::{self, Opener, ResponseKey, Sealer, RECORD_OVERHEAD};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fn opener(response: bool, max_record: usize) -> Opener {
    let key = session_key();
    if response {
        Opener::response(&key, REQUEST_N0, max_record)
    } else {
        Opener::request(&key, REQUEST_N0, max_record)
    }
}

fn open_and_compare(response: bool, eager: bool, max_record: usize, plan: u32, bytes: &[u8]) {
    let pieces = split(bytes, plan);
    let chunked = open_pieces(opener(response, max_record), &pieces, eager);
    let whole = open_pieces(opener(response, max_record), &[bytes], true);
    assert_errors(&chunked, response);
    assert_eq!(chunked, whole, "split {plan:#x} changed the result");
    let all = stream::open_all(opener(response, max_record), bytes);
    assert_eq!(
        all,
        whole.map(|records| records.concat_plaintext()),
        "open_all disagrees with the event stream"
    );
}

fn assert_errors(r: &Result<Vec<Record>, Error>, response: bool) {
    httpcrypt_fuzz::assert_errors(r, STREAM_ERRORS);
    match r {
        Err(Error::ClearInRequest) => assert!(!response, "ClearInRequest on a response"),
        Ok(records) if !response => {
            assert!(
                records.iter().all(|(_, clear)| !clear),
                "CLEAR data in a request"
            )
        }
        _ => {}
    }
}

trait Concat {
    fn concat_plaintext(self) -> Vec<u8>;
}

impl Concat for Vec<Record> {
    fn concat_plaintext(self) -> Vec<u8> {
        self.into_iter().flat_map(|(p, _)| p).collect()
    }
}

/// Seals `plaintext` with records cut by `plan`, opens it again, then
/// flips one bit and expects a refusal.
fn seal_round_trip(response: bool, clear: bool, plan: u32, flip: usize, plaintext: &[u8]) {
    let key = session_key();
    let mut out = Vec::new();
    let n0 = [0x99; 24];
    let mut sealer = if response {
        Sealer::response(ResponseKey::new(key.clone(), REQUEST_N0), n0, &mut out)
    } else {
        Sealer::request(&key, REQUEST_N0)
    };
    let clear = clear && response;
    let pieces = split(plaintext, plan);
    let (last, init) = pieces
        .split_last()
        .expect("split yields at least one piece");
    let mut expected: Vec<Record> = Vec::new();
    let mut largest = 0;
    for p in init {
        if clear {
            sealer.seal_clear(p, &mut out).expect("seal_clear");
        } else {
            sealer.seal(p, &mut out).expect("seal");
        }
        largest = largest.max(p.len());
        if !p.is_empty() {
            expected.push((p.to_vec(), clear));
        }
    }
    assert_eq!(sealer.records(), init.len() as u64);
    if clear {
        sealer.finish_clear(last, &mut out).expect("finish_clear");
    } else {
        sealer.finish(last, &mut out).expect("finish");
    }
    largest = largest.max(last.len());
    if !last.is_empty() {
        expected.push((last.to_vec(), clear));
    }
    let prefix = if response { 24 } else { 0 };
    assert_eq!(
        out.len(),
        prefix + pieces.len() * RECORD_OVERHEAD + plaintext.len(),
        "sealed length"
    );
    let opened = open_pieces(opener(response, largest), &[&out], true);
    assert_eq!(opened.as_ref(), Ok(&expected), "seal/open round trip");
    // Every bit is authenticated.
    let mut bad = out.clone();
    let i = flip % bad.len();
    bad[i] ^= 1 << (flip % 8);
    let r = stream::open_all(opener(response, largest), &bad);
    assert!(r.is_err(), "flipped bit {i} accepted");
    httpcrypt_fuzz::assert_errors(&r, STREAM_ERRORS);
}

/// The receiver's limit is `max_record` clamped to `RECORD_FLOOR..=RECORD_CEILING`
/// (spec §3), and a header is judged before its payload is awaited (spec §11):
/// one byte over is `record_too_large` at once, the limit itself waits.
fn check_limit(response: bool, max_record: usize) {
    let limit = max_record.clamp(RECORD_FLOOR, RECORD_CEILING);
    for (len, want) in [(limit, Ok(None)), (limit + 1, Err(Error::RecordTooLarge))] {
        let mut o = opener(response, max_record);
        if response {
            o.receive(&[0; 24]).expect("nonce");
        }
        o.receive(&(len as u32).to_be_bytes()).expect("header");
        assert_eq!(o.next_event(), want, "record of {len} under limit {limit}");
        assert!(!o.is_complete());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8();
    let max16 = input.u16();
    let plan = input.u32();
    let bytes = input.rest();
    let response = mode & 1 != 0;
    if mode & 8 != 0 {
        seal_round_trip(response, mode & 16 != 0, plan, usize::from(max16), bytes);
        return;
    }
    let max_record = if mode & 4 != 0 {
        usize::MAX
    } else {
        usize::from(max16)
    };
    check_limit(response, max_record);
    open_and_compare(response, mode & 2 != 0, max_record, plan, bytes);
});
