"""The copy block: the initial snapshot. A collection filled first (insert_many), then copied
into a fresh topic by each system in turn (the collection is only read, so all share it):
  limit-copy         THE LIMIT: the bridge's snapshot queries (one find per batch, sort/hint
                     {_id: 1}, readConcern majority, bracket by bracket of _id types, through the
                     bridge's own CopyCursor), each document produced as its BSON bytes keyed by
                     {_id}                                                  (bench limit-copy)
  limit-copy-cursor  the same over one cursor for the whole collection: what the server can do
                     unordered                              (bench limit-copy --paging cursor)
  bridge-copy        mongo-kafka-bridge with snapshot = "initial" and a fresh pipeline name (no
                     offsets document); done when the topic holds the documents plus one
                     snapshot_start and one snapshot_end marker per partition
  python-copy        bench/baselines/python/copy_collection.py (pymongo + confluent-kafka)
Rate = documents / (time from starting the process until the topic holds them all, high
watermarks polled every 10 ms); "first record s" is when the first one appeared. At 1 KB,
bridge-copy also copies a collection 10x smaller: its peak RSS (VmHWM) at both sizes shows
whether memory grows with the collection."""

import json
import subprocess
import sys
import time

from .catchup import await_high
from .kafka import Kafka
from .process import HarnessError, log, proc_cpu_s, proc_status_kib, stop_process, thread_cpu_s
from .systems import COUNTS, DB, ROOT, SIZES

COPY_SIZES = ["1KB", "20KB"]
COPY_SYSTEMS = ["limit-copy", "bridge-copy", "python-copy", "limit-copy-cursor"]
# Records a bridge-copy topic holds per partition besides the documents: snapshot_start and
# snapshot_end.
COPY_MARKERS = 2


def measure_copy(h, kafka, system, coll, topic, count):
    """Copies `coll` (`count` documents) into `topic` with `system`; returns its figures,
    or None when bridge-copy is skipped (--bridge-copy-skip-after)."""
    args = h.args
    timeout = 60 + count / 300
    target = count
    if system == "bridge-copy":
        if h.bridge_copy_skip:
            log(f"  SKIP bridge-copy ×{count}: skipped earlier in this run (reason above)")
            return None
        target = count + COPY_MARKERS * args.partitions
        if args.bridge_copy_skip_after:
            timeout = args.bridge_copy_skip_after
        t_start = time.monotonic()
        proc = h.start(system, coll, topic)
    else:
        argv = ["--uri", h.servers.uri, "--bootstrap", h.servers.bootstrap, "--db", DB,
                "--coll", coll, "--topic", topic, "--batch-size", str(args.copy_batch_size),
                "--compression", args.compression]
        if system == "limit-copy":
            cmd = [h.bench_bin, "limit-copy", *argv]
        elif system == "limit-copy-cursor":
            cmd = [h.bench_bin, "limit-copy", "--paging", "cursor", *argv]
        elif system == "python-copy":
            cmd = [sys.executable, str(ROOT / "bench/baselines/python/copy_collection.py"),
                   *argv]
        else:
            raise HarnessError(f"unknown copy system {system}")
        t_start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                stderr=open(h.work / f"{system}-{coll}.log", "a"))
    exits = system != "bridge-copy"
    servers_cpu0 = h.servers.cpu_s()
    try:
        first, now = await_high(h, kafka, system, proc, topic, target, args.partitions,
                                     t_start, timeout, exits)
        servers_cpu = [b - a for a, b in zip(servers_cpu0, h.servers.cpu_s())]
        if not exits:
            cpu = proc_cpu_s(proc.pid)
            threads = thread_cpu_s(proc.pid)
            rss = proc_status_kib(proc.pid, "VmHWM") / 1024
    except HarnessError as e:
        stop_process(proc)
        if system == "bridge-copy" and args.bridge_copy_skip_after:
            # The bridge's last log line says why (e.g. the config rejects `snapshot`).
            lines = (h.work / f"{system}-{coll}.log").read_text(errors="replace").splitlines()
            why = f" (its log: {lines[-1].strip()[:200]})" if lines else ""
            h.bridge_copy_skip = (f"{e}{why}: does the bridge support "
                                     f"snapshot = \"initial\" yet?")
            log(f"  SKIP bridge-copy: {h.bridge_copy_skip}")
            h.results["skipped"].append({"system": system, "reason": h.bridge_copy_skip})
            return None
        raise
    except BaseException:
        stop_process(proc)
        raise
    if exits:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise HarnessError(f"{system} exited with {proc.returncode} (see {h.work})")
        own = json.loads(out.strip().splitlines()[-1])
        cpu, rss, threads = own["cpu_s"], own["peak_rss_kib"] / 1024, {}
    else:
        own = {}
        if stop_process(proc) != 0:  # measured all the same, as in the catch-up block
            log(f"  bridge-copy exited with {proc.returncode} on SIGTERM (see {h.work})")
    t0, h0 = first
    secs = now - t_start
    r = {"rate": count / secs, "secs": secs, "records": target, "first_s": t0 - t_start,
         "tail_rate": (target - h0) / (now - t0) if now > t0 and target > h0 else float("nan"),
         "cpu_us_per_event": cpu * 1e6 / count, "peak_rss_mib": rss,
         "mongo_cpu_us_per_event": servers_cpu[0] * 1e6 / count,
         "kafka_cpu_us_per_event": servers_cpu[1] * 1e6 / count,
         "thread_cpu_us_per_event": {k: v * 1e6 / count for k, v in threads.items()}}
    if "rate" in own:
        r["internal_rate"] = own["rate"]
    if "document_bytes" in own:
        r["document_bytes"] = own["document_bytes"]
    return r

def copy(h, size_name, run):
    """The copy block of one size and run: a fresh collection filled once, then copied by
    each system into its own topic (deleted right after), on a fresh broker. At 1 KB, bridge-copy also
    copies a collection 10x smaller, for its peak RSS at two sizes."""
    args = h.args
    count = args.count or COUNTS[size_name]
    systems = [s for s in args.copy_systems if s in COPY_SYSTEMS]
    rot = run % len(systems)
    systems = systems[rot:] + systems[:rot]
    coll = f"cp_{size_name}_{run}_{int(time.time())}"
    jobs = [(s, coll, count) for s in systems]
    if size_name == "1KB" and "bridge-copy" in systems and count >= 100:
        jobs.append(("bridge-copy", f"{coll}_small", count // 10))
    kafka = Kafka(h.servers.block_broker())
    try:
        loads = {}
        for c, n in sorted({(c, n) for _, c, n in jobs}):
            log(f"copy {size_name} run {run}: writing {n} documents into {DB}.{c}")
            loads[c] = h.bench("load", "--db", DB, "--coll", c, "--size",
                                  str(SIZES[size_name]), "--count", str(n))
        rates = {}
        for s, c, n in jobs:
            topic = f"bench.{c}.{s}"
            kafka.create(topic, args.partitions)
            h.servers.settle()
            try:
                r = measure_copy(h, kafka, s, c, topic, n)
            finally:
                kafka.delete(topic)
            if r is None:
                continue
            r.update(system=s, size=size_name, run=run, count=n, insert_rate=loads[c]["rate"])
            h.results["copy"].append(r)
            if n == count:
                rates[s] = r["rate"]
            log(f"  {s:14} ×{n:<7} {r['rate']:10.0f} docs/s  cpu {r['cpu_us_per_event']:6.1f} us/doc"
                f"  rss {r['peak_rss_mib']:6.1f} MiB  servers' cpu {r['mongo_cpu_us_per_event']:6.1f}"
                f" + {r['kafka_cpu_us_per_event']:6.1f} us/doc")
            if r["thread_cpu_us_per_event"]:
                log("    threads (us/doc): " + ", ".join(
                    f"{k} {v:.1f}" for k, v in sorted(r["thread_cpu_us_per_event"].items(),
                                                      key=lambda kv: -kv[1]) if v > 0))
        doc_bytes = next((r["document_bytes"] for r in h.results["copy"]
                          if r["size"] == size_name and r["run"] == run and "document_bytes" in r),
                         None)
        for r in h.results["copy"]:
            if r["size"] == size_name and r["run"] == run and doc_bytes:
                r["mb_per_s"] = r["rate"] * doc_bytes / 1e6
                r["document_bytes"] = doc_bytes
        side = [f"{s} ÷ limit-copy {rates[s] / rates['limit-copy']:.2f} ×"
                for s in ("bridge-copy", "python-copy", "limit-copy-cursor")
                if s in rates and "limit-copy" in rates]
        if side:
            log(f"  copy {size_name} run {run}: " + ", ".join(side))
    finally:
        kafka.close()

