#!/usr/bin/env bash
# Installs what a fresh machine lacks, then runs every check:
# formatting, clippy, the workspace tests (vectors included), and a smoke
# run of every fuzz target. FUZZ_SECONDS (default 30) sets the fuzz time;
# FUZZ_SECONDS=0 skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "toolchain"
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required (rustup: https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version

step "format"
cargo fmt --all -- --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

bash scripts/install-test-deps.sh
step "tests"
cargo test --workspace --locked

step "benchmark harness smoke run (bench/run --smoke)"
bash bench/run --smoke

step "split-serving benchmark smoke run (bench/split/run --smoke)"
bash bench/split/run --smoke

if [ "${FUZZ_SECONDS:-30}" != "0" ]; then
  step "fuzz smoke (${FUZZ_SECONDS:-30} s per target)"
  bash scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-30}"
fi
echo
echo "all checks passed"
