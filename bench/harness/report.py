"""The markdown report of a run (results.md): the header (servers, machine, load, commit),
the catch-up and live tables, the peers beside the bridge with the ratios bridge ÷ peer, the
other blocks' tables (report_blocks.py), and the targets table."""

from .figures import NAN, fmt_mmm, mmm, run_ratios, split_cells, with_split
from .report_blocks import callgrind_report, copy_report, eos_report, group_report
from .systems import BRIDGES, CATCHUP_SYSTEMS, OPTIONAL_SYSTEMS, PEERS, SIZES


def header(meta, out):
    """Where and how the figures were measured."""
    load = meta.get("load_average")
    out(f"Measured {meta['date']} on {meta['machine']}"
        + (f" (1-minute load average during the run {load['median']:.1f}, "
           f"{load['min']:.1f}–{load['max']:.1f}, sampled every 10 s)" if load else "")
        + f"; commit {meta.get('commit', '?')}. MongoDB: {meta['versions']['mongo']}"
        + (" (a wire-compatible stand-in, not mongod)" if "SecantusDB" in meta["versions"]["mongo"]
           else "") + f"; Kafka: {meta['versions']['kafka']}. "
        f"{meta['runs']} runs, figures are median (min–max); {meta['partitions']} partition(s), "
        f"compression {meta['compression']}.")
    out("")


def report(results, meta, with_targets=True):
    """The markdown report: tables, ratios and (unless `with_targets` is false) targets."""
    lines = []
    out = lines.append
    header(meta, out)
    for r in results.get("skipped", []):
        if r["system"] in ("blocks", "peers"):
            out(f"SKIPPED {r['system']}: {r['reason']}.")
            out("")
    cu = results["catchup"]
    sizes = [s for s in SIZES if any(r["size"] == s for r in cu)]
    systems = [s for s in CATCHUP_SYSTEMS + OPTIONAL_SYSTEMS if any(r["system"] == s for r in cu)]
    targets = []
    notes = []
    if cu:
        out("### Catch-up (backlog drained)")
        out("")
        out("| size | system | events/s | MB/s | × limit (read+produce) | CPU µs/event | peak RSS MiB |")
        out("|---|---|---|---|---|---|---|")
        for size in sizes:
            runs = sorted({r["run"] for r in cu if r["size"] == size})
            by = {(r["system"], r["run"]): r for r in cu if r["size"] == size}
            count = next((r["count"] for r in cu if r["size"] == size and r["system"] not in PEERS),
                         0)
            for s in systems:
                rs = [by[(s, k)] for k in runs if (s, k) in by]
                if not rs:
                    continue
                ratios = run_ratios(by, s, "limit-relay", runs)
                n = f"{rs[0]['count']:,} (warm)" if s in PEERS else f"{count:,}"
                out(f"| {size} ×{n} | {s} | {fmt_mmm([r['rate'] for r in rs])} | "
                    f"{fmt_mmm([r.get('mb_per_s', float('nan')) for r in rs], 1)} | "
                    f"{fmt_mmm(ratios, 2) if ratios else 'n/a'} | "
                    f"{fmt_mmm([r['cpu_us_per_event'] for r in rs], 1)} | "
                    f"{fmt_mmm([r['peak_rss_mib'] for r in rs], 1)} |")
            ratio = lambda a, b: run_ratios(by, a, b, runs)  # noqa: E731
            if ("bridge", runs[0]) in by and ("limit-relay", runs[0]) in by:
                med = mmm(ratio("bridge", "limit-relay"))[1]
                targets.append((f"catch-up {size}: bridge ≥ 0.9 × limit", f"{med:.2f} ×", med >= 0.9))
            for bridge, fair in (("bridge", "limit-fair"), ("bridge-bson", "limit-fair-bson"),
                                 ("bridge", "limit-inline"), ("bridge-bson", "limit-inline-bson")):
                if (bridge, runs[0]) in by and (fair, runs[0]) in by:
                    med = mmm(ratio(bridge, fair))[1]
                    targets.append((f"catch-up {size}: {bridge} ≥ 0.9 × {fair}", f"{med:.2f} ×",
                                    med >= 0.9))
            for pool, bridge in (("bridge-pool", "bridge"), ("bridge-pool-bson", "bridge-bson")):
                if (bridge, runs[0]) in by and (pool, runs[0]) in by:
                    med = mmm(ratio(pool, bridge))[1]
                    notes.append(f"{pool} ÷ {bridge} at {size} (the encode pool's gain): "
                                 f"{med:.2f} ×")
            for base in ("limit-relay", "limit-headers"):
                if ("bridge-bson", runs[0]) in by and (base, runs[0]) in by:
                    med = mmm(ratio("bridge-bson", base))[1]
                    notes.append(f"bridge-bson ÷ {base} at {size}: {med:.2f} × (no target)")
            for base in ("node", "python"):
                if ("bridge", runs[0]) in by and (base, runs[0]) in by:
                    med = mmm(ratio("bridge", base))[1]
                    need = 5.0 if size == "1KB" else 1.0
                    targets.append((f"catch-up {size}: bridge ≥ {need:g} × {base}", f"{med:.1f} ×", med >= need))
            if size == "1KB":
                cpu = lambda s: [by[(s, k)]["cpu_us_per_event"] for k in runs if (s, k) in by]  # noqa: E731
                if cpu("bridge") and cpu("limit-relay"):
                    b, lim = mmm(cpu("bridge"))[1], mmm(cpu("limit-relay"))[1]
                    targets.append(("bridge CPU per 1 KB event ≤ 1.5 × limit program's",
                                    f"{b:.1f} vs {lim:.1f} µs ({b / lim:.2f} ×)", b <= 1.5 * lim))
                for bridge in BRIDGES:
                    rss = [r["peak_rss_mib"] for r in cu if r["system"] == bridge and r["size"] == size]
                    if rss:
                        peak = max(rss)
                        targets.append((f"{bridge} peak RSS ≤ 64 MiB + in-flight budget (16 MiB) in "
                                        f"catch-up at 1 KB", f"{peak:.1f} MiB", peak <= 80))
        out("")
        for note in notes:
            out(f"- {note}")
        if notes:
            out("")
    live = results["live"]
    if live:
        out("### Live (write → consumer latency; 6:3:1 insert/update/delete mix, 1 KB)")
        out("")
        out("| system | target/s | written/s | p50 ms | p99 ms | max ms | delivered ≤ 1 s after the writes | sustained | RSS MiB |")
        out("|---|---|---|---|---|---|---|---|---|")
        for s, step, rs in by_step(live):
            out(f"| {s} | {step_label(rs)} | {fmt_mmm([r['write_rate'] for r in rs])} | "
                f"{fmt_mmm([r['p50_ms'] for r in rs], 1)} | {fmt_mmm([r['p99_ms'] for r in rs], 1)} | "
                f"{fmt_mmm([r['max_ms'] for r in rs], 1)} | "
                f"{fmt_mmm([100 * r['delivered_within_1s_fraction'] for r in rs], 1)} % | "
                f"{sum(r['sustained'] for r in rs)}/{len(rs)} | {fmt_mmm([r['rss_mib'] for r in rs], 1)} |")
        out("")
        bridge = [r for r in live if r["system"] == "bridge"]
        at2k = [r for r in bridge if r["rate"] == 2000]
        if at2k:
            p99 = mmm([r["p99_ms"] for r in at2k])[1]
            targets.append(("live p99 write → delivery ≤ 20 ms at 2 000/s", f"{p99:.1f} ms", p99 <= 20))
        fixed = [r for r in bridge if not r["ramp"]]
        if fixed:
            worst = min(r["delivered_within_1s_fraction"] for r in fixed)
            targets.append(("live: sustains ≥ 0.95 × the write rate (fixed rates)",
                            f"worst {100 * worst:.1f} % delivered within 1 s", worst >= 0.95))
        best = highest_sustained(bridge)
        if best:
            out(f"Highest rate sustained by the bridge (written rate of the highest step it kept up with): "
                f"{fmt_mmm(list(best.values()))} events/s.")
            out("")
        writer = results.get("writer") or []
        if writer:
            out(f"The writer's maximum (`bench load` asked for 1 000 000 writes/s, alone, 1 KB, "
                f"the same 6:3:1 mix): {fmt_mmm([w['rate'] for w in writer])} writes/s; the "
                f"steps given as a share of it (--ramp, default 20 %, 50 %, 80 %) are taken of "
                f"each run's.")
            out("")
        live_split(live, out)
        live_vs_relay(live, out, targets)
        rss = [r["rss_mib"] for r in bridge]
        if rss:
            targets.append(("bridge peak RSS ≤ 64 MiB + in-flight budget (16 MiB) at steady load",
                            f"{max(rss):.1f} MiB", max(rss) <= 64 + 16))
    outage = results["outage"]
    if outage:
        peak = max(r["rss_mib"] for r in outage)
        out(f"Kafka outage (broker SIGSTOPped for {outage[0]['seconds']} s while ~{outage[0]['written']:,} "
            f"writes arrive): bridge peak RSS {fmt_mmm([r['rss_mib'] for r in outage], 1)} MiB, "
            f"drained {fmt_mmm([r['recovered_s'] for r in outage], 1)} s after the broker resumed; "
            f"at the peak, file-backed (the binary and its libraries) "
            f"{fmt_mmm([r.get('file_mib', float('nan')) for r in outage], 1)} MiB, anonymous "
            f"{fmt_mmm([r.get('anon_mib', float('nan')) for r in outage], 1)} MiB.")
        out("")
        targets.append(("bridge peak RSS ≤ 64 MiB + in-flight budget (16 MiB) during a Kafka outage",
                        f"{peak:.1f} MiB", peak <= outage[0]["budget_mib"]))
    peers_report(results, out, targets)
    copy_report(results, out)
    group_report(results, meta, out, targets)
    eos_report(results, meta, out, targets)
    callgrind_report(results, out, targets)
    if targets and not with_targets:
        out("(smoke run: the targets table is left out; figures of a seconds-long run on a busy "
            "machine are informational only)")
    elif targets:
        out("### Targets")
        out("")
        out("| target | measured | |")
        out("|---|---|---|")
        for name, value, ok in targets:
            out(f"| {name} | {value} | {'met' if ok else '**missed**'} |")
        out("")
    return "\n".join(lines)


def peers_report(results, out, targets):
    """The peers' catch-up (cold and warm) and the ratios bridge ÷ peer within each run:
    events/s, CPU µs per event and peak RSS; live p50/p99 side by side."""
    cu = [r for r in results["catchup"] if r["system"] in PEERS + ["bridge", "bridge-debezium"]]
    peers = [p for p in PEERS if any(r["system"] == p for r in cu)]
    live = [r for r in results["live"] if r["system"] in PEERS + ["bridge"]]
    if not peers and not any(r["system"] in PEERS for r in live):
        return
    out("### The peers: Debezium and the official MongoDB Kafka connector (Kafka Connect)")
    out("")
    for system, info in sorted(results.get("peer_info", {}).items()):
        out(f"- {system}: {info.get('version')} in Kafka Connect {info.get('connect')} "
            f"{info.get('mode')}, MongoDB Java driver {info.get('mongodb_driver')}; beyond "
            f"connect.py's settings: {', '.join(info.get('worker', []) + info.get('connector', []))}")
    out("- each peer drains a collection of its own (same load generator, size and count): "
        "*cold* = a fresh JVM, from spawning the worker to the last record; *warm* = the same "
        "worker, frozen while a second backlog is written, from thawing it to the last record "
        "(its CPU over that drain); RSS = the JVM's VmHWM")
    out("")
    if peers:
        out("| size | system | warm events/s | cold events/s | task RUNNING s | first record s "
            "| warm CPU µs/event | cold CPU µs/event (JVM start included) | peak RSS MiB "
            "| records beyond the backlogs |")
        out("|---|---|---|---|---|---|---|---|---|---|")
        for size in [s for s in SIZES if any(r["size"] == s and r["system"] in PEERS for r in cu)]:
            for p in peers:
                rs = [r for r in cu if r["system"] == p and r["size"] == size]
                if not rs:
                    continue
                col = lambda key, d=1: fmt_mmm([r.get(key, NAN) for r in rs], d)  # noqa: E731
                out(f"| {size} ×{rs[0]['count']:,} | {p} | {col('rate', 0)} | "
                    f"{col('cold_rate', 0)} | {col('cold_running_s')} | {col('cold_first_s')} | "
                    f"{col('cpu_us_per_event')} | {col('cold_cpu_us_per_event')} | "
                    f"{col('peak_rss_mib')} | {sum(r.get('extra_records', 0) for r in rs)} |")
        out("")
        out("Ratios within each run (bridge ÷ peer; the bridge's rate counts its own start, the "
            "peer's warm rate does not):")
        out("")
        out("| size | ratio | events/s (÷ warm) | events/s (÷ cold) | CPU µs per event "
            "| peak RSS |")
        out("|---|---|---|---|---|---|")
        for size in [s for s in SIZES if any(r["size"] == s and r["system"] in PEERS for r in cu)]:
            by = {(r["system"], r["run"]): r for r in cu if r["size"] == size}
            runs = sorted({k for _, k in by})
            for p in peers:
                rate = bridge_over(by, runs, p, "rate")
                cpu = bridge_over(by, runs, p, "cpu_us_per_event")
                if not rate:
                    continue
                out(f"| {size} | bridge ÷ {p} | {fmt_mmm(rate, 2)} | "
                    f"{fmt_mmm(bridge_over(by, runs, p, 'rate', 'cold_rate'), 2)} | {fmt_mmm(cpu, 3)} | "
                    f"{fmt_mmm(bridge_over(by, runs, p, 'peak_rss_mib'), 3)} |")
                form = [bridge_over(by, runs, p, k, bridge="bridge-debezium")
                        for k in ("rate", "cpu_us_per_event", "peak_rss_mib")]
                if p == "debezium" and form[0]:
                    cold = bridge_over(by, runs, p, "rate", "cold_rate", bridge="bridge-debezium")
                    out(f"| {size} | bridge (debezium form) ÷ debezium | {fmt_mmm(form[0], 2)} | "
                        f"{fmt_mmm(cold, 2)} | {fmt_mmm(form[1], 3)} | {fmt_mmm(form[2], 3)} |")
                if p == "debezium" and size == "1KB":
                    per_cpu = 1 / mmm(cpu)[1]
                    targets.append(("bridge ≥ 5 × Debezium's events per CPU-second (catch-up "
                                    "1 KB, warm)", f"{per_cpu:.1f} ×", per_cpu >= 5))
                if p == "debezium":
                    med = mmm(rate)[1]
                    targets.append((f"catch-up {size}: bridge ≥ 2 × Debezium's warm rate",
                                    f"{med:.1f} ×", med >= 2))
        out("")
    at = sorted({r["rate"] for r in live if r["system"] in PEERS})
    for rate in at:
        rows = []
        for s in ["bridge", *PEERS]:
            rs = [r for r in live if r["system"] == s and r["rate"] == rate]
            if rs:
                rows.append(f"{s} p50 {fmt_mmm([r['p50_ms'] for r in rs], 1)} ms, p99 "
                            f"{fmt_mmm([r['p99_ms'] for r in rs], 1)} ms")
        out(f"- live at {rate:,}/s (write → consumer): " + "; ".join(rows))
    if at:
        out("")


def bridge_over(by, runs, peer, key, peer_key=None, bridge="bridge"):
    """[`bridge`'s `key` ÷ the peer's `peer_key` (default `key`)] within each run."""
    peer_key = peer_key or key
    return [by[(bridge, k)][key] / by[(peer, k)][peer_key] for k in runs
            if (bridge, k) in by and (peer, k) in by and by[(peer, k)].get(peer_key)]


def highest_sustained(rows):
    """Per run, the written rate of the highest step kept up with."""
    best = {}
    for r in rows:
        if r["sustained"]:
            best[r["run"]] = max(best.get(r["run"], 0), r["write_rate"])
    return best


def step_of(r):
    """A live step: its rate, or its share of the writer's maximum ("50 %") whatever each
    run's maximum made of it."""
    return r.get("step", r["rate"])


def by_step(rows):
    """(system, step, its rows over the runs) in the order the steps ran."""
    keys = []
    for r in rows:
        if (r["system"], step_of(r)) not in keys:
            keys.append((r["system"], step_of(r)))
    return [(s, step, [r for r in rows if r["system"] == s and step_of(r) == step])
            for s, step in keys]


def step_label(rs):
    """The target/s cell of one step over the runs: the rate, or the share and its rates."""
    step = step_of(rs[0])
    if isinstance(step, str):
        rates = sorted({r["rate"] for r in rs})
        return f"{step} of the writer's max ({', '.join(f'{x:,}' for x in rates)})"
    return f"{step:,}"


def live_split(live, out):
    """Where each system's write → consumer latency goes, split at the record's CreateTime
    (bench/src/live.rs): write → enqueue (the server's commit, the change stream's read wait,
    the system's read and encode) and enqueue → consumer (linger, produce, append, fetch)."""
    rows = with_split(live)
    if not rows:
        return
    out("Where the latency goes, split at each record's Kafka timestamp (`CreateTime`, stamped "
        "by the producer client when the record is enqueued; ms resolution): p50 / p99 of each "
        "part, ms (the parts' p99s need not add up to the whole's).")
    out("")
    out("| system | target/s | write → consumer p50 / p99 | write → enqueue p50 / p99 "
        "| enqueue → consumer p50 / p99 |")
    out("|---|---|---|---|---|")
    for s, step, rs in by_step(rows):
        whole = lambda key: fmt_mmm([r[key] for r in rs], 1)  # noqa: E731
        out(f"| {s} | {step_label(rs)} | {whole('p50_ms')} / {whole('p99_ms')} | "
            f"{split_cells(rs)} |")
    out("")


def live_vs_relay(live, out, targets):
    """The bridge beside limit-relay (the same stream, produced as the server's bytes) in the
    same run: p99 at each rate both ran, and the highest sustained rate."""
    relay = [r for r in live if r["system"] == "limit-relay"]
    if not relay:
        return
    bridge = [r for r in live if r["system"] == "bridge"]
    for rate in sorted({r["rate"] for r in relay if not r["ramp"]}):
        ours = [r["p99_ms"] for r in bridge if r["rate"] == rate]
        theirs = [r["p99_ms"] for r in relay if r["rate"] == rate]
        if ours and theirs:
            a, b = mmm(ours)[1], mmm(theirs)[1]
            targets.append((f"live p99 at {rate:,}/s ≤ limit-relay's + 5 ms",
                            f"{a:.1f} ms vs {b:.1f} ms", a <= b + 5))
    ours, theirs = highest_sustained(bridge), highest_sustained(relay)
    if theirs:
        out(f"Highest rate sustained by limit-relay: {fmt_mmm(list(theirs.values()))} events/s.")
        out("")
    if ours and theirs:
        a, b = mmm(list(ours.values()))[1], mmm(list(theirs.values()))[1]
        targets.append(("highest sustained live rate ≥ 0.9 × limit-relay's",
                        f"{a:,.0f} vs {b:,.0f} events/s ({a / b:.2f} ×)", a >= 0.9 * b))

