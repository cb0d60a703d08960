"""The group block (many replicas, [bridge] group_id): --group-pipelines (9) pipelines p<i> on
collections t<i> of one database, each to its own one-partition topic; a backlog of
--group-count (20 000) ~1 KB inserts per collection written after every pipeline committed its
first position (saved by one process without group_id, so the measured start is the group's
first join; --group-rejoin: by the variant itself), then drained by each variant in turn, with
its own offsets database, group and topics:
  group-1   one `mongo-kafka-bridge run` process, group_id set (a one-member group: the
            reference, it pays the same membership cost)
  group-3   three processes, the same config file, one group
  single    one process without group_id
on Apache Kafka (noida-db mishandles groups: skipped there). The bridge creates its control
topic and extends it with CreatePartitions, as in production. Rate = backlog / (first member
started -> every pipeline's records acknowledged, from the members' /metrics
..._kafka_messages_delivered_total summed over the members, scraped every 100 ms). Also: who
ran what (..._group_owned_pipelines, ..._pipeline_owned), and afterwards, untimed, what the
topics hold: every event once (records and distinct keys read back)."""

import json
import os
import re
import subprocess
import time

from . import metrics
from .kafka import Kafka
from .metrics import parse_metrics
from .process import (HarnessError, log, machine_cpu_s, proc_cpu_s, proc_status_kib,
                      self_cpu_s, stop_all, thread_cpu_s)

GROUP_VARIANTS = ["group-1", "group-3", "single"]
GROUP_PIPELINES = 9
GROUP_COUNT = 20_000
GROUP_OWNED = "mongo_kafka_bridge_group_owned_pipelines"
PIPELINE_OWNED = "mongo_kafka_bridge_pipeline_owned"
DELIVERED = "mongo_kafka_bridge_kafka_messages_delivered_total"
REBALANCES = "mongo_kafka_bridge_group_rebalances_total"


def group_variant(name):
    """(processes, with group_id) of a variant: `single` (one process, no group_id) or
    `group-<N>` (N processes, one group)."""
    if name == "single":
        return 1, False
    m = re.fullmatch(r"group-([1-9][0-9]*)", name)
    if not m:
        raise ValueError(f"group variant {name!r}: single or group-<N>")
    return int(m.group(1)), True


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
        return metrics.scrape(addr) if addr else None


def group_topic(db, variant, i):
    return f"bench.{db}.{variant}.t{i}"


def group_config(h, path, db, offsets_db, variant, group_id):
    """One config file for every member of `variant`: the same --group-pipelines pipelines
    p<i> on `db`.t<i>, each to its own topic; `group_id` None: no group."""
    parts = [f"""[mongodb]
uri = "{h.servers.uri}"
offsets_database = "{offsets_db}"

[kafka]
bootstrap_servers = "{h.servers.bootstrap}"

[kafka.properties]
"compression.type" = "{h.args.compression}"
"""]
    if group_id:
        parts.append(f'[bridge]\ngroup_id = "{group_id}"\n')
    # history_interval_ms: off, as in the other blocks (see bridge_config).
    parts.append(f"""[metrics]
listen = "127.0.0.1:0"
history_interval_ms = {h.args.history_interval_ms}
""")
    for i in range(h.args.group_pipelines):
        parts.append(f"""[[pipelines]]
name = "p{i}"
database = "{db}"
collection = "t{i}"
topic = "{group_topic(db, variant, i)}"
""")
    path.write_text("\n".join(parts))


def start_member(h, cfg, tag):
    """`mongo-kafka-bridge --log-format json run --no-status --config cfg`, its log (with the
    info lines of the bridge itself: "bridge started" carries the metrics address, the group
    logs its assignments) in <out>/<tag>.log."""
    path = h.work / f"{tag}.log"
    env = dict(os.environ, RUST_LOG=f"{h.args.bridge_log},mongo_kafka_bridge=info")
    proc = subprocess.Popen([h.bridge_bin, "--log-format", "json", "run", "--no-status",
                             "--config", str(cfg)], stdout=open(path, "w"),
                            stderr=subprocess.STDOUT, env=env)
    return Member(proc, path)


def check_members(procs, variant, when):
    """Raises when a member has exited: `when` says at what point of the measurement."""
    for m in procs:
        if m.proc.poll() is not None:
            raise HarnessError(f"group {variant}: a member exited with {m.proc.returncode} "
                               f"{when} (see {m.log})")


def init(h, variant, cfg, members, offsets_db, tag):
    """Starts the variant's members until every pipeline committed its first position
    (`resumeToken` in all its offsets documents), then stops them (SIGTERM, all at once);
    returns the seconds that took."""
    from pymongo import MongoClient
    names = [f"p{i}" for i in range(h.args.group_pipelines)]
    client = MongoClient(h.servers.uri)
    offsets = client[offsets_db]["offsets"]
    t0 = time.monotonic()
    procs = [start_member(h, cfg, f"{tag}-init-m{m}") for m in range(members)]
    try:
        while True:
            have = offsets.count_documents({"_id": {"$in": names},
                                            "resumeToken": {"$exists": True}})
            if have == len(names):
                break
            check_members(procs, variant, f"before the first positions were committed "
                                          f"({have}/{len(names)})")
            if time.monotonic() - t0 > 120:
                raise HarnessError(f"group {variant}: {have}/{len(names)} pipelines committed "
                                   f"their first position after 120 s (see {h.work})")
            time.sleep(0.1)
        ready = time.monotonic() - t0
    finally:
        rcs = stop_all([m.proc for m in procs])
        client.close()
    if any(rcs):
        raise HarnessError(f"group {variant}: members exited with {rcs} on SIGTERM after the "
                           f"first positions (see {h.work})")
    return ready


def scrape(procs, pipelines):
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


def measure(h, kafka, variant, cfg, members, grouped, topics, n, tag):
    """Starts the variant's members on the backlog; returns its figures once every pipeline
    delivered its `n` records. Delivery is read from the members' /metrics
    (…_kafka_messages_delivered_total, summed over the members; scraped every 100 ms with
    who runs what, which the topics' watermarks would not tell). What the topics hold is
    checked afterwards by reading them (untimed)."""
    k = len(topics)
    total = k * n
    timeout = h.args.group_timeout or 120 + total / 1000
    t_start = time.monotonic()
    machine0, self0 = machine_cpu_s(), self_cpu_s()
    procs = [start_member(h, cfg, f"{tag}-m{m}") for m in range(members)]
    servers_cpu0 = h.servers.cpu_s()
    done, first, running_all, most_owners = {}, None, None, 0
    double = []  # (seconds, pipeline, members) seen running on more than one member
    delivered = [0] * k
    try:
        while True:
            scraped = scrape(procs, k)
            now = time.monotonic() - t_start
            delivered = [sum(m["delivered"][p] for m in scraped) for p in range(k)]
            if first is None and sum(delivered) > 0:
                first = now
            for p in range(k):
                if p not in done and delivered[p] >= n:
                    done[p] = now
            per = [[m for m, x in enumerate(scraped) if p in x["running"]] for p in range(k)]
            most_owners = max(most_owners, *(len(o) for o in per))
            double += [(round(now, 2), p, o) for p, o in enumerate(per) if len(o) > 1]
            if running_all is None and all(len(o) == 1 for o in per):
                running_all = now
            if len(done) == k:
                break
            check_members(procs, variant, f"with {sum(delivered)}/{total} records delivered")
            if now > timeout:
                for m, x in enumerate(scraped):
                    (h.work / f"{tag}-m{m}.metrics").write_text(x["body"] or "")
                raise HarnessError(f"group {variant}: {sum(delivered)}/{total} records "
                                   f"delivered after {timeout:.0f} s (per pipeline "
                                   f"{delivered}; owners {per}; the members' /metrics in "
                                   f"{h.work}/{tag}-m*.metrics)")
            time.sleep(0.1)
        secs = max(done.values())
        servers_cpu = [b - a for a, b in zip(servers_cpu0, h.servers.cpu_s())]
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
    for x in scraped:
        for kind, v in x["rebalances"].items():
            rebalances[kind] = rebalances.get(kind, 0) + v
    # Pipeline starts per member, from the log ("starting the assigned pipeline"): more
    # starts than pipelines means some moved between members.
    starts = [m.log.read_text(errors="replace").count('"starting the assigned pipeline"')
              for m in procs]
    per = [sorted(x["running"]) for x in scraped]
    r = {"rate": total / secs, "secs": secs, "members": members, "grouped": grouped,
         "tail_rate": total / (secs - first) if secs > first else float("nan"),
         "pipelines": k, "per_pipeline": n,
         "first_s": first, "all_running_s": running_all,
         "pipeline_done_s": [round(done[i], 3) for i in range(k)],
         "owned_gauge": [x["owned"] for x in scraped], "owned_pipelines": per,
         "delivered_by_member": [x["delivered"] for x in scraped],
         "most_owners_seen": most_owners, "double_owned_seen": double[:20],
         "unowned_at_end": [p for p in range(k) if not any(p in run for run in per)],
         "records_per_topic": [x[0] for x in held],
         "unique_keys_per_topic": [x[1] for x in held],
         "duplicates": sum(x[0] - x[1] for x in held),
         "missing": sum(max(0, n - x[1]) for x in held),
         "rebalances": rebalances, "group_starts": starts, "exit_codes": rcs,
         "cpu_us_per_event": sum(cpu) * 1e6 / total, "member_cpu_s": cpu,
         "thread_cpu_us_per_event": {t: v * 1e6 / total for t, v in threads.items()},
         "peak_rss_mib": max(rss), "member_rss_mib": rss,
         "mongo_cpu_us_per_event": servers_cpu[0] * 1e6 / total,
         "kafka_cpu_us_per_event": servers_cpu[1] * 1e6 / total,
         "other_load_cores": others}
    if any(rcs):
        log(f"  group {variant}: members exited with {rcs} on SIGTERM (see {h.work})")
    return r


def group(h, run):
    """The group block of one run: --group-pipelines collections t<i> in one fresh
    database; every variant saves its start positions (its own offsets database, group and
    topics), then the backlog is written once (--group-count 1 KB documents per
    collection), then each variant drains it in turn (order rotated between runs) on a
    broker that runs consumer groups (Apache Kafka; skipped on noida-db)."""
    args = h.args
    bootstrap, why = h.servers.group_broker()
    if bootstrap is None:
        h.skip("group", why)
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
            cfg = h.work / f"group-{db}-{v}.toml"
            group_config(h, cfg, db, offsets_db, v, group_id)
            topics = [group_topic(db, v, i) for i in range(k)]
            for t in topics:
                kafka.create(t, 1)
            if grouped and args.group_control_partitions:
                # Otherwise the bridge creates its control topic (and CreatePartitions extends it).
                kafka.create(f"__mongo_kafka_bridge.{offsets_db}.group.{group_id}",
                             max(k, args.group_control_partitions))
            if args.group_rejoin or not grouped:
                init_s = init(h, v, cfg, members, offsets_db, f"group-{db}-{v}")
            else:
                # The first positions are saved by one process with the same pipelines and
                # offsets database but no group_id, so the measured start is the group's
                # first join (--group-rejoin: a rejoin of the variant's own group).
                init_cfg = h.work / f"group-{db}-{v}-init.toml"
                group_config(h, init_cfg, db, offsets_db, v, None)
                init_s = init(h, v, init_cfg, 1, offsets_db, f"group-{db}-{v}")
            setups[v] = (cfg, members, grouped, topics, init_s)
            log(f"group run {run}: {v}: the {k} pipelines committed their first "
                f"positions in {init_s:.1f} s")
        log(f"group run {run}: writing {k} × {n} documents into {db}.t0..t{k - 1}")
        loads = [h.bench("load", "--db", db, "--coll", f"t{i}", "--size", "1024",
                         "--count", str(n)) for i in range(k)]
        insert_rate = k * n / sum(n / w["rate"] for w in loads)
        for v in variants:
            cfg, members, grouped, topics, init_s = setups[v]
            h.servers.settle()
            r = measure(h, kafka, v, cfg, members, grouped, topics, n, f"group-{db}-{v}")
            r.update(system=v, run=run, init_s=init_s, insert_rate=insert_rate)
            h.results["group"].append(r)
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

