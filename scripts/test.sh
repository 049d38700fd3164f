#!/usr/bin/env bash
# Installs what a fresh machine lacks, then runs every check: formatting,
# clippy, the workspace tests (vectors included), the smoke runs of every
# benchmark (bench/run, split, flood, asap, the protocol lab, the server
# profile, the wrk cross-check, the offered-rate run, memory per held
# connection), the Go,
# Python and TypeScript clients (vectors, live tests, Chromium), the interop
# matrix, and a smoke run of every fuzz target. FUZZ_SECONDS (default 30)
# sets the fuzz time; FUZZ_SECONDS=0 skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

disk_free() { df -Pk . | awk 'NR == 2 { printf "%.1f GiB free", $4 / 1048576 }'; }

# Each step's wall time, printed at the end (CI must stay well inside its budget).
timings=()
started=$(date +%s)
last_at=$started
last_name=""
step() {
  local now
  now=$(date +%s)
  [ -z "$last_name" ] || timings+=("$(printf '%6d s  %s' $((now - last_at)) "$last_name")")
  last_at=$now
  last_name="$*"
  printf '\n== %s  [disk: %s]\n' "$*" "$(disk_free)"
}

# The test builds hold several GiB of artefacts (debug, release, fuzz); a build
# that cannot write them fails with "No space left on device" in the middle of
# a compile. Incremental caches add about 40 % to the debug build's size and a
# one-shot run never reuses them, so they stay off unless the caller asks.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

step "toolchain"
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required (rustup: https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version

# First: the build itself needs some of it (OpenSSL's headers, pkg-config).
step "install what the build and the tests need (scripts/install-test-deps.sh)"
bash scripts/install-test-deps.sh

step "format"
cargo fmt --all -- --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --workspace --locked

step "benchmark harness smoke run (bench/run --smoke)"
bash bench/run --smoke

step "split-serving benchmark smoke run (bench/split/run --smoke)"
bash bench/split/run --smoke

step "flood benchmark smoke run (bench/flood/run --smoke)"
bash bench/flood/run --smoke

step "ASAP benchmark smoke run (bench/asap/run --smoke)"
python3 bench/asap/run --smoke

step "protocol lab smoke run (lab/run --smoke)"
bash lab/run --smoke

step "server profile smoke run (bench/profile/run --smoke)"
bash bench/profile/run --smoke

step "instruction count smoke run (bench/profile/instructions --smoke)"
bash bench/profile/instructions --smoke

step "side-by-side A/B smoke run (bench/profile/ab --smoke)"
bash bench/profile/ab --smoke

step "plaintext path beside nginx, smoke run (bench/profile/nginx --smoke)"
bash bench/profile/nginx --smoke

step "wrk cross-check smoke run (bench/crosscheck --smoke)"
bash bench/crosscheck --smoke

step "offered-rate benchmark smoke run (bench/rate --smoke)"
bash bench/rate --smoke

step "memory-per-connection benchmark smoke run (bench/scale --smoke)"
bash bench/scale --smoke

# The clients in other languages run the shared vectors and live tests
# against the server binary the workspace tests just built.
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
export HTTPCRYPT_BIN="$target_dir/debug/httpcrypt"
step "Go client (clients/go/test.sh)"
bash clients/go/test.sh
step "Python client (clients/python/test.sh)"
bash clients/python/test.sh
step "TypeScript client (clients/ts/test.sh)"
bash clients/ts/test.sh
step "interop matrix (scripts/interop.sh)"
bash scripts/interop.sh

if [ "${FUZZ_SECONDS:-30}" != "0" ]; then
  step "fuzz smoke (${FUZZ_SECONDS:-30} s per target)"
  bash scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-30}"
fi
step "done"
echo
printf '%s\n' "${timings[@]}"
printf '%6d s  in all\n' $(($(date +%s) - started))
echo "disk: $(disk_free) here at the end"
echo "all checks passed"
