"""Summaries of repeated measurements: min / median / max over the runs (NaN left out), their
"median (min–max)" form, ratios taken within each run (side by side), never across runs, and
the live latency split's cells (bench/src/live.rs)."""

import statistics

NAN = float("nan")


def mmm(values):
    """(min, median, max) of `values` without NaN; NaNs when none is left."""
    v = [x for x in values if x == x]
    if not v:
        return (NAN,) * 3
    return min(v), statistics.median(v), max(v)


def fmt_mmm(values, digits=0):
    """`median (min–max)`, or n/a."""
    lo, med, hi = mmm(values)
    if med != med:
        return "n/a"
    f = f"{{:,.{digits}f}}"
    return f"{f.format(med)} ({f.format(lo)}–{f.format(hi)})"


def run_ratios(by, a, b, runs, key="rate"):
    """[by[(a, run)][key] ÷ by[(b, run)][key]] for every run that measured both."""
    return [by[(a, k)][key] / by[(b, k)][key] for k in runs
            if (a, k) in by and (b, k) in by and by[(b, k)][key]]


def with_split(rows):
    """The live rows that carry the latency split (records with a CreateTime)."""
    return [r for r in rows if (r.get("split") or {}).get("create_time_fraction")]


def split_cells(rs):
    """`write → enqueue p50 / p99 | enqueue → consumer p50 / p99` of `rs`, ms, over the runs."""
    part = lambda key: fmt_mmm([r["split"][key] for r in rs], 1)  # noqa: E731
    return (f"{part('write_to_enqueue_p50_ms')} / {part('write_to_enqueue_p99_ms')} | "
            f"{part('enqueue_to_consumer_p50_ms')} / {part('enqueue_to_consumer_p99_ms')}")
