"""Protocols measured through their own programs: OpenSSL's s_server and
s_client (TLS 1.2/1.3), OpenSSH (sshd on a loopback port), OpenPGP with gpg
and CMS with `openssl cms`. Bytes and flights come from the relay, round trips
from the time to the first response byte under an added delay, server CPU from
a cgroup's CPU accounting, instructions from callgrind."""

import glob
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

from relay import Relay

REQ = b"q" * 99 + b"\n"  # 100 bytes each way for the line protocols
DELAY = 0.1  # one way; one round trip = 0.2 s


def free_port():
    """A port below the ephemeral range (so that no outgoing connection of
    this busy machine holds it as its local port) that binds on both
    127.0.0.1 and [::], since s_server listens on [::]."""
    import random
    for _ in range(200):
        port = random.randint(20000, 30000)
        try:
            for fam, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")):
                t = socket.socket(fam)
                try:
                    t.bind((addr, port))
                finally:
                    t.close()
            return port
        except OSError:
            continue
    raise RuntimeError("no free port")


def wait_port(port, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def run(cmd, **kw):
    kw.setdefault("check", True)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("timeout", 120)
    return subprocess.run(cmd, **kw)


class CpuGroup:
    """CPU accounting (and optional limits) for a group of processes: cgroup v2
    if its cpu controller is usable, else cgroup v1 (cpuacct, cpu, memory)."""

    def __init__(self, name, cpu_quota=None, mem_bytes=None):
        self.dirs = []
        self.v2 = None
        uni = "/sys/fs/cgroup/unified"
        root2 = "/sys/fs/cgroup"
        ctrl = None
        for r in (root2, uni):
            try:
                ctrl = open(os.path.join(r, "cgroup.controllers")).read().split()
            except OSError:
                continue
            if "cpu" in ctrl and "memory" in ctrl:
                self.v2 = r
                break
        if self.v2:
            d = os.path.join(self.v2, f"lab-{name}")
            os.makedirs(d, exist_ok=True)
            if cpu_quota:
                open(os.path.join(d, "cpu.max"), "w").write(f"{int(cpu_quota * 100000)} 100000")
            if mem_bytes:
                open(os.path.join(d, "memory.max"), "w").write(str(mem_bytes))
            self.dirs = [d]
            self.kind = "cgroup v2 (cpu.max, memory.max)"
        else:
            for ctl in ("cpuacct", "cpu", "memory"):
                d = f"/sys/fs/cgroup/{ctl}/lab-{name}"
                os.makedirs(d, exist_ok=True)
                self.dirs.append(d)
            if cpu_quota:
                open(f"/sys/fs/cgroup/cpu/lab-{name}/cpu.cfs_period_us", "w").write("100000")
                open(f"/sys/fs/cgroup/cpu/lab-{name}/cpu.cfs_quota_us", "w").write(str(int(cpu_quota * 100000)))
            if mem_bytes:
                m = f"/sys/fs/cgroup/memory/lab-{name}"
                open(f"{m}/memory.limit_in_bytes", "w").write(str(mem_bytes))
                try:
                    open(f"{m}/memory.memsw.limit_in_bytes", "w").write(str(mem_bytes))
                except OSError:
                    pass
            self.kind = "cgroup v1 (cpu.cfs_quota_us, memory.limit_in_bytes; no v2 cpu controller here)"

    def enter(self):
        pid = str(os.getpid())
        for d in self.dirs:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(pid)

    def usage_us(self):
        if self.v2:
            for line in open(os.path.join(self.dirs[0], "cpu.stat")):
                k, v = line.split()
                if k == "usage_usec":
                    return int(v)
            return 0
        return int(open(self.dirs[0] + "/cpuacct.usage").read()) / 1000.0

    def max_rss(self):
        try:
            if self.v2:
                return int(open(os.path.join(self.dirs[0], "memory.peak")).read())
            return int(open(self.dirs[2] + "/memory.max_usage_in_bytes").read())
        except OSError:
            return None

    def popen(self, cmd, **kw):
        return subprocess.Popen(cmd, preexec_fn=self.enter, **kw)

    def remove(self):
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)


def callgrind_total(pattern):
    total = 0
    for f in glob.glob(pattern):
        for line in open(f, errors="replace"):
            if line.startswith("totals:") or line.startswith("summary:"):
                total += int(line.split()[1])
                break
    return total


LAST = {}  # what the last finished child used: {"maxrss_kib": ..., "first_byte_at": ...}


def rtts_from_flights(flights, at):
    """Round trips before the first response byte reached the client at
    monotonic time `at`: the client→server flight groups the relay saw before
    then (with the relay's delay, flights of one round trip are 200 ms apart
    and cannot merge with the next)."""
    n, last = 0, None
    for f in flights:
        if f["t"] >= at:
            break
        if f["dir"] == "c2s" and last != "c2s":
            n += 1
        last = f["dir"]
    return n


PAIRS = 3  # delayed pairs (d, 3d) per measurement; the median estimate is kept


def delay_for(i, n):
    """Relay delay for the i-th of n runs: the last 2 × PAIRS runs alternate
    DELAY and 3 × DELAY, the others are undelayed."""
    k = i - (n - 2 * PAIRS)
    if k < 0:
        return 0.0
    return DELAY if k % 2 == 0 else 3 * DELAY


def rtts_from_delays(results):
    """Round trips from the delayed pairs: each round trip adds 2 × delay, so
    (t(3d) − t(d)) / 4d counts them, with process start-up and CPU cancelling
    out; the median over the pairs rides out a stall of this shared machine."""
    a = [r for r in results if r["delay"] == DELAY]
    b = [r for r in results if r["delay"] == 3 * DELAY]
    est = sorted(round((y["t"] - x["t"]) / (2 * (3 * DELAY - DELAY))) for x, y in zip(a, b))
    return est[len(est) // 2]


def reap(p):
    try:
        _, _, ru = os.wait4(p.pid, 0)
        p.returncode = 0
        LAST["maxrss_kib"] = ru.ru_maxrss
    except ChildProcessError:  # already reaped by subprocess
        p.wait()
        LAST["maxrss_kib"] = None


def first_byte(cmd, stdin_bytes, want, timeout=60, group=None, env=None):
    """Starts `cmd`, writes `stdin_bytes`, returns (seconds to the first stdout
    byte, all output once `want` bytes came); LAST["first_byte_at"] is the
    monotonic time of that byte."""
    t0 = time.monotonic()
    popen = group.popen if group else subprocess.Popen
    p = popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        p.stdin.write(stdin_bytes)
        p.stdin.flush()
        got = b""
        t_first = None
        end = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < end:
            b = os.read(p.stdout.fileno(), 65536)
            if not b:
                break
            if t_first is None:
                LAST["first_byte_at"] = time.monotonic()
                t_first = LAST["first_byte_at"] - t0
            got += b
        if t_first is None:
            raise RuntimeError(f"no answer from {cmd[0]}")
        return t_first, got
    finally:
        p.kill()
        reap(p)


# ---------------------------------------------------------------- OpenSSL TLS

def make_certs(d):
    os.makedirs(d, exist_ok=True)
    o = ["openssl"]
    run(o + ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
             f"{d}/ca.key", "-out", f"{d}/ca.pem", "-subj", "/CN=lab CA", "-days", "2"])
    run(o + ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
             f"{d}/leaf.key", "-out", f"{d}/leaf.csr", "-subj", "/CN=example.com"])
    open(f"{d}/ext.cnf", "w").write("subjectAltName=DNS:example.com\n")
    run(o + ["x509", "-req", "-in", f"{d}/leaf.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
             "-CAcreateserial", "-out", f"{d}/leaf.pem", "-days", "2", "-extfile", f"{d}/ext.cnf"])


# 0-RTT is left out: s_server refuses -early_data with its echo modes (-rev,
# -www), and through a stdin/stdout driver no early data reached it here.
OPENSSL_VARIANTS = ["tls13-full", "tls13-resumed", "tls12-full", "tls12-resumed"]


def openssl_tls(d, variant, valgrind=False, naccept=2 + 2 * PAIRS):
    """`_openssl_tls`, tried again (at most twice more, on a new port) when
    s_server exits before listening: another process on this shared machine
    may take the port between `free_port` and s_server's bind."""
    for attempt in range(3):
        try:
            return _openssl_tls(d, variant, valgrind, naccept)
        except ServerExitedEarly:
            if attempt == 2:
                raise
            time.sleep(0.5)


class ServerExitedEarly(RuntimeError):
    pass


def _openssl_tls(d, variant, valgrind=False, naccept=2 + 2 * PAIRS):
    """One server, `naccept` measured connections (plus one unmeasured to get a
    session for resumed/0-RTT)."""
    make_certs(d) if not os.path.exists(f"{d}/leaf.pem") else None
    ver = "-tls1_3" if variant.startswith("tls13") else "-tls1_2"
    resumed = "resumed" in variant or "0rtt" in variant
    port = free_port()
    early = "0rtt" in variant
    srv = ["openssl", "s_server", "-accept", str(port), "-cert", f"{d}/leaf.pem", "-key", f"{d}/leaf.key",
           "-quiet", "-naccept", str(naccept + (1 if resumed else 0)), ver]
    # -rev (echo reversed lines) cannot be combined with -early_data: the
    # 0-RTT server echoes through a small driver on its stdin and stdout.
    srv += ["-early_data", "-max_early_data", "16384"] if early else ["-rev"]
    srv += ["-groups", "X25519"] if ver == "-tls1_3" else ["-groups", "X25519:P-256"]
    cg_out = f"{d}/cg.s_server.{variant}.%p"
    for f in glob.glob(cg_out.replace("%p", "*")):
        os.remove(f)
    if valgrind:
        srv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg_out}"] + srv
    group = CpuGroup(f"ossl-{variant}")
    if early:
        server = group.popen(srv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        threading.Thread(target=echo_driver, args=(server,), daemon=True).start()
    else:
        server = group.popen(srv, stdout=subprocess.DEVNULL, stderr=open(f"{d}/s_server.err", "wb"))
        server.errfile = f"{d}/s_server.err"
    try:
        wait_port_quiet(port, server)
        sess = f"{d}/sess.{variant}"
        cli = ["openssl", "s_client", "-connect", None, "-servername", "example.com", "-CAfile", f"{d}/ca.pem",
               "-verify_return_error", "-quiet", ver]
        # TLS 1.2 needs the certificate's curve (P-256) among the groups.
        cli += ["-groups", "X25519"] if ver == "-tls1_3" else ["-groups", "X25519:P-256"]

        def client(relay_port, sess_arg):
            c = list(cli)
            c[3] = f"127.0.0.1:{relay_port}"
            c += sess_arg
            if "0rtt" in variant and "-sess_in" in sess_arg:
                open(f"{d}/early.txt", "wb").write(REQ)
                c += ["-early_data", f"{d}/early.txt"]
                return first_byte(c, b"", len(REQ))
            return first_byte(c, REQ, len(REQ))

        results = []
        relay = Relay(port, 0.0)
        if resumed:
            client(relay.port, ["-sess_out", sess])
            time.sleep(0.2)
        u0 = group.usage_us()
        for i in range(naccept):
            mark = relay.mark()
            sess_arg = ["-sess_in", sess, "-sess_out", sess] if resumed else []
            relay.delay = relay_delay_used(i, naccept)
            delayed = relay.delay > 0
            t, got = client(relay.port, sess_arg)
            at = LAST["first_byte_at"]
            relay.delay = 0.0
            time.sleep(0.3 if not valgrind else 1.5)
            c2s, s2c = relay.totals(mark)
            results.append({"t": t, "c2s": c2s, "s2c": s2c, "flights": relay.flights(mark), "got": len(got),
                            "delayed": delayed, "at": at, "delay": relay_delay_used(i, naccept)})
        cpu_us = (group.usage_us() - u0) / naccept
        relay.close()
        server.wait(timeout=120 if valgrind else 20)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        group.remove()
    if os.environ.get("LAB_DEBUG"):
        print(variant, [round(r["t"], 3) for r in results])
    first = results[0]
    if naccept < 2 * PAIRS:  # the callgrind runs: instructions only
        return {"instructions_total": callgrind_total(cg_out.replace("%p", "*"))} if valgrind else {}
    rtts = rtts_from_delays(results)
    d1 = [r for r in results if r["delay"] == DELAY][0]
    rtts_flights = rtts_from_flights(d1["flights"], d1["at"])
    out = {"bytes_c2s": first["c2s"], "bytes_s2c": first["s2c"],
           "flights": [{"dir": f["dir"], "bytes": f["bytes"]} for f in first["flights"]],
           "rtts_first_byte": rtts, "rtts_flights": rtts_flights, "server_cpu_us": cpu_us,
           "cpu_note": "s_server process CPU per connection (cgroup accounting), one process for all connections"}
    if valgrind:
        out["instructions_total"] = callgrind_total(cg_out.replace("%p", "*"))
    return out


def echo_driver(server):
    """Answers every line s_server prints (what it received) with the line
    reversed, written to its stdin (what it sends)."""
    buf = b""
    while True:
        b = os.read(server.stdout.fileno(), 65536)
        if not b:
            return
        buf += b
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                server.stdin.write(line[::-1] + b"\n")
                server.stdin.flush()
            except OSError:
                return


def listening(port):
    """Whether something listens on 127.0.0.1:port (read from /proc, so that
    the probe is not itself a connection the server would count)."""
    hexport = f"{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            parts = line.split()
            if parts[1].endswith(":" + hexport) and parts[3] == "0A":
                return True
    return False


def relay_delay_used(i, n):
    return delay_for(i, n) if n >= 2 * PAIRS else 0.0


def wait_port_quiet(port, proc, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            err = ""
            if getattr(proc, "errfile", None) and os.path.exists(proc.errfile):
                err = open(proc.errfile, errors="replace").read()[-300:]
            raise ServerExitedEarly(f"server exited early {err}")
        if listening(port):
            return True
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def openssl_instructions(d, variant):
    """Server instructions per connection: callgrind on s_server with 1 and
    with 3 measured connections; the difference over 2 is one connection
    without the process start-up."""
    one = openssl_tls(d, variant, valgrind=True, naccept=1)["instructions_total"]
    two = openssl_tls(d, variant, valgrind=True, naccept=2)["instructions_total"]
    return two - one


# ---------------------------------------------------------------- OpenSSH

SSH_VARIANTS = ["curve25519-full", "curve25519-mux", "default-kex-full"]


class Sshd:
    def __init__(self, d, valgrind=False):
        self.d = d
        os.makedirs(d, exist_ok=True)
        os.makedirs("/run/sshd", exist_ok=True)
        for k in ("host", "user"):
            if not os.path.exists(f"{d}/{k}_key"):
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{d}/{k}_key"])
        shutil.copy(f"{d}/user_key.pub", f"{d}/authorized_keys")
        self.port = free_port()
        open(f"{d}/sshd_config", "w").write(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
PrintLastLog no
LogLevel ERROR
""")
        cmd = ["/usr/sbin/sshd", "-D", "-e", "-f", f"{d}/sshd_config"]
        self.cg = f"{d}/cg.sshd.%p"
        for f in glob.glob(self.cg.replace("%p", "*")):
            os.remove(f)
        if valgrind:
            cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={self.cg}"] + cmd
        self.group = CpuGroup("sshd")
        self.proc = self.group.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port_quiet(self.port, self.proc)

    def client(self, relay_port, kex, extra=()):
        c = ["ssh", "-F", "/dev/null", "-p", str(relay_port), "-i", f"{self.d}/user_key", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             "-o", "ConnectTimeout=60"]
        if kex:
            c += ["-o", f"KexAlgorithms={kex}"]
        return c + list(extra) + ["root@127.0.0.1", f"head -c {len(REQ)}"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.group.remove()


def ssh(d, variant, n=3 + 2 * PAIRS):
    kex = None if variant.startswith("default") else "curve25519-sha256"
    s = Sshd(d)
    try:
        relay = Relay(s.port, 0.0)
        results = []
        extra = []
        master = None
        if variant.endswith("mux"):
            sock = f"{d}/mux.sock"
            if os.path.exists(sock):
                os.remove(sock)
            extra = ["-S", sock]
            mc = s.client(relay.port, kex, ["-M", "-N", "-S", sock])[:-1]
            master = subprocess.Popen(mc, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            end = time.monotonic() + 30
            while not os.path.exists(sock) and time.monotonic() < end:
                time.sleep(0.05)
            time.sleep(0.3)
        for i in range(n):
            mark = relay.mark()
            u0 = s.group.usage_us()
            relay.delay = delay_for(i, n)
            delayed = relay.delay > 0
            t, got = first_byte(s.client(relay.port, kex, extra), REQ, len(REQ))
            at = LAST["first_byte_at"]
            relay.delay = 0.0
            time.sleep(0.3)
            c2s, s2c = relay.totals(mark)
            results.append({"t": t, "c2s": c2s, "s2c": s2c, "flights": relay.flights(mark),
                            "cpu": s.group.usage_us() - u0, "delayed": delayed, "at": at,
                            "delay": delay_for(i, n)})
        if master:
            master.terminate()
            master.wait()
        relay.close()
    finally:
        s.stop()
    d1 = [r for r in results if r["delay"] == DELAY][0]
    cpus = sorted(r["cpu"] for r in results if not r["delayed"])
    first = results[0]
    return {"bytes_c2s": first["c2s"], "bytes_s2c": first["s2c"],
            "flights": [{"dir": f["dir"], "bytes": f["bytes"]} for f in first["flights"]],
            "rtts_first_byte": rtts_from_delays(results),
            "rtts_flights": rtts_from_flights(d1["flights"], d1["at"]),
            "server_cpu_us": cpus[len(cpus) // 2],
            "cpu_note": "sshd CPU per connection incl. its fork + re-exec and the `head` command (cgroup accounting)"}


def ssh_client_instructions(d, variant):
    """sshd cannot run under valgrind: its pre-authentication sandbox sets
    RLIMIT_NOFILE to 0, which valgrind refuses, and the connection resets.
    So the count is the client's: one `ssh` process (start-up included)."""
    kex = None if variant.startswith("default") else "curve25519-sha256"
    s = Sshd(d)
    out = f"{d}/cg.ssh.%p"
    for f in glob.glob(out.replace("%p", "*")):
        os.remove(f)
    try:
        # Let the client finish by itself: a killed valgrind writes no profile.
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + s.client(s.port, kex)
        run(cmd, input=REQ, timeout=300)
    finally:
        s.stop()
    n = callgrind_total(out.replace("%p", "*"))
    if n == 0:
        raise RuntimeError("callgrind counted nothing for the ssh client")
    return n


# ---------------------------------------------------------------- OpenPGP, CMS

def timed(cmd, group=None, valgrind_out=None, **kw):
    if valgrind_out:
        cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={valgrind_out}"] + cmd
    popen = group.popen if group else subprocess.Popen
    p = popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    out, err = p.communicate(timeout=300)
    LAST["maxrss_kib"] = None
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {err.decode(errors='replace')[-300:]}")
    return out


def gpg_setup(d):
    home = f"{d}/gnupg"
    if os.path.exists(home):
        shutil.rmtree(home)
    os.makedirs(home, mode=0o700)
    env = dict(os.environ, GNUPGHOME=home)
    g = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    for who in ("server", "client"):
        run(g + ["--quick-gen-key", f"{who}@lab.example", "ed25519", "sign", "never"], env=env)
        fpr = run(["gpg", "--batch", "--with-colons", "--list-keys", f"{who}@lab.example"], env=env).stdout.decode()
        fpr = [line.split(":")[9] for line in fpr.splitlines() if line.startswith("fpr")][0]
        run(g + ["--quick-add-key", fpr, "cv25519", "encr", "never"], env=env)
    # No compression: the lab's bodies are runs of one letter, which would
    # otherwise shrink to nothing and hide the format's overhead.
    return env, g + ["--trust-model", "always", "--no-auto-key-locate", "--compress-algo", "none"]


def gpg_exchange(d, req_plain, rsp_plain, env, g, group=None, valgrind_prefix=None):
    open(f"{d}/req.txt", "wb").write(req_plain)
    open(f"{d}/rsp.txt", "wb").write(rsp_plain)
    for f in ("req.gpg", "rsp.gpg", "req.out"):
        if os.path.exists(f"{d}/{f}"):
            os.remove(f"{d}/{f}")
    # client: encrypt the request to the server's key
    timed(g + ["-e", "-r", "server@lab.example", "-o", f"{d}/req.gpg", f"{d}/req.txt"], env=env)
    # server: decrypt, then sign and encrypt the response to the client
    vg = (lambda n: f"{valgrind_prefix}.{n}.%p") if valgrind_prefix else (lambda n: None)
    u0 = group.usage_us() if group else 0
    timed(g + ["-d", "-o", f"{d}/req.out", f"{d}/req.gpg"], env=env, group=group, valgrind_out=vg("dec"))
    timed(g + ["-s", "-e", "-u", "server@lab.example", "-r", "client@lab.example", "-o", f"{d}/rsp.gpg",
               f"{d}/rsp.txt"], env=env, group=group, valgrind_out=vg("enc"))
    cpu = (group.usage_us() - u0) if group else None
    if open(f"{d}/req.out", "rb").read() != req_plain:
        raise RuntimeError("gpg: the server decrypted something else")
    return os.path.getsize(f"{d}/req.gpg"), os.path.getsize(f"{d}/rsp.gpg"), cpu


def cms_setup(d):
    make_certs(d) if not os.path.exists(f"{d}/ca.pem") else None
    for who in ("srv", "cli"):
        run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
             f"{d}/{who}.key", "-out", f"{d}/{who}.csr", "-subj", f"/CN={who}.lab.example"])
        run(["openssl", "x509", "-req", "-in", f"{d}/{who}.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
             "-CAcreateserial", "-out", f"{d}/{who}.pem", "-days", "2"])


def cms_exchange(d, req_plain, rsp_plain, group=None, valgrind_prefix=None):
    open(f"{d}/req.txt", "wb").write(req_plain)
    open(f"{d}/rsp.txt", "wb").write(rsp_plain)
    o = ["openssl", "cms"]
    vg = (lambda n: f"{valgrind_prefix}.{n}.%p") if valgrind_prefix else (lambda n: None)
    timed(o + ["-encrypt", "-binary", "-aes-128-gcm", "-in", f"{d}/req.txt", "-outform", "DER", "-out",
               f"{d}/req.cms", f"{d}/srv.pem"])
    u0 = group.usage_us() if group else 0
    timed(o + ["-decrypt", "-binary", "-inform", "DER", "-in", f"{d}/req.cms", "-recip", f"{d}/srv.pem", "-inkey",
               f"{d}/srv.key", "-out", f"{d}/req.out"], group=group, valgrind_out=vg("dec"))
    timed(o + ["-sign", "-binary", "-nocerts", "-nodetach", "-signer", f"{d}/srv.pem", "-inkey", f"{d}/srv.key",
               "-md", "sha256", "-in", f"{d}/rsp.txt", "-outform", "DER", "-out", f"{d}/rsp.signed"],
          group=group, valgrind_out=vg("sign"))
    timed(o + ["-encrypt", "-binary", "-aes-128-gcm", "-inform", "DER", "-in", f"{d}/rsp.signed", "-outform", "DER",
               "-out", f"{d}/rsp.cms", f"{d}/cli.pem"], group=group, valgrind_out=vg("enc"))
    cpu = (group.usage_us() - u0) if group else None
    if open(f"{d}/req.out", "rb").read() != req_plain:
        raise RuntimeError("cms: the server decrypted something else")
    return os.path.getsize(f"{d}/req.cms"), os.path.getsize(f"{d}/rsp.cms"), cpu


# ---------------------------------------------------------------- HTTPCrypt over sockets

HC_SOCKET_VARIANTS = ["first-fetch-get-form", "first-fetch-post-form"]


def httpcrypt_sockets(d, hc_bin, variant, n=2 + 2 * PAIRS):
    """`httpcrypt serve` and `httpcrypt fetch` through the relay: a fetch with
    no cached certificate asks `OPTIONS` first (HTTP discovery), then sends
    the encrypted request. `second-request-ticket` is the difference between
    `fetch --repeat 2` and `--repeat 1`: one more request on a client that
    holds the certificate and a ticket."""
    os.makedirs(f"{d}/site", exist_ok=True)
    if not os.path.exists(f"{d}/keys"):
        run([hc_bin, "keygen", "--dir", f"{d}/keys"])
    open(f"{d}/site/d.txt", "wb").write(b"r" * 100)
    port = free_port()
    srv = subprocess.Popen([hc_bin, "serve", "--keys", f"{d}/keys", "--root", f"{d}/site", "--listen",
                            f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port_quiet(port, srv)
        relay = Relay(port, 0.0)

        def fetch(extra, delay):
            mark = relay.mark()
            relay.delay = delay
            cmd = [hc_bin, "fetch"] + extra + [f"http://127.0.0.1:{relay.port}/d.txt"]
            t, got = first_byte(cmd, b"", 100)
            at = LAST["first_byte_at"]
            relay.delay = 0.0
            time.sleep(0.3)
            if not got.startswith(b"r" * 100):
                raise RuntimeError(f"httpcrypt fetch printed {got[:80]!r}")
            return t, relay.totals(mark), relay.flights(mark), at

        form = ["--no-get-form"] if variant == "first-fetch-post-form" else []
        if variant == "second-request-ticket":
            (_, one, _, _) = fetch(["--repeat", "1"], False)
            (_, two, _, _) = fetch(["--repeat", "2"], False)
            return {"bytes_c2s": two[0] - one[0], "bytes_s2c": two[1] - one[1], "flights": [],
                    "rtts_first_byte": None,
                    "rtts_note": "a request on a pooled connection with a ticket: one message each way"}
        results, res = [], None
        for i in range(n):
            t, tot, fl, at = fetch(form, delay_for(i, n))
            if i == 0:
                res = (tot, fl)
            results.append({"t": t, "delay": delay_for(i, n), "flights": fl, "at": at})
        d1 = [r for r in results if r["delay"] == DELAY][0]
        return {"bytes_c2s": res[0][0], "bytes_s2c": res[0][1],
                "flights": [{"dir": f["dir"], "bytes": f["bytes"]} for f in res[1]],
                "rtts_first_byte": rtts_from_delays(results),
                "rtts_flights": rtts_from_flights(d1["flights"], d1["at"]),
                "rtts_note": "includes the OPTIONS request that fetches the certificate (no DNS record, no cache)"}
    finally:
        srv.kill()
        srv.wait()
