//! Seeds of the rspamd compatibility profile, one captured from a real
//! `rspamc`.

use httpcrypt_fuzz as fx;
use httpcrypt_proto::keys::KexSecret;
use httpcrypt_proto::rspamd::{self, base32, keypair, Client};

use super::{hex, Seeds};

// Captured from a real `rspamc --key … stat` (rspamd 3.4) against the key
// pair of `httpcrypt_fuzz::rspamd::PRIVKEY`.
const STAT_KEY: &str = "r898uxxz=6ekmz95961ppkpnwp446cb8718ytytweeuukn4hoo19mpz1t5xqy";
const STAT_BODY: &str = "1d8ca637cce7556fd903f2b96c3c5c5124d271f484b5e55da6cd8515dec061ee119e53f6340b31c3743df40e1e49e430\
     258481d414e7e7e560b4645d8372f53cc7d1497800804cd9eaf71c894170860338dfabd49314e6a0c0c5aff7bf0fad4e\
     cfec2dc80ccb7e5a520906def389aa17ea884791e362";

pub(super) fn rspamd_seeds(s: &mut Seeds) {
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
