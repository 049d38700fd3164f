//! Writes the checked-in seed corpus `fuzz/seeds/<target>/<name>`: a few
//! small, valid inputs per target, made with the crate's own encoders under
//! the fixture keys of `httpcrypt_fuzz` (so they reach the deep paths:
//! streams that verify, requests that are accepted, tickets that open).
//! Deterministic; rerun after changing a target's input layout:
//!
//! ```text
//! cd fuzz && cargo run --example gen_seeds
//! ```
//!
//! This file holds the writer and the shared helpers; the seeds of each
//! family of targets are in `wire.rs`, `formats.rs`, `rspamd.rs` and
//! `split.rs`.

mod formats;
mod hybrid;
mod rspamd;
mod split;
mod wire;

use std::path::{Path, PathBuf};

use httpcrypt_fuzz as fx;
use httpcrypt_proto::inner::{Field, RequestHead};
use httpcrypt_proto::replay;

struct Seeds {
    root: PathBuf,
    count: usize,
}

impl Seeds {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("create seed dir");
        std::fs::write(dir.join(name), bytes).expect("write seed");
        self.count += 1;
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex"))
        .collect()
}

fn request_head(target: &str, body_len: usize) -> RequestHead {
    let mut head = RequestHead::new(if body_len > 0 { "POST" } else { "GET" }, target);
    head.fields
        .push(Field::new("Date", replay::format_date(fx::NOW)));
    head.fields.push(Field::new("Accept", "*/*"));
    if body_len > 0 {
        head.fields
            .push(Field::new("Content-Length", body_len.to_string()));
    }
    head
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut s = Seeds { root, count: 0 };
    wire::stream_open(&mut s);
    wire::outer_request(&mut s);
    wire::cookie_scan(&mut s);
    wire::inner_message(&mut s);
    formats::certs(&mut s);
    formats::tlsa_seeds(&mut s);
    formats::ticket(&mut s);
    formats::tokens(&mut s);
    formats::b64_seeds(&mut s);
    formats::replay_seeds(&mut s);
    rspamd::rspamd_seeds(&mut s);
    split::split_seeds(&mut s);
    formats::provenance_seeds(&mut s);
    formats::admission_seeds(&mut s);
    formats::ratchet_seeds(&mut s);
    hybrid::hybrid_seeds(&mut s);
    println!("wrote {} seeds under {}", s.count, s.root.display());
}
