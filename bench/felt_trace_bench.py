"""Who kept the target's heartbeat off its core during a scan (not a test).

bench/programs/peer_heap.c's heartbeat thread spins on the clock; its
longest gap is the stall the target feels (bench/peer_lsan_bench.py). This
bench says where each gap went: it traces the scheduler's switches and
wake-ups (sched:sched_switch, sched:sched_wakeup, in a tracefs instance of
its own, so root) while `unreachable-cli scan` runs, and for every time the
heartbeat left its core it names why and for how long: stopped by the scan,
blocked (a page fault waiting for the copy-on-write server, a lock),
preempted by a scanner thread, by the snapshot child, by the target's own
threads (the shim's helper among them), or by another process, with what
the other cores ran meanwhile (a scanner thread that took the heartbeat's
core while another core was idle or ran the scanner too is the scan's
doing); and, once woken, how long it waited for a core and who had it. On
a machine where other work runs the "other" waits follow that work; the
scanner's, the child's and the stops are the scan's own, whatever the
load. Each core's tick is traced too (irq_vectors:local_timer_entry): a
stretch longer than a tick with no event on any core is time the host of a
virtual machine did not run it, which a gap holds with the heartbeat on
its core. And how long two or more of the scan's threads wanted a core at
once (running or runnable), by thread: beside a target whose busy threads
leave one core free, that is a core the target's thread shares. The CLI's
Python threads carry their names (`untrack`, the tracker's beat) in the
trace.

    python bench/felt_trace_bench.py [BYTES MIN MAX THREADS] [--modes copy,concurrent]
        [--repeat N] [--scan-args ARGS]

The target runs in a session of its own, as a service does (docs/pause.md,
"CPU share").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.peer_lsan_bench import Heap, build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.capture.target import open_target  # noqa: E402

TRACE = Path("/sys/kernel/tracing/instances") / f"felt_trace_bench.{os.getpid()}"
SWITCH = re.compile(
    r"\[(\d+)\].*?\s([\d.]+): sched_switch: prev_comm=.* prev_pid=(\d+) prev_prio=-?\d+ "
    r"prev_state=(\S+) ==> next_comm=(.*) next_pid=(\d+) next_prio=(-?\d+)"
)
WAKEUP = re.compile(r"\s([\d.]+): sched_wakeup: comm=.* pid=(\d+) prio=-?\d+ target_cpu=(\d+)")
STAMP = re.compile(r"\]\s+\S+\s+([\d.]+): ")
# A core that runs a thread takes the kernel's tick every 4 ms (HZ 250) at
# least, and the heartbeat's core always runs one: a stretch longer than
# this with no event on any core is time the machine's host did not run it.
SILENT_MS = 4.5
SHOWN = 1.0  # ms: waits at least this long are listed one by one
# The CLI, its Python threads named in the kernel (PR_SET_NAME) as in Python.
NAMED = """
import ctypes, sys, threading
from unreachable.cli.main import main
run = threading.Thread._bootstrap_inner
def named(self):
    ctypes.CDLL(None).prctl(15, self.name[:15].encode(), 0, 0, 0)
    run(self)
threading.Thread._bootstrap_inner = named
sys.exit(main())
"""


def tids(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


def children(pid: int) -> set[int]:
    out: set[int] = set()
    for t in tids(pid):
        try:
            out |= {int(c) for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()}
        except OSError:
            pass
    return out


class Watch:
    """The scanner's threads and the snapshot child's, as they come and go
    (a marking team lives for the mark only)."""

    def __init__(self, scanner: int, target: int) -> None:
        self.pid, self.target = scanner, target
        self.scanner: set[int] = set()
        self.child: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.wait(0.002):
            self.scanner |= tids(self.pid)
            for c in children(self.target):
                self.child |= tids(c) | {c}

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


@dataclass
class Waits:
    """The heartbeat's times off its core, by cause: (longest ms, count)."""

    heartbeat: int
    own: set[int]
    scanner_pid: int
    scanner: set[int]
    child: set[int]
    by_cause: dict[str, list[float]] = field(default_factory=dict)
    silences: list[float] = field(default_factory=list)  # ms, each over SILENT_MS
    long: list[tuple[float, str, float]] = field(default_factory=list)  # ms, cause, when

    def who(self, pid: int, prio: int) -> str:
        if pid in self.scanner:
            which = "scanner's main thread" if pid == self.scanner_pid else "scanner's thread"
            return f"{which} (realtime)" if prio < 100 else which
        if pid in self.child:
            return "snapshot child"
        if pid in self.own:
            return "target's own thread"
        return "idle" if pid == 0 else "other process"

    def add(self, cause: str, ms: float, at: float) -> None:
        kept = self.by_cause.setdefault(cause, [0.0, 0])
        kept[0] = max(kept[0], ms)
        kept[1] += 1
        if ms >= SHOWN:
            self.long.append((ms, cause, at))

    def wanting(self, trace: str) -> dict[str, float]:
        """ms during which two or more scanner threads wanted a core at
        once (running or runnable), by their names."""
        runnable: set[int] = set()
        name: dict[int, str] = {self.scanner_pid: "main"}
        out: dict[str, float] = {}
        since, tids = 0.0, set()
        for line in trace.splitlines():
            if (m := SWITCH.search(line)) is not None:
                at, prev, nxt = float(m[2]), int(m[3]), int(m[6])
                if not m[4].startswith("R"):
                    runnable.discard(prev)
                if nxt in self.scanner:
                    runnable.add(nxt)
                    name.setdefault(nxt, m[5].strip())
            elif (w := WAKEUP.search(line)) is not None and int(w[2]) in self.scanner:
                at = float(w[1])
                runnable.add(int(w[2]))
            else:
                continue
            if len(runnable) >= 2:
                since, tids = since or at, tids | runnable
            elif since:
                key = "+".join(sorted(name.get(t, str(t)) for t in tids))
                out[key] = out.get(key, 0.0) + (at - since) * 1000
                since, tids = 0.0, set()
        return out

    def read(self, trace: str) -> None:
        running: dict[int, tuple[int, int]] = {}  # cpu: (pid, prio)
        off_at, cause = None, ""
        woken: tuple[float, str] | None = None
        last = None
        for line in trace.splitlines():
            if (stamp := STAMP.search(line)) is not None:
                if last is not None and (float(stamp[1]) - last) * 1000 > SILENT_MS:
                    self.silences.append((float(stamp[1]) - last) * 1000)
                last = float(stamp[1])
            m = SWITCH.search(line)
            if m is None:
                w = WAKEUP.search(line)
                if w and int(w[2]) == self.heartbeat and off_at is not None:
                    at = float(w[1])
                    self.add(cause, (at - off_at) * 1000, off_at)
                    pid, prio = running.get(int(w[3]), (0, 120))
                    woken, off_at = (at, f"{cause.split(' (')[0]}; {self.who(pid, prio)}"), None
                continue
            cpu, at = int(m[1]), float(m[2])
            prev, state, nxt, prio = int(m[3]), m[4], int(m[6]), int(m[7])
            if prev == self.heartbeat:
                off_at, woken = at, None
                cause = self.why(state, nxt, prio, m[5].strip(), cpu, running)
            elif nxt == self.heartbeat:
                if off_at is not None:
                    self.add(cause, (at - off_at) * 1000, off_at)
                elif woken is not None:
                    waited = (at - woken[0]) * 1000
                    was, had = woken[1].split("; ")
                    self.add(
                        f"woken when {was}, waited for a core ({had} had it)", waited, woken[0]
                    )
                off_at = woken = None
            running[cpu] = (nxt, prio)

    def why(self, state: str, nxt: int, prio: int, comm: str, cpu: int, running: dict) -> str:
        if "t" in state or "T" in state:
            return "stopped"
        if not state.startswith("R"):
            return f"blocked ({state})"
        cause = f"preempted by {self.who(nxt, prio)}"
        if nxt in self.own:
            cause += f" ({comm})"  # the shim's helper is ur-helper
        # What the other cores ran: a scanner thread that took this core
        # while another was idle or its own is the scan's doing; one with
        # every other core taken by other work had nowhere else to go.
        others = sorted({self.who(*running[c]) for c in running if c != cpu})
        return f"{cause}, other cores: {'+'.join(others) or '?'}"


def write(path: Path, text: str) -> None:
    path.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", nargs="*", default=["1000000000", "16", "1040", "1"])
    ap.add_argument("--modes", default="copy,concurrent")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--scan-args", default="", help="more arguments for each scan")
    args = ap.parse_args()
    exe = build(Path(tempfile.mkdtemp()), sanitize=False)
    shape = (int(args.shape[0]), int(args.shape[1]), int(args.shape[2]), int(args.shape[3]))
    heap = Heap(exe, shape, {"LD_PRELOAD": str(shim_path())}, placement="service")

    TRACE.mkdir()
    try:
        pid = heap.proc.pid
        print(f"READY {heap.blocks}", flush=True)
        helper = open_target(pid).header.helper_tid
        own = tids(pid)
        # peer_heap starts the heartbeat after every worker: its newest thread.
        heartbeat = max(own - {helper})
        write(TRACE / "buffer_size_kb", "32768")
        for event in ("sched/sched_switch", "sched/sched_wakeup", "irq_vectors/local_timer_entry"):
            write(TRACE / "events" / event / "enable", "1")
        for _ in range(args.repeat):
            for mode in args.modes.split(","):
                scan(pid, mode, heap.ask, Waits(heartbeat, own, 0, set(), set()), args.scan_args)
    finally:
        write(TRACE / "tracing_on", "0")
        heap.close()
        TRACE.rmdir()
    return 0


def scan(pid: int, mode: str, ask, waits: Waits, extra: str) -> None:
    write(TRACE / "tracing_on", "0")
    write(TRACE / "trace", "")
    ask("r")
    write(TRACE / "tracing_on", "1")
    t0 = time.monotonic()
    cli = subprocess.Popen(
        [sys.executable, "-c", NAMED, "scan", str(pid), "--json"]
        + ["--snapshot", mode, "--symbol-budget", "5", *shlex.split(extra)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watch = Watch(cli.pid, pid)
    out = cli.communicate()[0]
    watch.stop()
    wall = time.monotonic() - t0
    write(TRACE / "tracing_on", "0")
    gap = int(ask("g").split()[1]) / 1000
    report = json.loads(out)
    waits.scanner, waits.child, waits.scanner_pid = watch.scanner, watch.child, cli.pid
    trace = (TRACE / "trace").read_text()
    waits.read(trace)
    causes = "; ".join(f"{k} {v[0]:.1f} ms ({v[1]:.0f})" for k, v in sorted(waits.by_cause.items()))
    print(
        f"{mode}: pause {report['pause_ms']:.1f} ms, mark_threads {report.get('mark_threads')},"
        f" longest gap {gap:.1f} ms, scan {wall:.2f} s, load average {os.getloadavg()[0]:.1f}."
        f" Off its core, longest (times): {causes}",
        flush=True,
    )
    want = waits.wanting(trace)
    print(
        f"    the scan's threads wanted two cores or more {sum(want.values()):.1f} ms: "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in sorted(want.items(), key=lambda kv: -kv[1])),
        flush=True,
    )
    if waits.silences:
        # A gap the heartbeat spent on its core, and no core ran anything.
        print(
            f"    no event on any core, not even its tick: {len(waits.silences)} times over"
            f" {SILENT_MS} ms, at most {max(waits.silences):.1f} ms",
            flush=True,
        )
    first = min((at for _, _, at in waits.long), default=0.0)
    for ms, cause, at in sorted(waits.long, reverse=True)[:5]:
        print(f"    {ms:.1f} ms {cause}, {1000 * (at - first):.0f} ms after the first listed")


if __name__ == "__main__":
    sys.exit(main())
