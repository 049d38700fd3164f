//! Seeds of the sealed stream and the outer and inner messages: the
//! `stream_open`, `outer_request`, `cookie_scan` and `inner_message` targets.

use httpcrypt_fuzz::{self as fx, plan, SeedWriter};
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead, ResponseHead};
use httpcrypt_proto::keys::{KexSecret, KeyId};
use httpcrypt_proto::outer::{self, Mount};
use httpcrypt_proto::stream::{ResponseKey, Sealer};
use httpcrypt_proto::ticket::TicketContents;

use super::{request_head, Seeds};

pub(super) fn stream_open(s: &mut Seeds) {
    let key = fx::session_key();
    let mut plain = Vec::new();
    request_head("/index.html", 5).encode(&mut plain);
    plain.extend_from_slice(b"hello");

    let mut out = Vec::new();
    httpcrypt_proto::stream::seal_all(Sealer::request(&key, fx::REQUEST_N0), &plain, 24, &mut out)
        .expect("seal");
    let seed = SeedWriter::new()
        .u8(0)
        .u16(64)
        .u32(plan::random(7, 1234))
        .bytes(&out);
    s.put("stream_open", "request-records", &seed.finish());

    let mut out = Vec::new();
    let mut sealer = Sealer::request(&key, fx::REQUEST_N0);
    sealer.seal(b"hello ", &mut out).expect("seal");
    sealer.seal(b"", &mut out).expect("seal");
    sealer.finish(b"world", &mut out).expect("seal");
    let seed = SeedWriter::new()
        .u8(2)
        .u16(16)
        .u32(plan::ONE_BY_ONE)
        .bytes(&out);
    s.put("stream_open", "request-one-by-one", &seed.finish());

    let mut out = Vec::new();
    Sealer::request(&key, fx::REQUEST_N0)
        .finish(b"", &mut out)
        .expect("seal");
    let seed = SeedWriter::new().u8(4).u16(0).u32(plan::two(3)).bytes(&out);
    s.put("stream_open", "request-empty", &seed.finish());

    let mut out = Vec::new();
    let mut sealer = Sealer::response(
        ResponseKey::new(key.clone(), fx::REQUEST_N0),
        [7; 24],
        &mut out,
    );
    sealer.seal(b"HTTP/1.1 200 OK\r\n", &mut out).expect("seal");
    sealer
        .seal_clear(b"Content-Length: 4\r\n\r\n", &mut out)
        .expect("seal");
    sealer.finish_clear(b"body", &mut out).expect("seal");
    let seed = SeedWriter::new()
        .u8(3)
        .u16(1024)
        .u32(plan::two(30))
        .bytes(&out);
    s.put("stream_open", "response-clear", &seed.finish());

    let seed = SeedWriter::new()
        .u8(8)
        .u16(5)
        .u32(plan::random(9, 77))
        .bytes(&plain);
    s.put("stream_open", "seal-request", &seed.finish());
    let seed = SeedWriter::new()
        .u8(8 | 16 | 1)
        .u16(100)
        .u32(plan::random(4, 5))
        .bytes(b"clear response bytes");
    s.put("stream_open", "seal-response-clear", &seed.finish());
}

/// `flags | content_length | plan | method \n target \n host \n cookies… \n\n body`.
fn outer_seed(flags: u8, cl: u64, lines: &[&str], body: &[u8]) -> Vec<u8> {
    let mut text = lines.join("\n").into_bytes();
    text.extend_from_slice(b"\n\n");
    text.extend_from_slice(body);
    SeedWriter::new()
        .u8(flags)
        .u64(cl)
        .u32(plan::random(13, 99))
        .bytes(&text)
        .finish()
}

pub(super) fn outer_request(s: &mut Seeds) {
    let cert = fx::server_cert();
    let client = KexSecret::from_bytes(fx::CLIENT_SECRET);
    let mount = Mount::new(fx::MOUNTS[1]).expect("mount");
    let mount_flags = 1 << 3;
    const HOST: u8 = 1;
    const CL: u8 = 2;
    const HAS_BODY: u8 = 4;

    // POST form under a kex key.
    let n0 = [0x5a; 24];
    let prep =
        PreparedRequest::new(&cert, ClientCredential::Key(&client), n0, "", "ab").expect("prepare");
    let stream = prep
        .seal_message(&request_head("/api", 4), b"ping", 64)
        .expect("seal");
    let target = mount.nonce_path(&n0);
    let cookie = format!("lang=en; {}", prep.cookie());
    let seed = outer_seed(
        HOST | CL | HAS_BODY | mount_flags,
        stream.len() as u64,
        &["POST", &target, "example.com", &cookie],
        &stream,
    );
    s.put("outer_request", "post-key", &seed);

    // GET form, root mount.
    let root = Mount::default();
    let n0 = [0x17; 24];
    let prep = PreparedRequest::new(&cert, ClientCredential::Key(&client), n0, "xyz", "")
        .expect("prepare");
    let stream = prep
        .seal_message(&request_head("/q?x=1", 0), b"", 1024)
        .expect("seal");
    let target = root.get_target(&n0, &stream);
    let seed = outer_seed(
        HOST,
        0,
        &["GET", &target, "example.com", "a=1", prep.cookie()],
        b"",
    );
    s.put("outer_request", "get-key", &seed);

    // Profile 2 (spec §4.5): time in the nonce, the Host bound, no inner Date.
    let mut n0 = [0x6b; 24];
    n0[..5].copy_from_slice(&fx::NOW.to_be_bytes()[3..]);
    let prep = PreparedRequest::new(&cert, ClientCredential::Key(&client), n0, "", "q")
        .expect("prepare")
        .compact("example.com")
        .expect("host fits");
    let stream = prep
        .seal_message(&RequestHead::new("GET", "/c"), b"", 1024)
        .expect("seal");
    let target = prep.get_target(&root, &stream);
    let seed = outer_seed(
        HOST,
        0,
        &["GET", &target, "example.com", prep.cookie()],
        b"",
    );
    s.put("outer_request", "get-compact", &seed);

    // POST form with a ticket.
    let tk = fx::ticket_key();
    let session = fx::session_key();
    let ticket = tk.seal(
        &TicketContents {
            key: session.clone(),
            kid: cert.kid(),
            expiry: (fx::NOW + 3600) as u32,
        },
        [0x21; 24],
    );
    let n0 = [0x33; 24];
    let prep = PreparedRequest::new(
        &cert,
        ClientCredential::Ticket(&ticket, &session),
        n0,
        "",
        "",
    )
    .expect("prepare");
    let stream = prep
        .seal_message(&request_head("/t", 2), b"ok", 16)
        .expect("seal");
    let target = mount.nonce_path(&n0);
    let seed = outer_seed(
        HOST | CL | HAS_BODY | mount_flags,
        stream.len() as u64,
        &["POST", &target, "example.com", prep.cookie()],
        &stream,
    );
    s.put("outer_request", "post-ticket", &seed);

    let seed = outer_seed(
        HOST | mount_flags,
        0,
        &["OPTIONS", "/hc/", "example.com"],
        b"",
    );
    s.put("outer_request", "options", &seed);
    let seed = outer_seed(
        HOST | mount_flags,
        0,
        &[
            "GET",
            "/hc/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA?AAAA",
            "h",
            "x=y",
        ],
        b"",
    );
    s.put("outer_request", "get-no-cookie", &seed);
}

pub(super) fn cookie_scan(s: &mut Seeds) {
    let key_id = KeyId([0x01; 10]);
    let ticket_id = KeyId([0x7e; 10]);
    let other = KeyId([0x02; 10]);
    let key = outer::format_cookie(&key_id, &[9; 32], "pad", "xy").expect("cookie");
    let ticket = outer::format_cookie(&ticket_id, &[3; 86], "", "").expect("cookie");
    let unknown = outer::format_cookie(&other, &[1; 32], "", "").expect("cookie");
    let put = |s: &mut Seeds, name: &str, pads: u8, text: String| {
        s.put(
            "cookie_scan",
            name,
            &SeedWriter::new().u8(pads).bytes(text.as_bytes()).finish(),
        )
    };
    put(s, "key", 0x35, format!("a=b; {unknown} ;c\n{key}"));
    put(s, "ticket", 0xf0, format!("session=1;\t{ticket}"));
    put(s, "unknown", 0, unknown);
    put(s, "bad-value", 0, format!("{}=short", key_id.to_b64()));
}

pub(super) fn inner_message(s: &mut Seeds) {
    let seed =
        |flags: u8, p: u32, bytes: &[u8]| SeedWriter::new().u8(flags).u32(p).bytes(bytes).finish();
    let mut req = Vec::new();
    request_head("/api?q=1", 5).encode(&mut req);
    req.extend_from_slice(b"hello");
    s.put(
        "inner_message",
        "request",
        &seed(0, plan::random(5, 42), &req),
    );
    s.put(
        "inner_message",
        "request-small-limits",
        &seed(2, plan::ONE_BY_ONE, &req),
    );

    let mut head = ResponseHead::new(404, "Not Found");
    head.fields.push(Field::new("Content-Type", "text/plain"));
    head.fields.push(Field::new("Content-Length", "2"));
    let mut rsp = Vec::new();
    head.encode(&mut rsp);
    rsp.extend_from_slice(b"no");
    s.put("inner_message", "response", &seed(1, plan::two(20), &rsp));
    s.put(
        "inner_message",
        "response-no-length",
        &seed(
            5,
            plan::random(3, 7),
            b"HTTP/1.1 200 OK\r\nX-A: b\r\n\r\nbody without length",
        ),
    );
}
