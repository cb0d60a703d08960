"""The Kafka-native peers, measured the way the bridge is: `debezium` (Debezium's MongoDB
connector 3.6.3) and `mongo-kafka` (the official MongoDB Kafka source connector 2.0.1), each
in a Kafka Connect 4.3 standalone worker of its own (one JVM), run by bench/peers/connect.py.

Settings: connect.py's (JSON converter without schemas, offset.flush.interval.ms 1000,
producer acks=all and enable.idempotence=true, snapshot never), plus, to match the bridge:
producer max.in.flight.requests.per.connection 5 (Connect's default for source tasks is 1)
and linger.ms 5, the run's compression, and no update lookup (the bridge's default
full_document: Debezium capture.mode=change_streams, mongo-kafka
change.stream.full.document=default; both look the document up by default).

  catch-up  on a collection of its own, with the same load generator, size and count as the
            other systems' backlog: the worker is started with nothing to read, markers are
            written until one reaches its topic (RUNNING comes before the change stream is
            open), and it is stopped (Connect commits its offsets on stop). A backlog is
            written; the worker is started again, a cold JVM: cold rate = backlog ÷ (spawning
            connect.py start → last record in the topic), with the time until the task was
            RUNNING and until the first record. Then the worker is frozen (SIGSTOP) while a
            second backlog is written, and thawed: warm rate = backlog ÷ (SIGCONT → last
            record), its CPU (utime + stime of the JVM) over that drain; peak RSS (VmHWM) of
            the JVM. Records beyond the backlogs (replays) are counted 1.5 s later.
  live      a worker on a fresh collection, warm-up writes until its topic shows records,
            then --peer-live-warmup s at the first live rate (untimed: the JIT's turn) and
            until its topic stays put for 2 s (it caught up), then the live block's steps
            (`bench live`) at --baseline-rates."""

import json
import math
import os
import signal
import subprocess
import sys
import time

from .process import (HarnessError, log, proc_cpu_s, proc_status_kib, thread_cpu_s,
                      thread_delta)
from .systems import DB, ROOT, SIZES

CONNECT = ROOT / "bench" / "peers" / "connect.py"
PREFIX = {"debezium": "dbz", "mongo-kafka": "mk"}
CONNECTOR = {"debezium": ["capture.mode=change_streams"],
             "mongo-kafka": ["change.stream.full.document=default"]}
WORKER = ["producer.max.in.flight.requests.per.connection=5", "producer.linger.ms=5"]


def prepare(h):
    """`connect.py prepare` (first use: ~250 MiB into .cache/peers); None when ready, else
    why the peers cannot run here (no java, mvn or network)."""
    t0 = time.monotonic()
    with open(h.work / "peers-prepare.log", "a") as f:
        rc = subprocess.call([sys.executable, str(CONNECT), "prepare"], stdout=f,
                             stderr=subprocess.STDOUT, timeout=1800)
    if rc != 0:
        lines = (h.work / "peers-prepare.log").read_text(errors="replace").strip().splitlines()
        return f"bench/peers/connect.py prepare failed: {lines[-1] if lines else rc}"
    log(f"peers prepared ({time.monotonic() - t0:.1f} s; see {h.work}/peers-prepare.log)")
    return None


class Peer:
    """One peer's Connect worker on one collection of the bench database, started and stopped
    through connect.py; `pid` is the worker JVM's once it has started."""

    def __init__(self, h, system, coll):
        self.h, self.system, self.coll = h, system, coll
        self.workdir = h.work / f"peer-{coll}"
        self.topic = f"{PREFIX[system]}.{DB}.{coll}"
        self.pid, self.info, self.frozen = None, {}, False

    def settings(self):
        """The connector settings given beyond connect.py's: CONNECTOR's and --peer-setting's."""
        return CONNECTOR[self.system] + [x.split(":", 1)[1] for x in self.h.args.peer_setting
                                         if x.split(":", 1)[0] == self.system]

    def spawn(self):
        """`connect.py start …` in the background (it returns once the task is RUNNING)."""
        cmd = [sys.executable, str(CONNECT), "start", self.system,
               "--mongodb-uri", self.h.servers.uri, "--bootstrap", self.h.servers.bootstrap,
               "--collection", f"{DB}.{self.coll}", "--topic-prefix", PREFIX[self.system],
               "--workdir", str(self.workdir), "--snapshot", "never", "--timeout", "180"]
        for kv in [*WORKER, f"producer.compression.type={self.h.args.compression}"]:
            cmd += ["--worker", kv]
        for kv in self.settings():
            cmd += ["--extra", kv]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                stderr=open(self.h.work / f"peer-{self.coll}.log", "a"))

    def started(self, proc):
        """Reads the JSON of a finished `connect.py start`; raises when it failed."""
        out, _ = proc.communicate(timeout=240)
        if proc.returncode != 0:
            raise HarnessError(f"{self.system}: connect.py start exited with {proc.returncode} "
                               f"(see {self.h.work}/peer-{self.coll}.log and {self.workdir})")
        self.info = json.loads(out.strip().splitlines()[-1])
        self.pid = self.info["pid"]
        self.h.results.setdefault("peer_info", {})[self.system] = {
            **{k: self.info.get(k) for k in ("version", "connect", "mongodb_driver", "plugin", "mode")},
            "worker": WORKER + [f"producer.compression.type={self.h.args.compression}"],
            "connector": self.settings()}
        return self.info

    def start(self):
        return self.started(self.spawn())

    def alive(self):
        """The worker JVM still exists (frozen counts; it is not our child: no zombie)."""
        return self.pid is not None and not math.isnan(proc_cpu_s(self.pid))

    def freeze(self, frozen):
        os.kill(self.pid, signal.SIGSTOP if frozen else signal.SIGCONT)
        self.frozen = frozen

    def stop(self):
        """Stops the worker (connect.py stop: SIGTERM, 30 s, SIGKILL); a frozen one is thawed
        first, or it could not stop."""
        if not (self.workdir / "connect.pid").exists():
            return {}
        if self.frozen:
            self.freeze(False)
        out = subprocess.run([sys.executable, str(CONNECT), "stop", "--workdir", str(self.workdir)],
                             capture_output=True, text=True, timeout=90)
        self.pid = None
        lines = out.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}


def mark_until_seen(peer, kafka, partitions, timeout=120):
    """Writes a marker document every 0.5 s until one reaches the peer's topic, then waits
    until the topic stays put for 1.5 s (every marker written has arrived)."""
    from pymongo import MongoClient
    client = MongoClient(peer.h.servers.uri)
    try:
        coll = client[DB][peer.coll]
        deadline, i = time.monotonic() + timeout, 0
        while kafka.high(peer.topic, partitions) == 0:
            if time.monotonic() > deadline or not peer.alive():
                raise HarnessError(f"{peer.system}: no marker reached {peer.topic} within "
                                   f"{timeout} s (see {peer.workdir})")
            coll.insert_one({"bench_marker": i})
            i += 1
            time.sleep(0.5)
    finally:
        client.close()
    return quiet(kafka, peer.topic, partitions, 1.5, timeout)


def quiet(kafka, topic, partitions, secs, timeout):
    """Waits until the topic's high watermark stays put for `secs` (at most `timeout` s: a
    peer still draining what was written); returns it."""
    high, still, deadline = kafka.high(topic, partitions), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - still < secs and time.monotonic() < deadline:
        time.sleep(0.1)
        now = kafka.high(topic, partitions)
        if now != high:
            high, still = now, time.monotonic()
    return high


def drain(peer, kafka, partitions, target, timeout, proc=None):
    """Polls the topic every 10 ms until it holds `target` records; `proc`: a `connect.py
    start` still running (a cold start). Returns (first record time, done time, RUNNING time)."""
    try:
        return _drain(peer, kafka, partitions, target, timeout, proc)
    except BaseException:
        if proc is not None and proc.poll() is None:
            # connect.py stops the JVM it is starting on SIGINT (not on SIGTERM).
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        raise


def _drain(peer, kafka, partitions, target, timeout, proc):
    first = running = None
    t_start = time.monotonic()
    while True:
        high = kafka.high(peer.topic, partitions)
        now = time.monotonic()
        if first is None and high > target[0]:
            first = now
        if high >= target[1]:
            break
        if proc is not None and proc.poll() is not None:
            peer.started(proc)
            running, proc = now, None
        if now - t_start > timeout:
            raise HarnessError(f"{peer.system}: {high - target[0]}/{target[1] - target[0]} "
                               f"records after {timeout:.0f} s (see {peer.workdir})")
        if proc is None and not peer.alive():
            raise HarnessError(f"{peer.system}: the worker exited (see {peer.workdir})")
        time.sleep(0.01)
    if proc is not None:
        peer.started(proc)
        running = time.monotonic()
    return first, now, running


def catchup(h, kafka, system, size_name, run, count):
    """The peer's cold and warm drains of `count` documents of `size_name`; its figures (the
    warm ones as `rate`, `cpu_us_per_event`, the cold ones as `cold_*`)."""
    partitions = h.args.partitions
    peer = Peer(h, system, f"pc_{size_name}_{run}_{PREFIX[system]}_{int(time.time())}")
    timeout = 120 + count / 100
    kafka.create(peer.topic, partitions)
    try:
        peer.start()
        mark_until_seen(peer, kafka, partitions)
        peer.stop()
        base = kafka.high(peer.topic, partitions)
        load = ["load", "--db", DB, "--coll", peer.coll, "--size", str(SIZES[size_name]),
                "--count", str(count)]
        log(f"  {system}: writing {count} documents into {DB}.{peer.coll}")
        w = h.bench(*load)
        h.servers.settle()
        servers0, t_start = h.servers.cpu_s(), time.monotonic()
        first, done, running = drain(peer, kafka, partitions, (base, base + count), timeout,
                                     peer.spawn())
        servers = [b - a for a, b in zip(servers0, h.servers.cpu_s())]
        cpu = proc_cpu_s(peer.pid)
        cold = {"cold_rate": count / (done - t_start), "cold_secs": done - t_start,
                "cold_running_s": running - t_start, "cold_first_s": first - t_start,
                "cold_cpu_us_per_event": cpu * 1e6 / count,
                "cold_drain_cpu_us_per_event": (cpu - peer.info.get("cpu_s", 0)) * 1e6 / count,
                "cold_mongo_cpu_us_per_event": servers[0] * 1e6 / count,
                "cold_kafka_cpu_us_per_event": servers[1] * 1e6 / count}
        log(f"  {system:14} cold: RUNNING after {cold['cold_running_s']:.1f} s, first record "
            f"{cold['cold_first_s']:.1f} s, {cold['cold_rate']:.0f} events/s from start to the "
            f"last record, cpu {cold['cold_cpu_us_per_event']:.0f} us/event (JVM start included)")
        time.sleep(1.0)  # the worker goes idle (and commits its offsets)
        peer.freeze(True)
        log(f"  {system}: frozen; writing {count} more documents")
        h.bench(*load)
        h.servers.settle()
        cpu0, threads0 = proc_cpu_s(peer.pid), thread_cpu_s(peer.pid)
        servers0, t_start = h.servers.cpu_s(), time.monotonic()
        peer.freeze(False)
        first, done, _ = drain(peer, kafka, partitions, (base + count, base + 2 * count), timeout)
        servers = [b - a for a, b in zip(servers0, h.servers.cpu_s())]
        cpu = proc_cpu_s(peer.pid) - cpu0
        threads = thread_delta(threads0, thread_cpu_s(peer.pid))
        rss = proc_status_kib(peer.pid, "VmHWM") / 1024
        secs = done - t_start
        time.sleep(1.5)
        extra = kafka.high(peer.topic, partitions) - base - 2 * count
    finally:
        stopped = peer.stop()
        kafka.delete(peer.topic)
    return {"rate": count / secs, "secs": secs, "count": count, "insert_rate": w["rate"],
            "tail_rate": count / (done - first) if done > first else float("nan"),
            "first_s": first - t_start, "cpu_us_per_event": cpu * 1e6 / count,
            "peak_rss_mib": rss, "mongo_cpu_us_per_event": servers[0] * 1e6 / count,
            "kafka_cpu_us_per_event": servers[1] * 1e6 / count,
            "thread_cpu_us_per_event": {k: v * 1e6 / count for k, v in threads.items()},
            "extra_records": extra, "stop_s": stopped.get("stop_s"), **cold}


def live_start(h, kafka, system, coll):
    """A peer's worker on `coll` with its topic, started and streaming (warm-up writes until
    the topic shows records), then --peer-live-warmup s at the first live rate (untimed)."""
    peer = Peer(h, system, coll)
    kafka.create(peer.topic, h.args.partitions)
    try:
        peer.start()
        deadline = time.monotonic() + 120
        while kafka.high(peer.topic, h.args.partitions) == 0:
            if time.monotonic() > deadline or not peer.alive():
                raise HarnessError(f"{system}: nothing reached {peer.topic} within 120 s of "
                                   f"writes (see {peer.workdir})")
            h.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate", "200",
                    "--duration", "1")
        rate = (h.args.baseline_rates or [2000])[0]
        if h.args.peer_live_warmup > 0:
            h.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate", str(rate),
                    "--duration", str(h.args.peer_live_warmup))
        # A peer slower than the warm-up's rate first drains what it fell behind by.
        quiet(kafka, peer.topic, h.args.partitions, 2.0, 300)
    except BaseException:
        peer.stop()
        kafka.delete(peer.topic)
        raise
    return peer
