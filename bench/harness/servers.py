"""Servers under test: fixtures (files, keys, certificate), nginx, the
rustls baseline and `httpcrypt serve`, each started pinned with taskset and
stopped by its own process id."""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SIZES = [("100b", 100), ("1k", 1024), ("10k", 10 * 1024), ("100k", 100 * 1024), ("1m", 1024 * 1024)]

NGINX_HTTP = """
daemon off;
master_process on;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; multi_accept on; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 65;
  keepalive_requests 1000000;
  default_type application/octet-stream;
  client_body_temp_path {dir}/tmp;
  proxy_temp_path {dir}/tmp;
  fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp;
  scgi_temp_path {dir}/tmp;
  ssl_certificate {cert};
  ssl_certificate_key {key};
  root {root};
  # Plain HTTP.
  server {{ listen 127.0.0.1:{plain} backlog=4096; }}
  # The paper's configuration (its section 6): TLS 1.2, ECDHE-ECDSA-AES256-GCM-SHA384
  # on P-256, no session cache, no tickets: every connection is a full handshake.
  server {{
    listen 127.0.0.1:{tls12} ssl backlog=4096;
    ssl_protocols TLSv1.2; ssl_ciphers ECDHE-ECDSA-AES256-GCM-SHA384; ssl_ecdh_curve prime256v1;
    ssl_session_cache off; ssl_session_tickets off;
  }}
  # The same with session tickets (the paper's "Encrypted, tickets").
  server {{
    listen 127.0.0.1:{tls12t} ssl backlog=4096;
    ssl_protocols TLSv1.2; ssl_ciphers ECDHE-ECDSA-AES256-GCM-SHA384; ssl_ecdh_curve prime256v1;
    ssl_session_cache off; ssl_session_tickets on;
  }}
  # TLS 1.3, X25519, full handshakes.
  server {{
    listen 127.0.0.1:{tls13} ssl backlog=4096;
    ssl_protocols TLSv1.3; ssl_ecdh_curve X25519;
    ssl_session_cache off; ssl_session_tickets off;
  }}
}}
"""


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def make_fixtures(work, httpcrypt_bin, tls=True):
    """Files of every size, an ECDSA P-256 certificate (when `tls`), an
    httpcrypt key dir."""
    # nginx workers run as an unprivileged user: the tree must be readable.
    os.chmod(work, 0o755)
    root = os.path.join(work, "root")
    os.makedirs(root, exist_ok=True)
    for name, size in SIZES:
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
        os.chmod(os.path.join(root, name), 0o644)
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    if tls:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-subj", "/CN=localhost", "-days", "30", "-keyout", key, "-out", cert],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    keys = os.path.join(work, "keys")
    subprocess.run([httpcrypt_bin, "keygen", "--dir", keys], check=True, stdout=subprocess.DEVNULL)
    # Servers with --compact re-issue their certificates as version 2, so
    # they get a key directory of their own.
    keys2 = os.path.join(work, "keys2")
    subprocess.run([httpcrypt_bin, "keygen", "--dir", keys2], check=True, stdout=subprocess.DEVNULL)
    # Servers with --pq on add an ML-KEM-768 key and suite-2 certificates
    # to their key directory, so they get one of their own, made with it.
    keyspq = os.path.join(work, "keyspq")
    subprocess.run([httpcrypt_bin, "keygen", "--pq", "--dir", keyspq], check=True,
                   stdout=subprocess.DEVNULL)
    return {"root": root, "cert": cert, "key": key, "keys": keys, "keys2": keys2, "keyspq": keyspq}


def wait_port(port, proc, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.args}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open: {proc.args}")


def wait_port_netns(netns, port, proc, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.args}")
        r = subprocess.run(["ip", "netns", "exec", netns, "bash", "-c",
                            f"exec 3<>/dev/tcp/127.0.0.1/{port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open in {netns}: {proc.args}")


class Server:
    """One server process (with its children, for nginx)."""

    def __init__(self, name, argv, ports, log, netns=None):
        self.name = name
        self.ports = ports
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.netns = netns

    def wait(self):
        for p in self.ports:
            if self.netns:
                wait_port_netns(self.netns, p, self.proc)
            else:
                wait_port(p, self.proc)

    def pids(self):
        """The process and its children (nginx workers), for CPU accounting."""
        pid = self.proc.pid
        out = [pid]
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
        return out

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def pin(cpus):
    """taskset prefix; on a one-CPU machine everything shares CPU 0."""
    if (os.cpu_count() or 1) < 2:
        cpus = "0"
    return ["taskset", "-c", cpus]


def start_nginx(work, fx, workers, cpus, tag, netns=None):
    d = os.path.join(work, f"nginx-{tag}")
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    plain, tls12, tls12t, tls13 = free_ports(4) if not netns else (28080, 28081, 28082, 28083)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_HTTP.format(workers=workers, dir=d, cert=fx["cert"], key=fx["key"],
                                  root=fx["root"], plain=plain, tls12=tls12, tls12t=tls12t,
                                  tls13=tls13))
    s = Server(f"nginx-{tag}", pin(cpus) + ["nginx", "-c", conf, "-p", d],
               [plain, tls12, tls12t, tls13], os.path.join(d, "out.log"), netns)
    s.addr = {"plain": plain, "tls12": tls12, "tls12t": tls12t, "tls13": tls13}
    return s


def start_rustls(work, fx, loadgen, workers, cpus, tag, netns=None, pq=False, port=None):
    """The rustls TLS 1.3 server of `loadgen serve-tls`; `pq`: taking only
    the X25519MLKEM768 hybrid group."""
    port = port or (free_ports(1)[0] if not netns else 28084)
    s = Server(f"rustls-{tag}", pin(cpus) + [
        loadgen, "serve-tls", "--listen", f"127.0.0.1:{port}", "--cert", fx["cert"],
        "--key", fx["key"], "--root", fx["root"], "--workers", str(workers)] + (["--pq"] if pq else []),
        [port], os.path.join(work, f"rustls-{tag}.log"), netns)
    s.addr = {"tls13": port}
    return s


def start_httpcrypt(work, fx, httpcrypt, workers, cpus, tag, tickets, netns=None, port=None,
                    compact=False, pq=False):
    """`httpcrypt serve` under the mount /hc, plaintext GETs outside it
    passed through to the same static-file service (the null baseline).
    `compact`: announce request profile 2 (spec §4.5), which the load
    generator then uses. `pq`: `--pq on`, suite-2 certificates at
    `OPTIONS /hc/pq` beside the v1 ones (spec/hybrid.md)."""
    port = port or (free_ports(1)[0] if not netns else 28090)
    keys = fx["keyspq"] if pq else fx["keys2"] if compact else fx["keys"]
    argv = pin(cpus) + [httpcrypt, "serve", "--keys", keys, "--root", fx["root"],
                        "--listen", f"127.0.0.1:{port}", "--mount", "/hc", "--pass-through",
                        "--workers", str(workers),
                        # The load generator drives key agreements far past the
                        # load-aware defence's threshold (spec §14); this
                        # benchmark measures the protocol's own cost, bench/flood
                        # measures the defence.
                        "--defence", "off"]
    if not tickets:
        argv.append("--no-tickets")
    if compact:
        argv.append("--compact")
    if pq:
        argv += ["--pq", "on"]
    s = Server(f"httpcrypt-{tag}", argv, [port], os.path.join(work, f"httpcrypt-{tag}.log"), netns)
    s.addr = {"http": port}
    return s


class Harness:
    """What every benchmark of bench/harness keeps: the binaries, a work
    directory, the servers it started (stopped in reverse order)."""

    @staticmethod
    def args():
        """The command line of a side benchmark: --mode full|smoke, --bin-dir."""
        ap = argparse.ArgumentParser()
        ap.add_argument("--mode", choices=["full", "smoke"], default="full")
        ap.add_argument("--bin-dir", required=True)
        return ap.parse_args()

    def __init__(self, bin_dir, prefix):
        self.bin = bin_dir
        self.loadgen = os.path.join(bin_dir, "loadgen")
        self.httpcrypt = os.path.join(bin_dir, "httpcrypt")
        self.work = tempfile.mkdtemp(prefix=prefix)
        self.servers = []

    def say(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def start(self, s):
        self.servers.append(s)
        s.wait()
        return s

    def start_baselines(self, fx, tag):
        """nginx and the rustls server, `httpcrypt serve` without tickets
        ("hc") and with them ("hct"): one worker each, on CPU 0."""
        return {
            "nginx": self.start(start_nginx(self.work, fx, 1, "0", tag)),
            "rustls": self.start(start_rustls(self.work, fx, self.loadgen, 1, "0", tag)),
            "hc": self.start(start_httpcrypt(self.work, fx, self.httpcrypt, 1, "0", tag,
                                             tickets=False)),
            "hct": self.start(start_httpcrypt(self.work, fx, self.httpcrypt, 1, "0", tag + "t",
                                              tickets=True)),
        }

    def start_suite2(self, fx, tag):
        """`httpcrypt serve --compact` without tickets ("hc2"), the same with
        suite 2 ("hcpq", `--pq on`) and the rustls server taking only
        X25519MLKEM768 ("rustlspq"): one worker each, on CPU 0."""
        return {
            "hc2": self.start(start_httpcrypt(self.work, fx, self.httpcrypt, 1, "0", tag + "c",
                                              tickets=False, compact=True)),
            "hcpq": self.start(start_httpcrypt(self.work, fx, self.httpcrypt, 1, "0", tag + "pq",
                                               tickets=False, compact=True, pq=True)),
            "rustlspq": self.start(start_rustls(self.work, fx, self.loadgen, 1, "0", tag + "pq",
                                                pq=True)),
        }

    def stop_all(self):
        for s in reversed(self.servers):
            s.stop()
        self.servers = []

    def remove_work(self):
        shutil.rmtree(self.work, ignore_errors=True)


def rotated(names, rep):
    """`names` in the order of repetition `rep` (from 0): rotated by one each
    repetition, so no configuration always runs first after a pause."""
    k = rep % len(names)
    return names[k:] + names[:k]
