//! The stateless admission cookie (spec §14.3): bound to the client's
//! address by a MAC under the server's secret, with its coarse time step and
//! the puzzle difficulty it demands; and its echo, the cookie with a
//! solution, as the client returns it in the `hc1-admit` cookie pair.

use std::net::IpAddr;

use subtle::ConstantTimeEq;

use crate::b64;
use crate::error::{Error, Result};
use crate::suite::{sha3_256, NONCE_LEN};

use super::puzzle::puzzle_solved;
use super::{ADMIT_COOKIE, COOKIE_LEN, ECHO_LEN, SOLUTION_LEN};

const MAC_LABEL: &[u8] = b"hc1-admit";

/// An admission cookie as issued: coarse time, difficulty, MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitCookie(pub [u8; COOKIE_LEN]);

impl AdmitCookie {
    /// The coarse time step it was issued in.
    pub fn step(&self) -> u32 {
        u32::from_be_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// The puzzle difficulty (leading zero bits) it demands.
    pub fn difficulty(&self) -> u8 {
        self.0[4]
    }

    /// Its base64url text (28 characters), appended to `out`.
    pub fn encode_to(&self, out: &mut String) {
        b64::encode_to(&self.0, out);
    }

    /// Parses the 28-character text form.
    pub fn parse(text: &[u8]) -> Result<Self> {
        b64::decode_array::<COOKIE_LEN>(text)
            .map(AdmitCookie)
            .map_err(|_| Error::BadAdmission)
    }
}

/// The address bytes a cookie is bound to: IPv4 as IPv4-mapped IPv6.
fn addr16(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// `SHA3-256("hc1-admit" || secret || t || d || addr16)[0..16]` (spec §14.3).
pub fn cookie_mac(secret: &[u8; 32], step: u32, difficulty: u8, addr: IpAddr) -> [u8; 16] {
    let h = sha3_256(&[
        MAC_LABEL,
        secret,
        &step.to_be_bytes(),
        &[difficulty],
        &addr16(addr),
    ]);
    let mut mac = [0u8; 16];
    mac.copy_from_slice(&h[..16]);
    mac
}

/// Issues the cookie for `addr` in time step `step`.
pub fn issue_cookie(secret: &[u8; 32], step: u32, difficulty: u8, addr: IpAddr) -> AdmitCookie {
    let mut c = [0u8; COOKIE_LEN];
    c[..4].copy_from_slice(&step.to_be_bytes());
    c[4] = difficulty;
    c[5..].copy_from_slice(&cookie_mac(secret, step, difficulty, addr));
    AdmitCookie(c)
}

/// The echo text `b64u(cookie || solution)` (39 characters) the client
/// sends as the value of the `hc1-admit` cookie pair.
pub fn format_echo(cookie: &AdmitCookie, solution: &[u8; SOLUTION_LEN]) -> String {
    let mut raw = [0u8; ECHO_LEN];
    raw[..COOKIE_LEN].copy_from_slice(&cookie.0);
    raw[COOKIE_LEN..].copy_from_slice(solution);
    b64::encode(&raw)
}

/// Parses an echo text into its cookie and solution.
pub fn parse_echo(text: &[u8]) -> Result<(AdmitCookie, [u8; SOLUTION_LEN])> {
    let raw = b64::decode_array::<ECHO_LEN>(text).map_err(|_| Error::BadAdmission)?;
    let mut c = [0u8; COOKIE_LEN];
    c.copy_from_slice(&raw[..COOKIE_LEN]);
    let mut s = [0u8; SOLUTION_LEN];
    s.copy_from_slice(&raw[COOKIE_LEN..]);
    Ok((AdmitCookie(c), s))
}

/// The value of the first `hc1-admit` pair in the `Cookie` fields, if any
/// (spec §14.3; pairs are split and trimmed as in §11.3).
pub fn find_echo<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> Option<&'a [u8]> {
    fields.into_iter().find_map(|field| {
        field.split(|b| *b == b';').find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|b| *b == b'=')?;
            (pair[..eq].trim_ascii() == ADMIT_COOKIE.as_bytes())
                .then(|| pair[eq + 1..].trim_ascii())
        })
    })
}

/// Checks an echo against the secrets in use: the MAC for `addr`, the time
/// step (the current one or the one before), then the puzzle for `n0`.
pub fn verify_echo(
    secrets: &[&[u8; 32]],
    step_now: u32,
    addr: IpAddr,
    n0: &[u8; NONCE_LEN],
    echo: &[u8],
) -> Result<()> {
    let (cookie, solution) = parse_echo(echo)?;
    let step = cookie.step();
    if step > step_now || step_now - step > 1 {
        return Err(Error::BadAdmission);
    }
    let mac_ok = secrets
        .iter()
        .any(|s| bool::from(cookie_mac(s, step, cookie.difficulty(), addr).ct_eq(&cookie.0[5..])));
    if !mac_ok || !puzzle_solved(&cookie, n0, &solution) {
        return Err(Error::BadAdmission);
    }
    Ok(())
}
