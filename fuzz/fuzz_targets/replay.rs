//! Replay defence (spec §8): a `replay::StrikeRegister` driven by a
//! fuzzer-chosen sequence of checks, against a model of what it must
//! remember; and `replay::check_date` on fuzz bytes.
//!
//! Input: `mode u8 | …`.
//! - mode bit 0 clear, the register: `window u16 | capacity u8 | seed [16] |
//!   now u64 | ops`, each op `sel u8 | date u8 | advance u8`: `sel` picks
//!   the key ID (bits 0–1), the nonce (bits 2–6) and whether to call
//!   `expire` first (bit 7); `date` places the request's `Date` in the
//!   freshness window around `now` (the register's precondition); `now`
//!   then moves forward by `advance` × (window / 16 + 1) seconds.
//! - mode bit 0 set, `check_date`: `now u64 | window u16 | value`.
//!
//! Asserts: `check` answers `Ok`, `replay` or `overloaded` only; `len()` never
//! exceeds the capacity; an accepted pair is `replay` when checked again at
//! once, and at any later time up to its `date + window`; `replay` is only
//! answered for a pair accepted before; `overloaded` only when full; `len()`
//! lies between the count of pairs that must still be held and those that
//! may be (bucket rounding). `check_date` fails only with `stale` or
//! `bad_date`, returns a date within the window, and `format_date` of it
//! parses back to it.

#![no_main]

use std::collections::HashMap;

use httpcrypt_fuzz::{assert_errors, Input};
use httpcrypt_proto::keys::KeyId;
use httpcrypt_proto::replay::{self, StrikeRegister};
use httpcrypt_proto::Error;
use libfuzzer_sys::fuzz_target;

fn register(input: &mut Input<'_>) {
    let window = u64::from(input.u16());
    let capacity = usize::from(input.u8() % 33);
    let seed = input.array::<16>();
    let mut now = input.u64();
    let granularity = (window / 8).max(1);
    let mut reg = StrikeRegister::new(window, capacity, seed);
    // (kid, nonce) → Date of its accepted check.
    let mut model: HashMap<(u8, u8), u64> = HashMap::new();

    while !input.is_empty() {
        let sel = input.u8();
        let date_off = input.u8();
        let advance = input.u8();
        let (k, n) = (sel & 3, sel >> 2 & 31);
        let kid = KeyId([k; 10]);
        let n0 = [n; 24];
        let low = now.saturating_sub(window);
        let high = now.saturating_add(window);
        let span = high - low;
        let date = low + (u128::from(date_off) * u128::from(span) / 255) as u64;
        assert!(date.abs_diff(now) <= window);

        if sel & 0x80 != 0 {
            reg.expire(now);
        }
        let before = reg.len();
        let r = reg.check(&kid, &n0, date, now);
        assert_errors(&r, &[Error::Replay, Error::Overloaded]);
        let live = model
            .get(&(k, n))
            .is_some_and(|d| d.saturating_add(window) >= now);
        match r {
            Ok(()) => {
                assert!(!live, "pair accepted twice within its window");
                assert_eq!(
                    reg.check(&kid, &n0, date, now),
                    Err(Error::Replay),
                    "immediate re-check of an accepted pair"
                );
                model.insert((k, n), date);
            }
            Err(Error::Replay) => assert!(model.contains_key(&(k, n)), "replay of an unseen pair"),
            Err(_) => {
                assert!(!live, "overloaded instead of replay");
                assert_eq!(
                    reg.len(),
                    capacity,
                    "overloaded below capacity (len was {before})"
                );
            }
        }
        assert!(
            reg.len() <= capacity,
            "len {} > capacity {capacity}",
            reg.len()
        );
        let must = model
            .values()
            .filter(|d| d.saturating_add(window) >= now)
            .count();
        let may = model
            .values()
            .filter(|d| d.saturating_add(window).saturating_add(granularity) >= now)
            .count();
        assert!(
            (must..=may).contains(&reg.len()),
            "len {} outside {must}..={may} at now {now}",
            reg.len()
        );
        now = now.saturating_add(u64::from(advance) * (window / 16 + 1));
    }
}

fn date(input: &mut Input<'_>) {
    let now = input.u64();
    let window = u64::from(input.u16());
    let value = input.rest();
    let r = replay::check_date(Some(value), now, window);
    assert_errors(&r, &[Error::Stale, Error::BadDate]);
    if let Ok(d) = r {
        assert!(d.abs_diff(now) <= window);
        let text = replay::format_date(d);
        assert_eq!(replay::check_date(Some(text.as_bytes()), d, 0), Ok(d));
    }
    assert_eq!(replay::check_date(None, now, window), Err(Error::Stale));
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    if input.u8() & 1 == 0 {
        register(&mut input);
    } else {
        date(&mut input);
    }
});
