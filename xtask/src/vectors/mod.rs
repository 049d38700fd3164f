//! The deterministic generator of `vectors/`: every case is built from
//! explicit inputs (keys, nonces, padding), run through `httpcrypt-proto`,
//! and checked against the outcome the spec requires before it is written.
//! A case whose implementation outcome differs from the stated expectation
//! makes the generator fail instead of pinning a wrong answer.

use std::collections::BTreeSet;
use std::path::Path;

use httpcrypt_proto::Error;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};

mod admission;
pub(crate) mod certs;
mod compact;
mod dns;
pub(crate) mod exchange;
pub mod hybrid;
mod messages;
pub mod provenance;
mod resumption;
mod rspamd;
mod service;
pub mod short_ticket;
mod split;
mod streams;

/// One vector file.
#[derive(Debug, Clone)]
pub struct Case {
    /// File stem, unique.
    pub name: String,
    /// Kind: selects the runner.
    pub kind: &'static str,
    /// What the case shows.
    pub description: String,
    /// Inputs, bytes as hex.
    pub input: Value,
    /// `Ok(output)` or the expected error.
    pub expect: Result<Value, Error>,
}

impl Case {
    /// A positive case.
    pub fn ok(
        kind: &'static str,
        name: &str,
        description: &str,
        input: Value,
        output: Value,
    ) -> Self {
        Case {
            name: name.to_string(),
            kind,
            description: description.to_string(),
            input,
            expect: Ok(output),
        }
    }

    /// A negative case.
    pub fn err(
        kind: &'static str,
        name: &str,
        description: &str,
        input: Value,
        error: Error,
    ) -> Self {
        Case {
            name: name.to_string(),
            kind,
            description: description.to_string(),
            input,
            expect: Err(error),
        }
    }

    /// The JSON document written to `vectors/{name}.json`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "kind": self.kind,
            "name": self.name,
            "description": self.description,
            "input": self.input,
        });
        match &self.expect {
            Ok(out) => {
                v["expect"] = json!("ok");
                v["output"] = out.clone();
            }
            Err(e) => v["expect"] = json!(e.code()),
        }
        v
    }

    /// The file's text (pretty JSON, sorted keys, trailing newline).
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.to_json()).expect("JSON values serialize");
        s.push('\n');
        s
    }
}

/// Asserts that an implementation outcome is the one a case states.
pub fn check<T: std::fmt::Debug>(name: &str, got: Result<T, Error>, want: &Error) {
    match got {
        Err(e) if e == *want => {}
        other => panic!(
            "vector {name}: expected error {}, implementation gave {other:?}",
            want.code()
        ),
    }
}

/// Deterministic bytes for a labelled input.
pub fn bytes<const N: usize>(label: &str) -> [u8; N] {
    let mut seed = [0u8; 32];
    let h = label.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    seed[..8].copy_from_slice(&h.to_le_bytes());
    seed[8..16].copy_from_slice(&(label.len() as u64).to_le_bytes());
    let mut rng = ChaCha20Rng::from_seed(seed);
    let mut out = [0u8; N];
    rng.fill_bytes(&mut out);
    out
}

/// Lower-case hex.
pub fn hx(b: impl AsRef<[u8]>) -> String {
    hex::encode(b)
}

/// Every case, in a stable order; panics on duplicate names.
pub fn generate() -> Vec<Case> {
    let mut all = Vec::new();
    all.extend(messages::cases());
    all.extend(streams::cases());
    all.extend(exchange::cases());
    all.extend(certs::cases());
    all.extend(dns::cases());
    all.extend(resumption::cases());
    all.extend(rspamd::cases());
    all.extend(split::cases());
    all.extend(admission::cases());
    all.extend(compact::cases());
    all.extend(service::cases());
    let mut names = BTreeSet::new();
    for c in &all {
        assert!(
            names.insert(c.name.clone()),
            "duplicate vector name {}",
            c.name
        );
    }
    all
}

/// Rewrites `dir` with the generated cases, `dir/provenance` with
/// [`provenance::cases`], `dir/hybrid` with [`hybrid::cases`] and
/// `dir/short-ticket` with [`short_ticket::cases`]; removes
/// stale `.json` files.
pub fn write_all(dir: &Path) -> std::io::Result<usize> {
    let n = write_dir(dir, generate())?;
    let n = n + write_dir(&dir.join("provenance"), provenance::cases())?;
    let n = n + write_dir(&dir.join("short-ticket"), short_ticket::cases())?;
    Ok(n + write_dir(&dir.join("hybrid"), hybrid::cases())?)
}

fn write_dir(dir: &Path, cases: Vec<Case>) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let keep: BTreeSet<String> = cases.iter().map(|c| format!("{}.json", c.name)).collect();
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if name.ends_with(".json") && !keep.contains(&name) {
            std::fs::remove_file(&p)?;
        }
    }
    for c in &cases {
        std::fs::write(dir.join(format!("{}.json", c.name)), c.to_text())?;
    }
    Ok(cases.len())
}
