"""Checks the generator's socket byte counts against a packet capture: a
count-bounded run per protocol (one connection at a time, new connection
per request, 100 B file) under `tcpdump -i lo` with a port filter; the TCP
payload bytes in the capture are summed per request (the HTTPCrypt client's
one `OPTIONS` certificate fetch is left out) and compared with what
`loadgen` counted. The capture also gives IP-level bytes and packets."""

import os
import shutil
import struct
import subprocess
import time

from configs import CONFIGS

CHECKED = ["nginx-plain", "nginx-tls12", "nginx-tls13", "rustls-tls13", "rustls-tls13-pq", "hc-plain", "hc-fresh",
           "hc-ticket", "hc2-fresh", "hc2-ticket", "hcpq-fresh"]
COUNT = 200


def parse(path, port):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    link = {1: 14, 113: 16, 276: 20, 101: 0, 12: 0}.get(linktype)
    if link is None:
        raise RuntimeError(f"unsupported link type {linktype}")
    streams, finished = {}, []
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        ip = pkt[link:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:]
        sport, dport = struct.unpack(">HH", tcp[:4])
        doff = (tcp[12] >> 4) * 4
        payload = total - ihl - doff
        client = dport if sport == port else sport
        flags = tcp[13]
        if flags & 0x12 == 0x02:  # a client SYN starts a new connection on this port
            done = streams.pop(client, None)
            if done:
                finished.append(done)
        st = streams.setdefault(client, {"payload": 0, "ip": 0, "packets": 0, "first": None, "syn": False})
        st["syn"] |= flags & 0x12 == 0x02
        st["payload"] += payload
        st["ip"] += total
        st["packets"] += 1
        if st["first"] is None and payload > 0 and dport == port:
            st["first"] = bytes(tcp[doff:doff + 8])
    return finished + list(streams.values())


def run(b, srv):
    if not shutil.which("tcpdump"):
        return {"skipped": "tcpdump not installed"}
    out = {"method": __doc__.strip()}
    for name in CHECKED:
        server_key, addr_key, extra = CONFIGS[name]
        if server_key not in srv:
            continue
        port = srv[server_key].addr[addr_key]
        pcap = os.path.join(b.work, f"{name}.pcap")
        # --immediate-mode: packets still in a ring-buffer block when tcpdump
        # stops would otherwise be lost without being reported as drops.
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "160", "-B", "65536", "--immediate-mode",
                                 "-U", "-w", pcap, f"tcp port {port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in dump.stderr:
            if "listening on" in line:
                break
        time.sleep(1.0)  # "listening" comes a little before packets are seen
        r = b.loadgen_run(srv[server_key], addr_key, extra, ("newconn", "100b"),
                          more=["--conns", "1", "--count", str(COUNT), "--duration", "60"])
        time.sleep(1.0)
        dump.terminate()
        stats = dump.stderr.read()
        dump.wait()
        streams = parse(pcap, port)
        # Whole connections only (their SYN was captured), the OPTIONS fetch left out.
        kept = [s for s in streams if s["syn"] and not (s["first"] or b"").startswith(b"OPTIONS")]
        n = len(kept)  # one request per connection
        if n == 0 or r["requests"] == 0:
            out[name] = {"error": r.get("first_error") or "nothing captured"}
            continue
        dropped = [ln.strip() for ln in stats.splitlines() if "dropped" in ln]
        pay = sum(s["payload"] for s in kept)
        out[name] = {
            "requests": r["requests"],
            "connections_captured": len(kept),
            "tcpdump": "; ".join(dropped),
            "loadgen_bytes_per_req": r["bytes_per_req"]["total"],
            "capture_payload_per_req": pay / n,
            "capture_ip_bytes_per_req": sum(s["ip"] for s in kept) / n,
            "capture_packets_per_req": sum(s["packets"] for s in kept) / n,
            "difference_bytes_per_req": pay / n - r["bytes_per_req"]["total"],
        }
        b.say(f"capture {name}: loadgen {r['bytes_per_req']['total']:.1f} B/req, tcpdump payload "
              f"{pay / n:.1f} B/req over {len(kept)} connections")
        os.remove(pcap)
    return out
