"""The end-to-end benchmark of bench/: starts every server under test,
drives them with `loadgen` in an interleaved order, runs the round-trip and
packet-capture experiments, and writes the results, the report and the
figures. Called by `bench/run`; see bench/REPORT.md for the method."""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import servers  # noqa: E402
from servers import SIZES  # noqa: E402

from configs import CONFIGS, SCALING_CONFIGS  # noqa: E402


class Plan:
    def __init__(self, mode):
        self.mode = mode
        if mode == "full":
            self.cells = [(m, s) for m in ("newconn", "keepalive") for s, _ in SIZES]
            self.reps, self.duration, self.warmup = 3, 2.0, 0.4
            # The cells behind the summary's target ratios get five: with
            # three, one disturbed repetition of a cell's plaintext path
            # moves the median of its ratios by 10-20 % on this machine.
            self.key_reps = 5
            self.configs = list(CONFIGS)
            self.scaling, self.rtt, self.capture, self.unloaded = True, True, True, True
        elif mode == "quick":
            self.cells = [("newconn", "100b"), ("keepalive", "100b"), ("keepalive", "1k"), ("keepalive", "1m")]
            self.reps, self.duration, self.warmup = 3, 1.0, 0.25
            self.configs = list(CONFIGS)
            self.scaling, self.rtt, self.capture, self.unloaded = False, True, True, False
        else:  # smoke: httpcrypt serve and the post-quantum rustls pair, short runs, no report
            self.cells = [("newconn", "100b"), ("keepalive", "1k")]
            self.reps, self.duration, self.warmup = 1, 1.0, 0.2
            self.configs = ["hc-plain", "hc-fresh", "hc-cached", "hc-ticket", "hc2-fresh", "hc2-ticket",
                            "hcpq-fresh", "rustls-tls13-pq"]
            self.scaling, self.rtt, self.capture, self.unloaded = False, False, False, False
        self.conns = 50

    # The cells the summary's target keys are computed from.
    KEY_CELLS = {("newconn", "100b"), ("keepalive", "100b"), ("keepalive", "1k"), ("keepalive", "1m")}

    def reps_of(self, cell):
        return max(self.reps, getattr(self, "key_reps", 0)) if cell in self.KEY_CELLS else self.reps


def size_of(name):
    return dict(SIZES)[name]


class Bench(servers.Harness):
    def __init__(self, args):
        super().__init__(args.bin_dir, "httpcrypt-bench-")
        self.args = args
        self.plan = Plan(args.mode)

    def loadgen_run(self, server, addr_key, extra, cell, netns=None, cpus="1", more=()):
        mode, size = cell
        argv = servers.pin(cpus) + [
            self.loadgen, "run", "--addr", f"127.0.0.1:{server.addr[addr_key]}",
            "--path", f"/{size}", "--expect-len", str(size_of(size)), "--mode", mode,
        ] + list(extra) + list(more)
        if netns is None:
            for pid in server.pids():
                argv += ["--cpu-pid", str(pid)]
        else:
            argv = ["ip", "netns", "exec", netns] + argv
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"loadgen failed ({' '.join(argv)}):\n{r.stderr}")
        return json.loads(r.stdout)

    # The main matrix: every cell, configurations interleaved within each
    # repetition (A B C ... A B C ...), the order rotated between repetitions.
    def matrix(self, srv):
        p = self.plan
        runs = []
        total = sum(p.reps_of(c) for c in p.cells) * len(p.configs)
        k = 0
        for cell in p.cells:
            reps = p.reps_of(cell)
            for rep in range(reps):
                for name in servers.rotated(p.configs, rep):
                    server_key, addr_key, extra = CONFIGS[name]
                    r = self.loadgen_run(srv[server_key], addr_key, extra, cell, more=[
                        "--conns", str(p.conns), "--duration", str(p.duration),
                        "--warmup", str(p.warmup)])
                    r.update(config=name, cell=f"{cell[0]}/{cell[1]}", rep=rep)
                    runs.append(r)
                    k += 1
                    if r["errors"] or r["requests"] == 0:
                        self.say(f"  {name} {cell}: {r['errors']} errors, first: {r['first_error']}")
                self.say(f"{cell[0]:9} {cell[1]:5} rep {rep + 1}/{reps}  ({k}/{total} runs)")
        return runs

    # Unloaded latency (one connection, new connection per request), the
    # per-request latency of the paper's Figs 9 and 10 without queueing.
    def unloaded(self, srv):
        runs = []
        for size, _ in SIZES:
            for rep in range(2):
                for name in self.plan.configs:
                    server_key, addr_key, extra = CONFIGS[name]
                    r = self.loadgen_run(srv[server_key], addr_key, extra, ("newconn", size), more=[
                        "--conns", "1", "--duration", "0.6", "--warmup", "0.1"])
                    r.update(config=name, cell=f"unloaded/{size}", rep=rep)
                    runs.append(r)
            self.say(f"unloaded latency {size} done")
        return runs

    def scaling(self, fx, srv1):
        """newconn 100 B with 1 and 2 server workers; the generator gets as
        many threads as the server has workers (paper Fig 7)."""
        self.say("scaling: starting 2-worker servers")
        srv2 = {
            "nginx": self.start(servers.start_nginx(self.work, fx, 2, "0,1", "w2")),
            "rustls": self.start(servers.start_rustls(self.work, fx, self.loadgen, 2, "0,1", "w2")),
            "hc": self.start(servers.start_httpcrypt(self.work, fx, self.httpcrypt, 2, "0,1", "w2", tickets=False)),
        }
        runs = []
        for rep in range(self.plan.reps):
            for name in SCALING_CONFIGS:
                server_key, addr_key, extra = CONFIGS[name]
                for workers, srv, cpus in ((1, srv1, "1"), (2, srv2, "0,1")):
                    r = self.loadgen_run(srv[server_key], addr_key, extra, ("newconn", "100b"),
                                         cpus=cpus, more=[
                                             "--conns", str(self.plan.conns), "--threads", str(workers),
                                             "--duration", str(self.plan.duration),
                                             "--warmup", str(self.plan.warmup)])
                    r.update(config=name, cell="newconn/100b", rep=rep, workers=workers)
                    runs.append(r)
            self.say(f"scaling rep {rep + 1}/{self.plan.reps}")
        return runs

    def rtt(self, fx):
        """Round trips to the first response byte at an emulated 50 ms RTT:
        an NFQUEUE delay of 25 ms per direction on the loopback of a network
        namespace, servers and generator inside it."""
        import rtt
        return rtt.run(self, fx)

    def floor(self):
        """`loadgen floor` on the servers' core while nothing else runs: the
        protocol's own cost per request (X25519, cryptography, sans-IO core)."""
        argv = servers.pin("0") + [self.loadgen, "floor"]
        if self.plan.mode == "smoke":
            argv += ["--iters", "300", "--reps", "3"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"loadgen floor failed: {r.stderr.strip()}")
        d = json.loads(r.stdout)
        self.say(f"floor: X25519 {d['x25519_us']:.1f} µs ({d['agreement_us']:.1f} with the session key), "
                 f"exchange crypto {d['crypto_us']:.2f} µs "
                 f"({d['crypto_1k_us']:.2f} with 1 KiB, {d['crypto_1m_us']:.0f} with 1 MiB), protocol core "
                 f"{d['core_us']:.2f} µs ({d['core_1k_us']:.2f} with 1 KiB, {d['core_1m_us']:.0f} with "
                 f"1 MiB); suite 2: X-Wing agreement {d['xwing_us']:.1f} µs, "
                 f"protocol core with it {d['core_pq_us']:.1f} µs")
        return d

    def capture(self, srv):
        import capture
        return capture.run(self, srv)


def machine_info(bin_dir):
    def cmd(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip() or \
                subprocess.run(argv, capture_output=True, text=True, timeout=10).stderr.strip()
        except OSError:
            return ""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "os": cmd(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "nginx": cmd(["nginx", "-v"]).replace("nginx version: ", ""),
        "openssl": cmd(["openssl", "version"]),
        "rustc": cmd(["rustc", "--version"]),
        "git": cmd(["git", "rev-parse", "--short", "HEAD"]) + (
            "+dirty" if cmd(["git", "status", "--porcelain", "--untracked-files=no"]) else ""),
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
    }


def aggregate(runs, key_fields=("config", "cell")):
    groups = {}
    for r in runs:
        groups.setdefault(tuple(r.get(k) for k in key_fields), []).append(r)
    out = {}
    for k, rs in groups.items():
        def stat(f):
            v = [f(r) for r in rs]
            return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
        med = sorted(rs, key=lambda r: r["rps"])[len(rs) // 2]
        out["|".join(str(x) for x in k)] = {
            "rps": stat(lambda r: r["rps"]),
            "cpu_us": stat(lambda r: r["server_cpu_us_per_req"]),
            "client_cpu_us": stat(lambda r: r["client_cpu_us_per_req"]),
            "p50_us": stat(lambda r: r["latency_us"]["p50"]),
            "p99_us": stat(lambda r: r["latency_us"]["p99"]),
            "ttfb_p50_us": stat(lambda r: r["ttfb_us"]["p50"]),
            "bytes": stat(lambda r: r["bytes_per_req"]["total"]),
            "bytes_written": stat(lambda r: r["bytes_per_req"]["written"]),
            "bytes_read": stat(lambda r: r["bytes_per_req"]["read"]),
            "flights": stat(lambda r: r["flights"]["mean"]),
            "errors": sum(r["errors"] for r in rs),
            "requests": sum(r["requests"] for r in rs),
            "tls": med.get("tls"),
            "resumed": stat(lambda r: r.get("resumed_fraction", 0.0)),
            "cdf": med["latency_cdf"],
        }
        # The server's user-space and kernel time apart, and its share of
        # its core (every loadgen run reports them; the rows of other tools
        # do not).
        if all("server_user_us_per_req" in r for r in rs):
            out["|".join(str(x) for x in k)].update(
                user_us=stat(lambda r: r["server_user_us_per_req"]),
                sys_us=stat(lambda r: r["server_sys_us_per_req"]),
                util=stat(lambda r: r["server_cpu_util"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["full", "quick", "smoke"], default="full")
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    b = Bench(args)
    t0 = time.time()
    b.say(f"mode {args.mode}; work dir {b.work}")
    fx = servers.make_fixtures(b.work, b.httpcrypt)
    result = {"meta": machine_info(args.bin_dir)}
    from configs import DESCRIPTIONS
    result["meta"].update(mode=args.mode, date=datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), reps=b.plan.reps, key_reps=b.plan.reps_of(("keepalive", "100b")),
        duration_s=b.plan.duration, warmup_s=b.plan.warmup,
        conns=b.plan.conns, configs=DESCRIPTIONS)
    try:
        srv = {
            "hc": b.start(servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "w1", tickets=False)),
            "hct": b.start(servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "w1t", tickets=True)),
            "hc2t": b.start(servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "w1ct", tickets=True,
                                                    compact=True)),
            **b.start_suite2(fx, "w1"),
        }
        if args.mode != "smoke":
            srv["nginx"] = b.start(servers.start_nginx(b.work, fx, 1, "0", "w1"))
            srv["rustls"] = b.start(servers.start_rustls(b.work, fx, b.loadgen, 1, "0", "w1"))
        b.say("servers up: " + ", ".join(f"{k}={s.proc.pid}" for k, s in srv.items()))
        result["floor"] = b.floor()
        runs = b.matrix(srv)
        result["runs"] = runs
        result["aggregate"] = aggregate(runs)
        if b.plan.unloaded:
            u = b.unloaded(srv)
            result["unloaded_runs"] = u
            result["unloaded"] = aggregate(u)
        if b.plan.capture:
            result["capture"] = b.capture(srv)
        if b.plan.scaling:
            s = b.scaling(fx, srv)
            result["scaling_runs"] = s
            result["scaling"] = aggregate(s, ("config", "workers"))
        b.stop_all()
        if b.plan.rtt:
            result["rtt"] = b.rtt(fx)
    finally:
        b.stop_all()
    result["meta"]["wall_s"] = round(time.time() - t0, 1)
    result["meta"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    if args.mode == "smoke":
        bad = [f"{k}: {v['errors']} errors / {v['requests']} requests"
               for k, v in result["aggregate"].items() if v["errors"] or v["requests"] == 0]
        fl = result.get("floor", {})
        # Each answer size on its own: the smoke mode's debug build times a
        # 100 B and a 1 KiB answer within its noise of each other.
        if not (0 < fl.get("crypto_us", 0) < fl.get("core_us", 0) and fl.get("x25519_us", 0) > 0
                and fl.get("agreement_us", 0) > 0
                and 0 < fl.get("crypto_1k_us", 0) < fl.get("core_1k_us", 0)
                and fl.get("crypto_1k_us", 0) < fl.get("crypto_1m_us", 0)
                and fl.get("core_1k_us", 0) < fl.get("core_1m_us", 0)
                and fl.get("x25519_us", 0) < fl.get("xwing_us", 0) < fl.get("core_pq_us", 0)):
            bad.append(f"implausible floor {fl}")
        # The post-quantum TLS pair must have agreed on the hybrid group.
        for k, v in result["aggregate"].items():
            group = (v.get("tls") or {}).get("group")
            if k.startswith("rustls-tls13-pq|") and group != "X25519MLKEM768":
                bad.append(f"{k}: key exchange group {group}, expected X25519MLKEM768")
        for k, v in sorted(result["aggregate"].items()):
            print(f"  {k:28} {v['rps']['median']:9.0f} req/s  {v['cpu_us']['median']:7.1f} us/req "
                  f"{v['bytes']['median']:8.0f} B/req  errors {v['errors']}")
        b.remove_work()
        if bad:
            print("smoke run FAILED:\n  " + "\n  ".join(bad))
            sys.exit(1)
        print(f"smoke run ok ({result['meta']['wall_s']} s)")
        return
    import report
    paths = report.write(result, os.path.abspath(args.out))
    b.remove_work()
    b.say(f"done in {result['meta']['wall_s']} s: " + ", ".join(paths))


if __name__ == "__main__":
    main()
