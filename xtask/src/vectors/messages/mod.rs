//! Vectors for the small codecs: base64url, key agreement, inner messages,
//! outer routing, cookies, dates.
//!
//! `codecs.rs` holds base64url and the key agreement, `inner.rs` the inner
//! messages, `outer.rs` routing and cookies, `dates.rs` the `Date` field.

mod codecs;
mod dates;
mod inner;
mod outer;

use super::Case;

/// All cases of this module.
pub fn cases() -> Vec<Case> {
    [
        codecs::b64u_cases(),
        codecs::kex_cases(),
        inner::inner_cases(),
        outer::route_cases(),
        outer::cookie_cases(),
        dates::date_cases(),
    ]
    .concat()
}
