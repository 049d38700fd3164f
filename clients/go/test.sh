#!/usr/bin/env bash
# Vet and test the Go client: every vector in ../../vectors and the live
# tests against the Rust server ($HTTPCRYPT_BIN, else
# ../../target/release/httpcrypt, else ../../target/debug/httpcrypt).
# Bounded in time; module downloads go through the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")"
timeout 300 go vet ./...
timeout 600 go test -count=1 -timeout 540s ./...
