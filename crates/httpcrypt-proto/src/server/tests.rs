use super::*;
use crate::cert::KeyCert;
use crate::inner::{Field, ResponseHead};
use crate::keys::KexSecret;
use crate::stream::Sealer;

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

/// A server holding one kex key (valid through `not_after`) whose ticket
/// key came with it, and the ticket key.
fn short_ticket_server(not_after: u32, paired: bool) -> (ServerKeys, TicketKey, KeyId) {
    let id = crate::keys::IdentityKey::from_seed([1; 32]);
    let kex = KexSecret::from_bytes([2; 32]);
    let cert = KeyCert::sign_for(&id, Profile::V1, 1, 1_000, not_after, *kex.public());
    let kid = cert.kid();
    let mut keys = ServerKeys::new();
    keys.add_key(kex, cert);
    let tk = TicketKey::new(KeyId([3; 10]), [4; 32]);
    let copy = TicketKey::new(tk.tid(), *tk.to_bytes());
    if paired {
        keys.add_ticket_key_for(copy, kid, u64::from(not_after));
    } else {
        keys.add_ticket_key(copy, u64::from(not_after));
    }
    (keys, tk, kid)
}

/// A whole request presenting `ticket`, sealed under its key.
fn short_ticket_request(ticket: &crate::ticket::ShortTicket, pad: &str) -> Vec<u8> {
    use crate::client::{ClientCredential, PreparedRequest};
    let p = PreparedRequest::for_key(
        &KexPublic([0; 32]),
        ClientCredential::ShortTicket(ticket),
        [6; NONCE_LEN],
        "",
        pad,
    )
    .unwrap();
    let mut head = RequestHead::new("GET", "/x");
    head.fields.push(Field::new("Date", "x"));
    let stream = p.seal_message(&head, b"", 64).unwrap();
    p.encode_outer(
        outer::Form::Post,
        &Mount::new("/hc").unwrap(),
        "h.example",
        &stream,
    )
}

#[test]
fn a_short_ticket_resumes_under_the_kex_key_its_ticket_key_came_with() {
    let now = 5_000;
    let (keys, tk, kid) = short_ticket_server(9_000, true);
    let ticket = tk.issue_short(&kid, [7; 16]);
    for pad in ["", "AbC", "0123456789abcdef"] {
        let outer = short_ticket_request(&ticket, pad);
        let (a, head, _) = serve_bytes(
            &keys,
            &Mount::new("/hc").unwrap(),
            &Limits::default(),
            now,
            &outer,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.kid, kid);
        assert_eq!(a.session_key(), ticket.key());
        assert!(a.credential.is_ticket());
        assert_eq!(
            a.credential,
            Credential::ShortTicket {
                tid: tk.tid(),
                h: [7; 16]
            }
        );
        assert_eq!(head.target, "/x");
    }
}

#[test]
fn short_ticket_refusals() {
    let mount = Mount::new("/hc").unwrap();
    let limits = Limits::default();
    let (keys, tk, kid) = short_ticket_server(9_000, true);
    let outer = short_ticket_request(&tk.issue_short(&kid, [7; 16]), "");
    // The ticket key (and its kex key) expired: its tid is no ID the server
    // knows, and a 22-38 character value is not the contract's HTTPCrypt
    // shape (§11.3), so the answer is `no_cookie`; the client drops the
    // ticket and retries with a key (§7.3).
    assert_eq!(
        serve_bytes(&keys, &mount, &limits, 9_001, &outer).err(),
        Some(Error::NoCookie)
    );
    // A ticket key that came with no kex key takes no short tickets.
    let (unpaired, _, _) = short_ticket_server(9_000, false);
    assert_eq!(
        serve_bytes(&unpaired, &mount, &limits, 5_000, &outer).err(),
        Some(Error::UnknownKey)
    );
    // A tid the server does not hold: as an expired one.
    let other = TicketKey::new(KeyId([8; 10]), [4; 32]);
    let outer = short_ticket_request(&other.issue_short(&kid, [7; 16]), "");
    assert_eq!(
        serve_bytes(&keys, &mount, &limits, 5_000, &outer).err(),
        Some(Error::NoCookie)
    );
    // The kex key is no longer held while its ticket key still is.
    let mut held = ServerKeys::new();
    held.add_ticket_key_for(TicketKey::new(tk.tid(), *tk.to_bytes()), kid, 9_000);
    let outer = short_ticket_request(&tk.issue_short(&kid, [7; 16]), "");
    assert_eq!(
        serve_bytes(&held, &mount, &limits, 5_000, &outer).err(),
        Some(Error::UnknownKey)
    );
    // A ticket whose key the server did not derive (another kid, or a
    // forged key) names a known ticket key: the stream fails to open.
    let wrong = tk.issue_short(&KeyId([9; 10]), [7; 16]);
    let outer = short_ticket_request(&wrong, "");
    assert_eq!(
        serve_bytes(&keys, &mount, &limits, 5_000, &outer).err(),
        Some(Error::Integrity)
    );
}

/// An agreement that remembers the last short ticket's key, as a
/// connection does (`LastOpened`).
#[derive(Default)]
struct Remembering(crate::ticket::LastOpened);

impl Agreement for Remembering {
    fn short_key(
        &mut self,
        tk: &TicketKey,
        kid: &KeyId,
        h: &[u8; crate::ticket::SHORT_H_LEN],
    ) -> SessionKey {
        self.0.short_key(tk, kid, h)
    }
}

/// A short ticket's key taken from memory does not pass over the checks of
/// its ticket key and kex key: once either is gone, the same request gets
/// the same refusal as without the memory.
#[test]
fn a_remembered_short_ticket_is_still_checked_against_its_keys() {
    let mount = Mount::new("/hc").unwrap();
    let limits = Limits::default();
    let (keys, tk, kid) = short_ticket_server(9_000, true);
    let ticket = tk.issue_short(&kid, [7; 16]);
    let bytes = short_ticket_request(&ticket, "");
    let o = ParsedOuter::parse(&bytes).unwrap();
    let mut memory = Remembering::default();
    let accepted = |keys: &ServerKeys, now, memory: &mut Remembering| {
        accept(keys, &mount, &o.as_request(), &limits, now, memory).map(|a| match a {
            Accept::Request(a) => a.session_key().clone(),
            other => panic!("not a request: {other:?}"),
        })
    };
    for _ in 0..2 {
        assert_eq!(
            accepted(&keys, 5_000, &mut memory).as_ref(),
            Ok(ticket.key())
        );
    }
    assert_eq!(
        accepted(&keys, 9_001, &mut memory).err(),
        Some(Error::NoCookie)
    );
    let mut held = ServerKeys::new();
    held.add_ticket_key_for(TicketKey::new(tk.tid(), *tk.to_bytes()), kid, 9_000);
    assert_eq!(
        accepted(&held, 5_000, &mut memory).err(),
        Some(Error::UnknownKey)
    );
}
