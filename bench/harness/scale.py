"""Memory per held connection as the number of connections N grows
(bench/scale): nginx (one worker, plain HTTP) and `httpcrypt serve` (one
worker thread), side by side in one run.

For every server, state and N, a fresh server process is started pinned on
CPU 0, warmed with a few requests of the kind the state makes, and its
resident memory read from /proc (VmRSS, RssAnon, and PSS from
smaps_rollup). `loadgen hold` processes on CPU 1 then open N connections
from their own loopback source addresses and bring each into the state:

- idle: connected, no byte sent;
- keepalive: one plaintext GET of a 100-byte file answered, kept alive;
- ticket: one sealed GET answered, the client presenting a ticket (the
  default client), kept alive (httpcrypt only);
- cached: the same under a reused client key, a session-cache hit
  (httpcrypt only);
- half: the first half of a browser-like request head sent.

Once the server holds every connection (its descriptor count says so), the
memory is read again: the growth divided by N is what a held connection
costs the process. Servers also spend memory up front for each connection
they are configured to hold (nginx's connection and event arrays, sized by
worker_connections): that "prepaid" share per slot is measured once per
server by starting it with two limits, and the per-connection figure of
the summary is the growth per connection plus it. Kernel socket memory is
the same for both servers and is not in either figure.

While the N connections are held, a closed-loop keep-alive load of the
state's kind on 50 further connections measures the requests per second
and the server CPU time per request; after the held connections are
released the same load runs again on the same process (N = 0), so the
pair shows what holding N costs the rest of the traffic. The server's CPU
use while only holding is read over one second.

The limits on open files bound N: the script raises RLIMIT_NOFILE as far
as the hard limit lets it, and an N the server cannot hold is replaced by
the largest multiple of 500 that fits (the reason is recorded).

Called by bench/scale."""

import argparse
import datetime
import json
import math
import os
import platform
import resource
import select
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import servers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)

FULL_N = [1000, 10000, 50000]
SMOKE_N = [300]
# Connections one `loadgen hold` process holds at most (it has the same
# file limit as the server).
HOLDER_MAX = 9000
# Connections of the rate check besides the held ones.
RATE_CONNS = 50
# Descriptors the server needs besides the held connections: the rate
# check, listeners, files, logs.
FD_MARGIN = 400
# nginx starts closing idle and kept-alive connections when fewer than a
# sixteenth of its worker_connections are free (ngx_drain_connections):
# to hold N it needs N * 16/15 slots and a margin.
SLOTS_PER_CONN = 16 / 15

STATES = {
    # state: (servers it runs on, loadgen arguments of the rate check)
    "idle": (["nginx", "httpcrypt"], ["--proto", "plain"]),
    "keepalive": (["nginx", "httpcrypt"], ["--proto", "plain"]),
    "ticket": (["httpcrypt"], ["--proto", "hc", "--keys", "ticket"]),
    "cached": (["httpcrypt"], ["--proto", "hc", "--keys", "reuse"]),
    "half": (["nginx", "httpcrypt"], ["--proto", "plain"]),
}

# The summary keys: (httpcrypt state, nginx state, target, definition).
RATIO_KEYS = {
    "mem_per_idle_conn_httpcrypt_over_nginx": (
        "idle", "idle", "<= 4",
        "memory per held connection, connected with no byte sent: httpcrypt serve / nginx "
        "(one worker each; RSS growth per connection plus the memory prepaid per connection "
        "slot), at the largest N of the run (bench/scale)"),
    "mem_per_keepalive_conn_httpcrypt_over_nginx": (
        "keepalive", "keepalive", "<= 4",
        "memory per held keep-alive connection after one plaintext GET of 100 B: httpcrypt "
        "serve / nginx (as above)"),
    "mem_per_keepalive_conn_encrypted_httpcrypt_over_nginx": (
        "ticket", "keepalive", "<= 4",
        "memory per held keep-alive connection after one sealed GET of 100 B with a ticket "
        "(default client) on httpcrypt serve / after one plaintext GET on nginx (as above)"),
    "mem_per_half_head_conn_httpcrypt_over_nginx": (
        "half", "half", "(info)",
        "memory per held connection that sent half a request head: httpcrypt serve / nginx "
        "(as above)"),
    "mem_per_keepalive_conn_cached_httpcrypt_over_nginx": (
        "cached", "keepalive", "(info)",
        "memory per held keep-alive connection after one sealed GET of 100 B under a reused "
        "client key (session cache) on httpcrypt serve / after one plaintext GET on nginx"),
}

NGINX_CONF = """
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections {conns}; multi_accept on; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  # Held connections must outlive the measurement.
  keepalive_timeout 300s;
  client_header_timeout 300s;
  keepalive_requests 1000000;
  default_type application/octet-stream;
  client_body_temp_path {dir}/tmp;
  proxy_temp_path {dir}/tmp;
  fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp;
  scgi_temp_path {dir}/tmp;
  root {root};
  server {{ listen 127.0.0.1:{port} backlog=4096; }}
}}
"""


def raise_nofile():
    """Raises RLIMIT_NOFILE (inherited by the servers and generators) as
    far as allowed; returns (limit, why it is not higher or None)."""
    want = 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
        return want, None
    except (ValueError, OSError):
        pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard, (f"RLIMIT_NOFILE hard limit is {hard} and this process may not raise it "
                  "(no CAP_SYS_RESOURCE): the server cannot hold more connections than that")


def levels(wanted, nofile):
    """The N of the run: each wanted N, or the largest multiple of 500 the
    server can hold when the file limit is lower."""
    cap = int((nofile - FD_MARGIN) / SLOTS_PER_CONN) // 500 * 500
    out = []
    for n in wanted:
        n2 = min(n, cap)
        if n2 > 0 and n2 not in out:
            out.append(n2)
    return out


def memory(pid):
    """Resident memory of one process in KiB: rss (VmRSS), anon
    (RssAnon), pss and pss_anon (smaps_rollup). PSS counts the pages a
    process shares with others (the binary, libraries, nginx's master) in
    part, so it moves when unrelated processes map the same files;
    pss_anon does not."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1])
            elif line.startswith("RssAnon:"):
                out["anon"] = int(line.split()[1])
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["pss"] = int(line.split()[1])
                elif line.startswith("Pss_Anon:"):
                    out["pss_anon"] = int(line.split()[1])
    except OSError:
        pass
    return out


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


def read_line(proc, deadline):
    """One JSON line from a generator's stdout, by the deadline."""
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.time()
        if left <= 0:
            raise RuntimeError(f"no answer from {proc.args[:4]} in time")
        r, _, _ = select.select([proc.stdout], [], [], left)
        if not r:
            continue
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise RuntimeError(f"{proc.args[:4]} exited ({proc.wait()}): "
                               f"{proc.stderr.read().decode(errors='replace')[-2000:]}")
        buf += chunk
    return json.loads(buf.decode())


class Plan:
    def __init__(self, mode, nofile):
        self.mode = mode
        if mode == "full":
            self.wanted = FULL_N
            self.rate_s, self.warmup_s, self.settle_s, self.idle_cpu_s = 2.0, 0.3, 1.0, 1.0
            # The machine is shared: the best of two rate checks is
            # nearer what the server can do than either one.
            self.rate_tries = 2
        else:
            self.wanted = SMOKE_N
            self.rate_s, self.warmup_s, self.settle_s, self.idle_cpu_s = 0.3, 0.1, 0.2, 0.2
            self.rate_tries = 1
        self.n = levels(self.wanted, nofile)
        # The servers are configured for the largest N once, whatever N a
        # case holds: their prepaid memory is then the same in every case.
        self.limit = min(nofile, math.ceil(max(self.n) * SLOTS_PER_CONN) + FD_MARGIN)


class Scale(servers.Harness):
    def __init__(self, args):
        super().__init__(args.bin_dir, "httpcrypt-scale-")
        self.nofile, self.nofile_why = raise_nofile()
        self.plan = Plan(args.mode, self.nofile)
        self.runs = []
        self.prepaid = {}
        self.round = 0

    # Servers -----------------------------------------------------------

    def start_server(self, kind, limit, tag):
        port = servers.free_ports(1)[0]
        if kind == "nginx":
            d = os.path.join(self.work, f"nginx-{tag}")
            os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
            conf = os.path.join(d, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONF.format(nofile=self.nofile, conns=limit, dir=d,
                                          root=self.fx["root"], port=port))
            s = servers.Server(f"nginx-{tag}", servers.pin("0") + ["nginx", "-c", conf, "-p", d],
                               [port], os.path.join(d, "out.log"))
        else:
            argv = servers.pin("0") + [
                self.httpcrypt, "serve", "--keys", self.fx["keys"], "--root", self.fx["root"],
                "--listen", f"127.0.0.1:{port}", "--mount", "/hc", "--pass-through",
                "--workers", "1", "--max-connections", str(limit),
                # Held connections must outlive the measurement.
                "--header-timeout", "300", "--keepalive-timeout", "300",
                # Thousands of connections from one address are the point
                # here, not a flood (bench/flood measures the defence).
                "--defence", "off"]
            s = servers.Server(f"httpcrypt-{tag}", argv, [port],
                               os.path.join(self.work, f"httpcrypt-{tag}.log"))
        s.port = port
        self.start(s)
        return s

    def serving_pid(self, s):
        """The process that holds the connections: nginx's one worker, or
        `httpcrypt serve` itself."""
        pids = s.pids()
        if s.name.startswith("nginx"):
            deadline = time.time() + 5
            while len(pids) < 2 and time.time() < deadline:
                time.sleep(0.05)
                pids = s.pids()
            if len(pids) < 2:
                raise RuntimeError("nginx started no worker")
            return pids[1]
        return pids[0]

    def stop_server(self, s):
        s.stop()
        self.servers.remove(s)

    def measure_prepaid(self, kind):
        """KiB the server spends at start per connection slot it is
        configured for: RSS with the run's limit minus RSS with 1,024
        slots (fewer in a small run), over the difference (the lower of two
        tries each)."""
        high = self.plan.limit
        low = max(64, min(1024, high // 4))
        if high <= low:
            return {"kib_per_slot": 0.0, "low": low, "high": high}
        rss = {}
        for limit in (low, high):
            vals = []
            for i in range(2):
                s = self.start_server(kind, limit, f"prepaid-{limit}-{i}")
                time.sleep(0.2)
                vals.append(memory(self.serving_pid(s))["rss"])
                self.stop_server(s)
            rss[limit] = min(vals)
        per = max(0.0, (rss[high] - rss[low]) / (high - low))
        self.say(f"{kind}: {rss[low]} KiB with {low} slots, {rss[high]} KiB with {high}: "
                 f"{per:.3f} KiB prepaid per slot")
        return {"kib_per_slot": per, "low": low, "high": high, "rss_low": rss[low],
                "rss_high": rss[high]}

    # Generators --------------------------------------------------------

    def rate(self, s, state, pids):
        """The rate check: the best of the plan's tries."""
        tries = [self.loadgen_run(s, state, pids, seconds=self.plan.rate_s)
                 for _ in range(self.plan.rate_tries)]
        return max(tries, key=lambda t: t["rps"] or 0)

    def loadgen_run(self, s, state, pids, seconds=None, count=None, conns=RATE_CONNS):
        argv = servers.pin("1") + [
            self.loadgen, "run", "--addr", f"127.0.0.1:{s.port}", "--path", "/100b",
            "--expect-len", "100", "--mode", "keepalive", "--conns", str(conns)]
        if count is not None:
            argv += ["--count", str(count), "--duration", "20"]
        else:
            argv += ["--duration", str(seconds), "--warmup", str(self.plan.warmup_s)]
        argv += STATES[state][1]
        for pid in pids:
            argv += ["--cpu-pid", str(pid)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"loadgen failed ({' '.join(argv)}):\n{r.stderr}")
        out = json.loads(r.stdout)
        return {k: out.get(k) for k in ("rps", "requests", "errors", "first_error",
                                        "server_cpu_us_per_req", "server_cpu_util")}

    def sources(self, holder):
        """A loopback source address of its own for each generator process
        of each case: every one has the whole ephemeral port range."""
        r = self.round
        return [f"127.{1 + holder}.{(r // 250) % 250 + 1}.{r % 250 + 1}"]

    def hold(self, s, state, n):
        """Starts the generators that hold n connections; returns them and
        what they set up."""
        k = max(1, math.ceil(n / HOLDER_MAX))
        shares = [n // k + (1 if i < n % k else 0) for i in range(k)]
        procs = []
        for i, share in enumerate(shares):
            argv = servers.pin("1") + [
                self.loadgen, "hold", "--addr", f"127.0.0.1:{s.port}", "--conns", str(share),
                "--state", state, "--path", "/100b", "--setup-timeout", "120",
                "--max-hold", "600"]
            for src in self.sources(i):
                argv += ["--source", src]
            procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE))
        deadline = time.time() + 150
        ready = [read_line(p, deadline) for p in procs]
        return procs, ready

    def release(self, procs):
        out = []
        for p in procs:
            p.stdin.close()
        deadline = time.time() + 30
        for p in procs:
            try:
                out.append(read_line(p, deadline))
            except RuntimeError as e:
                out.append({"error": str(e)})
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return out

    @staticmethod
    def wait_fds(pid, pred, limit_s):
        deadline = time.time() + limit_s
        n = fds(pid)
        while not pred(n) and time.time() < deadline:
            time.sleep(0.05)
            n = fds(pid)
        return n

    # One case ------------------------------------------------------------

    def case(self, kind, state, n):
        self.round += 1
        s = self.start_server(kind, self.plan.limit, f"{state}-{n}")
        try:
            pid = self.serving_pid(s)
            all_pids = s.pids()
            # Lazily built state (file handles, caches, the runtime's first
            # connection) is in place before the first reading.
            self.loadgen_run(s, state, all_pids, count=200, conns=2)
            time.sleep(0.2)
            fd0 = fds(pid)
            m0 = memory(pid)
            procs, ready = self.hold(s, state, n)
            try:
                held = sum(r["held"] for r in ready)
                fd1 = self.wait_fds(pid, lambda x: x >= fd0 + held, 30)
                if fd1 < fd0 + held:
                    self.say(f"the server holds {fd1 - fd0} of {held} connections")
                time.sleep(self.plan.settle_s)
                m1 = memory(pid)
                fd1 = fds(pid)
                # What the server holds, which is what its memory grew by.
                server_held = fd1 - fd0
                c0 = cpu_ticks([pid])
                time.sleep(self.plan.idle_cpu_s)
                idle_cpu = (cpu_ticks([pid]) - c0) / os.sysconf("SC_CLK_TCK") / self.plan.idle_cpu_s
                loaded = self.rate(s, state, all_pids)
            finally:
                released = self.release(procs)
            fd2 = self.wait_fds(pid, lambda x: x <= fd0 + 2, 30)
            empty = self.rate(s, state, all_pids)
        finally:
            self.stop_server(s)
        grown = {k: (m1[k] - m0[k]) / server_held if server_held > 0 and k in m0 and k in m1
                 else None
                 for k in ("rss", "anon", "pss", "pss_anon")}
        prepaid = self.prepaid[kind]["kib_per_slot"]
        row = {
            "server": kind, "state": state, "n": n, "held": held, "server_held": server_held,
            "failed": sum(r["failed"] for r in ready),
            "first_error": next((r["first_error"] for r in ready if r["first_error"]), None),
            "setup_s": max(r["setup_s"] for r in ready),
            "closed_by_server": sum(r.get("closed_by_server", 0) for r in released),
            "fds_before": fd0, "fds_held": fd1, "fds_after": fd2,
            "mem_before_kib": m0, "mem_held_kib": m1,
            "kib_per_conn_grown": grown, "kib_per_conn_prepaid": prepaid,
            "kib_per_conn": grown["rss"] + prepaid if grown["rss"] is not None else None,
            "idle_cpu_share": idle_cpu,
            "rate_held": loaded, "rate_empty": empty,
        }
        self.runs.append(row)
        self.say(f"{kind:9s} {state:9s} N={n:6d}: held {held} (server: {server_held}, "
                 f"failed {row['failed']}, "
                 f"closed by server {row['closed_by_server']}), RSS {m0['rss']} -> {m1['rss']} KiB: "
                 f"{grown['rss']:.2f} KiB/conn grown + {prepaid:.2f} prepaid; "
                 f"{loaded['rps']:.0f} req/s at {loaded['server_cpu_us_per_req']:.1f} µs "
                 f"(empty: {empty['rps']:.0f} req/s at {empty['server_cpu_us_per_req']:.1f} µs)")
        return row

    def run(self):
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.say(f"N = {self.plan.n} (open-file limit {self.nofile}"
                 + (f": {self.nofile_why}" if self.nofile_why else "") + ")")
        try:
            self.fx = servers.make_fixtures(self.work, self.httpcrypt, tls=False)
            for kind in ("nginx", "httpcrypt"):
                self.prepaid[kind] = self.measure_prepaid(kind)
            for n in self.plan.n:
                for state, (kinds, _) in STATES.items():
                    for kind in kinds:
                        self.case(kind, state, n)
        finally:
            self.stop_all()
            self.remove_work()
        return self.result()

    def result(self):
        dropped = [n for n in self.plan.wanted if n not in self.plan.n]
        return {
            "started": self.started.isoformat(timespec="seconds"), "mode": self.plan.mode,
            "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "nginx": nginx_version(), "nofile": self.nofile,
            "n_wanted": self.plan.wanted, "n": self.plan.n,
            "n_limited_by": self.nofile_why if dropped else None,
            "server_connection_limit": self.plan.limit, "rate_conns": RATE_CONNS,
            "prepaid": self.prepaid, "runs": self.runs, "summary": summary_keys(self.runs),
        }


def nginx_version():
    r = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
    return (r.stderr or r.stdout).strip()


def cell(runs, kind, state, n):
    return next((r for r in runs if r["server"] == kind and r["state"] == state
                 and r["n"] == n), None)


def summary_keys(runs):
    """The keys merged into bench/results/summary.json."""
    out = {}
    ns = sorted({r["n"] for r in runs})
    for key, (hc_state, ng_state, target, definition) in RATIO_KEYS.items():
        by_n = {}
        for n in ns:
            a, b = cell(runs, "httpcrypt", hc_state, n), cell(runs, "nginx", ng_state, n)
            if a and b and a["kib_per_conn"] and b["kib_per_conn"] and b["kib_per_conn"] > 0:
                by_n[str(n)] = a["kib_per_conn"] / b["kib_per_conn"]
        v = by_n[str(max(int(k) for k in by_n))] if by_n else None
        met = None
        if v is not None and target.startswith("<="):
            met = v <= float(target[2:])
        out[key] = {"value": v, "by_n": by_n, "target": target, "met": met,
                    "definition": definition}
    for r in runs:
        out[f"mem_kib_per_conn_{r['server']}_{r['state']}_{r['n']}"] = {
            "value": r["kib_per_conn"], "target": "(info)", "met": None,
            "grown": r["kib_per_conn_grown"]["rss"], "prepaid": r["kib_per_conn_prepaid"],
            "pss_anon_grown": r["kib_per_conn_grown"]["pss_anon"],
            "definition": f"KiB per held connection of {r['server']} in state {r['state']} with "
                          f"N = {r['n']} held (RSS growth per connection plus prepaid per slot; "
                          "bench/scale)"}
    for kind in ("httpcrypt", "nginx"):
        held = [r for r in runs if r["server"] == kind and r["n"] == max(ns)] if ns else []
        vals = [r["rate_held"]["rps"] / r["rate_empty"]["rps"] for r in held
                if r["rate_empty"]["rps"]]
        out[f"mem_scale_rps_held_over_empty_{kind}"] = {
            "value": statistics.median(vals) if vals else None, "target": "(info)", "met": None,
            "definition": f"{kind}: keep-alive requests per second on {RATE_CONNS} further "
                          "connections with the largest N held / with none held, same process, "
                          "median over the states (bench/scale; a busy machine moves rates)"}
    return out


def table(res):
    out = ["| server | state | N | held by the server | KiB/conn grown (RSS) | PSS anon | + prepaid | = KiB/conn "
           "| req/s held / empty | CPU µs/req held / empty | CPU while holding | setup s |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(res["runs"], key=lambda r: (r["state"], r["server"], r["n"])):
        g = r["kib_per_conn_grown"]
        pss = f"{g['pss_anon']:.2f}" if g["pss_anon"] is not None else "–"
        a, b = r["rate_held"], r["rate_empty"]
        out.append(
            f"| {r['server']} | {r['state']} | {r['n']:,} | {r['server_held']:,} | {g['rss']:.2f} | {pss} "
            f"| {r['kib_per_conn_prepaid']:.2f} | **{r['kib_per_conn']:.2f}** "
            f"| {a['rps']:,.0f} / {b['rps']:,.0f} "
            f"| {a['server_cpu_us_per_req']:.1f} / {b['server_cpu_us_per_req']:.1f} "
            f"| {r['idle_cpu_share'] * 100:.1f} % | {r['setup_s']:.1f} |")
    return "\n".join(out)


def ratio_table(res):
    out = ["| key | value (largest N) | by N | target |", "|---|---:|---|---|"]
    for k in RATIO_KEYS:
        v = res["summary"][k]
        by = ", ".join(f"{int(n):,}: {x:.2f}" for n, x in v["by_n"].items())
        val = f"{v['value']:.2f}" if v["value"] is not None else "–"
        out.append(f"| `{k}` | {val} | {by} | {v['target']} |")
    for kind in ("httpcrypt", "nginx"):
        v = res["summary"][f"mem_scale_rps_held_over_empty_{kind}"]
        val = f"{v['value']:.2f}" if v["value"] is not None else "–"
        out.append(f"| `mem_scale_rps_held_over_empty_{kind}` | {val} | | (info) |")
    return "\n".join(out)


def figures(res, fig_dir):
    """RSS growth and CPU per request against N, one line per server and
    state; nothing when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"figures skipped: {e}")
        return []
    names = []
    colour = {state: f"C{i}" for i, state in enumerate(STATES)}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, states in (("nginx", ["idle", "keepalive", "half"]),
                         ("httpcrypt", list(STATES))):
        for state in states:
            rows = sorted((r for r in res["runs"] if r["server"] == kind and r["state"] == state),
                          key=lambda r: r["n"])
            if not rows:
                continue
            style = dict(linestyle="--" if kind == "nginx" else "-",
                         marker="s" if kind == "nginx" else "o", color=colour[state],
                         label=f"{kind} {state}")
            ax1.plot([0] + [r["n"] for r in rows],
                     [0] + [(r["mem_held_kib"]["rss"] - r["mem_before_kib"]["rss"]) / 1024
                            for r in rows], **style)
            # N = 0: the same load on the same processes after the release.
            empty = statistics.median(r["rate_empty"]["server_cpu_us_per_req"] for r in rows)
            ax2.plot([0] + [r["n"] for r in rows],
                     [empty] + [r["rate_held"]["server_cpu_us_per_req"] for r in rows], **style)
    ax1.set(xlabel="connections held (N)", ylabel="RSS growth of the serving process (MiB)",
            title="Memory against held connections")
    ax2.set(xlabel="connections held (N)", ylabel="server CPU µs per request (50 more conns)",
            title="CPU per request while holding N (N = 0: median after release)")
    ax2.set_ylim(bottom=0)
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(fig_dir, exist_ok=True)
    for ext in ("png", "svg"):
        p = os.path.join(fig_dir, f"fig_scale.{ext}")
        fig.savefig(p, dpi=110)
        names.append(os.path.basename(p))
    plt.close(fig)
    return names


def markdown(res, raw_name, figs):
    limited = ""
    if res["n_limited_by"]:
        limited = (f"\nN = {', '.join(f'{n:,}' for n in res['n_wanted'])} was asked for; on this "
                   f"machine {res['n_limited_by']}, so the largest N is {max(res['n']):,}.\n")
    pre = res["prepaid"]
    fig = f"\n![RSS and CPU per request against N](figures/{figs[0]})\n" if figs else ""
    return f"""# Memory per connection as the number of connections grows

Written by `bash bench/scale` on {res['started']} ({res['cpus']} CPUs, kernel {res['kernel']},
{res['nginx']}); raw results in `results/{raw_name}`; the keys are merged into
`results/summary.json`.

What a server process spends to hold N connections that are doing nothing:
nginx with one worker (plain HTTP, Debian's package) and `httpcrypt serve
--workers 1` (one thread; plaintext outside the mount, sealed requests
under it), each started fresh for every cell, pinned on CPU 0.
{limited}
## Summary

{ratio_table(res)}

Each ratio compares the full cost per connection (next section) of the
httpcrypt state with the nginx state named in its definition, at the
largest N; "by N" shows it at every N.

## The curve

{table(res)}
{fig}
- **KiB/conn grown**: (RSS of the serving process with N connections held −
  RSS before) / the connections it holds (its open descriptors minus those
  before), read from `/proc/<pid>/status` (VmRSS); **PSS anon**:
  the growth of `Pss_Anon` in `smaps_rollup` per connection (anonymous
  memory counted as proportional share; the whole PSS is in the raw
  results, but it moves with unrelated processes that map the same
  binary and libraries).
- **prepaid**: what the server spends at start per connection it is
  configured to hold, before any connection opens: nginx touches its
  connection and event arrays (`worker_connections` of them) at start;
  measured as (RSS with {pre['nginx']['high']:,} slots − RSS with
  {pre['nginx']['low']:,}) / the difference: nginx
  {pre['nginx']['kib_per_slot']:.3f} KiB, httpcrypt {pre['httpcrypt']['kib_per_slot']:.3f}
  KiB (`--max-connections`). A server sized for N connections pays it N
  times, so it belongs to the per-connection figure (**= KiB/conn**).
- **req/s, CPU µs/req held / empty**: a closed-loop keep-alive load
  ({res['rate_conns']} connections, 100 B GETs of the state's kind: plaintext, or
  sealed with a ticket / cached key) while the N connections are held, then
  on the same process after they are released; in a full run each is the
  better of two {'2-second' if res['mode'] == 'full' else 'short'} tries. The CPU is the serving
  process's (nginx: master and worker) per request. The machine is shared
  and busy: rates move by tens of per cent between runs; memory readings
  do not.
- **CPU while holding**: the serving process's CPU use over one second
  with the N connections held and nothing sent (timers, wake-ups), in
  clock ticks of 10 ms: 1 % is one tick.
- **setup s**: how long the generators took to bring all N connections
  into the state. Connections that only connect (idle, half) complete in
  the kernel before the server accepts them; when a server accepts more
  slowly than they arrive, its listen queue fills and further SYNs are
  dropped and sent again after 1, 3, 7 … s, which is what long setups
  show.

## How it was measured

- States: **idle** (connected, no byte sent); **keepalive** (one
  plaintext GET of a 100-byte file answered, connection kept); **ticket**
  (one sealed GET answered, the client presenting the ticket of an
  earlier answer: the default client); **cached** (one sealed GET under a
  reused client key: a session-cache hit); **half** (the first half of a
  browser-like request head, about 130 bytes, sent and the rest never).
  The sealed states also leave each request's nonce in the server's replay
  window: that memory belongs to requests, not connections, but a server
  holding N such connections holds it too.
- The connections are opened by `loadgen hold` (`bench/loadgen`, the
  generator's own HTTP/1.1 code and HTTPCrypt client), at most
  {HOLDER_MAX:,} per process, each process from its own loopback source
  address (127.x.y.z) so that ephemeral ports never run out, pinned on CPU
  1, 64 setups in flight each; held connections are reset on release
  (no TIME_WAIT left behind). The reading is taken once the server's
  descriptor count shows every connection accepted, after
  {'1 s' if res['mode'] == 'full' else 'a moment'} of settling.
- Both servers are configured for the largest N ({res['server_connection_limit']:,}
  connections: nginx `worker_connections`, httpcrypt `--max-connections`;
  nginx closes idle and kept-alive connections once fewer than a sixteenth
  of its slots are free, so it gets N × 16/15 and a margin, and the
  largest N is bounded by the open-file limit the same way)
  and with header and keep-alive timeouts of 300 s so held connections
  outlive the measurement; httpcrypt with `--defence off` (many
  connections from one address are the point here; bench/flood measures
  the defence). Open-file limit of the run: {res['nofile']:,}.
- Kernel memory (socket buffers, TCP control blocks) is not in RSS and is
  the same for both servers; it is not counted.

## Reproduce

```
bash bench/scale           # full run (about 10 min): this file, results/scale-*-full.json,
                           # the mem_* keys of results/summary.json, figures/fig_scale.*
bash bench/scale --smoke   # N = 300, short rate checks, debug build, writes nothing (CI)
```

Needs nginx (installed from Debian when missing, as root), taskset and
python3. N = 50,000 needs an open-file hard limit of at least
{math.ceil(50000 * SLOTS_PER_CONN) + FD_MARGIN:,} (`ulimit -Hn`, raised by root with
CAP_SYS_RESOURCE, before running the script).
"""


def merge_summary(res, raw_name):
    path = os.path.join(BENCH, "results", "summary.json")
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    s.setdefault("ratios", {}).update(res["summary"])
    s["scale_source"] = raw_name
    with open(path, "w") as f:
        json.dump(s, f, indent=2)


def render(raw_path):
    """Writes SCALE.md and the figure again from a saved run."""
    with open(raw_path) as f:
        res = json.load(f)
    figs = figures(res, os.path.join(BENCH, "figures"))
    with open(os.path.join(BENCH, "SCALE.md"), "w") as f:
        f.write(markdown(res, os.path.basename(raw_path), figs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--bin-dir")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="only write SCALE.md and the figure again from a saved run")
    args = ap.parse_args()
    if args.render:
        render(args.render)
        return
    if not args.bin_dir:
        ap.error("--bin-dir is required")
    sc = Scale(args)
    res = sc.run()
    print()
    print(table(res))
    print()
    print(ratio_table(res))
    if args.mode == "smoke":
        bad = [r for r in res["runs"] if r["failed"] or r["held"] != r["n"]
               or r["server_held"] != r["n"]
               or r["closed_by_server"] or not r["rate_held"]["requests"]
               or r["rate_held"]["errors"] or r["rate_empty"]["errors"]]
        if bad:
            print(f"scale smoke: failed cases {[(r['server'], r['state'], r['first_error']) for r in bad]}",
                  file=sys.stderr)
            sys.exit(1)
        return
    stamp = sc.started.strftime("%Y%m%dT%H%M%SZ")
    raw_name = f"scale-{stamp}-{res['mode']}.json"
    with open(os.path.join(BENCH, "results", raw_name), "w") as f:
        json.dump(res, f, indent=1)
    figs = figures(res, os.path.join(BENCH, "figures"))
    with open(os.path.join(BENCH, "SCALE.md"), "w") as f:
        f.write(markdown(res, raw_name, figs))
    merge_summary(res, raw_name)
    print(f"\nwrote results/{raw_name}, SCALE.md, merged results/summary.json")


if __name__ == "__main__":
    main()
