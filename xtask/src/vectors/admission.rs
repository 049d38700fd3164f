//! Vectors for the admission cookie, its echo and the puzzle (spec §14.3).

use std::net::IpAddr;

use httpcrypt_proto::admission;
use httpcrypt_proto::Error;
use serde_json::json;

use super::{bytes, check, hx, Case};

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let secret = bytes::<32>("admit-secret");
    let v4: IpAddr = "192.0.2.7".parse().expect("an address");
    let v6: IpAddr = "2001:db8::7".parse().expect("an address");
    for (name, addr, step, d) in [
        ("admit-cookie-v4", v4, 56_666_668u32, 0u8),
        ("admit-cookie-v6-d12", v6, 56_666_668, 12),
    ] {
        let c = admission::issue_cookie(&secret, step, d, addr);
        v.push(Case::ok(
            "admit_cookie",
            name,
            "cookie = u32 step || u8 difficulty || SHA3-256(\"hc1-admit\" || secret || step || difficulty || 16-byte address)[0..16]; IPv4 addresses as IPv4-mapped IPv6",
            json!({"secret": hx(secret), "addr": addr.to_string(), "step": step, "difficulty": d}),
            json!({"cookie": hx(c.0), "admit": httpcrypt_proto::b64::encode(&c.0)}),
        ));
    }
    let n0 = bytes::<24>("admit-n0");
    let step = 56_666_668u32;
    let c12 = admission::issue_cookie(&secret, step, 12, v4);
    let sol = admission::solve_puzzle(&c12, &n0, 0, 1 << 24).expect("solvable");
    let echo = admission::format_echo(&c12, &sol);
    let c0 = admission::issue_cookie(&secret, step, 0, v4);
    let echo0 = admission::format_echo(&c0, &[0; 8]);
    let mut verify = |name: &str,
                      why: &str,
                      echo: &str,
                      addr: IpAddr,
                      step_now: u32,
                      n0: [u8; 24],
                      want: Option<Error>| {
        let got = admission::verify_echo(&[&secret], step_now, addr, &n0, echo.as_bytes());
        let input = json!({"secret": hx(secret), "addr": addr.to_string(), "step_now": step_now, "n0": hx(n0), "echo": echo});
        match want {
            None => {
                got.unwrap_or_else(|e| panic!("vector {name}: {e}"));
                let (c, s) = admission::parse_echo(echo.as_bytes()).expect("parses");
                v.push(Case::ok(
                    "admit_verify",
                    name,
                    why,
                    input,
                    json!({"difficulty": c.difficulty(), "puzzle_hash": hx(admission::puzzle_hash(&c, &n0, &s))}),
                ));
            }
            Some(e) => {
                check(name, got, &e);
                v.push(Case::err("admit_verify", name, why, input, e));
            }
        }
    };
    verify("admit-verify-d12", "echo = b64u(cookie || solution); SHA3-256(\"hc1-puzzle\" || cookie || n0 || solution) starts with 12 zero bits", &echo, v4, step, n0, None);
    verify(
        "admit-verify-next-step",
        "a cookie is accepted in the step after its own",
        &echo0,
        v4,
        step + 1,
        n0,
        None,
    );
    verify(
        "admit-verify-d0-any-nonce",
        "difficulty 0: no puzzle, any solution bytes",
        &echo0,
        v4,
        step,
        [7; 24],
        None,
    );
    verify(
        "admit-verify-expired",
        "two steps later the cookie has expired",
        &echo0,
        v4,
        step + 2,
        n0,
        Some(Error::BadAdmission),
    );
    verify(
        "admit-verify-future",
        "a step after the server's is refused",
        &echo0,
        v4,
        step - 1,
        n0,
        Some(Error::BadAdmission),
    );
    verify(
        "admit-verify-other-address",
        "the MAC binds the address",
        &echo0,
        "192.0.2.8".parse().expect("an address"),
        step,
        n0,
        Some(Error::BadAdmission),
    );
    verify(
        "admit-verify-same-prefix-v6",
        "an IPv6 neighbour in the same /64 is another address",
        &admission::format_echo(&admission::issue_cookie(&secret, step, 0, v6), &[0; 8]),
        "2001:db8::8".parse().expect("an address"),
        step,
        n0,
        Some(Error::BadAdmission),
    );
    verify(
        "admit-verify-other-nonce",
        "the puzzle binds the request nonce",
        &echo,
        v4,
        step,
        bytes::<24>("admit-other-n0"),
        Some(Error::BadAdmission),
    );
    let mut raised = c12;
    raised.0[4] = 11;
    verify(
        "admit-verify-lowered-difficulty",
        "the MAC covers the difficulty",
        &admission::format_echo(&raised, &sol),
        v4,
        step,
        n0,
        Some(Error::BadAdmission),
    );
    let mut flipped = c12;
    flipped.0[20] ^= 1;
    verify(
        "admit-verify-flipped-mac",
        "a flipped MAC bit",
        &admission::format_echo(&flipped, &sol),
        v4,
        step,
        n0,
        Some(Error::BadAdmission),
    );
    verify(
        "admit-verify-truncated",
        "38 characters",
        &echo[..38],
        v4,
        step,
        n0,
        Some(Error::BadAdmission),
    );
    verify(
        "admit-verify-padding",
        "base64url with padding",
        &format!("{echo}="),
        v4,
        step,
        n0,
        Some(Error::BadAdmission),
    );
    v
}
