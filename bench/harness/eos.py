"""The exactly-once block (`--eos`, on by default; `--eos-only` runs it alone, `--no-eos`
leaves it out): a pipeline with `delivery = "exactly_once"` measured side by
side, in one run, on the same servers and the same data, with the same pipeline at-least-once.

  catch-up  per document size (--eos-sizes: 1KB and 20KB; --count, else the catch-up block's
            backlog: 100 000 and 20 000), one fresh collection; both pipelines commit their
            first position (each bridge started until its offsets document has `resumeToken`,
            then SIGTERM), then the backlog is written once (insert_many), then each drains it
            in turn, order rotated between runs:
              bridge      delivery = "at_least_once"
              bridge-eos  delivery = "exactly_once"; every other setting the same and at its
                          default (commit_interval_ms 1000, max_transaction_events 10000)
            Delivery is observed the same way for both: the topic's last stable offset (a
            read_committed ListOffsets), polled every 10 ms, until it reached the backlog and
            stayed put for 2 s; then (untimed, the bridge still running) a read_committed
            consumer reads the topic from offset 0 and must find every record once (records
            and distinct keys: duplicates and missing ones are reported). Not the high
            watermark: for exactly-once it also counts the records of the open transaction;
            the last stable offset still counts one commit marker per transaction, hence the
            read. Rate = backlog / (process start -> the first poll that saw the final last
            stable offset), connecting and opening the stream included. CPU
            (utime + stime) and peak RSS (VmHWM) of the bridge from /proc; the exactly-once
            bridge's transactions from its /metrics. (No consumer reads during the drain:
            see CommittedReader for why.)
  live      `bench live` (the live block's writer and consumer: a 6:3:1 insert/update/delete
            mix of ~1 KB documents at --eos-rate, 2 000/s, for --eos-live-duration s, and a
            librdkafka consumer with fetch.wait.max.ms=10 and librdkafka's default
            isolation.level, read_committed): write -> consumer latency p50/p99/max, with
            delivery = "exactly_once" and [bridge] commit_interval_ms each of --eos-intervals
            (100, 250, 500, 1000), and at-least-once at the same rate for comparison; a fresh
            bridge, collection and topic per step. EndTxn: the bridge's
            ..._transaction_commit_duration_seconds histogram (the commit_transaction call)
            scraped before and after the step: mean (sum / count) and p50 / p99 interpolated
            within its buckets (1 ms doubling, so coarse). On noida-db that consumer sends
            empty fetches without pause in both modes (the broker ignores fetch.wait.max.ms).
  --smoke   1 000s of events instead (the harness's --count), 1KB only, one commit interval
            (250 ms) at 500/s for 2 s, no at-least-once live step: it checks that the block
            runs; only a bridge that exits or does not deliver the backlog fails it.

Brokers: Apache Kafka (the default), noida-db or KAFKA_BOOTSTRAP. noida-db 0.2.3 quirk: a
read_committed consumer that has read past an ABORTED transaction skips the later committed
records of the same producer. Nothing here kills or fences a bridge, so no transaction is
aborted (each step reports the aborted count, expected 0). Figures never fail the run.
The block's tables are in report_blocks.py, its options in cli.py.
"""

import os
import shlex
import subprocess
import time

from . import metrics
from .kafka import CommittedReader, Kafka
from .process import (HarnessError, free_port, log, machine_cpu_s, own_cpu_s, proc_cpu_s,
                      proc_status_kib, self_cpu_s, stop_process, thread_cpu_s)
from .systems import COUNTS, DB, SIZES

EOS_SIZES = ["1KB", "20KB"]
INTERVALS = [100, 250, 500, 1000]
MODES = {"bridge": "at_least_once", "bridge-eos": "exactly_once"}
COMMIT = "mongo_kafka_bridge_transaction_commit_duration_seconds"
DURATION = "mongo_kafka_bridge_transaction_duration_seconds"
RECORDS = "mongo_kafka_bridge_transaction_records"
TRANSACTIONS = "mongo_kafka_bridge_transactions_total"
HISTOGRAMS = (COMMIT, DURATION, RECORDS)
# Target of the catch-up ratio, and the live p99's margin over commit_interval_ms (issue 14).
CATCHUP_TARGET = 0.8
LIVE_MARGIN_MS = 50


def run(h, run_no):
    """The block of one run: catch-up at each size, then the live steps."""
    args = h.args
    h.results.setdefault("eos_catchup", [])
    h.results.setdefault("eos_live", [])
    for size in args.eos_sizes:
        catchup(h, size, run_no)
    if args.eos_intervals or args.eos_live_alo:
        live(h, run_no)


# ---------------------------------------------------------------- the bridge


def start_bridge(h, name, coll, topic, delivery, interval_ms=None, init=False):
    """`mongo-kafka-bridge run` of one pipeline `name` with `delivery`; `interval_ms`:
    [bridge] commit_interval_ms (default: the bridge's). The config is the other blocks'
    (Harness.bridge_config), so both modes differ only in what is set here."""
    port = free_port()
    cfg = h.bridge_config(name, coll, topic, port, "json", f'delivery = "{delivery}"\n')
    if interval_ms is not None:
        cfg.write_text(cfg.read_text() + f"\n[bridge]\ncommit_interval_ms = {interval_ms}\n")
    env = dict(os.environ, RUST_LOG=h.args.bridge_log)
    prefix = [] if init else shlex.split(h.args.bridge_prefix)
    proc = subprocess.Popen([*prefix, h.bridge_bin, "run", "--config", str(cfg)],
                            stdout=open(h.work / f"{name}.log", "a"), stderr=subprocess.STDOUT,
                            env=env)
    proc.metrics_port = port
    proc.log_path = h.work / f"{name}.log"
    return proc


def init_position(h, name, coll, topic, delivery):
    """Runs the pipeline until its first position is committed (`resumeToken` in its offsets
    document), then stops it: the backlog written next is what the measured run drains."""
    from pymongo import MongoClient
    proc = start_bridge(h, name, coll, topic, delivery, init=True)
    client = MongoClient(h.servers.uri)
    try:
        offsets = client["bench_bridge"]["offsets"]
        deadline = time.monotonic() + 60
        while offsets.find_one({"_id": name, "resumeToken": {"$exists": True}}) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                raise HarnessError(f"{name} ({delivery}) did not commit its first position "
                                      f"(exit {proc.returncode}; see {proc.log_path})")
            time.sleep(0.05)
    finally:
        client.close()
    if stop_process(proc) != 0:
        raise HarnessError(f"{name} ({delivery}) exited with {proc.returncode} on SIGTERM "
                              f"(see {proc.log_path})")


def scrape(proc):
    """The bridge's /metrics body ('' when it does not answer)."""
    return metrics.scrape(proc.metrics_port, timeout=2) or ""


def transaction_metrics(body):
    """{histogram: {"buckets": [(le, cumulative)], "sum", "count"}, "committed", "aborted"}
    of the bridge's transaction families, summed over pipelines (one here)."""
    names = [f"{n}_{part}" for n in HISTOGRAMS for part in ("bucket", "sum", "count")]
    s = metrics.parse_metrics(body, names + [TRANSACTIONS])
    out = {}
    for n in HISTOGRAMS:
        buckets = {}
        for labels, v in s[f"{n}_bucket"]:
            le = float("inf") if labels.get("le") == "+Inf" else float(labels.get("le", "nan"))
            buckets[le] = buckets.get(le, 0.0) + v
        out[n] = {"buckets": sorted(buckets.items()),
                  "sum": sum(v for _, v in s[f"{n}_sum"]),
                  "count": sum(v for _, v in s[f"{n}_count"])}
    for outcome in ("committed", "aborted"):
        out[outcome] = sum(v for lb, v in s[TRANSACTIONS] if lb.get("outcome") == outcome)
    return out


def histogram_delta(before, after):
    """`after` − `before` of one histogram (the observations in between)."""
    prior = dict(before["buckets"]) if before else {}
    return {"buckets": [(le, c - prior.get(le, 0.0)) for le, c in after["buckets"]],
            "sum": after["sum"] - (before["sum"] if before else 0.0),
            "count": after["count"] - (before["count"] if before else 0.0)}


def quantile(hist, q):
    """Prometheus' histogram_quantile: linear within the bucket holding rank q × count."""
    count = hist["count"]
    if count <= 0:
        return float("nan")
    rank, lower, below = q * count, 0.0, 0.0
    for le, cumulative in hist["buckets"]:
        if cumulative >= rank:
            if le == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, cumulative
    return lower


def summarize(before, after):
    """The transactions between two scrapes (`before` None: since the start): count, aborted,
    EndTxn mean/p50/p99 ms, transaction duration mean ms, records per transaction."""
    d = {n: histogram_delta(before and before[n], after[n]) for n in HISTOGRAMS}
    mean = lambda n, scale: d[n]["sum"] / d[n]["count"] * scale if d[n]["count"] else float("nan")  # noqa: E731
    return {"transactions": after["committed"] - (before["committed"] if before else 0),
            "aborted": after["aborted"] - (before["aborted"] if before else 0),
            "endtxn_mean_ms": mean(COMMIT, 1e3),
            "endtxn_p50_ms": quantile(d[COMMIT], 0.5) * 1e3,
            "endtxn_p99_ms": quantile(d[COMMIT], 0.99) * 1e3,
            "transaction_mean_ms": mean(DURATION, 1e3),
            "records_per_transaction": mean(RECORDS, 1.0)}


# ---------------------------------------------------------------- catch-up


def measure_catchup(h, system, name, coll, topic, count):
    """Drains the backlog with `system` (a key of MODES); returns its figures.

    The last stable offsets are polled every 10 ms (like the catch-up block's high watermark)
    until they reach the backlog and then stay put for `quiet` s (no write happens meanwhile,
    so their final value is every record and marker); then, with the bridge still running,
    a read_committed read from offset 0 (untimed) must find every record, else polling goes
    on. The drain ended at the first poll that saw those final offsets."""
    args = h.args
    timeout = 60 + count / 300
    quiet = 2.0  # > the commit interval (1 s, the default) plus an EndTxn
    reader = CommittedReader(h.servers.bootstrap, topic, args.partitions)
    machine0, self0 = machine_cpu_s(), self_cpu_s()
    servers_cpu0 = h.servers.cpu_s()
    t_start = time.monotonic()
    proc = start_bridge(h, name, coll, topic, MODES[system])
    series = []  # (time, sum of the last stable offsets) at each change
    try:
        while True:
            lso = sum(reader.stable())
            now = time.monotonic()
            if not series or lso != series[-1][1]:
                series.append((now, lso))
            if lso >= count and now - series[-1][0] >= quiet:
                # Figures of the drain (the `quiet` wait adds an idle bridge and servers).
                elapsed = series[-1][0] - t_start
                servers_cpu = [b - a for a, b in zip(servers_cpu0, h.servers.cpu_s())]
                cpu = proc_cpu_s(proc.pid)
                threads = thread_cpu_s(proc.pid)
                rss = proc_status_kib(proc.pid, "VmHWM") / 1024
                others = (machine_cpu_s() - machine0 - cpu
                          - sum(x for x in servers_cpu if x == x)
                          - (self_cpu_s() - self0)) / (now - t_start)
                txn = (summarize(None, transaction_metrics(scrape(proc)))
                       if system == "bridge-eos" else {})
                records, distinct = reader.read(count)
                if distinct >= count:
                    break
                log(f"  {system}: last stable offset {lso} unchanged for {quiet:.0f} s but "
                       f"{distinct}/{count} records read_committed; polling on")
            if now - t_start > timeout:
                raise HarnessError(f"{system}: last stable offset {lso} for {count} records "
                                      f"after {timeout:.0f} s (see {proc.log_path})")
            if proc.poll() is not None:
                raise HarnessError(f"{system} exited with {proc.returncode} at last stable "
                                      f"offset {lso} for {count} records (see {proc.log_path})")
            time.sleep(0.01)
    finally:
        rc = stop_process(proc)
        reader.close()
    if rc != 0:
        log(f"  {system} exited with {rc} on SIGTERM (see {proc.log_path})")
    t0 = next(t for t, lso in series if lso > 0)
    n0 = next(lso for t, lso in series if lso > 0)
    r = {"rate": count / elapsed, "secs": elapsed, "first_s": t0 - t_start,
         "tail_rate": (count - n0) / (elapsed - (t0 - t_start)) if count > n0 else float("nan"),
         "records_read": records, "duplicates": records - distinct,
         "missing": count - distinct, "markers": series[-1][1] - records,
         "cpu_us_per_event": cpu * 1e6 / count, "peak_rss_mib": rss,
         "mongo_cpu_us_per_event": servers_cpu[0] * 1e6 / count,
         "kafka_cpu_us_per_event": servers_cpu[1] * 1e6 / count,
         "thread_cpu_us_per_event": {k: v * 1e6 / count for k, v in threads.items()},
         "other_load_cores": others, "exit_code": rc, **txn}
    return r


def catchup(h, size_name, run_no):
    """One size of one run: a fresh collection and broker, both pipelines' first positions, one
    backlog, then each mode drains it into its own topic (deleted afterwards)."""
    args = h.args
    count = args.count or COUNTS[size_name]
    systems = list(MODES)
    rot = (run_no - 1) % len(systems)
    systems = systems[rot:] + systems[:rot]
    coll = f"eos_{size_name}_{run_no}_{int(time.time())}"
    kafka = Kafka(h.servers.block_broker())
    try:
        topics = {s: f"bench.{coll}.{s}" for s in systems}
        for s in systems:
            kafka.create(topics[s], args.partitions)
            init_position(h, f"{coll}-{s}", coll, topics[s], MODES[s])
        log(f"exactly-once catch-up {size_name} run {run_no}: writing {count} documents "
               f"into {DB}.{coll}")
        w = h.bench("load", "--db", DB, "--coll", coll, "--size", str(SIZES[size_name]),
                    "--count", str(count))
        rates = {}
        for s in systems:
            h.servers.settle()
            r = measure_catchup(h, s, f"{coll}-{s}", coll, topics[s], count)
            r.update(system=s, delivery=MODES[s], size=size_name, run=run_no, count=count,
                     insert_rate=w["rate"])
            h.results["eos_catchup"].append(r)
            rates[s] = r["rate"]
            txn = (f"  {r['transactions']:.0f} transactions of {r['records_per_transaction']:.0f}"
                   f" records, EndTxn mean {r['endtxn_mean_ms']:.1f} ms"
                   if s == "bridge-eos" else "")
            log(f"  {s:10} {r['rate']:8.0f} events/s  cpu {r['cpu_us_per_event']:6.1f} us/event"
                   f"  rss {r['peak_rss_mib']:5.1f} MiB  read {r['records_read']} (duplicates"
                   f" {r['duplicates']}, missing {r['missing']}, markers {r['markers']})"
                   f"  other load {r['other_load_cores']:4.2f} cores{txn}")
            kafka.delete(topics[s])
        if len(rates) == 2:
            log(f"  exactly-once ÷ at-least-once at {size_name}: "
                   f"{rates['bridge-eos'] / rates['bridge']:.2f} ×")
    finally:
        kafka.close()


# ---------------------------------------------------------------- live


def live(h, run_no):
    """The live steps of one run on a fresh broker: at-least-once, then exactly-once at each
    commit interval (order rotated between runs); one bridge, collection and topic each."""
    args = h.args
    steps = [("bridge", None)] if args.eos_live_alo else []
    steps += [("bridge-eos", i) for i in args.eos_intervals]
    rot = (run_no - 1) % len(steps)
    steps = steps[rot:] + steps[:rot]
    kafka = Kafka(h.servers.block_broker())
    try:
        for system, interval in steps:
            tag = "alo" if interval is None else f"eos{interval}"
            coll = f"eoslive_{tag}_{run_no}_{int(time.time())}"
            topic = f"bench.{coll}"
            kafka.create(topic, args.partitions)
            proc = start_bridge(h, coll, coll, topic, MODES[system], interval)
            try:
                r = live_step(h, proc, coll, topic, interval)
            finally:
                rc = stop_process(proc)
            kafka.delete(topic)
            r.update(system=system, delivery=MODES[system], commit_interval_ms=interval,
                     run=run_no, exit_code=rc)
            h.results["eos_live"].append(r)
            txn = ""
            if interval is not None:
                txn = (f"  EndTxn mean {r['endtxn_mean_ms']:.1f} ms (p50 {r['endtxn_p50_ms']:.1f},"
                       f" p99 {r['endtxn_p99_ms']:.1f})  {r['transactions']:.0f} transactions"
                       f" ({r['aborted']:.0f} aborted) of {r['records_per_transaction']:.0f} records")
            log(f"  live {system:10} commit_interval_ms {interval or '-':>4}: wrote "
                   f"{r['write_rate']:6.0f}/s  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms"
                   f"  max {r['max_ms']:7.1f} ms  received {r['received_stamped']}/"
                   f"{r['expected_stamped']}{txn}  other load {r['other_load_cores']:4.2f} cores")
            if rc != 0:
                log(f"  {system} exited with {rc} on SIGTERM (see {proc.log_path})")
    finally:
        kafka.close()


def live_step(h, proc, coll, topic, interval):
    """One live step: waits for the stream, warms the producer up, then `bench live`; the
    bridge's transactions over the step from /metrics before and after."""
    args = h.args
    deadline = time.monotonic() + 30
    while not metrics.STREAM_OPEN.search(scrape(proc)):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise HarnessError(f"bridge ({coll}) did not open its stream within 30 s "
                                  f"(exit {proc.poll()}; see {proc.log_path})")
        time.sleep(0.1)
    # Warm-up, not measured (producer id, topic metadata, the first transaction with its
    # AddPartitionsToTxn); the wait lets its last transaction commit before `bench live`
    # starts its consumer at the high watermark.
    h.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate", "200",
            "--duration", "1")
    time.sleep(max(1.0, 2 * (interval or 0) / 1000))
    before = transaction_metrics(scrape(proc))
    cpu0, t0 = proc_cpu_s(proc.pid), time.monotonic()
    machine0, servers0, own0 = machine_cpu_s(), h.servers.cpu_s(), own_cpu_s()
    r = h.bench("live", "--db", DB, "--coll", coll, "--topic", topic, "--rate",
                str(args.eos_rate), "--duration", str(args.eos_live_duration), "--settle",
                str(args.settle), timeout=args.eos_live_duration + args.settle + 60)
    elapsed = time.monotonic() - t0
    if proc.poll() is not None:
        raise HarnessError(f"bridge ({coll}) exited with {proc.returncode} during the live "
                              f"step (see {proc.log_path})")
    after = transaction_metrics(scrape(proc))
    cpu = proc_cpu_s(proc.pid) - cpu0
    servers = [b - a for a, b in zip(servers0, h.servers.cpu_s())]
    # Other work on the machine meanwhile: busy time minus the bridge's, the servers', this
    # harness's and its finished children's (`bench live`).
    r["other_load_cores"] = (machine_cpu_s() - machine0 - cpu - sum(x for x in servers if x == x)
                             - (own_cpu_s() - own0)) / elapsed
    r["bridge_cpu_cores"] = cpu / elapsed
    if interval is not None:
        r.update(summarize(before, after))
    return r
