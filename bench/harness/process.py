"""Processes: the harness's log and its error, the processes it starts (stopped only by it:
SIGTERM, a bounded wait, then SIGKILL), and what /proc says about them and about the machine
(CPU seconds, per-thread CPU, RSS, busy time, load average); free loopback ports.

The lowest layer of the harness: it imports nothing of it."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


class HarnessError(Exception):
    """The harness or a system under test broke: the run ends with exit code 1."""


def proc_cpu_s(pid):
    """CPU seconds (utime + stime, all threads) of `pid` so far; NaN when it is gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / TICK
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
            cpu = (int(rest[11]) + int(rest[12])) / TICK
        except (OSError, IndexError, ValueError):
            continue
        out[name] = out.get(name, 0.0) + cpu
    return out


def thread_delta(before, after):
    """Per-thread CPU seconds spent between two thread_cpu_s() readings."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def proc_status_kib(pid, field):
    """A field of /proc/<pid>/status in KiB (VmRSS, VmHWM); 0 when it is gone."""
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


def machine_cpu_s():
    """CPU seconds the whole machine spent busy so far (/proc/stat: all but idle and iowait)."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return (sum(f) - f[3] - f[4]) / TICK
    except (OSError, ValueError, IndexError):
        return float("nan")


def self_cpu_s():
    """CPU seconds of this harness process (all its threads)."""
    t = os.times()
    return t.user + t.system


def own_cpu_s():
    """CPU seconds of this harness and of its children that have exited (`bench live`)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise HarnessError(f"port {port} not open after {timeout}s")


class Sampler:
    """Calls `read()` every `period` s in a thread; stop() returns every value read."""

    def __init__(self, read, period):
        self.read, self.period, self.values = read, period, []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            self.values.append(self.read())
            self.done.wait(self.period)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.values


class RssSampler(Sampler):
    """VmRSS of `pid` every 50 ms; stop() returns the peak in MiB."""

    def __init__(self, pid):
        super().__init__(lambda: proc_status_kib(pid, "VmRSS"), 0.05)

    def stop(self):
        return max(super().stop(), default=0) / 1024


class LoadSampler(Sampler):
    """The machine's 1-minute load average every 10 s, for the report: the machine is shared
    with other work, which the figures of one run cannot see otherwise."""

    def __init__(self):
        super().__init__(lambda: os.getloadavg()[0], 10.0)


def rss_parts_kib(pid):
    """RSS of `pid` by kind of mapping (KiB): `file` (the binary and its libraries, shared and
    clean), `anon` (the heap and glibc's arenas, thread stacks, large allocations)."""
    parts = {"file": 0, "anon": 0}
    kind = "anon"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line.startswith("Rss:"):
                    parts[kind] += int(line.split()[1])
                elif "-" in line.split(" ", 1)[0]:
                    fields = line.split()
                    kind = "file" if len(fields) > 5 and fields[5].startswith("/") else "anon"
    except OSError:
        pass
    return parts


class RssPartsSampler(Sampler):
    """rss_parts_kib(pid) every 250 ms; stop() returns the parts at the peak, in MiB."""

    def __init__(self, pid):
        super().__init__(lambda: rss_parts_kib(pid), 0.25)

    def stop(self):
        peak = max(super().stop(), key=lambda p: sum(p.values()), default={"file": 0, "anon": 0})
        return {k: v / 1024 for k, v in peak.items()}

