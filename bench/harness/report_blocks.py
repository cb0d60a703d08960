"""The tables of the copy, group and exactly-once blocks (markdown through `out`), with their
notes and the targets they check."""

import os

from .eos import CATCHUP_TARGET, LIVE_MARGIN_MS, MODES
from .figures import fmt_mmm, mmm, run_ratios, split_cells, with_split
from .group import group_variant
from .snapshot import COPY_SIZES, COPY_SYSTEMS
from .systems import SIZES


def copy_report(results, out):
    """The copy block's table and notes (no targets)."""
    cp = results.get("copy", [])
    skipped = list(dict.fromkeys(r["reason"] for r in results.get("skipped", [])
                                 if r["system"] == "bridge-copy"))
    if not cp and not skipped:
        return
    out("### Initial snapshot (copy of an existing collection)")
    out("")
    groups = [(size, n) for size in COPY_SIZES
              for n in sorted({r["count"] for r in cp if r["size"] == size}, reverse=True)]
    notes = []
    if cp:
        out("| size | system | documents/s | MB/s | × limit-copy | first record s | CPU µs/document | "
            "peak RSS MiB |")
        out("|---|---|---|---|---|---|---|---|")
    for size, n in groups:
        by = {(r["system"], r["run"]): r for r in cp if r["size"] == size and r["count"] == n}
        runs = sorted({k for _, k in by})
        ratio = lambda a, b: run_ratios(by, a, b, runs)  # noqa: E731
        for s in COPY_SYSTEMS:
            rs = [by[(s, k)] for k in runs if (s, k) in by]
            if not rs:
                continue
            ratios = ratio(s, "limit-copy")
            out(f"| {size} ×{n:,} | {s} | {fmt_mmm([r['rate'] for r in rs])} | "
                f"{fmt_mmm([r.get('mb_per_s', float('nan')) for r in rs], 1)} | "
                f"{fmt_mmm(ratios, 2) if ratios else 'n/a'} | "
                f"{fmt_mmm([r['first_s'] for r in rs], 2)} | "
                f"{fmt_mmm([r['cpu_us_per_event'] for r in rs], 1)} | "
                f"{fmt_mmm([r['peak_rss_mib'] for r in rs], 1)} |")
        side = [f"{s} ÷ limit-copy {fmt_mmm(ratio(s, 'limit-copy'), 2)} ×"
                for s in ("bridge-copy", "python-copy", "limit-copy-cursor")
                if ratio(s, "limit-copy")]
        if side:
            notes.append(f"at {size} ×{n:,}: " + ", ".join(side) + " (no target)")
    rss = {n: [r["peak_rss_mib"] for r in cp if r["system"] == "bridge-copy" and r["size"] == "1KB"
               and r["count"] == n] for n in {r["count"] for r in cp if r["size"] == "1KB"}}
    rss = {n: v for n, v in rss.items() if v}
    if len(rss) >= 2:
        lo, hi = min(rss), max(rss)
        grow = mmm(rss[hi])[1] / mmm(rss[lo])[1]
        notes.append(f"bridge-copy peak RSS (VmHWM) at 1 KB: ×{lo:,} documents "
                     f"{fmt_mmm(rss[lo], 1)} MiB, ×{hi:,} documents {fmt_mmm(rss[hi], 1)} MiB: "
                     f"{grow:.2f} × for {hi / lo:.0f} × the collection (no target)")
    notes += [f"bridge-copy SKIPPED: {reason}" for reason in skipped]
    if cp:
        out("")
    for note in notes:
        out(f"- {note}")
    out("")


def group_report(results, meta, out, targets):
    """The group block's table, per-run spread and ratios; its target (full runs)."""
    gr = results.get("group", [])
    skipped = [r["reason"] for r in results.get("skipped", []) if r["system"] == "group"]
    if not gr and not skipped:
        return
    out("### Many replicas: group catch-up (pipelines on 1 vs several members)")
    out("")
    for reason in dict.fromkeys(skipped):
        out(f"- group block SKIPPED: {reason}")
    if not gr:
        out("")
        return
    k, n = gr[0]["pipelines"], gr[0]["per_pipeline"]
    # Groups by size, then single; the reference is the smallest group (a one-member group:
    # the same membership cost as the others).
    variants = sorted(dict.fromkeys(r["system"] for r in gr),
                      key=lambda v: (v == "single", group_variant(v)[0]))
    ref = variants[0]
    runs = sorted({r["run"] for r in gr})
    by = {(r["system"], r["run"]): r for r in gr}
    ratio = lambda a, b: run_ratios(by, a, b, runs)  # noqa: E731
    out(f"{k} pipelines, a backlog of {n:,} ~1 KB insert events each ({k * n:,} in all), "
        f"written after every pipeline committed its first position; Kafka: "
        f"{meta['versions']['kafka']}, one partition per topic, the control topic made by the "
        f"bridge. Rate = "
        f"{k * n:,} ÷ (first member started → every pipeline's records acknowledged, from the "
        f"members' /metrics); CPU = all members' utime + stime. Order rotated between runs.")
    out("")
    out(f"| variant | processes | events/s | × {ref} | events/s after the first record "
        f"| first record s | all pipelines running s | last − first pipeline done s "
        f"| CPU µs/event | peak RSS MiB (largest member) | owned per member (each run) |")
    out("|---|---|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        rs = [by[(v, x)] for x in runs if (v, x) in by]
        spread = ", ".join("/".join(str(g) if g is not None else "–" for g in r["owned_gauge"])
                           if r["grouped"] else "–" for r in rs)
        nan = float("nan")
        out(f"| {v} | {rs[0]['members']} | {fmt_mmm([r['rate'] for r in rs])} | "
            f"{fmt_mmm(ratio(v, ref), 2)} | {fmt_mmm([r['tail_rate'] for r in rs])} | "
            f"{fmt_mmm([r['first_s'] if r['first_s'] is not None else nan for r in rs], 1)} | "
            f"{fmt_mmm([r['all_running_s'] if r['all_running_s'] is not None else nan for r in rs], 1)} | "
            f"{fmt_mmm([max(r['pipeline_done_s']) - min(r['pipeline_done_s']) for r in rs], 1)} | "
            f"{fmt_mmm([r['cpu_us_per_event'] for r in rs], 1)} | "
            f"{fmt_mmm([r['peak_rss_mib'] for r in rs], 1)} | {spread} |")
    out("")
    notes = []
    for v in variants:
        if v == ref:
            continue
        if ratio(v, ref):
            notes.append(f"{v} ÷ {ref}: {fmt_mmm(ratio(v, ref), 2)} × (ratio within each run)")
    for r in gr:
        where = f"{r['system']} run {r['run']}"
        if r["unowned_at_end"]:
            notes.append(f"{where}: pipelines running nowhere at the end: "
                         f"{', '.join(f'p{p}' for p in r['unowned_at_end'])}")
        if r["double_owned_seen"]:
            notes.append(f"{where}: a pipeline seen running on two members in one scrape round "
                         f"(s, pipeline, members): {r['double_owned_seen'][:5]}")
        if r["duplicates"] or r["missing"]:
            notes.append(f"{where}: the topics hold {r['duplicates']:,} duplicates and miss "
                         f"{r['missing']:,} events (records per topic {r['records_per_topic']}, "
                         f"distinct keys {r['unique_keys_per_topic']})")
        if r["grouped"] and sum(r["group_starts"]) != r["pipelines"]:
            notes.append(f"{where}: {sum(r['group_starts'])} pipeline starts for "
                         f"{r['pipelines']} pipelines (per member {r['group_starts']}; "
                         f"rebalances {r['rebalances']})")
        if any(r["exit_codes"]):
            notes.append(f"{where}: members exited with {r['exit_codes']} on SIGTERM")
    busy = [r for r in gr if r.get("other_load_cores", 0) > 0.2]
    if busy:
        notes.append("the machine was shared: other processes used " + ", ".join(
            f"{r['other_load_cores']:.2f} cores during {r['system']} run {r['run']}"
            for r in busy) + f" (of {os.cpu_count()}; those measurements are low)")
    if not any(r["duplicates"] or r["missing"] for r in gr):
        notes.append(f"topics read back after each variant (untimed): every event exactly once "
                     f"in all {len(gr)} measurements")
    for note in notes:
        out(f"- {note}")
    if notes:
        out("")
    multi = [v for v in variants if v.startswith("group-") and group_variant(v)[0] > 1]
    if ref.startswith("group-") and group_variant(ref)[0] == 1:
        for v in multi:
            if ratio(v, ref):
                med = mmm(ratio(v, ref))[1]
                targets.append((f"group catch-up: {k} pipelines on {group_variant(v)[0]} members "
                                f"≥ 0.9 × on 1", f"{med:.2f} ×", med >= 0.9))


def eos_report(results, meta, out, targets):
    """The block's tables and notes (markdown through `out`); its targets into `targets`."""
    cu, lv = results.get("eos_catchup", []), results.get("eos_live", [])
    skipped = [r["reason"] for r in results.get("skipped", []) if r["system"] == "eos"]
    if not cu and not lv and not skipped:
        return
    out("### Exactly-once (delivery = \"exactly_once\" beside the same pipeline at-least-once)")
    out("")
    for reason in dict.fromkeys(skipped):
        out(f"- exactly-once block SKIPPED: {reason}")
        out("")
    if not cu and not lv:
        return
    out(f"MongoDB: {meta['versions']['mongo']}, Kafka: {meta['versions']['kafka']}, on "
        f"{meta['machine']}; both modes side by side in each run.")
    out("")
    fmt = fmt_mmm
    nan = float("nan")
    if cu:
        out("Catch-up: done when the topic's last stable offset (read_committed ListOffsets, "
            "polled every 10 ms) reached its final value, every record then read back "
            "read_committed; the bridge's defaults (commit_interval_ms 1000, "
            "max_transaction_events 10000).")
        out("")
        out("| size | delivery | events/s | × at-least-once | CPU µs/event | peak RSS MiB "
            "| transactions | records/transaction | EndTxn mean ms | duplicates / missing |")
        out("|---|---|---|---|---|---|---|---|---|---|")
        for size in [s for s in SIZES if any(r["size"] == s for r in cu)]:
            by = {(r["system"], r["run"]): r for r in cu if r["size"] == size}
            runs = sorted({k for _, k in by})
            count = next(r["count"] for r in cu if r["size"] == size)
            ratios = [by[("bridge-eos", k)]["rate"] / by[("bridge", k)]["rate"] for k in runs
                      if ("bridge-eos", k) in by and ("bridge", k) in by]
            for s in MODES:
                rs = [by[(s, k)] for k in runs if (s, k) in by]
                if not rs:
                    continue
                eos = s == "bridge-eos"
                out(f"| {size} ×{count:,} | {MODES[s]} | {fmt([r['rate'] for r in rs])} | "
                    f"{fmt(ratios, 2) if eos and ratios else ('1' if not eos else 'n/a')} | "
                    f"{fmt([r['cpu_us_per_event'] for r in rs], 1)} | "
                    f"{fmt([r['peak_rss_mib'] for r in rs], 1)} | "
                    f"{fmt([r.get('transactions', nan) for r in rs]) if eos else '–'} | "
                    f"{fmt([r.get('records_per_transaction', nan) for r in rs]) if eos else '–'} | "
                    f"{fmt([r.get('endtxn_mean_ms', nan) for r in rs], 1) if eos else '–'} | "
                    f"{sum(r['duplicates'] for r in rs)} / {sum(r['missing'] for r in rs)} |")
            if ratios:
                med = mmm(ratios)[1]
                targets.append((f"exactly-once catch-up {size} ≥ {CATCHUP_TARGET} × "
                                f"at-least-once", f"{med:.2f} ×", med >= CATCHUP_TARGET))
        out("")
    if lv:
        rate = lv[0]["target_rate"]
        out(f"Live: write → read_committed consumer (fetch.wait.max.ms 10) at {rate:,} events/s "
            f"(6:3:1 insert/update/delete, ~1 KB); EndTxn from the bridge's commit-duration "
            f"histogram over the step (p50/p99 interpolated in 1 ms-doubling buckets).")
        out("")
        out("| delivery | commit_interval_ms | written/s | p50 ms | p99 ms | max ms | target p99 "
            "| received | EndTxn mean ms | EndTxn p50 / p99 ms | transaction mean ms "
            "| transactions (aborted) | records/transaction |")
        out("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        notes = []
        keys = sorted({(r["system"], r["commit_interval_ms"]) for r in lv},
                      key=lambda k: (k[1] is not None, k[1] or 0))
        for s, interval in keys:
            rs = [r for r in lv if r["system"] == s and r["commit_interval_ms"] == interval]
            got = sum(r["received_stamped"] for r in rs)
            want = sum(r["expected_stamped"] for r in rs)
            eos = interval is not None
            dash = lambda text: text if eos else "–"  # noqa: E731
            out(f"| {MODES[s]} | {interval if eos else '–'} | "
                f"{fmt([r['write_rate'] for r in rs])} | {fmt([r['p50_ms'] for r in rs], 1)} | "
                f"{fmt([r['p99_ms'] for r in rs], 1)} | {fmt([r['max_ms'] for r in rs], 1)} | "
                f"{dash(f'≤ {interval + LIVE_MARGIN_MS} ms' if eos else '')} | "
                f"{100 * got / max(want, 1):.1f} % | "
                f"{dash(fmt([r.get('endtxn_mean_ms', nan) for r in rs], 1))} | "
                f"{dash(fmt([r.get('endtxn_p50_ms', nan) for r in rs], 1) + ' / ' + fmt([r.get('endtxn_p99_ms', nan) for r in rs], 1))} | "
                f"{dash(fmt([r.get('transaction_mean_ms', nan) for r in rs]))} | "
                f"{dash(fmt([r.get('transactions', nan) for r in rs]) + ' (' + str(int(sum(r.get('aborted', 0) for r in rs))) + ')')} | "
                f"{dash(fmt([r.get('records_per_transaction', nan) for r in rs]))} |")
            short = [r for r in rs if r["write_rate"] < 0.9 * rate]
            if short:
                notes.append(f"{MODES[s]}{f' {interval} ms' if eos else ''}: in "
                             f"{len(short)} of {len(rs)} runs the writer reached only "
                             f"{', '.join(format(r['write_rate'], ',.0f') for r in short)}/s "
                             f"(< 90 % of {rate:,}/s): those runs do not count for the target")
            if eos and rate == 2000:
                name = (f"exactly-once live p99 at 2 000/s, commit_interval_ms {interval} ≤ "
                        f"{interval + LIVE_MARGIN_MS} ms")
                valid = [r["p99_ms"] for r in rs if r["write_rate"] >= 0.9 * rate]
                if valid:
                    p99 = mmm(valid)[1]
                    targets.append((name, f"{p99:.1f} ms", p99 <= interval + LIVE_MARGIN_MS))
                else:
                    targets.append((name, "no valid run (the writer stayed under 90 % of the "
                                          "rate)", False))
        out("")
        for note in notes:
            out(f"- {note}")
        if notes:
            out("")
        eos_live_split(lv, keys, out)
    busy = [r for r in cu + lv if r.get("other_load_cores", 0) > 0.2]
    if busy:
        out(f"- the machine was shared: other processes used up to "
            f"{max(r['other_load_cores'] for r in busy):.2f} cores of {os.cpu_count()} during "
            f"{len(busy)} of {len(cu) + len(lv)} measurements (per measurement in results.json, "
            f"`other_load_cores`)")
        out("")


def eos_live_split(lv, keys, out):
    """The live latency split at each record's CreateTime (bench/src/live.rs): write → enqueue
    is the stream read and the bridge's work; enqueue → consumer holds, under exactly-once, the
    record's wait for its transaction's commit (a read_committed consumer sees it only then)."""
    rows = with_split(lv)
    if not rows:
        return
    out("Where the live latency goes, split at each record's Kafka timestamp (`CreateTime`, "
        "stamped when the bridge enqueues it; ms): under exactly-once, *enqueue → consumer* "
        "holds the wait for the transaction's commit.")
    out("")
    out("| delivery | commit_interval_ms | write → enqueue p50 / p99 ms "
        "| enqueue → consumer p50 / p99 ms |")
    out("|---|---|---|---|")
    for s, interval in keys:
        rs = [r for r in rows if r["system"] == s and r["commit_interval_ms"] == interval]
        if not rs:
            continue
        out(f"| {MODES[s]} | {interval if interval is not None else '–'} | {split_cells(rs)} |")
    out("")


def callgrind_report(results, out, targets, baseline=None):
    """The instruction block: instructions per event by system and size (median and spread over
    the runs), bridge ÷ limit-inline within each run, and the bridge's top inclusive costs."""
    rows = results.get("callgrind", [])
    if not rows:
        return
    out("### Instructions per event (callgrind, whole process, large − small backlog)")
    out("")
    out("| size | system | instructions/event | spread | × limit-inline (same format) |")
    out("|---|---|---|---|---|")
    by = {(r["system"], r["size"], r["run"]): r for r in rows}
    runs = sorted({r["run"] for r in rows})
    for size in [s for s in SIZES if any(r["size"] == s for r in rows)]:
        for system in ("limit-inline", "bridge", "limit-inline-bson", "bridge-bson"):
            vals = [by[(system, size, k)]["ir_per_event"] for k in runs if (system, size, k) in by]
            if not vals:
                continue
            lo, med, hi = mmm(vals)
            ref = "limit-inline-bson" if system.endswith("-bson") else "limit-inline"
            ratios = [by[(system, size, k)]["ir_per_event"] / by[(ref, size, k)]["ir_per_event"]
                      for k in runs if (system, size, k) in by and (ref, size, k) in by]
            ratio = fmt_mmm(ratios, 3) if system.startswith("bridge") and ratios else ""
            spread = f"{100 * (hi - lo) / med:.1f} %" if len(vals) > 1 else "n/a (1 run)"
            out(f"| {size} | {system} | {med:,.0f} | {spread} | {ratio} |")
            if system.startswith("bridge") and ratios:
                r = mmm(ratios)[1]
                targets.append((f"instructions per {size} event: {system} ≤ 1.15 × {ref}",
                                f"{r:.3f} ×", r <= 1.15))
    out("")
    out("The profiles are the run directory's `callgrind-<system>-<size>-<backlog>-<run>.out`: "
        "`callgrind_annotate --inclusive=yes FILE` lists a process's costs, "
        "`--tree=caller` adds who called what.")
    out("")
    for size, top in results.get("callgrind_profile", {}).items():
        out(f"Top inclusive costs of the bridge at {size} (share of the whole process's "
            "instructions, large backlog, run 1):")
        out("")
        out("| share | instructions | function |")
        out("|---|---|---|")
        for share, ir, name in top:
            out(f"| {share:.1f} % | {ir:,} | `{name[:110]}` |")
        out("")
