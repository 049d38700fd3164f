//! What ships around the binary: shell completions and man pages generated
//! from it, the systemd unit (checked by `systemd-analyze verify` and its
//! offline security score) and the container build (checked statically:
//! no container engine runs where the tests do; see packaging/README.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef httpcrypt"),
        ("fish", "complete -c httpcrypt"),
    ] {
        let out = run(&["completions", shell], Duration::from_secs(30));
        assert!(out.status.success(), "{shell}: {}", out.stderr_text());
        let text = out.stdout_text();
        assert!(text.contains(marker), "{shell}: no {marker:?}");
        for sub in ["serve", "gateway", "fetch", "metrics"] {
            assert!(text.contains(sub), "{shell}: no {sub}");
        }
    }
    let out = run(&["completions", "tcsh"], Duration::from_secs(30));
    assert!(!out.status.success(), "an unknown shell is refused");
}

/// The bash script, loaded into a real bash, completes a subcommand and a
/// flag of it.
#[test]
fn bash_completes_subcommands_and_flags() {
    let out = run(&["completions", "bash"], Duration::from_secs(30));
    assert!(out.status.success(), "{}", out.stderr_text());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("httpcrypt.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let mut bash = Command::new("bash");
    bash.arg("--norc").arg("-c").arg(
        r#"source "$1" || exit 1
        COMP_WORDS=(httpcrypt se); COMP_CWORD=1; _httpcrypt httpcrypt se httpcrypt
        echo "1: ${COMPREPLY[*]}"
        COMP_WORDS=(httpcrypt gateway --metr); COMP_CWORD=2; _httpcrypt httpcrypt --metr gateway
        echo "2: ${COMPREPLY[*]}""#,
    );
    bash.arg("bash").arg(&script);
    let out = run_cmd(bash, Duration::from_secs(30));
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.contains("1: serve\n"), "{text}");
    assert!(text.contains("2: --metrics\n"), "{text}");
}

#[test]
fn man_pages_document_every_subcommand() {
    let out = run(&["man"], Duration::from_secs(30));
    assert!(out.status.success(), "{}", out.stderr_text());
    let page = out.stdout_text();
    assert!(
        page.starts_with(".ie") || page.contains(".TH httpcrypt 1"),
        "{page}"
    );
    for sub in ["serve", "gateway", "fetch", "completions"] {
        assert!(page.contains(sub), "httpcrypt.1 does not mention {sub}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &["man", "--dir", dir.path().to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let serve = std::fs::read_to_string(dir.path().join("httpcrypt-serve.1")).unwrap();
    assert!(serve.contains(".TH httpcrypt-serve 1"), "{serve}");
    assert!(serve.contains("metrics"), "serve's page lists --metrics");
    assert!(dir.path().join("httpcrypt.1").exists());
}

/// The unit as it ships, with `ExecStart` pointing at the binary under
/// test (systemd checks that it exists) and man pages generated next to
/// it (systemd checks the `Documentation=man:` pages with `man`).
fn unit_under_test(dir: &Path) -> PathBuf {
    let unit = std::fs::read_to_string(repo().join("packaging/httpcrypt.service")).unwrap();
    assert!(unit.contains("/usr/local/bin/httpcrypt serve"));
    let unit = unit.replace("/usr/local/bin/httpcrypt", BIN);
    let path = dir.join("httpcrypt.service");
    std::fs::write(&path, unit).unwrap();
    let man = dir.join("man/man1");
    std::fs::create_dir_all(&man).unwrap();
    let out = run(
        &["man", "--dir", man.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    path
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_under_test(dir.path());
    let mut verify = Command::new("systemd-analyze");
    verify
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", dir.path().join("man"))
        .env("SYSTEMD_LOG_COLOR", "0");
    let out = run_cmd(verify, Duration::from_secs(60));
    // Unknown keys and bad values are warnings on stderr with status 0:
    // any output fails.
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify: {}{}",
        out.stdout_text(),
        out.stderr_text()
    );
    // The offline security review: "OK" is an exposure of at most 2.0 of 10
    // (--threshold is in tenths).
    let mut security = Command::new("systemd-analyze");
    security
        .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
        .arg(&unit)
        .env("SYSTEMD_COLORS", "0");
    let out = run_cmd(security, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "systemd-analyze security: {}{}",
        out.stdout_text(),
        out.stderr_text()
    );
    let text = std::fs::read_to_string(repo().join("packaging/httpcrypt.service")).unwrap();
    for line in [
        "DynamicUser=yes",
        "StateDirectory=httpcrypt",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "KillSignal=SIGTERM",
        "CapabilityBoundingSet=\n",
    ] {
        assert!(text.contains(line), "the unit lacks {line:?}");
    }
}

/// The verification fails on a misspelt directive (the test above can fail).
#[test]
fn systemd_analyze_reports_a_misspelt_directive() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_under_test(dir.path());
    let text = std::fs::read_to_string(&unit)
        .unwrap()
        .replace("ProtectSystem=strict", "ProtectSystm=strict");
    std::fs::write(&unit, text).unwrap();
    let mut verify = Command::new("systemd-analyze");
    verify
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", dir.path().join("man"));
    let out = run_cmd(verify, Duration::from_secs(60));
    assert!(
        out.stderr_text().contains("ProtectSystm"),
        "{}",
        out.stderr_text()
    );
}

/// The Dockerfile cannot be built here; what can be checked without an
/// engine is: every `COPY` source exists in the build context (the
/// repository root), every workspace member is copied (cargo loads them
/// all), the build is `--locked`, the runtime runs as a non-root user with
/// the key directory in a volume, and the health check asks `/healthz` on
/// the metrics address the default command enables.
#[test]
fn the_dockerfile_copies_what_exists_and_runs_unprivileged() {
    let root = repo();
    let text = std::fs::read_to_string(root.join("packaging/Dockerfile")).unwrap();
    // Continuation lines joined.
    let joined = text.replace("\\\n", " ");
    let lines: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut copied = Vec::new();
    for l in &lines {
        let Some(args) = l.strip_prefix("COPY ") else {
            continue;
        };
        if args.starts_with("--from=") {
            continue;
        }
        let words: Vec<&str> = args.split_whitespace().collect();
        for src in &words[..words.len() - 1] {
            assert!(root.join(src).exists(), "COPY of a missing {src}");
            copied.push(src.trim_end_matches('/').to_string());
        }
    }
    // `members = ["a", "b", ...]` of the workspace manifest.
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = ["))
        .expect("workspace members on one line");
    let members: Vec<&str> = members.split('"').skip(1).step_by(2).collect();
    assert!(members.contains(&"crates/httpcrypt-cli"), "{members:?}");
    for member in members {
        assert!(
            copied
                .iter()
                .any(|c| member == c || member.starts_with(&format!("{c}/"))),
            "workspace member {member} is not copied"
        );
    }
    assert!(copied.iter().any(|c| c == "Cargo.lock"));
    let froms: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage");
    // The binary links the system's OpenSSL (httpcrypt-proto's default
    // `openssl` feature): its headers to build, its library to run.
    let proto = std::fs::read_to_string(root.join("crates/httpcrypt-proto/Cargo.toml")).unwrap();
    if proto.contains("default = [\"openssl\"]") {
        let installs: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("apt-get install"))
            .collect();
        assert_eq!(installs.len(), 2, "one install per stage: {installs:?}");
        for pkg in ["libssl-dev", "pkg-config"] {
            assert!(
                installs[0].split_whitespace().any(|w| w == pkg),
                "build stage lacks {pkg}"
            );
        }
        assert!(
            installs[1].split_whitespace().any(|w| w == "libssl3"),
            "runtime lacks libssl3"
        );
    }
    assert!(froms[0].ends_with(" AS build"));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("RUN cargo build --release --locked -p httpcrypt-cli")));
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "{user}"
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("VOLUME") && l.contains("/var/lib/httpcrypt")));
    let health = lines
        .iter()
        .find(|l| l.starts_with("HEALTHCHECK"))
        .expect("a HEALTHCHECK");
    assert!(health.contains("http://127.0.0.1:9090/healthz"), "{health}");
    let cmd = lines.iter().find(|l| l.starts_with("CMD ")).expect("a CMD");
    assert!(cmd.contains("\"--metrics\", \"0.0.0.0:9090\""), "{cmd}");
    assert!(lines
        .iter()
        .any(|l| l.starts_with("EXPOSE") && l.contains("8080") && l.contains("9090")));
    // The default command runs: its flags, with the paths and addresses
    // of this test.
    let args: Vec<String> = serde_json::from_str(cmd.trim_start_matches("CMD ")).unwrap();
    assert_eq!(args[0], "serve");
    let mut extra = Vec::new();
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--keys" | "--root" | "--listen" => {
                rest.next();
            }
            "--metrics" => {
                rest.next();
                extra.extend(["--metrics", "127.0.0.1:0"]);
            }
            other => extra.push(other),
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("keys");
    keygen(&keys, false);
    let server = serve(&keys, tmp.path(), &extra);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server.log().contains("metrics on http://") {
        assert!(std::time::Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}
