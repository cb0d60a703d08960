"""The exactly-once block of bench/harness.py (`--eos`, on by default; `--eos-only` runs it
alone, `--no-eos` leaves it out): a pipeline with `delivery = "exactly_once"` measured side by
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

Brokers: noida-db (managed, a fresh one per block) or KAFKA_BOOTSTRAP; skipped on tansu
(MKB_KAFKA_BROKER=tansu), which does not implement read_committed isolation (its
read_committed consumers see aborted records, ../shared/INFRA.md). noida-db 0.2.3 quirk: a read_committed consumer that has read past an ABORTED
transaction skips the later committed records of the same producer. Nothing here kills or
fences a bridge, so no transaction is aborted (each step reports the aborted count, expected 0).
Figures never fail the run.
"""

import os
import re
import shlex
import subprocess
import time
import urllib.request

import harness as hx

SIZES = ["1KB", "20KB"]
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


def add_arguments(ap):
    """The block's options of bench/harness.py."""
    import argparse
    ap.add_argument("--eos", action=argparse.BooleanOptionalAction, default=True,
                    help="the exactly-once block: catch-up and live latency of delivery = "
                         "\"exactly_once\" beside the same pipeline at-least-once (bench/eos.py)")
    ap.add_argument("--eos-only", action="store_true",
                    help="only the exactly-once block (--sizes '' --no-live --no-outage "
                         "--no-copy --no-group)")
    ap.add_argument("--eos-sizes", default=",".join(SIZES))
    ap.add_argument("--eos-intervals", default=",".join(map(str, INTERVALS)),
                    help="commit_interval_ms values of the exactly-once live steps")
    ap.add_argument("--eos-rate", type=int, default=2000, help="events/s of the live steps")
    ap.add_argument("--eos-live-duration", type=float, default=10.0,
                    help="seconds of writing per live step")
    ap.add_argument("--eos-live-alo", action=argparse.BooleanOptionalAction, default=True,
                    help="an at-least-once live step at the same rate, for comparison")


def configure(args, csv):
    """Applies --smoke and --eos-only to the parsed options; validates the block's own."""
    if args.smoke:
        args.eos_sizes, args.eos_intervals, args.eos_rate = "1KB", "250", 500
        args.eos_live_duration, args.eos_live_alo = 2.0, False
    if args.eos_only:
        args.sizes, args.no_live, args.outage, args.copy, args.group = "", True, False, False, False
        args.eos = True
    args.eos_sizes = csv(args.eos_sizes)
    args.eos_intervals = [int(x) for x in csv(args.eos_intervals)]
    for s in args.eos_sizes:
        if s not in hx.SIZES:
            raise ValueError(f"--eos-sizes: one of {', '.join(hx.SIZES)}")
    if any(i <= 0 for i in args.eos_intervals):
        raise ValueError("--eos-intervals: positive milliseconds")


def run(h, run_no):
    """The block of one run: catch-up at each size, then the live steps."""
    args = h.args
    if os.environ.get("MKB_KAFKA_BROKER") == "tansu" and not h.servers.kafka_managed:
        reason = ("the broker is tansu (MKB_KAFKA_BROKER=tansu), which does not implement "
                  "read_committed isolation (aborted records stay visible): run it on noida-db "
                  "or Kafka")
        if not any(r["system"] == "eos" for r in h.results["skipped"]):
            hx.log(f"SKIP exactly-once block: {reason}")
            h.results["skipped"].append({"system": "eos", "reason": reason})
        return
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
    port = hx.free_port()
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
                hx.stop_process(proc)
                raise hx.HarnessError(f"{name} ({delivery}) did not commit its first position "
                                      f"(exit {proc.returncode}; see {proc.log_path})")
            time.sleep(0.05)
    finally:
        client.close()
    if hx.stop_process(proc) != 0:
        raise hx.HarnessError(f"{name} ({delivery}) exited with {proc.returncode} on SIGTERM "
                              f"(see {proc.log_path})")


def scrape(proc):
    """The bridge's /metrics body ('' when it does not answer)."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics",
                                      timeout=2).read().decode()
    except OSError:
        return ""


def transaction_metrics(body):
    """{histogram: {"buckets": [(le, cumulative)], "sum", "count"}, "committed", "aborted"}
    of the bridge's transaction families, summed over pipelines (one here)."""
    names = [f"{n}_{part}" for n in HISTOGRAMS for part in ("bucket", "sum", "count")]
    s = hx.parse_metrics(body, names + [TRANSACTIONS])
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


class CommittedReader:
    """The read_committed view of `topic` (every partition): its last stable offsets, polled
    cheaply while a bridge drains the backlog, and a full read from offset 0 (records and
    distinct keys) once they stopped moving. For exactly-once the last stable offset counts
    one commit marker per transaction besides the records, and nothing of an open one.

    Why not a consumer reading all along: noida-db 0.2.3 ignores fetch.wait.max.ms (an idle
    consumer sends ~10 000 empty fetches a second whatever it is set to, ~20 % of a broker
    core), so a consumer waiting behind an open transaction would take CPU from the bridge
    under test for most of each transaction, at-least-once not (its records arrive all along).
    It also ignores fetch.max.bytes and max.partition.fetch.bytes (a fetch answers everything
    from its offset to the end: 300 records of 20 KB are one 6 MB response to a 1 MB fetch),
    so the full read raises receive.message.max.bytes to 1 GB (the largest backlog here, 20 KB
    × 20 000, is ~430 MB; a topic over 1 GB cannot be read back on noida-db)."""

    def __init__(self, bootstrap, topic, partitions):
        from confluent_kafka import Consumer
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        # librdkafka's ListOffsets carries the consumer's isolation level: read_committed
        # answers the last stable offset (checked on noida-db: 0 while a transaction of 5
        # records is open, 6 once it committed).
        self.watch = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-eos-lso",
                               "isolation.level": "read_committed"})

    def stable(self):
        """The last stable offset of each partition."""
        from confluent_kafka import TopicPartition
        return tuple(self.watch.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5,
                                                      cached=False)[1]
                     for p in range(self.partitions))

    def read(self, expected, idle=1.0, timeout=120.0):
        """(records, distinct keys) a read_committed consumer reads from offset 0, until it
        read `expected` and then nothing for `idle` s, or nothing for 5 × `idle` s after its
        first record (the first response is the whole topic on noida-db: 430 MB at 20 KB took
        ~10 s on a busy machine), or `timeout`."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-eos-read",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "fetch.max.bytes": 100_000_000, "receive.message.max.bytes": 1_000_000_000})
        records, keys = 0, set()
        try:
            c.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            last = start = time.monotonic()
            while time.monotonic() - start < timeout:
                wait = idle if records >= expected else 5 * idle if records else timeout
                if time.monotonic() - last > wait:
                    break
                for m in c.consume(10000, 0.1):
                    if m.error() is None:
                        records += 1
                        keys.add(m.key())
                        last = time.monotonic()
            return records, len(keys)
        finally:
            c.close()

    def close(self):
        self.watch.close()


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
    machine0, self0 = hx.machine_cpu_s(), hx.self_cpu_s()
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
                cpu = hx.proc_cpu_s(proc.pid)
                threads = hx.thread_cpu_s(proc.pid)
                rss = hx.proc_status_kib(proc.pid, "VmHWM") / 1024
                others = (hx.machine_cpu_s() - machine0 - cpu
                          - sum(x for x in servers_cpu if x == x)
                          - (hx.self_cpu_s() - self0)) / (now - t_start)
                txn = (summarize(None, transaction_metrics(scrape(proc)))
                       if system == "bridge-eos" else {})
                records, distinct = reader.read(count)
                if distinct >= count:
                    break
                hx.log(f"  {system}: last stable offset {lso} unchanged for {quiet:.0f} s but "
                       f"{distinct}/{count} records read_committed; polling on")
            if now - t_start > timeout:
                raise hx.HarnessError(f"{system}: last stable offset {lso} for {count} records "
                                      f"after {timeout:.0f} s (see {proc.log_path})")
            if proc.poll() is not None:
                raise hx.HarnessError(f"{system} exited with {proc.returncode} at last stable "
                                      f"offset {lso} for {count} records (see {proc.log_path})")
            time.sleep(0.01)
    finally:
        rc = hx.stop_process(proc)
        reader.close()
    if rc != 0:
        hx.log(f"  {system} exited with {rc} on SIGTERM (see {proc.log_path})")
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
    count = args.count or hx.COUNTS[size_name]
    systems = list(MODES)
    rot = (run_no - 1) % len(systems)
    systems = systems[rot:] + systems[:rot]
    coll = f"eos_{size_name}_{run_no}_{int(time.time())}"
    h.servers.fresh_kafka()
    kafka = hx.Kafka(h.servers.bootstrap)
    try:
        topics = {s: f"bench.{coll}.{s}" for s in systems}
        for s in systems:
            kafka.create(topics[s], args.partitions)
            init_position(h, f"{coll}-{s}", coll, topics[s], MODES[s])
        hx.log(f"exactly-once catch-up {size_name} run {run_no}: writing {count} documents "
               f"into {hx.DB}.{coll}")
        w = h.bench("load", "--db", hx.DB, "--coll", coll, "--size", str(hx.SIZES[size_name]),
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
            hx.log(f"  {s:10} {r['rate']:8.0f} events/s  cpu {r['cpu_us_per_event']:6.1f} us/event"
                   f"  rss {r['peak_rss_mib']:5.1f} MiB  read {r['records_read']} (duplicates"
                   f" {r['duplicates']}, missing {r['missing']}, markers {r['markers']})"
                   f"  other load {r['other_load_cores']:4.2f} cores{txn}")
            kafka.delete(topics[s])
        if len(rates) == 2:
            hx.log(f"  exactly-once ÷ at-least-once at {size_name}: "
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
    h.servers.fresh_kafka()
    kafka = hx.Kafka(h.servers.bootstrap)
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
                rc = hx.stop_process(proc)
            kafka.delete(topic)
            r.update(system=system, delivery=MODES[system], commit_interval_ms=interval,
                     run=run_no, exit_code=rc)
            h.results["eos_live"].append(r)
            txn = ""
            if interval is not None:
                txn = (f"  EndTxn mean {r['endtxn_mean_ms']:.1f} ms (p50 {r['endtxn_p50_ms']:.1f},"
                       f" p99 {r['endtxn_p99_ms']:.1f})  {r['transactions']:.0f} transactions"
                       f" ({r['aborted']:.0f} aborted) of {r['records_per_transaction']:.0f} records")
            hx.log(f"  live {system:10} commit_interval_ms {interval or '-':>4}: wrote "
                   f"{r['write_rate']:6.0f}/s  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms"
                   f"  max {r['max_ms']:7.1f} ms  received {r['received_stamped']}/"
                   f"{r['expected_stamped']}{txn}  other load {r['other_load_cores']:4.2f} cores")
            if rc != 0:
                hx.log(f"  {system} exited with {rc} on SIGTERM (see {proc.log_path})")
    finally:
        kafka.close()


def live_step(h, proc, coll, topic, interval):
    """One live step: waits for the stream, warms the producer up, then `bench live`; the
    bridge's transactions over the step from /metrics before and after."""
    args = h.args
    deadline = time.monotonic() + 30
    while not re.search(r"^mongo_kafka_bridge_stream_open\{[^}]*\} 1$", scrape(proc), re.M):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise hx.HarnessError(f"bridge ({coll}) did not open its stream within 30 s "
                                  f"(exit {proc.poll()}; see {proc.log_path})")
        time.sleep(0.1)
    # Warm-up, not measured (producer id, topic metadata, the first transaction with its
    # AddPartitionsToTxn); the wait lets its last transaction commit before `bench live`
    # starts its consumer at the high watermark.
    h.bench("load", "--db", hx.DB, "--coll", coll, "--size", "1024", "--rate", "200",
            "--duration", "1")
    time.sleep(max(1.0, 2 * (interval or 0) / 1000))
    before = transaction_metrics(scrape(proc))
    cpu0, t0 = hx.proc_cpu_s(proc.pid), time.monotonic()
    machine0, servers0, own0 = hx.machine_cpu_s(), h.servers.cpu_s(), _own_cpu_s()
    r = h.bench("live", "--db", hx.DB, "--coll", coll, "--topic", topic, "--rate",
                str(args.eos_rate), "--duration", str(args.eos_live_duration), "--settle",
                str(args.settle), timeout=args.eos_live_duration + args.settle + 60)
    elapsed = time.monotonic() - t0
    if proc.poll() is not None:
        raise hx.HarnessError(f"bridge ({coll}) exited with {proc.returncode} during the live "
                              f"step (see {proc.log_path})")
    after = transaction_metrics(scrape(proc))
    cpu = hx.proc_cpu_s(proc.pid) - cpu0
    servers = [b - a for a, b in zip(servers0, h.servers.cpu_s())]
    # Other work on the machine meanwhile: busy time minus the bridge's, the servers', this
    # harness's and its finished children's (`bench live`).
    r["other_load_cores"] = (hx.machine_cpu_s() - machine0 - cpu - sum(x for x in servers if x == x)
                             - (_own_cpu_s() - own0)) / elapsed
    r["bridge_cpu_cores"] = cpu / elapsed
    if interval is not None:
        r.update(summarize(before, after))
    return r


def _own_cpu_s():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# ---------------------------------------------------------------- report


def report(results, meta, out, targets):
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
    out(f"Measured on the stand-in servers (MongoDB: {meta['versions']['mongo']}, Kafka: "
        f"{meta['versions']['kafka']}) on {meta['machine']}; both modes side by side in each run.")
    out("")
    fmt = hx.fmt_mmm
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
        for size in [s for s in hx.SIZES if any(r["size"] == s for r in cu)]:
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
                med = hx.mmm(ratios)[1]
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
                    p99 = hx.mmm(valid)[1]
                    targets.append((name, f"{p99:.1f} ms", p99 <= interval + LIVE_MARGIN_MS))
                else:
                    targets.append((name, "no valid run (the writer stayed under 90 % of the "
                                          "rate)", False))
        out("")
        for note in notes:
            out(f"- {note}")
        if notes:
            out("")
    busy = [r for r in cu + lv if r.get("other_load_cores", 0) > 0.2]
    if busy:
        out(f"- the machine was shared: other processes used up to "
            f"{max(r['other_load_cores'] for r in busy):.2f} cores of {os.cpu_count()} during "
            f"{len(busy)} of {len(cu) + len(lv)} measurements (per measurement in results.json, "
            f"`other_load_cores`)")
        out("")
