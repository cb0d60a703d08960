"""The systems under test and the run they are measured in.

`Harness` holds one run's options, servers, work directory and results, calls the Rust bench
program (`bench load`, `token`, `limit`, `live`, `limit-copy`), and starts the bridge and the
baselines with the same settings in every block. The peers (debezium, mongo-kafka) have their
own runner, peers.py.

Systems of the catch-up block:
  limit-read       raw change-stream read, events dropped          (bench limit --mode read)
  limit-produce    raw librdkafka produce of the same events        (bench limit --mode produce)
  limit-relay      read + produce, no bridge logic: THE LIMIT       (bench limit --mode relay)
  limit-headers    the same with headers shaped like the bridge's
  limit-inline     read, encode with the bridge's encoder and produce in one loop, none of the
                   bridge's machinery (bench limit --mode inline); limit-inline-bson: "bson"
  limit-fair       THE FAIR LIMIT: the bridge's own records, encoded by its encoder before the
                   timed run (bench limit --mode fair); limit-fair-bson: format "bson"
  bridge           mongo-kafka-bridge run; bridge-bson: format = key_format = "bson";
                   bridge-debezium: value = "debezium" (Debezium's records, capture mode
                   change_streams like the debezium peer: full_document = "default")
  node, python     the baselines in bench/baselines (written the way a competent user would)
  debezium         Debezium's MongoDB connector 3.6 under Kafka Connect (peers.py)
  mongo-kafka      the official MongoDB Kafka source connector under Kafka Connect (peers.py)
  limit-split      (only when named) limit-relay with $changeStreamSplitLargeEvent
  bridge-pool      (only when named) the bridge with [bridge] encode_threads = 2: events of
                   8 KiB and more encoded on the encode pool (its gain is this ÷ bridge);
                   bridge-pool-bson: the same in "bson"."""

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from .process import HarnessError, free_port, log, stop_process

ROOT = Path(__file__).resolve().parents[2]
DB = "bench"
SIZES = {"1KB": 1024, "20KB": 20 * 1024, "250KB": 250 * 1024}
COUNTS = {"1KB": 100_000, "20KB": 20_000, "250KB": 2_000}
PEERS = ["debezium", "mongo-kafka"]
# The peers' catch-up sizes (their drain is ~1 000-2 000 events/s: 250 KB is left out).
PEER_SIZES = ["1KB", "20KB"]
CATCHUP_SYSTEMS = ["limit-read", "limit-produce", "limit-relay", "limit-headers", "limit-fair",
                   "limit-fair-bson", "limit-inline", "limit-inline-bson", "bridge", "bridge-bson", "bridge-debezium", "node", "python",
                   *PEERS]
LIVE_SYSTEMS = ["limit-relay", "bridge", "node", "python", *PEERS]
BRIDGES = {"bridge": "json", "bridge-bson": "bson", "bridge-debezium": "json",
           "bridge-pool": "json", "bridge-pool-bson": "bson"}
# [bridge] lines of a bridge system besides the block's.
BRIDGE_LINES = {"bridge-pool": "encode_threads = 2\n", "bridge-pool-bson": "encode_threads = 2\n"}
# The Debezium form, as the debezium peer is run (no update lookup); its topic is the system's.
DEBEZIUM_FORM = ('value = "debezium"\nfull_document = "default"\n'
                 '[pipelines.debezium]\ntopic_prefix = "bench"\n')
# Measured only when named in --systems: limit-relay with the bridge's $changeStreamSplitLargeEvent.
OPTIONAL_SYSTEMS = ["limit-split", "bridge-pool", "bridge-pool-bson"]
PRODUCERS = {"limit-produce", "limit-relay", "limit-headers", "limit-split", "limit-fair",
             "limit-fair-bson", "limit-inline", "limit-inline-bson", "bridge", "bridge-bson", "bridge-debezium", "node", "python",
             "bridge-pool", "bridge-pool-bson"}


class Harness:
    """One run: its options, servers, work directory (logs, configs, results) and results."""

    def __init__(self, args, servers, work):
        self.args = args
        self.servers = servers
        self.work = work
        self.bench_bin = args.bench_bin
        self.bridge_bin = args.bridge_bin
        self.results = {"catchup": [], "live": [], "outage": [], "copy": [], "group": [],
                        "skipped": [], "limits": {}, "callgrind": [],
                        "callgrind_profile": {}}
        # [bridge] lines and [kafka.properties] lines every bridge config gets (a block's own).
        self.overrides = ("", "")
        # Why bridge-copy was skipped (--bridge-copy-skip-after), once it was: not retried.
        self.bridge_copy_skip = None

    def skip(self, system, reason):
        """Records (once) that `system` or a block was left out, and why."""
        if not any(r["system"] == system for r in self.results["skipped"]):
            log(f"SKIP {system}: {reason}")
            self.results["skipped"].append({"system": system, "reason": reason})

    def bench(self, *argv, timeout=600):
        """Runs the Rust bench program against the run's servers; returns its JSON line."""
        cmd = [self.bench_bin, *argv, "--uri", self.servers.uri, "--bootstrap", self.servers.bootstrap]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise HarnessError(f"{' '.join(cmd[:3])} failed: {out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def bridge_config(self, name, coll, topic, port, fmt="json", pipeline_extra="", bridge_extra=""):
        """The bridge's config for one pipeline; `pipeline_extra`: more lines of the pipeline,
        `bridge_extra` of [bridge]. With `self.overrides` (a block's [bridge] lines and
        [kafka.properties] lines, e.g. the instruction block's), those too."""
        path = self.work / f"bridge-{name}.toml"
        bridge, props = self.overrides
        bridge += bridge_extra
        bridge = f"[bridge]\n{bridge}" if bridge else ""
        path.write_text(f"""{bridge}
[mongodb]
uri = "{self.servers.uri}"
offsets_database = "bench_bridge"

[kafka]
bootstrap_servers = "{self.servers.bootstrap}"

[kafka.properties]
"compression.type" = "{self.args.compression}"
{props}
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

    def start(self, system, coll, topic, init=False, callgrind=None):
        """Starts a producing system (bridge or baseline); returns the process (a bridge's has
        `metrics_port`). `callgrind`: the valgrind command a bridge runs under (--callgrind)."""
        logf = open(self.work / f"{system}-{coll}.log", "a")
        if system in BRIDGES or system == "bridge-copy":
            port = free_port()
            extra = DEBEZIUM_FORM if system == "bridge-debezium" else ""
            if system == "bridge-copy":
                # The defaults (change_event values, JSON) plus the initial snapshot, and the
                # full_document the bridge requires with it. The pipeline name is new: no offsets
                # document exists, so the snapshot runs.
                extra = 'snapshot = "initial"\nfull_document = "update_lookup"\n'
                if self.args.copy_batch_size != 1000:
                    extra += f"snapshot_batch_size = {self.args.copy_batch_size}\n"
            cfg = self.bridge_config(f"{coll}-{system}", coll, topic, port,
                                     BRIDGES.get(system, "json"), extra,
                                     BRIDGE_LINES.get(system, ""))
            env = dict(os.environ, RUST_LOG=self.args.bridge_log)
            prefix = [] if init else callgrind or shlex.split(self.args.bridge_prefix)
            proc = subprocess.Popen([*prefix, self.bridge_bin, "run", "--config", str(cfg)],
                                    stdout=logf, stderr=subprocess.STDOUT, env=env)
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
            client = MongoClient(self.servers.uri)
            try:
                offsets = client["bench_bridge"]["offsets"]
                deadline = time.monotonic() + 60
                # The document exists as soon as the bridge takes the pipeline; its first
                # position is committed a moment later, when `resumeToken` appears.
                first = {"_id": f"{coll}-{system}", "resumeToken": {"$exists": True}}
                while offsets.find_one(first) is None:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        stop_process(proc)
                        raise HarnessError(f"bridge did not commit its first position (see {self.work})")
                    time.sleep(0.05)
            finally:
                client.close()
            if stop_process(proc) != 0:
                raise HarnessError(f"bridge exited with {proc.returncode} on SIGTERM")
            return
        proc = self.start(system, coll, topic, init=True)
        if proc.wait(60) != 0:
            raise HarnessError(f"{system} --init failed (see {self.work})")
