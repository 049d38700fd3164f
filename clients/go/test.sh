#!/usr/bin/env bash
# Vet and test the Go client: every vector in ../../vectors and the live
# tests against the Rust server ($HTTPCRYPT_BIN, else
# ../../target/release/httpcrypt, else ../../target/debug/httpcrypt); then
# the README's install commands and example in a throwaway module.
# Bounded in time; module downloads go through the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")"
timeout 300 go vet ./...
timeout 600 go test -count=1 -timeout 540s ./...
timeout 400 bash check-readme.sh
