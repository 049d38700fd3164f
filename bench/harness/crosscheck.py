"""An independent re-measurement of the server-CPU ratios of bench/run,
with wrk as the client instead of the harness's own load generator.

The servers are the same as in bench/run (nginx for the plain and TLS 1.2
baselines, `httpcrypt serve` with and without tickets), pinned to CPU 0;
wrk runs on CPU 1 with one thread. wrk cannot seal, so `loadgen requests`
seals every HTTPCrypt request ahead of time (own nonce, current Date) and
wrk sends each once from a file (bench/crosscheck.lua); plain and TLS cells
send a file of the same plain GET the same way, so the client machinery is
the same for every configuration. Every run sends a fixed number of
requests (the file) with a time cap; server CPU comes from
/proc/<pid>/stat around the run.

wrk cannot open a sealed answer, so each answer is checked by status and
body length against the lengths of answers `loadgen requests` opened and
verified (inner 200) just before: a sealed refusal (stale, replay) has
another length and fails the run.

Called by bench/crosscheck."""

import datetime
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402
import servers  # noqa: E402
from configs import CONFIGS  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
LUA = os.path.join(BENCH, "crosscheck.lua")
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def config(name):
    """A configuration of bench/run as (server, address key, the `--keys` of
    `loadgen requests`, or None where wrk sends a plain GET)."""
    server, scheme, args = CONFIGS[name]
    keys = args[args.index("--keys") + 1] if "--keys" in args else None
    return server, scheme, keys


# (mode, size) -> configurations run in that cell
CELLS = {
    ("keepalive", "100b"): ["nginx-plain", "hc-plain", "hc-cached", "hc-ticket"],
    ("keepalive", "1k"): ["hc-plain", "hc-ticket"],
    ("newconn", "100b"): ["nginx-plain", "hc-plain", "hc-fresh", "hc-cached", "hc-ticket",
                          "nginx-tls12", "rustls-tls13"],
}

# The keys of bench/results/summary.json this re-measures: (a, b, cell).
KEYS = report.CPU_KEYS


class Plan:
    def __init__(self, mode):
        self.mode = mode
        if mode == "full":
            self.reps, self.cap = 5, 30
            # Requests per run: about two seconds of load each.
            self.count = {"keepalive": 150_000, "newconn": 40_000, "nginx-tls12": 8_000,
                          "rustls-tls13": 10_000, "hc-fresh": 25_000}
        else:  # smoke: checks that the tools and the checks work together
            self.reps, self.cap = 1, 20
            self.count = {"keepalive": 2_000, "newconn": 500, "nginx-tls12": 200,
                          "rustls-tls13": 200, "hc-fresh": 300}
        self.conns = 50

    def requests(self, name, mode):
        """Requests per run: by configuration on new connections, else by mode."""
        return self.count.get(name, self.count[mode]) if mode == "newconn" else self.count[mode]


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


class Crosscheck(servers.Harness):
    def __init__(self, args):
        super().__init__(args.bin_dir, "httpcrypt-crosscheck-")
        self.plan = Plan(args.mode)
        self.runs = []

    def write_requests(self, name, mode, size, n, path):
        server, scheme, keys = config(name)
        port = self.srv[server].addr[scheme]
        close = mode == "newconn"
        if keys is None:
            req = f"GET /{size} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            req += "Connection: close\r\n\r\n" if close else "\r\n"
            with open(path, "w") as f:
                f.write(req * n)
            return {"outer_body_lengths": [dict(servers.SIZES)[size]]}
        argv = [self.loadgen, "requests", "--addr", f"127.0.0.1:{port}", "--path", f"/{size}",
                "--keys", keys, "--count", str(n), "--out", path]
        if close:
            argv.append("--close")
        out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout)

    def one(self, rep, name, cell):
        mode, size = cell
        server, scheme, _ = config(name)
        srv = self.srv[server]
        n = self.plan.requests(name, mode)
        path = os.path.join(self.work, "requests")
        marker = os.path.join(self.work, "ran-out")
        made = self.write_requests(name, mode, size, n, path)
        url = ("https" if scheme.startswith("tls") else "http") + \
            f"://127.0.0.1:{srv.addr[scheme]}/"
        argv = servers.pin("1") + [
            "wrk", "-t1", f"-c{self.plan.conns}", f"-d{self.plan.cap}s", "--timeout", "5s",
            "-s", LUA, url, "--", path, marker]
        pids = srv.pids()
        own = lambda: (lambda u: u.ru_utime + u.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN))
        w0 = own()
        c0, t0 = cpu_ticks(pids), time.monotonic()
        wrk = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # wrk waits out its whole duration even when the script stopped its
        # thread: end it once the file has run out (SIGINT still reports).
        while wrk.poll() is None and not os.path.exists(marker):
            if time.monotonic() - t0 > self.plan.cap + 30:
                wrk.kill()
                break
            time.sleep(0.005)
        t_load = time.monotonic() - t0
        if wrk.poll() is None:
            wrk.send_signal(signal.SIGINT)
        stdout, stderr = wrk.communicate(timeout=30)
        client_s = own() - w0
        # Answers still on their way when wrk stopped are served by now.
        time.sleep(0.2)
        c1, t1 = cpu_ticks(pids), time.monotonic()
        os.unlink(path)
        if os.path.exists(marker):
            os.unlink(marker)
        line = next((ln for ln in stdout.splitlines() if ln.startswith("CROSSCHECK ")), None)
        if wrk.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed ({wrk.returncode}): {stderr.strip()}")
        r = json.loads(line[len("CROSSCHECK "):])
        problems = self.judge(r, made, n)
        # The file was sent whole (the thread stopped when it ran out): the
        # server received and answered all n requests.
        served = n if r["exhausted"] > 0 else r["requests"]
        row = {
            "rep": rep, "config": name, "cell": f"{mode}/{size}", "requests": served,
            "server_cpu_us_per_req": (c1 - c0) * TICK_US / max(served, 1),
            "rps": r["requests"] / max(r["duration_us"] / 1e6, 1e-9),
            # How loaded each side was: per-request CPU depends on it (a
            # busier server handles more events per wake-up).
            "server_cpu_util": (c1 - c0) * TICK_US / 1e6 / max(t_load, 1e-9),
            "client_cpu_us_per_req": client_s * 1e6 / max(served, 1),
            "wall_s": t1 - t0, "wrk": r, "expected_lengths": made["outer_body_lengths"],
            "problems": problems,
        }
        self.runs.append(row)
        self.say(f"{name:12s} {mode}/{size:5s} rep {rep}: "
                 f"{row['server_cpu_us_per_req']:7.2f} µs/req  {row['rps']:8.0f} req/s"
                 + (f"  PROBLEMS: {problems}" if problems else ""))
        return row

    @staticmethod
    def judge(r, made, n):
        """What is wrong with a run, if anything."""
        out = []
        want = {str(x) for x in made["outer_body_lengths"]}
        ok = r["statuses"].get("200", 0)
        others = {k: v for k, v in r["statuses"].items() if k != "200"}
        # A request past the end of the file asks for a missing path (404);
        # at most one per connection can be in flight when the thread stops.
        if set(others) - {"404"} or others.get("404", 0) > r["exhausted"]:
            out.append(f"statuses {r['statuses']}")
        stray = {k: v for k, v in r["lengths"].items() if k not in want}
        if sum(stray.values()) > others.get("404", 0):
            out.append(f"answer lengths {r['lengths']}, expected {sorted(want)}")
        if any(r["errors"].values()):
            out.append(f"errors {r['errors']}")
        if r["exhausted"] == 0 and ok < n:
            out.append(f"{ok} of {n} requests answered within the cap")
        return out

    def run(self):
        self.started = datetime.datetime.now(datetime.timezone.utc)
        try:
            self.srv = self.start_baselines(servers.make_fixtures(self.work, self.httpcrypt), "x")
            for rep in range(1, self.plan.reps + 1):
                for cell, names in CELLS.items():
                    for name in servers.rotated(names, rep - 1):
                        self.one(rep, name, cell)
        finally:
            self.stop_all()
            self.remove_work()
        return self.result()

    def result(self):
        agg = {}
        for row in self.runs:
            agg.setdefault(f"{row['config']}|{row['cell']}", []).append(row)
        aggregate = {
            k: {"cpu_us": statistics.median(r["server_cpu_us_per_req"] for r in rows),
                "rps": statistics.median(r["rps"] for r in rows),
                "server_util": statistics.median(r["server_cpu_util"] for r in rows),
                "client_cpu_us": statistics.median(r["client_cpu_us_per_req"] for r in rows),
                "n": len(rows)}
            for k, rows in agg.items()}
        ratios = {}
        for key, (a, b, (mode, size)) in KEYS.items():
            v = report.paired_ratio(self.runs, a, b, lambda r: r["server_cpu_us_per_req"],
                                    lambda r: r["cell"] == f"{mode}/{size}")
            if v:
                ratios[key] = v
        return {
            "started": self.started.isoformat(timespec="seconds"),
            "mode": self.plan.mode, "host": platform.node(), "cpus": os.cpu_count(),
            "kernel": platform.release(), "wrk": wrk_version(),
            "conns": self.plan.conns, "runs": self.runs, "aggregate": aggregate,
            "ratios": ratios,
            "problems": [(r["config"], r["cell"], r["rep"], p) for r in self.runs
                         for p in r["problems"]],
        }


def wrk_version():
    out = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    first = (out.stdout or out.stderr or "\n").splitlines()[0]
    # "wrk 4.1.0 [epoll] Copyright (C) 2012 Will Glozer": the version part.
    return first.split(" Copyright")[0].strip()


def table(res, summary):
    lines = ["| key | wrk (median, range) | bench/run (loadgen) |", "|---|---|---|"]
    for key in KEYS:
        v = res["ratios"].get(key)
        s = summary.get(key, {})
        sv = s.get("value")
        lines.append(
            f"| `{key}` | "
            + (f"{v['value']:.2f} ({v['min']:.2f}–{v['max']:.2f}, n={v['n']})" if v else "–")
            + " | " + (f"{sv:.2f}" if isinstance(sv, (int, float)) else "–") + " |")
    return "\n".join(lines)


def cpu_table(res):
    lines = ["| configuration | cell | server CPU µs/request | requests/s | server CPU use "
             "| wrk CPU µs/request | runs |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for k, a in sorted(res["aggregate"].items(), key=lambda kv: (kv[0].split("|")[1], kv[0])):
        name, cell = k.split("|")
        lines.append(f"| {name} | {cell} | {a['cpu_us']:.2f} | {a['rps']:.0f} "
                     f"| {a['server_util'] * 100:.0f} % | {a['client_cpu_us']:.2f} | {a['n']} |")
    return "\n".join(lines)


def markdown(res, summary, summary_when):
    return f"""# Cross-check with wrk

An independent re-measurement of the server-CPU ratios of `bench/run`: the
same servers, pinned the same way (server on CPU 0, client on CPU 1), with
wrk ({res['wrk']}) as the client instead of the harness's
own load generator. Written by `bash bench/crosscheck` on {res['started']}
({res['cpus']} CPUs, kernel {res['kernel']}).

## Method

- wrk cannot seal, so `loadgen requests` seals every HTTPCrypt request ahead
  of time, with the same client code as `bench/run` (own nonce, current
  inner Date, the ticket or reused key of the configuration), and wrk sends
  each exactly once from a file (`bench/crosscheck.lua`). Plain and TLS
  configurations send a file of the same plain GET the same way, so the
  client side is the same machinery for every configuration.
- New-connection cells add `Connection: close` to every request (wrk then
  connects again); keep-alive cells keep {res['conns']} connections.
- Each run sends a fixed number of requests (the whole file, about two
  seconds of load) under a time cap; the server's CPU time comes from
  `/proc/<pid>/stat` around the run, divided by the requests sent.
- wrk cannot open a sealed answer, so every answer is checked by status and
  body length against answers the generator opened and verified (inner 200)
  just before; a sealed refusal has another length and fails the run.
- Configurations of a cell run one after another, in an order rotated each
  repetition; a ratio is the median over repetitions of the ratio within
  one repetition.

## How to read it

A server's CPU time per request falls as it gets busier: each wake-up
then finds more connections ready, so the fixed cost of waiting is shared.
The column "server CPU use" gives each configuration's load. wrk gets its
HTTPCrypt requests sealed ahead of time, so it drives those servers harder
than `bench/run`'s generator, which seals (and, with fresh keys, runs the
client's X25519) as it goes; on new connections wrk's own connect and TLS
work limits the plain and TLS configurations instead. A ratio between two
configurations at different loads includes that difference. In `bench/run`
the generator, which seals as it goes, is the bottleneck of every
new-connection cell, so it holds the configurations at closer loads.

## Ratios

Each ratio is defined as the key of the same name in `bench/results/summary.json`
(see `bench/REPORT.md`); the last column is that file's value, from the
`bench/run` of {summary_when or '–'}, not from this run.

{table(res, summary)}

## Server CPU per request

{cpu_table(res)}

Problems: {len(res['problems'])} {'(none)' if not res['problems'] else json.dumps(res['problems'])}
"""


def main():
    args = servers.Harness.args()
    cc = Crosscheck(args)
    res = cc.run()
    summary, when = report.published(BENCH)
    print()
    print(table(res, summary))
    print()
    print(cpu_table(res))
    if res["problems"]:
        print(f"\ncrosscheck: {len(res['problems'])} problem(s): {res['problems']}", file=sys.stderr)
        sys.exit(1)
    if args.mode == "full":
        report.save(BENCH, cc.started, "crosscheck", res, "CROSSCHECK.md",
                    markdown(res, summary, when))


if __name__ == "__main__":
    main()
