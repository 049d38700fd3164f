"""Figures in the manner of the paper's Figs 4-10, as PNG and SVG."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from configs import CONFIGS, PLAIN_OF  # noqa: E402
from servers import SIZES  # noqa: E402

STYLE = {
    "nginx-plain": ("#7f7f7f", "o", "-"),
    "nginx-tls12": ("#d62728", "s", "-"),
    "nginx-tls12-tickets": ("#ff9896", "s", "--"),
    "nginx-tls13": ("#9467bd", "^", "-"),
    "rustls-tls13": ("#8c564b", "v", "-"),
    "rustls-tls13-pq": ("#c49c94", "v", "--"),
    "hc-plain": ("#2ca02c", "o", ":"),
    "hc-fresh": ("#1f77b4", "D", "-"),
    "hc-cached": ("#17becf", "D", "--"),
    "hc-ticket": ("#aec7e8", "D", "-."),
    "hc2-fresh": ("#9467bd", "s", "-"),
    "hc2-ticket": ("#c5b0d5", "s", "-."),
    "hcpq-fresh": ("#ff7f0e", "P", "-"),
}


def _series(result, mode, key):
    agg = result.get("aggregate", {})
    out = {}
    for name in CONFIGS:
        xs, ys, lo, hi = [], [], [], []
        for s, n in SIZES:
            a = agg.get(f"{name}|{mode}/{s}")
            if a:
                xs.append(n)
                ys.append(a[key]["median"])
                lo.append(a[key]["median"] - a[key]["min"])
                hi.append(a[key]["max"] - a[key]["median"])
        if xs:
            out[name] = (xs, ys, lo, hi)
    return out


def _save(fig, fig_dir, stem):
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(fig_dir, f"{stem}.{ext}"), dpi=110)
    plt.close(fig)
    return f"figures/{stem}.png"


def _size_axis(ax, series):
    sizes = sorted({x for xs, *_ in series.values() for x in xs})
    ax.set_xscale("log")
    ax.set_xticks(sizes)
    names = {n: s for s, n in SIZES}
    ax.set_xticklabels([names[x].upper().replace("B", " B").replace("K", " KiB").replace("M", " MiB")
                        for x in sizes])
    ax.minorticks_off()


def _lines(result, mode, key, ylabel, title, fig_dir, stem, logy=False, only=None):
    series = _series(result, mode, key)
    if only:
        series = {k: v for k, v in series.items() if k in only}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    if len({x for xs, *_ in series.values() for x in xs}) == 1:
        # One size only (a --quick run): bars per configuration.
        names = list(series)
        ax.bar(range(len(names)), [series[n][1][0] for n in names],
               yerr=[[series[n][2][0] for n in names], [series[n][3][0] for n in names]],
               color=[STYLE[n][0] for n in names], capsize=3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        size = {n: s for s, n in SIZES}[series[names[0]][0][0]]
        ax.set_xlabel(f"configuration ({size} responses)")
        if logy:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        return (title, _save(fig, fig_dir, stem))
    for name, (xs, ys, lo, hi) in series.items():
        c, m, ls = STYLE[name]
        ax.errorbar(xs, ys, yerr=[lo, hi], color=c, marker=m, linestyle=ls, label=name, capsize=3)
    _size_axis(ax, series)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("response size")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return (title, _save(fig, fig_dir, stem))


def draw(result, fig_dir):
    out = []
    add = lambda x: x and out.append(x)
    add(_lines(result, "newconn", "rps", "requests / s", "Requests per second, new connection per request "
               "(paper Figs 4-6)", fig_dir, "fig4_rps_newconn", logy=True))
    add(_lines(result, "keepalive", "rps", "requests / s", "Requests per second, keep-alive",
               fig_dir, "fig5_rps_keepalive", logy=True))
    add(_lines(result, "newconn", "cpu_us", "server CPU µs / request",
               "Server CPU per request, new connection per request", fig_dir, "fig6_cpu_newconn", logy=True))
    add(_lines(result, "keepalive", "cpu_us", "server CPU µs / request",
               "Server CPU per request, keep-alive", fig_dir, "fig6b_cpu_keepalive", logy=True))
    add(_scaling(result, fig_dir))
    add(_overhead(result, fig_dir))
    add(_cdf(result, fig_dir, "newconn/100b", "Latency CDF, new connection, 100 B, 50 connections (paper Figs 9-10)",
             "fig9_latency_cdf_100b"))
    add(_cdf(result, fig_dir, "newconn/1m", "Latency CDF, new connection, 1 MiB, 50 connections",
             "fig10_latency_cdf_1m"))
    add(_unloaded(result, fig_dir))
    add(_rtt(result, fig_dir))
    return out


def _scaling(result, fig_dir):
    agg = result.get("scaling")
    if not agg:
        return None
    names = [n for n in CONFIGS if f"{n}|1" in agg]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    w = 0.38
    for i, (key, label) in enumerate((("rps", "requests / s"), ("cpu_us", "server CPU µs / request"))):
        ax = axes[i]
        for j, workers in enumerate((1, 2)):
            vals = [agg[f"{n}|{workers}"][key]["median"] for n in names]
            ax.bar([k + (j - 0.5) * w for k in range(len(names))], vals, w, label=f"{workers} worker(s)")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Scaling with server workers, new connection, 100 B (paper Fig 7)")
    return ("Scaling with 1 and 2 server workers", _save(fig, fig_dir, "fig7_scaling"))


def _overhead(result, fig_dir):
    agg = result.get("aggregate", {})
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    drawn = False
    series = {}
    for name in CONFIGS:
        if PLAIN_OF[name] == name:
            continue
        xs, ys = [], []
        for s, n in SIZES:
            a, p = agg.get(f"{name}|newconn/{s}"), agg.get(f"{PLAIN_OF[name]}|newconn/{s}")
            if a and p:
                xs.append(n)
                ys.append(a["bytes"]["median"] - p["bytes"]["median"])
        if xs:
            c, m, ls = STYLE[name]
            ax.plot(xs, ys, color=c, marker=m, linestyle=ls, label=name)
            series[name] = (xs, ys, [], [])
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    _size_axis(ax, series)
    ax.set_yscale("symlog", linthresh=100)
    ax.set_xlabel("response size")
    ax.set_ylabel("bytes / request beyond plain HTTP")
    ax.set_title("Traffic overhead over plain HTTP, new connection per request (paper Fig 8)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ("Traffic overhead", _save(fig, fig_dir, "fig8_overhead"))


def _cdf(result, fig_dir, cell, title, stem):
    agg = result.get("aggregate", {})
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    drawn = False
    for name in CONFIGS:
        a = agg.get(f"{name}|{cell}")
        if not a:
            continue
        pts = sorted(a["cdf"][:201], key=lambda p: p[1])
        c, m, ls = STYLE[name]
        ax.plot([p[0] / 1000.0 for p in pts], [p[1] for p in pts], color=c, linestyle=ls, label=name)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_xlabel("latency, connect to last byte (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return (title, _save(fig, fig_dir, stem))


def _unloaded(result, fig_dir):
    agg = result.get("unloaded")
    if not agg:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    series = {}
    for name in CONFIGS:
        xs, ys = [], []
        for s, n in SIZES:
            a = agg.get(f"{name}|unloaded/{s}")
            if a:
                xs.append(n)
                ys.append(a["p50_us"]["median"] / 1000.0)
        if xs:
            c, m, ls = STYLE[name]
            ax.plot(xs, ys, color=c, marker=m, linestyle=ls, label=name)
            series[name] = (xs, ys, [], [])
    _size_axis(ax, series)
    ax.set_yscale("log")
    ax.set_xlabel("response size")
    ax.set_ylabel("latency p50 (ms)")
    ax.set_title("Unloaded latency, one connection, new connection per request")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return ("Unloaded latency by size", _save(fig, fig_dir, "fig10b_latency_unloaded"))


def _rtt(result, fig_dir):
    rtt = result.get("rtt", {})
    names = [n for n in CONFIGS if n in rtt]
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    vals = [rtt[n]["ttfb_ms_p50"] for n in names]
    ax.bar(range(len(names)), vals, color=[STYLE[n][0] for n in names])
    for i, n in enumerate(names):
        ax.text(i, vals[i] + 2, f"{rtt[n]['rtts_measured']:.1f}", ha="center", fontsize=8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("time to first response byte (ms)")
    ax.set_title(f"New connection at {rtt['rtt_ms']:.0f} ms RTT (labels: round trips)")
    ax.grid(True, axis="y", alpha=0.3)
    return ("Round trips to the first byte", _save(fig, fig_dir, "fig_rtt"))
