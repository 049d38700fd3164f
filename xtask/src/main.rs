//! Project tasks: `cargo xtask vectors` rewrites `vectors/` from the generator.

use std::path::PathBuf;

use anyhow::{bail, Context};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("vectors") => {
            let dir = vectors_dir();
            let written = xtask::vectors::write_all(&dir).context("writing vectors")?;
            println!("wrote {written} vector files to {}", dir.display());
            Ok(())
        }
        _ => bail!("usage: cargo xtask vectors"),
    }
}

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("vectors")
}
