#!/usr/bin/env python3
"""The benchmark harness behind scripts/bench (run it through that script).

Measures, side by side in one run on the same servers and the same data:
  catch-up  a backlog written while each system is stopped (after it saved its start position),
            then drained: events/s and MB/s per document size, for
              limit-read     raw change-stream read, events dropped        (bench limit --mode read)
              limit-produce  raw librdkafka produce of the same events     (bench limit --mode produce)
              limit-relay    read + produce, no bridge logic: THE LIMIT    (bench limit --mode relay)
              limit-headers  the same with headers shaped like the bridge's (--headers): what
                             the headers alone cost the broker and librdkafka
              limit-fair     THE FAIR LIMIT: the same stream (the bridge's stages) producing, per
                             event, exactly the bridge's records (key, value, headers), encoded by
                             the bridge's own encoder before the timed run (--mode fair); timed
                             from the second open to the last ack
              limit-fair-bson  the same with format = key_format = "bson"
              bridge         mongo-kafka-bridge run
              bridge-bson    mongo-kafka-bridge run with format = key_format = "bson"
              node           bench/baselines/node/bridge.js (mongodb + kafkajs)
              python         bench/baselines/python/bridge.py (pymongo + confluent-kafka)
            Delivery is observed the same way for every producing system: the sum of the target
            topic's high watermarks, polled every 10 ms. Rate = backlog / (time from starting the
            process until the last record is acknowledged), connecting included; limit-read:
            until the process exits after reading the last event.
            CPU (utime+stime) and peak RSS (VmHWM) of each process from /proc.
  live      the bridge (and the baselines at --baseline-rates) running while `bench live` writes
            a 6:3:1 insert/update/delete mix at fixed rates and consumes the topic: write ->
            consumer latency p50/p99/max, and whether the rate was sustained; then the bridge's
            RSS during a Kafka outage (broker SIGSTOPped while writing).
Every figure is min/median/max over --runs runs. Figures never fail the run: the exit code is 0
unless the harness itself (or a system under test) broke.
"""

import argparse
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "scripts" / "services"
SECANTUS_RS = ROOT / ".cache" / "secantus-rs" / "bin" / "secantusd-rs"
SIZES = {"1KB": 1024, "20KB": 20 * 1024, "250KB": 250 * 1024}
COUNTS = {"1KB": 100_000, "20KB": 20_000, "250KB": 2_000}
CATCHUP_SYSTEMS = ["limit-read", "limit-produce", "limit-relay", "limit-headers", "limit-fair",
                   "limit-fair-bson", "bridge", "bridge-bson", "node", "python"]
BRIDGES = {"bridge": "json", "bridge-bson": "bson"}
# Measured only when named in --systems: limit-relay with the bridge's $changeStreamSplitLargeEvent.
OPTIONAL_SYSTEMS = ["limit-split"]
PRODUCERS = {"limit-produce", "limit-relay", "limit-headers", "limit-split", "limit-fair",
             "limit-fair-bson", "bridge", "bridge-bson", "node", "python"}
DB = "bench"


def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


class HarnessError(Exception):
    pass


# ---------------------------------------------------------------- processes


def proc_cpu_s(pid):
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def thread_cpu_s(pid):
    """CPU seconds by thread name (threads of one name summed), from /proc/<pid>/task."""
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            rest = stat.rsplit(")", 1)[1].split()
            cpu = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
        out[name] = out.get(name, 0.0) + cpu
    return out


def proc_status_kib(pid, field):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def stop_process(proc, timeout=30):
    """SIGTERM, bounded wait, SIGKILL. Only ever for processes this harness started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- servers


class Servers:
    """MongoDB (SecantusDB's Rust server, else its Python one, else MONGODB_URI) and Kafka
    (a fresh noida-db per measurement block, else KAFKA_BOOTSTRAP, never restarted)."""

    def __init__(self, work, oplog_cap):
        self.work = work
        self.mongo_proc = None
        self.mongo_services = False
        self.kafka_managed = False
        self.kafka_pid = None
        self.versions = {}
        self.uri = os.environ.get("MONGODB_URI")
        self.bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
        env = dict(os.environ, MKB_SERVICES_DIR=str(work / "services"))
        self.services_env = env
        if self.uri:
            self.versions["mongo"] = f"external ({self.uri.split('@')[-1]})"
        elif SECANTUS_RS.exists():
            port = free_port()
            data = work / "mongo-data"
            data.mkdir(parents=True, exist_ok=True)
            (work / "secantusd.toml").write_text("")
            cmd = [str(SECANTUS_RS), "--config", str(work / "secantusd.toml"), "--host", "127.0.0.1",
                   "--port", str(port), "--storage-path", str(data), "--cache-size", "512M",
                   "--log-file-max", "16MB", "--oplog-max-entries", str(oplog_cap)]
            self.mongo_proc = subprocess.Popen(cmd, stdout=open(work / "mongo.log", "w"),
                                               stderr=subprocess.STDOUT)
            self.uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
            version = subprocess.run([str(SECANTUS_RS), "--version"], capture_output=True, text=True)
            self.versions["mongo"] = "SecantusDB Rust server " + version.stdout.split()[1]
            wait_port(port, 30)
        else:
            log("secantusd-rs not built (.cache/secantus-rs); falling back to SecantusDB's Python server")
            out = self._services("up", "--only", "mongo", "--fresh", "--plain",
                                 "--oplog-max-entries", str(oplog_cap))
            self.uri = out["MONGODB_URI"]
            self.mongo_services = True
            self.versions["mongo"] = "SecantusDB Python server 0.7.0b3"
        if self.bootstrap:
            self.versions["kafka"] = f"external ({self.bootstrap})"
        else:
            self.kafka_managed = True
            self.versions["kafka"] = "noida-db 0.2.3"

    def _services(self, *args):
        out = subprocess.run([str(SERVICES), *args, "--name", "bench"], env=self.services_env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise HarnessError(f"scripts/services {' '.join(args)} failed: {out.stderr.strip()}")
        return dict(line.split("=", 1) for line in out.stdout.split() if "=" in line)

    def fresh_kafka(self):
        """A fresh broker (records are in memory: one per block keeps the total bounded)."""
        if not self.kafka_managed:
            return
        self.stop_kafka()
        out = self._services("up", "--only", "kafka", "--fresh", "--plain")
        self.bootstrap = out["KAFKA_BOOTSTRAP"]
        self.kafka_pid = int(Path(out["MKB_KAFKA_PIDFILE"]).read_text().split()[0])

    def stop_kafka(self):
        if self.kafka_pid:
            # noida-db writes every record to disk on SIGTERM; its data is throwaway here.
            try:
                os.kill(self.kafka_pid, signal.SIGCONT)
                os.kill(self.kafka_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.kafka_pid = None
            self._services("down", "--only", "kafka", "--wipe")

    def cpu_s(self):
        """CPU seconds (utime + stime) used so far by the MongoDB and the Kafka server this
        harness started (NaN for external or Python-managed servers)."""
        mongo = proc_cpu_s(self.mongo_proc.pid) if self.mongo_proc else float("nan")
        kafka = proc_cpu_s(self.kafka_pid) if self.kafka_pid else float("nan")
        return mongo, kafka

    def settle(self, idle_share=0.05, window=0.25, timeout=20.0):
        """Waits until both servers this harness started are idle (each under `idle_share` of a
        core over `window` seconds), at most `timeout` seconds: a measurement must not pay for
        the work the previous one left behind (noida-db deleting the last topic, SecantusDB
        persisting the backlog)."""
        deadline = time.monotonic() + timeout
        before = self.cpu_s()
        while time.monotonic() < deadline:
            time.sleep(window)
            after = self.cpu_s()
            busy = [b - a for a, b in zip(before, after) if b == b and a == a]
            if all(x < idle_share * window for x in busy):
                return
            before = after
        log(f"servers still busy after {timeout:.0f} s; measuring anyway")

    def freeze_kafka(self, frozen):
        if self.kafka_pid:
            os.kill(self.kafka_pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def close(self):
        self.stop_kafka()
        if self.mongo_proc:
            stop_process(self.mongo_proc, 20)
        if self.mongo_services:
            self._services("down", "--only", "mongo", "--wipe")


def wait_port(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise HarnessError(f"port {port} not open after {timeout}s")


# ---------------------------------------------------------------- kafka helpers


class Kafka:
    def __init__(self, bootstrap):
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch",
                                  "enable.auto.commit": False})

    def create(self, topic, partitions):
        from confluent_kafka.admin import NewTopic
        for f in self.admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = self.consumer.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                return
            time.sleep(0.1)
        raise HarnessError(f"topic {topic} not ready")

    def delete(self, topic):
        try:
            for f in self.admin.delete_topics([topic]).values():
                f.result(30)
        except Exception as e:  # noqa: BLE001 - freeing broker memory is best effort
            log(f"delete topic {topic}: {e}")

    def high(self, topic, partitions):
        from confluent_kafka import TopicPartition
        return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5,
                                                       cached=False)[1] for p in range(partitions))

    def close(self):
        self.consumer.close()


# ---------------------------------------------------------------- systems under test


class Harness:
    def __init__(self, args, servers, work):
        self.args = args
        self.servers = servers
        self.work = work
        self.bench_bin = args.bench_bin
        self.bridge_bin = args.bridge_bin
        self.results = {"catchup": [], "live": [], "outage": [], "limits": {}}

    def bench(self, *argv, timeout=600):
        cmd = [self.bench_bin, *argv, "--uri", self.servers.uri, "--bootstrap", self.servers.bootstrap]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise HarnessError(f"{' '.join(cmd[:3])} failed: {out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def bridge_config(self, name, coll, topic, port, fmt="json"):
        path = self.work / f"bridge-{name}.toml"
        path.write_text(f"""
[mongodb]
uri = "{self.servers.uri}"
offsets_database = "bench_bridge"

[kafka]
bootstrap_servers = "{self.servers.bootstrap}"

[kafka.properties]
"compression.type" = "{self.args.compression}"

[[pipelines]]
name = "{name}"
database = "{DB}"
collection = "{coll}"
topic = "{topic}"
format = "{fmt}"
key_format = "{fmt}"

[metrics]
listen = "127.0.0.1:{port}"
# Off: the limit programs and the baselines do not sample the oplog, and SecantusDB answers the
# two one-document `find`s on local.oplog.rs ({{$natural: ±1}}) by scanning the whole oplog,
# 1-5 s of server CPU per sample with the backlogs here (mongod reads one document at either end
# of its capped collection). BENCHMARKS.md shows the default's cost measured once.
history_interval_ms = {self.args.history_interval_ms}
""")
        return path

    def start(self, system, coll, topic, init=False):
        """Starts a producing system (bridge or baseline); returns the process."""
        logf = open(self.work / f"{system}-{coll}.log", "a")
        if system in BRIDGES:
            port = free_port()
            cfg = self.bridge_config(f"{coll}-{system}", coll, topic, port, BRIDGES[system])
            env = dict(os.environ, RUST_LOG=self.args.bridge_log)
            prefix = [] if init else shlex.split(self.args.bridge_prefix)
            proc = subprocess.Popen([*prefix, self.bridge_bin, "run", "--config", str(cfg)], stdout=logf,
                                    stderr=subprocess.STDOUT, env=env)
            proc.metrics_port = port
            return proc
        common = ["--uri", self.servers.uri, "--bootstrap", self.servers.bootstrap, "--db", DB,
                  "--coll", coll, "--topic", topic, "--name", f"{coll}-{system}"]
        if system == "python":
            cmd = [sys.executable, str(ROOT / "bench/baselines/python/bridge.py"), *common,
                   "--compression", self.args.compression]
        elif system == "node":
            cmd = ["node", str(ROOT / "bench/baselines/node/bridge.js"), *common]
        else:
            raise HarnessError(f"unknown system {system}")
        if init:
            cmd.append("--init")
        env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
        return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)

    def init_position(self, system, coll, topic):
        """Has `system` save its start position on `coll` before the backlog is written."""
        if system.startswith("limit"):
            token = self.work / f"token-{coll}"
            if not token.exists():
                self.bench("token", "--db", DB, "--coll", coll, "--out", str(token))
            return
        if system in BRIDGES:
            from pymongo import MongoClient
            proc = self.start(system, coll, topic, init=True)
            offsets = MongoClient(self.servers.uri)["bench_bridge"]["offsets"]
            deadline = time.monotonic() + 60
            # The document exists as soon as the bridge takes the pipeline; its first position
            # is committed a moment later, when `resumeToken` appears.
            first = {"_id": f"{coll}-{system}", "resumeToken": {"$exists": True}}
            while offsets.find_one(first) is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop_process(proc)
                    raise HarnessError(f"bridge did not commit its first position (see {self.work})")
                time.sleep(0.05)
            if stop_process(proc) != 0:
                raise HarnessError(f"bridge exited with {proc.returncode} on SIGTERM")
            return
        proc = self.start(system, coll, topic, init=True)
        if proc.wait(60) != 0:
            raise HarnessError(f"{system} --init failed (see {self.work})")

    def measure_catchup(self, kafka, system, coll, topic, count, partitions):
        """Drains the backlog with `system`; returns its figures."""
        timeout = 60 + count / 300
        if system.startswith("limit"):
            mode = system.split("-", 1)[1]
            argv = ["limit", "--mode", mode, "--db", DB, "--coll", coll, "--count", str(count),
                    "--token", str(self.work / f"token-{coll}"), "--compression", self.args.compression]
            if mode in ("headers", "split"):
                argv.append(f"--{mode}" if mode == "headers" else "--split-stage")
                mode = "relay"
                argv[2] = mode
            if mode.startswith("fair"):
                argv += ["--format", "bson" if mode == "fair-bson" else "json"]
                mode = "fair"
                argv[2] = mode
            if mode != "read":
                argv += ["--topic", topic]
            if mode == "read":
                t_start = time.monotonic()
                r = self.bench(*argv, timeout=timeout)
                secs = time.monotonic() - t_start
                return {"rate": count / secs, "secs": secs, "internal_rate": r["rate"],
                        "cpu_us_per_event": r["cpu_us_per_event"], "event_bytes": r["mb_per_s"] * 1e6 / r["rate"],
                        "peak_rss_mib": r["peak_rss_kib"] / 1024}
            cmd = [self.bench_bin, *argv, "--uri", self.servers.uri, "--bootstrap", self.servers.bootstrap]
            t_start = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(self.work / f"{system}.log", "a"),
                                    text=True)
        else:
            t_start = time.monotonic()
            proc = self.start(system, coll, topic)
        first = None
        cpu = rss = float("nan")
        servers_cpu0 = self.servers.cpu_s()
        try:
            while True:
                high = kafka.high(topic, partitions)
                now = time.monotonic()
                if high > 0 and first is None:
                    first = (now, high)
                if high >= count:
                    break
                if now - t_start > timeout:
                    raise HarnessError(f"{system}: {high}/{count} delivered after {timeout:.0f}s")
                if proc.poll() is not None and not system.startswith("limit"):
                    raise HarnessError(f"{system} exited with {proc.returncode} (see {self.work})")
                time.sleep(0.01)
            servers_cpu = [b - a for a, b in zip(servers_cpu0, self.servers.cpu_s())]
            threads = {}
            if not system.startswith("limit"):
                cpu = proc_cpu_s(proc.pid)
                threads = thread_cpu_s(proc.pid)
                rss = proc_status_kib(proc.pid, "VmHWM") / 1024
        finally:
            if system.startswith("limit"):
                out, _ = proc.communicate(timeout=120)
            else:
                stop_process(proc)
        if system.startswith("limit"):
            if proc.returncode != 0:
                raise HarnessError(f"{system} exited with {proc.returncode}")
            r = json.loads(out.strip().splitlines()[-1])
            cpu, rss = r["cpu_s"], r["peak_rss_kib"] / 1024
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
        if system.startswith("limit"):
            r["internal_rate"] = json.loads(out.strip().splitlines()[-1])["rate"]
        if system in ("limit-produce", "limit-fair", "limit-fair-bson"):
            # Timed by the program itself, after it loaded (and, fair, encoded) the events.
            r["rate"] = r["internal_rate"]
        return r

    # ------------------------------------------------------------ catch-up

    def catchup(self, size_name, run):
        args = self.args
        size = SIZES[size_name]
        count = args.count or COUNTS[size_name]
        systems = [s for s in args.systems if s in CATCHUP_SYSTEMS + OPTIONAL_SYSTEMS]
        rot = run % len(systems)
        systems = systems[rot:] + systems[:rot]  # spread the machine's noise over the systems
        coll = f"cu_{size_name}_{run}_{int(time.time())}"
        self.servers.fresh_kafka()
        kafka = Kafka(self.servers.bootstrap)
        try:
            topics = {s: f"bench.{coll}.{s}" for s in systems}
            for s in systems:
                if s in PRODUCERS:
                    kafka.create(topics[s], args.partitions)
                self.init_position(s, coll, topics[s])
            log(f"catch-up {size_name} run {run}: writing {count} documents into {DB}.{coll}")
            w = self.bench("load", "--db", DB, "--coll", coll, "--size", str(size), "--count", str(count))
            event_bytes = None
            for s in systems:
                self.servers.settle()
                r = self.measure_catchup(kafka, s, coll, topics[s], count, args.partitions)
                if s == "limit-read":
                    event_bytes = r["event_bytes"]
                r.update(system=s, size=size_name, run=run, count=count, insert_rate=w["rate"])
                self.results["catchup"].append(r)
                log(f"  {s:14} {r['rate']:10.0f} events/s  cpu {r['cpu_us_per_event']:6.1f} us/event"
                    f"  rss {r['peak_rss_mib']:6.1f} MiB  servers' cpu {r.get('mongo_cpu_us_per_event', float('nan')):6.1f}"
                    f" + {r.get('kafka_cpu_us_per_event', float('nan')):6.1f} us/event")
                if r.get("thread_cpu_us_per_event"):
                    log("    threads (us/event): " + ", ".join(
                        f"{k} {v:.1f}" for k, v in sorted(r["thread_cpu_us_per_event"].items(),
                                                          key=lambda kv: -kv[1]) if v > 0))
                if s in PRODUCERS:
                    kafka.delete(topics[s])
            for r in self.results["catchup"]:
                if r["size"] == size_name and r["run"] == run and event_bytes:
                    r["mb_per_s"] = r["rate"] * event_bytes / 1e6
                    r["event_bytes"] = event_bytes
        finally:
            kafka.close()

    # ------------------------------------------------------------ live

    def live(self, run):
        args = self.args
        self.servers.fresh_kafka()
        kafka = Kafka(self.servers.bootstrap)
        try:
            for system in args.live_systems:
                coll = f"live_{system}_{run}_{int(time.time())}"
                topic = f"bench.{coll}"
                kafka.create(topic, args.partitions)
                proc = self.start(system, coll, topic)
                try:
                    self._live_system(kafka, system, proc, coll, topic, run)
                finally:
                    stop_process(proc)
                kafka.delete(topic)
        finally:
            kafka.close()

    def _live_system(self, kafka, system, proc, coll, topic, run):
        args = self.args
        # Let the system open its stream (the writer starts after it is listening).
        deadline = time.monotonic() + 30
        if system == "bridge":
            while time.monotonic() < deadline:
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics",
                                                  timeout=1).read().decode()
                    if re.search(r"^mongo_kafka_bridge_stream_open\{[^}]*\} 1$", body, re.M):
                        break
                except OSError:
                    pass
                time.sleep(0.1)
        else:
            time.sleep(2.0)
        # Warm-up, not measured: the first record makes the producer fetch the topic's metadata
        # and its idempotent producer id, which would show as a ~1 s outlier in the first step.
        self.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate", "200", "--duration", "1")
        time.sleep(1.0)
        rates = args.rates if system == "bridge" else args.baseline_rates
        ramp = args.ramp if system == "bridge" else []
        for rate in [*rates, *ramp]:
            if proc.poll() is not None:
                raise HarnessError(f"{system} exited with {proc.returncode} during the live run")
            sampler = RssSampler(proc.pid)
            r = self.bench("live", "--db", DB, "--coll", coll, "--topic", topic, "--rate", str(rate),
                           "--duration", str(args.live_duration), "--settle", str(args.settle),
                           timeout=args.live_duration + args.settle + 60)
            r.update(system=system, run=run, rate=rate, ramp=rate in ramp and rate not in rates,
                     rss_mib=sampler.stop())
            r["sustained"] = (r["write_rate"] >= 0.9 * rate and r["delivered_within_1s_fraction"] >= 0.95)
            self.results["live"].append(r)
            log(f"  live {system:7} {rate:6}/s: wrote {r['write_rate']:8.0f}/s  p50 {r['p50_ms']:7.1f} ms"
                f"  p99 {r['p99_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms"
                f"  in 1s {100 * r['delivered_within_1s_fraction']:5.1f}%  rss {r['rss_mib']:.1f} MiB")
        if system == "bridge" and args.outage and self.servers.kafka_managed:
            self._outage(kafka, proc, coll, topic, run)

    def _outage(self, kafka, proc, coll, topic, run):
        """Bridge RSS while the broker is frozen and the collection keeps being written."""
        args = self.args
        sampler = RssSampler(proc.pid)
        self.servers.freeze_kafka(True)
        try:
            w = self.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate",
                           str(args.outage_rate), "--duration", str(args.outage_seconds))
        finally:
            self.servers.freeze_kafka(False)
        during = sampler.stop()
        deadline = time.monotonic() + 60
        records = w["inserts"] + w["updates"] + 2 * w["deletes"]
        start_high = None
        recovered = float("nan")
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            high = kafka.high(topic, args.partitions)
            start_high = start_high if start_high is not None else high
            if proc.poll() is not None:
                raise HarnessError(f"bridge exited with {proc.returncode} after the outage")
            if self._bridge_in_flight(proc) == 0 and high > start_high:
                recovered = time.monotonic() - t0
                break
            time.sleep(0.1)
        r = {"run": run, "written": w["inserts"] + w["updates"] + w["deletes"], "records": records,
             "seconds": args.outage_seconds, "rss_mib": during, "recovered_s": recovered,
             "budget_mib": 64 + 16}
        self.results["outage"].append(r)
        log(f"  outage: {r['written']} writes in {args.outage_seconds}s with Kafka frozen: bridge peak RSS"
            f" {during:.1f} MiB, drained {recovered:.1f}s after thaw")

    @staticmethod
    def _bridge_in_flight(proc):
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=1).read().decode()
        except OSError:
            return -1
        total = 0
        for line in body.splitlines():
            if line.startswith("mongo_kafka_bridge_in_flight_events"):
                total += float(line.rsplit(" ", 1)[1])
        return total


class RssSampler:
    """Samples VmRSS of `pid` every 50 ms in a thread; stop() returns the peak in MiB."""

    def __init__(self, pid):
        import threading
        self.pid, self.peak, self.done = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, proc_status_kib(self.pid, "VmRSS"))
            self.done.wait(0.05)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak / 1024


# ---------------------------------------------------------------- report


def mmm(values):
    v = [x for x in values if x == x]  # drop NaN
    if not v:
        return (float("nan"),) * 3
    return min(v), statistics.median(v), max(v)


def fmt_mmm(values, digits=0):
    lo, med, hi = mmm(values)
    if med != med:
        return "n/a"
    f = f"{{:,.{digits}f}}"
    return f"{f.format(med)} ({f.format(lo)}–{f.format(hi)})"


def report(results, meta, with_targets=True):
    """The markdown report: tables, ratios and (unless `with_targets` is false) targets."""
    lines = []
    out = lines.append
    out(f"Measured {meta['date']} on {meta['machine']}; MongoDB: {meta['versions']['mongo']}, "
        f"Kafka: {meta['versions']['kafka']} (wire-compatible stand-ins, not mongod / Apache Kafka); "
        f"{meta['runs']} runs, figures are median (min–max); {meta['partitions']} partition(s), "
        f"compression {meta['compression']}.")
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
            count = next(r["count"] for r in cu if r["size"] == size)
            for s in systems:
                rs = [by[(s, k)] for k in runs if (s, k) in by]
                if not rs:
                    continue
                ratios = [by[(s, k)]["rate"] / by[("limit-relay", k)]["rate"]
                          for k in runs if (s, k) in by and ("limit-relay", k) in by]
                out(f"| {size} ×{count:,} | {s} | {fmt_mmm([r['rate'] for r in rs])} | "
                    f"{fmt_mmm([r.get('mb_per_s', float('nan')) for r in rs], 1)} | "
                    f"{fmt_mmm(ratios, 2) if ratios else 'n/a'} | "
                    f"{fmt_mmm([r['cpu_us_per_event'] for r in rs], 1)} | "
                    f"{fmt_mmm([r['peak_rss_mib'] for r in rs], 1)} |")
            ratio = lambda a, b: [by[(a, k)]["rate"] / by[(b, k)]["rate"] for k in runs  # noqa: E731
                                  if (a, k) in by and (b, k) in by]
            if ("bridge", runs[0]) in by and ("limit-relay", runs[0]) in by:
                med = mmm(ratio("bridge", "limit-relay"))[1]
                targets.append((f"catch-up {size}: bridge ≥ 0.9 × limit", f"{med:.2f} ×", med >= 0.9))
            for bridge, fair in (("bridge", "limit-fair"), ("bridge-bson", "limit-fair-bson")):
                if (bridge, runs[0]) in by and (fair, runs[0]) in by:
                    med = mmm(ratio(bridge, fair))[1]
                    targets.append((f"catch-up {size}: {bridge} ≥ 0.9 × {fair}", f"{med:.2f} ×",
                                    med >= 0.9))
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
        keys = []
        for r in live:
            if (r["system"], r["rate"]) not in keys:
                keys.append((r["system"], r["rate"]))
        for s, rate in keys:
            rs = [r for r in live if r["system"] == s and r["rate"] == rate]
            out(f"| {s} | {rate:,} | {fmt_mmm([r['write_rate'] for r in rs])} | "
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
        best = {}
        for r in bridge:
            if r["sustained"]:
                best[r["run"]] = max(best.get(r["run"], 0), r["write_rate"])
        if best:
            out(f"Highest rate sustained by the bridge (written rate of the highest step it kept up with): "
                f"{fmt_mmm(list(best.values()))} events/s.")
            out("")
        rss = [r["rss_mib"] for r in bridge]
        if rss:
            targets.append(("bridge peak RSS ≤ 80 MiB at steady load", f"{max(rss):.1f} MiB", max(rss) <= 80))
    outage = results["outage"]
    if outage:
        peak = max(r["rss_mib"] for r in outage)
        out(f"Kafka outage (broker SIGSTOPped for {outage[0]['seconds']} s while ~{outage[0]['written']:,} "
            f"writes arrive): bridge peak RSS {fmt_mmm([r['rss_mib'] for r in outage], 1)} MiB, "
            f"drained {fmt_mmm([r['recovered_s'] for r in outage], 1)} s after the broker resumed.")
        out("")
        targets.append(("bridge peak RSS ≤ 80 MiB during a Kafka outage", f"{peak:.1f} MiB", peak <= 80))
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


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description="mongo-kafka-bridge benchmark harness (see scripts/bench)")
    ap.add_argument("--smoke", action="store_true", help="seconds-long run for CI")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="1KB,20KB,250KB")
    ap.add_argument("--count", type=int, default=0, help="backlog size for every document size")
    ap.add_argument("--systems", default=",".join(CATCHUP_SYSTEMS))
    ap.add_argument("--live-systems", default="bridge,node,python")
    ap.add_argument("--rates", default="500,2000,10000")
    ap.add_argument("--baseline-rates", default="2000")
    ap.add_argument("--ramp", default="20000,40000", help="extra rates to find the highest sustained")
    ap.add_argument("--live-duration", type=float, default=5.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--no-live", action="store_true")
    ap.add_argument("--no-outage", dest="outage", action="store_false")
    ap.add_argument("--outage-rate", type=int, default=10000)
    ap.add_argument("--outage-seconds", type=float, default=6.0)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--oplog-max-entries", type=int, default=2_000_000)
    ap.add_argument("--bridge-bin", required=True)
    ap.add_argument("--history-interval-ms", type=int, default=0,
                    help="the bridge's [metrics] history_interval_ms (its default is 15000)")
    ap.add_argument("--bridge-log", default="warn",
                    help="the bridge's RUST_LOG, e.g. 'warn,mongodb::command=debug' to log every "
                         "getMore with its duration")
    ap.add_argument("--bridge-prefix", default="",
                    help="command the bridge runs under, e.g. 'perf record -g -o bridge.perf --' "
                         "(its CPU and RSS figures are then the wrapper's)")
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--out", required=True, help="directory for results.json, results.md and logs")
    args = ap.parse_args()
    csv = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    if args.smoke:
        args.runs, args.sizes, args.count = 1, "1KB", args.count or 2000
        args.systems = "limit-read,limit-relay,limit-fair,bridge,bridge-bson,python"
        args.live_systems, args.rates, args.ramp = "bridge", "500", ""
        args.live_duration, args.settle, args.outage = 2.0, 5.0, False
    args.systems, args.live_systems = csv(args.systems), csv(args.live_systems)
    args.rates, args.baseline_rates, args.ramp = ([int(x) for x in csv(v)]
                                                  for v in (args.rates, args.baseline_rates, args.ramp))
    sizes = csv(args.sizes)
    for s in sizes:
        if s not in SIZES:
            ap.error(f"--sizes: one of {', '.join(SIZES)}")
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    servers = Servers(work, args.oplog_max_entries)
    h = Harness(args, servers, work)
    failed = None
    try:
        for run in range(1, args.runs + 1):
            for size in sizes:
                h.catchup(size, run)
            if not args.no_live and args.live_systems:
                log(f"live run {run}")
                h.live(run)
    except (HarnessError, subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
        failed = e
        log(f"FAILED: {e}")
    finally:
        servers.close()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}, "
                   f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, shared",
        "versions": servers.versions, "runs": args.runs, "partitions": args.partitions,
        "compression": args.compression, "seconds": round(time.monotonic() - t0, 1),
    }
    (work / "results.json").write_text(json.dumps({"meta": meta, **h.results}, indent=1))
    md = report(h.results, meta, with_targets=not args.smoke)
    (work / "results.md").write_text(md + "\n")
    print(md)
    log(f"results in {work} ({meta['seconds']} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
