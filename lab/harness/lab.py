"""Runs every measurement of the protocol lab and writes the results, the
summary and the report. Called by lab/run."""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(__file__))
import external  # noqa: E402

SIZES = [0, 100, 1024, 16384, 1048576]
PLAIN_REQ = lambda n: b"POST /api HTTP/1.1\r\nHost: example.com\r\nContent-Length: %d\r\n\r\n" % n + b"q" * n  # noqa: E731
PLAIN_RSP = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n + b"r" * n  # noqa: E731


def log(*a):
    print("==", *a, flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return ""


def machine():
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    return {
        "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
        "memory": sh("free -h | awk '/Mem:/{print $2}'"),
        "rustc": sh("rustc --version"), "openssl": sh("openssl version"), "openssh": sh("ssh -V 2>&1"),
        "gpg": sh("gpg --version | head -1"), "valgrind": sh("valgrind --version"),
        "python": platform.python_version(),
        "crates": sh("cd %s && cargo tree -p httpcrypt-lab --depth 1 -e normal --prefix none 2>/dev/null | sort -u | tr '\\n' ';'" % ROOT),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "note": "shared 2-core machine: CPU times are medians on a core pinned with taskset; "
                "instruction counts (callgrind) are the device-independent figures",
    }


def callgrind_inproc(binary, proto, variant, side, tmp):
    out = os.path.join(tmp, f"cg.{proto}.{variant}.{side}")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", f"--toggle-collect=*{side}_step*",
                    binary, "once", proto, variant], check=True, capture_output=True, timeout=300)
    return external.callgrind_total(out)


def constrained(binary, tmp, items, quota, mem):
    """First encrypted request with the client in a throttled cgroup (one
    core via taskset, `quota` of it, `mem` bytes of RAM). Each item returns a
    dict (wall time per request, memory) or raises."""
    res = {}
    for name, fn in items:
        g = external.CpuGroup("constrained", cpu_quota=quota, mem_bytes=mem)
        try:
            res[name] = dict(fn(g), ok=True)
        except Exception as e:  # recorded, and makes the run fail
            res[name] = {"ok": False, "error": str(e)[:300]}
        finally:
            g.remove()
        res[name]["cgroup"] = g.kind
    return res


def _once(binary, proto, variant, group, repeat):
    """`lab once` with `repeat` measured exchanges; its wall time per
    exchange and its peak RSS."""
    cmd = ["taskset", "-c", "1", binary, "once", proto, variant, "--repeat", str(repeat)]
    p = (group.popen if group else subprocess.Popen)(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    if status != 0:
        raise RuntimeError(f"lab once {proto} {variant} failed")
    return json.loads(out)["wall_us_per_exchange"], ru.ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["smoke", "full"], default="full")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    smoke = a.mode == "smoke"
    tmp = tempfile.mkdtemp(prefix="httpcrypt-lab-")
    failures = []
    res = {"mode": a.mode, "machine": machine(), "inproc": [], "external": {}, "callgrind": {}, "constrained": {}}

    def attempt(name, fn):
        try:
            return fn()
        except Exception as e:
            failures.append(f"{name}: {e}")
            log(f"FAILED {name}: {e}")
            if os.environ.get("LAB_DEBUG"):
                traceback.print_exc()
            return None

    # 1. In-process protocols: bytes, flights, round trips, CPU per step.
    iters = 30 if smoke else 1500
    log(f"in-process protocols ({iters} exchanges each, pinned to CPU 1)")
    p = subprocess.run(["taskset", "-c", "1", a.bin, "measure", "--iters", str(iters)], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        failures.append("in-process: " + p.stderr.strip()[-500:])
    try:
        m = json.loads(p.stdout)
        res["inproc"] = m["results"]
        res["httpcrypt_request_fields"] = m["httpcrypt_request_fields"]
    except ValueError:
        failures.append("in-process: no JSON")

    # 2. Instructions (callgrind), per side, one fresh exchange after a warm-up.
    todo = [(r["protocol"], r["variant"]) for r in res["inproc"]]
    if smoke:
        # The suite-2 rows are here so that CI runs them (fresh and resumed).
        todo = [t for t in todo if t in (("httpcrypt", "fresh-post"), ("httpcrypt", "pq-fresh-post"),
                                         ("httpcrypt", "pq-ticket"), ("tls-rustls", "tls13-full"))]
    log(f"callgrind, in-process ({len(todo)} variants)")
    for proto, variant in todo:
        for side in ("server", "client"):
            n = attempt(f"callgrind {proto}/{variant}/{side}",
                        lambda: callgrind_inproc(a.bin, proto, variant, side, tmp))
            if n is not None:
                if n == 0:
                    failures.append(f"callgrind {proto}/{variant}/{side}: no instructions counted")
                res["callgrind"].setdefault(f"{proto}/{variant}", {})[side] = n

    # 3. OpenSSL TLS through s_server / s_client.
    ext = res["external"]
    ov = ["tls13-full"] if smoke else external.OPENSSL_VARIANTS
    d = os.path.join(tmp, "openssl")
    for v in ov:
        log(f"OpenSSL {v}")
        r = attempt(f"openssl {v}", lambda: external.openssl_tls(d, v))
        if r:
            if not smoke:
                r["instructions_server"] = attempt(f"openssl {v} callgrind", lambda: external.openssl_instructions(d, v))
            ext[f"tls-openssl/{v}"] = r

    # 3b. HTTPCrypt through its own programs (serve, fetch) for the wire bytes.
    hc_bin = os.path.join(os.path.dirname(a.bin), "httpcrypt")
    if os.path.exists(hc_bin):
        d = os.path.join(tmp, "hc")
        for v in (external.HC_SOCKET_VARIANTS[:1] if smoke else external.HC_SOCKET_VARIANTS):
            log(f"httpcrypt serve/fetch {v}")
            r = attempt(f"httpcrypt sockets {v}", lambda: external.httpcrypt_sockets(d, hc_bin, v))
            if r:
                ext[f"httpcrypt-sockets/{v}"] = r
    else:
        failures.append(f"httpcrypt sockets: no binary at {hc_bin}")

    # 4. OpenSSH.
    sv = ["curve25519-full"] if smoke else external.SSH_VARIANTS
    d = os.path.join(tmp, "ssh")
    for v in sv:
        log(f"OpenSSH {v}")
        r = attempt(f"ssh {v}", lambda: external.ssh(d, v))
        if r:
            if not smoke and v.endswith("full"):
                r["instructions_client"] = attempt(f"ssh {v} callgrind", lambda: external.ssh_client_instructions(d, v))
            ext[f"ssh/{v}"] = r

    # 5. Message-level protection: OpenPGP (gpg) and CMS (openssl cms).
    d = os.path.join(tmp, "msg")
    os.makedirs(d, exist_ok=True)
    log("OpenPGP (gpg) and CMS (openssl cms)")
    gsetup = attempt("gpg set-up", lambda: external.gpg_setup(d))
    attempt("cms set-up", lambda: external.cms_setup(d))
    for name, ex in (("openpgp/gpg-cv25519-ed25519", lambda n, g=None, vp=None: external.gpg_exchange(
            d, PLAIN_REQ(n), PLAIN_RSP(n), gsetup[0], gsetup[1], group=g, valgrind_prefix=vp)),
            ("cms/openssl-p256-aes128gcm", lambda n, g=None, vp=None: external.cms_exchange(
                d, PLAIN_REQ(n), PLAIN_RSP(n), group=g, valgrind_prefix=vp))):
        if name.startswith("openpgp") and not gsetup:
            continue

        def one():
            out = {"message_overhead": []}
            for n in SIZES:
                rq, rs, _ = ex(n)
                out["message_overhead"].append({"size": n, "c2s": rq - len(PLAIN_REQ(n)), "s2c": rs - len(PLAIN_RSP(n))})
                if n == 100:
                    out["bytes_c2s"], out["bytes_s2c"] = rq, rs
            cpus = []
            for _ in range(2 if smoke else 7):
                g = external.CpuGroup("msg")
                try:
                    cpus.append(ex(100, g)[2])
                finally:
                    g.remove()
            out["server_cpu_us"] = sorted(cpus)[len(cpus) // 2]
            out["cpu_note"] = "server side: decrypt the request, sign and encrypt the response; whole processes incl. start-up"
            if not smoke:
                vp = os.path.join(d, "cg." + name.split("/")[0])
                ex(100, None, vp)
                if name.startswith("openpgp"):
                    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=gsetup[0], capture_output=True)
                    time.sleep(0.5)
                out["instructions_server"] = external.callgrind_total(vp + ".*")
            out["rtts_first_byte"] = 1
            out["rtts_note"] = "by construction: one message each way, keys known beforehand"
            return out
        r = attempt(name, one)
        if r:
            ext[name] = r

    # 6. Constrained device: the client's first request on a throttled core.
    quota, mem = 0.1, 64 * 1024 * 1024
    log(f"constrained profile (client on one core, {int(quota*100)}% of it, {mem >> 20} MiB)")
    items = []
    cons_inproc = [("httpcrypt", "fresh-post"), ("tls-rustls", "tls13-full")] if smoke else \
        [("httpcrypt", "fresh-post"), ("httpcrypt", "ticket"), ("httpcrypt", "rspamd"), ("httpcrypt", "pq-fresh-post"),
         ("tls-rustls", "tls13-full"), ("tls-rustls", "tls13-full-pq"), ("tls-rustls", "tls13-resumed"), ("tls-rustls", "tls12-full"), ("ohttp", "x25519-chacha"), ("noise", "nk"),
         ("noise", "ik")]
    reps = 5 if smoke else 40
    for proto, variant in cons_inproc:
        def item(g, p=proto, v=variant):
            free, _ = _once(a.bin, p, v, None, reps)
            wall, rss = _once(a.bin, p, v, g, reps)
            return {"wall_ms": wall / 1000, "free_ms": free / 1000, "peak_bytes": g.max_rss(),
                    "what": f"client and server in one throttled process, mean of {reps} exchanges"}
        items.append((f"{proto}/{variant}", item))

    def ext_item(fn):
        def run_it(g):
            t0 = time.monotonic()
            fn(g)
            return {"wall_ms": (time.monotonic() - t0) * 1000, "peak_bytes": g.max_rss(),
                    "what": "the client program in the throttled group, start-up included; server outside"}
        return run_it
    if not smoke:
        dcert = os.path.join(tmp, "openssl")
        items.append(("tls-openssl/tls13-full", ext_item(lambda g: _ossl_client(dcert, g))))
        items.append(("ssh/curve25519-full", ext_item(lambda g: _ssh_client(os.path.join(tmp, "ssh"), g))))
        if gsetup:
            items.append(("openpgp/gpg-cv25519-ed25519", ext_item(lambda g: _gpg_client(d, gsetup, g))))
        items.append(("cms/openssl-p256-aes128gcm", ext_item(lambda g: _cms_client(d, g))))
    res["constrained"] = {"quota": quota, "memory_bytes": mem,
                          "results": constrained(a.bin, tmp, items, quota, mem)}
    for k, v in res["constrained"]["results"].items():
        if not v.get("ok"):
            failures.append(f"constrained {k}: {v.get('error')}")

    res["failures"] = failures
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{a.mode}.json"), "w") as f:
        json.dump(res, f, indent=1)
    import report
    report.write(res, a.out, smoke)
    if failures:
        log(f"{len(failures)} measurement(s) failed:")
        for x in failures:
            print("   ", x)
        sys.exit(1)
    log("all measurements succeeded")


def _proc_ok(p):
    if p.wait(timeout=600) != 0:
        raise RuntimeError("exited with %d" % p.returncode)


def _ossl_client(d, g):
    """s_client (throttled) against an unthrottled s_server."""
    port = external.free_port()
    srv = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-cert", f"{d}/leaf.pem", "-key",
                            f"{d}/leaf.key", "-rev", "-quiet", "-naccept", "1", "-tls1_3", "-groups", "X25519"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        external.wait_port_quiet(port, srv)
        external.first_byte(["taskset", "-c", "1", "openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                             "-servername", "example.com", "-CAfile", f"{d}/ca.pem", "-verify_return_error", "-quiet",
                             "-tls1_3", "-groups", "X25519"], external.REQ, len(external.REQ), group=g)
    finally:
        srv.kill()
        srv.wait()


def _ssh_client(d, g):
    s = external.Sshd(d)
    try:
        external.first_byte(["taskset", "-c", "1"] + s.client(s.port, "curve25519-sha256"), external.REQ,
                            len(external.REQ), group=g)
    finally:
        s.stop()


def _gpg_client(d, gsetup, g):
    open(f"{d}/creq.txt", "wb").write(PLAIN_REQ(100))
    if os.path.exists(f"{d}/creq.gpg"):
        os.remove(f"{d}/creq.gpg")
    external.timed(["taskset", "-c", "1"] + gsetup[1] + ["-e", "-r", "server@lab.example", "-o", f"{d}/creq.gpg",
                                                         f"{d}/creq.txt"], env=gsetup[0], group=g)


def _cms_client(d, g):
    open(f"{d}/creq.txt", "wb").write(PLAIN_REQ(100))
    external.timed(["taskset", "-c", "1", "openssl", "cms", "-encrypt", "-binary", "-aes-128-gcm", "-in",
                    f"{d}/creq.txt", "-outform", "DER", "-out", f"{d}/creq.cms", f"{d}/srv.pem"], group=g)


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

if __name__ == "__main__":
    main()
