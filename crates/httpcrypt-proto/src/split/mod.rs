//! Split serving (spec/split-serving.md): public bodies travel as CLEAR
//! records whose payloads an untrusted proxy supplies from its cache.
//!
//! On the origin → proxy leg a response is a *split stream*: the response
//! nonce, then frames. A verbatim frame carries a record as the client will
//! see it; a stub frame carries a CLEAR record's `header || tag` and the
//! BLAKE3-256 content ID of its payload instead of the payload (§S4).
//!
//! - [`SplitSealer`] writes a split stream with the fixed record boundaries
//!   of §S2 (origin side);
//! - [`SplitDecoder`] reads one, push bytes in and pull [`SplitEvent`]s out,
//!   for any split of the input (proxy side);
//! - [`Stub::splice`] rebuilds the client's record after checking the
//!   payload's length and content ID;
//! - [`BatchDecoder`] and friends: the content endpoint's batch format (§S5);
//! - [`PublicPaths`]: the origin's public globs (§S1), and [`public`]: the
//!   whole rule for a public answer (normalised paths, nothing personal).
//!
//! Where each part lives: the content ID and the stub in `stub.rs`; the
//! origin's [`SplitSealer`] in `sealer.rs`; the proxy's [`SplitDecoder`] and
//! [`splice_all`] in `decoder.rs`; the content batches in `batch.rs`; the
//! public path globs in `globs.rs`, and the rest of the public rule in
//! [`public`].

mod batch;
mod decoder;
mod globs;
pub mod public;
mod sealer;
mod stub;

pub use batch::{
    decode_batch_request, encode_batch_entry, encode_batch_request, BatchDecoder, BatchEvent,
};
pub use decoder::{splice_all, SplitDecoder, SplitEvent};
pub use globs::PublicPaths;
pub use sealer::{seal_split, SplitSealer};
pub use stub::{ContentId, Stub};

use crate::stream::RECORD_OVERHEAD;

/// Outer request field by which a proxy asks for a split answer (§S3).
pub const SPLIT_FIELD: &str = "httpcrypt-split";
/// Value of [`SPLIT_FIELD`] asking for a split answer with the short outer
/// head (§S3): no `Cache-Control`, no [`CONTENT_FIELD`]; the proxy derives
/// the content endpoint from the request path ([`content_prefix`]). Any
/// other value asks for the full head.
pub const SPLIT_SHORT: &str = "2";
/// Outer response field naming the content endpoint's path prefix (§S3).
pub const CONTENT_FIELD: &str = "httpcrypt-content";
/// `Content-Type` of a split answer.
pub const SPLIT_TYPE: &str = "application/httpcrypt-split";
/// `Content-Type` of a content batch answer (§S5).
pub const BATCH_TYPE: &str = "application/httpcrypt-content";
/// Inner response field by which an application marks a response public
/// (`1`) or private (`0`); the origin strips it (§S1).
pub const PUBLIC_FIELD: &str = "hc-public";
/// The content endpoint's path under the mount (§S5).
pub const CONTENT_DIR: &str = "/.content/";
/// The content endpoint's path prefix (`{mount}/.content/`) for a request
/// whose path is `{mount}/{n0}` (`httpcrypt.md` §4.1), as a proxy derives it
/// when the origin's answer has the short head (§S3); `None` for a path
/// without a `/`.
pub fn content_prefix(request_path: &str) -> Option<String> {
    let cut = request_path.rfind('/')?;
    Some(format!("{}{CONTENT_DIR}", &request_path[..cut]))
}

/// Length of a content ID.
pub const ID_LEN: usize = 32;
/// Bytes of a stub frame: type, header, tag, content ID.
pub const STUB_LEN: usize = 1 + RECORD_OVERHEAD + ID_LEN;
/// Most content IDs in one batch request.
pub const MAX_BATCH: usize = 256;
/// Default payload size of public records (§S2).
pub const DEFAULT_PUBLIC_RECORD: usize = 16 * 1024;
/// A batch entry's length word for an ID the origin does not hold.
pub const MISSING: u32 = u32::MAX;

/// Frame types of a split stream (§S4): a record to send on as it is, or a
/// stub that stands for a CLEAR record.
const VERBATIM: u8 = 0;
const STUB: u8 = 1;

#[cfg(test)]
mod tests;
