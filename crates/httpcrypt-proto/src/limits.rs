//! Receiver limits (spec §3, §4.3, §11), all configurable.

/// Hard ceiling on a record's payload length: no receiver accepts more (spec §3).
pub const RECORD_CEILING: usize = 1 << 24;
/// Every receiver accepts records at least this long (spec §3).
pub const RECORD_FLOOR: usize = 16 * 1024;

/// Size limits applied to hostile input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest record payload accepted (clamped to `RECORD_FLOOR..=RECORD_CEILING`).
    pub max_record: usize,
    /// Largest inner head, request or status line through the blank line.
    pub max_inner_head: usize,
    /// Most inner header fields.
    pub max_inner_fields: usize,
    /// Largest outer body (or decoded GET query).
    pub max_body: usize,
    /// Longest outer request line.
    pub max_request_line: usize,
    /// Largest outer header section.
    pub max_header_section: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_record: 1 << 20,
            max_inner_head: 64 * 1024,
            max_inner_fields: 100,
            max_body: 16 << 20,
            max_request_line: 16 * 1024,
            max_header_section: 64 * 1024,
        }
    }
}

impl Limits {
    /// The record limit actually enforced: never below the floor every
    /// receiver must accept, never above the ceiling.
    pub fn record_limit(&self) -> usize {
        self.max_record.clamp(RECORD_FLOOR, RECORD_CEILING)
    }
}
