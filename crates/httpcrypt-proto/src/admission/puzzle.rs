//! The hash puzzle an admission cookie may demand (spec §14.3): its hash,
//! whether a solution solves it, and the client's bounded search.

use crate::suite::{sha3_256, NONCE_LEN};

use super::{AdmitCookie, MAX_DIFFICULTY, SOLUTION_LEN};

const PUZZLE_LABEL: &[u8] = b"hc1-puzzle";

/// Leading zero bits of `h`.
fn leading_zero_bits(h: &[u8; 32]) -> u32 {
    let mut n = 0;
    for b in h {
        if *b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// The puzzle hash `SHA3-256("hc1-puzzle" || cookie || n0 || solution)`.
pub fn puzzle_hash(
    cookie: &AdmitCookie,
    n0: &[u8; NONCE_LEN],
    solution: &[u8; SOLUTION_LEN],
) -> [u8; 32] {
    sha3_256(&[PUZZLE_LABEL, &cookie.0, n0, solution])
}

/// Whether `solution` solves the cookie's puzzle for the request nonce `n0`.
pub fn puzzle_solved(
    cookie: &AdmitCookie,
    n0: &[u8; NONCE_LEN],
    solution: &[u8; SOLUTION_LEN],
) -> bool {
    let d = u32::from(cookie.difficulty());
    d == 0 || leading_zero_bits(&puzzle_hash(cookie, n0, solution)) >= d
}

/// Solves the cookie's puzzle for `n0`, trying at most `max_tries`
/// solutions counted up from `start`; `None` when the difficulty is above
/// [`MAX_DIFFICULTY`] or no solution was found within the bound.
pub fn solve_puzzle(
    cookie: &AdmitCookie,
    n0: &[u8; NONCE_LEN],
    start: u64,
    max_tries: u64,
) -> Option<[u8; SOLUTION_LEN]> {
    if cookie.difficulty() > MAX_DIFFICULTY {
        return None;
    }
    (0..max_tries)
        .map(|i| start.wrapping_add(i).to_be_bytes())
        .find(|s| puzzle_solved(cookie, n0, s))
}
