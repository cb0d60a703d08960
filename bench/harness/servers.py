"""The servers every system is measured on.

MongoDB: MONGODB_URI when set; otherwise SecantusDB's Rust server (`secantusd-rs`, built by
scripts/bench into .cache/secantus-rs) on a fresh data dir, else SecantusDB's Python server
(scripts/services). Kafka: KAFKA_BOOTSTRAP when set (its kind from MKB_KAFKA_BROKER, which
scripts/services exports); otherwise scripts/services (instance "bench" in the run's
directory) starts the broker `--broker` names:
  kafka  Apache Kafka 4.4 (the default): one node, started once for the whole run with
         MKB_KAFKA_JIT=full (G1 and both JIT compilers, Kafka's own JVM options; the services'
         default profile is tuned for the tests' start-up), then warmed up once (records
         produced and read back, untimed), so no measurement pays the broker's JIT;
  noida  noida-db, a stand-in that keeps every record in memory: a fresh one per block.
Only processes this harness started are stopped, and their data is deleted at the end."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import kafka
from .process import HarnessError, free_port, log, proc_cpu_s, stop_process, wait_port

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services"
SECANTUS_RS = ROOT / ".cache" / "secantus-rs" / "bin" / "secantusd-rs"
BROKERS = ("kafka", "noida")
LABELS = {"kafka": "Apache Kafka", "noida": "noida-db"}


class Servers:
    """MongoDB and the broker of one run; `broker` is the kind of Kafka in use (kafka or
    noida)."""

    def __init__(self, work, oplog_cap, broker):
        self.work = work
        self.mongo_proc = None
        self.mongo_services = False
        self.kafka_pid = None
        self.warmed = False
        self.versions = {}
        self.uri = os.environ.get("MONGODB_URI")
        self.bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
        self.services_env = dict(os.environ, MKB_SERVICES_DIR=str(work / "services"))
        # Benchmark brokers get their full JIT and G1 (scripts/services' default is for tests).
        self.services_env.setdefault("MKB_KAFKA_JIT", "full")
        self._start_mongo(oplog_cap)
        self.kafka_managed = not self.bootstrap
        if self.kafka_managed:
            self.broker = broker
            self.versions["kafka"] = LABELS[broker]
        else:
            self.broker = os.environ.get("MKB_KAFKA_BROKER") or "kafka"
            version = os.environ.get("MKB_KAFKA_VERSION", "")
            self.versions["kafka"] = (f"external {LABELS.get(self.broker, self.broker)} "
                                      f"{version} ({self.bootstrap})").replace("  ", " ")

    def _start_mongo(self, oplog_cap):
        work = self.work
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

    def _services(self, *args):
        out = subprocess.run([str(SERVICES), *args, "--name", "bench"], env=self.services_env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise HarnessError(f"scripts/services {' '.join(args)} failed: {out.stderr.strip()}")
        return dict(line.split("=", 1) for line in out.stdout.split() if "=" in line)

    def _start_kafka(self):
        t0 = time.monotonic()
        args = ("up", "--only", "kafka", "--fresh", "--plain", "--broker", self.broker)
        out = self._services(*args)
        self.bootstrap = out["KAFKA_BOOTSTRAP"]
        self.kafka_pid = int(Path(out["MKB_KAFKA_PIDFILE"]).read_text().split()[0])
        if self.broker == "kafka":
            self.versions["kafka"] = (f"Apache Kafka {out.get('MKB_KAFKA_VERSION', '?')} (KRaft, "
                                      f"one node, MKB_KAFKA_JIT={self.services_env['MKB_KAFKA_JIT']})")
        else:
            self.versions["kafka"] = "noida-db 0.2.3"
        log(f"broker: {self.versions['kafka']} on {self.bootstrap} ({time.monotonic() - t0:.1f} s)")

    def block_broker(self):
        """The broker of a block of measurements. noida-db: a fresh one (its records are in
        memory: one per block keeps the total bounded). Apache Kafka: the run's one broker,
        started and warmed up on first use. External: KAFKA_BOOTSTRAP, never restarted."""
        if not self.kafka_managed:
            return self.bootstrap
        if self.broker == "noida":
            self.stop_kafka()
            self._start_kafka()
        elif self.kafka_pid is None:
            self._start_kafka()
        if self.broker == "kafka" and not self.warmed:
            self.warmed = True
            kafka.warm_up(self.bootstrap)
        return self.bootstrap

    def group_broker(self):
        """(bootstrap, None), or (None, why) when the broker does not run consumer groups
        (noida-db never evicts a dead member and mishandles groups)."""
        if self.broker != "kafka":
            return None, (f"the broker is {LABELS.get(self.broker, self.broker)}, which mishandles "
                          "consumer groups: the group block runs on Apache Kafka (the default)")
        return self.block_broker(), None

    def stop_kafka(self):
        if not self.kafka_pid:
            return
        try:
            os.kill(self.kafka_pid, signal.SIGCONT)  # a frozen broker cannot stop
            if self.broker == "noida":
                # noida-db writes every record to disk on SIGTERM; its data is throwaway here.
                os.kill(self.kafka_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.kafka_pid = None
        self._services("down", "--only", "kafka", "--wipe")

    def cpu_s(self):
        """CPU seconds (utime + stime) used so far by the MongoDB and the Kafka server this
        harness started (NaN for external or Python-managed servers)."""
        mongo = proc_cpu_s(self.mongo_proc.pid) if self.mongo_proc else float("nan")
        kafka_cpu = proc_cpu_s(self.kafka_pid) if self.kafka_pid else float("nan")
        return mongo, kafka_cpu

    def settle(self, idle_share=0.05, window=0.25, timeout=20.0):
        """Waits until both servers this harness started are idle (each under `idle_share` of a
        core over `window` seconds), at most `timeout` seconds: a measurement must not pay for
        the work the previous one left behind (a topic being deleted, SecantusDB persisting the
        backlog)."""
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
        """Stops what this harness started and deletes its throwaway data."""
        try:
            self.stop_kafka()
        finally:
            if self.mongo_proc:
                stop_process(self.mongo_proc, 20)
                shutil.rmtree(self.work / "mongo-data", ignore_errors=True)
            if self.mongo_services:
                self._services("down", "--only", "mongo", "--wipe")
