//! The core stays sans-IO: its dependency tree has no async runtime and no
//! socket library.

#[test]
fn no_io_crates_in_the_core() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "httpcrypt-proto",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.contains("httpcrypt-proto"),
        "unexpected cargo tree output"
    );
    for banned in ["tokio", "mio", "socket2", "async-std", "hyper"] {
        let hit = tree
            .lines()
            .any(|l| l.split_whitespace().next() == Some(banned));
        assert!(!hit, "{banned} is in httpcrypt-proto's dependency tree");
    }
}
