//! One HTTPCrypt exchange in memory: a server key and certificate, a client
//! that encrypts its very first request, and the bytes a middlebox would see
//! next to what each end decrypts.
//!
//! `cargo run -p httpcrypt-proto --example exchange`

use std::time::{SystemTime, UNIX_EPOCH};

use httpcrypt_proto::client::{ClientCredential, PreparedRequest};
use httpcrypt_proto::inner::{Field, RequestHead, ResponseHead};
use httpcrypt_proto::outer::{self, Form, Mount};
use httpcrypt_proto::server::{self, Accept, CookieFields, OuterRequest, ServerKeys};
use httpcrypt_proto::{replay, IdentityKey, KexSecret, KeyCert, Limits};
use rand_core::{OsRng, RngCore};

fn printable(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| match b {
            b'\r' => String::new(),
            b'\n' => "\n    ".to_string(),
            0x20..=0x7e => (*b as char).to_string(),
            _ => ".".to_string(),
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let mut rng = OsRng;

    // Server: identity key, a short-lived X25519 key and its certificate.
    let identity = IdentityKey::generate(&mut rng);
    let kex = KexSecret::generate(&mut rng);
    let cert = KeyCert::sign(
        &identity,
        1,
        (now - 60) as u32,
        (now + 7260) as u32,
        *kex.public(),
    );
    let mut keys = ServerKeys::new();
    keys.add_key(kex, cert.clone());
    println!(
        "server certificate (published in DNS TXT or answered to OPTIONS):\n    {}\n",
        cert.to_text()
    );

    // Client: fetched the certificate out of band, checks it in authenticated mode.
    cert.verify(&identity.public())?;
    let client_key = KexSecret::generate(&mut rng);
    let mut n0 = [0u8; 24];
    rng.fill_bytes(&mut n0);
    let prepared = PreparedRequest::new(
        &cert,
        ClientCredential::Key(&client_key),
        n0,
        &outer::random_pad(&mut rng),
        &outer::random_pad(&mut rng),
    )?;
    let mut head = RequestHead::new("POST", "/account/transfer");
    head.fields.push(Field::new("Host", "bank.example"));
    head.fields
        .push(Field::new("Date", replay::format_date(now)));
    head.fields.push(Field::new("Content-Length", "19"));
    let stream = prepared.seal_message(&head, b"to=alice&amount=100", 16 * 1024)?;
    let mount = Mount::new("/hc")?;
    let wire = prepared.encode_outer(Form::Post, &mount, "bank.example", &stream);
    println!(
        "what a proxy sees ({} bytes):\n    {}\n",
        wire.len(),
        printable(&wire)
    );

    // Server: judge the outer request, derive k, open, parse.
    let split = wire
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no head")?
        + 4;
    let path = mount.nonce_path(prepared.n0());
    let req = OuterRequest {
        method: "POST",
        target: &path,
        host: Some(b"bank.example"),
        cookies: CookieFields::from_slice(&[prepared.cookie().as_bytes()]),
        content_length: Some((wire.len() - split) as u64),
        has_body: true,
    };
    let limits = Limits::default();
    let Accept::Request(accepted) =
        server::accept(&keys, &mount, &req, &limits, now, &mut server::Plain)?
    else {
        return Err("not an HTTPCrypt request".into());
    };
    let (inner_head, inner_body) = server::open_request(&accepted, &wire[split..], &limits)?;
    let mut shown = Vec::new();
    inner_head.encode(&mut shown);
    shown.extend_from_slice(&inner_body);
    println!("what the server decrypts:\n    {}\n", printable(&shown));

    // Response, bound to the request's nonce.
    let mut rn0 = [0u8; 24];
    rng.fill_bytes(&mut rn0);
    let mut body = Vec::new();
    let mut rsp = ResponseHead::new(200, "OK");
    rsp.fields.push(Field::new("Content-Type", "text/plain"));
    server::seal_response(
        accepted.into_response_key(),
        rn0,
        &rsp,
        b"transfer queued\n",
        now,
        16 * 1024,
        &mut body,
    )?;
    let mut outer_rsp = Vec::new();
    outer::encode_response_head(body.len(), &mut outer_rsp);
    outer_rsp.extend_from_slice(&body);
    println!(
        "what a proxy sees of the response ({} bytes):\n    {}\n",
        outer_rsp.len(),
        printable(&outer_rsp)
    );
    let (h, b) = prepared.open_response(&body, &limits)?;
    println!(
        "what the client decrypts:\n    HTTP/1.1 {} {}\n    {}",
        h.status,
        h.reason,
        String::from_utf8_lossy(&b)
    );
    Ok(())
}
