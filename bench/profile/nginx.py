#!/usr/bin/env python3
"""The plaintext path against nginx, side by side: where the Rust server
stack spends more than nginx does per request.

`bench/run` gives the ratio (`newconn_100b_cpu_httpcrypt_plain_over_nginx_plain`);
this tool says where the difference lies. nginx (one worker, the
configuration of bench/harness) and `httpcrypt serve --workers 1 --no-tickets`
run at the same time on CPU 0, and `loadgen run --proto plain` on CPU 1
alternates between them, a 100 B file each time:

- server CPU per request (the processes' own accounting) and the ratio, per
  repetition, and their medians;
- (full mode) `perf record -e cpu-clock` of each server under the same
  load: kernel against user space, and user space by bucket (allocator,
  copies, the rest of the server's own code);
- (full mode) `strace -f -c`: system calls per request.

Writes bench/profile/NGINX.md (full mode) and prints the table in every mode.
"""

import argparse
import concurrent.futures
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
import servers  # noqa: E402
# bench/profile/profile.py (its load generator, perf and strace readers),
# loaded as ab.py loads it: its name is the standard library's `profile`.
from ab import P  # noqa: E402

# User-space buckets of the perf table (self time, first match).
USER_BUCKETS = [
    ("allocator (glibc malloc and free)",
     re.compile(r"^(malloc|_int_malloc|_int_free|cfree|free|realloc|_int_realloc|"
                r"malloc_consolidate|unlink_chunk.*|tcache_.*|__libc_malloc|__libc_free|"
                r"calloc|__libc_calloc|ngx_palloc.*|ngx_pnalloc|ngx_pcalloc|ngx_alloc|"
                r"ngx_create_pool|ngx_destroy_pool|ngx_reset_pool)(@.*)?$")),
    ("copies (memcpy, memmove, memset)", re.compile(r"^__(memmove|memcpy|memset|memcmp|memchr|strlen)")),
    ("system call wrappers (libc)", re.compile(r"^(__)?(GI_)?_*(libc_)?(close|accept4?|epoll_\w+|recv\w*|read|"
                                               r"writev|open\w*|statx|fstat\w*|newfstatat|setsockopt|sendfile\w*|"
                                               r"clock_gettime.*|__vdso.*|syscall)(@.*)?$")),
]


def loadgen(bins, port, pids, mode, duration=None, count=None, conns=32):
    """A plaintext `loadgen run` of the 100 B file; CPU counted over `pids`."""
    return P.loadgen(bins, port, "plain", "fresh", mode, "100b", duration=duration, count=count,
                     conns=conns, pids=pids)


def perf_split(data, cpu_us_per_req):
    """µs per request: kernel, user space by bucket, from perf's self time."""
    rest = "the rest of user space (the server's own code)"
    rows = {"kernel": 0.0, **{name: 0.0 for name, _ in USER_BUCKETS}, rest: 0.0}
    for parts in P.perf_rows(data, "--no-children", "--sort", "dso,sym"):
        try:
            share = float(parts[0].strip().rstrip("%")) / 100
        except ValueError:
            continue
        sym = P.symbol(parts[-1])
        if "kernel" in parts[1]:
            name = "kernel"
        else:
            name = next((n for n, rx in USER_BUCKETS if rx.search(sym)), rest)
        rows[name] += share
    return {k: v * cpu_us_per_req for k, v in rows.items()}


def strace_counts(bins, port, pid, mode, n):
    """System calls per request of the server process `pid` over `n` requests."""
    out = tempfile.mktemp(prefix="hc-nginx-strace-")
    st = subprocess.Popen(["strace", "-f", "-c", "-p", str(pid), "-o", out],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    loadgen(bins, port, [pid], mode, count=n, conns=4)
    st.terminate()
    st.wait()
    calls = P.strace_calls(out, n)
    if os.path.exists(out):
        os.unlink(out)
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--conn-mode", choices=["newconn", "keepalive"], default="newconn")
    ap.add_argument("--out", default=HERE)
    a = ap.parse_args()
    smoke = a.mode == "smoke"
    reps, duration = (1, 0.5) if smoke else (a.reps, a.duration)
    work = tempfile.mkdtemp(prefix="hc-nginx-")
    fx = servers.make_fixtures(work, os.path.join(a.bin_dir, "httpcrypt"))
    ng = servers.start_nginx(work, fx, 1, "0", "p")
    hc = servers.start_httpcrypt(work, fx, os.path.join(a.bin_dir, "httpcrypt"), 1, "0", "p",
                                 tickets=False)
    sides = {}
    try:
        ng.wait()
        hc.wait()
        # nginx: its master and worker; httpcrypt: taskset execs the server.
        sides = {"nginx": (ng.addr["plain"], ng.pids()), "httpcrypt": (hc.addr["http"], hc.pids())}
        us = {k: [] for k in sides}
        for rep in range(reps):
            order = list(sides) if rep % 2 == 0 else list(reversed(sides))
            for name in order:
                port, pids = sides[name]
                d = loadgen(a.bin_dir, port, pids, a.conn_mode, duration=duration)
                us[name].append(d["server_cpu_us_per_req"])
                print(f"   rep {rep} {name:9s} {us[name][-1]:6.2f} µs/request", flush=True)
        ratios = [h / n for h, n in zip(us["httpcrypt"], us["nginx"])]
        med = {k: statistics.median(v) for k, v in us.items()}
        print(f"{a.conn_mode}, 100 B: nginx {med['nginx']:.2f} µs, httpcrypt plaintext "
              f"{med['httpcrypt']:.2f} µs, ratio {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")
        if smoke:
            return
        split, calls = {}, {}
        for name, (port, pids) in sides.items():
            data = os.path.join(work, f"perf-{name}.data")
            target = pids[-1]
            # perf records 2 s in the middle of a 3 s load window.
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                run = ex.submit(loadgen, a.bin_dir, port, pids, a.conn_mode, duration=3)
                time.sleep(1.0)
                subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", "10000", "-p", str(target),
                                "-o", data, "--", "sleep", "2"], capture_output=True)
                d = run.result()
            split[name] = perf_split(data, d["server_cpu_us_per_req"])
            calls[name] = strace_counts(a.bin_dir, port, target, a.conn_mode, 2000)
        write(a, us, ratios, med, split, calls)
    finally:
        hc.stop()
        ng.stop()
        shutil.rmtree(work, ignore_errors=True)


def write(a, us, ratios, med, split, calls):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    lines = [
        "# The plaintext path against nginx: where the difference lies",
        "",
        f"Generated by `bench/profile/nginx` on {now} ({rev}). nginx (one worker, the "
        "configuration of `bench/harness`) and `httpcrypt serve --workers 1 --no-tickets` run "
        "at the same time on CPU 0; `loadgen run --proto plain` on CPU 1 alternates between them "
        f"({a.conn_mode}, 100 B, 32 connections, {a.duration:g} s per run). CPU per request is "
        "each server's own CPU time over the load window.",
        "",
        "| repetition | nginx µs | httpcrypt µs | ratio |",
        "|---|---:|---:|---:|",
    ]
    for i, (n, h) in enumerate(zip(us["nginx"], us["httpcrypt"])):
        lines.append(f"| {i} | {n:.2f} | {h:.2f} | {h / n:.3f} |")
    lines += [f"| **median** | **{med['nginx']:.2f}** | **{med['httpcrypt']:.2f}** | "
              f"**{statistics.median(ratios):.3f}** |", "",
              "By `perf record -e cpu-clock` of each server under the same load (one run of 2 s; "
              "self time, µs per request; perf's sampling adds its own cost to both):", "",
              "| where | nginx | httpcrypt | difference |", "|---|---:|---:|---:|"]
    for k in split["nginx"]:
        n, h = split["nginx"][k], split["httpcrypt"][k]
        lines.append(f"| {k} | {n:.2f} | {h:.2f} | {h - n:+.2f} |")
    tn, th = sum(split["nginx"].values()), sum(split["httpcrypt"].values())
    lines += [f"| **total** | **{tn:.2f}** | **{th:.2f}** | **{th - tn:+.2f}** |", "",
              "System calls per request (`strace -f -c`, 2,000 requests over 4 connections; "
              "futex left out):", "", "| call | nginx | httpcrypt |", "|---|---:|---:|"]
    for k in sorted(set(calls["nginx"]) | set(calls["httpcrypt"])):
        lines.append(f"| {k} | {calls['nginx'].get(k, 0):.2f} | {calls['httpcrypt'].get(k, 0):.2f} |")
    lines.append("")
    path = os.path.join(a.out, "NGINX.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
