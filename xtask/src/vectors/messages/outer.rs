//! Outer routing under the mount (spec §4.1) and the outer `Cookie` scan
//! (§4.4).

use httpcrypt_proto::keys::KeyId;
use httpcrypt_proto::outer::{self, IdKind, Mount, Route};
use httpcrypt_proto::{b64, Error};
use serde_json::json;

use crate::vectors::{bytes, check, hx, Case};

pub(super) fn route_cases() -> Vec<Case> {
    let n0 = bytes::<24>("route-n0");
    let p = format!("/hc/{}", b64::encode(&n0));
    let mut v = Vec::new();
    let mut add = |name: &str, why: &str, method: &str, target: String, mount: &str, want: &str| {
        let m = Mount::new(mount).unwrap();
        let input = json!({"method": method, "target": target, "mount": mount});
        match outer::route(method, &target, &m) {
            Ok(r) => {
                let out = match r {
                    Route::Outside => json!({"route": "outside"}),
                    Route::Options => json!({"route": "options"}),
                    Route::MethodNotAllowed => json!({"route": "method_not_allowed"}),
                    Route::NotFound => json!({"route": "not_found"}),
                    Route::Post { n0, profile } => {
                        json!({"route": "post", "n0": hx(n0), "profile": profile.number()})
                    }
                    Route::Get { n0, query, profile } => {
                        json!({"route": "get", "n0": hx(n0), "query": query, "profile": profile.number()})
                    }
                };
                assert_eq!(out["route"], want, "{name}");
                v.push(Case::ok("route", name, why, input, out));
            }
            Err(e) => {
                assert_eq!(e.code(), want, "{name}");
                v.push(Case::err("route", name, why, input, e));
            }
        }
    };
    add(
        "route-post",
        "POST under the mount; a query is ignored",
        "POST",
        format!("{p}?ignored=1"),
        "/hc",
        "post",
    );
    add(
        "route-get",
        "GET form: the whole query is the stream",
        "GET",
        format!("{p}?AAAA"),
        "/hc",
        "get",
    );
    let p2 = format!("/hc/2{}", b64::encode(&n0));
    add(
        "compact-route-post",
        "profile 2: `2` before the 32 nonce characters",
        "POST",
        p2.clone(),
        "/hc",
        "post",
    );
    add(
        "compact-route-get",
        "profile 2, GET form",
        "GET",
        format!("{p2}?AAAA"),
        "/hc",
        "get",
    );
    add(
        "compact-route-root",
        "profile 2 under the root mount",
        "POST",
        format!("/2{}", b64::encode(&n0)),
        "",
        "post",
    );
    add(
        "compact-route-other-mark",
        "a 33-character segment must start with `2`",
        "POST",
        format!("/hc/3{}", b64::encode(&n0)),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "compact-route-long",
        "`2` and 33 characters is too long",
        "POST",
        format!("{p2}A"),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-options",
        "OPTIONS at {mount}/",
        "OPTIONS",
        "/hc/".into(),
        "/hc",
        "options",
    );
    add(
        "route-outside",
        "outside the mount",
        "GET",
        "/index.html".into(),
        "/hc",
        "outside",
    );
    add(
        "route-put",
        "other methods under the mount",
        "PUT",
        p.clone(),
        "/hc",
        "method_not_allowed",
    );
    add(
        "route-root-mount",
        "the default mount is empty",
        "POST",
        format!("/{}", b64::encode(&n0)),
        "",
        "post",
    );
    add(
        "route-short-nonce",
        "31 characters",
        "POST",
        p[..p.len() - 1].to_string(),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-percent",
        "no percent-decoding",
        "POST",
        format!("{}%41", &p[..p.len() - 1]),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-extra-segment",
        "nothing after the nonce",
        "POST",
        format!("{p}/x"),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-nonce-std-alphabet",
        "the nonce is base64url, not base64",
        "POST",
        format!("{}+", &p[..p.len() - 1]),
        "/hc",
        "bad_nonce_path",
    );
    add(
        "route-get-no-query",
        "a GET without ?",
        "GET",
        p.clone(),
        "/hc",
        "bad_query",
    );
    v
}

pub(super) fn cookie_cases() -> Vec<Case> {
    let kid = KeyId(bytes("cookie-kid"));
    let tid = KeyId(bytes("cookie-tid"));
    let foreign = KeyId(bytes("cookie-foreign"));
    let pubkey = bytes::<32>("cookie-pub");
    let sealed = bytes::<86>("cookie-ticket");
    let ids = json!([{"id": hx(kid.0), "kind": "key"}, {"id": hx(tid.0), "kind": "ticket"}]);
    let lookup = |id: &KeyId| {
        if *id == kid {
            Some(IdKind::Key)
        } else if *id == tid {
            Some(IdKind::Ticket)
        } else {
            None
        }
    };
    let key_cookie = outer::format_cookie(&kid, &pubkey, "Zq9", "x_-0AbCdEfGhIjKl").unwrap();
    let ticket_cookie = outer::format_cookie(&tid, &sealed, "", "").unwrap();
    let foreign_cookie = outer::format_cookie(&foreign, &pubkey, "", "").unwrap();
    let mut v = Vec::new();
    let mut add = |name: &str, why: &str, fields: Vec<String>, want: Option<Error>| {
        let got = outer::scan_cookies(fields.iter().map(|f| f.as_bytes()), lookup);
        let input = json!({"fields": fields, "ids": ids});
        match want {
            None => {
                let out = match got.unwrap_or_else(|e| panic!("{name}: {e:?}")) {
                    outer::Credential::Key { kid, client_public } => {
                        json!({"kind": "key", "id": hx(kid.0), "value": hx(client_public.0)})
                    }
                    outer::Credential::Ticket { tid, sealed } => {
                        json!({"kind": "ticket", "id": hx(tid.0), "value": hx(sealed)})
                    }
                    // Short tickets (spec §7.3) are pinned in vectors/short-ticket/.
                    other => panic!("{name}: {other:?} in a v1 vector"),
                };
                v.push(Case::ok("cookie_scan", name, why, input, out));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("cookie_scan", name, why, input, e));
            }
        }
    };
    add(
        "cookie-key-padded",
        "name and value padding are ignored",
        vec![key_cookie.clone()],
        None,
    );
    add(
        "cookie-ticket",
        "a ticket cookie",
        vec![ticket_cookie.clone()],
        None,
    );
    add(
        "cookie-among-foreign",
        "other cookies, added by middleboxes, come first",
        vec![format!(
            "session=abc; {foreign_cookie};  {key_cookie} ; theme=dark"
        )],
        None,
    );
    add(
        "cookie-second-field",
        "every Cookie field is scanned",
        vec!["a=b".into(), key_cookie.clone()],
        None,
    );
    add(
        "cookie-none",
        "no pair with the HTTPCrypt shape",
        vec!["session=abc; theme=dark".into()],
        Some(Error::NoCookie),
    );
    add(
        "cookie-empty",
        "no Cookie field at all",
        vec![],
        Some(Error::NoCookie),
    );
    add(
        "cookie-unknown-id",
        "HTTPCrypt shape, but the ID is unknown (e.g. an expired key)",
        vec![foreign_cookie.clone()],
        Some(Error::UnknownKey),
    );
    add(
        "cookie-value-truncated",
        "known ID, value too short",
        vec![format!("{}={}", kid.to_b64(), &b64::encode(&pubkey)[..42])],
        Some(Error::BadCookie),
    );
    add(
        "cookie-value-bad-char",
        "known ID, a character outside base64url",
        vec![format!("{}={}!", kid.to_b64(), &b64::encode(&pubkey)[..42])],
        Some(Error::BadCookie),
    );
    add(
        "cookie-pad-too-long",
        "known ID, 17 padding characters",
        vec![format!(
            "{}={}{}",
            kid.to_b64(),
            b64::encode(&pubkey),
            "A".repeat(17)
        )],
        Some(Error::BadCookie),
    );
    add(
        "cookie-name-pad-bad",
        "known ID, padding with a foreign character",
        vec![format!("{}.x={}", kid.to_b64(), b64::encode(&pubkey))],
        Some(Error::BadCookie),
    );
    add(
        "cookie-ticket-as-key",
        "a ticket ID with a public-key-sized value",
        vec![format!("{}={}", tid.to_b64(), b64::encode(&pubkey))],
        Some(Error::BadCookie),
    );
    add(
        "cookie-value-bad-bits",
        "known ID, non-canonical base64url in the value",
        vec![format!(
            "{}={}B",
            kid.to_b64(),
            &b64::encode(&[0u8; 32])[..42]
        )],
        Some(Error::BadCookie),
    );
    v
}
