#!/usr/bin/env bash
# Micro benchmarks of httpcrypt-proto (criterion, crates/httpcrypt-proto/benches/micro.rs):
# runs them pinned to one core, then prints a Markdown table of median times and
# throughputs and the ratios that matter, computed from this run. Writes
# bench/micro/REPORT.md and bench/micro/results.json.
#
# Usage: scripts/bench-micro.sh [--check] [criterion args...]
#   --check          exit 1 if a ratio misses its target
#   criterion args   e.g. a filter (`seal_16KiB`): the table and ratios then
#                    show only what this run measured, and the report files
#                    are left as they are
# Environment:
#   BENCH_CPU    core to pin to (default 1, or 0 on a single-CPU machine)
#   BENCH_CLOCK  cpu (default): the benchmark thread's CPU time, so other work
#                sharing the core does not stretch the numbers; wall: wall time
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out_dir="$root/bench/micro"
mkdir -p "$out_dir"

check=0
if [[ "${1:-}" == "--check" ]]; then
    check=1
    shift
fi

bench_cmd=(cargo bench -p httpcrypt-proto --bench micro)
if [[ $# -gt 0 ]]; then
    bench_cmd+=(-- "$@")
fi

# Build first, unpinned, so the compiler gets every core.
cargo bench -p httpcrypt-proto --bench micro --no-run

target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
criterion_dir="${CRITERION_HOME:-$target_dir/criterion}"

export BENCH_CLOCK=${BENCH_CLOCK:-cpu}
cpu=${BENCH_CPU:-1}
if [[ $(nproc --all) -lt 2 ]]; then
    cpu=${BENCH_CPU:-0}
fi
pin=()
if command -v taskset >/dev/null 2>&1; then
    pin=(taskset -c "$cpu")
else
    echo "bench-micro: taskset not found; running unpinned" >&2
fi

# Only estimates written by this run count (target/criterion keeps old ones).
marker=$(mktemp)
trap 'rm -f "$marker"' EXIT
sleep 1 # mtime resolution: everything written from now on is newer than the marker
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)

echo "+ BENCH_CLOCK=$BENCH_CLOCK ${pin[*]} ${bench_cmd[*]}" >&2
"${pin[@]}" "${bench_cmd[@]}"
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)

reproduce="scripts/bench-micro.sh${*:+ $*}  # runs: BENCH_CLOCK=$BENCH_CLOCK ${pin[*]:+${pin[*]} }${bench_cmd[*]}"

python3 - "$criterion_dir" "$marker" "$out_dir" "$check" "$reproduce" "${pin[*]:-unpinned}" \
    "$load_before" "$load_after" "$BENCH_CLOCK" "$#" <<'PY'
import datetime
import json
import os
import platform
import subprocess
import sys

(criterion_dir, marker, out_dir, check, reproduce, pinning, load_before, load_after,
 clock, n_args) = sys.argv[1:11]
partial = n_args != "0"
clock_text = {
    "cpu": "CPU time of the benchmark thread (`BENCH_CLOCK=cpu`)",
    "wall": "wall time (`BENCH_CLOCK=wall`)",
}.get(clock, clock)
since = os.path.getmtime(marker)

# What each benchmark measures (shown beside its id).
NOTES = {
    "x25519/agree_raw_awslc": "X25519, reusable secret, aws-lc-rs (`KexSecret::agree_raw`)",
    "x25519/dalek_diffie_hellman": "X25519, same inputs, x25519-dalek `StaticSecret::diffie_hellman`",
    "kdf/session_key": "`KexSecret::session_key`: X25519 + HChaCha20",
    "kdf/hchacha20": "`suite::hchacha20` alone",
    "kdf/key_id_sha3": "`KexPublic::kid`: SHA3-256 of a public key (key lookup by ID)",
    "sealer_in_place": "`Sealer::seal_in_place`, long-lived sealer",
    "sealer_vec": "`Sealer::seal` appending to a reused Vec (copies the plaintext)",
    "sealer_new_finish_in_place": "`Sealer::request` + `finish_in_place`: one-record stream incl. setup",
    "opener": "`Opener::receive` + `next_event`, long-lived opener",
    "opener_new_one_record": "`Opener::request` + receive + next_event: one-record stream incl. setup",
    "raw_awslc_chacha20poly1305": "baseline: aws-lc-rs ChaCha20-Poly1305 `LessSafeKey`, in place",
    "xchacha_ours": "`suite::XChaCha` (HChaCha20 subkey cached; OpenSSL from 4 KiB on AVX-512), in place",
    "xchacha_rustcrypto": "reference: RustCrypto `XChaCha20Poly1305` detached, in place",
    "server/first_request": "`accept` (X25519) + `open_request` + `seal_response` (100 B each way)",
    "server/first_request_no_x25519": "the same with `accept_with` returning a precomputed key",
    "server/accept": "`server::accept` (routing, cookie, X25519 + HChaCha20)",
    "server/accept_precomputed_key": "`server::accept_with`, precomputed key (no X25519)",
    "server/open_request": "`server::open_request`: open 1-record stream, parse inner head, 100 B body",
    "server/seal_response_100B": "`server::seal_response`: head + 100 B body, one record",
    "inner/decode_request_head_300B": "`inner::decode_all::<RequestHead>`, 300-byte head, 6 fields",
    "resumption/fresh_key": "server per request, fresh client key: accept (X25519) + open + parse + seal 100 B",
    "resumption/cache_hit": "the same, key from the session cache (no X25519)",
    "resumption/ticket": "the same, key from a ticket (open the ticket, no X25519)",
    "strikes/check_3M": "strike-register check of a new (kid, n0) at 50k/s with 3M entries held, buckets expiring as time passes",
    "strikes/replay_3M": "strike-register check of a recorded live (kid, n0): refused as a replay",
}

GROUP_ORDER = ["x25519", "kdf"]
for kind in ("seal", "open"):
    GROUP_ORDER += [f"{kind}_{s}" for s in ("100B", "1KiB", "16KiB", "1MiB")]
GROUP_ORDER += ["server", "inner", "resumption", "strikes"]


def load():
    found = {}
    if not os.path.isdir(criterion_dir):
        return found
    for dirpath, _dirs, files in os.walk(criterion_dir):
        if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
            continue
        est_path = os.path.join(dirpath, "estimates.json")
        if os.path.getmtime(est_path) < since:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            meta = json.load(f)
        with open(est_path) as f:
            est = json.load(f)
        median = est["median"]
        tp = meta.get("throughput") or {}
        bench_id = meta.get("full_id") or f'{meta["group_id"]}/{meta["function_id"]}'
        found[bench_id] = {
            "id": bench_id,
            "group": meta["group_id"],
            "function": meta.get("function_id"),
            "median_ns": median["point_estimate"],
            "median_ci95_ns": [
                median["confidence_interval"]["lower_bound"],
                median["confidence_interval"]["upper_bound"],
            ],
            "mean_ns": est["mean"]["point_estimate"],
            "throughput_bytes": tp.get("Bytes"),
            "estimates": os.path.relpath(est_path),
            "_mtime": os.path.getmtime(est_path),
        }
    for b in found.values():
        if b["throughput_bytes"]:
            b["mb_per_s"] = b["throughput_bytes"] / b["median_ns"] * 1e3  # 1 MB = 10^6 B
    return found


def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.0f} {unit}"
    return f"{ns:.3g} ns" if ns < 100 else f"{ns:.0f} ns"


def fmt_tp(b):
    if not b.get("throughput_bytes"):
        return ""
    mbs = b["mb_per_s"]
    return f"{mbs:,.0f} MB/s" if mbs >= 100 else f"{mbs:.3g} MB/s"


def sort_key(b):
    # Known groups in their order; inside a group, the order they ran in.
    g = b["group"]
    return (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g, b["_mtime"])


benches = load()
if not benches:
    sys.exit(f"bench-micro: no criterion estimates newer than this run under {criterion_dir}")


def t(bench_id):
    b = benches.get(bench_id)
    return b["median_ns"] if b else None


def ratio(num, den):
    return None if num is None or den is None else num / den


RATIOS = [
    # name, value, target (op, bound) or None, definition
    (
        "first_request_over_x25519",
        ratio(t("server/first_request"), t("x25519/agree_raw_awslc")),
        ("<=", 1.25),
        "time(server/first_request) / time(x25519/agree_raw_awslc)",
    ),
    (
        "seal_16k_over_raw",
        ratio(t("seal_16KiB/raw_awslc_chacha20poly1305"), t("seal_16KiB/sealer_in_place")),
        (">=", 0.90),
        "throughput(seal_16KiB/sealer_in_place) / throughput(seal_16KiB/raw_awslc_chacha20poly1305)",
    ),
    (
        "open_16k_over_raw",
        ratio(t("open_16KiB/raw_awslc_chacha20poly1305"), t("open_16KiB/opener")),
        (">=", 0.90),
        "throughput(open_16KiB/opener) / throughput(open_16KiB/raw_awslc_chacha20poly1305)",
    ),
    (
        "x25519_awslc_over_dalek",
        ratio(t("x25519/agree_raw_awslc"), t("x25519/dalek_diffie_hellman")),
        None,
        "time(aws-lc-rs) / time(x25519-dalek); < 1: aws-lc-rs is faster",
    ),
    (
        "xchacha_awslc_over_rustcrypto",
        ratio(t("seal_100B/xchacha_ours"), t("seal_100B/xchacha_rustcrypto")),
        None,
        "time(seal_100B/xchacha_ours) / time(seal_100B/xchacha_rustcrypto); < 1: ours is faster",
    ),
    (
        "seal_16k_vec_over_raw",
        ratio(t("seal_16KiB/raw_awslc_chacha20poly1305"), t("seal_16KiB/sealer_vec")),
        None,
        "throughput(seal_16KiB/sealer_vec) / throughput(raw), the copying API",
    ),
    (
        "open_1m_over_raw",
        ratio(t("open_1MiB/raw_awslc_chacha20poly1305"), t("open_1MiB/opener")),
        None,
        "throughput(open_1MiB/opener) / throughput(raw): where the copy in `Opener::receive` shows",
    ),
    (
        "cache_hit_speedup",
        ratio(t("resumption/fresh_key"), t("resumption/cache_hit")),
        (">=", 5.0),
        "time(resumption/fresh_key) / time(resumption/cache_hit)",
    ),
    (
        "ticket_speedup",
        ratio(t("resumption/fresh_key"), t("resumption/ticket")),
        (">=", 5.0),
        "time(resumption/fresh_key) / time(resumption/ticket)",
    ),
    (
        "first_request_no_x25519_over_x25519",
        ratio(t("server/first_request_no_x25519"), t("x25519/agree_raw_awslc")),
        None,
        "the non-agreement part of a first request, in X25519 units",
    ),
]


def verdict(value, target):
    if value is None:
        return "n/a (not measured)"
    if target is None:
        return ""
    op, bound = target
    ok = value <= bound if op == "<=" else value >= bound
    return "ok" if ok else "**MISSED**"


now = datetime.datetime.now(datetime.timezone.utc)
cpu_model = "unknown"
try:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
except OSError:
    pass
try:
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
except OSError:
    rustc = "unknown"
meta = {
    "date": now.strftime("%Y-%m-%d %H:%M UTC"),
    "machine": platform.machine(),
    "cpu": cpu_model,
    "cpus_online": os.cpu_count(),
    "rustc": rustc,
    "pinning": pinning,
    "command": reproduce,
    "loadavg_before_after": [load_before, load_after],
    "clock": clock,
}

lines = []
lines.append("| Operation | What | Median | Throughput |")
lines.append("|---|---|---:|---:|")
prev_group = None
for b in sorted(benches.values(), key=sort_key):
    note = NOTES.get(b["id"]) or NOTES.get(b["function"] or "", "")
    lines.append(f'| `{b["id"]}` | {note} | {fmt_time(b["median_ns"])} | {fmt_tp(b)} |')
table = "\n".join(lines)

rlines = ["| Ratio | Value | Target | Verdict | Definition |", "|---|---:|---|---|---|"]
missed = []
ratios_json = {}
for name, value, target, definition in RATIOS:
    v = verdict(value, target)
    if v == "**MISSED**":
        missed.append(name)
    tgt = f"{target[0]} {target[1]:.2f}" if target else "(info)"
    val = f"{value:.3f}" if value is not None else "n/a"
    rlines.append(f"| `{name}` | {val} | {tgt} | {v} | {definition} |")
    ratios_json[name] = {
        "value": value,
        "target": {"op": target[0], "bound": target[1]} if target else None,
        "ok": None if value is None or target is None else v == "ok",
        "definition": definition,
    }
ratio_table = "\n".join(rlines)

try:
    with open(os.path.join(criterion_dir, "strikes", "memory.json")) as f:
        mem = json.load(f)
    strike_memory = f"{mem['entries']:,} entries in {mem['bytes']:,} bytes, {mem['bytes_per_entry']:.1f} bytes per entry"
    if "worst_check_us" in mem:
        strike_memory += (
            f"; over 20 s more of checks at that rate (buckets expiring on the way) a check took"
            f" {mem['steady_check_ns']:,.0f} ns on average and {mem['worst_check_us']:,.1f} µs at most"
        )
    meta["strike_register_memory"] = mem
except (OSError, ValueError, KeyError):
    strike_memory = "not measured in this run"

report = f"""# httpcrypt-proto micro benchmarks

- Date: {meta["date"]}
- Machine: `{meta["machine"]}`, {meta["cpu"]} ({meta["cpus_online"]} CPUs online), pinned: `{pinning}`
- Compiler: `{rustc}`
- Clock: {clock_text}
- Load average (1/5/15 min) before / after: {load_before} / {load_after}
  (other work on the machine still adds noise through shared caches, mostly in the 1 MiB rows)
- Reproduce: `{reproduce}`
- Criterion: median of 20 samples, 0.5 s warm-up, 2 s measurement per benchmark;
  MB/s = 10^6 bytes of payload per second. Raw numbers: `results.json`.

Seal/open rows of one size share a group: every AEAD gets 20 bytes of associated data
(what a non-first record authenticates: previous tag || header). The opener and the
baseline opens read fresh ciphertext from batches of about 256 KiB, copied untimed.

{table}

## Ratios (same run)

{ratio_table}

Strike register at 50k requests/s over a 60 s window: {strike_memory}.

Where the time goes (profiles, with the commands to redo them): `PROFILE.md`.
"""

print()
print(table)
print()
print(ratio_table)
print()
if partial:
    print("filtered run: bench/micro/REPORT.md and results.json left as they were")
else:
    with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
        f.write(report)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(
            {
                "meta": meta,
                "benchmarks": [
                    {k: v for k, v in b.items() if not k.startswith("_")}
                    for b in sorted(benches.values(), key=sort_key)
                ],
                "ratios": ratios_json,
            },
            f,
            indent=2,
        )
        f.write("\n")
    print(f"wrote {os.path.relpath(os.path.join(out_dir, 'REPORT.md'))} and results.json")
if missed:
    print("targets missed: " + ", ".join(missed), file=sys.stderr)
    if check == "1":
        sys.exit(1)
PY
