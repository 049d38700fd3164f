#!/usr/bin/env python3
"""Where each microsecond of a request goes on the server.

For each configuration (the same `httpcrypt serve`: plaintext pass-through,
fresh client key, session-cache hit, ticket) and connection mode, the server
runs pinned to CPU 0 and `loadgen` drives it from CPU 1. `loadgen` measures
the server's CPU time per request (/proc/<pid>/stat over its window);
`perf record -e cpu-clock` samples the server over the same window and every
sample is put in one bucket by the function it landed in (self time). With
--steps the binaries keep frame pointers (bench/profile/run builds them so in
a separate target directory), perf records call graphs, and the inclusive
time of each protocol step (STEPS) is reported too.
Bucket share x CPU per request = microseconds per request in that bucket.
`strace -c` over a fixed request count gives system calls per request.

Writes bench/profile/REPORT.md and bench/profile/results.json (full mode).
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import servers  # noqa: E402

CONFIGS = [
    # name, loadgen proto, loadgen --keys
    ("plain", "plain", "fresh"),
    ("fresh", "hc", "fresh"),
    ("cached", "hc", "reuse"),
    ("ticket", "hc", "ticket"),
]

BUCKETS = [
    ("X25519", re.compile(r"x25519|curve25519", re.I)),
    ("AEAD (ChaCha20-Poly1305, HChaCha20)", re.compile(r"chacha|poly1305", re.I)),
    ("other crypto (SHA-3, BLAKE3, SipHash)", re.compile(r"sha3|keccak|blake3|siphash|sha2|sha256", re.I)),
    ("malloc/free", re.compile(r"^(malloc|_int_malloc|_int_free|cfree|free|realloc|_int_realloc|"
                               r"malloc_consolidate|unlink_chunk.*|tcache_.*|__libc_malloc|__libc_free|"
                               r"calloc|__libc_calloc)(@.*)?$")),
    ("memcpy/memset", re.compile(r"^__(memmove|memcpy|memset|memcmp|memchr|strlen)")),
    ("httpcrypt (protocol core and layer)", re.compile(r"^<?&?(httpcrypt|base64|httparse::)")),
    ("hyper, http, tokio, mio, bytes", re.compile(r"^<?&?(hyper|http|http_body|http_body_util|tokio|mio|bytes|"
                                                  r"tower|hyper_util|futures|httpdate|hashbrown|alloc|core|std)")),
]

# Protocol steps, by the (mangled) symbol of the function that runs each one;
# with a frame-pointer build `perf report --children` gives each one's
# inclusive time (its callees included), so a step's cost is what it would
# save if it vanished. Steps nest (the service wraps the rest), so the rows
# are not to be added up.
# A step is one function (a regular expression over mangled names, the
# largest match taken) or a tuple of functions that never call each other
# (their largest matches added: hyper calls the layer's `call`, then polls
# the future it returned).
STEPS = [
    ("HTTP/1 head parse (hyper)", r"Http1Transaction\$GT\$5parse"),
    ("HttpCrypt layer, all of it (admission in `call`, then the exchange's future; wraps the rows below)",
     (r"HttpCryptService\$LT\$S\$GT\$\$u20\$as\$u20\$tower_service.*4call", r"exchange12serve_sealed")),
    ("· admission: outer checks, cookie scan, key agreement or ticket or cache, GET query",
     r"server9admission5admit"),
    ("·· X25519", r"x25519|curve25519"),
    ("·· ticket open, short ticket's key", r"TicketKey4open|LayerAgreement.*9short_key"),
    ("· open the request (stream, inner head, Date, strike register)", r"exchange4open28_"),
    ("·· inner head parse", r"RequestHead\$u20\$as\$u20\$httpcrypt_proto\.\.inner\.\.parse\.\.Head\$GT\$(11parse_owned|5parse)"),
    ("·· strike register", r"StrikeStore\$GT\$(5check|9check_now)|LocalStrikes6record"),
    ("· inner request built for the service", r"service_request19build_inner_request"),
    ("· the wrapped service (static file)", r"StaticFiles\$u20\$as\$u20\$tower_service"),
    ("· seal the response head", r"exchange6answer17h"),
    ("·· new ticket", r"sessions(12issue_ticket|18issue_short_ticket)"),
    ("seal body frames (SealBody, the file read included)", r"SealBody\$LT\$B\$GT\$\$u20\$as\$u20\$http_body.*10poll_frame"),
    ("response write (hyper flush, kernel send incl. loopback delivery)", r"Buffered\$LT\$T\$C\$B\$GT\$10poll_flush"),
    ("request read (recv)", r"^__libc_recv"),
]


def perf_rows(data, *options):
    """The tab-separated rows of `perf report` over `data` (header and
    short lines skipped), as lists of fields."""
    r = subprocess.run(["perf", "report", "-i", data, *options, "-g", "none", "--stdio",
                        "--field-separator", "\t"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if line and not line.startswith("#") and len(parts) >= 3:
            yield parts


def symbol(field):
    return re.sub(r"^\[[.k]\]\s*", "", field.strip())


def perf_steps(data):
    """Inclusive share of each step (max over matching symbols: one step's
    function may appear under several monomorphised names, whose shares
    overlap, so the largest is taken; a step of several functions adds
    their largest shares)."""
    steps, best = {}, {}
    for parts in perf_rows(data, "--children", "--no-demangle", "--sort", "sym"):
        try:
            inc = float(parts[0].strip().rstrip("%")) / 100
        except ValueError:
            continue
        sym = symbol(parts[-1])
        for name, rxs in STEPS:
            for i, rx in enumerate(rxs if isinstance(rxs, tuple) else (rxs,)):
                if re.search(rx, sym, re.I):
                    best[(name, i)] = max(best.get((name, i), 0.0), inc)
    for (name, _), inc in best.items():
        steps[name] = steps.get(name, 0.0) + inc
    return steps


class Server(servers.Server):
    """`httpcrypt serve` on CPU 0 (optionally under `wrap`, e.g. strace), as
    the end-to-end benchmark starts it."""

    def __init__(self, binary, work, wrap=(), extra=()):
        self.port = servers.free_ports(1)[0]
        argv = list(wrap) + ["taskset", "-c", "0", binary, "serve", "--keys", os.path.join(work, "keys"),
                             "--root", os.path.join(work, "root"), "--listen", f"127.0.0.1:{self.port}",
                             "--mount", "/hc", "--pass-through", "--workers", "1", "--defence", "off"] + list(extra)
        super().__init__("httpcrypt", argv, [self.port], os.path.join(work, "server.log"))
        self.wait()
        # taskset execs the server; strace forks it: the httpcrypt process.
        self.pid = next((p for p in self.pids() if _exe(p).endswith("/httpcrypt")), self.proc.pid)


def _exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def loadgen(bins, port, proto, keys, mode, size, duration=None, count=None, pid=None, conns=32,
            pids=()):
    """One `loadgen run` on CPU 1; the server's CPU is counted over `pid`
    and `pids` (a server and its children, e.g. nginx's worker)."""
    argv = ["taskset", "-c", "1", os.path.join(bins, "loadgen"), "run", "--proto", proto,
            "--addr", f"127.0.0.1:{port}", "--path", f"/{size}", "--mode", mode, "--keys", keys,
            "--conns", str(conns)]
    if count:
        argv += ["--count", str(count), "--duration", "60"]
    else:
        argv += ["--duration", str(duration), "--warmup", "0.5"]
    for p in ([pid] if pid else []) + list(pids):
        argv += ["--cpu-pid", str(p)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"loadgen failed: {r.stderr}")
    d = json.loads(r.stdout)
    if d["errors"]:
        raise RuntimeError(f"loadgen errors: {d['first_error']}")
    return d


def classify(dso, sym):
    if dso.startswith("[kernel") or dso == "[vdso]":
        return "kernel"
    for name, rx in BUCKETS:
        if rx.search(sym):
            return name
    if "libc" in dso:
        return "libc, other"
    return "other"


def perf_buckets(data):
    shares = {}
    top = []
    for parts in perf_rows(data, "--no-children", "--sort", "dso,sym"):
        pct = float(parts[0].strip().rstrip("%"))
        dso = parts[1].strip()
        sym = symbol(parts[2])
        b = classify(dso, sym)
        shares[b] = shares.get(b, 0.0) + pct
        top.append((pct, b, sym[:90]))
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in shares.items()}, sorted(top, reverse=True)[:12]


def measured_run(bins, work, cfg, mode, size, duration, use_perf, steps=False):
    """CPU per request of one configuration, and with `use_perf` its split
    by function (perf may be present yet unable to record here, e.g. no
    perf_event access: the CPU total still stands)."""
    name, proto, keys = cfg
    srv = Server(os.path.join(bins, "httpcrypt"), work)
    data = os.path.join(work, f"perf-{name}-{mode}.data")
    perf = None
    try:
        # Warm the server (and, for tickets and the cache, the client's state).
        loadgen(bins, srv.port, proto, keys, mode, size, duration=0.5)
        if use_perf:
            graph = ["--call-graph", "fp"] if steps else []
            perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", *graph, "-p",
                                     str(srv.pid), "-o", data],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
        d = loadgen(bins, srv.port, proto, keys, mode, size, duration=duration, pid=srv.pid)
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=30)
    finally:
        srv.stop()
    shares, top, inclusive = {}, [], {}
    if os.path.exists(data):
        shares, top = perf_buckets(data)
        if steps:
            inclusive = perf_steps(data)
        os.unlink(data)
    return {"cpu_us": d["server_cpu_us_per_req"], "rps": d["rps"], "shares": shares, "top": top,
            "steps": inclusive}


def syscalls(bins, work, cfg, mode, size, count):
    name, proto, keys = cfg
    out = os.path.join(work, f"strace-{name}-{mode}.txt")
    try:
        srv = Server(os.path.join(bins, "httpcrypt"), work, wrap=["strace", "-f", "-c", "-o", out])
    except RuntimeError as e:  # strace could not start the server (no ptrace here)
        print(f"   strace: {e}", file=sys.stderr)
        return {}
    try:
        loadgen(bins, srv.port, proto, keys, mode, size, count=count, conns=4)
    finally:
        srv.stop()
    return strace_calls(out, count)


def strace_calls(path, count):
    """System calls per request from the table `strace -c -o path` wrote
    over `count` requests (futex left out); empty when strace wrote none
    (no ptrace here)."""
    calls = {}
    if not os.path.exists(path):
        return calls
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
            if m and m.group(2) not in ("total", "futex"):
                calls[m.group(2)] = int(m.group(1)) / count
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default="bench/profile")
    ap.add_argument("--before", help="results.json of an earlier build, shown side by side")
    ap.add_argument("--steps", action="store_true",
                    help="the binaries keep frame pointers: also record call graphs and report "
                         "inclusive time per protocol step")
    a = ap.parse_args()
    smoke = a.mode == "smoke"
    reps, duration, count = (1, 1.0, 200) if smoke else (3, 3.0, 2000)
    cells = [("newconn", "100b"), ("keepalive", "100b")]
    configs = CONFIGS[:2] if smoke else CONFIGS
    work = tempfile.mkdtemp(prefix="hc-profile-")
    os.makedirs(os.path.join(work, "root"))
    for n, s in (("100b", 100),):
        with open(os.path.join(work, "root", n), "wb") as f:
            f.write(os.urandom(s))
    subprocess.run([os.path.join(a.bin_dir, "httpcrypt"), "keygen", "--dir", os.path.join(work, "keys")],
                   check=True, stdout=subprocess.DEVNULL)
    have_perf = shutil.which("perf") is not None
    have_strace = shutil.which("strace") is not None
    res = {"label": a.label, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cells": {},
           "frame_pointers": a.steps}
    try:
        for mode, size in cells:
            for rep in range(reps):
                # Interleaved: every configuration once per repetition.
                for cfg in configs:
                    key = f"{cfg[0]}|{mode}/{size}"
                    r = measured_run(a.bin_dir, work, cfg, mode, size, duration, have_perf, a.steps)
                    res["cells"].setdefault(key, []).append(r)
                    print(f"   {key:28} rep {rep}: {r['cpu_us']:6.1f} µs/request", flush=True)
            if have_strace:
                for cfg in configs:
                    key = f"{cfg[0]}|{mode}/{size}"
                    res.setdefault("syscalls", {})[key] = syscalls(a.bin_dir, work, cfg, mode, size, count)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summarise(res)
    if smoke:
        for key, runs in res["cells"].items():
            assert all(r["cpu_us"] > 0 for r in runs), key
        print("profile smoke run ok")
        return
    if a.before:
        with open(a.before) as f:
            b = json.load(f)
        res["before"] = {"label": b.get("label", ""), "date": b.get("date", ""), "summary": b["summary"],
                         "syscalls": b.get("syscalls", {}), "frame_pointers": b.get("frame_pointers", False)}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "REPORT.md"), "w") as f:
        f.write(report(res))
    print(f"wrote {a.out}/REPORT.md and results.json")


def median_us(runs, field):
    """Per name in the runs' `field` (shares of CPU time), the median over
    the runs of share x CPU µs per request."""
    names = {n for r in runs for n in r.get(field, {})}
    return {n: statistics.median(r.get(field, {}).get(n, 0.0) * r["cpu_us"] for r in runs) for n in names}


def summarise(res):
    res["summary"] = {}
    for key, runs in res["cells"].items():
        cpu = statistics.median(r["cpu_us"] for r in runs)
        buckets = median_us(runs, "shares")
        steps = median_us(runs, "steps")
        res["summary"][key] = {"cpu_us": cpu, "cpu_us_min": min(r["cpu_us"] for r in runs),
                               "cpu_us_max": max(r["cpu_us"] for r in runs), "buckets_us": buckets,
                               "steps_us": steps}
        print(f"== {key}: {cpu:.1f} µs/request; " +
              ", ".join(f"{b} {v:.1f}" for b, v in sorted(buckets.items(), key=lambda x: -x[1])))


def report(res):
    order = ["kernel", "X25519", "AEAD (ChaCha20-Poly1305, HChaCha20)", "other crypto (SHA-3, BLAKE3, SipHash)",
             "httpcrypt (protocol core and layer)", "hyper, http, tokio, mio, bytes", "malloc/free",
             "memcpy/memset", "libc, other", "other"]
    out = ["# Where each microsecond goes: server CPU per request, by function",
           "",
           f"Generated by `bench/profile/run` on {res['date']}{(' (' + res['label'] + ')') if res['label'] else ''}. "
           "One `httpcrypt serve` worker pinned to CPU 0 (`--defence off`, tickets on), `loadgen` on CPU 1 "
           "with 32 connections, a 100 B file. CPU per request is the server's own CPU time over the "
           "load window (median of 3 interleaved repetitions of 3 s); `perf record -e cpu-clock` (no "
           "hardware counters on this machine) samples the server over the same window, and each "
           "sample is counted in the bucket of the function it landed in (self time), so the buckets "
           "add up to the total. " +
           ("The binaries are a release build with frame pointers kept (`-C force-frame-pointers=yes`), "
            "so perf also records call graphs and the step tables give inclusive times. "
            if res.get("frame_pointers") else
            "The release build has no frame pointers: inclusive times per caller are not taken. ") +
           "Machine noise between runs is large (2 shared vCPUs); compare the columns of "
           "one run, not runs of different days.",
           ""]
    for mode in ("newconn", "keepalive"):
        keys = [k for k in res["summary"] if k.endswith(f"|{mode}/100b")]
        if not keys:
            continue
        cols = [k.split("|")[0] for k in keys]
        out += [f"## {'New connection per request' if mode == 'newconn' else 'Keep-alive'}, 100 B "
                "(µs of server CPU per request)", "",
                "| bucket | " + " | ".join(cols) + " | " + " | ".join(f"{c} − plain" for c in cols[1:]) + " |",
                "|---|" + "---:|" * (2 * len(cols) - 1)]
        s = {c: res["summary"][f"{c}|{mode}/100b"] for c in cols}
        for b in order:
            vals = [s[c]["buckets_us"].get(b, 0.0) for c in cols]
            if max(vals) < 0.05:
                continue
            out.append(f"| {b} | " + " | ".join(f"{v:.1f}" for v in vals) + " | " +
                       " | ".join(f"{v - vals[0]:+.1f}" for v in vals[1:]) + " |")
        tot = [s[c]["cpu_us"] for c in cols]
        out.append("| **total (measured CPU)** | " + " | ".join(f"**{v:.1f}**" for v in tot) + " | " +
                   " | ".join(f"**{v - tot[0]:+.1f}**" for v in tot[1:]) + " |")
        out.append("| range over repetitions | " +
                   " | ".join(f"{s[c]['cpu_us_min']:.0f}–{s[c]['cpu_us_max']:.0f}" for c in cols) + " | " +
                   " | ".join("" for _ in tot[1:]) + " |")
        out.append("| ratio to plain | " + " | ".join(f"{v / tot[0]:.2f}" for v in tot) + " | " +
                   " | ".join("" for _ in tot[1:]) + " |")
        out.append("")
        sc = res.get("syscalls", {})
        if sc:
            names = sorted({n for c in cols for n in sc.get(f"{c}|{mode}/100b", {})
                            if sc[f"{c}|{mode}/100b"][n] >= 0.01})
            out += ["System calls per request (`strace -f -c`, 2000 requests over 4 connections; futex "
                    "left out):", "", "| call | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
            for n in names:
                out.append(f"| {n} | " + " | ".join(f"{sc.get(f'{c}|{mode}/100b', {}).get(n, 0):.2f}"
                                                   for c in cols) + " |")
            out.append("")
        if any(s[c].get("steps_us") for c in cols):
            out += ["Inclusive time per protocol step (µs per request; a row includes the rows below it "
                    "with more dots, so rows do not add up; medians over the repetitions):", "",
                    "| step | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
            for name, _ in STEPS:
                vals = [s[c].get("steps_us", {}).get(name, 0.0) for c in cols]
                if max(vals) < 0.05:
                    continue
                out.append(f"| {name} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
            out.append("")
        out += ["Hottest functions (self time, first repetition):", ""]
        for c in cols:
            top = res["cells"][f"{c}|{mode}/100b"][0]["top"][:6]
            out.append(f"- **{c}**: " + "; ".join(f"`{sym}` {pct:.1f} %" for pct, _, sym in top))
        out.append("")
    b = res.get("before")
    if b:
        out += [f"## Before and after: {b['label'] or 'earlier build'} ({b['date']}) → "
                f"{res['label'] or 'this build'}", "",
                "Two runs of this script on the same machine, at the dates above"
                f" (frame pointers kept: before {'yes' if b.get('frame_pointers') else 'no'}, after "
                f"{'yes' if res.get('frame_pointers') else 'no'}). The CPU totals move with "
                "the machine's noise as much as with the code (compare each build's ratio to its own "
                "plain row, and the range rows above); the system-call counts are exact.", "",
                "| cell | before µs | after µs | before / plain | after / plain | getrandom before | "
                "getrandom after |", "|---|---:|---:|---:|---:|---:|---:|"]
        for key in res["summary"]:
            if key not in b["summary"]:
                continue
            plain = "plain|" + key.split("|")[1]
            bp, ap_ = b["summary"].get(plain), res["summary"].get(plain)
            g0 = b.get("syscalls", {}).get(key, {}).get("getrandom", 0.0)
            g1 = res.get("syscalls", {}).get(key, {}).get("getrandom", 0.0)
            out.append(f"| {key} | {b['summary'][key]['cpu_us']:.1f} | {res['summary'][key]['cpu_us']:.1f} | "
                       f"{b['summary'][key]['cpu_us'] / bp['cpu_us']:.2f} | "
                       f"{res['summary'][key]['cpu_us'] / ap_['cpu_us']:.2f} | {g0:.2f} | {g1:.2f} |")
        out.append("")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
