"""The live block: each system running while `bench live` writes a 6:3:1
insert/update/delete mix of ~1 KB documents at fixed rates and consumes the system's topic:
write -> consumer latency p50/p99/max, and whether the rate was sustained. The bridge and
limit-relay (the same stream read and its events produced as the server's bytes, no bridge logic:
the servers' share of the latency) run at --rates and --ramp, the baselines and the peers at
--baseline-rates; then the bridge's RSS during a Kafka outage (broker SIGSTOPped while the
collection keeps being written)."""

import subprocess
import time

from . import metrics, peers
from .catchup import limit_argv
from .kafka import Kafka
from .process import HarnessError, RssPartsSampler, RssSampler, log, stop_process
from .systems import DB, PEERS


def live(h, run):
    """One run of the block: each of --live-systems on a collection and topic of its own."""
    args = h.args
    kafka = Kafka(h.servers.block_broker())
    try:
        writer_max(h, run)
        for system in args.live_systems:
            coll = f"live_{system.replace('-', '_')}_{run}_{int(time.time())}"
            if system in PEERS:
                peer = peers.live_start(h, kafka, system, coll)
                try:
                    steps(h, system, peer.pid, lambda: peer.alive(), coll, peer.topic, run)
                finally:
                    peer.stop()
                    kafka.delete(peer.topic)
                continue
            topic = f"bench.{coll}"
            kafka.create(topic, args.partitions)
            proc = limit_relay(h, coll, topic) if system == "limit-relay" else h.start(system, coll, topic)
            try:
                wait_listening(system, proc)
                steps(h, system, proc.pid, lambda: proc.poll() is None, coll, topic, run)
                if system == "bridge" and args.outage and h.servers.kafka_managed:
                    outage(h, kafka, proc, coll, topic, run)
            finally:
                stop_process(proc)
            kafka.delete(topic)
    finally:
        kafka.close()


def writer_max(h, run):
    """The writer's maximum: `bench load` asked for far more than it can write, alone (no system
    reads the collection), for --live-duration. Rates given as N% are taken of it."""
    args = h.args
    if not any(isinstance(r, str) for r in [*args.rates, *args.ramp, *args.baseline_rates]):
        return
    coll = f"live_writer_{run}_{int(time.time())}"
    w = h.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate", "1000000",
                "--duration", str(args.live_duration))
    h.results.setdefault("writer", []).append({"run": run, "rate": w["rate"]})
    log(f"  live: the writer's maximum {w['rate']:.0f} writes/s (6:3:1 mix, 1 KB, alone)")
    h.writer_rate = w["rate"]


def resolve(h, rates):
    """(events/s, step) of each step: N% of this run's writer maximum, rounded to 100/s, is
    the step "N %" (the same step in every run, whatever the run's maximum); a rate is its own
    step."""
    out = []
    for r in rates:
        if isinstance(r, str):
            out.append((max(100, int(round(h.writer_rate * int(r[:-1]) / 100 / 100) * 100)),
                        f"{r[:-1]} %"))
        else:
            out.append((r, r))
    return out


def limit_relay(h, coll, topic):
    """`bench limit --mode relay` from the collection's current position, with no end (it is
    stopped after its steps): the live reference."""
    h.init_position("limit-relay", coll, topic)
    argv, _ = limit_argv(h, "limit-relay", coll, topic, 2**62)
    argv = [h.bench_bin, *argv, "--uri", h.servers.uri, "--bootstrap", h.servers.bootstrap]
    logf = open(h.work / f"limit-relay-{coll}.log", "a")
    return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT)


def wait_listening(system, proc):
    """Lets the system open its stream (the writer starts after it is listening), then warms
    its producer up (the first record fetches the topic's metadata and the idempotent
    producer id, a ~1 s outlier in the first step otherwise)."""
    deadline = time.monotonic() + 30
    if system == "bridge":
        while time.monotonic() < deadline and not metrics.stream_open(proc.metrics_port):
            time.sleep(0.1)
    else:
        time.sleep(2.0)


def steps(h, system, pid, running, coll, topic, run):
    """The fixed-rate steps of one system (a warm-up write first, not measured)."""
    args = h.args
    h.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate", "200", "--duration", "1")
    time.sleep(1.0)
    paced = system in ("bridge", "limit-relay")
    rates = resolve(h, args.rates if paced else args.baseline_rates)
    ramp = resolve(h, args.ramp) if paced else []
    for rate, step in [*rates, *ramp]:
        if not running():
            raise HarnessError(f"{system} exited during the live run (see {h.work})")
        sampler = RssSampler(pid)
        r = h.bench("live", "--db", DB, "--coll", coll, "--topic", topic, "--rate", str(rate),
                    "--duration", str(args.live_duration), "--settle", str(args.settle),
                    timeout=args.live_duration + args.settle + 60)
        r.update(system=system, run=run, rate=rate, step=step,
                 ramp=(rate, step) in ramp and (rate, step) not in rates,
                 rss_mib=sampler.stop())
        r["sustained"] = r["write_rate"] >= 0.9 * rate and r["delivered_within_1s_fraction"] >= 0.95
        h.results["live"].append(r)
        log(f"  live {system:11} {rate:6}/s: wrote {r['write_rate']:8.0f}/s  p50 {r['p50_ms']:7.1f} ms"
            f"  p99 {r['p99_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms"
            f"  in 1s {100 * r['delivered_within_1s_fraction']:5.1f}%  rss {r['rss_mib']:.1f} MiB")
        split = r.get("split") or {}
        if split.get("create_time_fraction"):
            log(f"  {'':16} write → enqueue p50 {split['write_to_enqueue_p50_ms']:7.1f} ms"
                f"  p99 {split['write_to_enqueue_p99_ms']:7.1f} ms; enqueue → consumer"
                f" p50 {split['enqueue_to_consumer_p50_ms']:7.1f} ms"
                f"  p99 {split['enqueue_to_consumer_p99_ms']:7.1f} ms")


def outage(h, kafka, proc, coll, topic, run):
    """Bridge RSS while the broker is frozen and the collection keeps being written."""
    args = h.args
    sampler, parts = RssSampler(proc.pid), RssPartsSampler(proc.pid)
    h.servers.freeze_kafka(True)
    try:
        w = h.bench("load", "--db", DB, "--coll", coll, "--size", "1024", "--rate",
                    str(args.outage_rate), "--duration", str(args.outage_seconds))
    finally:
        h.servers.freeze_kafka(False)
    during, at_peak = sampler.stop(), parts.stop()
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
        if metrics.in_flight(proc.metrics_port) == 0 and high > start_high:
            recovered = time.monotonic() - t0
            break
        time.sleep(0.1)
    r = {"run": run, "written": w["inserts"] + w["updates"] + w["deletes"], "records": records,
         "seconds": args.outage_seconds, "rss_mib": during, "recovered_s": recovered,
         "file_mib": at_peak["file"], "anon_mib": at_peak["anon"],
         "budget_mib": 64 + 16}
    h.results["outage"].append(r)
    log(f"  outage: {r['written']} writes in {args.outage_seconds}s with Kafka frozen: bridge peak RSS"
        f" {during:.1f} MiB (file-backed {at_peak['file']:.1f}, anonymous {at_peak['anon']:.1f}),"
        f" drained {recovered:.1f}s after thaw")
