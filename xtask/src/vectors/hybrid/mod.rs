//! `vectors/hybrid/`: suite 2 (spec/hybrid.md). The X-Wing draft's own
//! vectors (`xwing-kat-*`), suite-2 certificates and key texts, the
//! eleven-address AAAA form, certificate lists of both suites, and hybrid
//! exchanges from both sides, positive and negative.
//!
//! `xwing.rs` holds the draft's vectors, `certs.rs` the certificates, key
//! texts and lists, `exchange.rs` the server, the builder and the exchanges.

mod certs;
mod exchange;
mod xwing;

use super::Case;

const NOW: u64 = 1_700_000_000;
const NB: u32 = 1_699_999_000;
const NA: u32 = 1_700_007_260;

/// Every case of `vectors/hybrid/`.
pub fn cases() -> Vec<Case> {
    let mut v = xwing::xwing_cases();
    v.extend(certs::cert_cases());
    v.extend(exchange::exchange_cases());
    v
}
