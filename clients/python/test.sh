#!/usr/bin/env bash
# The Python client's checks: ruff, mypy, then pytest (shared vectors, unit
# tests, live tests against the Rust server binary). Uses a venv under
# clients/python/.venv (created on first run). Live tests need the server:
# $HTTPCRYPT_BIN, or target/release/httpcrypt, or target/debug/httpcrypt;
# without one they fail with a message saying so.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
timeout 600 .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
timeout 120 .venv/bin/ruff check src tests bench.py bench_puzzle.py
timeout 300 .venv/bin/mypy
timeout 900 .venv/bin/python -m pytest -q tests "$@"
