//! Vectors for split serving (spec/split-serving.md): sealing a public
//! response as a split stream (§S2/§S4), splicing it back with payloads
//! (and the ways a stub, a payload or the stream can be wrong), and the
//! content endpoint's batch answers (§S5).

use std::collections::BTreeMap;

use httpcrypt_proto::split::{self, ContentId};
use httpcrypt_proto::stream::{self, Opener, ResponseKey, Sealer};
use httpcrypt_proto::{Error, SessionKey};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n";
const MAX: usize = 16384;

struct Sealed {
    key: SessionKey,
    request_n0: [u8; 24],
    n0: [u8; 24],
    size: usize,
    body: Vec<u8>,
    split: Vec<u8>,
    ids: Vec<ContentId>,
}

fn seal(label: &str, body: &[u8], size: usize) -> Sealed {
    let key = SessionKey::from_bytes(bytes::<32>(&format!("{label}-key")));
    let request_n0 = bytes::<24>(&format!("{label}-request-n0"));
    let n0 = bytes::<24>(&format!("{label}-n0"));
    let mut out = Vec::new();
    let sealer = Sealer::response(ResponseKey::new(key.clone(), request_n0), n0, &mut out);
    let ids = split::seal_split(sealer, HEAD, body, size, &mut out).expect("seals");
    Sealed {
        key,
        request_n0,
        n0,
        size,
        body: body.to_vec(),
        split: out,
        ids,
    }
}

fn payloads(s: &Sealed) -> BTreeMap<String, String> {
    s.body
        .chunks(s.size)
        .map(|c| (hx(ContentId::of(c).0), hx(c)))
        .collect()
}

fn splice(split_bytes: &[u8], map: &BTreeMap<String, String>) -> Result<Vec<u8>, Error> {
    split::splice_all(split_bytes, MAX, |id| {
        map.get(&hx(id.0)).map(|p| hex::decode(p).expect("hex"))
    })
}

fn splice_input(split_bytes: &[u8], map: &BTreeMap<String, String>) -> Value {
    json!({"split": hx(split_bytes), "payloads": map, "max_record": MAX})
}

fn splice_err(
    name: &str,
    why: &str,
    split_bytes: &[u8],
    map: &BTreeMap<String, String>,
    e: Error,
) -> Case {
    check(name, splice(split_bytes, map), &e);
    Case::err("split_splice", name, why, splice_input(split_bytes, map), e)
}

/// Offset of the first stub frame (after n0 and the head's verbatim records).
fn first_stub(s: &Sealed) -> usize {
    24 + HEAD.len().div_ceil(s.size) * (1 + stream::RECORD_OVERHEAD) + HEAD.len()
}

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let body: Vec<u8> = bytes::<40>("split-body").to_vec();
    let s = seal("split-a", &body, 16);
    let e = seal("split-empty", b"", 16);

    // split_seal: the exact split stream, its IDs, and the client's body.
    for (name, why, x) in [
        (
            "split-seal-three-records",
            "40-byte body in CLEAR records of 16, 16 and 8 bytes; head in encrypted records of 16",
            &s,
        ),
        (
            "split-seal-empty-body",
            "an empty public body: no CLEAR record, head and empty FINAL only",
            &e,
        ),
    ] {
        let client = splice(&x.split, &payloads(x)).expect("splices");
        let plain =
            stream::open_all(Opener::response(&x.key, x.request_n0, MAX), &client).expect("opens");
        assert_eq!(&plain[HEAD.len()..], &x.body[..]);
        v.push(Case::ok(
            "split_seal",
            name,
            why,
            json!({
                "key": hx(x.key.as_bytes()),
                "request_n0": hx(x.request_n0),
                "n0": hx(x.n0),
                "head": hx(HEAD),
                "body": hx(&x.body),
                "public_record": x.size,
            }),
            json!({
                "split": hx(&x.split),
                "ids": x.ids.iter().map(|i| hx(i.0)).collect::<Vec<_>>(),
                "client_body": hx(&client),
            }),
        ));
    }

    // split_splice, positive.
    let map = payloads(&s);
    let client = splice(&s.split, &map).expect("splices");
    v.push(Case::ok(
        "split_splice",
        "splice-ok",
        "every stub replaced by its payload gives the client's ordinary response body",
        splice_input(&s.split, &map),
        json!({"body": hx(&client)}),
    ));
    let client_e = splice(&e.split, &BTreeMap::new()).expect("splices");
    v.push(Case::ok(
        "split_splice",
        "splice-no-stubs",
        "a split stream without stubs needs no payload",
        splice_input(&e.split, &BTreeMap::new()),
        json!({"body": hx(&client_e)}),
    ));

    // Wrong content for an ID.
    let first_id = hx(s.ids[0].0);
    let mut wrong = map.clone();
    let mut p = hex::decode(&wrong[&first_id]).expect("hex");
    p[0] ^= 1;
    wrong.insert(first_id.clone(), hx(&p));
    v.push(splice_err(
        "splice-wrong-payload",
        "payload with one bit flipped under the first stub's ID",
        &s.split,
        &wrong,
        Error::ContentMismatch,
    ));
    let mut swapped = map.clone();
    let second = hx(s.ids[1].0);
    swapped.insert(first_id.clone(), map[&second].clone());
    v.push(splice_err(
        "splice-other-record",
        "the second record's payload offered for the first stub (same length)",
        &s.split,
        &swapped,
        Error::ContentMismatch,
    ));
    let mut short = map.clone();
    short.insert(
        first_id.clone(),
        hx(&hex::decode(&map[&first_id]).expect("hex")[..15]),
    );
    v.push(splice_err(
        "splice-short-payload",
        "payload one byte shorter than the stub's L",
        &s.split,
        &short,
        Error::ContentMismatch,
    ));
    let mut long = map.clone();
    let mut lp = hex::decode(&map[&first_id]).expect("hex");
    lp.push(0);
    long.insert(first_id.clone(), hx(&lp));
    v.push(splice_err(
        "splice-long-payload",
        "payload one byte longer than the stub's L",
        &s.split,
        &long,
        Error::ContentMismatch,
    ));
    let mut missing = map.clone();
    missing.remove(&first_id);
    v.push(splice_err(
        "splice-missing-payload",
        "no payload for a stub's ID",
        &s.split,
        &missing,
        Error::ContentMismatch,
    ));

    // Damaged stubs.
    let at = first_stub(&s);
    assert_eq!(s.split[at], 1, "first stub frame type");
    let mut bad_len = s.split.clone();
    bad_len[at + 4] = 17; // L 16 -> 17: the payload no longer fits the stub
    v.push(splice_err(
        "splice-stub-bad-length",
        "a stub's L raised by one: the payload's length differs",
        &bad_len,
        &map,
        Error::ContentMismatch,
    ));
    let mut huge = s.split.clone();
    huge[at + 2] = 0x01; // L = 65536 + 16 > 16384
    v.push(splice_err(
        "splice-stub-too-large",
        "a stub whose L is above the maximum",
        &huge,
        &map,
        Error::RecordTooLarge,
    ));
    let mut not_clear = s.split.clone();
    not_clear[at + 1] &= !0x40;
    v.push(splice_err(
        "splice-stub-not-clear",
        "a stub whose header lacks CLEAR",
        &not_clear,
        &map,
        Error::MalformedSplit,
    ));
    let mut kind = s.split.clone();
    kind[at] = 2;
    v.push(splice_err(
        "splice-unknown-frame",
        "frame type 2",
        &kind,
        &map,
        Error::MalformedSplit,
    ));
    let mut verb_huge = s.split.clone();
    verb_huge[24 + 2] = 0x01;
    v.push(splice_err(
        "splice-verbatim-too-large",
        "a verbatim record whose L is above the maximum",
        &verb_huge,
        &map,
        Error::RecordTooLarge,
    ));

    // Truncation and trailing bytes.
    for (name, cut) in [
        ("splice-truncated-nonce", 10),
        ("splice-truncated-head", 24 + 10),
        ("splice-truncated-stub", at + 30),
        ("splice-truncated-before-final", s.split.len() - 21),
        ("splice-truncated-in-final", s.split.len() - 1),
    ] {
        v.push(splice_err(
            name,
            "the split stream ends early",
            &s.split[..cut],
            &map,
            Error::Truncated,
        ));
    }
    let mut trailing = s.split.clone();
    trailing.push(0);
    v.push(splice_err(
        "splice-trailing-byte",
        "a byte after the FINAL frame",
        &trailing,
        &map,
        Error::TrailingData,
    ));

    // content_batch: the answer to a batch request of `count` IDs.
    let mut ok = Vec::new();
    split::encode_batch_entry(Some(b"abc"), &mut ok);
    split::encode_batch_entry(None, &mut ok);
    split::encode_batch_entry(Some(b""), &mut ok);
    v.push(Case::ok(
        "content_batch",
        "batch-ok",
        "three entries: a payload, an unknown ID, an empty payload",
        json!({"count": 3, "max_record": MAX, "body": hx(&ok)}),
        json!({"entries": ["616263", null, ""]}),
    ));
    for (name, why, count, body, e) in [
        (
            "batch-truncated",
            "an entry short of its length",
            3,
            ok[..ok.len() - 1].to_vec(),
            Error::Truncated,
        ),
        (
            "batch-missing-entry",
            "fewer entries than IDs asked",
            4,
            ok.clone(),
            Error::Truncated,
        ),
        (
            "batch-trailing",
            "more bytes than the entries asked",
            2,
            ok.clone(),
            Error::TrailingData,
        ),
        (
            "batch-too-large",
            "an entry longer than the maximum record",
            1,
            [0u8, 1, 0, 0].to_vec(),
            Error::RecordTooLarge,
        ),
    ] {
        check(name, decode_batch(count, &body), &e);
        v.push(Case::err(
            "content_batch",
            name,
            why,
            json!({"count": count, "max_record": MAX, "body": hx(&body)}),
            e,
        ));
    }
    v
}

fn decode_batch(count: usize, body: &[u8]) -> Result<Vec<Option<Vec<u8>>>, Error> {
    let mut d = split::BatchDecoder::new(count, MAX);
    d.receive(body)?;
    let mut out = Vec::new();
    while let Some(ev) = d.next_event()? {
        out.push(match ev {
            split::BatchEvent::Found(p) => Some(p.to_vec()),
            split::BatchEvent::Missing => None,
        });
    }
    d.finish()?;
    Ok(out)
}
