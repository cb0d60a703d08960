"""The instruction block (scripts/bench --callgrind): instructions per event of the bridge and
of `limit-inline` (bench/src/inline.rs: read, encode with the bridge's encoder, produce, in
one loop, none of the bridge's machinery), each process run whole under
`valgrind --tool=callgrind`.

Instructions per event = (Ir(large backlog) − Ir(small backlog)) / (large − small), so the
start-up and shutdown of each process cancel out. Callgrind counts the guest's instructions,
whatever the other core does: on the same binary and input the count repeats, so the ratio
bridge ÷ limit-inline is the figure to drive (seconds on this shared machine are not).

What would otherwise count in proportion to valgrind's slowness is off or pinned for both:
librdkafka statistics (`statistics.interval.ms = 0`), the bridge's history sampler
(`history_interval_ms = 0`), `linger.ms` and the batch sizes (PROPERTIES); the bridge's
lease and commit interval are raised (a process 50× slower must not lose its lease, and its
checkpoint commits per second would count with the run's length).

The bridge's profile at the large 1 KB backlog (callgrind_annotate --inclusive=yes) is kept
in the run's directory and its top inclusive costs go into results.md."""

import re
import subprocess
import time

from .kafka import Kafka
from .process import HarnessError, log, stop_process
from .systems import DB, SIZES

# Backlog sizes per document size: (small, large). The difference is what is counted.
BACKLOGS = {"1KB": (1000, 3000), "20KB": (300, 900), "250KB": (40, 120)}
SYSTEMS = ["bridge", "limit-inline", "bridge-bson", "limit-inline-bson"]
# Pinned for every system: librdkafka's batching and its statistics timer.
PROPERTIES = {"linger.ms": "5", "batch.size": "1000000", "batch.num.messages": "10000",
              "statistics.interval.ms": "0"}
# The bridge's settings for these runs (the lease outlasts a run 50× slower than native).
BRIDGE_SETTINGS = {"lease_ms": 600_000, "commit_interval_ms": 60_000,
                   "liveness_timeout_ms": 600_000}
VALGRIND = ["valgrind", "--tool=callgrind", "--dump-instr=no"]
TOP = 15


def available():
    """Why the block cannot run here, or None."""
    try:
        subprocess.run(["valgrind", "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "valgrind not found (apt-get install valgrind)"
    return None


def total_ir(path):
    """The total instruction count (Ir) of a callgrind output file."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise HarnessError(f"no instruction total in {path}")


def bridge_settings():
    """The bridge's config of these runs: ([bridge] lines, [kafka.properties] lines)."""
    bridge = "".join(f"{k} = {v}\n" for k, v in BRIDGE_SETTINGS.items())
    props = "".join(f'"{k}" = "{v}"\n' for k, v in PROPERTIES.items())
    return bridge, props


def run_one(h, kafka, system, coll, topic, count, out):
    """Drains the backlog with `system` under callgrind, writing `out`; returns Ir."""
    prefix = [*VALGRIND, f"--callgrind-out-file={out}"]
    fmt = "bson" if system.endswith("-bson") else "json"
    if system.startswith("limit-inline"):
        argv = [h.bench_bin, "limit", "--mode", "inline", "--db", DB, "--coll", coll,
                "--count", str(count), "--token", str(h.work / f"token-{coll}"),
                "--topic", topic, "--format", fmt, "--uri", h.servers.uri,
                "--bootstrap", h.servers.bootstrap]
        argv += [f"--property={k}={v}" for k, v in PROPERTIES.items()]
        logf = open(h.work / f"{system}-{coll}.log", "a")
        proc = subprocess.run([*prefix, *argv], stdout=subprocess.PIPE, stderr=logf, text=True,
                              timeout=1800)
        if proc.returncode != 0:
            raise HarnessError(f"{system} under callgrind exited with {proc.returncode} "
                               f"(see {h.work})")
    else:
        proc = h.start(system, coll, topic, callgrind=prefix)
        try:
            deadline = time.monotonic() + 1800
            while kafka.high(topic, h.args.partitions) < count:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise HarnessError(f"{system} under callgrind: {kafka.high(topic, 1)}/"
                                       f"{count} delivered (see {h.work})")
                time.sleep(0.05)
        finally:
            rc = stop_process(proc, timeout=600)
        if rc != 0:
            raise HarnessError(f"{system} under callgrind exited with {rc} on SIGTERM")
    return total_ir(out)


def backlog(h, size, count, run, systems):
    """One backlog of `count` documents drained by each system; returns {system: Ir}."""
    coll = f"cg_{size}_{count}_{run}_{int(time.time())}"
    kafka = Kafka(h.servers.block_broker())
    try:
        topics = {s: f"bench.{coll}.{s}" for s in systems}
        for s in systems:
            kafka.create(topics[s], h.args.partitions)
            h.init_position(s, coll, topics[s])
        h.bench("load", "--db", DB, "--coll", coll, "--size", str(SIZES[size]),
                "--count", str(count))
        irs = {}
        for s in systems:
            h.servers.settle()
            out = h.work / f"callgrind-{s}-{size}-{count}-{run}.out"
            irs[s] = run_one(h, kafka, s, coll, topics[s], count, out)
            log(f"  callgrind {size} ×{count} run {run}: {s:18} {irs[s]:>15,} Ir")
            kafka.delete(topics[s])
        return irs
    finally:
        kafka.close()


# Frames every thread runs through (thread start, the runtime's scheduler, std's closures):
# left out of the profile table, which lists the bridge's own costs and the libraries' beneath.
FRAMES = re.compile(r"^(start_thread|clone3?|thread_start|<?std::|<?core::|"
                    r"tokio::runtime::|<tokio::runtime::|__rust_begin|main$|__libc_start)")


def profile(path, top=TOP):
    """The `top` inclusive costs of a callgrind output, without the frames every thread runs
    through: [(share %, Ir, function)], one row per function (inlined copies summed)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=no",
                           "--threshold=100", str(path)],
                          capture_output=True, text=True, timeout=600).stdout
    total = total_ir(path)
    by = {}
    for line in text.split("Auto-annotated")[0].splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$", line)
        if not m or "PROGRAM TOTALS" in line or re.search(r"\(\d[\d,]*x\)", line):
            continue
        name = re.sub(r"\s*\[[^\]]*\]$", "", m.group(2))
        name = re.sub(r"^.*?\.(rs|c|S|h):", "", name).removeprefix("???:")
        if FRAMES.match(name) or "{{closure}}" in name and "mongo_kafka_bridge" not in name:
            continue
        # Inlined copies are listed once per source file: the largest is the function's.
        by[name] = max(by.get(name, 0), int(m.group(1).replace(",", "")))
    rows = sorted(((100.0 * ir / total, ir, name) for name, ir in by.items()), key=lambda r: -r[1])
    return rows[:top]


def run(h):
    """Every size of --callgrind-sizes, --runs times; results in h.results['callgrind']."""
    why = available()
    if why:
        h.skip("callgrind", why)
        return
    systems = [s for s in SYSTEMS if s in h.args.callgrind_systems]
    h.overrides = bridge_settings()
    for run_no in range(1, h.args.runs + 1):
        for size in h.args.callgrind_sizes:
            small, large = BACKLOGS[size]
            log(f"callgrind {size} run {run_no}: backlogs of {small} and {large} events")
            a = backlog(h, size, small, run_no, systems)
            b = backlog(h, size, large, run_no, systems)
            for s in systems:
                per_event = (b[s] - a[s]) / (large - small)
                h.results["callgrind"].append({"system": s, "size": size, "run": run_no,
                                               "small": small, "large": large, "ir_small": a[s],
                                               "ir_large": b[s], "ir_per_event": per_event})
                log(f"  {size} {s:18} {per_event:12,.0f} instructions/event")
            if run_no == 1 and "bridge" in systems:
                path = h.work / f"callgrind-bridge-{size}-{large}-{run_no}.out"
                h.results["callgrind_profile"][size] = profile(path)
