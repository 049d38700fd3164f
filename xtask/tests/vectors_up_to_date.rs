//! The checked-in `vectors/` must be exactly what the generator writes:
//! run `cargo xtask vectors` after changing the generator or the core.

use std::collections::BTreeSet;
use std::path::PathBuf;

#[test]
fn checked_in_vectors_match_the_generator() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vectors");
    let cases = xtask::vectors::generate();
    let mut expected = BTreeSet::new();
    for c in &cases {
        let file = format!("{}.json", c.name);
        let on_disk = std::fs::read_to_string(dir.join(&file))
            .unwrap_or_else(|_| panic!("{file} is missing: run `cargo xtask vectors`"));
        assert!(
            on_disk == c.to_text(),
            "{file} differs from the generator: run `cargo xtask vectors`"
        );
        expected.insert(file);
    }
    for entry in std::fs::read_dir(&dir).expect("vectors/ exists") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        if name.ends_with(".json") {
            assert!(
                expected.contains(&name),
                "{name} is not produced by the generator"
            );
        }
    }
}

#[test]
fn generation_is_deterministic() {
    let a: Vec<String> = xtask::vectors::generate()
        .iter()
        .map(|c| c.to_text())
        .collect();
    let b: Vec<String> = xtask::vectors::generate()
        .iter()
        .map(|c| c.to_text())
        .collect();
    assert_eq!(a, b);
}

#[test]
fn checked_in_provenance_vectors_match_the_generator() {
    subdir_matches("provenance", xtask::vectors::provenance::cases());
}

#[test]
fn checked_in_hybrid_vectors_match_the_generator() {
    subdir_matches("hybrid", xtask::vectors::hybrid::cases());
}

fn subdir_matches(sub: &str, cases: Vec<xtask::vectors::Case>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../vectors")
        .join(sub);
    let mut expected = BTreeSet::new();
    for c in &cases {
        let file = format!("{}.json", c.name);
        let on_disk = std::fs::read_to_string(dir.join(&file))
            .unwrap_or_else(|_| panic!("{sub}/{file} is missing: run `cargo xtask vectors`"));
        assert!(
            on_disk == c.to_text(),
            "{sub}/{file} differs from the generator: run `cargo xtask vectors`"
        );
        expected.insert(file);
    }
    let on_disk = std::fs::read_dir(&dir)
        .expect("the vectors subdirectory exists")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json"))
        })
        .count();
    assert_eq!(on_disk, expected.len(), "stale files in vectors/{sub}/");
}
