use super::decoder::find_head_end;
use super::*;
use crate::error::{Error, Result};
use crate::limits::Limits;

/// A packed head parses and refuses exactly what [`RequestHead`] does,
/// and holds the same method, target and fields.
#[test]
fn a_packed_head_is_the_request_head() {
    let heads: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nDate: Tue, 24 Nov 2026 20:00:00 GMT\r\n\r\n",
        b"POST /p HTTP/1.1\r\nContent-Length: 3\r\nX-Empty:\r\nX-Sp:   v  \r\n\r\nabc",
        b"POST /p HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc",
        b"POST /p HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nKeep-Alive: 1\r\n\r\n",
        b"GET / HTTP/1.0\r\n\r\n",
        b"GET / HTTP/1.1\nHost: x\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nObs: a\x80b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n",
    ];
    let limits = Limits::default();
    for &h in heads {
        let owned = decode_all::<RequestHead>(h, &limits);
        let packed = decode_all::<PackedRequestHead>(h, &limits);
        let packed = packed.map(|(p, body)| {
            let fields: Vec<Field> = p.fields().map(|(n, v)| Field::new(n, v)).collect();
            assert_eq!(fields, p.to_head().fields);
            assert_eq!(p.target_bytes(), p.target().as_bytes());
            for ((n, v), (m, w)) in p.fields().zip(p.shared_fields()) {
                assert_eq!((n.as_bytes(), v), (m, &w[..]));
                assert!(p.has_field(&n.to_ascii_uppercase()));
                assert_eq!(p.field(n), owned.as_ref().ok().and_then(|o| o.0.field(n)));
            }
            (p.to_head(), body)
        });
        assert_eq!(packed, owned, "{:?}", String::from_utf8_lossy(h));
    }
    let tight = Limits {
        max_inner_fields: 1,
        ..limits
    };
    let two = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n";
    assert_eq!(
        decode_all::<PackedRequestHead>(two, &tight).map(|(p, b)| (p.to_head(), b)),
        decode_all::<RequestHead>(two, &tight)
    );
}

/// The end of a head is the first `CRLF CRLF`, on every string up to 8
/// bytes over CR, LF and one other byte.
#[test]
fn the_head_end_is_the_first_empty_line() {
    fn all(s: &mut Vec<u8>, depth: usize) {
        let want = s.windows(4).position(|w| w == b"\r\n\r\n");
        assert_eq!(find_head_end(s), want, "{s:?}");
        if depth == 0 {
            return;
        }
        for c in [b'\r', b'\n', b'a'] {
            s.push(c);
            all(s, depth - 1);
            s.pop();
        }
    }
    all(&mut Vec::new(), 8);
}

#[test]
fn the_head_writer_encodes_like_a_response_head() {
    let mut head = ResponseHead::new(404, "Not Found");
    head.fields.push(Field::new("Content-Type", "text/plain"));
    head.fields
        .push(Field::new("Date", "Tue, 24 Nov 2026 20:00:00 GMT"));
    let mut want = Vec::new();
    head.encode(&mut want);
    let mut w = ResponseHeadWriter::new(404, "Not Found");
    for f in &head.fields {
        w.field(&f.name, &f.value);
    }
    assert_eq!(w.finish(), want);
}

fn req(bytes: &[u8]) -> Result<(RequestHead, Vec<u8>)> {
    decode_all::<RequestHead>(bytes, &Limits::default())
}

#[test]
fn request_round_trip() {
    let mut head = RequestHead::new("POST", "/api?q=1");
    head.fields.push(Field::new("Content-Length", "5"));
    head.fields.push(Field::new("X-A", "b"));
    let mut bytes = Vec::new();
    head.encode(&mut bytes);
    bytes.extend_from_slice(b"hello");
    let (h, body) = req(&bytes).unwrap();
    assert_eq!(h, head);
    assert_eq!(body, b"hello");
}

#[test]
fn inner_rules() {
    assert_eq!(
        req(b"GET / HTTP/1.0\r\n\r\n").err(),
        Some(Error::MalformedInner)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\n\n").err(),
        Some(Error::MalformedInner)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nA: b\n\r\n").err(),
        Some(Error::MalformedInner)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n").err(),
        Some(Error::MalformedInner)
    );
    assert_eq!(
        req(b"\r\nGET / HTTP/1.1\r\n\r\n").err(),
        Some(Error::MalformedInner)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").err(),
        Some(Error::ForbiddenHeader)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").err(),
        Some(Error::ForbiddenHeader)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nContent-Length: 2\r\n\r\nabc").err(),
        Some(Error::ContentLengthMismatch)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nContent-Length: 4\r\n\r\nabc").err(),
        Some(Error::ContentLengthMismatch)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc").err(),
        Some(Error::ContentLengthMismatch)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc").err(),
        Some(Error::ContentLengthMismatch)
    );
    assert_eq!(
        req(b"GET / HTTP/1.1\r\n").err(),
        Some(Error::MalformedInner)
    );
    assert!(req(b"GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").is_ok());
}

#[test]
fn head_limits() {
    let limits = Limits {
        max_inner_fields: 2,
        max_inner_head: 64,
        ..Limits::default()
    };
    let three = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    assert_eq!(
        decode_all::<RequestHead>(three, &limits).err(),
        Some(Error::InnerHeadTooLarge)
    );
    let long = [b"GET /".as_slice(), &[b'a'; 80], b" HTTP/1.1\r\n\r\n"].concat();
    assert_eq!(
        decode_all::<RequestHead>(&long, &limits).err(),
        Some(Error::InnerHeadTooLarge)
    );
}

#[test]
fn responses() {
    let (h, b) = decode_all::<ResponseHead>(
        b"HTTP/1.1 404 Not Found\r\nA: b\r\n\r\nxy",
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(
        (h.status, h.reason.as_str(), b.as_slice()),
        (404, "Not Found", b"xy".as_slice())
    );
    assert_eq!(
        decode_all::<ResponseHead>(b"HTTP/1.1 101 Switching\r\n\r\n", &Limits::default()).err(),
        Some(Error::MalformedInner)
    );
}

/// Erratum E2: the answer to HEAD and a 304 carry the representation's
/// length with an empty body; a body is refused; any other answer's
/// length is its body's. Fed whole and byte by byte.
#[test]
fn head_and_304_carry_the_representation_length() {
    fn decode(msg: &[u8], method: &str) -> Result<(ResponseHead, Vec<u8>)> {
        let whole = decode_response(msg, method, &Limits::default());
        let mut d = Decoder::answering(method, Limits::default());
        let mut bytewise = Ok(());
        for b in msg {
            bytewise = d.receive(std::slice::from_ref(b)).and_then(|()| {
                while d.next_event()?.is_some() {}
                Ok(())
            });
            if bytewise.is_err() {
                break;
            }
        }
        let bytewise = bytewise.and_then(|()| d.finish());
        assert_eq!(whole.as_ref().err(), bytewise.err().as_ref(), "{method}");
        whole
    }
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
    assert!(decode(head, "HEAD").is_ok_and(|(_, b)| b.is_empty()));
    assert_eq!(
        decode(head, "GET").err(),
        Some(Error::ContentLengthMismatch)
    );
    let with_body = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(
        decode(with_body, "HEAD").err(),
        Some(Error::ContentLengthMismatch)
    );
    assert!(decode(with_body, "GET").is_ok());
    let no_length_body = b"HTTP/1.1 200 OK\r\n\r\nhello";
    assert_eq!(
        decode(no_length_body, "HEAD").err(),
        Some(Error::ContentLengthMismatch)
    );
    assert!(decode(b"HTTP/1.1 200 OK\r\n\r\n", "HEAD").is_ok());
    assert_eq!(
        decode(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "HEAD").err(),
        Some(Error::ContentLengthMismatch)
    );
    let not_modified = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n";
    for method in ["GET", "HEAD", "POST"] {
        assert!(decode(not_modified, method).is_ok());
    }
    assert_eq!(
        decode(b"HTTP/1.1 304 Not Modified\r\n\r\nx", "GET").err(),
        Some(Error::ContentLengthMismatch)
    );
    // Methods are case-sensitive: `head` is not HEAD.
    assert_eq!(
        decode(head, "head").err(),
        Some(Error::ContentLengthMismatch)
    );
}

/// The service's request holds the inner fields alone (erratum E1):
/// no outer field, not even one the inner head lacks; the protocol's
/// own fields are consumed; `Host` comes from the inner head, else the
/// bound outer one, else the configured name, else nowhere.
#[test]
fn the_service_sees_the_inner_fields_only() {
    let inner = vec![
        Field::new("Host", "app.example"),
        Field::new("ACCEPT", "c"),
        Field::new("Date", "Tue, 24 Nov 2026 20:00:00 GMT"),
        Field::new("Client-Random", "x"),
        Field::new("random", "y"),
        Field::new("Ticket", "z"),
        Field::new("Content-Type", "text/plain"),
        Field::new("Accept", "d"),
    ];
    assert_eq!(
        service_fields(&inner, Some(b"bound.example"), Some(b"conf.example")),
        vec![
            Field::new("Host", "app.example"),
            Field::new("ACCEPT", "c"),
            Field::new("Content-Type", "text/plain"),
            Field::new("Accept", "d"),
        ]
    );
    let no_host = &inner[1..2];
    let with = |bound: Option<&[u8]>, conf: Option<&[u8]>| service_fields(no_host, bound, conf);
    assert_eq!(
        with(Some(b"bound.example"), Some(b"conf.example"))[0],
        Field::new("Host", "bound.example")
    );
    assert_eq!(
        with(None, Some(b"conf.example"))[0],
        Field::new("Host", "conf.example")
    );
    assert_eq!(with(None, None), vec![Field::new("ACCEPT", "c")]);
    for name in ["Host", "date", "Client-Random", "RANDOM", "ticket"] {
        assert_eq!(is_service_field(name), name == "Host", "{name}");
    }
    for name in ["Date", "Ticket", "random", "Content-Type"] {
        let service = name == "Date" || name == "Content-Type";
        assert_eq!(is_service_response_field(name), service, "{name}");
    }
}
