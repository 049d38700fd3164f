//! The outer 429 problem documents of a refusal (spec §14.4): written by the
//! server for a challenge or a spent budget, read by the client.

use crate::error::{Error, Result};

use super::{AdmitCookie, Verdict};

/// Writes the outer problem document for a refusal into `out` (cleared
/// first; with enough capacity this allocates nothing): `admission` with the
/// cookie and its difficulty, or `busy` with `retry_after` seconds (spec §14.4).
pub fn format_refusal(verdict: &Verdict, out: &mut String) {
    use std::fmt::Write as _;
    out.clear();
    match verdict {
        Verdict::Admit => {}
        Verdict::Challenge(c) => {
            out.push_str("{\"type\":\"");
            out.push_str(crate::error::problem_type::ADMISSION);
            out.push_str("\",\"title\":\"admission cookie required\",\"status\":429,\"admit\":\"");
            c.encode_to(out);
            let _ = write!(out, "\",\"difficulty\":{}}}", c.difficulty());
        }
        Verdict::Busy { retry_after_ms } => {
            out.push_str("{\"type\":\"");
            out.push_str(crate::error::problem_type::BUSY);
            let _ = write!(
                out,
                "\",\"title\":\"key agreement budget spent\",\"status\":429,\"retry_after\":{}}}",
                retry_after_secs(*retry_after_ms)
            );
        }
    }
}

/// Whole seconds for `Retry-After` (at least 1).
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// What a client reads from an outer 429 problem document (spec §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Echo this cookie (with a solved puzzle) in the next request.
    Admission(AdmitCookie),
    /// Wait this many seconds.
    Busy(u64),
}

/// Parses an `admission` or `busy` problem document.
pub fn parse_refusal(body: &[u8]) -> Result<Refusal> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| Error::BadAdmission)?;
    match v.get("type").and_then(|t| t.as_str()) {
        Some(crate::error::problem_type::ADMISSION) => {
            let text = v
                .get("admit")
                .and_then(|a| a.as_str())
                .ok_or(Error::BadAdmission)?;
            AdmitCookie::parse(text.as_bytes()).map(Refusal::Admission)
        }
        Some(crate::error::problem_type::BUSY) => Ok(Refusal::Busy(
            v.get("retry_after").and_then(|r| r.as_u64()).unwrap_or(1),
        )),
        _ => Err(Error::BadAdmission),
    }
}
