//! Artefacts of a real rspamd 3.4 (Debian 12), shared by the profile's
//! unit tests: a key pair printed by `rspamadm keypair` and requests that
//! `rspamc --key` sent to a loopback listener while we held its secret key.

/// Printed by `rspamadm keypair` (its field order varies from run to run).
pub const SERVER_KEYPAIR: &str = r#"keypair {
    encoding = "base32";
    id = "r898uxxzyq5idq4zqdgzo8riqab6dw9gfhfx4ah75nhmt6axf7huxpuh3qrzxiqgmj6kqi1gj7mt95uywgbd568umbsdx3g5799b64n";
    algorithm = "curve25519";
    type = "kex";
    pubkey = "w56geq9r183janamgckjcgafyewzwttf1wgdbhhipigynh99nr1y";
    privkey = "yousub68a7xnpt7mhjfxfb5m9mhite5q9ejsurfdqjjn7txg58hy";
}
"#;

/// `pubkey` of [`SERVER_KEYPAIR`].
pub const PUBKEY: &str = "w56geq9r183janamgckjcgafyewzwttf1wgdbhhipigynh99nr1y";
/// `privkey` of [`SERVER_KEYPAIR`].
pub const PRIVKEY: &str = "yousub68a7xnpt7mhjfxfb5m9mhite5q9ejsurfdqjjn7txg58hy";
/// `id` of [`SERVER_KEYPAIR`].
pub const ID: &str = "r898uxxzyq5idq4zqdgzo8riqab6dw9gfhfx4ah75nhmt6axf7huxpuh3qrzxiqgmj6kqi1gj7mt95uywgbd568umbsdx3g5799b64n";

/// What `rspamc --key w56geq9r… -h 127.0.0.1:PORT stat` (rspamd 3.4) sent
/// to a loopback listener.
/// The `Key` value of [`RSPAMC_STAT`].
pub const STAT_KEY_HEADER: &str = "r898uxxz=6ekmz95961ppkpnwp446cb8718ytytweeuukn4hoo19mpz1t5xqy";

/// The captured request: outer head, and body in hex.
pub const RSPAMC_STAT: (&str, &str) = (
    "POST /post HTTP/1.0\r\nContent-Length: 118\r\nContent-Type: application/octet-stream\r\n\
     Connection: close\r\nKey: r898uxxz=6ekmz95961ppkpnwp446cb8718ytytweeuukn4hoo19mpz1t5xqy\r\n\r\n",
    "1d8ca637cce7556fd903f2b96c3c5c5124d271f484b5e55da6cd8515dec061ee119e53f6340b31c3743df40e1e49e430\
     258481d414e7e7e560b4645d8372f53cc7d1497800804cd9eaf71c894170860338dfabd49314e6a0c0c5aff7bf0fad4e\
     cfec2dc80ccb7e5a520906def389aa17ea884791e362",
);

/// What `rspamc --key w56geq9r… -h 127.0.0.1:PORT symbols msg.eml` sent, with
/// `msg.eml` = `From: a@example.org\r\nTo: b@example.org\r\nSubject: hi\r\n\r\nhello rspamd\r\n`.
pub const RSPAMC_SYMBOLS: (&str, &str) = (
    "POST /post HTTP/1.0\r\nContent-Length: 239\r\nContent-Type: application/octet-stream\r\n\
     Connection: close\r\nKey: r898uxxz=55cgz31xeqd5ikrg3cpfwgutxyerpqfx8njx6sa6ed1mafwfjcny\r\n\r\n",
    "d243619257aed70fff46ef479dd7f00164ec29dde377b408de11844d8a8e677329cb42226b24f8598fbe60858303b9cb\
     1b7fbb7f99e6a090a12543c0e1126ed5fe616dded26ac414c234f12b1eab183a6b5678eb8578b54e46916e8ca46a6314\
     3eca2aa4ab07fd75984e94e79930ef237867b85d5826a84f7abf9d77b13ae8aa609d1520546925cf2926c5c69f5faf4a\
     9481643ce290d8107d768c054ae8c9e2c4e53539ddcc7ae71e5f358b9cce97cceb1bf9d8291e23e86b2f9617d3cb9ab1\
     acf3ff6e73cd8e813744cc067ef232f129898ad31d0fcc408582621bb4e81ece8b25318391c6d55d1cd1a887ddb5ab",
);

/// Parses an outer request as the IO side would: the `Key` value and the body.
#[allow(clippy::unwrap_used)]
pub fn split_request(bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(n) = req.parse(bytes).unwrap() else {
        panic!("incomplete head")
    };
    let key = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("key"))
        .unwrap();
    let len: usize = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
        .unwrap();
    assert_eq!(bytes.len() - n, len);
    (key.value.to_vec(), bytes[n..].to_vec())
}
