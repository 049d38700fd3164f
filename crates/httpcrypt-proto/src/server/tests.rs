use super::*;

/// The layout spec §4.3 and §4.5 give a sealed answer, built the plain
/// way: the head with `Date` and `Content-Length` added as fields,
/// encoded, followed by the body, cut into records by `seal_all`.
fn reference(
    key: ResponseKey,
    fresh: [u8; NONCE_LEN],
    head: &ResponseHead,
    body: &[u8],
    now: u64,
    record_size: usize,
) -> Vec<u8> {
    let compact = key.profile() == Profile::Compact;
    let mut head = head.clone();
    if inner::field(&head.fields, "date").is_none() && (!compact || head.status == 425) {
        head.fields
            .push(Field::new("Date", replay::format_date(now)));
    }
    let mut plaintext = Vec::new();
    let stated = inner::field(&head.fields, "content-length").is_some();
    if (stated && body.is_empty()) || head.status == 304 {
        // HEAD and 304 answers state the representation's length (E2).
        head.encode(&mut plaintext);
    } else if compact {
        head.fields.retain(|f| !f.is("content-length"));
        head.encode(&mut plaintext);
        if !key
            .profile()
            .omits_content_length(plaintext.len(), body.len() as u64, record_size)
        {
            plaintext.clear();
            head.fields
                .push(Field::new("Content-Length", body.len().to_string()));
            head.encode(&mut plaintext);
        }
    } else {
        if inner::field(&head.fields, "content-length").is_none() {
            head.fields
                .push(Field::new("Content-Length", body.len().to_string()));
        }
        head.encode(&mut plaintext);
    }
    plaintext.extend_from_slice(body);
    let mut out = Vec::new();
    let sealer = Sealer::response(key, fresh, &mut out);
    stream::seal_all(sealer, &plaintext, record_size, &mut out).unwrap();
    out
}

#[test]
fn a_sealed_answer_has_the_reference_layout_in_every_case() {
    let key = SessionKey::from_bytes([9; 32]);
    let now = 1_790_000_000;
    let mut cases = 0;
    for profile in [Profile::V1, Profile::Compact] {
        for status in [200, 304, 425] {
            for (date, length) in [(false, false), (true, false), (false, true), (true, true)] {
                let mut head = ResponseHead::new(status, reason_phrase(status));
                head.fields.push(Field::new("Content-Type", "text/plain"));
                if date {
                    head.fields
                        .push(Field::new("Date", "Sun, 06 Nov 1994 08:49:37 GMT"));
                }
                if length {
                    // A stated length is kept in v1 and restated in profile 2.
                    head.fields.push(Field::new("Content-Length", "7"));
                }
                for body_len in [0usize, 1, 100, 1024, 5000] {
                    let body: Vec<u8> = (0..body_len).map(|i| i as u8).collect();
                    // Record sizes around the two lengths the answer can
                    // have (without and with an added `Content-Length`,
                    // where profile 2 decides), and sizes that cut it
                    // into many records.
                    let mut bare = head.clone();
                    bare.fields.retain(|f| !f.is("content-length"));
                    if !date && (profile == Profile::V1 || status == 425) {
                        bare.fields
                            .push(Field::new("Date", replay::format_date(now)));
                    }
                    let mut plain = Vec::new();
                    bare.encode(&mut plain);
                    let p0 = plain.len() + body_len;
                    let p1 = p0 + format!("Content-Length: {body_len}\r\n").len();
                    let mut records = vec![1, 7, 300, 16 * 1024];
                    records.extend([p0 - 1, p0, p0 + 1, p1 - 1, p1, p1 + 1]);
                    for record in records {
                        let rk = || ResponseKey::for_profile(key.clone(), [3; 24], profile);
                        let want = reference(rk(), [5; 24], &head, &body, now, record);
                        let mut got = b"kept".to_vec();
                        seal_response(rk(), [5; 24], &head, &body, now, record, &mut got).unwrap();
                        assert_eq!(&got[..4], b"kept", "what `out` held stays");
                        assert_eq!(
                            got[4..],
                            want[..],
                            "{profile:?} {status} date={date} length={length} \
                             body={body_len} record={record}"
                        );
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 2 * 3 * 4 * 5 * 10);
}
