//! Property tests: round trips for every codec, and decoders that never
//! panic and give the same answer for any split of their input.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::inner::{self, Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Credential, IdKind};
use httpcrypt_proto::replay::StrikeRegister;
use httpcrypt_proto::stream::{self, Event, Opener, ResponseKey, Sealer};
use httpcrypt_proto::ticket::{TicketContents, TicketKey, SEALED_TICKET_LEN};
use httpcrypt_proto::{b64, dns, Error, IdentityKey, KexPublic, KeyId, Limits, SessionKey};
use proptest::prelude::*;

fn chunks(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(data[last..p].to_vec());
        last = p;
    }
    out.push(data[last..].to_vec());
    out
}

/// An inner message fed to a decoder piece by piece: its head and body.
fn decode_in_pieces<H: inner::Head>(limits: Limits, pieces: &[Vec<u8>]) -> (Option<H>, Vec<u8>) {
    let mut d = inner::Decoder::<H>::new(limits);
    let mut head = None;
    let mut body = Vec::new();
    for part in pieces {
        d.receive(part).unwrap();
        while let Some(ev) = d.next_event().unwrap() {
            match ev {
                inner::InnerEvent::Head(h) => head = Some(h),
                inner::InnerEvent::Body(b) => body.extend_from_slice(b),
            }
        }
    }
    d.finish().unwrap();
    (head, body)
}

fn open_chunked(o: Opener, parts: &[Vec<u8>]) -> Result<Vec<u8>, Error> {
    open_chunked_given(o, parts, 0)
}

/// [`open_chunked`], with part `i` given away (`Opener::receive_vec`) when
/// bit `i % 8` of `given` is set.
fn open_chunked_given(mut o: Opener, parts: &[Vec<u8>], given: u8) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if given & (1 << (i % 8)) != 0 {
            o.receive_vec(p.clone())?;
        } else {
            o.receive(p)?;
        }
        while let Some(ev) = o.next_event()? {
            if let Event::Data { plaintext, .. } = ev {
                out.extend_from_slice(plaintext);
            }
        }
    }
    o.finish()?;
    Ok(out)
}

/// What a strike register must hold, as a plain list of `(nonce byte,
/// forget time)` with the register's bucket rounding (spec §8.2).
struct StrikeModel {
    window: u64,
    entries: Vec<(u8, u64)>,
}

impl StrikeModel {
    fn new(window: u64) -> Self {
        StrikeModel {
            window,
            entries: Vec::new(),
        }
    }

    /// Drops what may be forgotten at `now`.
    fn at(&mut self, now: u64) {
        self.entries.retain(|&(_, until)| until >= now);
    }

    fn holds(&self, n: u8) -> bool {
        self.entries.iter().any(|&(m, _)| m == n)
    }

    fn record(&mut self, n: u8, date: u64) {
        let g = self.window / 8;
        self.entries.push((n, ((date + self.window) / g + 1) * g));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn stream_round_trip(data in proptest::collection::vec(any::<u8>(), 0..3000), record in 1usize..700, cuts in proptest::collection::vec(any::<usize>(), 0..6), key in any::<[u8; 32]>(), n0 in any::<[u8; 24]>(), rn0 in any::<[u8; 24]>(), response in any::<bool>(), given in any::<u8>()) {
        let k = SessionKey::from_bytes(key);
        let mut body = Vec::new();
        let sealer = if response { Sealer::response(ResponseKey::new(k.clone(), rn0), n0, &mut body) } else { Sealer::request(&k, n0) };
        let prefix = body.len();
        stream::seal_all(sealer, &data, record, &mut body).unwrap();
        prop_assert_eq!((body.len() - prefix) as u64, stream::sealed_len(data.len() as u64, record));
        let opener = || if response { Opener::response(&k, rn0, 1 << 20) } else { Opener::request(&k, n0, 1 << 20) };
        prop_assert_eq!(open_chunked(opener(), &chunks(&body, &cuts)).unwrap(), data.clone());
        // Bytes given away (taken as the buffer when nothing is left in it)
        // open the same, in any mix with borrowed ones.
        prop_assert_eq!(open_chunked_given(opener(), &chunks(&body, &cuts), given).unwrap(), data.clone());
        prop_assert_eq!(open_chunked_given(opener(), std::slice::from_ref(&body), 1).unwrap(), data.clone());
        // Anything after the end is refused the same way.
        let mut more = chunks(&body, &cuts);
        more.push(vec![0]);
        prop_assert_eq!(open_chunked_given(opener(), &more, given), open_chunked(opener(), &more));
    }

    #[test]
    fn opener_on_garbage_is_consistent(data in proptest::collection::vec(any::<u8>(), 0..400), cuts in proptest::collection::vec(any::<usize>(), 0..5), response in any::<bool>()) {
        let k = SessionKey::from_bytes([1; 32]);
        let mk = || if response { Opener::response(&k, [2; 24], 1 << 14) } else { Opener::request(&k, [2; 24], 1 << 14) };
        let whole = open_chunked(mk(), std::slice::from_ref(&data));
        prop_assert_eq!(open_chunked(mk(), &chunks(&data, &cuts)), whole.clone());
        prop_assert_eq!(open_chunked_given(mk(), &chunks(&data, &cuts), 0b1010_0101), whole.clone());
        // Random bytes never verify.
        prop_assert!(whole.is_err());
    }

    #[test]
    fn any_single_bit_flip_is_detected(data in proptest::collection::vec(any::<u8>(), 1..200), record in 1usize..64, bit in any::<usize>()) {
        let k = SessionKey::from_bytes([3; 32]);
        let mut body = Vec::new();
        stream::seal_all(Sealer::request(&k, [4; 24]), &data, record, &mut body).unwrap();
        let at = bit % (body.len() * 8);
        body[at / 8] ^= 1 << (at % 8);
        prop_assert!(stream::open_all(Opener::request(&k, [4; 24], 1 << 20), &body).is_err());
    }

    #[test]
    fn inner_request_round_trip(method in "[A-Z]{1,10}", target in "/[a-zA-Z0-9/._~?=&-]{0,60}", fields in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,20}", "[ -~]{0,40}"), 0..10), body in proptest::collection::vec(any::<u8>(), 0..300), cuts in proptest::collection::vec(any::<usize>(), 0..4)) {
        let mut head = RequestHead::new(method, target);
        for (n, v) in fields {
            let lower = n.to_ascii_lowercase();
            if inner::FORBIDDEN.contains(&lower.as_str()) || lower == "content-length" {
                continue;
            }
            // Field values carry no surrounding whitespace on the wire.
            head.fields.push(Field::new(n, v.trim().as_bytes()));
        }
        let mut bytes = Vec::new();
        head.encode(&mut bytes);
        bytes.extend_from_slice(&body);
        let limits = Limits::default();
        let (got_head, got_body) = decode_in_pieces::<RequestHead>(limits, &chunks(&bytes, &cuts));
        // The packed head keeps the decoder's own bytes (no copy); the same
        // pieces give the same head and body.
        let (packed, packed_body) =
            decode_in_pieces::<inner::PackedRequestHead>(limits, &chunks(&bytes, &cuts));
        prop_assert_eq!(packed.map(|h| h.to_head()), Some(head.clone()));
        prop_assert_eq!(&packed_body, &body);
        prop_assert_eq!(got_head, Some(head));
        prop_assert_eq!(got_body, body);
    }

    /// Erratum E2: an answer to HEAD, and a 304, state any valid length and
    /// carry no body; any body byte is `content_length_mismatch`, for any
    /// split of the input. Another answer's length is its body's.
    #[test]
    fn bodiless_answers_state_any_length(length in prop_oneof![0u64..64, 0u64..10_000_000_000_000_000_000], not_modified in any::<bool>(), method in prop_oneof![Just("HEAD"), Just("GET"), Just("POST")], body in prop_oneof![Just(Vec::new()), proptest::collection::vec(any::<u8>(), 1..40)], cuts in proptest::collection::vec(any::<usize>(), 0..4)) {
        let status = if not_modified { 304 } else { 200 };
        let mut msg = format!("HTTP/1.1 {status} X\r\nContent-Length: {length}\r\n\r\n").into_bytes();
        msg.extend_from_slice(&body);
        let bodiless = inner::is_bodiless_answer(method, status);
        let want = if (bodiless && body.is_empty()) || (!bodiless && length == body.len() as u64) {
            Ok(body.clone())
        } else {
            Err(Error::ContentLengthMismatch)
        };
        let whole = inner::decode_response(&msg, method, &Limits::default()).map(|(_, b)| b);
        prop_assert_eq!(&whole, &want);
        let mut d = inner::ResponseDecoder::answering(method, Limits::default());
        let mut got = Vec::new();
        let pieces = (|| {
            for part in chunks(&msg, &cuts) {
                d.receive(&part)?;
                while let Some(ev) = d.next_event()? {
                    if let inner::InnerEvent::Body(b) = ev {
                        got.extend_from_slice(b);
                    }
                }
            }
            d.finish()
        })()
        .map(|()| got);
        prop_assert_eq!(pieces, want);
    }

    #[test]
    fn inner_decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = inner::decode_all::<RequestHead>(&data, &Limits::default());
        let _ = inner::decode_all::<ResponseHead>(&data, &Limits::default());
    }

    #[test]
    fn cookie_round_trip(id in any::<[u8; 10]>(), value in any::<[u8; 32]>(), np in "[A-Za-z0-9_-]{0,16}", vp in "[A-Za-z0-9_-]{0,16}", before in "[a-z]{1,8}=[a-z0-9]{0,10}") {
        let kid = KeyId(id);
        let c = outer::format_cookie(&kid, &value, &np, &vp).unwrap();
        let field = format!("{before}; {c}");
        let got = outer::scan_cookies([field.as_bytes()], |k| (*k == kid).then_some(IdKind::Key)).unwrap();
        prop_assert_eq!(got, Credential::Key { kid, client_public: KexPublic(value) });
    }

    #[test]
    fn b64_round_trip(data in proptest::collection::vec(any::<u8>(), 0..100)) {
        prop_assert_eq!(b64::decode(b64::encode(&data).as_bytes()).unwrap(), data);
    }

    #[test]
    fn cert_round_trip(seed in any::<[u8; 32]>(), serial in any::<u32>(), nb in any::<u32>(), na in any::<u32>(), kex in any::<[u8; 32]>(), rot in 0usize..9) {
        let id = IdentityKey::from_seed(seed);
        let c = KeyCert::sign(&id, serial, nb, na, KexPublic(kex));
        prop_assert_eq!(KeyCert::from_text(&c.to_text()).unwrap(), c.clone());
        let mut set = dns::format_aaaa(&c).to_vec();
        set.rotate_left(rot);
        prop_assert_eq!(dns::parse_aaaa(&set).unwrap(), c.clone());
        prop_assert!(c.verify(&id.public()).is_ok());
    }

    #[test]
    fn ticket_round_trip(tid in any::<[u8; 10]>(), key in any::<[u8; 32]>(), k in any::<[u8; 32]>(), kid in any::<[u8; 10]>(), expiry in 1u32.., n in any::<[u8; 24]>()) {
        let tk = TicketKey::new(KeyId(tid), key);
        let contents = TicketContents { key: SessionKey::from_bytes(k), kid: KeyId(kid), expiry };
        let t = tk.seal(&contents, n);
        let sealed: [u8; SEALED_TICKET_LEN] = t.sealed().try_into().unwrap();
        prop_assert_eq!(tk.open(&sealed, u64::from(expiry) - 1).unwrap(), contents);
    }

    /// The register answers exactly like a plain list of `(n0, forget
    /// time)` with the same bucket rounding, whatever order the dates come in.
    #[test]
    fn strike_register_matches_a_list(ops in proptest::collection::vec((0u8..40, 0u64..120, 0u64..20), 1..400), cap in 1usize..60) {
        let window = 60;
        let mut r = StrikeRegister::new(window, cap, [3; 16]);
        let mut model = StrikeModel::new(window);
        let mut now = 10_000;
        for (n, date_off, advance) in ops {
            now += advance;
            let date = now + date_off - window;
            model.at(now);
            let want = if model.holds(n) {
                Err(Error::Replay)
            } else if model.entries.len() >= cap {
                Err(Error::Overloaded)
            } else {
                model.record(n, date);
                Ok(())
            };
            prop_assert_eq!(r.check(&KeyId([1; 10]), &[n; 24], date, now), want);
            prop_assert_eq!(r.len(), model.entries.len());
        }
    }

    /// With a clock that also goes back, the register may refuse more than
    /// the list (an entry not yet swept counts again once an older bucket
    /// is live), never less: a pair the list holds is always a replay.
    #[test]
    fn strike_register_never_forgets_a_live_pair(ops in proptest::collection::vec((0u8..40, 0u64..120, 0u64..40), 1..400), cap in 1usize..60) {
        let window = 60;
        let mut r = StrikeRegister::new(window, cap, [4; 16]);
        let mut model = StrikeModel::new(window);
        let mut now: u64 = 10_000;
        for (n, date_off, step) in ops {
            now = now + step - 15;
            let date = now + date_off - window;
            model.at(now);
            let got = r.check(&KeyId([1; 10]), &[n; 24], date, now);
            if model.holds(n) {
                prop_assert_eq!(got, Err(Error::Replay));
            } else if got.is_ok() {
                model.record(n, date);
            }
            prop_assert!(r.len() <= cap);
        }
    }

    #[test]
    fn strike_register_is_bounded(ops in proptest::collection::vec((any::<u8>(), 0u64..200, 0u64..200), 1..300), cap in 1usize..50) {
        let mut r = StrikeRegister::new(60, cap, [9; 16]);
        let mut now = 1000;
        for (n, date_off, advance) in ops {
            now += advance % 5;
            let date = now + date_off % 60;
            let n0 = [n; 24];
            if r.check(&KeyId([1; 10]), &n0, date, now).is_ok() {
                prop_assert_eq!(r.check(&KeyId([1; 10]), &n0, date, now), Err(Error::Replay));
            }
            prop_assert!(r.len() <= cap);
        }
    }
}
