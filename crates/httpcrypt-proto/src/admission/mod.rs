//! Load-aware admission before the key agreement (spec §14): a demand meter,
//! per-source-prefix budgets, the stateless address-bound admission cookie
//! and the hash puzzle, and the decision that ties them together.
//!
//! Everything here is sans-IO: the caller passes the time (milliseconds),
//! the peer address and fresh secrets. Nothing on the judging path
//! allocates: the budget table is allocated once, in [`Admission::new`].
//!
//! Where each part lives: the cookie and its echo in `cookie.rs`, the hash
//! puzzle in `puzzle.rs`, the per-prefix budgets in `budget.rs`, the
//! defence's state, demand meter and decision ([`Admission`]) in
//! `defence.rs`, and the refusal documents in `refusal.rs`.

mod budget;
mod cookie;
mod defence;
mod puzzle;
mod refusal;

pub use budget::prefix_of;
pub use cookie::{
    cookie_mac, find_echo, format_echo, issue_cookie, parse_echo, verify_echo, AdmitCookie,
};
pub use defence::{Admission, AdmissionConfig, AdmissionCounts, Verdict};
pub use puzzle::{puzzle_hash, puzzle_solved, solve_puzzle};
pub use refusal::{format_refusal, parse_refusal, retry_after_secs, Refusal};

use crate::b64;

/// Name of the outer cookie pair that echoes an admission cookie (spec §14.3).
pub const ADMIT_COOKIE: &str = "hc1-admit";
/// Bytes of an admission cookie: `t(4) || d(1) || mac(16)`.
pub const COOKIE_LEN: usize = 21;
/// Bytes of a puzzle solution.
pub const SOLUTION_LEN: usize = 8;
/// Bytes of an echo: `cookie || solution`.
pub const ECHO_LEN: usize = COOKIE_LEN + SOLUTION_LEN;
/// Characters of a cookie's base64url form.
pub const COOKIE_B64_LEN: usize = b64::encoded_len(COOKIE_LEN);
/// Characters of an echo's base64url form.
pub const ECHO_B64_LEN: usize = b64::encoded_len(ECHO_LEN);
/// The highest puzzle difficulty (leading zero bits) a client accepts to solve.
pub const MAX_DIFFICULTY: u8 = 24;

#[cfg(test)]
mod tests;
