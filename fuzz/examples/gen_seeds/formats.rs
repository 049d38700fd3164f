//! Seeds of the smaller formats: certificates and their DNS forms, tickets,
//! tokens, provenance, admission, the ratchet, base64url and the replay
//! window.

use httpcrypt_fuzz::{self as fx, SeedWriter};
use httpcrypt_proto::cert::{self, KeyCert};
use httpcrypt_proto::keys::KexSecret;
use httpcrypt_proto::ticket::TicketContents;
use httpcrypt_proto::{b64, dns, replay, tlsa, token};

use super::Seeds;

pub(super) fn certs(s: &mut Seeds) {
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

pub(super) fn tlsa_seeds(s: &mut Seeds) {
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

pub(super) fn ticket(s: &mut Seeds) {
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

pub(super) fn tokens(s: &mut Seeds) {
    let v = token::format_random(fx::TOKEN_SECRET, &fx::session_key(), &[2; 24]);
    s.put("token", "random", v.as_bytes());
    s.put("token", "client-random", b64::encode(&[7; 24]).as_bytes());
}

pub(super) fn provenance_seeds(s: &mut Seeds) {
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

pub(super) fn admission_seeds(s: &mut Seeds) {
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

pub(super) fn ratchet_seeds(s: &mut Seeds) {
    let seed = b64::encode(&(0u8..32).collect::<Vec<_>>());
    let state = format!("hc1-ratchet 1700000000 3600 60 12 {seed}\n");
    s.put("ratchet", "state", state.as_bytes());
    let (old, fresh) = (b64::encode(&[7; 32]), b64::encode(&[9; 32]));
    let state = format!("hc1-ratchet 0 60 60 5 {old} 8 {fresh}\n");
    s.put("ratchet", "state-reseed", state.as_bytes());
}

pub(super) fn b64_seeds(s: &mut Seeds) {
    s.put("b64", "nonce", b64::encode(&[0xfb; 24]).as_bytes());
    s.put("b64", "short", b"-_8");
    s.put("b64", "id", b64::encode(&[1; 10]).as_bytes());
}

pub(super) fn replay_seeds(s: &mut Seeds) {
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
