#!/usr/bin/env bash
# Everything the TypeScript client is checked with, bounded in time:
# npm ci, tsc, eslint, the vectors and the live Node tests against the Rust
# server (node --test), then the Chromium test of the demo page.
# The server binary: $HTTPCRYPT_BIN, else ../../target/release/httpcrypt, else
# ../../target/debug/httpcrypt (the live tests fail without one).
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '\n== %s\n' "$*"; }

step "npm ci"
timeout 600 npm ci --no-audit --no-fund

step "build (tsc)"
timeout 300 npx tsc -p tsconfig.json

step "lint (eslint)"
timeout 300 npx eslint .

step "vectors + live Node tests (node --test)"
timeout 1500 node --test --test-timeout=900000 test/vectors.test.mjs test/hybrid-vectors.test.mjs test/short-ticket-vectors.test.mjs test/hybrid.test.mjs test/hybrid-parsers.test.mjs test/engine.test.mjs test/short-ticket.test.mjs test/client.test.mjs test/compact.test.mjs test/admission.test.mjs test/live.test.mjs test/hybrid-live.test.mjs test/short-ticket-live.test.mjs test/hcfetch.test.mjs test/admission-live.test.mjs test/diagnose.test.mjs

step "Chromium"
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  timeout 600 $SUDO apt-get update
  timeout 900 $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
fi
timeout 600 node --test --test-timeout=240000 test/browser.test.mjs test/browser-admission.test.mjs test/browser-page.test.mjs test/browser-hybrid.test.mjs

step "all TypeScript client checks passed"
