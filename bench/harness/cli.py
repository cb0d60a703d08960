"""The command line of the harness (scripts/bench runs it as `python -m harness`): its options,
the presets (--smoke, --group-only, --eos-only), the run (every block, --runs times), and the
results (results.json, results.md). Figures never fail the run: the exit code is 1 only when
the harness or a system under test broke, 130 on Ctrl-C (everything it started is stopped)."""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import callgrind, catchup, eos, group, live, peers, snapshot
from .figures import mmm
from .process import HarnessError, LoadSampler, log
from .report import report
from .servers import BROKERS, Servers
from .systems import CATCHUP_SYSTEMS, LIVE_SYSTEMS, PEER_SIZES, PEERS, ROOT, SIZES, Harness


def csv(s):
    return [x for x in s.split(",") if x]


def options():
    """The parser of every option (scripts/bench --help prints it)."""
    ap = argparse.ArgumentParser(prog="scripts/bench", description="mongo-kafka-bridge benchmark "
                                 "harness (bench/harness; see scripts/bench and BENCHMARKS.md)")
    add = ap.add_argument
    add("--smoke", action="store_true", help="seconds-long run for CI")
    add("--runs", type=int, default=3, help="repeats of every block (default 3)")
    add("--broker", choices=BROKERS, default=os.environ.get("MKB_BROKER") or "kafka",
        help="the broker scripts/services starts when KAFKA_BOOTSTRAP is not set: kafka "
             "(Apache Kafka 4.4, default) or noida (the noida-db stand-in); default $MKB_BROKER")
    add("--sizes", default=",".join(SIZES))
    add("--count", type=int, default=0, help="backlog size for every document size")
    add("--systems", default=",".join(CATCHUP_SYSTEMS))
    add("--live-systems", default=",".join(LIVE_SYSTEMS))
    add("--peers", action=argparse.BooleanOptionalAction, default=None,
        help="the peers debezium and mongo-kafka (Kafka Connect workers) in the catch-up and live "
             "blocks; default: on, off with --smoke")
    add("--peer-sizes", default=",".join(PEER_SIZES), help="catch-up sizes the peers drain")
    add("--peer-count", type=int, default=0,
        help="the peers' backlog (default: the other systems')")
    add("--peer-live-warmup", type=float, default=10.0, metavar="SECONDS",
        help="untimed writing at the first --baseline-rates before a peer's live steps (JIT)")
    add("--peer-setting", action="append", default=[], metavar="SYSTEM:KEY=VALUE",
        help="a connector setting for one peer (repeatable), e.g. debezium:poll.interval.ms=10")
    add("--rates", default="500,2000,10000",
        help="the live steps of the bridge and limit-relay, events/s or N%% of the writer's "
             "maximum (measured at the start of each run's live block)")
    add("--baseline-rates", default="2000")
    add("--ramp", default="20%,50%,80%",
        help="extra steps to find the highest sustained rate, like --rates")
    add("--live-duration", type=float, default=5.0)
    add("--settle", type=float, default=5.0)
    add("--no-live", action="store_true")
    add("--no-outage", dest="outage", action="store_false")
    add("--outage-rate", type=int, default=10000)
    add("--outage-seconds", type=float, default=6.0)
    add("--copy", action=argparse.BooleanOptionalAction, default=True,
        help="the initial-snapshot block (limit-copy, bridge-copy, python-copy)")
    add("--copy-sizes", default=",".join(snapshot.COPY_SIZES))
    add("--copy-systems", default=",".join(snapshot.COPY_SYSTEMS))
    add("--copy-batch-size", type=int, default=1000,
        help="batchSize of the copy's find (the bridge's snapshot_batch_size)")
    add("--bridge-copy-skip-after", type=float, default=0, metavar="SECONDS",
        help="if bridge-copy has not copied everything after SECONDS (or exited), log SKIP and "
             "go on instead of failing (--smoke: 60)")
    add("--group", action=argparse.BooleanOptionalAction, default=True,
        help="the group catch-up block: --group-pipelines pipelines drained by one process and "
             "by several in one consumer group ([bridge] group_id); on Apache Kafka (skipped "
             "on noida-db)")
    add("--group-only", action="store_true",
        help="only the group block (--sizes '' --no-live --no-outage --no-copy --no-eos)")
    add("--group-variants", default=",".join(group.GROUP_VARIANTS),
        help="single (one process, no group_id) and group-<N> (N processes, one group); the "
             "smallest group is the reference of the ratios")
    add("--group-pipelines", type=int, default=group.GROUP_PIPELINES)
    add("--group-count", type=int, default=group.GROUP_COUNT,
        help="~1 KB documents written into each pipeline's collection (the backlog)")
    add("--group-control-partitions", type=int, default=0,
        help="create the control topic beforehand with this many partitions (at least "
             "--group-pipelines); default: the bridge creates it")
    add("--group-rejoin", action="store_true",
        help="save the group variants' first positions with their own members and group (the "
             "measured start is then a rejoin) instead of one process without group_id")
    add("--group-timeout", type=float, default=0, metavar="SECONDS",
        help="a variant failing to drain its backlog within SECONDS fails the run (default "
             "120 + 1 s per 1000 events)")
    add("--eos", action=argparse.BooleanOptionalAction, default=True,
        help="the exactly-once block: catch-up and live latency of delivery = "
             "\"exactly_once\" beside the same pipeline at-least-once (bench/harness/eos.py)")
    add("--eos-only", action="store_true",
        help="only the exactly-once block (--sizes '' --no-live --no-outage --no-copy --no-group)")
    add("--eos-sizes", default=",".join(eos.EOS_SIZES))
    add("--eos-intervals", default=",".join(map(str, eos.INTERVALS)),
        help="commit_interval_ms values of the exactly-once live steps")
    add("--eos-rate", type=int, default=2000, help="events/s of the live steps")
    add("--eos-live-duration", type=float, default=10.0, help="seconds of writing per live step")
    add("--eos-live-alo", action=argparse.BooleanOptionalAction, default=True,
        help="an at-least-once live step at the same rate, for comparison")
    add("--callgrind", action="store_true",
        help="only the instruction block: the bridge and limit-inline under valgrind's "
             "callgrind, instructions per event as the difference of two backlogs "
             "(bench/harness/callgrind.py; ~30-60 s per size and run)")
    add("--callgrind-sizes", default="1KB,20KB",
        help=f"sizes of the instruction block, of {', '.join(callgrind.BACKLOGS)} (default 1KB,20KB)")
    add("--callgrind-systems", default=",".join(callgrind.SYSTEMS),
        help=f"systems of the instruction block (default {','.join(callgrind.SYSTEMS)})")
    add("--partitions", type=int, default=1)
    add("--compression", default="none")
    add("--oplog-max-entries", type=int, default=8_000_000,
        help="SecantusDB's oplog cap: above what a full run writes (~4 M entries with the peers)")
    add("--bridge-bin", required=True, help="the bridge's binary (scripts/bench sets it)")
    add("--history-interval-ms", type=int, default=0,
        help="the bridge's [metrics] history_interval_ms (its default is 15000)")
    add("--bridge-log", default="warn",
        help="the bridge's RUST_LOG, e.g. 'warn,mongodb::command=debug' to log every getMore")
    add("--bridge-prefix", default="",
        help="command the bridge runs under, e.g. 'perf record -g -o bridge.perf --' (its CPU "
             "and RSS figures are then the wrapper's)")
    add("--bench-bin", required=True, help="the bench program's binary (scripts/bench sets it)")
    add("--out", required=True, help="directory for results.json, results.md and logs "
                                     "(scripts/bench sets it: .cache/bench/<time>)")
    return ap


def presets(args):
    """--smoke, --group-only and --eos-only, applied to the parsed options."""
    if args.smoke:
        args.runs, args.sizes, args.count = 1, "1KB", args.count or 2000
        args.systems = "limit-read,limit-relay,limit-fair,limit-inline,bridge,bridge-bson,bridge-debezium,python,debezium"
        args.live_systems, args.rates, args.ramp = "bridge,debezium", "500", ""
        args.baseline_rates, args.peer_live_warmup = "500", 2.0
        args.live_duration, args.settle, args.outage = 2.0, 5.0, False
        args.copy_sizes, args.copy_systems = "1KB", "limit-copy,bridge-copy"
        args.bridge_copy_skip_after = args.bridge_copy_skip_after or 60.0
        # Tiny: 3 members, 3 pipelines (skipped on noida-db).
        args.group_variants, args.group_pipelines, args.group_count = "group-3", 3, 500
        args.group_timeout = args.group_timeout or 60.0
        args.eos_sizes, args.eos_intervals, args.eos_rate = "1KB", "250", 500
        args.eos_live_duration, args.eos_live_alo = 2.0, False
    if args.peers is None:
        args.peers = not args.smoke
    if args.group_only:
        args.sizes, args.no_live, args.outage, args.copy, args.group = "", True, False, False, True
        args.eos = False
    if args.eos_only:
        args.sizes, args.no_live, args.outage, args.copy, args.group = "", True, False, False, False
        args.eos = True
    if args.callgrind:
        args.sizes, args.no_live, args.outage, args.copy, args.group = "", True, False, False, False
        args.eos = False


def validate(ap, args):
    """Splits the lists and checks them (argparse errors exit 2)."""
    args.systems, args.live_systems = csv(args.systems), csv(args.live_systems)
    if not args.peers:
        args.systems = [s for s in args.systems if s not in PEERS]
        args.live_systems = [s for s in args.live_systems if s not in PEERS]
    args.copy_systems, args.copy_sizes = csv(args.copy_systems), csv(args.copy_sizes)
    args.group_variants = csv(args.group_variants)
    args.sizes, args.peer_sizes, args.eos_sizes = csv(args.sizes), csv(args.peer_sizes), csv(args.eos_sizes)
    def rate(x):
        if x.endswith("%") and x[:-1].isdigit():
            return x
        if not x.isdigit():
            ap.error(f"a live rate is events/s or N% of the writer's maximum, not {x!r}")
        return int(x)
    args.rates, args.baseline_rates, args.ramp = ([rate(x) for x in csv(v)]
                                                  for v in (args.rates, args.baseline_rates, args.ramp))
    args.eos_intervals = [int(x) for x in csv(args.eos_intervals)]
    args.callgrind_sizes, args.callgrind_systems = csv(args.callgrind_sizes), csv(args.callgrind_systems)
    for v in args.callgrind_sizes:
        if v not in callgrind.BACKLOGS:
            ap.error(f"--callgrind-sizes: one of {', '.join(callgrind.BACKLOGS)}")
    for v in args.group_variants:
        try:
            group.group_variant(v)
        except ValueError as e:
            ap.error(f"--group-variants: {e}")
    if args.group_pipelines < 1 or args.group_count < 1:
        ap.error("--group-pipelines and --group-count: at least 1")
    for name, values, allowed in (("--sizes", args.sizes, SIZES), ("--peer-sizes", args.peer_sizes, SIZES),
                                  ("--eos-sizes", args.eos_sizes, SIZES),
                                  ("--copy-sizes", args.copy_sizes, snapshot.COPY_SIZES),
                                  ("--copy-systems", args.copy_systems, snapshot.COPY_SYSTEMS)):
        for v in values:
            if v not in allowed:
                ap.error(f"{name}: one of {', '.join(allowed)}")
    for x in args.peer_setting:
        if x.split(":", 1)[0] not in PEERS or "=" not in x:
            ap.error(f"--peer-setting: SYSTEM:KEY=VALUE with SYSTEM one of {', '.join(PEERS)}")
    if any(i <= 0 for i in args.eos_intervals):
        ap.error("--eos-intervals: positive milliseconds")


def run_blocks(h, args):
    """Every block, --runs times; the results so far are saved after each (results.json)."""
    save = lambda: (h.work / "results.json").write_text(json.dumps(h.results, indent=1))  # noqa: E731
    for run in range(1, args.runs + 1):
        for size in args.sizes:
            catchup.catchup(h, size, run)
            save()
        if not args.no_live and args.live_systems:
            log(f"live run {run}")
            live.live(h, run)
            save()
        if args.copy and args.copy_systems:
            for size in args.copy_sizes:
                snapshot.copy(h, size, run)
            save()
        if args.group and args.group_variants:
            group.group(h, run)
            save()
        if args.eos:
            eos.run(h, run)
            save()
    if args.callgrind:
        callgrind.run(h)
        save()


def commit():
    """The checked-out commit (and whether the tree differs from it)."""
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src",
                                "bench", "Cargo.toml"], capture_output=True, text=True, timeout=10)
        return sha + (" (modified)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def main():
    ap = options()
    args = ap.parse_args()
    presets(args)
    validate(ap, args)
    # SIGTERM unwinds like Ctrl-C, so every process the harness started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    load = LoadSampler()
    servers = Servers(work, args.oplog_max_entries, args.broker)
    h = Harness(args, servers, work)
    failed = None
    try:
        wants = [s for s in args.systems + args.live_systems if s in PEERS]
        if args.smoke and not args.peers:
            h.skip("peers", "debezium and mongo-kafka are not part of --smoke (a Kafka Connect "
                            "worker's JVM start is ~10 s of CPU each); scripts/bench --smoke "
                            "--peers runs them")
        elif wants and (args.sizes or not args.no_live):
            why = peers.prepare(h)
            if why:
                h.skip("peers", why)
                args.systems = [s for s in args.systems if s not in PEERS]
                args.live_systems = [s for s in args.live_systems if s not in PEERS]
        run_blocks(h, args)
    except HarnessError as e:
        failed = e
        log(f"FAILED: {e}")
    except Exception as e:  # noqa: BLE001 - a bug of the harness: the results so far are kept
        failed = e
        log(f"FAILED: {e!r}\n{traceback.format_exc()}")
    except KeyboardInterrupt:
        failed = "interrupted"
        log("interrupted: stopping what the harness started")
    finally:
        servers.close()
    loads = load.stop()
    lo, med, hi = mmm(loads)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}, "
                   f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, shared",
        "versions": servers.versions, "runs": args.runs, "partitions": args.partitions,
        "compression": args.compression, "seconds": round(time.monotonic() - t0, 1),
        "broker": servers.broker, "commit": commit(), "command": sys.argv[1:],
        "load_average": {"min": lo, "median": med, "max": hi, "samples": loads} if loads else None,
    }
    (work / "results.json").write_text(json.dumps({"meta": meta, **h.results}, indent=1))
    md = report(h.results, meta, with_targets=not args.smoke)
    (work / "results.md").write_text(md + "\n")
    print(md)
    log(f"results in {work} ({meta['seconds']} s)")
    if failed == "interrupted":
        return 130
    return 1 if failed else 0
