#!/usr/bin/env bash
# Micro benchmark of the Go client: one X25519, a first request (key pair,
# X25519, seal the request, open the response), and the sealed stream
# against raw XChaCha20-Poly1305 (chacha20poly1305.NewX) over the same
# 16 KiB chunks. The stream and the primitive run alternately inside each
# iteration (BenchmarkPair), so both see the same machine load; the table
# shows the median of COUNT runs (default 7). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")"
COUNT="${COUNT:-7}"
BENCHTIME="${BENCHTIME:-1s}"
out="$(timeout 900 go test -run '^$' -bench 'X25519|FirstRequest|Pair' -benchtime "$BENCHTIME" -count "$COUNT" .)"
echo "$out" | awk -v count="$COUNT" -v gover="$(go env GOVERSION)" '
function median(key,    n, i, j, t, a) {
  n = cnt[key]
  for (i = 1; i <= n; i++) a[i] = val[key, i]
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function add(key, v) { cnt[key]++; val[key, cnt[key]] = v }
/^cpu:/ { $1 = ""; cpu = substr($0, 2) }
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  add(name " ns", $3)
  for (i = 4; i < NF; i++) {
    if ($(i + 1) == "stream-ns/op") add(name " stream", $i)
    if ($(i + 1) == "xchacha-ns/op") add(name " xchacha", $i)
    if ($(i + 1) == "overhead-%") add(name " overhead", $i)
  }
}
END {
  printf "%s, %s, median of %d runs (`COUNT=%d ./bench.sh`)\n\n", gover, cpu, count, count
  printf "| operation | size | httpcrypt | raw XChaCha20-Poly1305 (NewX) | overhead |\n"
  printf "|---|---|---|---|---|\n"
  printf "| one X25519 agreement (crypto/ecdh) | 32 B | %.1f µs | | |\n", median("BenchmarkX25519 ns") / 1000
  printf "| first request: key pair, X25519, seal request, open response | ~100 B | %.1f µs | | |\n", median("BenchmarkFirstRequest ns") / 1000
  split("seal open", ops, " "); split("16KiB 1MiB", sizes, " ")
  bytes["16KiB"] = 16384; bytes["1MiB"] = 1048576
  for (i = 1; i <= 2; i++) for (j = 1; j <= 2; j++) {
    k = "BenchmarkPair/" ops[i] "/" sizes[j]
    s = median(k " stream"); x = median(k " xchacha")
    printf "| %s (16 KiB records) | %s | %.0f MB/s (%.1f µs) | %.0f MB/s (%.1f µs) | %+.1f %% |\n", ops[i], sizes[j], bytes[sizes[j]] * 1000 / s, s / 1000, bytes[sizes[j]] * 1000 / x, x / 1000, median(k " overhead")
  }
}'
