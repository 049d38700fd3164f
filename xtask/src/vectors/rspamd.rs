//! Vectors for rspamd.
use super::Case;
/// All cases of this module.
pub fn cases() -> Vec<Case> { Vec::new() }
