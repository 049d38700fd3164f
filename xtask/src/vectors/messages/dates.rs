//! The inner `Date` field and its freshness window (spec §8.1).

use httpcrypt_proto::{replay, Error};
use serde_json::json;

use crate::vectors::{check, Case};

pub(super) fn date_cases() -> Vec<Case> {
    let now = 1_700_000_000u64;
    let mut v = Vec::new();
    let mut add =
        |name: &str, why: &str, date: Option<String>, now: u64, want: Result<u64, Error>| {
            let got = replay::check_date(date.as_deref().map(str::as_bytes), now, 60);
            let input = json!({"date": date, "now": now, "window": 60});
            match want {
                Ok(d) => {
                    assert_eq!(got, Ok(d), "{name}");
                    v.push(Case::ok("date_check", name, why, input, json!({"date": d})));
                }
                Err(e) => {
                    check(name, got, &e);
                    v.push(Case::err("date_check", name, why, input, e));
                }
            }
        };
    let d = replay::format_date(now);
    add("date-fresh", "exactly now", Some(d.clone()), now, Ok(now));
    add(
        "date-edge-late",
        "|Date - now| = W is accepted",
        Some(d.clone()),
        now + 60,
        Ok(now),
    );
    add(
        "date-edge-early",
        "|Date - now| = W is accepted",
        Some(d.clone()),
        now - 60,
        Ok(now),
    );
    add(
        "date-stale",
        "W + 1 seconds old",
        Some(d.clone()),
        now + 61,
        Err(Error::Stale),
    );
    add(
        "date-future",
        "W + 1 seconds ahead",
        Some(d),
        now - 61,
        Err(Error::Stale),
    );
    add(
        "date-missing",
        "a missing Date is stale",
        None,
        now,
        Err(Error::Stale),
    );
    add(
        "date-garbage",
        "an unparseable Date",
        Some("yesterday".into()),
        now,
        Err(Error::BadDate),
    );
    v
}
