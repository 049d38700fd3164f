#!/usr/bin/env bash
# The live interop matrix: every client (Rust `httpcrypt fetch`, Go, Python,
# TypeScript) against a real `httpcrypt serve`, a `gateway` in front of a
# plaintext upstream (and one that demands a token, `--require-token`), a server and a gateway that announce request profile
# 2 (`--compact`, spec §4.5), a two-instance fleet behind haproxy (round robin
# per request, so tickets and keys issued by one instance are used at the
# other), and a server and a gateway that take only suite 2, the hybrid
# X25519 + ML-KEM-768 agreement (`--pq only`, spec/hybrid.md). Every client is driven through the same command contract
# (clients/README.md, "the hcfetch contract"); the result is printed as a
# table and the script exits non-zero if any cell failed.
#
#   scripts/interop.sh [CLIENT...]        CLIENT: rust go python ts (default: all)
#
# HTTPCRYPT_BIN picks the server binary (default: target/debug/httpcrypt,
# else target/release/httpcrypt). The clients must have been set up by
# their own clients/<lang>/test.sh (dependencies, build); this script only
# builds the Go driver. Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

clients=("$@")
[ ${#clients[@]} -eq 0 ] && clients=(rust go python ts)

bin=${HTTPCRYPT_BIN:-}
if [ -z "$bin" ]; then
  for c in target/debug/httpcrypt target/release/httpcrypt; do
    [ -x "$c" ] && { bin=$repo/$c; break; }
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "interop: no httpcrypt binary (cargo build -p httpcrypt-cli)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# free_port VAR: sets VAR to a free loopback port, never one this script has
# handed out already (a server started in the background may not have bound
# its port yet when the next one is asked for).
given=" "
free_port() {
  local p
  while :; do
    p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    case "$given" in *" $p "*) continue ;; esac
    given="$given$p "
    printf -v "$1" '%s' "$p"
    return 0
  done
}
wait_port() {
  for _ in $(seq 1 100); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "interop: nothing listens on port $1" >&2
  return 1
}
start() { # start LOGNAME CMD...: runs CMD in the background, logging to $work/LOGNAME.log
  local name=$1; shift
  "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
}

# --- the site, keys and servers -------------------------------------------------
mkdir -p "$work/root"
printf 'hello from httpcrypt\n' >"$work/root/hello.txt"
python3 -c 'import sys; sys.stdout.buffer.write(bytes((i*7+3)%256 for i in range(4*1024*1024+17)))' >"$work/root/big.bin"
python3 -c 'import sys; sys.stdout.buffer.write(bytes((i*13+1)%256 for i in range(3*1024*1024+5)))' >"$work/upload.bin"
big_sha=$(sha256sum "$work/root/big.bin" | cut -d' ' -f1)
up_sha=$(sha256sum "$work/upload.bin" | cut -d' ' -f1)
up_len=$(stat -c %s "$work/upload.bin")

identity=$("$bin" keygen --dir "$work/keys")
other_identity=$("$bin" keygen --dir "$work/other-keys")

free_port p_serve
start serve "$bin" serve --keys "$work/keys" --root "$work/root" --mount /hc --listen "127.0.0.1:$p_serve"

python3 crates/httpcrypt-cli/tests/upstream.py 0 >"$work/upstream.out" 2>"$work/upstream.log" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^PORT' "$work/upstream.out" 2>/dev/null && break; sleep 0.1; done
p_up=$(awk '/^PORT/{print $2}' "$work/upstream.out")
free_port p_gw
start gateway "$bin" gateway --keys "$work/keys" --upstream "http://127.0.0.1:$p_up" --mount /hc --listen "127.0.0.1:$p_gw"
# A gateway that demands a token for unsafe methods (spec §8.4).
free_port p_tgw
start token-gateway "$bin" gateway --require-token --keys "$work/keys" --upstream "http://127.0.0.1:$p_up" --mount /hc --listen "127.0.0.1:$p_tgw"
# Request profile 2 (spec §4.5): a server and a gateway that announce it.
"$bin" keygen --dir "$work/compact-keys" >/dev/null
free_port p_c
start compact "$bin" serve --compact --keys "$work/compact-keys" --root "$work/root" --mount /hc --listen "127.0.0.1:$p_c"
free_port p_cgw
start compact-gateway "$bin" gateway --compact --keys "$work/compact-keys" --upstream "http://127.0.0.1:$p_up" --mount /hc --listen "127.0.0.1:$p_cgw"
# Suite 2 only (spec/hybrid.md): a v1 request to these is refused, so every
# exchange that succeeds used the hybrid agreement or a ticket of it.
pq_identity=$("$bin" keygen --pq --dir "$work/pq-keys")
free_port p_pq
start pq "$bin" serve --pq only --keys "$work/pq-keys" --root "$work/root" --mount /hc --listen "127.0.0.1:$p_pq"
free_port p_pqgw
start pq-gateway "$bin" gateway --pq only --keys "$work/pq-keys" --upstream "http://127.0.0.1:$p_up" --mount /hc --listen "127.0.0.1:$p_pqgw"

"$bin" keygen --dir "$work/fleet" >"$work/fleet-identity"
"$bin" fleet init --keys "$work/fleet" --period 3600 >/dev/null
cp -r "$work/fleet" "$work/fleet-a"
cp -r "$work/fleet" "$work/fleet-b"
free_port p_a; free_port p_b; free_port p_lb
start fleet-a "$bin" serve --keys "$work/fleet-a" --root "$work/root" --mount /hc --listen "127.0.0.1:$p_a"
start fleet-b "$bin" serve --keys "$work/fleet-b" --root "$work/root" --mount /hc --listen "127.0.0.1:$p_b"
haproxy_bin=$(command -v haproxy || echo /usr/sbin/haproxy)
cat >"$work/haproxy.cfg" <<EOF
global
  maxconn 256
  log stdout format raw local0
defaults
  mode http
  log global
  option httplog
  option http-server-close
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fleet
  bind 127.0.0.1:$p_lb
  default_backend instances
backend instances
  balance roundrobin
  server a 127.0.0.1:$p_a
  server b 127.0.0.1:$p_b
EOF
start haproxy "$haproxy_bin" -db -f "$work/haproxy.cfg"
for p in "$p_serve" "$p_gw" "$p_tgw" "$p_a" "$p_b" "$p_lb" "$p_c" "$p_cgw" "$p_pq" "$p_pqgw"; do wait_port "$p"; done

# --- the drivers ----------------------------------------------------------------
driver() { # driver CLIENT ARGS...: the hcfetch contract for each client
  local c=$1; shift
  case $c in
    rust) timeout 60 "$bin" fetch "$@" ;;
    go) timeout 60 "$work/hcfetch-go" "$@" ;;
    python) timeout 60 "$repo/clients/python/.venv/bin/python" -m httpcrypt.hcfetch "$@" ;;
    ts) timeout 60 node "$repo/clients/ts/bin/hcfetch.mjs" "$@" ;;
  esac
}
for c in "${clients[@]}"; do
  case $c in
    go) (cd clients/go && go build -o "$work/hcfetch-go" ./cmd/hcfetch) ;;
    python) [ -x clients/python/.venv/bin/python ] || { echo "interop: run clients/python/test.sh first" >&2; exit 1; } ;;
    ts) [ -d clients/ts/node_modules ] || { echo "interop: run clients/ts/test.sh first" >&2; exit 1; } ;;
    rust) ;;
    *) echo "interop: unknown client $c" >&2; exit 1 ;;
  esac
done

# --- the cases ------------------------------------------------------------------
# Each case runs the driver with a time limit and checks its output; it
# prints nothing and returns 0 on success, else returns 1 (the reason goes to
# $work/fail-<client>-<case>.log).
s="http://127.0.0.1:$p_serve"
g="http://127.0.0.1:$p_gw"
tg="http://127.0.0.1:$p_tgw"
f="http://127.0.0.1:$p_lb"
cs="http://127.0.0.1:$p_c"
cg="http://127.0.0.1:$p_cgw"
ps="http://127.0.0.1:$p_pq"
pg="http://127.0.0.1:$p_pqgw"

case_file() { driver "$1" --mount /hc "$s/hello.txt" >"$out" 2>"$err" && [ "$(cat "$out")" = "hello from httpcrypt" ]; }
case_pinned() { driver "$1" --mount /hc --identity="$identity" "$s/hello.txt" >"$out" 2>"$err" && grep -q 'hello from httpcrypt' "$out"; }
case_wrong_pin() { ! driver "$1" --mount /hc --identity="$other_identity" "$s/hello.txt" >"$out" 2>"$err" && [ ! -s "$out" ]; }
case_ticket() {
  driver "$1" --mount /hc --repeat 3 "$s/hello.txt" >"$out" 2>"$err" &&
    grep -q '^request 1: status 200, credential key' "$err" &&
    grep -q '^request 3: status 200, credential ticket' "$err"
}
case_short_ticket() {
  driver "$1" --mount /hc --repeat 3 "$s/hello.txt" >"$out" 2>"$err" &&
    grep -q '^request 1: status 200, credential key$' "$err" &&
    grep -q '^request 2: status 200, credential ticket (short)$' "$err" &&
    grep -q '^request 3: status 200, credential ticket (short)$' "$err" &&
    [ "$(cat "$out")" = "hello from httpcrypt" ]
}
case_v1_ticket() {
  driver "$1" --v1-tickets --mount /hc --repeat 3 "$s/hello.txt" >"$out" 2>"$err" &&
    grep -q '^request 1: status 200, credential key$' "$err" &&
    grep -q '^request 3: status 200, credential ticket$' "$err" &&
    [ "$(cat "$out")" = "hello from httpcrypt" ]
}
case_pq_short_ticket() {
  driver "$1" --pq require --mount /hc --identity="$pq_identity" --repeat 3 "$ps/hello.txt" >"$out" 2>"$err" &&
    grep -q '^request 1: status 200, credential key' "$err" &&
    grep -q '^request 3: status 200, credential ticket (short)' "$err" &&
    [ "$(cat "$out")" = "hello from httpcrypt" ]
}
case_big() { driver "$1" --mount /hc "$s/big.bin" >"$out" 2>"$err" && [ "$(sha256sum <"$out" | cut -d' ' -f1)" = "$big_sha" ]; }
case_404() { driver "$1" --mount /hc --repeat 1 "$s/nothing-here" >"$out" 2>"$err" && grep -q '^request 1: status 404' "$err"; }
case_gw_echo() {
  driver "$1" --mount /hc -X POST -H 'Content-Type: application/json' -H 'X-Interop: yes' -d '{"a":1}' "$g/echo/items?x=1" >"$out" 2>"$err" &&
    python3 - "$out" <<'EOF'
import json, sys, hashlib
d = json.load(open(sys.argv[1]))
fields = {k.lower(): v for k, v in d["headers"]}
assert d["method"] == "POST", d
assert d["target"] == "/echo/items?x=1", d
assert fields.get("x-interop") == "yes", d
assert d["length"] == 7 and d["sha256"] == hashlib.sha256(b'{"a":1}').hexdigest(), d
EOF
}
case_gw_upload() {
  driver "$1" --mount /hc -X POST --data-file "$work/upload.bin" "$g/sink" >"$out" 2>"$err" &&
    [ "$(cat "$out")" = "$up_len $up_sha" ]
}
# The token demand: the first POST is answered 425 with a token and a
# ticket, and the client's one retry carries the token (bound to a short
# ticket's key when one came with it, spec §7.3); the later POSTs present
# the ticket and the token at once.
case_gw_token() {
  driver "$1" --mount /hc $2 -X POST -d token "$tg/echo" --repeat 3 >"$out" 2>"$err" &&
    [ "$(grep -c ': status 200, credential' "$err")" = 3 ] &&
    grep -q "^request 3: status 200, credential $3" "$err" &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["method"] == "POST", d' "$out"
}
case_gw_token_short() { case_gw_token "$1" "" "ticket (short)"; }
case_gw_token_v1() { case_gw_token "$1" --v1-tickets "ticket$"; }
case_gw_missing() { driver "$1" --mount /hc --repeat 1 "$g/missing" >"$out" 2>"$err" && grep -q '^request 1: status 404' "$err"; }
case_fleet() {
  # Both instances must have answered this client's requests.
  local before; before=$(wc -l <"$work/haproxy.log")
  driver "$1" --mount /hc --identity="$(cat "$work/fleet-identity")" --repeat 4 "$f/hello.txt" >"$out" 2>"$err" &&
    [ "$(grep -c ': status 200, credential' "$err")" = 4 ] && grep -q 'credential ticket' "$err" &&
    grep -q 'hello from httpcrypt' "$out" &&
    tail -n +"$((before + 1))" "$work/haproxy.log" | grep -q ' instances/a ' &&
    tail -n +"$((before + 1))" "$work/haproxy.log" | grep -q ' instances/b '
}

case_c_ticket() {
  driver "$1" --mount /hc --repeat 3 "$cs/hello.txt" >"$out" 2>"$err" &&
    grep -q '^request 1: status 200, credential key' "$err" &&
    grep -q '^request 3: status 200, credential ticket' "$err" &&
    [ "$(cat "$out")" = "hello from httpcrypt" ]
}
case_c_big() { driver "$1" --mount /hc "$cs/big.bin" >"$out" 2>"$err" && [ "$(sha256sum <"$out" | cut -d' ' -f1)" = "$big_sha" ]; }
case_c_upload() {
  driver "$1" --mount /hc -X POST --data-file "$work/upload.bin" "$cg/sink" >"$out" 2>"$err" &&
    [ "$(cat "$out")" = "$up_len $up_sha" ]
}
case_pq_ticket() {
  driver "$1" --pq require --mount /hc --identity="$pq_identity" --repeat 3 "$ps/hello.txt" >"$out" 2>"$err" &&
    grep -q '^request 1: status 200, credential key' "$err" &&
    grep -q '^request 3: status 200, credential ticket' "$err" &&
    [ "$(cat "$out")" = "hello from httpcrypt" ]
}
case_pq_big() { driver "$1" --pq prefer --mount /hc "$ps/big.bin" >"$out" 2>"$err" && [ "$(sha256sum <"$out" | cut -d' ' -f1)" = "$big_sha" ]; }
case_pq_upload() {
  driver "$1" --pq require --mount /hc -X POST --data-file "$work/upload.bin" "$pg/sink" >"$out" 2>"$err" &&
    [ "$(cat "$out")" = "$up_len $up_sha" ]
}
case_pq_downgrade() {
  # Required suite 2 from a v1-only server: refused, nothing on stdout.
  ! driver "$1" --pq require --mount /hc "$s/hello.txt" >"$out" 2>"$err" && [ ! -s "$out" ] &&
    grep -q 'hybrid_downgrade' "$err"
}

cases=(
  "serve:file:case_file"
  "serve:pinned identity:case_pinned"
  "serve:wrong pin refused:case_wrong_pin"
  "serve:tickets (3 requests):case_ticket"
  "serve:short tickets (3 requests):case_short_ticket"
  "serve:v1 tickets (--v1-tickets):case_v1_ticket"
  "serve:4 MiB download:case_big"
  "serve:inner 404:case_404"
  "gateway:POST echo:case_gw_echo"
  "gateway:3 MiB streamed upload:case_gw_upload"
  "gateway:upstream 404:case_gw_missing"
  "gateway:token demanded, short tickets:case_gw_token_short"
  "gateway:token demanded, v1 tickets:case_gw_token_v1"
  "fleet:2 instances, round robin:case_fleet"
  "compact:tickets (3 requests):case_c_ticket"
  "compact:4 MiB download:case_c_big"
  "compact:gateway, 3 MiB upload:case_c_upload"
  "hybrid:pinned, tickets (3 requests):case_pq_ticket"
  "hybrid:short tickets (3 requests):case_pq_short_ticket"
  "hybrid:4 MiB download:case_pq_big"
  "hybrid:gateway, 3 MiB upload:case_pq_upload"
  "hybrid:v1-only server refused:case_pq_downgrade"
)

# The echo upstream's JSON names: check them once, so a change there is
# reported as such and not as four client failures.
curl -s -X POST -d x "http://127.0.0.1:$p_up/echo" | python3 -c 'import json,sys; d=json.load(sys.stdin); [d[k] for k in ("method","target","headers","length","sha256")]' ||
  { echo "interop: upstream.py's /echo answer changed shape" >&2; exit 1; }

passed=0; failed=0
declare -A cell
for entry in "${cases[@]}"; do
  IFS=: read -r server name fn <<<"$entry"
  for c in "${clients[@]}"; do
    out=$work/out-$c-$fn; err=$work/err-$c-$fn
    if $fn "$c"; then
      cell["$server:$name:$c"]=pass; passed=$((passed + 1))
    else
      cell["$server:$name:$c"]=FAIL; failed=$((failed + 1))
      { echo "--- $c / $server / $name: stderr"; tail -5 "$err"; } >>"$work/failures"
    fi
  done
done

printf '\n%-9s %-30s' server case
for c in "${clients[@]}"; do printf ' %-7s' "$c"; done
printf '\n'
for entry in "${cases[@]}"; do
  IFS=: read -r server name fn <<<"$entry"
  printf '%-9s %-30s' "$server" "$name"
  for c in "${clients[@]}"; do printf ' %-7s' "${cell["$server:$name:$c"]}"; done
  printf '\n'
done
[ -f "$work/failures" ] && { echo; cat "$work/failures"; }
echo
echo "interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
