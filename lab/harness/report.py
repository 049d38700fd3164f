"""Turns the lab's results into lab/results/summary.json, lab/REPORT.md and
lab/figures/. Every number in the report comes from the results passed in."""

import json
import os

IMPL = {
    "httpcrypt": "httpcrypt-proto (aws-lc-rs X25519 and ChaCha20-Poly1305, RustCrypto HChaCha20/SHA3, ed25519-dalek; "
                 "suite 2: aws-lc-rs ML-KEM-768, the client's encapsulation through `httpcrypt`)",
    "tls-rustls": "rustls 0.23 + aws-lc-rs (X25519, ECDSA P-256, AES-GCM/ChaCha20)",
    "ohttp": "ohttp 0.5 + bhttp 0.5, rust-hpke (RustCrypto)",
    "noise": "snow 0.9, default resolver (RustCrypto)",
    "tls-openssl": "OpenSSL 3.0 s_server/s_client (ECDSA P-256 cert, X25519)",
    "ssh": "OpenSSH 9.2 (Debian), ed25519 host and user keys",
    "openpgp": "GnuPG 2.2 (libgcrypt), ed25519 + cv25519",
    "cms": "OpenSSL 3.0 cms, ECDH P-256 (kari) + AES-128-GCM, ECDSA P-256 signature",
    "httpcrypt-sockets": "`httpcrypt serve` + `httpcrypt fetch` (GET of a 100-byte file)",
}


def fmt(x, d=1):
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{d}f}"
    return f"{x:,}"


def rows(res):
    """One uniform row per protocol and variant."""
    out = []
    cg = res.get("callgrind", {})
    for r in res["inproc"]:
        key = f'{r["protocol"]}/{r["variant"]}'
        out.append({
            "key": key, "protocol": r["protocol"], "variant": r["variant"], "source": "in-process",
            "bytes_c2s": r["bytes_c2s"], "bytes_s2c": r["bytes_s2c"], "bytes_fresh_100b": r["bytes_fresh_100b"],
            "payload_bytes": r["plain_request_bytes"] + r["plain_response_bytes"],
            "rtts_first_byte": r["rtts_first_byte"],
            "server_cpu_us_fresh": r["cpu_us"]["server"]["total"], "client_cpu_us_fresh": r["cpu_us"]["client"]["total"],
            "instructions_fresh": cg.get(key, {}).get("server"), "instructions_client": cg.get(key, {}).get("client"),
            "instructions_note": "server-side steps of one exchange (callgrind --toggle-collect=*server_step*)",
            "cpu_note": "median thread CPU of the server's steps, pinned core",
            "note": r["extra"].get("note"), "discovery_bytes": r["extra"].get("discovery_bytes"),
        })
    for key, r in res["external"].items():
        proto, variant = key.split("/", 1)
        payload = 200 if proto in ("tls-openssl", "ssh") else None
        if proto == "httpcrypt-sockets":
            payload = None  # a GET of a 100-byte file; the inner head is the client's
        elif payload is None:
            mo = {m["size"]: m for m in r["message_overhead"]}
            payload = r["bytes_c2s"] - mo[100]["c2s"] + r["bytes_s2c"] - mo[100]["s2c"]
        out.append({
            "key": key, "protocol": proto, "variant": variant, "source": "external programs",
            "bytes_c2s": r["bytes_c2s"], "bytes_s2c": r["bytes_s2c"], "bytes_fresh_100b": r["bytes_c2s"] + r["bytes_s2c"],
            "payload_bytes": payload, "rtts_first_byte": r["rtts_first_byte"],
            "server_cpu_us_fresh": r.get("server_cpu_us"), "client_cpu_us_fresh": None,
            "instructions_fresh": r.get("instructions_server"), "instructions_client": r.get("instructions_client"),
            "instructions_note": {"tls-openssl": "s_server: 2 connections − 1 connection, start-up excluded",
                                  "ssh": "server not countable (sshd's sandbox does not run under valgrind); "
                                         "client: one ssh process incl. start-up",
                                  }.get(proto, "server-side commands, whole processes incl. start-up"),
            "cpu_note": r.get("cpu_note", ""), "note": None, "discovery_bytes": None,
        })
    return out


def summary(res):
    s = {"machine": res["machine"], "mode": res["mode"], "protocols": {}}
    for r in rows(res):
        s["protocols"].setdefault(r["protocol"], {})[r["variant"]] = {
            "bytes_fresh_100b": r["bytes_fresh_100b"], "payload_bytes": r["payload_bytes"],
            "rtts_first_byte": r["rtts_first_byte"],
            "server_cpu_us_fresh": None if r["server_cpu_us_fresh"] is None else round(r["server_cpu_us_fresh"], 2),
            "instructions_fresh": r["instructions_fresh"], "source": r["source"],
            "client_cpu_us_fresh": None if r["client_cpu_us_fresh"] is None else round(r["client_cpu_us_fresh"], 2),
            "instructions_client": r["instructions_client"],
        }
        if r["note"]:
            s["protocols"][r["protocol"]][r["variant"]]["note"] = r["note"]
        if r["discovery_bytes"]:
            s["protocols"][r["protocol"]][r["variant"]]["discovery_bytes"] = r["discovery_bytes"]
    return s


def figures(res, figdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(figdir, exist_ok=True)
    rs = rows(res)
    made = []
    labels = [r["key"] for r in rs]

    def bar(vals, title, fname, log=False, xlabel=""):
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(labels) + 1.2))
        ys = range(len(labels))
        ax.barh(list(ys), [v or 0 for v in vals], color=["#c0392b" if l.startswith("httpcrypt") else "#34495e" for l in labels])
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        if log:
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        fig.tight_layout()
        fig.savefig(os.path.join(figdir, fname), dpi=110)
        plt.close(fig)
        made.append(fname)

    bar([r["bytes_fresh_100b"] for r in rs], "Bytes on the wire, first exchange (both directions)", "bytes_fresh.png",
        xlabel="bytes")
    bar([r["rtts_first_byte"] for r in rs], "Round trips to the first response byte (above TCP)", "rtts.png",
        xlabel="round trips")
    bar([r["instructions_fresh"] for r in rs], "Server instructions for one fresh exchange (callgrind)",
        "instructions_server.png", log=True, xlabel="instructions (log)")
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in res["inproc"]:
        mo = r["message_overhead"]
        ax.plot([m["size"] + 1 for m in mo], [max(m["c2s"], 1) for m in mo], marker="o",
                label=f'{r["protocol"]}/{r["variant"]}', lw=2 if r["protocol"] == "httpcrypt" else 1)
    for k, r in res["external"].items():
        if "message_overhead" in r:
            mo = r["message_overhead"]
            ax.plot([m["size"] + 1 for m in mo], [max(m["c2s"], 1) for m in mo], marker="s", ls="--", label=k)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("request body bytes + 1")
    ax.set_ylabel("bytes above plain HTTP (client → server)")
    ax.set_title("Per-message overhead", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(figdir, "overhead.png"), dpi=110)
    plt.close(fig)
    made.append("overhead.png")
    return made


def write(res, outdir, smoke):
    """outdir is lab/results (or a temporary directory for --smoke)."""
    s = summary(res)
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    labdir = os.path.dirname(os.path.abspath(outdir)) if not smoke else outdir
    figs = figures(res, os.path.join(labdir, "figures"))
    md = render(res, figs)
    with open(os.path.join(labdir, "REPORT.md"), "w") as f:
        f.write(md)


def render(res, figs):
    rs = rows(res)
    by = {r["key"]: r for r in rs}
    inp = {f'{r["protocol"]}/{r["variant"]}': r for r in res["inproc"]}
    m = res["machine"]
    L = []
    w = L.append
    w("# Protocol characterisation lab\n")
    w("Generated by `lab/run` (" + res["mode"] + f' mode) on {m["date"]}. Every number below comes from that run; '
      "rerun the command to regenerate this file, `lab/results/summary.json` and `lab/figures/`.\n")
    w("## Machine and versions\n")
    w("| item | value |\n|---|---|")
    for k in ("cpu", "cores", "memory", "kernel", "rustc", "openssl", "openssh", "gpg", "valgrind", "python"):
        w(f"| {k} | {m.get(k, '')} |")
    w(f'| Rust crates | {m.get("crates", "").replace(";", "; ")} |')
    w(f'\n**Timings were taken on a shared 2-core machine** (other jobs ran beside this one): CPU times are medians of '
      f'many runs on a core pinned with `taskset`, and should be read as ratios; the instruction counts (callgrind) are '
      f'the device-independent figures.\n')
    w("## What is measured, and how\n")
    w("- **Payload.** In-process protocols and the message formats carry the same HTTP/1.1 request "
      f'(`POST /api`, {inp.get("httpcrypt/fresh-post", {}).get("plain_request_bytes", "?")} bytes with a 100-byte body) '
      f'and response ({inp.get("httpcrypt/fresh-post", {}).get("plain_response_bytes", "?")} bytes with a 100-byte body). '
      "OpenSSL's `s_server -rev` and OpenSSH's `head -c 100` carry a 100-byte line each way instead (payload column).")
    w("- **Bytes** are everything above TCP in both directions for one first exchange: handshake, certificates, "
      "tickets, records. In-process protocols are counted at the library's output; OpenSSL and OpenSSH through a TCP relay "
      "on 127.0.0.1 (`lab/harness/relay.py`); OpenPGP and CMS are file sizes. Out-of-band key discovery (HTTPCrypt's "
      "certificate, OHTTP's key configuration) is listed separately.")
    w("- **Round trips to the first response byte**, above TCP's own handshake: counted from the flights for in-process "
      "protocols; for OpenSSL, OpenSSH and `httpcrypt fetch`, the relay holds every chunk d = 100 ms "
      "in one run and 3d in the next; each round trip adds 2d, so the round trips are (t(3d) − t(d)) / 4d, rounded (median of "
      "three such pairs), with process start-up and CPU cancelling out. The results file also keeps the count of client→server flight groups "
      "before the first response byte (`rtts_flights`), which is higher for SSH because its server sends messages the "
      "client does not wait for.")
    w("- **CPU**: per step of each side (thread CPU time) for in-process protocols; for OpenSSL and OpenSSH the CPU of "
      "the server processes per connection from cgroup CPU accounting; for gpg and openssl cms the server-side commands "
      "(decrypt the request, sign and encrypt the response) as whole processes.")
    w("- **Instructions**: `valgrind --tool=callgrind`. In-process: only the server's (or client's) steps of one "
      "exchange after a warm-up (`--toggle-collect`). OpenSSL: (2 connections − 1 connection) on the "
      "s_server, so process start-up cancels. OpenSSH: sshd cannot run under valgrind (its pre-authentication sandbox "
      "sets RLIMIT_NOFILE to 0, which valgrind refuses), so only the `ssh` client is counted, start-up included. "
      "gpg/cms: whole server-side commands including start-up.\n")

    w("## 1. Headline: one first encrypted request and response\n")
    w("| protocol / variant | implementation | C→S bytes | S→C bytes | total | payload | overhead | RTTs | server CPU µs | client CPU µs | server instr. | client instr. |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rs:
        w(f'| {r["key"]} | {IMPL.get(r["protocol"], "")} | {fmt(r["bytes_c2s"])} | {fmt(r["bytes_s2c"])} | '
          f'{fmt(r["bytes_fresh_100b"])} | {fmt(r["payload_bytes"])} | '
          f'{fmt(None if r["payload_bytes"] is None else r["bytes_fresh_100b"] - r["payload_bytes"])} | '
          f'{fmt(r["rtts_first_byte"])} | {fmt(r["server_cpu_us_fresh"])} | {fmt(r["client_cpu_us_fresh"])} | '
          f'{fmt(r["instructions_fresh"])} | {fmt(r["instructions_client"])} |')
    w("\nCPU of OpenSSL/OpenSSH/gpg/cms rows is process-level (see the method above) and not comparable with the "
      "in-process rows' step CPU; their instruction counts are.\n")
    for f in figs:
        if f != "overhead.png":
            w(f"![{f}](figures/{f})")
    w("")

    w(hybrid_section(by, inp))

    w("## 2. Size breakdown per field\n")
    w("### HTTPCrypt fresh POST request (spec §3, §4.1)\n")
    w("| field | bytes |\n|---|---:|")
    tot = 0
    for f in res.get("httpcrypt_request_fields", []):
        w(f'| {f["field"]} | {f["bytes"]} |')
        tot += f["bytes"]
    hc = inp.get("httpcrypt/fresh-post")
    if hc:
        w(f'| **sum of fields** | **{tot}** |')
        w(f'| **measured request** | **{hc["bytes_c2s"]}** |')
        w(f'\nThe response is {hc["bytes_s2c"]} bytes: the outer `200` head, the 24-byte response nonce, 20 bytes of '
          "record header and tag per record, and the inner response with its `Date` and a 96-byte `Ticket` "
          "(128 base64url characters plus the field name).\n")
    w("### Flights of the session protocols (bytes per flight, in order)\n")
    w("| protocol / variant | flights (→ client to server, ← server to client; * = carries application data) |\n|---|---|")
    for r in res["inproc"]:
        fl = " ".join(("→" if f["dir"] == "c2s" else "←") + str(f["bytes"]) + ("*" if f["app"] else "") for f in r["flights"])
        w(f'| {r["protocol"]}/{r["variant"]} | {fl} |')
    for k, r in res["external"].items():
        if "flights" in r:
            fl = " ".join(("→" if f["dir"] == "c2s" else "←") + str(f["bytes"]) for f in r["flights"])
            w(f"| {k} | {fl} |")
    for k, r in inp.items():
        if r["protocol"] == "tls-rustls" and r["extra"].get("leaf_cert_bytes"):
            w(f'\nrustls server certificate: one ECDSA P-256 leaf of {r["extra"]["leaf_cert_bytes"]} bytes (DER) issued '
              "by a one-level CA the client trusts; real web chains add an intermediate of about the same size or more.")
            break
    w("\n### Out-of-band key material fetched before the first request\n")
    w("| protocol | what | bytes |\n|---|---|---:|")
    for k, r in inp.items():
        if r["extra"].get("discovery_bytes") and r["variant"] in ("fresh-post", "pq-fresh-post", "x25519-chacha"):
            what = r["extra"]["discovery"]
            if r["extra"].get("discovery_kem_text_chars"):
                what += (f' ({r["extra"]["discovery_cert_bytes"]}-byte certificate as a text line, '
                         f'{r["extra"]["discovery_kem_text_chars"]:,}-character `hck1` key text, line ends)')
            w(f'| {r["protocol"]} | {what} | {r["extra"]["discovery_bytes"]:,} |')
    w("")

    w("## 3. Per-message overhead (bytes above the plain HTTP/1.1 message)\n")
    sizes = [m["size"] for m in res["inproc"][0]["message_overhead"]] if res["inproc"] else []
    w("| protocol / variant | " + " | ".join(f"{s:,} B →/←" for s in sizes) + " |")
    w("|---|" + "---:|" * len(sizes))
    for r in res["inproc"]:
        w(f'| {r["protocol"]}/{r["variant"]} | ' + " | ".join(f'{m["c2s"]:,}/{m["s2c"]:,}' for m in r["message_overhead"]) + " |")
    for k, r in res["external"].items():
        if "message_overhead" in r:
            w(f"| {k} | " + " | ".join(f'{m["c2s"]:,}/{m["s2c"]:,}' for m in r["message_overhead"]) + " |")
    w("\nSession protocols (TLS, Noise) are measured inside an established session (data records only); HTTPCrypt, "
      "OHTTP, OpenPGP and CMS carry their whole per-message envelope every time, because every message stands alone.\n")
    if "overhead.png" in figs:
        w("![overhead](figures/overhead.png)\n")

    w("## 4. CPU per phase (µs, median; in-process protocols)\n")
    w("`handshake` is a library call that does key agreement, authentication and record protection together and "
      "cannot be split from outside (rustls, snow, ohttp).\n")
    w("| protocol / variant | client key agr. | client auth | client protect | client handshake | server key agr. | server auth | server protect | server handshake |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["inproc"]:
        c, s = r["cpu_us"]["client"], r["cpu_us"]["server"]
        w(f'| {r["protocol"]}/{r["variant"]} | ' + " | ".join(fmt(x[k]) for x in (c, s) for k in ("key_agreement", "auth", "protect", "handshake")) + " |")
    w("\n### Per step (Gutmann's Table 3 shape)\n")
    for key in ("httpcrypt/fresh-post", "httpcrypt/ticket", "httpcrypt/pq-fresh-post", "tls-rustls/tls13-full",
                "tls-rustls/tls13-full-pq", "tls-rustls/tls12-full", "noise/nk", "ohttp/x25519-chacha"):
        r = inp.get(key)
        if not r:
            continue
        w(f"**{key}**\n\n| side | phase | step | µs |\n|---|---|---|---:|")
        for st in r["steps"]:
            w(f'| {st["side"]} | {st["phase"]} | {st["label"]} | {fmt(st["cpu_us"])} |')
        w("")

    c = res.get("constrained", {})
    if c.get("results"):
        w("## 5. Constrained device: the first encrypted request on a throttled client\n")
        w(f'Client in a cgroup limited to {int(c["quota"] * 100)}% of one core (pinned with taskset) and '
          f'{c["memory_bytes"] >> 20} MiB of RAM ({next(iter(c["results"].values())).get("cgroup", "")}). '
          "In-process rows: `lab once` runs client *and* server in the throttled process; the time is the mean wall "
          "time per exchange over several exchanges (a single sub-millisecond exchange would fall inside one scheduling "
          "period and show no throttling), next to the same run unthrottled. Other rows: the client program alone in "
          "the throttled group, server outside, start-up included, one run. Memory is the group's peak charge "
          "(anonymous memory and newly read pages; program files already in the page cache are not charged): every "
          "client stayed far below the limit.\n")
        w("| protocol / variant | throttled wall ms | unthrottled ms | peak memory KiB | what |\n|---|---:|---:|---:|---|")
        for k, v in c["results"].items():
            if v.get("ok"):
                w(f'| {k} | {fmt(v["wall_ms"], 2)} | {fmt(v.get("free_ms"), 2)} | {fmt(None if v.get("peak_bytes") is None else v["peak_bytes"] // 1024)} | {v.get("what", "")} |')
            else:
                w(f'| {k} | failed: {v.get("error", "")[:80]} | | | |')
        w("")

    w("## 6. Analysis per protocol\n")
    w(analysis(by, inp, res))
    w("## 7. README cost claims and the rows that back them\n")
    w(claims(by))
    if res.get("failures"):
        w("## Failed measurements\n")
        for f in res["failures"]:
            w(f"- {f}")
    w("\n## Not measured, and why\n")
    w("- OpenSSL TLS 1.3 0-RTT: `s_server` refuses `-early_data` together with its echo modes (`-rev`, `-www`), and with "
      "a stdin/stdout echo driver no early data reached it; rustls' 0-RTT row stands for TLS 0-RTT.")
    w("- Same primitive implementation everywhere was not possible: snow and ohttp only ship RustCrypto backends (ohttp's "
      "other backend is NSS; the `rust-hpke` backend built here without NSS), OpenSSL, OpenSSH and gpg use their own "
      "code. HTTPCrypt itself uses aws-lc-rs for X25519 and ChaCha20-Poly1305, RustCrypto for HChaCha20 and SHA3, and "
      "ed25519-dalek for certificate signatures (the rspamd profile's box is RustCrypto chacha20/poly1305 throughout). "
      "Instruction counts therefore compare implementations as well as designs; what the design alone fixes is the "
      "number of public-key operations and round trips per exchange.")
    return "\n".join(L) + "\n"


HYBRID_ROWS = (
    ("httpcrypt/pq-fresh-post", None), ("httpcrypt/pq-fresh-get", None), ("httpcrypt/pq-compact-post", None),
    ("httpcrypt/pq-cached", None),
    ("httpcrypt/pq-ticket", None),
    ("tls-rustls/tls13-full-pq", "TLS 1.3 full handshake, X25519MLKEM768 key share (1,184-byte ML-KEM key in the "
                                 "ClientHello, 1,088-byte ciphertext back), ECDSA P-256 certificate"),
    ("httpcrypt/fresh-post", "for comparison: suite 1, fresh client X25519 key"),
    ("httpcrypt/compact-post", "for comparison: suite 1, fresh client X25519 key, request profile 2"),
    ("httpcrypt/ticket", "for comparison: suite-1 ticket"),
    ("tls-rustls/tls13-full", "for comparison: TLS 1.3 full handshake, X25519"),
)


def hybrid_section(by, inp):
    """The post-quantum rows side by side: HTTPCrypt's suite 2 (fresh, reused
    client key, ticket) and rustls' X25519MLKEM768 handshake."""
    have = [(k, n) for k, n in HYBRID_ROWS if k in by]
    if not any(k.startswith("httpcrypt/pq-") for k, _ in have):
        return ""
    L = ["### Post-quantum hybrid exchanges (HTTPCrypt suite 2 beside TLS's X25519MLKEM768)\n",
         "| protocol / variant | what | total bytes | C→S | S→C | RTTs | server CPU µs | client CPU µs | "
         "server instr. | client instr. |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, n in have:
        r = by[k]
        L.append(f'| {k} | {n or r.get("note") or ""} | {fmt(r["bytes_fresh_100b"])} | {fmt(r["bytes_c2s"])} | '
                 f'{fmt(r["bytes_s2c"])} | {fmt(r["rtts_first_byte"])} | {fmt(r["server_cpu_us_fresh"])} | '
                 f'{fmt(r["client_cpu_us_fresh"])} | {fmt(r["instructions_fresh"])} | {fmt(r["instructions_client"])} |')
    pf, pt, pc = by.get("httpcrypt/pq-fresh-post"), by.get("httpcrypt/pq-ticket"), by.get("httpcrypt/pq-cached")
    hf, ht = by.get("httpcrypt/fresh-post"), by.get("httpcrypt/ticket")
    tp = by.get("tls-rustls/tls13-full-pq")
    disc = inp.get("httpcrypt/pq-fresh-post", {}).get("extra", {}).get("discovery_bytes")
    s = ("\nSuite 2 (spec/hybrid.md) keeps HTTPCrypt's shape: the client's X25519 public key stays in the cookie and "
         "the 1,088-byte ML-KEM-768 ciphertext goes in front of the sealed stream, so a fresh hybrid request is one "
         "message and one round trip")
    if pf and hf:
        s += (f' ({fmt(pf["bytes_fresh_100b"])} bytes against {fmt(hf["bytes_fresh_100b"])} for suite 1'
              + ("; the answer is the same size" if pf["bytes_s2c"] == hf["bytes_s2c"] else "") + ")")
    if tp:
        s += (f', where the TLS hybrid handshake needs {tp["rtts_first_byte"]} round trips and '
              f'{fmt(tp["bytes_fresh_100b"])} bytes, sending its 1,184-byte ML-KEM key share and receiving the '
              "ciphertext in every full handshake")
    s += "."
    if disc:
        s += (f' HTTPCrypt moves the ML-KEM key out of band instead: the `OPTIONS {{mount}}/pq` answer ({fmt(disc)} '
              "bytes, the certificate line and the `hck1` key text) is fetched once per ML-KEM key (a day at the "
              "defaults), not per connection, and is listed with the other out-of-band key material in §2.")
    s += (" The server's work for a fresh hybrid request is an X25519, an ML-KEM-768 decapsulation and the SHA3-256 "
          "combiner")
    if pf and hf and pf["instructions_fresh"] and hf["instructions_fresh"]:
        s += (f' ({fmt(pf["instructions_fresh"])} instructions against {fmt(hf["instructions_fresh"])} for suite 1'
              + (f' and {fmt(tp["instructions_fresh"])} for the TLS hybrid handshake' if tp and tp["instructions_fresh"] else "")
              + ")")
    s += (". `pq-cached` is the classical `cached` row's client behaviour (a reused X25519 key pair) under suite 2: "
          "the server keeps hybrid sessions out of its session cache (a hit would have to compare the whole "
          "ciphertext), so nothing is cached and the reused key still costs the server the decapsulation and the "
          "X25519")
    if pc and pf and pc["server_cpu_us_fresh"] is not None and pf["server_cpu_us_fresh"] is not None:
        s += f' ({fmt(pc["server_cpu_us_fresh"])} µs against {fmt(pf["server_cpu_us_fresh"])} µs fresh)'
    s += ("; the project's client never does this (it makes a fresh X25519 key for every fresh hybrid request), and "
          "the row is kept to show that reuse buys nothing under suite 2. Tickets are the hybrid resumption: a ticket "
          "issued to a hybrid session carries the hybrid k, so `pq-ticket` is as post-quantum as the first request "
          "and costs what a suite-1 ticket costs")
    if pt and ht:
        s += (f' ({fmt(pt["bytes_fresh_100b"])} bytes, suite 1: {fmt(ht["bytes_fresh_100b"])}'
              + (f'; {fmt(pt["instructions_fresh"])} server instructions, suite 1: {fmt(ht["instructions_fresh"])}'
                 if pt["instructions_fresh"] and ht["instructions_fresh"] else "") + ")")
    L.append(s + ".")
    L.append("\nML-KEM-768 comes from two libraries here, as in the project's builds: the client encapsulates with "
             "RustCrypto `ml-kem`, the server decapsulates with `aws-lc-rs` (rustls' group is aws-lc-rs on both "
             "sides), so the client-side counts compare implementations as well as designs. The client's first "
             "hybrid request also verifies the certificate's Ed25519 signature, as the suite-1 fresh row does.\n")
    return "\n".join(L) + "\n"


def g(by, key, field):
    r = by.get(key)
    return None if r is None else r.get(field)


def analysis(by, inp, res):
    out = []
    hf, ht, hcache = by.get("httpcrypt/fresh-post"), by.get("httpcrypt/ticket"), by.get("httpcrypt/cached")
    t13 = by.get("tls-rustls/tls13-full")
    if hf and t13:
        out.append(
            f'**HTTPCrypt.** The first request needs {hf["rtts_first_byte"]} round trip and {fmt(hf["bytes_fresh_100b"])} '
            f'bytes in all, against {t13["rtts_first_byte"]} and {fmt(t13["bytes_fresh_100b"])} for TLS 1.3 (rustls): '
            "there is no handshake, because the server's key came out of band. The price is paid per message instead: "
            "every request repeats an outer HTTP head, a 32-character nonce, a 14-character key ID and a 43-character "
            "client key (or a 115-character ticket), and every response a 24-byte nonce, a `Date` and a fresh ticket, "
            f'so a message costs about {inp["httpcrypt/fresh-post"]["message_overhead"][1]["c2s"]} bytes more than '
            f'plain HTTP where an established TLS session adds {inp["tls-rustls/tls13-full"]["message_overhead"][1]["c2s"]}. '
            f'Server work for a fresh key is one X25519: {fmt(hf["instructions_fresh"])} instructions against '
            f'{fmt(t13["instructions_fresh"])} for a TLS 1.3 full handshake (X25519 plus an ECDSA signature plus '
            "the key schedule)."
            + (f' A session-cache hit ({fmt(hcache["instructions_fresh"])}) or a ticket ({fmt(ht["instructions_fresh"])}) '
               "removes the X25519." if hcache and ht else "")
            + " The GET form trades the body for a base64url query: a third larger, and only for small requests."
            + "".join(f' The client\'s first request also verifies the certificate\'s Ed25519 signature '
                      f'({fmt(st["cpu_us"])} µs, against {fmt(kd["cpu_us"])} µs for its X25519 and key derivation).'
                      for st in inp["httpcrypt/fresh-post"]["steps"] if st["phase"] == "auth"
                      for kd in inp["httpcrypt/fresh-post"]["steps"] if kd["label"].startswith("derive k")))
    sk, sk2 = by.get("httpcrypt-sockets/first-fetch-get-form"), by.get("httpcrypt-sockets/second-request-ticket")
    if sk:
        out.append(
            f'**HTTPCrypt over sockets.** `httpcrypt fetch` with no certificate at hand (no DNS record, nothing cached) '
            f'first asks `OPTIONS` for it: {sk["rtts_first_byte"]} round trips and {fmt(sk["bytes_fresh_100b"])} bytes '
            "for its first request, so the \"no extra round trip\" holds once the key is known (DNS, cache) and not for "
            "a cold HTTP discovery."
            + (f' A further request from the same client (pooled connection, ticket) costs {fmt(sk2["bytes_fresh_100b"])} '
               "bytes." if sk2 else ""))
    r = by.get("httpcrypt/rspamd")
    if r and hf:
        out.append(
            f'**rspamd profile.** {fmt(r["bytes_fresh_100b"])} bytes and {fmt(r["instructions_fresh"])} server '
            "instructions: a 52-character base32 key and a 5-byte short ID in one `Key` header, one box per message, no "
            "ticket, no Date; cheaper per message than v1, but every request costs the server an X25519 and nothing "
            "stops a replay.")
    t12, t13r, t0 = by.get("tls-rustls/tls12-full"), by.get("tls-rustls/tls13-resumed"), by.get("tls-rustls/tls13-0rtt")
    if t13 and t12:
        s = (f'**TLS (rustls).** TLS 1.2 needs {t12["rtts_first_byte"]} round trips before the response, TLS 1.3 '
             f'{t13["rtts_first_byte"]}')
        if t0:
            s += f', and 0-RTT {t0["rtts_first_byte"]} (with a stateful server session cache and a replayable first flight)'
        s += (". Most of the bytes are the certificate and, in TLS 1.3, two session tickets sent after every handshake; "
              "resumption saves the signature and certificate but TLS 1.3 resumption still runs an ECDHE")
        if t13r:
            s += f' ({fmt(t13r["instructions_fresh"])} server instructions against {fmt(t13["instructions_fresh"])} full)'
        pq = by.get("tls-rustls/tls13-full-pq")
        if pq:
            s += (f'. With the hybrid X25519MLKEM768 group (`-pq`) the exchange grows to {fmt(pq["bytes_fresh_100b"])} '
                  "bytes (HTTPCrypt's suite 2 beside it: §1, post-quantum hybrid exchanges)")
        out.append(s + ".")
    o = by.get("tls-openssl/tls13-full")
    if o:
        out.append(f'**TLS (OpenSSL 3.0).** The same handshake through s_server/s_client: {fmt(o["bytes_fresh_100b"])} '
                   f'bytes and {o["rtts_first_byte"]} round trips; server instructions per connection '
                   f'{fmt(o.get("instructions_fresh"))}'
                   + (f', {o["instructions_fresh"] / t13["instructions_fresh"]:.1f} times what rustls\' server executes '
                      "for the same handshake (X25519, ECDSA P-256): the library, not the protocol, makes that "
                      "difference." if t13 and o.get("instructions_fresh") and t13.get("instructions_fresh") else "."))
    oh = by.get("ohttp/x25519-chacha")
    if oh:
        out.append(f'**Oblivious HTTP.** Closest to HTTPCrypt in shape: one HPKE encapsulation per request, '
                   f'{oh["rtts_first_byte"]} round trip, {fmt(oh["bytes_fresh_100b"])} bytes on the client\'s link '
                   f'(binary HTTP is more compact than HTTP/1.1, the key configuration is binary). '
                   f'{fmt(oh["instructions_fresh"])} server instructions: HPKE\'s key schedule (HKDF-SHA256 labelled '
                   "extracts and expands) costs more than HTTPCrypt's single HChaCha20, and the response key is derived "
                   "by another export. There is no resumption: every request pays the X25519. The relay hop doubles "
                   "the bytes in the network, not on the client's link.")
    nk, ik = by.get("noise/nk"), by.get("noise/ik")
    if nk and ik:
        out.append(f'**Noise.** NK carries request and response in the two handshake messages: '
                   f'{nk["rtts_first_byte"]} round trip, {fmt(nk["bytes_fresh_100b"])} bytes, the smallest here, but '
                   f'the server does two DH operations (es, ee): {fmt(nk["instructions_fresh"])} instructions. IK adds '
                   f'client authentication with two more (s, ss, se): {fmt(ik["bytes_fresh_100b"])} bytes, '
                   f'{fmt(ik["instructions_fresh"])} instructions. snow uses RustCrypto curve25519, slower than aws-lc.')
    sshf, sshm = by.get("ssh/curve25519-full"), by.get("ssh/curve25519-mux")
    if sshf:
        s = (f'**SSH.** A new connection takes {sshf["rtts_first_byte"]} round trips to the first output byte and '
             f'{fmt(sshf["bytes_fresh_100b"])} bytes: version strings, algorithm negotiation (KEXINIT lists every '
             "algorithm by name), key exchange, service request, user authentication, channel open, exec. Per "
             "connection sshd also forks and re-executes itself")
        if sshm:
            s += (f'. A multiplexed session on an existing connection needs {sshm["rtts_first_byte"]} round trips and '
                  f'{fmt(sshm["bytes_fresh_100b"])} bytes')
        if sshf.get("instructions_client"):
            s += (f'. The `ssh` client alone executes {fmt(sshf["instructions_client"])} instructions, start-up and '
                  "key loading included (sshd's sandbox keeps it from running under valgrind)")
        dk = by.get("ssh/default-kex-full")
        if dk:
            s += f'; Debian\'s default sntrup761x25519 key exchange makes it {fmt(dk["bytes_fresh_100b"])} bytes'
        out.append(s + ".")
    pg, cms = by.get("openpgp/gpg-cv25519-ed25519"), by.get("cms/openssl-p256-aes128gcm")
    if pg and cms:
        out.append(f'**OpenPGP and CMS.** Message formats like HTTPCrypt\'s: no round trip beyond the message. '
                   f'Request encrypted to the server, response signed by the server and encrypted to the client: '
                   f'{fmt(pg["bytes_fresh_100b"])} bytes with gpg (ECDH cv25519, Ed25519; packets with one-byte '
                   f'algorithm IDs), {fmt(cms["bytes_fresh_100b"])} with CMS (DER, OIDs, a recipient identified by issuer '
                   "and serial, ECDSA P-256). Both spend a public-key operation per message in each direction where "
                   "HTTPCrypt's response only needs the AEAD under the request's key.")
    return "\n\n".join(out) + "\n"


def claims(by):
    hf, hc, ht = by.get("httpcrypt/fresh-post"), by.get("httpcrypt/cached"), by.get("httpcrypt/ticket")
    t13 = by.get("tls-rustls/tls13-full")
    L = ["| README claim | lab row | measured |", "|---|---|---|"]
    if hf:
        L.append(f'| "the client encrypts its very first request at once … no extra round trip" | httpcrypt/fresh-post, §1 | '
                 f'{hf["rtts_first_byte"]} round trip to the first response byte (TLS 1.3: '
                 f'{t13["rtts_first_byte"] if t13 else "–"}) |')
        sk = by.get("httpcrypt-sockets/first-fetch-get-form")
        if sk:
            L.append(f'| (same claim, cold start over HTTP discovery) | httpcrypt-sockets/first-fetch-get-form, §1 | '
                     f'{sk["rtts_first_byte"]} round trips: `OPTIONS` for the certificate, then the request |')
        L.append(f'| "One X25519 per new client key on the server, one AEAD per message after that" | httpcrypt/fresh-post vs cached/ticket, §1 and §4 | '
                 f'server {fmt(hf["instructions_fresh"])} instructions fresh, '
                 f'{fmt(hc["instructions_fresh"]) if hc else "–"} cache hit, {fmt(ht["instructions_fresh"]) if ht else "–"} ticket |')
        L.append(f'| server per-request work: fresh client key / session-cache hit / ticket (µs) | same rows, server CPU µs | '
                 f'{fmt(hf["server_cpu_us_fresh"])} / {fmt(hc["server_cpu_us_fresh"]) if hc else "–"} / '
                 f'{fmt(ht["server_cpu_us_fresh"]) if ht else "–"} µs, including outer parse, ticket issue and response '
                 "seal, on a shared machine |")
        L.append(f'| "Encrypted HTTP at the price of plain HTTP" (bytes) | §1 overhead column, §3 | '
                 f'{fmt(hf["bytes_fresh_100b"] - hf["payload_bytes"])} bytes above plain HTTP for the first exchange '
                 f'(TLS 1.3: {fmt(t13["bytes_fresh_100b"] - t13["payload_bytes"]) if t13 else "–"}); per later message '
                 "HTTPCrypt costs more than a TLS record (§3) |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    # Re-render from a saved result file: python3 lab/harness/report.py lab/results/full.json
    import sys
    with open(sys.argv[1]) as f:
        saved = json.load(f)
    write(saved, os.path.dirname(os.path.abspath(sys.argv[1])), saved["mode"] == "smoke")
