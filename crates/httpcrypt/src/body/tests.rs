use std::collections::VecDeque;

use httpcrypt_proto::keys::SessionKey;
use httpcrypt_proto::stream::{Event, Opener, ResponseKey, Sealer};

use super::*;

/// A body of given frames, of exact size when `exact` (as a file's is).
struct Frames {
    frames: VecDeque<Bytes>,
    exact: bool,
    left: u64,
}

impl Body for Frames {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let f = self.frames.pop_front();
        if let Some(f) = &f {
            self.left -= f.len() as u64;
        }
        Poll::Ready(f.map(|f| Ok(Frame::data(f))))
    }
    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }
    fn size_hint(&self) -> SizeHint {
        if self.exact {
            SizeHint::with_exact(self.left)
        } else {
            SizeHint::default()
        }
    }
}

/// Every sealed frame SealBody puts out, opened again record by record:
/// the plaintext is the head and body, a response starts with its
/// nonce, an exactly sized body takes full records but the last and
/// exactly the announced length, and a streamed one seals each frame
/// as it comes.
#[tokio::test]
async fn sealed_bodies_open_to_head_and_body_in_the_promised_layout() {
    use http_body_util::BodyExt as _;
    let key = SessionKey::from_bytes([5; 32]);
    let n0 = [9u8; 24];
    let body: Vec<u8> = (0..700u32).map(|i| (i * 7) as u8).collect();
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n".to_vec();
    for record_size in [1usize, 16, 64, 100, 1000] {
        for cuts in [
            vec![],
            vec![700],
            vec![1, 699],
            vec![300, 300, 100],
            vec![64; 10],
        ] {
            for exact in [true, false] {
                for response in [true, false] {
                    let mut frames = VecDeque::new();
                    let mut at = 0;
                    for c in cuts.iter().chain([&usize::MAX]) {
                        let end = at + (*c).min(body.len() - at);
                        frames.push_back(Bytes::copy_from_slice(&body[at..end]));
                        at = end;
                    }
                    frames.retain(|f| !f.is_empty() || cuts.is_empty());
                    let inner = Frames {
                        frames,
                        exact,
                        left: body.len() as u64,
                    };
                    let mut prefix = Vec::new();
                    let sealer = if response {
                        Sealer::response(ResponseKey::new(key.clone(), n0), [3; 24], &mut prefix)
                    } else {
                        Sealer::request(&key, n0)
                    };
                    let sealed = SealBody::new(sealer, prefix, head.clone(), inner, record_size);
                    let announced = sealed.size_hint().exact();
                    assert_eq!(announced.is_some(), exact);
                    let out = sealed.collect().await.expect("sealed").to_bytes();
                    if let Some(n) = announced {
                        assert_eq!(n, out.len() as u64, "announced length");
                    }
                    let mut opener = if response {
                        Opener::response(&key, n0, record_size)
                    } else {
                        Opener::request(&key, n0, record_size)
                    };
                    if response {
                        assert_eq!(out[..24], [3; 24]);
                    }
                    opener.receive(&out).expect("receive");
                    let mut plain = Vec::new();
                    let mut sizes = Vec::new();
                    while let Some(ev) = opener.next_event().expect("opens") {
                        if let Event::Data { plaintext, .. } = ev {
                            sizes.push(plaintext.len());
                            plain.extend_from_slice(plaintext);
                        }
                    }
                    opener.finish().expect("complete stream");
                    assert_eq!(plain, [&head[..], &body[..]].concat());
                    if exact {
                        let (last, full) = sizes.split_last().expect("a record");
                        assert!(full.iter().all(|s| *s == record_size), "{sizes:?}");
                        assert!(*last <= record_size);
                    } else {
                        assert!(sizes.iter().all(|s| *s <= record_size));
                    }
                }
            }
        }
    }
}
