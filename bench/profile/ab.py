#!/usr/bin/env python3
"""Side-by-side A/B of two `httpcrypt serve` builds on this machine.

CPU time per request moves by 10-50 % between runs here, so a "before" from
an earlier run says little about a change worth a few per cent. This runs
both builds in the same minutes, alternating: for every repetition, mode
and configuration, build A then build B (the order flips every repetition),
each a fresh `httpcrypt serve --workers 1` on CPU 0 with `loadgen` on CPU 1,
as bench/profile does. Reported: the median server CPU per request of each
side, B's change against A, and for each side the issue's ratio of every
encrypted configuration to the plaintext path, taken per repetition.

Writes bench/profile/AB.md and ab.json (full mode); prints the table in
every mode.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_profile():
    """bench/profile/profile.py (its name is taken by the standard library's
    `profile`), for its server and load generator drivers."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("hc_profile", os.path.join(HERE, "profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


P = _load_profile()
CONFIGS = {c[0]: c for c in P.CONFIGS}


# The files a run can ask for (`--size`): bytes and how the report names them.
SIZES = {"100b": (100, "100 B"), "1m": (1024 * 1024, "1 MiB")}


def measure(binary, bins, work, cfg, mode, duration, flags=(), size="100b", settle=0.5):
    """Server CPU µs per request of one configuration on a fresh server
    started with `serve`'s extra `flags`, after `settle` seconds of the same
    load (a warm-up; long enough, the server's tables reach the state a busy
    server keeps them in: a session cache that has rolled over, a full strike
    register)."""
    _, proto, keys = cfg
    srv = P.Server(binary, work, extra=flags)
    try:
        P.loadgen(bins, srv.port, proto, keys, mode, size, duration=settle)
        d = P.loadgen(bins, srv.port, proto, keys, mode, size, duration=duration, pid=srv.pid)
    finally:
        srv.stop()
    return d["server_cpu_us_per_req"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="httpcrypt binary A (before)")
    ap.add_argument("--b", required=True, help="httpcrypt binary B (after)")
    ap.add_argument("--a-label", default="A")
    ap.add_argument("--b-label", default="B")
    ap.add_argument("--bin-dir", required=True, help="where loadgen is")
    ap.add_argument("--a-flags", default="", help="extra `serve` options of side A")
    ap.add_argument("--b-flags", default="", help="extra `serve` options of side B")
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--configs", default="plain,cached,ticket",
                    help="comma-separated, from " + ",".join(CONFIGS) + " (the ticket "
                    "configuration asks for short tickets, spec §7.3: leave it out against a build "
                    "that predates them)")
    ap.add_argument("--size", choices=sorted(SIZES), default="100b", help="the file asked for")
    ap.add_argument("--modes", default="newconn,keepalive", help="comma-separated")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds of the same load before each measurement (a fresh server's "
                    "session cache first rolls over after 32,768 new sessions: about 3 s of fresh keys)")
    ap.add_argument("--out", default="bench/profile")
    a = ap.parse_args()
    smoke = a.mode == "smoke"
    reps, duration = (1, 0.5) if smoke else (a.reps, 2.0)
    modes = ["keepalive"] if smoke else a.modes.split(",")
    configs = ["plain", "ticket"] if smoke else a.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS] + [m for m in modes if m not in ("newconn", "keepalive")]
    if unknown or "plain" not in configs:
        sys.exit(f"ab: unknown configurations or modes {unknown}, or no plain (the ratios need it)")
    work = tempfile.mkdtemp(prefix="hc-ab-")
    os.makedirs(os.path.join(work, "root"))
    with open(os.path.join(work, "root", a.size), "wb") as f:
        f.write(os.urandom(SIZES[a.size][0]))
    subprocess.run([a.b, "keygen", "--dir", os.path.join(work, "keys")], check=True,
                   stdout=subprocess.DEVNULL)
    sides = {"A": a.a, "B": a.b}
    flags = {"A": a.a_flags.split(), "B": a.b_flags.split()}
    runs = {}  # (side, mode, config) -> [µs per rep]
    try:
        for rep in range(reps):
            order = ["A", "B"] if rep % 2 == 0 else ["B", "A"]
            for mode in modes:
                for c in configs:
                    for side in order:
                        us = measure(sides[side], a.bin_dir, work, CONFIGS[c], mode, duration, flags[side],
                                     a.size, 0.5 if smoke else a.settle)
                        runs.setdefault(f"{side}|{mode}|{c}", []).append(us)
                        print(f"   rep {rep} {mode:9} {c:7} {side}: {us:6.1f} µs/request", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    for mode in modes:
        for c in configs:
            ma = statistics.median(runs[f"A|{mode}|{c}"])
            mb = statistics.median(runs[f"B|{mode}|{c}"])
            row = {"mode": mode, "config": c, "a_us": ma, "b_us": mb, "change": mb / ma - 1}
            if c != "plain":
                for side in "AB":
                    per = [x / p for x, p in zip(runs[f"{side}|{mode}|{c}"], runs[f"{side}|{mode}|plain"])]
                    row[f"{side.lower()}_over_plain"] = statistics.median(per)
            rows.append(row)
    lines = [f"{'mode':9} {'config':7} {a.a_label:>10} {a.b_label:>10} {'change':>8}   "
             f"{'A/plain':>7} {'B/plain':>7}"]
    for r in rows:
        ratio = (f"{r['a_over_plain']:7.2f} {r['b_over_plain']:7.2f}" if "a_over_plain" in r else "")
        lines.append(f"{r['mode']:9} {r['config']:7} {r['a_us']:10.1f} {r['b_us']:10.1f} "
                     f"{100 * r['change']:+7.1f}%   {ratio}")
    print("\n".join(lines))
    if smoke:
        assert all(r["a_us"] > 0 and r["b_us"] > 0 for r in rows)
        print("ab smoke run ok")
        return
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    res = {"date": date, "a": a.a_label, "b": a.b_label, "reps": reps, "duration_s": duration,
           "settle_s": a.settle, "size": a.size,
           "runs": runs, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "ab.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = [
        "# Side-by-side A/B of two server builds",
        "",
        f"Generated by `bench/profile/ab` on {date}: A = `{a.a_label}`, B = `{a.b_label}`. "
        f"{reps} repetitions; in each, every mode and configuration runs on build A and on build B "
        "back to back (the order flips every repetition), each on a fresh `httpcrypt serve --workers 1` "
        f"pinned to CPU 0 with `loadgen` on CPU 1 for {duration:g} s after {a.settle:g} s of the "
        "same load, "
        f"{SIZES[a.size][1]} file. "
        "Server CPU µs per request (user + system, from /proc), medians; the ratios to the plaintext "
        "path are taken per repetition, as in `bench/run`."
        + "".join(f" Side {side}'s server also had the `serve` options `{' '.join(f)}`."
                  for side, f in flags.items() if f),
        "",
        f"| mode | configuration | {a.a_label} µs | {a.b_label} µs | change | "
        f"{a.a_label} / plain | {a.b_label} / plain |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ra = f"{r['a_over_plain']:.2f}" if "a_over_plain" in r else ""
        rb = f"{r['b_over_plain']:.2f}" if "b_over_plain" in r else ""
        md.append(f"| {r['mode']} | {r['config']} | {r['a_us']:.1f} | {r['b_us']:.1f} | "
                  f"{100 * r['change']:+.1f} % | {ra} | {rb} |")
    md.append("")
    with open(os.path.join(a.out, "AB.md"), "w") as f:
        f.write("\n".join(md))
    print(f"wrote {a.out}/AB.md and ab.json")


if __name__ == "__main__":
    sys.exit(main())
