#!/usr/bin/env bash
# Uses the client exactly as README.md says: a throwaway module gets the
# README's install commands (the checkout's path put in) and its example
# program, is built, and runs against `httpcrypt serve` started as in the
# top-level README's tour (on a free port, its identity pinned). The server
# is $HTTPCRYPT_BIN, else ../../target/release/httpcrypt, else
# ../../target/debug/httpcrypt; without one this fails.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
bin=${HTTPCRYPT_BIN:-}
for p in ../../target/release/httpcrypt ../../target/debug/httpcrypt; do
    if [ -z "$bin" ] && [ -x "$p" ]; then bin=$(realpath "$p"); fi
done
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "check-readme.sh needs the httpcrypt binary: set HTTPCRYPT_BIN or build ../../target/release/httpcrypt" >&2
    exit 1
fi

tmp=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# The first fenced block of a language after a heading of README.md.
block() {
    awk -v heading="$1" -v fence="\`\`\`$2" '
        $0 == heading { found = 1; next }
        found && !inside && $0 == fence { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' README.md
}

# The tour's server on a free port.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
identity=$("$bin" keygen --dir "$tmp/keys")
mkdir "$tmp/site"
echo "<h1>hello from the tour</h1>" > "$tmp/site/index.html"
"$bin" serve --keys "$tmp/keys" --root "$tmp/site" --listen "127.0.0.1:$port" --rotation 3600 \
    > "$tmp/serve.log" 2>&1 &
server=$!

mkdir "$tmp/yourapp"
block "## Example" go \
    | sed -e "s|127.0.0.1:8080|127.0.0.1:$port|" -e "s|Identity: \"[A-Za-z0-9_-]*\"|Identity: \"$identity\"|" \
    > "$tmp/yourapp/main.go"
grep -q "Identity: \"$identity\"" "$tmp/yourapp/main.go" || { echo "README example: no Identity to pin" >&2; exit 1; }
block "## Install" sh | sed "s|/path/to/httpcrypt/clients/go|$here|" > "$tmp/install.sh"
grep -q "$here" "$tmp/install.sh" || { echo "README install: no checkout path" >&2; exit 1; }
# This machine may not reach sum.golang.org: the dependencies' checksums
# are those the client's own go.sum pins (nothing is verified less).
cp go.sum "$tmp/yourapp/go.sum"
(cd "$tmp/yourapp" && bash -euo pipefail "$tmp/install.sh")
(cd "$tmp/yourapp" && timeout 300 go build -o "$tmp/yourapp/yourapp" .)

for _ in $(seq 150); do
    (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
out=$(timeout 60 "$tmp/yourapp/yourapp")
case "$out" in
    "200 <h1>hello from the tour</h1>"*) echo "README example: $out" ;;
    *) echo "README example printed: $out" >&2; cat "$tmp/serve.log" >&2; exit 1 ;;
esac
