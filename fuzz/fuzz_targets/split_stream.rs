//! Split-stream decoder and splicer (spec/split-serving.md §S4) and the
//! content batch decoder (§S5), fed in fuzzer-chosen pieces.
//!
//! Input: `mode u8 | max_record u16 | plan u32 | bytes`.
//! - mode bit 0: decode the bytes as a content batch answer of
//!   `(max_record % 8) + 1` entries instead of a split stream;
//! - mode bit 1: pull events after every piece (else only at the end);
//! - mode bit 2: instead of decoding, seal the bytes as a public body with
//!   `split::seal_split` (record size `max_record % 64 + 1`), splice it
//!   back and open it under the fixture key: the plaintext must end with
//!   the bytes, and the IDs must be the payloads' BLAKE3.
//!
//! Asserts: no panic; errors are the split codes; the event sequence is
//! the same for any split and pull schedule; a stub is spliced only with
//! a payload of its length and ID; memory held is at most one frame.

#![no_main]

use httpcrypt_fuzz::{session_key, split, Input, REQUEST_N0};
use httpcrypt_proto::split::{
    self as sp, BatchDecoder, BatchEvent, ContentId, SplitDecoder, SplitEvent,
};
use httpcrypt_proto::stream::{self, Opener, ResponseKey, Sealer};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

const SPLIT_ERRORS: &[Error] = &[
    Error::MalformedSplit,
    Error::RecordTooLarge,
    Error::Truncated,
    Error::TrailingData,
];

#[derive(Debug, PartialEq)]
enum Ev {
    Bytes(Vec<u8>),
    Stub(sp::Stub),
    End,
}

fn decode(pieces: &[&[u8]], max: usize, eager: bool) -> Result<Vec<Ev>, Error> {
    let mut d = SplitDecoder::new(max);
    let mut out = Vec::new();
    let pull = |d: &mut SplitDecoder, out: &mut Vec<Ev>| -> Result<(), Error> {
        while let Some(ev) = d.next_event()? {
            out.push(match ev {
                SplitEvent::Nonce(b) | SplitEvent::Verbatim(b) => Ev::Bytes(b.to_vec()),
                SplitEvent::Stub(s) => Ev::Stub(s),
                SplitEvent::End => Ev::End,
            });
        }
        Ok(())
    };
    for p in pieces {
        d.receive(p)?;
        if eager {
            pull(&mut d, &mut out)?;
        }
    }
    pull(&mut d, &mut out)?;
    d.finish()?;
    Ok(out)
}

fn batch(pieces: &[&[u8]], count: usize, max: usize) -> Result<Vec<Option<Vec<u8>>>, Error> {
    let mut d = BatchDecoder::new(count, max);
    let mut out = Vec::new();
    for p in pieces {
        d.receive(p)?;
        while let Some(ev) = d.next_event()? {
            out.push(match ev {
                BatchEvent::Found(b) => Some(b.to_vec()),
                BatchEvent::Missing => None,
            });
        }
    }
    d.finish()?;
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8();
    let max16 = input.u16();
    let plan = input.u32();
    let bytes = input.rest();
    let max = usize::from(max16);
    if mode & 4 != 0 {
        let size = max % 64 + 1;
        let mut out = Vec::new();
        let sealer = Sealer::response(
            ResponseKey::new(session_key(), REQUEST_N0),
            [7; 24],
            &mut out,
        );
        let ids = sp::seal_split(sealer, b"HTTP/1.1 200 OK\r\n\r\n", bytes, size, &mut out)
            .expect("sealing succeeds");
        assert!(ids
            .iter()
            .zip(bytes.chunks(size))
            .all(|(id, c)| *id == ContentId::of(c)));
        let client = sp::splice_all(&out, 1 << 20, |id| {
            bytes
                .chunks(size)
                .find(|c| ContentId::of(c) == *id)
                .map(<[u8]>::to_vec)
        })
        .expect("splices");
        let plain = stream::open_all(
            Opener::response(&session_key(), REQUEST_N0, 1 << 20),
            &client,
        )
        .expect("opens");
        assert!(plain.ends_with(bytes));
        return;
    }
    let pieces = split(bytes, plan);
    if mode & 1 != 0 {
        let count = max % 8 + 1;
        let whole = batch(&[bytes], count, 1 << 20);
        if let Err(e) = &whole {
            assert!(SPLIT_ERRORS.contains(e), "unexpected {e:?}");
        }
        assert_eq!(batch(&pieces, count, 1 << 20), whole);
        return;
    }
    let whole = decode(&[bytes], max, false);
    if let Err(e) = &whole {
        assert!(SPLIT_ERRORS.contains(e), "unexpected {e:?}");
    }
    assert_eq!(decode(&pieces, max, mode & 2 != 0), whole);
    if let Ok(evs) = &whole {
        let limit = max.clamp(16384, 1 << 24);
        for ev in evs {
            if let Ev::Stub(s) = ev {
                assert!(s.len <= limit);
                // Only the payload with the stub's length and ID splices.
                let wrong = vec![0u8; s.len];
                let mut out = Vec::new();
                if ContentId::of(&wrong) != s.id {
                    assert_eq!(s.splice(&wrong, &mut out), Err(Error::ContentMismatch));
                    assert!(out.is_empty());
                }
            }
        }
    }
});
