//! Public random values (message nonces, ticket nonces) from a per-thread
//! CSPRNG.
//!
//! A response needs 24 fresh bytes for its `n0` and, with tickets, 24 more
//! for the ticket's nonce. Asking the kernel each time costs a `getrandom`
//! system call per value on every request. These values are sent in the
//! clear and need only be unpredictable and never repeat, so each thread
//! keeps a ChaCha20 generator seeded from the operating system and reseeds
//! it after [`RESEED_AFTER`] draws. Long-lived secrets (key pairs, cookie
//! secrets) still come from the operating system directly.

use std::cell::RefCell;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

/// Draws served by one seed.
pub const RESEED_AFTER: u32 = 4096;

thread_local! {
    static RNG: RefCell<Option<(ChaCha20Rng, u32)>> = const { RefCell::new(None) };
}

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) {
    RNG.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_some_and(|(_, used)| *used >= RESEED_AFTER) {
            *slot = None;
        }
        let (rng, used) = slot.get_or_insert_with(|| (ChaCha20Rng::from_entropy(), 0));
        rng.fill_bytes(buf);
        *used += 1;
    });
}

/// A 24-byte nonce.
pub fn nonce24() -> [u8; 24] {
    let mut n = [0u8; 24];
    fill(&mut n);
    n
}

/// [`fill`] as an [`RngCore`], for APIs that take a generator (pads).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRng;

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        fill(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        fill(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        fill(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        fill(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for ThreadRng {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_differ_and_survive_a_reseed() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..(RESEED_AFTER + 100) {
            assert!(seen.insert(nonce24()), "a nonce repeated");
        }
        // Another thread has its own generator and does not repeat ours.
        let other: Vec<[u8; 24]> = std::thread::spawn(|| (0..100).map(|_| nonce24()).collect())
            .join()
            .unwrap();
        assert!(other.iter().all(|n| !seen.contains(n)));
    }
}
