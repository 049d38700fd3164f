//! Writes the checked-in seed corpus `fuzz/seeds/<target>/<name>`: a few
//! small, valid inputs per target, made with the crate's own encoders under
//! the fixture keys of `httpcrypt_fuzz` (so they reach the deep paths:
//! streams that verify, requests that are accepted, tickets that open).
//! Deterministic; rerun after changing a target's input layout:
//!
//! ```text
//! cd fuzz && cargo run --example gen_seeds
//! ```

use std::path::{Path, PathBuf};

use httpcrypt_fuzz::{self as fx, plan, SeedWriter};
use httpcrypt_proto::cert::{self, KeyCert};
use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead, ResponseHead};
use httpcrypt_proto::keys::{KexSecret, KeyId};
use httpcrypt_proto::outer::{self, Mount};
use httpcrypt_proto::rspamd::{self, base32, keypair, Client};
use httpcrypt_proto::stream::{ResponseKey, Sealer};
use httpcrypt_proto::ticket::TicketContents;
use httpcrypt_proto::{b64, dns, replay, tlsa, token};

struct Seeds {
    root: PathBuf,
    count: usize,
}

impl Seeds {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("create seed dir");
        std::fs::write(dir.join(name), bytes).expect("write seed");
        self.count += 1;
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex"))
        .collect()
}

fn request_head(target: &str, body_len: usize) -> RequestHead {
    let mut head = RequestHead::new(if body_len > 0 { "POST" } else { "GET" }, target);
    head.fields
        .push(Field::new("Date", replay::format_date(fx::NOW)));
    head.fields.push(Field::new("Accept", "*/*"));
    if body_len > 0 {
        head.fields
            .push(Field::new("Content-Length", body_len.to_string()));
    }
    head
}

fn stream_open(s: &mut Seeds) {
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

fn outer_request(s: &mut Seeds) {
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

fn cookie_scan(s: &mut Seeds) {
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

fn inner_message(s: &mut Seeds) {
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

fn certs(s: &mut Seeds) {
    let c = fx::server_cert();
    let old = fx::expired_cert();
    s.put("cert", "binary", &c.encode());
    s.put("cert", "text", c.to_text().as_bytes());
    let list = cert::format_cert_list(&[c.clone(), old.clone()]).replace('\n', "\r\n");
    s.put("cert", "list-crlf", format!("\r\n{list}").as_bytes());
    s.put(
        "cert",
        "identity-txt",
        dns::format_identity_txt(&fx::identity().public()).as_bytes(),
    );
    let mut addrs = dns::format_aaaa(&old).to_vec();
    addrs.reverse();
    s.put("cert", "aaaa", &addrs.concat());
    let other = KeyCert::sign(
        &fx::identity(),
        9,
        0,
        u32::MAX,
        *KexSecret::from_bytes([8; 32]).public(),
    );
    s.put("cert", "text-forever", other.to_text().as_bytes());
}

fn hybrid_seeds(s: &mut Seeds) {
    use httpcrypt_proto::hybrid::{cert as hcert, Encapsulation, HybridRequest};
    let (c, kem) = fx::hybrid_fixture();
    s.put("hybrid_cert", "binary", &c.encode());
    s.put("hybrid_cert", "text", c.to_text().as_bytes());
    let list = format!(
        "{}\r\n{}",
        fx::server_cert().to_text(),
        hcert::format_cert_list(std::slice::from_ref(&c), &[kem.public()])
    );
    s.put("hybrid_cert", "list-both-suites", list.as_bytes());
    let mut addrs = hcert::format_aaaa(&c).to_vec();
    addrs.reverse();
    s.put("hybrid_cert", "aaaa", &addrs.concat());
    s.put("kem_text", "text", kem.public().to_text().as_bytes());
    s.put("kem_text", "binary", kem.public().as_bytes());
    let client = KexSecret::from_bytes([0x21; 32]);
    let (ct_m, ss_m) = kem.public().encapsulate_with(&[0x22; 32]);
    let e = Encapsulation::from_parts(&c.kex_public, &client, ct_m, &ss_m).expect("agrees");
    let req = HybridRequest::from_encapsulation(&c, e, [7; 24], "", "").expect("cookie");
    let mut plain = Vec::new();
    request_head("/index.html", 0).encode(&mut plain);
    let mut sealed = Vec::new();
    httpcrypt_proto::stream::seal_all(req.sealer(), &plain, 16384, &mut sealed).expect("seals");
    let value = b64::encode(&client.public().0);
    for (name, flags) in [("post", 2u8), ("get", 3u8)] {
        let body = [&req.ciphertext()[..], &sealed].concat();
        s.put(
            "hybrid_accept",
            name,
            &SeedWriter::new()
                .u8(flags)
                .u16(value.len() as u16)
                .bytes(value.as_bytes())
                .bytes(&body)
                .finish(),
        );
    }
}

fn tlsa_seeds(s: &mut Seeds) {
    let id = fx::identity();
    let der = tlsa::encode(&id, &fx::server_cert());
    s.put(
        "tlsa",
        "server-cert",
        &[&[3, 0, 0], der.as_slice()].concat(),
    );
    let forever = KeyCert::sign(
        &id,
        7,
        0,
        u32::MAX,
        *KexSecret::from_bytes([8; 32]).public(),
    );
    let der = tlsa::encode(&id, &forever);
    s.put(
        "tlsa",
        "generalized-time",
        &[&[3, 0, 0], der.as_slice()].concat(),
    );
    s.put(
        "tlsa",
        "other-usage",
        &[&[3, 1, 1], der.as_slice()].concat(),
    );
}

fn ticket(s: &mut Seeds) {
    let tk = fx::ticket_key();
    let t = tk.seal(
        &TicketContents {
            key: fx::session_key(),
            kid: fx::server_cert().kid(),
            expiry: (fx::NOW + 60) as u32,
        },
        [0x44; 24],
    );
    s.put(
        "ticket",
        "sealed",
        &SeedWriter::new().u64(fx::NOW).bytes(t.sealed()).finish(),
    );
    s.put(
        "ticket",
        "field",
        &SeedWriter::new()
            .u64(fx::NOW)
            .bytes(t.to_field().as_bytes())
            .finish(),
    );
}

fn tokens(s: &mut Seeds) {
    let v = token::format_random(fx::TOKEN_SECRET, &fx::session_key(), &[2; 24]);
    s.put("token", "random", v.as_bytes());
    s.put("token", "client-random", b64::encode(&[7; 24]).as_bytes());
}

fn provenance_seeds(s: &mut Seeds) {
    use httpcrypt_proto::provenance::{self, ProvenanceKey, ServerId};
    // Issued by the fixture key inside the target (mode 0), IPv4 and IPv6.
    let mut v4 = [0u8; 16];
    v4[..4].copy_from_slice(&[192, 0, 2, 1]);
    let issued = |mode: u8, peer: [u8; 16], now: u64, at: u64, life: u32, flip: u16| {
        SeedWriter::new()
            .u8(mode)
            .bytes(&peer)
            .u64(now)
            .u64(at)
            .u32(life)
            .u16(flip)
            .finish()
    };
    s.put(
        "provenance",
        "issued-v4",
        &issued(2, v4, 1_800_000_000, 1_799_999_990, 600, 77),
    );
    let v6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    s.put(
        "provenance",
        "issued-v6",
        &issued(0, v6, 1_800_000_000, 1_800_000_000, 86_400, 400),
    );
    // A valid certificate in text form (mode 1), and a provenance key.
    let key = ProvenanceKey::from_parts([1, 2, 3, 4], [7; 32]);
    let text = provenance::issue_text(
        &key,
        [192, 0, 2, 1].into(),
        ServerId([9; 8]),
        1_799_999_990,
        600,
    );
    let mut seed = issued(3, v4, 1_800_000_000, 0, 0, 0);
    seed.extend_from_slice(text.as_bytes());
    s.put("provenance", "text", &seed);
    let mut seed = issued(1, [0; 16], 0, 0, 0, 0);
    seed.extend_from_slice(key.format().as_bytes());
    s.put("provenance", "key", &seed);
}

fn admission_seeds(s: &mut Seeds) {
    let cookie = b64::encode(&(0u8..21).collect::<Vec<_>>());
    let echo = b64::encode(&(0u8..29).collect::<Vec<_>>());
    let with = |mode: u8, rest: &[u8]| [&[mode][..], rest].concat();
    s.put("admission", "cookie", &with(0, cookie.as_bytes()));
    s.put("admission", "echo", &with(1, echo.as_bytes()));
    let fields = format!("a=b; hc1-admit={echo}\nc=d");
    s.put("admission", "fields", &with(2, fields.as_bytes()));
    let doc = format!("{{\"type\":\"urn:httpcrypt:admission\",\"admit\":\"{cookie}\"}}");
    s.put("admission", "refusal", &with(3, doc.as_bytes()));
}

fn ratchet_seeds(s: &mut Seeds) {
    let seed = b64::encode(&(0u8..32).collect::<Vec<_>>());
    let state = format!("hc1-ratchet 1700000000 3600 60 12 {seed}\n");
    s.put("ratchet", "state", state.as_bytes());
    let (old, fresh) = (b64::encode(&[7; 32]), b64::encode(&[9; 32]));
    let state = format!("hc1-ratchet 0 60 60 5 {old} 8 {fresh}\n");
    s.put("ratchet", "state-reseed", state.as_bytes());
}

fn b64_seeds(s: &mut Seeds) {
    s.put("b64", "nonce", b64::encode(&[0xfb; 24]).as_bytes());
    s.put("b64", "short", b"-_8");
    s.put("b64", "id", b64::encode(&[1; 10]).as_bytes());
}

fn replay_seeds(s: &mut Seeds) {
    // (sel, date, advance) ops: repeats, other kids, an expire, time passing.
    let ops: &[[u8; 3]] = &[
        [0x00, 128, 0],
        [0x00, 128, 1],
        [0x05, 0, 0],
        [0x09, 255, 3],
        [0x80, 128, 20],
        [0x00, 128, 0],
        [0x05, 128, 40],
        [0x0d, 10, 0],
    ];
    let seed = SeedWriter::new()
        .u8(0)
        .u16(60)
        .u8(4)
        .bytes(&[7; 16])
        .u64(fx::NOW)
        .bytes(&ops.concat());
    s.put("replay", "register", &seed.finish());
    let seed = SeedWriter::new()
        .u8(0)
        .u16(8)
        .u8(32)
        .bytes(&[1; 16])
        .u64(5)
        .bytes(&ops.concat());
    s.put("replay", "register-early", &seed.finish());
    let date = replay::format_date(fx::NOW + 30);
    let seed = SeedWriter::new()
        .u8(1)
        .u64(fx::NOW)
        .u16(60)
        .bytes(date.as_bytes());
    s.put("replay", "date", &seed.finish());
    let seed = SeedWriter::new()
        .u8(1)
        .u64(784_111_777)
        .u16(0)
        .bytes(b" Sun, 06 Nov 1994 08:49:37 GMT ");
    s.put("replay", "date-rfc850", &seed.finish());
}

// Captured from a real `rspamc --key … stat` (rspamd 3.4) against the key
// pair of `httpcrypt_fuzz::rspamd::PRIVKEY`.
const STAT_KEY: &str = "r898uxxz=6ekmz95961ppkpnwp446cb8718ytytweeuukn4hoo19mpz1t5xqy";
const STAT_BODY: &str = "1d8ca637cce7556fd903f2b96c3c5c5124d271f484b5e55da6cd8515dec061ee119e53f6340b31c3743df40e1e49e430\
     258481d414e7e7e560b4645d8372f53cc7d1497800804cd9eaf71c894170860338dfabd49314e6a0c0c5aff7bf0fad4e\
     cfec2dc80ccb7e5a520906def389aa17ea884791e362";

fn rspamd_seeds(s: &mut Seeds) {
    let server = fx::rspamd::server_secret();
    s.put("rspamd_base32", "privkey", fx::rspamd::PRIVKEY.as_bytes());
    s.put(
        "rspamd_base32",
        "key-id",
        rspamd::KeyId::of(server.public()).to_base32().as_bytes(),
    );
    s.put(
        "rspamd_base32",
        "hello",
        base32::encode(b"hello world").as_bytes(),
    );

    s.put(
        "rspamd_key_header",
        "rspamc-stat",
        &[STAT_KEY.as_bytes(), b"\n", &hex(STAT_BODY)].concat(),
    );
    let mut req = Vec::new();
    Client::seal_request_with(
        &KexSecret::from_bytes([0x5c; 32]),
        &[0x3c; 24],
        server.public(),
        "localhost",
        b"GET /stat HTTP/1.0\r\n\r\n",
        &mut req,
    )
    .expect("seal request");
    let head_end = req.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    let head = std::str::from_utf8(&req[..head_end]).expect("ascii head");
    let key = head
        .lines()
        .find_map(|l| l.strip_prefix("Key: "))
        .expect("Key field");
    s.put(
        "rspamd_key_header",
        "sealed-request",
        &[key.as_bytes(), b"\n", &req[head_end..]].concat(),
    );
    let mut body = Vec::new();
    fx::rspamd::nm()
        .seal(&[9; 24], b"fixed nm body", &mut body)
        .expect("seal");
    s.put(
        "rspamd_key_header",
        "fixed-nm",
        &[b" r898uxxz=\t\n".as_slice(), &body].concat(),
    );

    s.put(
        "rspamd_keypair",
        "written",
        keypair::format(&server).as_bytes(),
    );
    let pk = rspamd::keys::public_to_base32(server.public());
    let json = format!(
        "{{\n  \"keypair\": {{\n    \"pubkey\": \"{pk}\",\n    \"privkey\": \"{}\",\n    \"type\": \"kex\"\n  }}\n}}\n",
        fx::rspamd::PRIVKEY
    );
    s.put("rspamd_keypair", "json", json.as_bytes());
    let ucl = format!(
        "# comment\nprivkey = {}; /* c */ pubkey: '{pk}'\n",
        fx::rspamd::PRIVKEY
    );
    s.put("rspamd_keypair", "bare-ucl", ucl.as_bytes());
}

fn split_seeds(s: &mut Seeds) {
    use httpcrypt_proto::split;
    use httpcrypt_proto::stream::{ResponseKey, Sealer};
    let body: Vec<u8> = (0..100u8).collect();
    let mut out = Vec::new();
    let sealer = Sealer::response(
        ResponseKey::new(fx::session_key(), fx::REQUEST_N0),
        [7; 24],
        &mut out,
    );
    split::seal_split(sealer, b"HTTP/1.1 200 OK\r\n\r\n", &body, 32, &mut out).expect("seals");
    for (name, mode, plan) in [
        ("whole", 0u8, 0u32),
        ("bytewise", 2, 1),
        ("random", 0, 0x0102_0307),
    ] {
        let seed = SeedWriter::new().u8(mode).u16(16384).u32(plan).bytes(&out);
        s.put("split_stream", name, &seed.finish());
    }
    let seed = SeedWriter::new().u8(4).u16(31).u32(0).bytes(&body);
    s.put("split_stream", "seal", &seed.finish());
    let mut batch = Vec::new();
    split::encode_batch_entry(Some(b"abc"), &mut batch);
    split::encode_batch_entry(None, &mut batch);
    let seed = SeedWriter::new().u8(1).u16(1).u32(1).bytes(&batch);
    s.put("split_stream", "batch", &seed.finish());
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut s = Seeds { root, count: 0 };
    stream_open(&mut s);
    outer_request(&mut s);
    cookie_scan(&mut s);
    inner_message(&mut s);
    certs(&mut s);
    tlsa_seeds(&mut s);
    ticket(&mut s);
    tokens(&mut s);
    b64_seeds(&mut s);
    replay_seeds(&mut s);
    rspamd_seeds(&mut s);
    split_seeds(&mut s);
    provenance_seeds(&mut s);
    admission_seeds(&mut s);
    ratchet_seeds(&mut s);
    hybrid_seeds(&mut s);
    println!("wrote {} seeds under {}", s.count, s.root.display());
}
