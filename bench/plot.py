#!/usr/bin/env python3
"""Plots a scripts/bench results.json: catch-up throughput by document size (bridge, limits,
baselines) and live write -> delivery latency by rate. Usage: plot.py results.json out.png"""

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZES = ["1KB", "20KB", "250KB"]
SYSTEMS = [
    ("limit-read", "limit: read only", "#bbbbbb"),
    ("limit-relay", "limit: read + produce", "#555555"),
    ("limit-headers", "limit + bridge-like headers", "#8c564b"),
    ("bridge", "mongo-kafka-bridge", "#1f77b4"),
    ("node", "Node.js baseline", "#2ca02c"),
    ("python", "Python baseline", "#d62728"),
    ("debezium", "Debezium (Kafka Connect, warm)", "#9467bd"),
    ("mongo-kafka", "MongoDB Kafka connector (warm)", "#e377c2"),
]


def med(values):
    values = [v for v in values if v == v]
    return (statistics.median(values), min(values), max(values)) if values else None


def main(src, dst):
    data = json.loads(open(src).read())
    meta = data["meta"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    cu = data["catchup"]
    sizes = [s for s in SIZES if any(r["size"] == s for r in cu)]
    systems = [s for s in SYSTEMS if any(r["system"] == s[0] for r in cu)]
    width = 0.8 / max(len(systems), 1)
    for i, (key, label, color) in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for j, size in enumerate(sizes):
            m = med([r["mb_per_s"] for r in cu if r["system"] == key and r["size"] == size and "mb_per_s" in r])
            if m:
                xs.append(j + (i - (len(systems) - 1) / 2) * width)
                ys.append(m[0])
                lo.append(m[0] - m[1])
                hi.append(m[2] - m[0])
        ax1.bar(xs, ys, width, label=label, color=color, yerr=[lo, hi], capsize=2)
    ax1.set_xticks(range(len(sizes)), [f"{s} documents" for s in sizes])
    ax1.set_ylabel("catch-up throughput, MB/s of change events (median, min–max)")
    ax1.set_title("Catch-up: backlog drained into Kafka")
    ax1.legend(fontsize=8)
    ax1.grid(axis="y", alpha=0.3)

    live = data["live"]
    for key, label, color in SYSTEMS:
        rs = [r for r in live if r["system"] == key]
        rates = sorted({r["rate"] for r in rs})
        if not rates:
            continue
        for q, style in (("p50_ms", "-o"), ("p99_ms", "--s")):
            # x = the rate the writer reached (it may fall short of the target at the top steps)
            pts = [(med([r["write_rate"] for r in rs if r["rate"] == rate]),
                    med([r[q] for r in rs if r["rate"] == rate])) for rate in rates]
            pts = [(x[0], m[0]) for x, m in pts if m and x]
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color,
                     label=f"{label} {q.split('_')[0]}")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("write rate reached, events/s (1 KB, insert/update/delete 6:3:1)")
    ax2.set_ylabel("write → consumer latency, ms (median over runs)")
    ax2.set_title("Live: latency by write rate")
    ax2.axhline(20, color="#999999", lw=0.8, ls=":")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3, which="both")
    fig.suptitle(f"mongo-kafka-bridge on {meta['machine']} — MongoDB: {meta['versions']['mongo']}, "
                 f"Kafka: {meta['versions']['kafka']} (wire-compatible stand-ins), {meta['runs']} runs",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
