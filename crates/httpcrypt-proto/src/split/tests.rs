#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::error::Error;
use crate::keys::SessionKey;
use crate::stream::{open_all, Opener, ResponseKey, Sealer};

fn sealed(body: &[u8], size: usize) -> (Vec<u8>, Vec<ContentId>, SessionKey) {
    let k = SessionKey::from_bytes([7; 32]);
    let mut out = Vec::new();
    let sealer = Sealer::response(ResponseKey::new(k.clone(), [1; 24]), [2; 24], &mut out);
    let ids = seal_split(sealer, b"HTTP/1.1 200 OK\r\n\r\n", body, size, &mut out).unwrap();
    (out, ids, k)
}

#[test]
fn split_round_trip_any_chunking() {
    let body: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
    let (split, ids, k) = sealed(&body, 16384);
    assert_eq!(ids.len(), 4);
    let store: std::collections::HashMap<ContentId, Vec<u8>> = body
        .chunks(16384)
        .map(|c| (ContentId::of(c), c.to_vec()))
        .collect();
    let whole = splice_all(&split, 1 << 20, |id| store.get(id).cloned()).unwrap();
    let plain = open_all(Opener::response(&k, [1; 24], 1 << 20), &whole).unwrap();
    assert_eq!(&plain[19..], &body[..]);
    // Byte-by-byte feeding gives the same events.
    for step in [1usize, 7, 53, 4096] {
        let mut d = SplitDecoder::new(1 << 20);
        let mut out = Vec::new();
        for piece in split.chunks(step) {
            d.receive(piece).unwrap();
            while let Some(ev) = d.next_event().unwrap() {
                match ev {
                    SplitEvent::Nonce(b) | SplitEvent::Verbatim(b) => out.extend_from_slice(b),
                    SplitEvent::Stub(s) => s.splice(&store[&s.id], &mut out).unwrap(),
                    SplitEvent::End => {}
                }
            }
        }
        d.finish().unwrap();
        assert_eq!(out, whole, "step {step}");
    }
}

#[test]
fn same_body_same_ids_for_every_key() {
    let body = vec![9u8; 40_000];
    let (_, a, _) = sealed(&body, 16384);
    let k2 = SessionKey::from_bytes([8; 32]);
    let mut out = Vec::new();
    let sealer = Sealer::response(ResponseKey::new(k2, [3; 24]), [4; 24], &mut out);
    let b = seal_split(
        sealer,
        b"HTTP/1.1 200 OK\r\nX: y\r\n\r\n",
        &body,
        16384,
        &mut out,
    )
    .unwrap();
    assert_eq!(a, b);
}

#[test]
fn wrong_payload_is_refused() {
    let (split, _, _) = sealed(b"hello world", 16384);
    assert_eq!(
        splice_all(&split, 1 << 20, |_| Some(b"hello worle".to_vec())),
        Err(Error::ContentMismatch)
    );
    assert_eq!(
        splice_all(&split, 1 << 20, |_| Some(b"hello worl".to_vec())),
        Err(Error::ContentMismatch)
    );
}

#[test]
fn truncation_and_trailing() {
    let (split, _, _) = sealed(b"abc", 16384);
    for cut in 0..split.len() {
        let r = splice_all(&split[..cut], 1 << 20, |_| Some(b"abc".to_vec()));
        assert_eq!(r, Err(Error::Truncated), "cut {cut}");
    }
    let mut long = split.clone();
    long.push(0);
    assert_eq!(
        splice_all(&long, 1 << 20, |_| Some(b"abc".to_vec())),
        Err(Error::TrailingData)
    );
}

#[test]
fn batch_round_trip() {
    let ids = [ContentId::of(b"a"), ContentId::of(b"b")];
    let mut req = Vec::new();
    encode_batch_request(&ids, &mut req);
    assert_eq!(decode_batch_request(&req).unwrap(), ids);
    assert_eq!(decode_batch_request(&req[1..]), Err(Error::MalformedSplit));
    assert_eq!(decode_batch_request(&[]), Err(Error::MalformedSplit));
    let mut rsp = Vec::new();
    encode_batch_entry(Some(b"a"), &mut rsp);
    encode_batch_entry(None, &mut rsp);
    let mut d = BatchDecoder::new(2, 1 << 20);
    let mut seen = Vec::new();
    for b in &rsp {
        d.receive(std::slice::from_ref(b)).unwrap();
        while let Some(ev) = d.next_event().unwrap() {
            seen.push(match ev {
                BatchEvent::Found(p) => Some(p.to_vec()),
                BatchEvent::Missing => None,
            });
        }
    }
    d.finish().unwrap();
    assert_eq!(seen, vec![Some(b"a".to_vec()), None]);
    let mut d = BatchDecoder::new(1, 1 << 20);
    d.receive(&rsp).unwrap();
    assert_eq!(d.next_event(), Err(Error::TrailingData));
}

#[test]
fn globs() {
    let p = PublicPaths::new(["/static/**".into(), "/img/*.png".into(), "/a?c".into()]).unwrap();
    assert!(p.matches("/static/x/y/z.js"));
    assert!(p.matches("/static/"));
    assert!(!p.matches("/statics/x"));
    assert!(p.matches("/img/logo.png"));
    assert!(!p.matches("/img/sub/logo.png"));
    assert!(p.matches("/abc"));
    assert!(!p.matches("/a/c"));
    assert!(!p.matches("/private/x"));
    assert!(PublicPaths::new(["static".into()]).is_err());
    // Hostile input stays linear.
    let long = "/".to_string() + &"a".repeat(10_000);
    let p = PublicPaths::new(["/*a*a*a*a*a*a*b".into()]).unwrap();
    assert!(!p.matches(&long));
}

#[test]
fn hex_and_b64_forms() {
    let id = ContentId::of(b"x");
    assert_eq!(ContentId::from_hex(&id.to_hex()), Some(id));
    assert_eq!(ContentId::from_b64(id.to_b64().as_bytes()).unwrap(), id);
    assert_eq!(ContentId::from_hex("zz"), None);
}

/// §S3: with the short head the content endpoint is the request path
/// without its nonce segment, plus `/.content/`.
#[test]
fn the_content_prefix_is_the_mount_of_the_request_path() {
    assert_eq!(
        super::content_prefix("/hc/kfqjkAEUpOd17Nrb9xjHD5OQbIxtHcc0").as_deref(),
        Some("/hc/.content/")
    );
    assert_eq!(
        super::content_prefix("/a/b/kfqjkAEUpOd17Nrb9xjHD5OQbIxtHcc0").as_deref(),
        Some("/a/b/.content/")
    );
    assert_eq!(
        super::content_prefix("/kfqjkAEUpOd17Nrb9xjHD5OQbIxtHcc0").as_deref(),
        Some("/.content/")
    );
    assert_eq!(super::content_prefix("no-slash"), None);
}
