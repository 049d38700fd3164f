//! Vectors for sealed streams (spec §3): sealing, opening, and the ways a
//! stream can be damaged.

use httpcrypt_proto::stream::{self, Opener, ResponseKey, Sealer};
use httpcrypt_proto::{Error, SessionKey};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

/// One record to seal: plaintext, CLEAR flag.
type Rec<'a> = (&'a [u8], bool);

#[derive(Clone, Copy)]
enum Dir {
    Request,
    Response([u8; 24]),
}

fn seal(key: &SessionKey, n0: [u8; 24], dir: Dir, records: &[Rec<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut sealer = match dir {
        Dir::Request => Sealer::request(key, n0),
        Dir::Response(rn0) => Sealer::response(ResponseKey::new(key.clone(), rn0), n0, &mut out),
    };
    let (last, init) = records.split_last().expect("at least one record");
    for (p, clear) in init {
        if *clear {
            sealer.seal_clear(p, &mut out).unwrap();
        } else {
            sealer.seal(p, &mut out).unwrap();
        }
    }
    if last.1 {
        sealer.finish_clear(last.0, &mut out).unwrap();
    } else {
        sealer.finish(last.0, &mut out).unwrap();
    }
    out
}

fn dir_json(dir: Dir, n0: [u8; 24], v: &mut Value) {
    match dir {
        Dir::Request => {
            v["direction"] = json!("request");
            v["n0"] = json!(hx(n0));
        }
        Dir::Response(rn0) => {
            v["direction"] = json!("response");
            v["request_n0"] = json!(hx(rn0));
        }
    }
}

fn opener(key: &SessionKey, n0: [u8; 24], dir: Dir, max: usize) -> Opener {
    match dir {
        Dir::Request => Opener::request(key, n0, max),
        Dir::Response(rn0) => Opener::response(key, rn0, max),
    }
}

fn seal_case(
    name: &str,
    why: &str,
    key: &SessionKey,
    n0: [u8; 24],
    dir: Dir,
    records: &[Rec<'_>],
) -> Case {
    let body = seal(key, n0, dir, records);
    let mut input = json!({
        "key": hx(key.as_bytes()),
        "records": records.iter().enumerate().map(|(i, (p, c))| json!({"plaintext": hx(p), "clear": c, "final": i + 1 == records.len()})).collect::<Vec<_>>(),
    });
    dir_json(dir, n0, &mut input);
    if let Dir::Response(_) = dir {
        input["n0"] = json!(hx(n0));
    }
    let plain: Vec<u8> = records
        .iter()
        .flat_map(|(p, _)| p.iter().copied())
        .collect();
    assert_eq!(
        stream::open_all(opener(key, n0, dir, 1 << 20), &body).unwrap(),
        plain,
        "{name}"
    );
    Case::ok("stream_seal", name, why, input, json!({"body": hx(&body)}))
}

fn open_case(
    name: &str,
    why: &str,
    key: &SessionKey,
    n0: [u8; 24],
    dir: Dir,
    max: usize,
    body: &[u8],
    want: Result<(), Error>,
) -> Case {
    let mut input = json!({"key": hx(key.as_bytes()), "max_record": max, "body": hx(body)});
    dir_json(dir, n0, &mut input);
    let got = stream::open_all(opener(key, n0, dir, max), body);
    match want {
        Ok(()) => {
            let plain = got.unwrap_or_else(|e| panic!("{name}: {e:?}"));
            Case::ok(
                "stream_open",
                name,
                why,
                input,
                json!({"plaintext": hx(plain)}),
            )
        }
        Err(e) => {
            check(name, got, &e);
            Case::err("stream_open", name, why, input, e)
        }
    }
}

fn flip(body: &[u8], at: usize, bit: u8) -> Vec<u8> {
    let mut b = body.to_vec();
    b[at] ^= 1 << bit;
    b
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let key = SessionKey::from_bytes(bytes("stream-key"));
    let n0 = bytes::<24>("stream-n0");
    let rn0 = bytes::<24>("stream-request-n0");
    let mut v = Vec::new();

    // Positive: sealing.
    v.push(seal_case(
        "stream-request-one-record",
        "one FINAL record",
        &key,
        n0,
        Dir::Request,
        &[(b"GET / HTTP/1.1\r\n\r\n", false)],
    ));
    v.push(seal_case(
        "stream-request-empty-final",
        "a stream may end with an empty FINAL record",
        &key,
        n0,
        Dir::Request,
        &[(b"abc", false), (b"", false)],
    ));
    v.push(seal_case(
        "stream-request-only-empty-final",
        "the shortest stream: one empty FINAL record",
        &key,
        n0,
        Dir::Request,
        &[(b"", false)],
    ));
    v.push(seal_case(
        "stream-request-many-records",
        "records of different sizes, an empty one in the middle",
        &key,
        n0,
        Dir::Request,
        &[
            (b"first", false),
            (b"", false),
            (&[0x55; 300], false),
            (b"last", false),
        ],
    ));
    v.push(seal_case(
        "stream-response-one-record",
        "a response body starts with its own nonce",
        &key,
        n0,
        Dir::Response(rn0),
        &[(b"HTTP/1.1 204 No Content\r\n\r\n", false)],
    ));
    v.push(seal_case(
        "stream-response-clear-records",
        "CLEAR records carry authenticated plaintext (split serving)",
        &key,
        n0,
        Dir::Response(rn0),
        &[
            (b"HTTP/1.1 200 OK\r\n\r\n", false),
            (b"public bytes", true),
            (b"more", false),
            (b"tail", true),
        ],
    ));
    let mut carry = n0;
    carry[16..].copy_from_slice(&[0xff; 8]);
    v.push(seal_case(
        "stream-nonce-carry",
        "record 1's nonce carries into the HChaCha20 half of the nonce",
        &key,
        carry,
        Dir::Request,
        &[(b"before", false), (b"after", false)],
    ));
    v.push(seal_case(
        "stream-nonce-wrap",
        "nonce arithmetic is modulo 2^192",
        &key,
        [0xff; 24],
        Dir::Request,
        &[(b"x", false), (b"y", false)],
    ));
    let big = vec![0xa5u8; 16 * 1024];
    v.push(seal_case(
        "stream-record-16k",
        "a 16 KiB record, which every receiver accepts",
        &key,
        n0,
        Dir::Request,
        &[(&big, false)],
    ));

    // Opening: the base streams.
    let req = seal(
        &key,
        n0,
        Dir::Request,
        &[(b"hello", false), (b"", false), (b"world!!", false)],
    );
    // Record layout: r0 = [0, 25), r1 = [25, 45), r2 = [45, 72).
    assert_eq!(req.len(), 72);
    let rsp = seal(
        &key,
        n0,
        Dir::Response(rn0),
        &[(b"HTTP/1.1 200 OK\r\n\r\n", false), (b"body", false)],
    );
    let ok = Ok(());
    let e = Err;
    let m = 1usize << 20;
    let rq = Dir::Request;
    let mut add =
        |name: &str, why: &str, dir: Dir, max: usize, body: &[u8], want: Result<(), Error>| {
            v.push(open_case(name, why, &key, n0, dir, max, body, want));
        };
    add(
        "open-request-ok",
        "three records, one empty",
        rq,
        m,
        &req,
        ok.clone(),
    );
    add(
        "open-response-ok",
        "nonce prefix, then two records",
        Dir::Response(rn0),
        m,
        &rsp,
        ok.clone(),
    );
    add(
        "open-flip-length-low",
        "a changed length changes the header in the AD",
        rq,
        m,
        &flip(&req, 3, 0),
        e(Error::Integrity),
    );
    add(
        "open-flip-length-high",
        "a length above the maximum is refused before its payload arrives",
        rq,
        m,
        &flip(&req, 1, 4),
        e(Error::RecordTooLarge),
    );
    add(
        "open-flip-length-top",
        "bit 29 of the length",
        rq,
        m,
        &flip(&req, 0, 5),
        e(Error::RecordTooLarge),
    );
    add(
        "open-flip-final",
        "FINAL set on record 0 changes its AD",
        rq,
        m,
        &flip(&req, 0, 7),
        e(Error::Integrity),
    );
    add(
        "open-clear-in-request",
        "a CLEAR record in a request",
        rq,
        m,
        &flip(&req, 0, 6),
        e(Error::ClearInRequest),
    );
    add(
        "open-flip-tag-0",
        "a tag bit of record 0",
        rq,
        m,
        &flip(&req, 4, 0),
        e(Error::Integrity),
    );
    add(
        "open-flip-payload-0",
        "a payload bit of record 0",
        rq,
        m,
        &flip(&req, 22, 3),
        e(Error::Integrity),
    );
    add(
        "open-flip-tag-1",
        "a tag bit of the empty record 1",
        rq,
        m,
        &flip(&req, 40, 7),
        e(Error::Integrity),
    );
    add(
        "open-flip-header-2",
        "the FINAL bit of the last record cleared",
        rq,
        m,
        &flip(&req, 45, 7),
        e(Error::Integrity),
    );
    add(
        "open-flip-payload-2",
        "a payload bit of the FINAL record",
        rq,
        m,
        &flip(&req, 71, 0),
        e(Error::Integrity),
    );
    add(
        "open-empty",
        "an empty stream is truncated",
        rq,
        m,
        &[],
        e(Error::Truncated),
    );
    add(
        "open-truncated-header",
        "cut inside the first header",
        rq,
        m,
        &req[..2],
        e(Error::Truncated),
    );
    add(
        "open-truncated-tag",
        "cut inside the first tag",
        rq,
        m,
        &req[..10],
        e(Error::Truncated),
    );
    add(
        "open-truncated-payload",
        "cut inside the first payload",
        rq,
        m,
        &req[..22],
        e(Error::Truncated),
    );
    add(
        "open-truncated-boundary",
        "cut at a record boundary before FINAL",
        rq,
        m,
        &req[..45],
        e(Error::Truncated),
    );
    add(
        "open-truncated-last-byte",
        "the last byte missing",
        rq,
        m,
        &req[..71],
        e(Error::Truncated),
    );
    add(
        "open-trailing-byte",
        "one byte after FINAL",
        rq,
        m,
        &[req.as_slice(), b"\x00"].concat(),
        e(Error::TrailingData),
    );
    add(
        "open-trailing-record",
        "a whole record after FINAL",
        rq,
        m,
        &[req.as_slice(), &req[..25]].concat(),
        e(Error::TrailingData),
    );
    add(
        "open-reordered",
        "records 1 and 2 swapped",
        rq,
        m,
        &[&req[..25], &req[45..], &req[25..45]].concat(),
        e(Error::Integrity),
    );
    add(
        "open-dropped-middle",
        "record 1 removed",
        rq,
        m,
        &[&req[..25], &req[45..]].concat(),
        e(Error::Integrity),
    );
    add(
        "open-dropped-final",
        "FINAL record removed",
        rq,
        m,
        &req[..45],
        e(Error::Truncated),
    );
    let other = seal(
        &key,
        bytes("stream-other-n0"),
        Dir::Request,
        &[(b"hello", false), (b"", false), (b"WORLD!!", false)],
    );
    add(
        "open-spliced",
        "a record from another stream under the same key",
        rq,
        m,
        &[&req[..45], &other[45..]].concat(),
        e(Error::Integrity),
    );
    add(
        "open-response-as-request",
        "a response body opened as a request",
        rq,
        m,
        &rsp[24..],
        e(Error::Integrity),
    );
    add(
        "open-response-other-request",
        "a response bound to another request's nonce",
        Dir::Response(bytes("stream-wrong-rn0")),
        m,
        &rsp,
        e(Error::Integrity),
    );
    add(
        "open-response-short",
        "a response body shorter than its nonce",
        Dir::Response(rn0),
        m,
        &rsp[..20],
        e(Error::Truncated),
    );
    add(
        "open-response-empty",
        "an empty response body",
        Dir::Response(rn0),
        m,
        &[],
        e(Error::Truncated),
    );
    add(
        "open-response-flip-nonce",
        "a bit of the response nonce",
        Dir::Response(rn0),
        m,
        &flip(&rsp, 5, 1),
        e(Error::Integrity),
    );
    let big = seal(
        &key,
        n0,
        Dir::Request,
        &[(&vec![1u8; 16 * 1024 + 1], false)],
    );
    add(
        "open-record-above-max",
        "a record one byte above the receiver's maximum",
        rq,
        16 * 1024,
        &big,
        e(Error::RecordTooLarge),
    );
    let at = seal(&key, n0, Dir::Request, &[(&vec![2u8; 16 * 1024], false)]);
    add(
        "open-record-at-max",
        "a record exactly at the maximum is accepted",
        rq,
        16 * 1024,
        &at,
        ok.clone(),
    );
    v.push(open_case(
        "open-wrong-key",
        "another session key",
        &SessionKey::from_bytes(bytes("stream-wrong-key")),
        n0,
        rq,
        m,
        &req,
        Err(Error::Integrity),
    ));
    v.push(open_case(
        "open-wrong-nonce",
        "another request nonce",
        &key,
        bytes("stream-wrong-n0"),
        rq,
        m,
        &req,
        Err(Error::Integrity),
    ));
    v
}
