"""Server CPU per request with every configuration held at the same offered
request rate (bench/rate), on new connections and on kept-alive ones.

`bench/run` drives each configuration as hard as its generator can, so a
cell's load is whatever its protocol lets the generator reach, and a
server's CPU time per request moves with its load (a busier server finds
more ready connections per wake-up). Here the generator starts requests at
a fixed rate (`loadgen run --rate`) that every configuration in the group
can sustain, so the ratios compare the servers at one load.
Servers, files, pinning (server on CPU 0, generator on CPU 1) and the
generator's client code are those of `bench/run`; a run whose achieved rate
falls more than 3 % short of the offered one is reported as not held and
left out of the ratios.

Called by bench/rate."""

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402
import servers  # noqa: E402
from configs import CONFIGS  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)

# (mode, file, offered rate in requests per second, configurations run at
# it): the slowest configuration bounds the rate of its group.
GROUPS = [
    ("newconn", "100b", 2000,
     ["nginx-plain", "hc-plain", "hc-cached", "hc-fresh", "nginx-tls12", "rustls-tls13"]),
    ("newconn", "100b", 8000, ["nginx-plain", "hc-plain", "hc-cached", "hc-fresh"]),
    ("keepalive", "100b", 20000, ["nginx-plain", "hc-plain", "hc-cached", "hc-ticket"]),
    ("keepalive", "100b", 40000, ["nginx-plain", "hc-plain", "hc-cached", "hc-ticket"]),
    ("keepalive", "1k", 20000, ["hc-plain", "hc-ticket"]),
    # Suite 2 beside the rustls server's X25519MLKEM768, at a rate the
    # rustls server sustains at about half its core.
    ("newconn", "100b", 3000, ["hc2-fresh", "hcpq-fresh", "rustls-tls13-pq"]),
]

# The ratios a / b of server CPU per request, per key of
# bench/results/summary.json, in every group of that mode and file where
# both ran.
RATIOS = report.ALL_CPU_KEYS

# The servers the suite-2 group needs beyond `start_baselines`'.
SUITE2 = {"hc2-fresh", "hcpq-fresh", "rustls-tls13-pq"}


class Plan:
    def __init__(self, mode):
        self.mode = mode
        if mode == "full":
            self.groups, self.reps, self.duration, self.warmup = GROUPS, 3, 3.0, 0.5
        else:  # smoke: the paced generator against every server, briefly
            self.groups = [("newconn", "100b", 200, GROUPS[0][3]),
                           ("keepalive", "100b", 1000, GROUPS[2][3]),
                           ("newconn", "100b", 200, GROUPS[5][3])]
            self.reps, self.duration, self.warmup = 1, 0.5, 0.1
        self.conns = 50


class Rate(servers.Harness):
    def __init__(self, args):
        super().__init__(args.bin_dir, "httpcrypt-rate-")
        self.plan = Plan(args.mode)
        self.runs = []

    def one(self, srv, name, group, rep):
        mode, size, rate, _ = group
        server_key, addr_key, extra = CONFIGS[name]
        server = srv[server_key]
        argv = servers.pin("1") + [
            self.loadgen, "run", "--addr", f"127.0.0.1:{server.addr[addr_key]}",
            "--path", f"/{size}", "--expect-len", str(dict(servers.SIZES)[size]), "--mode", mode,
            "--conns", str(self.plan.conns), "--rate", str(rate),
            "--duration", str(self.plan.duration), "--warmup", str(self.plan.warmup),
        ] + list(extra)
        for pid in server.pids():
            argv += ["--cpu-pid", str(pid)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"loadgen failed ({' '.join(argv)}):\n{r.stderr}")
        out = json.loads(r.stdout)
        held = out["rps"] >= 0.97 * rate and out["errors"] == 0
        row = {"config": name, "cell": f"{mode}/{size}", "rate": rate, "rep": rep, "held": held,
               "server_cpu_us_per_req": out["server_cpu_us_per_req"], "rps": out["rps"],
               "server_cpu_util": out["server_cpu_util"], "errors": out["errors"],
               "first_error": out["first_error"], "requests": out["requests"],
               "client_cpu_us_per_req": out["client_cpu_us_per_req"]}
        self.runs.append(row)
        self.say(f"{name:13s} {mode:9s} {size:4s} {rate:6d}/s rep {rep}: {row['server_cpu_us_per_req']:7.2f} µs/req, "
                 f"achieved {row['rps']:8.0f}/s, server CPU {row['server_cpu_util'] * 100:3.0f} %"
                 + ("" if held else "  (rate not held)"))

    def run(self):
        self.started = datetime.datetime.now(datetime.timezone.utc)
        try:
            fx = servers.make_fixtures(self.work, self.httpcrypt)
            srv = self.start_baselines(fx, "r")
            if any(SUITE2 & set(g[3]) for g in self.plan.groups):
                srv.update(self.start_suite2(fx, "r"))
            for group in self.plan.groups:
                for rep in range(1, self.plan.reps + 1):
                    for name in servers.rotated(group[3], rep - 1):
                        self.one(srv, name, group, rep)
        finally:
            self.stop_all()
            self.remove_work()
        return self.result()

    def result(self):
        held = [r for r in self.runs if r["held"]]
        agg = {}
        for r in held:
            agg.setdefault(f"{r['config']}|{r['cell']}|{r['rate']}", []).append(r)
        aggregate = {k: {"cpu_us": statistics.median(x["server_cpu_us_per_req"] for x in rows),
                         "util": statistics.median(x["server_cpu_util"] for x in rows),
                         "n": len(rows)} for k, rows in agg.items()}
        ratios = {}
        for key, (a, b, (mode, size)) in RATIOS.items():
            for g_mode, g_size, rate, names in self.plan.groups:
                if (g_mode, g_size) != (mode, size) or a not in names or b not in names:
                    continue
                cell = f"{mode}/{size}"
                v = report.paired_ratio(held, a, b, lambda r: r["server_cpu_us_per_req"],
                                        lambda r: r["rate"] == rate and r["cell"] == cell)
                if v:
                    ratios[f"{key}@{rate}"] = v
        return {"started": self.started.isoformat(timespec="seconds"), "mode": self.plan.mode,
                "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
                "conns": self.plan.conns, "runs": self.runs, "aggregate": aggregate,
                "ratios": ratios, "not_held": [(r["config"], r["rate"], r["rep"], r["rps"])
                                               for r in self.runs if not r["held"]]}


def tables(res, summary):
    out = ["| key | offered rate | ratio (median, range) | `bench/run` (as hard as it goes) |",
           "|---|---:|---|---:|"]
    for k, v in res["ratios"].items():
        key, rate = k.split("@")
        sv = summary.get(key, {}).get("value")
        out.append(f"| `{key}` | {rate}/s | {v['value']:.2f} ({v['min']:.2f}–{v['max']:.2f}, n={v['n']}) | "
                   + (f"{sv:.2f}" if isinstance(sv, (int, float)) else "–") + " |")
    out += ["", "| configuration | cell | offered rate | server CPU µs/request | server CPU use | runs |",
            "|---|---|---:|---:|---:|---:|"]
    for k, a in sorted(res["aggregate"].items(),
                       key=lambda kv: (kv[0].split("|")[1], int(kv[0].split("|")[2]), kv[0])):
        name, cell, rate = k.split("|")
        out.append(f"| {name} | {cell} | {rate}/s | {a['cpu_us']:.2f} | {a['util'] * 100:.0f} % "
                   f"| {a['n']} |")
    return "\n".join(out)


def markdown(res, summary, when):
    return f"""# Server CPU at one offered rate

Written by `bash bench/rate` on {res['started']} ({res['cpus']} CPUs, kernel {res['kernel']}).

`bench/run` drives every configuration as hard as its generator can, so
each cell runs at whatever load its protocol lets the generator reach, and
a server's CPU time per request moves with its load: a busier server finds
more ready connections per wake-up and shares the cost of waiting. Here the
generator (`loadgen run --rate`, the client code of `bench/run`) starts
requests at a fixed rate that every configuration of a group sustains,
{res['conns']} connections at most in flight, so each ratio compares the
servers at one load: a new connection per request or kept-alive connections,
server on CPU 0, generator on CPU 1, configurations interleaved in an order rotated each repetition; a
ratio is the median over repetitions of the ratio within one repetition. A
run whose achieved rate falls more than 3 % short is left out (not held:
{len(res['not_held'])}). The last column is the key of the same name in
`bench/results/summary.json` (`bench/run` of {when or '–'}), for comparison.

{tables(res, summary)}
"""


def main():
    args = servers.Harness.args()
    r = Rate(args)
    res = r.run()
    summary, when = report.published(BENCH)
    print()
    print(tables(res, summary))
    if args.mode == "smoke":
        bad = [x for x in res["runs"] if x["errors"] or x["requests"] == 0]
        if bad:
            print(f"rate smoke: failed runs {bad}", file=sys.stderr)
            sys.exit(1)
        return
    report.save(BENCH, r.started, "rate", res, "RATE.md", markdown(res, summary, when))


if __name__ == "__main__":
    main()
