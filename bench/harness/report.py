"""Writes bench/results/<date>.json, bench/results/summary.json,
bench/REPORT.md and the figures from one run's result document."""

import json
import os
import statistics

from configs import CONFIGS, DESCRIPTIONS, PLAIN_OF
from servers import SIZES


def paired_ratio(runs, a, b, field, same=lambda r: True):
    """Ratio a/b of `field` from runs of the same repetition (adjacent in
    time), with the median and range over repetitions; `same` picks the
    runs that belong together (a cell, a rate). None without a pair."""
    pick = lambda name: {r["rep"]: r for r in runs if r["config"] == name and same(r)}
    ra, rb = pick(a), pick(b)
    vals = [field(ra[k]) / field(rb[k]) for k in sorted(ra) if k in rb and field(rb[k]) > 0]
    if not vals:
        return None
    return {"value": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def published(bench_dir):
    """The ratios of bench/results/summary.json and the date of the
    `bench/run` they come from, or ({}, None) before the first run."""
    try:
        with open(os.path.join(bench_dir, "results", "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return {}, None
    return s.get("ratios", {}), s.get("date")


def save(bench_dir, started, kind, res, md_name, md_text):
    """Writes one run of a side benchmark: `res` as
    bench/results/<started>-<kind>.json and `md_text` as bench/<md_name>;
    prints what it wrote."""
    stamp = started.strftime("%Y-%m-%dT%H%M%SZ")
    out = os.path.join(bench_dir, "results", f"{stamp}-{kind}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(bench_dir, md_name), "w") as f:
        f.write(md_text)
    print(f"\nwrote {os.path.relpath(out, bench_dir)} and {md_name}")


# name: (definition, target text, predicate or None, value function)
def _paired(result, a, b, cell, field):
    return paired_ratio(result.get("runs", []), a, b, field, lambda r: r["cell"] == cell)


def _agg(result, name, cell, key):
    a = result.get("aggregate", {}).get(f"{name}|{cell}")
    return a[key]["median"] if a else None


def ratios(result):
    cpu = lambda r: r["server_cpu_us_per_req"]
    rps = lambda r: r["rps"]
    out = {}

    def put(name, v, target, ok, definition):
        if v is None:
            out[name] = {"value": None, "target": target, "met": None, "definition": definition}
            return
        if not isinstance(v, dict):
            v = {"value": v}
        v.update(target=target, definition=definition)
        v["met"] = None if ok is None else bool(ok(v["value"]))
        out[name] = v

    put("newconn_100b_cpu_nginx_tls12_over_httpcrypt",
        _paired(result, "nginx-tls12", "hc-fresh", "newconn/100b", cpu), ">= 5.5", lambda x: x >= 5.5,
        "server CPU per request, new connection, 100 B: nginx TLS 1.2 full handshake / httpcrypt fresh client key")
    put("newconn_100b_cpu_rustls_tls13_over_httpcrypt",
        _paired(result, "rustls-tls13", "hc-fresh", "newconn/100b", cpu), ">= 3", lambda x: x >= 3,
        "server CPU per request, new connection, 100 B: rustls TLS 1.3 full handshake / httpcrypt fresh client key")
    put("newconn_100b_cpu_httpcrypt_cached_over_plain",
        _paired(result, "hc-cached", "hc-plain", "newconn/100b", cpu), "<= 1.10", lambda x: x <= 1.10,
        "server CPU per request, new connection, 100 B: httpcrypt reused client key (session cache) / "
        "the same server's plaintext path")
    put("keepalive_1k_cpu_httpcrypt_over_plain",
        _paired(result, "hc-ticket", "hc-plain", "keepalive/1k", cpu), "<= 1.15", lambda x: x <= 1.15,
        "server CPU per request, keep-alive, 1 KiB: httpcrypt default client (ticket) / the same server's "
        "plaintext path")
    put("keepalive_100b_cpu_httpcrypt_over_plain",
        _paired(result, "hc-ticket", "hc-plain", "keepalive/100b", cpu), "<= 1.15", lambda x: x <= 1.15,
        "server CPU per request, keep-alive, 100 B: httpcrypt default client (ticket) / the same server's "
        "plaintext path")
    best_tls = best_nginx_tls(result)
    put("bulk_1m_throughput_httpcrypt_over_nginx_tls",
        _paired(result, "hc-ticket", best_tls[0], "keepalive/1m", rps) if best_tls else None,
        ">= 1.0", lambda x: x >= 1.0,
        f"keep-alive 1 MiB responses per second: httpcrypt (ticket) / the faster nginx HTTPS "
        f"({best_tls[0] if best_tls else '-'})")
    ov = lambda name: (_agg(result, name, "newconn/100b", "bytes") or 0) - \
        (_agg(result, PLAIN_OF[name], "newconn/100b", "bytes") or 0) \
        if _agg(result, name, "newconn/100b", "bytes") is not None else None
    put("overhead_bytes_100b_httpcrypt", ov("hc2-fresh"), "<= 300", lambda x: x <= 300,
        "TCP payload bytes per 100 B request and response beyond the same server's plain HTTP, "
        "new connection, fresh client key, no ticket, request profile 2 (`serve --compact`, spec §4.5)")
    put("overhead_bytes_100b_httpcrypt_v1", ov("hc-fresh"), "(info)", None,
        "the same in the v1 layout (a server without --compact, every v1-only client)")
    put("overhead_bytes_100b_tls13", ov("nginx-tls13"), "(info: TLS adds ~1.5-1.65 KB)", None,
        "the same for nginx TLS 1.3 (full handshake) over nginx plain HTTP")
    rtt = result.get("rtt", {})
    put("rtt_to_first_byte_httpcrypt", rtt.get("hc-fresh", {}).get("rtts_measured"), "2",
        lambda x: round(x) <= 2,
        "round trips before the first response byte on a new connection at 50 ms RTT (measured), fresh key")
    put("rtt_to_first_byte_tls13", rtt.get("nginx-tls13", {}).get("rtts_measured"), "3 (expected)", None,
        "the same for nginx TLS 1.3")
    # Supporting figures.
    put("newconn_100b_cpu_us_httpcrypt_fresh", _agg(result, "hc-fresh", "newconn/100b", "cpu_us"), "(info)",
        None, "server CPU µs per new-connection 100 B request, fresh client key")
    put("newconn_100b_cpu_httpcrypt_fresh_over_plain",
        _paired(result, "hc-fresh", "hc-plain", "newconn/100b", cpu), "<= 1.45", lambda x: x <= 1.45,
        "server CPU per request, new connection, 100 B: httpcrypt fresh client key / the same server's "
        "plaintext path")
    put("newconn_100b_cpu_nginx_tls13_over_httpcrypt",
        _paired(result, "nginx-tls13", "hc-fresh", "newconn/100b", cpu), "(info)", None,
        "nginx TLS 1.3 full handshake / httpcrypt fresh client key")
    put("newconn_100b_cpu_httpcrypt_plain_over_nginx_plain",
        _paired(result, "hc-plain", "nginx-plain", "newconn/100b", cpu), "<= 1.10", lambda x: x <= 1.10,
        "the httpcrypt server's plaintext path / nginx plain: the cost of the Rust server stack itself")
    put("keepalive_100b_cpu_httpcrypt_plain_over_nginx_plain",
        _paired(result, "hc-plain", "nginx-plain", "keepalive/100b", cpu), "<= 1.10", lambda x: x <= 1.10,
        "keep-alive 100 B: the httpcrypt server's plaintext path / nginx plain")
    put("keepalive_1k_cpu_httpcrypt_cached_over_plain",
        _paired(result, "hc-cached", "hc-plain", "keepalive/1k", cpu), "(info)", None,
        "keep-alive 1 KiB, reused client key / plaintext path")
    put("keepalive_1k_cpu_httpcrypt_fresh_over_plain",
        _paired(result, "hc-fresh", "hc-plain", "keepalive/1k", cpu), "(info)", None,
        "keep-alive 1 KiB, fresh client key per request / plaintext path")
    fresh2 = ov("hc2-fresh")
    put("overhead_bytes_100b_httpcrypt_ticket", ov("hc2-ticket"), "<= overhead_bytes_100b_httpcrypt",
        None if fresh2 is None else (lambda x: x <= fresh2),
        "overhead bytes with short tickets (spec §7.3: a 22-character cookie value in; the default client "
        "asks for a new ticket with every 16th request), request profile 2 (`hc2-ticket`); met when no more "
        "than this run's `overhead_bytes_100b_httpcrypt` (the fresh key of the same layout)")
    put("overhead_bytes_100b_httpcrypt_ticket_v1", ov("hc-ticket"), "(info)", None,
        "the same in the v1 layout (`hc-ticket`)")
    put("newconn_100b_cpu_httpcrypt2_fresh_over_plain",
        _paired(result, "hc2-fresh", "hc-plain", "newconn/100b", cpu), "(info)", None,
        "new connection, 100 B, fresh client key, profile 2 / plaintext path")
    put("keepalive_100b_cpu_httpcrypt2_over_plain",
        _paired(result, "hc2-ticket", "hc-plain", "keepalive/100b", cpu), "(info)", None,
        "keep-alive 100 B, ticket, profile 2 / plaintext path")
    put("keepalive_1k_cpu_httpcrypt2_over_plain",
        _paired(result, "hc2-ticket", "hc-plain", "keepalive/1k", cpu), "(info)", None,
        "keep-alive 1 KiB, ticket, profile 2 / plaintext path")
    put("overhead_bytes_100b_tls12", ov("nginx-tls12"), "(info)", None, "nginx TLS 1.2 full handshake")
    # Suite 2 (spec/hybrid.md) beside the v1 fresh key and the
    # post-quantum TLS 1.3 handshake.
    put("overhead_bytes_100b_httpcrypt_pq", ov("hcpq-fresh"), "<= 1500", lambda x: x <= 1500,
        "TCP payload bytes per 100 B request and response beyond the same server's plain HTTP, new "
        "connection, suite 2 (X25519 + ML-KEM-768): fresh client key and encapsulation, request profile 2, "
        "POST form with the 1,088-byte ciphertext first in the body (the Rust client's default), no ticket")
    put("overhead_bytes_100b_tls13_pq", ov("rustls-tls13-pq"), "(info)", None,
        "the same for the rustls TLS 1.3 server with X25519MLKEM768 (full handshake) over the httpcrypt "
        "server's plaintext path (same hyper and static-file code)")
    put("newconn_100b_cpu_httpcrypt_pq_over_fresh",
        _paired(result, "hcpq-fresh", "hc2-fresh", "newconn/100b", cpu), "<= 1.6", lambda x: x <= 1.6,
        "server CPU per request, new connection, 100 B: httpcrypt suite 2 (fresh X25519 key and ML-KEM-768 "
        "encapsulation) / httpcrypt suite 1 fresh client key, both in request profile 2")
    put("newconn_100b_cpu_rustls_tls13_pq_over_httpcrypt_pq",
        _paired(result, "rustls-tls13-pq", "hcpq-fresh", "newconn/100b", cpu), ">= 2.0", lambda x: x >= 2.0,
        "server CPU per request, new connection, 100 B: rustls TLS 1.3 full handshake with X25519MLKEM768 / "
        "httpcrypt suite 2 fresh key")
    fs = floors(result)
    for key, v in fs.items():
        put(f"floor_{key}", {"value": v["core"], "crypto_only": v["crypto"]}, "(info)", None,
            f"the best `{key}` any server on this protocol could reach here: the plaintext path of this "
            "run plus `loadgen floor`'s protocol core (and the key agreement where the client key is "
            "fresh: X25519 and the session key's HChaCha20, the X25519 alone in runs that did not "
            "time `agreement_us`; for "
            "suite 2 the core with its X-Wing agreement), nothing else; `crypto_only` adds the "
            "cryptography alone")
    # How far the measured ratios are from their floors and ceilings.
    for key, (measured, target, ok) in EXCESS_OF.items():
        put(key, excess(result, measured), target, ok, EXCESS_TEXT[measured])
        # The same excess in µs, and over nginx plain: unlike the ratio, these
        # do not grow when the plaintext path (the ratio's denominator) gets
        # cheaper, so they compare builds and runs.
        cell = key.removeprefix("excess_").removesuffix("_over_floor")
        put(f"beyond_floor_us_{cell}", excess(result, measured, per=None), "(info)", None,
            f"server CPU µs per request beyond `floor_{measured}`: the measured configuration minus the "
            "plaintext path minus the protocol core, per repetition, median over repetitions")
        put(f"beyond_floor_over_nginx_plain_{cell}", excess(result, measured, per="nginx-plain"),
            "(info)", None,
            f"those µs over nginx plain in the same cell and repetition: `excess_{cell}_over_floor` "
            "with a denominator that is not our own plaintext path")
    for key, (measured, target, ok) in SHARE_OF.items():
        put(key, share(result, measured), target, ok,
            f"`{measured}` / its ceiling `floor_{measured}`, per repetition (the ceiling's plaintext path "
            "from the same repetition; it comes to the floor of the httpcrypt side over its measured "
            "CPU, so 1.0 means the server adds nothing to the protocol and its plaintext path), median "
            "over repetitions")
    return out


# Issue 38: measured ratio minus its floor, per repetition. key -> (the
# ratio key it is computed for, target text, predicate or None).
EXCESS_OF = {
    "excess_fresh_over_floor": ("newconn_100b_cpu_httpcrypt_fresh_over_plain", "<= 0.10",
                                lambda x: x <= 0.10),
    "excess_cached_over_floor": ("newconn_100b_cpu_httpcrypt_cached_over_plain", "<= 0.04",
                                 lambda x: x <= 0.04),
    "excess_keepalive_100b_over_floor": ("keepalive_100b_cpu_httpcrypt_over_plain", "<= 0.08",
                                         lambda x: x <= 0.08),
    "excess_keepalive_1k_over_floor": ("keepalive_1k_cpu_httpcrypt_over_plain", "<= 0.08",
                                       lambda x: x <= 0.08),
}
EXCESS_TEXT = {
    m: f"`{m}` minus `floor_{m}`, per repetition (the floor's plaintext path from the same "
       "repetition), median over repetitions: the share of the plaintext path the server spends "
       "beyond the protocol core"
    for m, _, _ in EXCESS_OF.values()
}

# Issue 38: the "TLS over us" ratios as shares of their ceilings.
SHARE_OF = {
    "nginx_tls12_share_of_ceiling": ("newconn_100b_cpu_nginx_tls12_over_httpcrypt", ">= 0.93",
                                     lambda x: x >= 0.93),
    "rustls_tls13_share_of_ceiling": ("newconn_100b_cpu_rustls_tls13_over_httpcrypt", ">= 0.93",
                                      lambda x: x >= 0.93),
    "rustls_tls13_pq_share_of_ceiling": ("newconn_100b_cpu_rustls_tls13_pq_over_httpcrypt_pq", "(info)",
                                         None),
    "bulk_1m_share_of_ceiling": ("bulk_1m_throughput_httpcrypt_over_nginx_tls", "(info)", None),
}


def best_nginx_tls(result):
    """(name, responses per second) of the faster nginx HTTPS configuration
    in the bulk cell, or None."""
    best = None
    for name in ("nginx-tls12", "nginx-tls13"):
        v = _agg(result, name, "keepalive/1m", "rps")
        if v is not None and (best is None or v > best[1]):
            best = (name, v)
    return best


def _tls_of(result, tls):
    """The TLS configuration a FLOOR_OF entry names ("nginx-best": the
    faster nginx HTTPS in the bulk cell, as its key is defined)."""
    if tls == "nginx-best":
        best = best_nginx_tls(result)
        return best[0] if best else None
    return tls


def _ours_floor(fl, cell, agreement):
    """`loadgen floor`'s protocol cost per request in `cell` for the given
    agreement (None: a known session key; "x25519"; "xwing": suite 2),
    with the core (`core`) and with the cryptography alone (`crypto`); None
    when the floor tool of the run did not time it."""
    size = ""
    for suffix in ("1k", "1m"):
        if cell.endswith("/" + suffix) and f"core_{suffix}_us" in fl:
            size = "_" + suffix
    if agreement == "xwing":
        if "core_pq_us" not in fl:
            return None
        # The suite-2 core includes its agreement: a hybrid accept has no
        # session cache to stand in for it.
        return {"core": fl["core_pq_us"], "crypto": fl["xwing_us"] + fl["crypto_us"]}
    # The whole agreement (X25519 and the session key's HChaCha20, spec
    # §2); runs before it was timed apart have the X25519 alone.
    x = fl.get("agreement_us", fl["x25519_us"]) if agreement == "x25519" else 0.0
    return {part: x + fl[f"{part}{size}_us"] for part in ("core", "crypto")}


def _reps(result, names, cell):
    """Per repetition with a run of every configuration of `names` in
    `cell`: {name: server CPU µs per request}."""
    by = {}
    for r in result.get("runs", []):
        if r["config"] in names and r["cell"] == cell:
            by.setdefault(r["rep"], {})[r["config"]] = r["server_cpu_us_per_req"]
    return [by[k] for k in sorted(by) if len(by[k]) == len(names)]


def _stats(vals):
    if not vals:
        return None
    return {"value": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def excess(result, key, per="hc-plain"):
    """`key`'s measured ratio minus its floor (with the core), per
    repetition: the server CPU beyond the floor over that of `per` (the
    plaintext path, or another configuration of the cell), or in µs when
    `per` is None."""
    fl = result.get("floor")
    if not fl or key not in FLOOR_OF:
        return None
    cell, agreement, tls, side = FLOOR_OF[key]
    ours = _ours_floor(fl, cell, agreement)
    if ours is None or tls is not None:
        return None
    names = (side, "hc-plain") if per in (None, "hc-plain") else (side, "hc-plain", per)
    vals = [(r[side] - r["hc-plain"] - ours["core"]) / (r[per] if per else 1.0)
            for r in _reps(result, names, cell) if not per or r[per] > 0]
    return _stats(vals)


def share(result, key):
    """A "TLS over us" ratio divided by its ceiling (with the core), per
    repetition."""
    fl = result.get("floor")
    if not fl or key not in FLOOR_OF:
        return None
    cell, agreement, tls, side = FLOOR_OF[key]
    tls = _tls_of(result, tls)
    ours = _ours_floor(fl, cell, agreement)
    if ours is None or tls is None:
        return None
    vals = []
    for r in _reps(result, (tls, side, "hc-plain"), cell):
        if r[side] > 0 and r[tls] > 0:
            measured = r[tls] / r[side]
            ceiling = r[tls] / (r["hc-plain"] + ours["core"])
            vals.append(measured / ceiling)
    return _stats(vals)


# Target keys and how their floor is formed: (cell, the key agreement the
# httpcrypt side runs: None for a known session key, "x25519" for a fresh
# client key, "xwing" for suite 2; the TLS configuration for a "TLS over us"
# key or None; the httpcrypt configuration measured). The plaintext path is
# always `hc-plain` in that cell, and the floor's parts are those timed with
# the cell's answer size (1 KiB cells use `loadgen floor`'s `*_1k_us`, where
# the run has them).
FLOOR_OF = {
    "keepalive_100b_cpu_httpcrypt_over_plain": ("keepalive/100b", None, None, "hc-ticket"),
    "keepalive_1k_cpu_httpcrypt_over_plain": ("keepalive/1k", None, None, "hc-ticket"),
    "newconn_100b_cpu_httpcrypt_cached_over_plain": ("newconn/100b", None, None, "hc-cached"),
    "newconn_100b_cpu_httpcrypt_fresh_over_plain": ("newconn/100b", "x25519", None, "hc-fresh"),
    "newconn_100b_cpu_nginx_tls12_over_httpcrypt": ("newconn/100b", "x25519", "nginx-tls12", "hc-fresh"),
    "newconn_100b_cpu_rustls_tls13_over_httpcrypt": ("newconn/100b", "x25519", "rustls-tls13", "hc-fresh"),
    "newconn_100b_cpu_rustls_tls13_pq_over_httpcrypt_pq": ("newconn/100b", "xwing", "rustls-tls13-pq",
                                                           "hcpq-fresh"),
    # A throughput ratio: both servers keep their core busy in this cell,
    # so answers per second go as the inverse of CPU per answer, and the
    # ceiling is formed from CPU like the others.
    "bulk_1m_throughput_httpcrypt_over_nginx_tls": ("keepalive/1m", None, "nginx-best", "hc-ticket"),
}


def floors(result):
    """Per target key, the ratio a server that added nothing to this run's
    plaintext path but the protocol itself would reach (`loadgen floor`,
    measured on the server's core in the same run): with the sans-IO core
    (`core`) and with the cryptography alone (`crypto`). For "TLS over us"
    keys it is a ceiling instead."""
    fl = result.get("floor")
    out = {}
    if not fl:
        return out
    for key, (cell, agreement, named, _) in FLOOR_OF.items():
        tls = _tls_of(result, named)
        plain = _agg(result, "hc-plain", cell, "cpu_us")
        ours = _ours_floor(fl, cell, agreement)
        # A TLS key whose TLS configuration this run did not measure has no
        # ceiling.
        if (named and not tls) or not plain or ours is None:
            continue
        v = {}
        for part in ("core", "crypto"):
            if tls:
                theirs = _agg(result, tls, cell, "cpu_us")
                if theirs is None:
                    break
                v[part] = theirs / (plain + ours[part])
            else:
                v[part] = (plain + ours[part]) / plain
        if len(v) == 2:
            out[key] = v
    return out


def fmt(v, digits=1):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def cell_table(result, mode, key, title, digits=1, show_range=True):
    agg = result.get("aggregate", {})
    sizes = [s for s, _ in SIZES if any(k.endswith(f"|{mode}/{s}") for k in agg)]
    if not sizes:
        return ""
    lines = [f"**{title}**", "", "| configuration | " + " | ".join(sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for name in CONFIGS:
        row = []
        for s in sizes:
            a = agg.get(f"{name}|{mode}/{s}")
            if not a:
                row.append("")
                continue
            v = a.get(key)
            if v is None:
                row.append("")
                continue
            text = fmt(v["median"], digits)
            if show_range and v["n"] > 1:
                text += f" ({fmt(v['min'], digits)}–{fmt(v['max'], digits)})"
            row.append(text)
        if any(row):
            lines.append(f"| {name} | " + " | ".join(row) + " |")
    if len(lines) == 4:
        return ""
    return "\n".join(lines) + "\n"


def overhead_table(result, mode):
    agg = result.get("aggregate", {})
    sizes = [s for s, _ in SIZES if any(k.endswith(f"|{mode}/{s}") for k in agg)]
    if not sizes:
        return ""
    lines = [f"**Bytes on the wire per request (TCP payload, both directions), {mode}: total / beyond "
             "the same server's plain HTTP**", "",
             "| configuration | " + " | ".join(sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for name in CONFIGS:
        row = []
        for s in sizes:
            a, p = agg.get(f"{name}|{mode}/{s}"), agg.get(f"{PLAIN_OF[name]}|{mode}/{s}")
            if not a:
                row.append("")
                continue
            extra = f" / +{a['bytes']['median'] - p['bytes']['median']:,.0f}" if p and name != PLAIN_OF[name] else ""
            row.append(f"{a['bytes']['median']:,.0f}{extra}")
        if any(row):
            lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def write(result, bench_dir):
    results_dir = os.path.join(bench_dir, "results")
    fig_dir = os.path.join(bench_dir, "figures")
    os.makedirs(results_dir, exist_ok=True)
    os.makedirs(fig_dir, exist_ok=True)
    result["summary"] = ratios(result)
    # Per-run latency CDFs are kept only for the median run of each cell (in "aggregate").
    for key in ("runs", "unloaded_runs", "scaling_runs"):
        for r in result.get(key, []):
            r.pop("latency_cdf", None)
    stamp = result["meta"]["date"].replace(":", "").replace("+0000", "Z")
    raw_path = os.path.join(results_dir, f"{stamp}-{result['meta']['mode']}.json")
    with open(raw_path, "w") as f:
        json.dump(result, f, indent=1)
    summary = {"date": result["meta"]["date"], "mode": result["meta"]["mode"],
               "source": os.path.basename(raw_path), "ratios": dict(result["summary"])}
    # Keep the keys the other benchmarks (bench/split, bench/flood,
    # bench/asap, bench/scale) merged in, and their source notes.
    try:
        with open(os.path.join(results_dir, "summary.json")) as f:
            old = json.load(f)
        for k, v in old.get("ratios", {}).items():
            if k.startswith(("split_", "flood_", "newsession_", "asap_", "mem_")):
                summary["ratios"].setdefault(k, v)
        for k, v in old.items():
            if k.endswith("_source") and k != "source":
                summary.setdefault(k, v)
    except (OSError, ValueError):
        pass
    with open(os.path.join(results_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    figures = []
    try:
        import figures as figs
        figures = figs.draw(result, fig_dir)
    except ImportError as e:
        print(f"figures skipped: {e}")
    md = markdown(result, os.path.basename(raw_path), figures)
    with open(os.path.join(bench_dir, "REPORT.md"), "w") as f:
        f.write(md)
    return [raw_path, os.path.join(results_dir, "summary.json"), os.path.join(bench_dir, "REPORT.md")]


def floor_section(result):
    fl = result.get("floor")
    fs = floors(result)
    if not fl or not fs:
        return ""
    s = result["summary"]
    with_1k = "core_1k_us" in fl  # runs before the 1 KiB answer was timed lack it
    out = ["## What the protocol alone allows (floors)\n",
           f"`loadgen floor`, run on the servers' CPU in this run before the load: one X25519 "
           f"{fl['x25519_us']:.1f} µs"
           + (f" ({fl['agreement_us']:.1f} µs with the session key's HChaCha20, spec §2: the "
              f"agreement a fresh client key costs, which the fresh cells' floors add)"
              if "agreement_us" in fl else "")
           + f"; the cryptography of one exchange (open the benchmark's GET "
           f"stream, seal a 100 B answer: two HChaCha20 subkeys, two ChaCha20-Poly1305 records) "
           f"{fl['crypto_us']:.2f} µs; the sans-IO protocol core on that request with a known session "
           f"key (outer checks, cookie scan, query decode, open, inner parse, Date window, a small "
           f"strike register, answer head, seal) {fl['core_us']:.2f} µs"
           + (f"; with a 1 KiB answer, for the 1 KiB row, {fl['crypto_1k_us']:.2f} and "
              f"{fl['core_1k_us']:.2f} µs" if with_1k else "")
           + (f"; with a 1 MiB answer (64 records of 16 KiB), for the bulk row, "
              f"{fl['crypto_1m_us']:.0f} and {fl['core_1m_us']:.0f} µs" if "core_1m_us" in fl else "")
           + (f"; for suite 2 (spec/hybrid.md), the server's X-Wing agreement (X25519, ML-KEM-768 "
              f"decapsulation, combiner) {fl['xwing_us']:.1f} µs and the sans-IO core on a fresh "
              f"suite-2 GET (1,088-byte ciphertext in the query), that agreement included, "
              f"{fl['core_pq_us']:.1f} µs" if "core_pq_us" in fl else "")
           + ". Added to this run's plaintext path "
           "(and the agreement where the key is fresh), they give the best ratio any server on this "
           "protocol could show here: the HTTP layer around the core, the longer outer request and "
           "the application's request would all have to cost nothing. For the TLS keys the bound is "
           "a ceiling (TLS over us). The bulk key compares answers per second; both servers keep "
           "their core busy in that cell, so its ceiling is formed from CPU per answer like the "
           "others: the TLS server's over this run's plaintext 1 MiB answer plus the core sealing "
           "1 MiB."
           + ("" if with_1k else " This run's floor tool sealed only a 100 B answer, so the "
              "1 KiB row's bound is lower than a 1 KiB answer's cryptography would make it.")
           + "\n",
           "| target key | measured | target | bound with the core | bound with the cryptography alone |",
           "|---|---:|---|---:|---:|"]
    for key, v in fs.items():
        m = s.get(key, {})
        out.append(f"| `{key}` | {fmt(m.get('value'), 2)} | {m.get('target', '')} | "
                   f"{fmt(v['core'], 2)} | {fmt(v['crypto'], 2)} |")
    out.append("")
    return "\n".join(out) + "\n"


# The server-CPU keys of bench/results/summary.json that compare two
# configurations in one cell: key -> (a, b, (mode, file)), the ratio a / b.
# bench/crosscheck and bench/rate re-measure the same keys.
CPU_KEYS = {
    "keepalive_100b_cpu_httpcrypt_over_plain": ("hc-ticket", "hc-plain", ("keepalive", "100b")),
    "keepalive_1k_cpu_httpcrypt_over_plain": ("hc-ticket", "hc-plain", ("keepalive", "1k")),
    "newconn_100b_cpu_httpcrypt_cached_over_plain": ("hc-cached", "hc-plain", ("newconn", "100b")),
    "newconn_100b_cpu_httpcrypt_fresh_over_plain": ("hc-fresh", "hc-plain", ("newconn", "100b")),
    "newconn_100b_cpu_httpcrypt_plain_over_nginx_plain": ("hc-plain", "nginx-plain",
                                                          ("newconn", "100b")),
    "keepalive_100b_cpu_httpcrypt_plain_over_nginx_plain": ("hc-plain", "nginx-plain",
                                                            ("keepalive", "100b")),
    "newconn_100b_cpu_nginx_tls12_over_httpcrypt": ("nginx-tls12", "hc-fresh", ("newconn", "100b")),
    "newconn_100b_cpu_rustls_tls13_over_httpcrypt": ("rustls-tls13", "hc-fresh",
                                                     ("newconn", "100b")),
    "keepalive_100b_cpu_httpcrypt_cached_over_plain": ("hc-cached", "hc-plain",
                                                       ("keepalive", "100b")),
}


# The suite-2 CPU keys, which bench/rate re-measures and bench/crosscheck
# does not.
SUITE2_KEYS = {
    "newconn_100b_cpu_httpcrypt_pq_over_fresh": ("hcpq-fresh", "hc2-fresh", ("newconn", "100b")),
    "newconn_100b_cpu_rustls_tls13_pq_over_httpcrypt_pq": ("rustls-tls13-pq", "hcpq-fresh",
                                                           ("newconn", "100b")),
}

# Every CPU key: the rows of the split table, and what bench/rate re-measures.
ALL_CPU_KEYS = {**CPU_KEYS, **SUITE2_KEYS}


def split_section(result):
    """Per CPU key, the two sides' server time in user space and in
    the kernel (`/proc/PID/stat` utime and stime over the same windows as
    the totals, medians over the repetitions), and where the difference
    lies. Empty for runs whose loadgen did not report the parts."""
    agg = result.get("aggregate", {})
    rows = []
    for key, (a, b, (mode, size)) in ALL_CPU_KEYS.items():
        x, y = agg.get(f"{a}|{mode}/{size}"), agg.get(f"{b}|{mode}/{size}")
        if not x or not y or "user_us" not in x or "user_us" not in y:
            continue
        xu, xs = x["user_us"]["median"], x["sys_us"]["median"]
        yu, ys = y["user_us"]["median"], y["sys_us"]["median"]
        rows.append(f"| `{key}` | {a} | {fmt(xu)} | {fmt(xs)} | {b} | {fmt(yu)} | {fmt(ys)} | "
                    f"{xu - yu:+.1f} | {xs - ys:+.1f} |")
    if not rows:
        return ""
    return "\n".join([
        "## User space and kernel\n",
        "The server's CPU per request of both sides of each CPU key, split into user space and "
        "kernel (`utime` and `stime` of `/proc/PID/stat` over the same load windows as the totals; "
        "medians over the repetitions, so the parts need not add up to the totals above). The last "
        "two columns say where the difference between the sides lies: in code this project or its "
        "libraries run, or in system calls, the TCP stack and loopback delivery. The kernel's clock "
        "ticks are 10 ms, so a part is exact to about 1 % of a 2 s window.\n",
        "| key | side | user µs | kernel µs | compared with | user µs | kernel µs | Δ user | Δ kernel |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
        *rows, ""]) + "\n"


def markdown(result, raw_name, figures):
    m = result["meta"]
    s = result["summary"]
    out = []
    out.append("# HTTPCrypt end-to-end benchmark\n")
    out.append(f"Generated by `bench/run{' --quick' if m['mode'] == 'quick' else ''}` on {m['date']} "
               f"({m['mode']} run, {m['wall_s']:.0f} s). Raw data: `results/{raw_name}`; ratios: "
               "`results/summary.json`. Method and caveats below the tables; where the time goes: "
               "[Analysis](#analysis).\n")
    out.append(f"- Machine: {m['cpu']}, {m['cpus']} CPUs, Linux {m['kernel']} ({m['os']}); "
               f"load average {' '.join(m['loadavg_start'])} at start, {' '.join(m['loadavg_end'])} at end")
    out.append(f"- Software: {m['nginx']}, {m['openssl']}, {m['rustc']}, httpcrypt `{m['git']}`")
    key_reps = m.get("key_reps", m["reps"])
    reps = (f"{m['reps']} repetitions per cell" if key_reps == m["reps"] else
            f"{key_reps} repetitions for the cells behind the target ratios (new connection 100 B; "
            f"keep-alive 100 B, 1 KiB, 1 MiB), {m['reps']} for the others")
    out.append(f"- Runs: {reps}, {m['duration_s']} s measured after "
               f"{m['warmup_s']} s warm-up, {m['conns']} concurrent connections; medians with "
               "(min–max) over repetitions\n")
    out.append("## Targets and ratios\n")
    out.append("Ratios are medians over repetitions of per-repetition ratios (the two configurations "
               "ran back to back), with the range.\n")
    out.append("| ratio | value | range | target | met |")
    out.append("|---|---:|---|---|---|")
    for k, v in s.items():
        val = v.get("value")
        rng = f"{fmt(v['min'], 2)}–{fmt(v['max'], 2)}" if "min" in v else ""
        met = {True: "yes", False: "**no**", None: ""}[v.get("met")]
        out.append(f"| `{k}` | {fmt(val, 2)} | {rng} | {v['target']} | {met} |")
    out.append("")
    out.append("Definitions: " + "; ".join(f"`{k}`: {v['definition']}" for k, v in s.items()) + ".\n")
    out.append(floor_section(result))
    out.append(split_section(result))
    out.append("## Configurations\n")
    out.append("| name | what |\n|---|---|")
    for k, d in DESCRIPTIONS.items():
        out.append(f"| {k} | {d} |")
    out.append("")
    for mode, label in (("newconn", "New TCP connection per request"), ("keepalive", "Keep-alive")):
        t = cell_table(result, mode, "cpu_us", f"{label}: server CPU µs per request")
        if not t:
            continue
        out.append(f"## {label}\n")
        out.append(t)
        out.append(cell_table(result, mode, "rps", f"{label}: requests per second", 0))
        out.append(cell_table(result, mode, "p50_us", f"{label}: latency p50 (µs, incl. connect and handshake)", 0))
        out.append(cell_table(result, mode, "p99_us", f"{label}: latency p99 (µs)", 0))
        out.append(cell_table(result, mode, "client_cpu_us", f"{label}: generator CPU µs per request (one core)", 1, False))
        out.append(cell_table(result, mode, "util", f"{label}: server CPU use (share of its one core; a server "
                              "that waits for its generator pays more per request, see Method)", 2, False))
        out.append(overhead_table(result, mode))
    if "unloaded" in result:
        out.append("## Unloaded latency (one connection, new connection per request)\n")
        agg = result["unloaded"]
        sizes = [s for s, _ in SIZES]
        out.append("| configuration | " + " | ".join(f"{s} p50 µs" for s in sizes) + " |")
        out.append("|---|" + "---:|" * len(sizes))
        for name in CONFIGS:
            row = [fmt(agg.get(f"{name}|unloaded/{sz}", {}).get("p50_us", {}).get("median"), 0) for sz in sizes]
            out.append(f"| {name} | " + " | ".join(row) + " |")
        out.append("")
    if "scaling" in result:
        out.append("## Scaling: 1 and 2 server workers (new connection, 100 B)\n")
        out.append("1 worker: server on CPU 0, generator (1 thread) on CPU 1. 2 workers: server and "
                   "generator (2 threads) both on CPUs 0–1, as in the paper's Fig 7 (equal process "
                   "counts); on a 2-CPU machine they compete, so CPU µs per request is the figure to read.\n")
        out.append("| configuration | req/s, 1 worker | req/s, 2 workers | CPU µs/req, 1 | CPU µs/req, 2 |")
        out.append("|---|---:|---:|---:|---:|")
        agg = result["scaling"]
        for name in CONFIGS:
            a1, a2 = agg.get(f"{name}|1"), agg.get(f"{name}|2")
            if a1 and a2:
                out.append(f"| {name} | {fmt(a1['rps']['median'], 0)} | {fmt(a2['rps']['median'], 0)} | "
                           f"{fmt(a1['cpu_us']['median'])} | {fmt(a2['cpu_us']['median'])} |")
        out.append("")
    rtt = result.get("rtt", {})
    if rtt and "skipped" not in rtt:
        out.append(f"## Round trips to the first response byte ({rtt['rtt_ms']:.0f} ms RTT)\n")
        out.append("| configuration | time to first byte (ms, p50) | RTTs measured | RTTs counted by the client |")
        out.append("|---|---:|---:|---|")
        for name in CONFIGS:
            v = rtt.get(name)
            if v:
                st = str(v["rtts_structural_min"]) if v["rtts_structural_min"] == v["rtts_structural_max"] \
                    else f"{v['rtts_structural_min']}–{v['rtts_structural_max']}"
                out.append(f"| {name} | {v['ttfb_ms_p50']:.1f} | {v['rtts_measured']:.2f} | {st} |")
        out.append("\n" + rtt["method"] + " Resuming configurations resume from the second request on; "
                   "the median is a resumed one. The client's own count: the TCP handshake plus each "
                   "time it wrote and then had to wait for data.\n")
    elif rtt:
        out.append(f"## Round trips\n\nSkipped: {rtt['skipped']}\n")
    cap = result.get("capture", {})
    if cap and "skipped" not in cap:
        out.append("## Socket counts checked against a packet capture\n")
        out.append("| configuration | loadgen B/req | tcpdump payload B/req | difference | IP bytes/req (with headers) | packets/req |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for name in CONFIGS:
            v = cap.get(name)
            if v and "error" in v:
                out.append(f"| {name} | failed: {v['error']} | | | | |")
            elif v:
                out.append(f"| {name} | {v['loadgen_bytes_per_req']:.1f} | {v['capture_payload_per_req']:.1f} | "
                           f"{v['difference_bytes_per_req']:+.1f} | {v['capture_ip_bytes_per_req']:.0f} | "
                           f"{v['capture_packets_per_req']:.1f} |")
        out.append("\n" + cap["method"] + "\n")
    if figures:
        out.append("## Figures\n")
        for title, path in figures:
            out.append(f"**{title}**\n\n![{title}]({path})\n")
    out.append(METHOD)
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            out.append(f.read())
    return "\n".join(out) + "\n"


METHOD = """## Method

- **One load generator** (`bench/loadgen`, binary `loadgen run`): a single-threaded tokio event
  loop with N connection tasks and one hand-written HTTP/1.1 exchange (`http1.rs`: write the
  request, parse the head with httparse, stream the body by Content-Length or chunked) used for
  every protocol. TLS is rustls (aws-lc-rs, X25519 and P-256 offered, TLS 1.3 and 1.2 offered, the
  server picks; the server's handshake signature is verified, the self-signed chain is not).
  HTTPCrypt requests are built straight from the sans-IO core (`httpcrypt-proto`: cookie, GET form,
  `Sealer`, `Opener`, inner decoder), as `httpcrypt::Client` builds them but without its hyper
  client, so the HTTP code is the same as for plain and TLS. Every response is checked: status 200
  (inner 200 for HTTPCrypt) and exactly the file's length after decryption.
- **New connection per request**: the request is written first (an HTTPCrypt one sealed, with the
  client's X25519 for a fresh key, as `httpcrypt::Client` seals it before its connection opens),
  then connect, handshake, request with `Connection: close`, response, then read to the server's
  close (so every byte the server sends is counted); latency runs from before the request is
  written to the last body byte. **Keep-alive**: one connection per task, requests back
  to back.
- **Server CPU per request**: utime + stime of all server processes and threads
  (`/proc/PID/stat`, nginx master and workers included) over the measurement window, divided by
  the requests completed in it. With two CPUs the generator is usually the bottleneck, so this, not
  requests per second, is the capacity figure. Loopback packet processing is charged to whichever
  side sends, symmetrically for all protocols. A server that waits for its generator pays more per
  request (each wake-up finds fewer ready connections), so the tables give each server's CPU use:
  a ratio between cells at different loads carries that difference (`RATE.md` holds every
  configuration at one offered rate instead).
- **Bytes on the wire**: TCP payload bytes read and written at the generator's socket (below TLS),
  per request, checked once against `tcpdump` (table above). Overhead is against the plain HTTP
  mode of the same server code (nginx TLS against nginx plain; rustls and HTTPCrypt against
  `httpcrypt serve`'s plaintext path, which runs the same hyper and static-file code).
- **Pinning**: every server with one worker on CPU 0 (`taskset -c 0`, all threads), the generator
  on CPU 1. Cells run configuration after configuration (A B C … A B C …, order rotated per
  repetition), so drift on this shared host hits all configurations alike.
- **Post-quantum cells**: `hcpq-fresh` is `httpcrypt serve --compact --pq on` (a key directory made
  with `keygen --pq`) asked in suite 2 (spec/hybrid.md): the generator learns the suite-2 certificate
  and the ML-KEM-768 encapsulation key once from `OPTIONS /hc/pq`, then for every request makes a
  fresh X25519 key and a fresh encapsulation (aws-lc-rs's, `httpcrypt::client::encapsulate`, as the
  Rust client's) and sends the 1,088-byte ciphertext before the sealed
  stream in a POST body, in request profile 2, as `httpcrypt::Client` does by default (its GET form
  would carry the ciphertext as base64url, 363 bytes more); its CPU ratio is taken over `hc2-fresh`,
  the suite-1 fresh key in the same profile;
  the server runs X25519, an ML-KEM-768 decapsulation and the X-Wing combiner per request (hybrid
  sessions are not cached; tickets would resume them). `rustls-tls13-pq` is the rustls server taking
  only the X25519MLKEM768 group, the client offering it first (then X25519 and P-256, as rustls'
  default provider does), full handshakes. Their floor adds `loadgen floor`'s suite-2 core, which
  includes the X-Wing agreement, to the plaintext path.
- **Null baseline**: `hc-plain` is a plaintext GET outside the mount on the same `httpcrypt
  serve` process (`--pass-through`): the same listener, hyper connection code and static-file
  service, with no HTTPCrypt processing at all. An in-protocol "null cipher" would need a
  wire-format change; this baseline measures everything the protocol adds (routing, cookie scan,
  key agreement or cache lookup, stream open/seal, inner parse and reconstruction, Date and strike
  register, sealed framing).
- **Round trips**: measured at 50 ms RTT in a network namespace (NFQUEUE delay, see that section)
  and counted structurally by the client in every run.
- **Reproduce**: `bench/run` (full, about 20 min) or `bench/run --quick` (about 3 min after the
  build). It installs nginx, tcpdump, iptables and matplotlib when missing, builds the release
  binaries and writes this file, `results/` and `figures/`.
"""
