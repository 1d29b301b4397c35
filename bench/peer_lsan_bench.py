"""Side by side with LeakSanitizer on the same heap (not a test).

bench/programs/peer_heap.c is built twice: plain, run under the shim and
scanned by `unreachable-cli scan` in every snapshot mode; and with
`-fsanitize=leak`, where LSan's own `__lsan_do_recoverable_leak_check` runs
inside it (LSan stops the whole process for its whole check). For each heap
shape it prints, in one run: LSan's check time; for each of our modes the
pause we report, the whole scan (the CLI's wall time, Python start-up
included, its modules byte-compiled first as an installed package's are)
and the CPU time it took (the scanner's, and the snapshot
child's once reaped), the stall the target itself felt (its heartbeat
thread's gaps during the scan: the longest that overlaps one of the scan's
stops, from the stop's start, the pause as the target felt it, and the
longest elsewhere, the
CPU the scan's threads took from it or what the machine does anyway;
against the longest gap with no scan, alone and beside a process that
spins in the bench's session, where the scanner runs: a virtual machine's
host may run its vCPUs less when all of them are busy), the CPU the
target's own threads had during the scan (their CPU
time over the scan's wall time, in cores: what the scan left it), the
scanner's peak RSS and what it comes to per allocation beside the goal of
64 MB + 48 B per allocation (docs/pause.md, "The scanner's memory"); and
the time memcpy takes to read as many bytes as the heap holds, the limit
for anything that reads the heap. On a machine shared with other work the
wall times follow the load; the CPU times (the scanner's, and the LSan
process's during its check) are what the work costs.

    python bench/peer_lsan_bench.py [--quick] [--big] [--results] [--modes fork,copy,...]
        [--threads N] [--shape BYTES,MIN,MAX,THREADS] [--no-lsan] [--scan-args ARGS]
        [--placement service|shared|cgroup] [--nice N]

Default shapes stay within 1 GB (the machine is shared); --big adds 2.1 GB
of small blocks on one thread and 4 GB on eight; --threads keeps the shapes
with that many threads.

Where the target runs decides the CPU a scan gets while the target runs
(docs/pause.md, "CPU share"): the kernel shares a core between groups
first, and between the threads of a group after, and the heap's busy
threads outnumber the cores. A service is a group of its own: systemd
starts it in a session and a cgroup of its own, and the CLI runs in a login
session, so with autogroups (/proc/sys/kernel/sched_autogroup_enabled) or a
CPU controller its scan shares the machine with the service group against
group. The bench places the target that way by default (`service`: a
session of its own, so an autogroup of its own); `cgroup` also puts it in a
CPU cgroup of its own where one can be made (cgroup v1's cpu hierarchy, or
v2 with the cpu controller); `shared` leaves it in the bench's session,
where the scanner's threads and the target's share one group thread by
thread. The placement is printed with the table. --nice runs the scanner
at that nice value: a weight against the other threads of its own group,
so it matters where the scanner shares the target's group.
--results replaces this bench's section of bench/RESULTS.md and its table
in README.md (the "Numbers" section's second table).
"""

from __future__ import annotations

import argparse
import compileall
import ctypes
import json
import os
import platform
import re
import resource
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

PROGRAM = REPO / "bench" / "programs" / "peer_heap.c"
README = REPO / "README.md"
MARK = "<!-- peer_lsan_bench -->"
# The CLI, saying its own peak RSS as it exits: the rusage of a child counts
# the memory of the process it was started from (subprocess's vfork shares
# this bench's, and exec records its peak), so wait4's ru_maxrss showed this
# bench's own peak (145 MB once memcpy_s had run) for a scanner of 25.
CLI = """
import atexit, sys
from unreachable import _native
from unreachable.cli.main import main

# Every stop's window on the target's clock (Session.window_ns), so that the
# target's gaps can be set against them.
sessions = []
made = _native.Session

def session(*args, **kwargs):
    sessions.append(made(*args, **kwargs))
    return sessions[-1]

_native.Session = session

def peak() -> None:
    stops = " ".join(f"{w[0]},{w[1]}" for s in sessions if (w := s.window_ns))
    sys.stderr.write(f"\\n{STOPS} {stops}\\n")
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                sys.stderr.write(f"\\n{PEAK} {line.split()[1]}\\n")

atexit.register(peak)
sys.exit(main())
"""
PEAK = "peer_lsan_bench peak kB"
STOPS = "peer_lsan_bench stops ns"
# --nice: the scanner's nice value (negative ones need CAP_SYS_NICE); it
# weighs the scanner's threads against the others of its scheduling group.
CLI_NICE: int | None = None
MODES = ("fork", "copy", "stopped", "concurrent")
# The goal for what a scan holds: this much, and PER_ALLOCATION bytes more
# per allocation, in every mode, everything counted (docs/pause.md, "The
# scanner's memory"): a stopped scan copies at most 64 MiB of the target,
# a copy snapshot holds the pages written during the scan.
FIXED_MB = 64
PER_ALLOCATION = 48
# (heap bytes, smallest block, largest block, threads)
QUICK = [(100_000_000, 16, 1040, 1)]
DEFAULT = [
    (100_000_000, 16, 1040, 1),
    (100_000_000, 16, 65536, 8),
    # About 1M blocks (64-1040 B average ~500 B): a million allocations
    # without the gigabyte.
    (520_000_000, 64, 1040, 1),
    (1_000_000_000, 240, 240, 8),
    (1_000_000_000, 16, 1040, 1),
]
# 2.1 GB of small blocks (~5.7M) would double the default run's time.
BIG = [(2_100_000_000, 16, 1040, 1), (4_000_000_000, 16, 1040, 8)]


def build(out: Path, sanitize: bool) -> Path:
    exe = out / ("peer_heap_lsan" if sanitize else "peer_heap")
    cmd = ["cc", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-o", str(exe), str(PROGRAM)]
    if sanitize:
        cmd.insert(1, "-fsanitize=leak")
    subprocess.run(cmd, check=True)
    return exe


class Heap:
    """One peer_heap process, spoken to over its stdin/stdout."""

    def __init__(
        self,
        exe: Path,
        shape: tuple[int, int, int, int],
        env: dict[str, str],
        placement: str = "shared",
    ) -> None:
        self.proc = subprocess.Popen(
            [str(exe), *(str(a) for a in shape)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
            text=True,
            start_new_session=placement != "shared",
        )
        self.cgroup = cpu_cgroup(self.proc.pid) if placement == "cgroup" else None
        ready = self.line(600)
        if not ready.startswith("READY"):
            raise SystemExit(f"peer_heap did not start: {ready!r}")
        self.blocks = int(ready.split()[1])

    def line(self, timeout: float = 120) -> str:
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise SystemExit("peer_heap did not answer")
        return self.proc.stdout.readline().strip()

    def ask(self, cmd: str, timeout: float = 120) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.line(timeout)

    def gap_ms(self) -> float:
        return int(self.ask("g").split()[1]) / 1000

    def gaps(self) -> list[tuple[int, int]]:
        """The heartbeat's gaps of 0.2 ms or more since r: (start, end) in
        CLOCK_MONOTONIC ns."""
        out, line = [], self.ask("h")
        assert self.proc.stdout is not None
        while line != "end":  # the rest of the answer is already buffered or on its way
            start, end = line.split()[:2]
            out.append((int(start), int(end)))
            line = self.proc.stdout.readline().strip()
        return out

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.cgroup:
            remove_cgroup(self.cgroup)


CGROUP_NAME = f"unreachable-bench-target.{os.getpid()}"


def cpu_cgroup(pid: int) -> Path | None:
    """Move pid into a CPU cgroup of its own beside this bench's (as
    systemd gives each service one), or None where none can be made."""
    v1 = Path("/sys/fs/cgroup/cpu")
    v2 = Path("/sys/fs/cgroup")
    if (v1 / "cpu.shares").exists():
        parent = v1 / Path(own_cgroup("cpu")).relative_to("/")
    elif own_cgroup("") == "/" and "cpu" in read_or_empty(v2 / "cgroup.subtree_control"):
        # v2 only from its root: a cgroup with processes of its own (this
        # bench's, below the root) cannot hand controllers to children.
        parent = v2
    else:
        return None
    group = parent / CGROUP_NAME
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(f"{pid}\n")
    except OSError:
        return None
    return group


def read_or_empty(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def own_cgroup(controller: str) -> str:
    """This process's cgroup path in the hierarchy of controller ("" for v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (not controller and names == ""):
            return path
    return "/"


def remove_cgroup(group: Path) -> None:
    # The killed target's threads leave it as they are reaped.
    for _ in range(100):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.01)


def placement_of(pid: int) -> str:
    """Where a process runs, as the scheduler groups it: its session, its
    autogroup and its CPU cgroup."""
    try:
        # Empty for the root autogroup (a process that never left it).
        autogroup = next(iter(Path(f"/proc/{pid}/autogroup").read_text().split()), "root autogroup")
    except OSError:
        autogroup = "-"
    cpu = "/"
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if "cpu" in names.split(","):
            cpu = path
    return f"sid {os.getsid(pid)}, {autogroup}, cpu cgroup {cpu}"


@dataclass
class Scan:
    pause_ms: float = float("nan")
    hold_ms: float = float("nan")  # the pause from its last thread stopped on
    scan_s: float = float("nan")
    cpu_s: float = float("nan")
    # The longest gap that overlaps one of the scan's stops (the pause as the
    # target felt it) and the longest elsewhere while the scan ran (its
    # threads' CPU, or what the machine does without a scan: against the
    # idle stalls).
    stop_stall_ms: float = float("nan")
    other_stall_ms: float = float("nan")
    target_cores: float = float("nan")  # the target's CPU time during the scan / its wall time
    rss_mb: float = float("nan")
    child_mb: float = 0.0  # the most memory the snapshot child added (ChildWatch)
    child_cpu_s: float = 0.0  # the snapshot child's CPU time
    leaks: int = -1
    note: str = ""


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _rss_kb(pid: int) -> tuple[int, int] | None:
    """A process's resident memory and its peak (VmRSS, VmHWM), in kB."""
    rss = hwm = -1
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        return None
    return (rss, hwm) if rss >= 0 and hwm >= 0 else None


class ChildWatch:
    """The most memory any child of the target (the fork's snapshot child,
    which sweeps itself) adds while a scan runs: its peak resident memory
    less what it had when first seen, the target's pages it shares
    copy-on-write (seen within a few milliseconds of the fork, before the
    child's arrays have grown). From /proc/PID/status, counters the kernel
    keeps, not smaps_rollup's Private_Dirty: that walks every page table of
    the child (20-55 ms a read at 1 GB), and read every 10 ms from this
    bench's session it kept a third group busy beside the target's and the
    child's, so the child had a third of the two cores instead of half (a
    fork scan of 1 GB of 240 B blocks took 1.36-1.41 s watched so, 0.68-0.81
    s unwatched, the same run)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_mb = pid, 0.0
        self.first_kb: dict[int, int] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.wait(0.005):
            for child in _children(self.pid):
                if (kb := _rss_kb(child)) is None:
                    continue
                first = self.first_kb.setdefault(child, kb[0])
                self.peak_mb = max(self.peak_mb, (kb[1] - first) / 1024)

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return self.peak_mb


# Modes that never make a child of the target: an asked-for copy or stopped
# scan takes no fork, and an asked-for concurrent one never gives way to one.
NO_CHILD = ("copy", "stopped", "concurrent")


def scan(heap: Heap, mode: str, extra: list[str]) -> Scan:
    heap.ask("r")
    # Watched only where a snapshot child can be: the watcher's thread wakes
    # every 5 ms (~4% of a core on the loaded VM) in this bench's scheduling
    # group, the scanner's, which a user's scan does not share with it.
    watch = ChildWatch(heap.proc.pid) if mode not in NO_CHILD else None
    code = CLI.replace("{PEAK}", PEAK).replace("{STOPS}", STOPS)
    cli = [sys.executable, "-c", code, "scan", str(heap.proc.pid), "--json"]
    cli += ["--snapshot", mode, "--symbol-budget", "5", *extra]
    target0, reaped0 = threads_cpu_s(heap.proc.pid), reaped_cpu_s(heap.proc.pid)
    t0 = time.monotonic()
    # Popen and wait4 (not communicate): the scanner's CPU time.
    with tempfile.TemporaryFile("w+") as err:
        # preexec_fn only for --nice: with one, subprocess forks this bench
        # (its threads, its memory) instead of starting the CLI by vfork.
        pre = renice if CLI_NICE is not None else None
        p = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=pre)
        assert p.stdout is not None
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        err.seek(0)
        errs, rss_kb, stops = scanner_peak(err.read())
    wall = time.monotonic() - t0
    target_cores = (threads_cpu_s(heap.proc.pid) - target0) / wall
    child_mb = watch.stop() if watch else 0.0
    # The snapshot child's CPU reaches the target's count of its reaped
    # children once its helper has reaped it.
    for _ in range(200):
        if not _children(heap.proc.pid):
            break
        time.sleep(0.01)
    child_cpu = reaped_cpu_s(heap.proc.pid) - reaped0
    at_stops, elsewhere = split_gaps(heap.gaps(), stops)
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        return Scan(note=(errs.strip().splitlines() or ["?"])[-1][:80])
    report = json.loads(out)
    note = report.get("snapshot_note", "")
    if mode == "concurrent" and (
        stops := re.search(r"two stops, ([\d.]+) ms and ([\d.]+) ms", note)
    ):
        note = f"stops {stops[1]} + {stops[2]} ms"
    return Scan(
        pause_ms=report["pause_ms"],
        hold_ms=report.get("hold_ms", float("nan")),
        scan_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        child_cpu_s=child_cpu,
        stop_stall_ms=at_stops,
        other_stall_ms=elsewhere,
        target_cores=target_cores,
        rss_mb=rss_kb / 1024,
        child_mb=child_mb,
        leaks=report["leak_count"],
        note=note if report.get("snapshot") == mode else f"ran as {report.get('snapshot')}",
    )


def renice() -> None:
    if CLI_NICE is not None:
        os.setpriority(os.PRIO_PROCESS, 0, CLI_NICE)


def scanner_peak(errs: str) -> tuple[str, float, list[tuple[int, int]]]:
    """The CLI's stderr without the lines CLI adds, the peak RSS and the
    stops' windows they give."""
    lines, peak, stops = [], float("nan"), []
    for line in errs.splitlines():
        if line.startswith(PEAK):
            peak = float(line.split()[-1])
        elif line.startswith(STOPS):
            for w in line[len(STOPS) :].split():
                start, end = w.split(",")
                stops.append((int(start), int(end)))
        else:
            lines.append(line)
    return "\n".join(lines), peak, stops


def split_gaps(gaps: list[tuple[int, int]], stops: list[tuple[int, int]]) -> tuple[float, float]:
    """The longest of the target's gaps that overlap a stop, from the stop's
    start (the heartbeat may have been off its core before, for reasons of
    its own) to the gap's end (it waits for a core again after the
    release), and the longest of the others, in ms (0 where there is none:
    every gap under 0.2 ms)."""
    at_stops = elsewhere = 0.0
    for start, end in gaps:
        over = [a for a, b in stops if start < b and end > a]
        if over:
            at_stops = max(at_stops, (end - max(start, min(over))) / 1e6)
        else:
            elsewhere = max(elsewhere, (end - start) / 1e6)
    return at_stops, elsewhere


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a process, its reaped children included (LSan's
    check runs in a task it clones and waits for)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def threads_cpu_s(pid: int) -> float:
    """CPU seconds of a process's own threads (not its reaped children: the
    snapshot child's work is the scan's, not the target's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def reaped_cpu_s(pid: int) -> float:
    """CPU seconds of a process's reaped children (its snapshot children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[13:15]) / os.sysconf("SC_CLK_TCK")


def memcpy_s(nbytes: int) -> float:
    """Seconds memcpy takes to copy nbytes, in 64 MiB copies (best of 3)."""
    chunk = 64 << 20
    src = ctypes.create_string_buffer(chunk)
    dst = ctypes.create_string_buffer(chunk)
    ctypes.memmove(dst, src, chunk)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(4):
            ctypes.memmove(dst, src, chunk)
        best = min(best, time.perf_counter() - t0)
    return best / (4 * chunk) * nbytes


def idle_stall(heap: Heap, seconds: float = 1.0) -> tuple[float, float]:
    """The longest gap the target feels, and the cores its threads have,
    with no scan."""
    heap.ask("r")
    cpu0, t0 = threads_cpu_s(heap.proc.pid), time.monotonic()
    time.sleep(seconds)
    cores = (threads_cpu_s(heap.proc.pid) - cpu0) / (time.monotonic() - t0)
    return heap.gap_ms(), cores


def busy_stall(heap: Heap, seconds: float = 1.0) -> float:
    """The longest gap the target feels with no scan while a process of the
    bench's session, where the scanner runs, spins: the cores the machine
    has then, without anything of ours (a virtual machine's host may run
    its vCPUs less when all of them are busy; docs/pause.md "What the
    target feels")."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.05)
        heap.ask("r")
        time.sleep(seconds)
        return heap.gap_ms()
    finally:
        spin.kill()
        spin.wait()


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs ({model}), {mem:.0f} GiB, "
        f"Linux {platform.release()}; load average at the start {load[0]:.1f}"
    )


def fmt(v: float, spec: str) -> str:
    return "-" if v != v else format(v, spec)


def cpu(r: Scan) -> str:
    """The scanner's CPU time, with the snapshot child's."""
    text = f"{fmt(r.cpu_s, '.2f')} s"
    if r.child_cpu_s >= 0.01:
        text += f" + child {r.child_cpu_s:.2f} s"
    return text


def lsan_text(ms: float, stall_ms: float, cpu_s: float) -> str:
    if ms != ms:
        return "-"
    return f"{ms:.0f} ms ({stall_ms:.0f} ms, {cpu_s:.2f} s)"


def memory(r: Scan) -> str:
    """The scanner's peak RSS, with the memory the snapshot child added."""
    text = f"{fmt(r.rss_mb, '.0f')} MB"
    if r.child_mb >= 1:
        text += f" + child {r.child_mb:.0f} MB"
    return text


def per_allocation(r: Scan, blocks: int) -> str:
    """Bytes per allocation beyond the fixed 64 MB: what the goal bounds by 48."""
    if r.rss_mb != r.rss_mb or not blocks:
        return "-"
    held = (r.rss_mb + r.child_mb - FIXED_MB) * 2**20
    return f"{max(held, 0) / blocks:.0f} B"


def interpreter_start_ms(*flags: str, runs: int = 9) -> float:
    """The median wall time of the scanner's interpreter started to do
    nothing: a floor under every whole-scan time here, none of LSan's (its
    check runs inside the heap's process)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def run(
    shapes: list, modes: list[str], out: Path, placement: str, lsan_too: bool, extra: list[str]
) -> str:
    plain, lsan = build(out, False), build(out, True)
    shim = str(shim_path())
    lines = [
        f"Machine: {machine()}.",
        "",
        "| heap | blocks | threads | memcpy of it | LSan check (stall, CPU) "
        "| idle stall (beside a busy core), CPU "
        "| mode | pause (hold) | target's stall at the stops / elsewhere | target's CPU "
        "| whole scan (CPU) | scanner RSS "
        f"| per allocation (goal {FIXED_MB} MB + {PER_ALLOCATION} B) | leaks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    where = ""
    for shape in shapes:
        size, lo, hi, threads = shape
        lsan_ms = lsan_stall = lsan_cpu = float("nan")
        if lsan_too:
            env = {"LSAN_OPTIONS": "leak_check_at_exit=0:report_objects=0"}
            heap = Heap(lsan, shape, env, placement)
            try:
                heap.ask("r")
                cpu0 = process_cpu_s(heap.proc.pid)
                answer = heap.ask("l", timeout=600).split()
                lsan_cpu = process_cpu_s(heap.proc.pid) - cpu0
                lsan_ms = int(answer[1]) / 1000
                lsan_stall = heap.gap_ms()
            finally:
                heap.close()
        heap = Heap(plain, shape, {"LD_PRELOAD": shim}, placement)
        try:
            where = where or placement_of(heap.proc.pid)
            idle, idle_cores = idle_stall(heap)
            busy = busy_stall(heap)
            results = [(mode, scan(heap, mode, extra)) for mode in modes]
            blocks = heap.blocks
        finally:
            heap.close()
        copy_ms = memcpy_s(size) * 1000
        what = f"{size / 1e9:g} GB of {lo}-{hi} B" if lo != hi else f"{size / 1e9:g} GB of {lo} B"
        for i, (mode, r) in enumerate(results):
            head = (
                f"| {what} | {blocks:,} | {threads} | {copy_ms:.0f} ms "
                f"| {lsan_text(lsan_ms, lsan_stall, lsan_cpu)} "
                f"| {idle:.1f} ms ({busy:.1f} ms), {idle_cores:.2f} cores "
                if i == 0
                else "| | | | | | "
            )
            tail = f" ({r.note})" if r.note else ""
            lines.append(
                f"{head}| {mode} | {fmt(r.pause_ms, '.1f')} ({fmt(r.hold_ms, '.1f')}) ms "
                f"| {fmt(r.stop_stall_ms, '.1f')} / {fmt(r.other_stall_ms, '.1f')} ms "
                f"| {fmt(r.target_cores, '.2f')} cores "
                f"| {fmt(r.scan_s, '.2f')} s ({cpu(r)}) | {memory(r)} "
                f"| {per_allocation(r, blocks)} | {r.leaks if r.leaks >= 0 else '-'}{tail} |"
            )
            print(lines[-1], flush=True)
    load = os.getloadavg()[0]
    lines[1:1] = [
        "",
        f"Target placed as `{placement}`: {where}; the bench in {placement_of(os.getpid())}"
        + ("." if CLI_NICE is None else f"; the scanner at nice {CLI_NICE}."),
        "",
        f"The scanner's interpreter started to do nothing (`python -c pass`, median of 9): "
        f"{interpreter_start_ms():.0f} ms, {interpreter_start_ms('-S'):.0f} ms without `site` "
        "(the .pth files of its site-packages); part of every whole scan below, none of "
        "LSan's check.",
    ]
    lines += ["", f"Load average at the end {load:.1f}.", ""]
    return "\n".join(lines)


def write_results(text: str) -> None:
    """Replace this bench's section of bench/RESULTS.md (or add it)."""
    title = "## Side by side with LeakSanitizer (bench/peer_lsan_bench.py)"
    results.put_section("peer_lsan_bench", f"{title}\n\n{text}")


def write_readme(text: str) -> None:
    """The table (its machine and load lines too) between this bench's marks
    in README.md."""
    old = README.read_text()
    if old.count(MARK) != 2:
        return
    head, _, rest = old.partition(MARK)
    _, _, tail = rest.partition(MARK)
    README.write_text(f"{head}{MARK}\n{text}{MARK}{tail}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one 100 MB heap")
    ap.add_argument(
        "--big", action="store_true", help="also 2.1 GB and 4 GB heaps (needs ~10 GB free)"
    )
    ap.add_argument("--modes", default=",".join(MODES), help="snapshot modes to scan with")
    ap.add_argument("--results", action="store_true", help="write bench/RESULTS.md")
    ap.add_argument("--threads", type=int, help="only the shapes with this many threads")
    ap.add_argument(
        "--shape",
        action="append",
        metavar="BYTES,MIN,MAX,THREADS",
        help="this heap shape instead of the lists (repeatable)",
    )
    ap.add_argument("--scan-args", default="", help="more arguments for each scan")
    ap.add_argument("--nice", type=int, help="the scanner's nice value")
    ap.add_argument("--no-lsan", action="store_true", help="leave LSan's check out")
    ap.add_argument(
        "--placement",
        choices=("service", "cgroup", "shared"),
        default="service",
        help="the target in a session of its own (default), also in a CPU cgroup of its "
        "own, or in the bench's session",
    )
    args = ap.parse_args()
    shapes = QUICK if args.quick else DEFAULT + (BIG if args.big else [])
    if args.shape:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape]
    if args.threads:
        shapes = [s for s in shapes if s[3] == args.threads]
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"peer_lsan_bench.{os.getpid()}"
    out.mkdir(exist_ok=True)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # As an installed package is (scripts/install.sh does the same): from
    # source, with PYTHONDONTWRITEBYTECODE set, every scan would compile the
    # modules it imports again, a tenth of a second of its whole time.
    compileall.compile_dir(str(REPO / "unreachable"), quiet=1)
    extra = shlex.split(args.scan_args)
    global CLI_NICE
    CLI_NICE = args.nice
    text = run(shapes, args.modes.split(","), out, args.placement, not args.no_lsan, extra)
    print(text)
    if args.results:
        write_results(text)
        write_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
