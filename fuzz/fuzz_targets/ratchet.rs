//! The fleet ratchet's state file (spec §6.7), read from disk at every
//! epoch boundary: `Ratchet::from_text` on fuzz text.
//!
//! Asserts: errors are `bad_keypair` or `bad_base64`; a parsed state
//! formats back to text that parses to the same state; advancing it (by at
//! most a few epochs, so a run stays short) yields at most the live epochs,
//! in order, ending at the target, and never goes backwards.

#![no_main]

use httpcrypt_fuzz::{assert_errors, identity};
use httpcrypt_proto::ratchet::{Ratchet, LIVE_EPOCHS};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let r = Ratchet::from_text(text);
    assert_errors(&r, &[Error::BadKeypair, Error::BadBase64]);
    let Ok(mut r) = r else { return };
    let again = Ratchet::from_text(&r.to_text()).expect("a formatted state parses");
    assert_eq!(again.to_text().as_str(), r.to_text().as_str());
    assert_eq!(again.reseed_at(), r.reseed_at());
    // A few epochs ahead at most (each step is a hash and a signature).
    let start = r.epoch();
    let Some(now) = r
        .epoch()
        .checked_add(4)
        .and_then(|e| e.checked_mul(r.period()))
        .and_then(|s| s.checked_add(r.epoch_start(0)))
    else {
        return;
    };
    if r.epoch_start(0)
        .checked_add(start.saturating_mul(r.period()))
        .is_none()
    {
        return;
    }
    let keys = r.advance(now, &identity());
    assert!(!keys.is_empty() && keys.len() as u64 <= LIVE_EPOCHS);
    assert!(keys.windows(2).all(|w| w[0].epoch + 1 == w[1].epoch));
    assert_eq!(keys.last().map(|k| k.epoch), Some(r.epoch()));
    assert!(r.epoch() >= start);
});
