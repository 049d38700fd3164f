"""Round trips before the first response byte at an emulated 50 ms RTT.

This kernel has no netem (and no nft `queue`). In a network namespace of
its own, an iptables NFQUEUE rule on the loopback OUTPUT chain sends every
packet of the benchmark ports (28080-28099) to queue 0, where `loadgen delay` holds it for 25 ms before accepting it:
each packet crosses once, so a round trip takes 50 ms (SYN/SYN-ACK included).
Servers and generator run inside the namespace; one connection at a time,
a new connection per request, 100 B file."""

import os
import shutil
import subprocess

import servers
from configs import CONFIGS

DELAY_MS = 25.0


def run(b, fx):
    for tool in ("ip", "iptables"):
        if not shutil.which(tool):
            return {"skipped": f"{tool} not installed"}
    ns = f"hcbench{os.getpid()}"
    started = []
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        for direction in ("--dport", "--sport"):
            subprocess.run(["ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-o", "lo", "-p", "tcp",
                            direction, "28080:28099", "-j", "NFQUEUE", "--queue-num", "0"], check=True)
        delay = servers.Server("delay", [b.loadgen, "delay", "--queue", "0", "--ms", str(DELAY_MS)],
                               [], os.path.join(b.work, "delay.log"), ns)
        started.append(delay)
        srv = {
            "nginx": servers.start_nginx(b.work, fx, 1, "0", "rtt", netns=ns),
            "rustls": servers.start_rustls(b.work, fx, b.loadgen, 1, "0", "rtt", netns=ns),
            "rustlspq": servers.start_rustls(b.work, fx, b.loadgen, 1, "0", "rttpq", netns=ns, pq=True,
                                             port=28085),
            "hc": servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "rtt", False, netns=ns, port=28090),
            "hct": servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "rttt", True, netns=ns, port=28091),
            "hc2": servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "rttc", False, netns=ns, port=28092,
                                           compact=True),
            "hc2t": servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "rttct", True, netns=ns,
                                            port=28093, compact=True),
            "hcpq": servers.start_httpcrypt(b.work, fx, b.httpcrypt, 1, "0", "rttpq", False, netns=ns,
                                            port=28094, pq=True),
        }
        for s in srv.values():
            started.append(s)
            s.wait()
        out = {"rtt_ms": 2 * DELAY_MS, "method": __doc__.strip()}
        for name in b.plan.configs:
            server_key, addr_key, extra = CONFIGS[name]
            r = b.loadgen_run(srv[server_key], addr_key, extra, ("newconn", "100b"), netns=ns,
                              more=["--conns", "1", "--count", "6", "--duration", "30"])
            ttfb = r["ttfb_us"]["p50"] / 1000.0
            out[name] = {
                "ttfb_ms_p50": ttfb,
                "ttfb_ms_min": r["ttfb_us"]["min"] / 1000.0,
                "latency_ms_p50": r["latency_us"]["p50"] / 1000.0,
                "rtts_measured": round(ttfb / (2 * DELAY_MS), 2),
                "rtts_structural_min": r["flights"]["min"],
                "rtts_structural_max": r["flights"]["max"],
                "requests": r["requests"],
                "errors": r["errors"],
            }
            b.say(f"rtt {name}: {ttfb:.1f} ms to first byte = {out[name]['rtts_measured']} RTT "
                  f"(structural {r['flights']['min']}-{r['flights']['max']})")
        return out
    except (subprocess.CalledProcessError, RuntimeError, OSError) as e:
        b.say(f"rtt experiment failed: {e}")
        return {"skipped": f"failed: {e}"}
    finally:
        for s in reversed(started):
            s.stop()
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
