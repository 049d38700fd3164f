//! Runner for the `rspamd_*` vector kinds.

use httpcrypt_proto::rspamd::{base32, keypair, keys, Client, KeyHeader, Keyring, ShortId};
use httpcrypt_proto::{Error, KexSecret};
use serde_json::{json, Value};

use super::{arr, hx, s};

fn open(ring: &Keyring, header: &str, body: &[u8]) -> Result<Vec<u8>, Error> {
    let h = KeyHeader::parse(header.as_bytes())?.ok_or(Error::BadKeyHeader)?;
    ring.open_request(&h, body).map(|(inner, _)| inner)
}

/// Runs one rspamd case.
pub fn run(kind: &str, i: &Value) -> Result<Value, Error> {
    match kind {
        "rspamd_base32" => {
            let raw = hx(i, "hex");
            let text = base32::encode(&raw);
            assert_eq!(base32::decode(text.as_bytes())?, raw);
            Ok(json!({"text": text}))
        }
        "rspamd_base32_decode" => {
            Ok(json!({"hex": hex::encode(base32::decode(s(i, "text").as_bytes())?)}))
        }
        "rspamd_key_id" => {
            let public = keys::public_from_base32(s(i, "pubkey").as_bytes())?;
            let id = keys::KeyId::of(&public);
            Ok(json!({"id": id.to_base32(), "short_id": id.short().to_base32()}))
        }
        "rspamd_key_header" => Ok(match KeyHeader::parse(s(i, "value").as_bytes())? {
            Some(h) => {
                json!({"encrypted": true, "short_id": hex::encode(h.short_id.0), "client_public": hex::encode(h.client.0)})
            }
            None => json!({"encrypted": false}),
        }),
        "rspamd_keypair" => {
            Ok(json!({"pubkey": keys::public_to_base32(keypair::parse(s(i, "text"))?.public())}))
        }
        "rspamd_open" => {
            let ring: Keyring = std::iter::once(keypair::parse(s(i, "keypair"))?).collect();
            Ok(json!({"inner": hex::encode(open(&ring, s(i, "key_header"), &hx(i, "body"))?)}))
        }
        "rspamd_exchange" => {
            let server = keypair::parse(s(i, "server_keypair"))?;
            let client = KexSecret::from_bytes(arr(i, "client_secret"));
            let inner = hx(i, "inner_request");
            let mut req = Vec::new();
            let c = Client::seal_request_with(
                &client,
                &arr(i, "nonce"),
                server.public(),
                s(i, "host"),
                &inner,
                &mut req,
            )?;
            let header = KeyHeader {
                short_id: ShortId::of(server.public()),
                client: *client.public(),
            }
            .format();
            let split = req
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("head end")
                + 4;
            let ring: Keyring = std::iter::once(server).collect();
            let h = KeyHeader::parse(header.as_bytes())?.ok_or(Error::BadKeyHeader)?;
            let (got, responder) = ring.open_request(&h, &req[split..])?;
            assert_eq!(got, inner);
            let inner_rsp = hx(i, "inner_response");
            let mut rsp = Vec::new();
            responder.seal_response_with(&arr(i, "response_nonce"), &inner_rsp, &mut rsp)?;
            let rsplit = rsp
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("head end")
                + 4;
            assert_eq!(c.open_response(&rsp[rsplit..])?, inner_rsp);
            Ok(
                json!({"key_header": header, "outer_request": hex::encode(&req), "outer_response": hex::encode(&rsp)}),
            )
        }
        other => panic!("unknown vector kind {other}"),
    }
}
