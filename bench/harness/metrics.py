"""Reading a running bridge's Prometheus endpoint (/metrics): whether its change stream is
open, what it has in flight, and the samples of chosen families (the group and exactly-once
blocks read theirs from here)."""

import re
import urllib.request

STREAM_OPEN = re.compile(r"^mongo_kafka_bridge_stream_open\{[^}]*\} 1$", re.M)
IN_FLIGHT = "mongo_kafka_bridge_in_flight_events"


def scrape(addr, timeout=1.0):
    """The /metrics body of the bridge listening on `addr` (host:port, or a port on
    127.0.0.1); None when it does not answer."""
    if isinstance(addr, int):
        addr = f"127.0.0.1:{addr}"
    try:
        return urllib.request.urlopen(f"http://{addr}/metrics", timeout=timeout).read().decode()
    except OSError:
        return None


def stream_open(port):
    """True once the bridge on `port` has opened its change stream."""
    return bool(STREAM_OPEN.search(scrape(port) or ""))


def in_flight(port):
    """Events the bridge on `port` has enqueued and not yet seen acknowledged; -1 when it
    does not answer."""
    body = scrape(port)
    if body is None:
        return -1
    return sum(v for _, v in parse_metrics(body, (IN_FLIGHT,))[IN_FLIGHT])


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
