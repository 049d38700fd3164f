//! Runner for the `rspamd_*` vector kinds.

use httpcrypt_proto::Error;
use serde_json::Value;

/// Runs one rspamd case.
pub fn run(kind: &str, _input: &Value) -> Result<Value, Error> {
    panic!("unknown vector kind {kind}")
}
