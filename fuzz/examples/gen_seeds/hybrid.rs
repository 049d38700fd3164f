//! Seeds of suite 2 (spec/hybrid.md): a suite-2 certificate in its binary,
//! text, list and AAAA forms, an ML-KEM key text, and accepted hybrid POST
//! and GET requests.

use httpcrypt_fuzz::{self as fx, SeedWriter};
use httpcrypt_proto::b64;
use httpcrypt_proto::hybrid::{cert as hcert, Encapsulation, HybridRequest};
use httpcrypt_proto::keys::KexSecret;

use super::{request_head, Seeds};

pub(super) fn hybrid_seeds(s: &mut Seeds) {
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
