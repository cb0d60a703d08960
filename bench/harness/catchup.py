"""The catch-up block: a backlog written while each system is stopped (after it saved its start
position), then drained by each system in turn (order rotated between runs, to spread the
machine's noise over the systems).

Delivery is observed the same way for every producing system: the sum of the target topic's
high watermarks, polled every 10 ms. Rate = backlog / (time from starting the process until
the last record is acknowledged), connecting included; limit-read: until the process exits
after reading the last event; limit-produce and limit-fair: timed by the program itself. CPU
(utime + stime) and peak RSS (VmHWM) of each process from /proc. The peers drain a collection
of their own, cold and then warm (peers.py)."""

import json
import subprocess
import time

from . import peers
from .kafka import Kafka
from .process import HarnessError, log, proc_cpu_s, proc_status_kib, stop_process, thread_cpu_s
from .systems import (CATCHUP_SYSTEMS, COUNTS, DB, OPTIONAL_SYSTEMS, PEERS, PRODUCERS,
                      SIZES)


def await_high(h, kafka, system, proc, topic, target, partitions, t_start, timeout, exits):
    """Polls the sum of the topic's high watermarks every 10 ms until it reaches `target`;
    returns (first, now): the time and watermark of the first poll that saw records, and the
    time `target` was seen. `exits`: the process ends by itself once its records are acked
    (a limit program, a copy), so only a non-zero exit, or an exit that leaves the topic
    short for 5 s, is an error; any other system must keep running."""
    first = exited = None
    while True:
        high = kafka.high(topic, partitions)
        now = time.monotonic()
        if high > 0 and first is None:
            first = (now, high)
        if high >= target:
            return first, now
        if now - t_start > timeout:
            raise HarnessError(f"{system}: {high}/{target} delivered after {timeout:.0f}s")
        rc = proc.poll()
        if rc is not None:
            exited = exited or now
            if not exits or rc != 0 or now - exited > 5:
                raise HarnessError(f"{system} exited with {rc} with {high}/{target} records "
                                   f"in the topic (see {h.work})")
        time.sleep(0.01)


def limit_argv(h, system, coll, topic, count):
    """`bench limit …` for a limit-* system; returns (argv, mode)."""
    mode = system.split("-", 1)[1]
    argv = ["limit", "--mode", mode, "--db", DB, "--coll", coll, "--count", str(count),
            "--token", str(h.work / f"token-{coll}"), "--compression", h.args.compression]
    if mode in ("headers", "split"):
        argv.append("--headers" if mode == "headers" else "--split-stage")
        mode = argv[2] = "relay"
    for base in ("fair", "inline"):
        if mode.startswith(base):
            argv += ["--format", "bson" if mode.endswith("-bson") else "json"]
            mode = argv[2] = base
    if mode != "read":
        argv += ["--topic", topic]
    return argv, mode


def measure(h, kafka, system, coll, topic, count, partitions):
    """Drains the backlog with `system` (not a peer); returns its figures."""
    timeout = 60 + count / 300
    limit = system.startswith("limit")
    if limit:
        argv, mode = limit_argv(h, system, coll, topic, count)
        if mode == "read":
            t_start = time.monotonic()
            r = h.bench(*argv, timeout=timeout)
            secs = time.monotonic() - t_start
            return {"rate": count / secs, "secs": secs, "internal_rate": r["rate"],
                    "cpu_us_per_event": r["cpu_us_per_event"],
                    "event_bytes": r["mb_per_s"] * 1e6 / r["rate"],
                    "peak_rss_mib": r["peak_rss_kib"] / 1024}
        cmd = [h.bench_bin, *argv, "--uri", h.servers.uri, "--bootstrap", h.servers.bootstrap]
        t_start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                stderr=open(h.work / f"{system}.log", "a"))
    else:
        t_start = time.monotonic()
        proc = h.start(system, coll, topic)
    cpu = rss = float("nan")
    threads = {}
    servers_cpu0 = h.servers.cpu_s()
    try:
        first, now = await_high(h, kafka, system, proc, topic, count, partitions, t_start,
                                timeout, exits=limit)
        servers_cpu = [b - a for a, b in zip(servers_cpu0, h.servers.cpu_s())]
        if not limit:
            cpu = proc_cpu_s(proc.pid)
            threads = thread_cpu_s(proc.pid)
            rss = proc_status_kib(proc.pid, "VmHWM") / 1024
    finally:
        if limit:
            out, _ = proc.communicate(timeout=120)
        else:
            stop_process(proc)
    own = {}
    if limit:
        if proc.returncode != 0:
            raise HarnessError(f"{system} exited with {proc.returncode}")
        own = json.loads(out.strip().splitlines()[-1])
        cpu, rss = own["cpu_s"], own["peak_rss_kib"] / 1024
    # The rate counts from the process start (connecting included) to the last record acked:
    # a pipeline that reads ahead without bound (the limit programs) would look faster than it
    # is if measured from its first delivery. `tail_rate` is the rate between the first and
    # the last delivery observed, for reference.
    t0, h0 = first
    secs = now - t_start
    r = {"rate": count / secs, "secs": secs,
         "tail_rate": (count - h0) / (now - t0) if now > t0 and count > h0 else float("nan"),
         "cpu_us_per_event": cpu * 1e6 / count, "peak_rss_mib": rss,
         "mongo_cpu_us_per_event": servers_cpu[0] * 1e6 / count,
         "kafka_cpu_us_per_event": servers_cpu[1] * 1e6 / count,
         "thread_cpu_us_per_event": {k: v * 1e6 / count for k, v in threads.items()}}
    if limit:
        r["internal_rate"] = own["rate"]
    if system in ("limit-produce", "limit-fair", "limit-fair-bson"):
        # Timed by the program itself, after it loaded (and, fair, encoded) the events.
        r["rate"] = r["internal_rate"]
    return r


def log_row(r):
    s = r["system"]
    log(f"  {s:14} {r['rate']:10.0f} events/s  cpu {r['cpu_us_per_event']:6.1f} us/event"
        f"  rss {r['peak_rss_mib']:6.1f} MiB  servers' cpu {r.get('mongo_cpu_us_per_event', float('nan')):6.1f}"
        f" + {r.get('kafka_cpu_us_per_event', float('nan')):6.1f} us/event")
    if r.get("thread_cpu_us_per_event"):
        log("    threads (us/event): " + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(r["thread_cpu_us_per_event"].items(),
                                              key=lambda kv: -kv[1])[:8] if v > 0))


def catchup(h, size_name, run):
    """One size of one run: a fresh collection, every system's start position, one backlog,
    then each system drains it (the peers their own collection's, peers.catchup)."""
    args = h.args
    count = args.count or COUNTS[size_name]
    systems = [s for s in args.systems if s in CATCHUP_SYSTEMS + OPTIONAL_SYSTEMS]
    if size_name not in args.peer_sizes:
        systems = [s for s in systems if s not in PEERS]
    if not systems:
        return
    rot = run % len(systems)
    systems = systems[rot:] + systems[:rot]  # spread the machine's noise over the systems
    coll = f"cu_{size_name}_{run}_{int(time.time())}"
    kafka = Kafka(h.servers.block_broker())
    try:
        topics = {s: f"bench.{coll}.{s}" for s in systems}
        for s in systems:
            if s in PRODUCERS:
                kafka.create(topics[s], args.partitions)
            if s not in PEERS:
                h.init_position(s, coll, topics[s])
        if any(s not in PEERS for s in systems):
            log(f"catch-up {size_name} run {run}: writing {count} documents into {DB}.{coll}")
            w = h.bench("load", "--db", DB, "--coll", coll, "--size", str(SIZES[size_name]),
                        "--count", str(count))
        event_bytes = None
        for s in systems:
            h.servers.settle()
            if s in PEERS:
                r = peers.catchup(h, kafka, s, size_name, run, args.peer_count or count)
            else:
                r = measure(h, kafka, s, coll, topics[s], count, args.partitions)
                r.update(count=count, insert_rate=w["rate"])
            if s == "limit-read":
                event_bytes = r["event_bytes"]
            r.update(system=s, size=size_name, run=run)
            h.results["catchup"].append(r)
            log_row(r)
            if s in PRODUCERS:
                kafka.delete(topics[s])
        for r in h.results["catchup"]:
            if r["size"] == size_name and r["run"] == run and event_bytes:
                r["mb_per_s"] = r["rate"] * event_bytes / 1e6
                r["event_bytes"] = event_bytes
    finally:
        kafka.close()
