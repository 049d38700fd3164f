//! Vectors for short tickets (spec §7.3), a project extension written to
//! `vectors/short-ticket/` so that runners of the v1 wire format, which do
//! not implement it, do not meet an unknown kind: the derivation of `k'`,
//! the `Ticket` field a client parses, and the server's handling of the
//! cookie that presents one.

use httpcrypt_proto::cert::KeyCert;
use httpcrypt_proto::outer::{self, Credential};
use httpcrypt_proto::server::ServerKeys;
use httpcrypt_proto::ticket::{ShortTicket, TicketKey};
use httpcrypt_proto::{Error, IdentityKey, KexSecret, KeyId, Profile, SessionKey};
use serde_json::{json, Value};

use super::{bytes, check, hx, Case};

const NOW: u64 = 1_700_000_000;
const NOT_AFTER: u32 = 1_700_007_200;

fn ticket_key() -> TicketKey {
    TicketKey::new(KeyId(bytes("short-tid")), bytes("short-ticket-key"))
}

fn key_json(tk: &TicketKey) -> Value {
    json!({"tid": hx(tk.tid().0), "key": hx(*tk.to_bytes())})
}

/// The kex key the ticket key came with.
fn cert() -> (KexSecret, KeyCert) {
    let kex = KexSecret::from_bytes(bytes("short-server-secret"));
    let c = KeyCert::sign_for(
        &IdentityKey::from_seed(bytes("short-identity")),
        Profile::V1,
        1,
        1_699_990_000,
        NOT_AFTER,
        *kex.public(),
    );
    (kex, c)
}

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    issue_cases(&mut v);
    field_cases(&mut v);
    accept_cases(&mut v);
    v
}

fn issue_cases(v: &mut Vec<Case>) {
    let tk = ticket_key();
    for (name, kid_label, h_label, name_pad, value_pad) in [
        ("short-ticket-issue", "short-kid", "short-h", "", ""),
        (
            "short-ticket-issue-padded",
            "short-kid-2",
            "short-h-2",
            "Zq9",
            "x_-0AbCdEfGhIjKl",
        ),
    ] {
        let kid = KeyId(bytes(kid_label));
        let h = bytes::<16>(h_label);
        let t = tk.issue_short(&kid, h);
        let cookie = outer::format_cookie(&t.tid(), t.h(), name_pad, value_pad).unwrap();
        v.push(Case::ok(
            "short_ticket_issue",
            name,
            "k' = SHA3-256(\"hc1-short-ticket\" || ticket_key || tid || kid || h); the field is tid || h || k', the cookie carries tid and h",
            json!({"ticket_key": key_json(&tk), "kid": hx(kid.0), "h": hx(h), "name_pad": name_pad, "value_pad": value_pad}),
            json!({"key": hx(t.key().as_bytes()), "field": t.to_field(), "cookie": cookie}),
        ));
    }
}

fn field_cases(v: &mut Vec<Case>) {
    let t = ticket_key().issue_short(&KeyId(bytes("short-kid")), bytes("short-h"));
    let field = t.to_field();
    let mut add = |name: &str, why: &str, text: String, want: Option<Error>| {
        let got = ShortTicket::from_field(text.as_bytes());
        let input = json!({"field": text});
        match want {
            None => {
                let t = got.unwrap();
                v.push(Case::ok(
                    "short_ticket_field",
                    name,
                    why,
                    input,
                    json!({"tid": hx(t.tid().0), "h": hx(t.h()), "key": hx(t.key().as_bytes())}),
                ));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("short_ticket_field", name, why, input, e));
            }
        }
    };
    add(
        "short-ticket-field",
        "78 characters: tid(10) || h(16) || k'(32)",
        field.clone(),
        None,
    );
    add(
        "short-ticket-field-short",
        "one character missing",
        field[..77].to_string(),
        Some(Error::BadBase64),
    );
    add(
        "short-ticket-field-long",
        "one character more",
        format!("{field}A"),
        Some(Error::BadBase64),
    );
    add(
        "short-ticket-field-std-alphabet",
        "base64url, not base64",
        format!("{}+", &field[..77]),
        Some(Error::BadBase64),
    );
    add(
        "short-ticket-field-padded",
        "no = padding",
        format!("{}=", &field[..77]),
        Some(Error::BadBase64),
    );
}

fn server_keys(ticket_kid: Option<KeyId>, ticket_expires: u64) -> ServerKeys {
    let (kex, c) = cert();
    let mut keys = ServerKeys::new();
    keys.add_key(kex, c);
    match ticket_kid {
        Some(kid) => keys.add_ticket_key_for(ticket_key(), kid, ticket_expires),
        None => keys.add_ticket_key(ticket_key(), ticket_expires),
    }
    keys
}

/// The server's side: the cookie scan, then the short ticket's resolution.
fn accept(keys: &ServerKeys, cookie: &str, now: u64) -> Result<(KeyId, SessionKey), Error> {
    match outer::scan_cookies([cookie.as_bytes()], |id| keys.lookup(id, now))? {
        Credential::ShortTicket { tid, h } => keys.open_short_ticket(&tid, &h, now),
        other => panic!("not a short ticket: {other:?}"),
    }
}

fn accept_cases(v: &mut Vec<Case>) {
    let (_, c) = cert();
    let kid = c.kid();
    let tk = ticket_key();
    let h = bytes::<16>("short-accept-h");
    let good = outer::format_cookie(&tk.tid(), &h, "", "AbC").unwrap();
    let tid_b64 = httpcrypt_proto::b64::encode(&tk.tid().0);
    let h_b64 = httpcrypt_proto::b64::encode(&h);
    let expires = u64::from(NOT_AFTER);
    let mut add = |name: &str,
                   why: &str,
                   cookie: String,
                   ticket_kid: Option<KeyId>,
                   now: u64,
                   want: Option<Error>| {
        let keys = server_keys(ticket_kid, expires);
        let got = accept(&keys, &cookie, now);
        let input = json!({
            "identity_seed": hx(bytes::<32>("short-identity")),
            "server_secret": hx(bytes::<32>("short-server-secret")),
            "cert": {"serial": 1, "not_before": 1_699_990_000u32, "not_after": NOT_AFTER},
            "ticket_key": {"tid": hx(tk.tid().0), "key": hx(*tk.to_bytes()), "expires": expires, "kid": ticket_kid.map(|k| hx(k.0))},
            "cookie": cookie,
            "now": now,
        });
        match want {
            None => {
                let (kid, key) = got.unwrap();
                v.push(Case::ok(
                    "short_ticket_accept",
                    name,
                    why,
                    input,
                    json!({"kid": hx(kid.0), "session_key": hx(key.as_bytes())}),
                ));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("short_ticket_accept", name, why, input, e));
            }
        }
    };
    add(
        "short-ticket-accept",
        "the ticket key names its kex key; k' is derived again",
        good.clone(),
        Some(kid),
        NOW,
        None,
    );
    add(
        "short-ticket-accept-last-second",
        "valid through the ticket key's expiry, inclusive",
        good.clone(),
        Some(kid),
        expires,
        None,
    );
    add(
        "short-ticket-accept-expired",
        "one second after the ticket key's expiry: no ID the server knows, and a short ticket's \
         22-38 characters are not the contract's HTTPCrypt shape, so no_cookie (the client drops \
         the ticket and retries with a key)",
        good.clone(),
        Some(kid),
        expires + 1,
        Some(Error::NoCookie),
    );
    add(
        "short-ticket-accept-unknown-tid",
        "a tid the server does not hold: as an expired ticket key, no_cookie",
        outer::format_cookie(&KeyId(bytes("short-other-tid")), &h, "", "").unwrap(),
        Some(kid),
        NOW,
        Some(Error::NoCookie),
    );
    add(
        "short-ticket-accept-kid-gone",
        "the ticket key came with a kex key the server no longer holds",
        good.clone(),
        Some(KeyId(bytes("short-gone-kid"))),
        NOW,
        Some(Error::UnknownKey),
    );
    add(
        "short-ticket-accept-no-kid",
        "a ticket key that came with no kex key takes v1 tickets only",
        good.clone(),
        None,
        NOW,
        Some(Error::UnknownKey),
    );
    add(
        "short-ticket-accept-h-short",
        "h of 15 bytes (20 characters)",
        format!("{tid_b64}={}", &h_b64[..20]),
        Some(kid),
        NOW,
        Some(Error::BadCookie),
    );
    add(
        "short-ticket-accept-h-long",
        "h of 17 bytes (23 characters): read as 22 characters and a pad, the 22 are not canonical base64url",
        format!(
            "{tid_b64}={}",
            httpcrypt_proto::b64::encode(&bytes::<17>("short-accept-h"))
        ),
        Some(kid),
        NOW,
        Some(Error::BadCookie),
    );
    add(
        "short-ticket-accept-between-forms",
        "a 40-character value is neither a short (22–38) nor a v1 ticket (115–131)",
        format!("{tid_b64}={h_b64}{}", "A".repeat(18)),
        Some(kid),
        NOW,
        Some(Error::BadCookie),
    );
    add(
        "short-ticket-accept-bad-base64",
        "a character outside base64url in h",
        format!("{tid_b64}={}+", &h_b64[..21]),
        Some(kid),
        NOW,
        Some(Error::BadCookie),
    );
    add(
        "short-ticket-accept-pad-too-long",
        "17 pad characters after h",
        format!("{tid_b64}={h_b64}{}", "A".repeat(17)),
        Some(kid),
        NOW,
        Some(Error::BadCookie),
    );
}
