#!/usr/bin/env bash
# Smoke-runs every cargo-fuzz target of fuzz/ for a short time.
#
#   scripts/fuzz-smoke.sh [SECONDS]        (default 30 seconds per target)
#
# Installs what is missing (the nightly toolchain, cargo-fuzz), builds all
# targets once (release, debug assertions and overflow checks on, ASan), then
# runs each target on a throw-away copy of its checked-in seeds
# (fuzz/seeds/<target>/) and of the reproducers of crashes found before
# (fuzz/artifacts-found/<target>/), so the tree stays clean. Prints a
# summary table and exits non-zero if any target crashed, hung or failed to
# run. Bounded: one build, then at most SECONDS + 120 s per target, FUZZ_JOBS
# targets at a time.
#
# A crashing input is kept where cargo-fuzz puts it, fuzz/artifacts/<target>/
# (git-ignored), next to the run's log. Reproduce with
#   cd fuzz && cargo +nightly fuzz run -O -a <target> artifacts/<target>/<file>
# and minimise with `cargo +nightly fuzz tmin -O -a <target> <file>`.
#
# Environment: FUZZ_TARGETS="a b" restricts the run to those targets;
# FUZZ_JOBS=N runs N targets at once (default: the CPUs, at most 4).
set -euo pipefail

secs="${1:-30}"
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [SECONDS]  (a positive whole number; got '$secs')" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"
toolchain=nightly

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'fuzz-smoke: %s\n' "$*" >&2; exit 2; }

# --- tools -----------------------------------------------------------------

command -v rustup >/dev/null 2>&1 || die "rustup is required (cargo-fuzz needs a nightly toolchain)"
if ! rustup toolchain list | grep -q "^${toolchain}-"; then
    log "installing the $toolchain toolchain"
    rustup toolchain install "$toolchain" --profile minimal \
        || die "no nightly toolchain and 'rustup toolchain install nightly --profile minimal' failed; cargo-fuzz needs nightly (-Zsanitizer)"
fi
if ! command -v c++ >/dev/null 2>&1; then
    # libfuzzer-sys compiles libFuzzer (C++) in its build script.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing a C++ compiler (libfuzzer-sys builds libFuzzer)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null \
            || die "could not install g++"
    else
        die "a C++ compiler (c++) is required to build libFuzzer"
    fi
fi
if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked || die "cargo install cargo-fuzz failed"
fi

# --- build -------------------------------------------------------------------

cd "$fuzz_dir"
build_flags=(-O -a)
log "building all fuzz targets ($(cargo "+$toolchain" fuzz --version))"
cargo "+$toolchain" fuzz build "${build_flags[@]}"

mapfile -t all_targets < <(cargo "+$toolchain" fuzz list)
if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
    for t in "${targets[@]}"; do
        printf '%s\n' "${all_targets[@]}" | grep -qx "$t" || die "unknown target '$t'"
    done
else
    targets=("${all_targets[@]}")
fi

# Longest input per target: a few records or messages, not megabytes.
max_len_for() {
    case "$1" in
        stream_open | outer_request) echo 4096 ;;
        tlsa) echo 2304 ;; # past tlsa::MAX_DER
        inner_message) echo 2048 ;;
        cookie_scan | cert | replay | rspamd_key_header | rspamd_keypair) echo 1024 ;;
        *) echo 256 ;;
    esac
}
dict_for() {
    case "$1" in
        inner_message | outer_request | cookie_scan | cert) echo "$fuzz_dir/dicts/http.dict" ;;
        rspamd_*) echo "$fuzz_dir/dicts/rspamd.dict" ;;
        tlsa) echo "$fuzz_dir/dicts/der.dict" ;;
        *) echo "" ;;
    esac
}

# --- run ---------------------------------------------------------------------

work="$(mktemp -d "${TMPDIR:-/tmp}/fuzz-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT

stat_of() { # stat name, log file
    sed -n "s/^stat::$1: *\([0-9][0-9]*\).*/\1/p" "$2" | tail -n 1
}

# One line of the summary table: target, seconds, execs, execs/s, corpus, result.
row() {
    printf '%-20s %7s %12s %10s %7s  %s\n' "$@"
}

# One target per job, FUZZ_JOBS at a time (default: the number of CPUs, at
# most 4); each libFuzzer process uses one core, so the wall time shrinks
# while every target still gets its SECONDS.
run_target() { # target; writes its line of the table to $work/rows/<target>
    local t="$1"
    local corpus="$work/corpus/$t"
    mkdir -p "$corpus" "$fuzz_dir/artifacts/$t"
    # Seeds, plus the reproducers of crashes found earlier (regression inputs:
    # libFuzzer runs the whole corpus before mutating it).
    for d in "$fuzz_dir/seeds/$t" "$fuzz_dir/artifacts-found/$t"; do
        if [ -d "$d" ]; then
            cp "$d/"* "$corpus/" 2>/dev/null || true
        fi
    done
    local seeds
    seeds=$(find "$corpus" -type f | wc -l)
    local args=(
        -max_total_time="$secs"
        -rss_limit_mb=2048
        -max_len="$(max_len_for "$t")"
        -timeout=10
        -print_final_stats=1
    )
    local dict
    dict="$(dict_for "$t")"
    [ -n "$dict" ] && args+=(-dict="$dict")
    local runlog="$work/$t.log"
    log "running $t for ${secs}s ($seeds seed and regression inputs)"
    local start rc=0
    start=$(date +%s)
    # The outer timeout bounds a target that stops answering (startup, a hang
    # inside one input beyond -timeout); libFuzzer stops itself at max_total_time.
    timeout --kill-after=10 "$((secs + 120))" \
        cargo "+$toolchain" fuzz run "${build_flags[@]}" "$t" "$corpus" -- "${args[@]}" \
        >"$runlog" 2>&1 || rc=$?
    local elapsed execs rate corpus_n result
    elapsed=$(($(date +%s) - start))
    execs="$(stat_of number_of_executed_units "$runlog")"
    rate="$(stat_of average_exec_per_sec "$runlog")"
    corpus_n=$(find "$corpus" -type f | wc -l)
    if [ "$rc" = 0 ]; then
        result=ok
    else
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            result="hung (killed after $((secs + 120))s)"
        elif grep -q -e '^==[0-9]*== *ERROR' -e 'ERROR: libFuzzer' -e 'panicked at' "$runlog"; then
            local artifact known
            artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$runlog" | tail -n 1)"
            result="CRASH ${artifact#"$fuzz_dir/"}"
            for known in "$fuzz_dir/artifacts-found/$t/"*; do
                if [ -f "$artifact" ] && [ -f "$known" ] && cmp -s "$artifact" "$known"; then
                    result="CRASH (known, not fixed yet: ${known#"$fuzz_dir/"})"
                fi
            done
        else
            result="error (exit $rc)"
        fi
        local keep
        keep="$fuzz_dir/artifacts/$t/smoke-$(date +%Y%m%d-%H%M%S).log"
        cp "$runlog" "$keep"
        {
            echo "---- $t: $result (log: ${keep#"$root/"})"
            grep -m 3 -A 3 -e 'panicked at' -e 'ERROR: libFuzzer' -e '^error' "$runlog" || tail -n 20 "$runlog"
            echo "----"
        } >&2
    fi
    row "$t" "$elapsed" "${execs:--}" "${rate:--}" "$corpus_n" "$result" >"$work/rows/$t"
}

jobs_max="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || die "FUZZ_JOBS must be a positive whole number (got '$jobs_max')"
[ -n "${FUZZ_JOBS:-}" ] || [ "$jobs_max" -le 4 ] || jobs_max=4
mkdir -p "$work/rows"
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
        wait -n || true
    done
    run_target "$t" &
done
wait

declare -a rows
failed=0
for t in "${targets[@]}"; do
    line="$(cat "$work/rows/$t" 2>/dev/null || row "$t" - - - - "error (no result)")"
    rows+=("$line")
    [[ "$line" == *"  ok" ]] || failed=1
done

echo
row target seconds execs execs/s corpus result
row -------------------- ------- ------------ ---------- ------- ------
printf '%s\n' "${rows[@]}"
if [ "$failed" != 0 ]; then
    echo "fuzz-smoke: at least one target failed; see above" >&2
    exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ran ${secs}s without a crash"
