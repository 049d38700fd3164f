#!/usr/bin/env python3
"""User-space instructions per request on the server, counted by callgrind.

CPU time on a shared 2-vCPU machine moves by 10-50 % between runs; the number
of instructions the server executes per request does not. For each
configuration (the same `httpcrypt serve` as in bench/profile: plaintext
pass-through, fresh client key, session-cache hit, ticket) and connection
mode, the server runs under `valgrind --tool=callgrind` with one worker (a
single thread), `loadgen` sends a warm-up, the counters are zeroed, then a
fixed number of requests is sent and the counters dumped. Reported per
request: all instructions (user space; the kernel is not counted), memory
allocations, and the functions with the most instructions of their own.
The full run adds requests the layer answers at once (key fetch, a bad
nonce, a refused method), sent on one keep-alive connection by this script.

Writes bench/profile/INSTRUCTIONS.md and bench/profile/instructions.json
(full mode); prints the table in every mode.
"""

import argparse
import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import servers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_profile():
    """bench/profile/profile.py (its name is taken by the standard library's
    `profile`), for its load generator driver."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("hc_profile", os.path.join(HERE, "profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def loadgen(bins, port, proto, keys, mode, count):
    """`count` requests for the 100 B file over 4 connections; how many ran."""
    return _load_profile().loadgen(bins, port, proto, keys, mode, "100", count=count, conns=4)["requests"]

CONFIGS = [
    # name, loadgen proto, loadgen --keys
    ("plain", "plain", "fresh"),
    ("fresh", "hc", "fresh"),
    ("cached", "hc", "reuse"),
    ("ticket", "hc", "ticket"),
]
# Requests the layer answers without opening anything (keep-alive, one
# connection): name, request bytes, the status it must get.
ANSWERED = [
    ("options", b"OPTIONS /hc/ HTTP/1.1\r\nHost: bench.test\r\n\r\n", 200),
    ("bad-nonce", b"GET /hc/bogus HTTP/1.1\r\nHost: bench.test\r\n\r\n", 400),
    ("method", b"PUT /hc/x HTTP/1.1\r\nHost: bench.test\r\nContent-Length: 0\r\n\r\n", 405),
]
# Allocation entry points (glibc's, which Rust's global allocator and aws-lc use;
# Rust's system allocator asks for an alignment above 16 bytes with posix_memalign).
MALLOC = ("malloc", "__libc_malloc", "calloc", "__libc_calloc", "posix_memalign", "aligned_alloc",
          "memalign")

# Where a function's own instructions are counted in the breakdown by
# component, in this order of the table. The protocol's own work (the
# cryptography and the sans-IO core) is what `loadgen floor` times; every
# other row is what the server spends around it.
COMPONENTS = [
    ("cryptography", "aws-lc, RustCrypto ChaCha20 and SHA-3: the AEAD records, HChaCha20, X25519"),
    ("protocol core", "`httpcrypt_proto`: outer checks, cookie scan, inner head, strike register, "
                      "and the base64url codec it decodes the query and cookie with"),
    ("layer", "`httpcrypt`: the service around the core, the listener, the file service"),
    ("HTTP stack", "`hyper`, `http`, `httparse`, `h2`, `tower`: the outer request and answer"),
    ("runtime", "`tokio`, `mio`, futures: tasks, wake-ups, readiness"),
    ("allocator", "glibc malloc and free"),
    ("copies", "`memcpy`, `memmove`, `memset`, `memcmp`"),
    ("std and other", "the Rust standard library (hashing, formatting, UTF-8 checks) and the rest"),
]
_CRYPTO = ("aws_lc", "chacha20", "poly1305", "poly_hash", "sha3", "keccak", "x25519", "curve25519",
           "blake2", "ml_kem", "hchacha", "sha2", "hmac")
# Codecs the protocol core calls for its own fields (the query's and the
# cookie's base64url).
_CORE = ("httpcrypt_proto", "base64_simd", "base64", "vsimd")
_HTTP = ("hyper", "http", "httparse", "h2", "tower", "tower_service", "tower_layer", "http_body",
         "http_body_util", "hyper_util", "bytes")
_RUNTIME = ("tokio", "mio", "futures_util", "futures_core", "futures", "pin_project_lite")
# glibc's allocator: these names, every `_int_*` and `__libc_*` helper and the
# aligned entry points; and the `httpcrypt` binary's global allocator in front of it
# (crates/httpcrypt-cli/src/heap.rs), which would otherwise count for the layer.
_ALLOC = ("malloc", "free", "calloc", "realloc", "cfree", "malloc_consolidate", "tcache_get",
          "tcache_put", "unlink_chunk", "__rust_alloc", "__rust_dealloc", "__rust_realloc",
          "__rdl_alloc", "__rdl_dealloc", "__rdl_realloc", "posix_memalign", "aligned_alloc",
          "memalign")
_ALLOC_PREFIXES = ("_int_", "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
                   "_mid_memalign", "__libc_memalign", "<httpcrypt::heap::Heap as ")


def _crate(fn):
    """The crate a demangled function name belongs to: for `<T as Trait>::f`
    the crate of T (whose code it is); generic glue such as
    `core::ptr::drop_in_place<T>` is counted for T's crate too."""
    name = fn.lstrip("<&*").removeprefix("mut ").removeprefix("dyn ").lstrip("<&*")
    head = name.split("::", 1)[0]
    if head in ("core", "alloc") and "<" in name:
        inner = name[name.index("<") + 1:].lstrip("&*<").removeprefix("mut ").removeprefix("dyn ")
        inner_head = inner.split("::", 1)[0]
        if inner_head and inner_head not in ("core", "alloc", "std"):
            return inner_head
    return head


def component(fn):
    """The row of COMPONENTS a function's own instructions belong to."""
    low = fn.lower()
    if fn in _ALLOC or fn.startswith(_ALLOC_PREFIXES):
        return "allocator"
    if low.startswith(("__mem", "memcpy", "memmove", "memset", "memcmp", "bcmp", "__nss_database_lookup")):
        return "copies"
    crate = _crate(fn)
    if crate in _CORE:
        return "protocol core"
    if crate.startswith("httpcrypt"):
        return "layer"
    if any(crate == c or crate.startswith(c + "_") for c in _HTTP):
        return "HTTP stack"
    if crate in _RUNTIME:
        return "runtime"
    if any(t in low for t in _CRYPTO):
        return "cryptography"
    return "std and other"


def parse(path):
    """Instructions of each function's own (exclusive), and calls made to
    each function, from an uncompressed callgrind profile."""
    own = collections.Counter()
    calls = collections.Counter()
    fn = cfn = None
    after_calls = False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                fn, after_calls = line[3:].strip(), False
            elif line.startswith("cfn="):
                cfn = line[4:].strip()
            elif line.startswith("calls="):
                calls[cfn] += int(line[6:].split()[0])
                after_calls = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    if after_calls:
                        after_calls = False  # the callee's inclusive cost
                    else:
                        own[fn] += int(parts[1])
    return own, calls


def answered(port, request, status, count):
    """`count` copies of `request` on one keep-alive connection, each answer
    read whole (`Content-Length`) and its status checked; how many ran."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        buf = b""
        for _ in range(count):
            s.sendall(request)
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("connection closed before an answer")
                buf += chunk
            head, rest = buf.split(b"\r\n\r\n", 1)
            got = int(head.split(b" ", 2)[1])
            if got != status:
                raise RuntimeError(f"{request.split()[0].decode()} answered {got}, not {status}")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            while len(rest) < length:
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("connection closed within an answer")
                rest += chunk
            buf = rest[length:]
    return count


def measure(bins, work, cfg, mode, count, warmup):
    name, proto, keys = cfg
    port = servers.free_ports(1)[0]
    out = os.path.join(work, f"cg-{name}-{mode}")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--compress-strings=no",
            "--compress-pos=no", os.path.join(bins, "httpcrypt"), "serve", "--keys",
            os.path.join(work, "keys"), "--root", os.path.join(work, "root"), "--listen",
            f"127.0.0.1:{port}", "--mount", "/hc", "--pass-through", "--workers", "1", "--defence", "off"]
    srv = servers.Server("callgrind", argv, [port], os.path.join(work, f"{name}-{mode}.log"))
    try:
        servers.wait_port(port, srv.proc, timeout=120)
        if proto == "answered":
            drive = lambda c: answered(port, keys[0], keys[1], c)  # noqa: E731
        else:
            drive = lambda c: loadgen(bins, port, proto, keys, mode, c)  # noqa: E731
        drive(warmup)
        subprocess.run(["callgrind_control", "-z", str(srv.proc.pid)], capture_output=True, check=True)
        n = drive(count)
        subprocess.run(["callgrind_control", "-d", str(srv.proc.pid)], capture_output=True, check=True)
        dump = f"{out}.1"
        for _ in range(100):
            if os.path.exists(dump) and os.path.getsize(dump) > 0:
                break
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        srv.stop()
    own, calls = parse(dump)
    total = sum(own.values())
    return {
        "requests": n,
        "instructions": total / n,
        "mallocs": sum(calls[m] for m in MALLOC) / n,
        "top": [(f, c / n) for f, c in own.most_common(15)],
        **by_component(own, n),
    }


def by_component(own, n, k=4):
    """Instructions per request of each row of COMPONENTS (`components`),
    and the `k` functions with the most instructions of their own in each
    (`component_top`)."""
    total = collections.Counter()
    top = collections.defaultdict(list)
    for fn, c in own.most_common():
        row = component(fn)
        total[row] += c
        if len(top[row]) < k:
            top[row].append((fn, c / n))
    return {"components": {name: total[name] / n for name, _ in COMPONENTS},
            "component_top": {name: top.get(name, []) for name, _ in COMPONENTS}}


def breakdown(res, m):
    """Rows of the breakdown by component for mode `m`: each configuration's
    instructions per request in each component, and what the ticket and
    cache-hit paths add to the plaintext path there."""
    names = [name for name, _, _ in CONFIGS if "components" in res.get(f"{name}|{m}", {})]
    if "plain" not in names:
        return []
    adds = [n for n in ("cached", "ticket") if n in names]
    out = ["| component | " + " | ".join(names) + " | " +
           " | ".join(f"{n} − plain" for n in adds) + " |",
           "|---|" + "---:|" * (len(names) + len(adds))]
    comp = lambda name: res[f"{name}|{m}"]["components"]  # noqa: E731
    for row, _ in COMPONENTS:
        cells = [f"{comp(n)[row]:,.0f}" for n in names]
        cells += [f"{comp(n)[row] - comp('plain')[row]:+,.0f}" for n in adds]
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    totals = [f"{sum(comp(n).values()):,.0f}" for n in names]
    totals += [f"{sum(comp(n).values()) - sum(comp('plain').values()):+,.0f}" for n in adds]
    out.append("| **all** | " + " | ".join(totals) + " |")
    out.append("")
    if "ticket" in names and "component_top" in res[f"ticket|{m}"]:
        top = res[f"ticket|{m}"]["component_top"]
        out.append("In the ticket configuration, the functions with the most instructions of their own "
                   "in each component:")
        out.append("")
        for row, _ in COMPONENTS:
            fns = "; ".join(f"`{f[:80]}` {c:,.0f}" for f, c in top.get(row, []))
            if fns:
                out.append(f"- **{row}**: {fns}")
        out.append("")
    return out


def before_after(res, before):
    """Rows comparing this run with an earlier one (`--before`)."""
    out = [f"## Before and after: `{before.get('_rev', '?')}` ({before.get('_date', '?')}) → "
           f"`{res['_rev']}`", "",
           "| cell | instructions before | after | change | allocations before | after |",
           "|---|---:|---:|---:|---:|---:|"]
    for key in [k for k in res if not k.startswith("_")]:
        b, a = before.get(key), res[key]
        if not b:
            continue
        change = (a["instructions"] - b["instructions"]) / b["instructions"] * 100
        out.append(f"| {key} | {b['instructions']:,.0f} | {a['instructions']:,.0f} | {change:+.1f} % | "
                   f"{b['mallocs']:.1f} | {a['mallocs']:.1f} |")
    out.append("")
    return out


def report(res, count, before=None):
    modes = [m for m in ("newconn", "keepalive") if any(k.endswith("|" + m) for k in res)]
    out = ["# Instructions per request on the server (callgrind)", "",
           f"Generated by `bench/profile/instructions` on {res['_date']}, httpcrypt `{res['_rev']}`. "
           "`httpcrypt serve --workers 1` (one thread) under `valgrind --tool=callgrind`; "
           f"`loadgen` sends a warm-up, then {count} requests for a 100 B file over 4 connections, "
           "and the server's counters cover exactly those. User space only: system calls and the "
           "kernel's TCP work are not counted (`bench/profile/REPORT.md` has CPU time with them). "
           "Counts repeat within ≈ 2 % between runs (the allocator's state varies), unlike CPU time on this machine.", ""]
    for m in modes:
        out += [f"## {'New connection per request' if m == 'newconn' else 'Keep-alive'}", "",
                "| configuration | instructions / request | ratio to plain | allocations / request |",
                "|---|---:|---:|---:|"]
        base = res.get(f"plain|{m}", {}).get("instructions")
        for name, _, _ in CONFIGS:
            r = res.get(f"{name}|{m}")
            if not r:
                continue
            ratio = f"{r['instructions'] / base:.2f}" if base else ""
            out.append(f"| {name} | {r['instructions']:,.0f} | {ratio} | {r['mallocs']:.1f} |")
        out.append("")
        for name, _, _ in CONFIGS:
            r = res.get(f"{name}|{m}")
            if not r:
                continue
            tops = "; ".join(f"`{f[:70]}` {c:,.0f}" for f, c in r["top"][:10])
            out.append(f"- **{name}**, most instructions of their own: {tops}")
        out.append("")
        rows = breakdown(res, m)
        if rows:
            out += ["Where the instructions go, by component (each function's own instructions, "
                    "counted for the crate whose code it is):", ""] + rows
    if any("components" in v for k, v in res.items() if not k.startswith("_")):
        out += ["Components: " + "; ".join(f"**{n}**: {d}" for n, d in COMPONENTS) + ".", ""]
    rows = [(name, req, status, res[f"{name}|answered"])
            for name, req, status in ANSWERED if f"{name}|answered" in res]
    if rows:
        out += ["## Answered at once (keep-alive, one connection)", "",
                "Requests the layer answers without opening anything: the key fetch (`OPTIONS`), "
                "a path under the mount that is no nonce (400, a problem with the certificates), "
                "a method the protocol does not take (405).", "",
                "| request | status | instructions / request | allocations / request |",
                "|---|---:|---:|---:|"]
        for name, req, status, r in rows:
            line = req.split(b"\r\n")[0].decode()
            out.append(f"| {name}: `{line}` | {status} | {r['instructions']:,.0f} | {r['mallocs']:.1f} |")
        out.append("")
    if before:
        out += before_after(res, before)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--out", default=HERE, help="where INSTRUCTIONS.md and instructions.json go")
    ap.add_argument("--before", help="instructions.json of an earlier build: adds a before/after table")
    ap.add_argument("--rev", help="the revision the binaries were built from (default: this tree's HEAD)")
    a = ap.parse_args()
    smoke = a.mode == "smoke"
    count, warmup = (50, 20) if smoke else (2000, 200)
    configs = [CONFIGS[0], CONFIGS[3]] if smoke else CONFIGS
    modes = ["keepalive"] if smoke else ["newconn", "keepalive"]
    work = tempfile.mkdtemp(prefix="hc-instructions-")
    res = {}
    try:
        os.makedirs(os.path.join(work, "root"))
        with open(os.path.join(work, "root", "100"), "wb") as f:
            f.write(os.urandom(100))
        subprocess.run([os.path.join(a.bin_dir, "httpcrypt"), "keygen", "--dir", os.path.join(work, "keys")],
                       check=True, capture_output=True)
        for mode in modes:
            for cfg in configs:
                r = measure(a.bin_dir, work, cfg, mode, count, warmup)
                res[f"{cfg[0]}|{mode}"] = r
                print(f"  {mode:9} {cfg[0]:7} {r['instructions']:9,.0f} instructions/request  "
                      f"{r['mallocs']:5.1f} allocations/request", flush=True)
        for name, request, status in ([] if smoke else ANSWERED):
            r = measure(a.bin_dir, work, (name, "answered", (request, status)), "answered", count, warmup)
            res[f"{name}|answered"] = r
            print(f"  answered  {name:9} {r['instructions']:9,.0f} instructions/request  "
                  f"{r['mallocs']:5.1f} allocations/request", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if smoke:
        plain, ticket = res["plain|keepalive"], res["ticket|keepalive"]
        if not (0 < plain["instructions"] < ticket["instructions"]):
            sys.exit("instructions smoke run FAILED: counts out of order")
        print("instructions smoke run ok")
        return
    rev = a.rev or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True, cwd=HERE).stdout.strip()
    res["_date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    res["_rev"] = rev
    before = None
    if a.before:
        with open(a.before) as f:
            before = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "instructions.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "INSTRUCTIONS.md"), "w") as f:
        f.write(report(res, count, before) + "\n")
    print(f"wrote {a.out}/INSTRUCTIONS.md and instructions.json")


if __name__ == "__main__":
    main()
