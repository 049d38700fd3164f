//! Vectors for tickets (spec §7.2) and the `Client-Random`/`Random` token (spec §8).

use httpcrypt_proto::outer;
use httpcrypt_proto::ticket::{Ticket, TicketContents, TicketKey, SEALED_TICKET_LEN};
use httpcrypt_proto::token;
use httpcrypt_proto::{Error, KeyId, SessionKey};
use serde_json::json;

use super::{bytes, check, hx, Case};

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let tk = TicketKey::new(KeyId(bytes("ticket-tid")), bytes("ticket-key"));
    let contents = TicketContents {
        key: SessionKey::from_bytes(bytes("ticket-k")),
        kid: KeyId(bytes("ticket-kid")),
        expiry: 1_700_007_260,
    };
    let n = bytes::<24>("ticket-n");
    let t = tk.seal(&contents, n);
    let cookie = outer::format_cookie(&t.tid(), t.sealed(), "ab", "").unwrap();
    let key_json = json!({"tid": hx(tk.tid().0), "key": hx(*tk.to_bytes())});
    v.push(Case::ok(
        "ticket_seal",
        "ticket-seal",
        "tid || n || XChaCha20-Poly1305(ticket_key, n, k || kid || expiry, AD = tid); the cookie carries ticket[10..]",
        json!({"ticket_key": key_json, "n": hx(n), "session_key": hx(contents.key.as_bytes()), "kid": hx(contents.kid.0), "expiry": contents.expiry, "name_pad": "ab", "value_pad": ""}),
        json!({"ticket": hx(t.0), "field": t.to_field(), "cookie": cookie}),
    ));
    let sealed: [u8; SEALED_TICKET_LEN] = t.sealed().try_into().unwrap();
    let mut open = |name: &str,
                    why: &str,
                    sealed: [u8; SEALED_TICKET_LEN],
                    key: &TicketKey,
                    now: u64,
                    want: Option<Error>| {
        let got = key.open(&sealed, now);
        let input = json!({"ticket_key": {"tid": hx(key.tid().0), "key": hx(*key.to_bytes())}, "sealed": hx(sealed), "now": now});
        match want {
            None => {
                let c = got.unwrap();
                v.push(Case::ok("ticket_open", name, why, input, json!({"session_key": hx(c.key.as_bytes()), "kid": hx(c.kid.0), "expiry": c.expiry})));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("ticket_open", name, why, input, e));
            }
        }
    };
    open(
        "ticket-open-ok",
        "opens until its expiry, inclusive",
        sealed,
        &tk,
        1_700_007_260,
        None,
    );
    open(
        "ticket-open-expired",
        "one second after expiry",
        sealed,
        &tk,
        1_700_007_261,
        Some(Error::UnknownKey),
    );
    let mut flipped = sealed;
    flipped[30] ^= 1;
    open(
        "ticket-open-flipped",
        "a flipped ciphertext bit",
        flipped,
        &tk,
        1_700_000_000,
        Some(Error::UnknownKey),
    );
    let mut flipped_n = sealed;
    flipped_n[0] ^= 1;
    open(
        "ticket-open-flipped-nonce",
        "a flipped nonce bit",
        flipped_n,
        &tk,
        1_700_000_000,
        Some(Error::UnknownKey),
    );
    let wrong_tid = TicketKey::new(KeyId(bytes("ticket-other-tid")), bytes("ticket-key"));
    open(
        "ticket-open-other-tid",
        "the tid is bound as associated data",
        sealed,
        &wrong_tid,
        1_700_000_000,
        Some(Error::UnknownKey),
    );
    let wrong_key = TicketKey::new(tk.tid(), bytes("ticket-other-key"));
    open(
        "ticket-open-other-key",
        "another ticket key under the same tid",
        sealed,
        &wrong_key,
        1_700_000_000,
        Some(Error::UnknownKey),
    );
    let field = t.to_field();
    for (name, why, text) in [
        (
            "ticket-field-short",
            "127 characters",
            field[..127].to_string(),
        ),
        (
            "ticket-field-padded",
            "padding is refused",
            format!("{field}="),
        ),
    ] {
        check(name, Ticket::from_field(text.as_bytes()), &Error::BadBase64);
        v.push(Case::err(
            "ticket_field",
            name,
            why,
            json!({"field": text}),
            Error::BadBase64,
        ));
    }

    // Token.
    let secret = bytes::<32>("token-secret");
    let k = SessionKey::from_bytes(bytes("token-k"));
    let cr = bytes::<24>("token-client-random");
    let random = token::format_random(&secret, &k, &cr);
    v.push(Case::ok(
        "token",
        "token-random",
        "Random = b64u(client_random || SHA3-256(\"hc1-token\" || secret || k || client_random)[0..16])",
        json!({"token_secret": hx(secret), "session_key": hx(k.as_bytes()), "client_random": hx(cr)}),
        json!({"client_random_field": httpcrypt_proto::b64::encode(&cr), "random_field": random}),
    ));
    let mut verify = |name: &str,
                      why: &str,
                      value: String,
                      secret: [u8; 32],
                      want: Option<Error>| {
        let got = token::verify_random(&secret, &k, value.as_bytes());
        let input = json!({"token_secret": hx(secret), "session_key": hx(k.as_bytes()), "random_field": value});
        match want {
            None => v.push(Case::ok(
                "token_verify",
                name,
                why,
                input,
                json!({"client_random": hx(got.unwrap())}),
            )),
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("token_verify", name, why, input, e));
            }
        }
    };
    verify(
        "token-verify-ok",
        "the server rechecks its own token",
        random.clone(),
        secret,
        None,
    );
    verify(
        "token-verify-other-secret",
        "another token secret",
        random.clone(),
        bytes("token-other"),
        Some(Error::BadToken),
    );
    let mut chars: Vec<char> = random.chars().collect();
    chars[40] = if chars[40] == 'A' { 'B' } else { 'A' };
    verify(
        "token-verify-flipped",
        "a changed server random",
        chars.into_iter().collect(),
        secret,
        Some(Error::BadToken),
    );
    verify(
        "token-verify-short",
        "too short",
        random[..50].to_string(),
        secret,
        Some(Error::BadToken),
    );
    v
}
