"""What `unreachable-cli scan` imports: its start-up is part of every scan's
time, so what a scan does not use stays unimported."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
# Runs the CLI, then says on stderr's last line which modules it imported.
PROBE = """
import json, sys
from unreachable.cli.main import main
code = main(sys.argv[1:])
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""
# Report formats other than the one asked for, and the symbolizer with the
# ELF and DWARF readers (a target without backtraces has no frame to
# resolve: the reports import the frame's record alone); the signal stacks
# the stopper asks without the shim (the shim keeps its own record); the
# snapshots of a process without the shim, and of a core, with glibc's
# heap walker; the concurrent mark (the heap is too small for auto to take
# it).
UNUSED = (
    "unreachable.report.pprof",
    "unreachable.report.collapsed",
    "unreachable.report.lmu",
    "unreachable.report.text",
    "unreachable.symbolize.frames",
    "unreachable.symbolize.unloaded",
    "unreachable.symbolize.objects",
    "unreachable.symbolize.dwarf_lines",
    "unreachable.symbolize.elf_symbols",
    "unreachable.symbolize.debuginfo",
    "unreachable.scan.core",
    "unreachable.scan.glibc",
    "unreachable.scan.glibc_fork",
    "unreachable.capture.core_file",
    "unreachable.capture.stopper",
    "unreachable.capture.signal_stacks",
    "unreachable.allocations.glibc_heap",
    "unreachable.allocations.glibc_source",
    "unreachable.scan.concurrent",
)


# Imported by nothing a scan without backtraces does once the symbol cache
# holds the mapped files' vtables: the C++ demangler (a c++filt subprocess)
# and the symbol tables' reader run on a cache miss only; socket for a
# target with a unix socket only (graph.c has none); the triage's
# (suppressions, baselines) only when a scan has some; the daemon's, the
# gRPC client's and the other commands' modules never. hashlib (OpenSSL's
# libcrypto, 4-18 ms) neither: the cache's keys are hashed with CPython's own
# SHA-1.
NOT_ONCE_CACHED = (
    "subprocess",
    "hashlib",
    "_hashlib",
    "socket",
    "unreachable.symbolize.demangle",
    "unreachable.symbolize.data_symbols",
    "unreachable.rpc.scan_client",
    "unreachable.rpc.convert",
    "unreachable.triage.output",
    "unreachable.triage.suppressions",
    "unreachable.triage.baseline",
    "unreachable.triage.codecs",
    "unreachable.heapdump",
    "unreachable.retention",
    "unreachable.analysis",
    "unreachable.daemon",
    "grpc",
    "google.protobuf",
    "sqlite3",
    "asyncio",
)


def imported_by_scan(
    *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, "scan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return res, set(json.loads(res.stderr.strip().splitlines()[-1]))


def test_scan_without_backtraces_imports_no_symbol_reader(targets):
    target = targets.start(PROGRAMS / "graph.c")
    res, modules = imported_by_scan(str(target.pid), "--json")
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["leak_count"] == 11
    assert "unreachable.report.json_report" in modules
    assert not modules & set(UNUSED), modules & set(UNUSED)


def test_the_records_a_scan_imports_make_no_repr(targets):
    """dataclasses compiles a record's __repr__ when its class is made (about
    4 ms of a scan's imports for its ~40 records): the records a scan
    passes between its stages, never compared (eq=False), are made without
    one."""
    target = targets.start(PROGRAMS / "graph.c")
    res, modules = imported_by_scan(str(target.pid), "--json")
    assert res.returncode == 1, res.stderr
    records = [
        cls
        for name in sorted(m for m in modules if m.startswith("unreachable."))
        for cls in vars(importlib.import_module(name)).values()
        if isinstance(cls, type)
        and cls.__module__ == name
        and dataclasses.is_dataclass(cls)
        and not cls.__dataclass_params__.eq
    ]
    assert len(records) > 30, records
    with_repr = [c.__qualname__ for c in records if c.__dataclass_params__.repr]
    assert not with_repr, with_repr


@pytest.mark.parametrize("snapshot", ["auto", "fork", "copy", "stopped"])
def test_scan_with_its_symbol_cache_filled_imports_only_what_it_uses(targets, tmp_path, snapshot):
    """The first scan reads the mapped files' vtables into the cache: a C
    program's files have none, so nothing is demangled and no c++filt
    process started. The next one imports neither reader, and a target
    without a unix socket needs no socket module, whatever its snapshot."""
    target = targets.start(PROGRAMS / "graph.c")
    env = {**os.environ, "UNREACHABLE_CACHE_DIR": str(tmp_path / "cache")}
    first, modules = imported_by_scan(str(target.pid), "--json", env=env)
    assert first.returncode == 1, first.stderr
    assert "unreachable.symbolize.data_symbols" in modules
    assert not modules & {"unreachable.symbolize.demangle", "subprocess"}
    res, modules = imported_by_scan(str(target.pid), "--json", "--snapshot", snapshot, env=env)
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["leak_count"] == 11
    heavy = {m for m in modules for n in NOT_ONCE_CACHED if m == n or m.startswith(n + ".")}
    assert not heavy, heavy


def test_scan_with_backtraces_still_resolves_them(targets):
    target = targets.start(PROGRAMS / "graph.c", options="backtrace=16")
    res, modules = imported_by_scan(str(target.pid), "--format", "collapsed")
    assert res.returncode == 1, res.stderr
    assert "unreachable.symbolize.objects" in modules
    assert "unreachable.report.collapsed" in modules
    # Frames named by function: the readers imported on first use did their work.
    assert "main" in res.stdout, res.stdout


# Runs the CLI, then the exit handlers it registered, and says on stderr's
# last line whether the collector was left enabled, the most objects one of
# the command's collections walked (its young generation's), and what the
# handlers froze.
EXIT_PROBE = """
import atexit, gc, json, sys
walked = []
gc.callbacks.append(
    lambda phase, info: phase == "start" and walked.append(len(gc.get_objects(info["generation"])))
)
from unreachable.cli.main import main
code = main(sys.argv[1:])
enabled = gc.isenabled()
gc.callbacks.clear()
atexit._run_exitfuncs()
print(json.dumps([enabled, max(walked, default=0), gc.get_freeze_count()]), file=sys.stderr)
sys.exit(code)
"""


def test_the_collector_is_left_as_found_and_frozen_at_exit(targets):
    """The interpreter's last collection at exit walked every object of the
    modules a scan imports (~10 ms of every scan): the CLI freezes them at
    exit instead, and an in-process caller gets its collector back enabled.
    They are frozen once imported: the scan's collections walk only what
    it made (the first one walked the imports' 10,000 young objects before)."""
    target = targets.start(PROGRAMS / "graph.c")
    res = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, "scan", str(target.pid), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    enabled, walked, frozen = json.loads(res.stderr.strip().splitlines()[-1])
    assert enabled and frozen > 0
    assert walked < 5_000, walked


# ctypes (~2 ms with libffi): the two calls the in-flight queues need are
# _native's; shutil with bz2, lzma and fnmatch (~2.5 ms): argparse imports
# it for the terminal's width, which the CLI's formatter reads itself.
# (zlib stays: the ELF reader's, for compressed sections.)
NOT_BY_ANY_SCAN = ("ctypes", "shutil", "bz2", "lzma", "fnmatch")
# Runs the CLI and says on stderr's last line which of NOT_BY_ANY_SCAN it
# imported. An environment's .pth files may have loaded some of them before
# (this VM's certifi hook loads shutil): they are taken out of sys.modules
# first, so that an import by the CLI puts them back.
FRESH_PROBE = f"""
import json, sys
names = {NOT_BY_ANY_SCAN!r}
for name in names:
    sys.modules.pop(name, None)
from unreachable.cli.main import main
code = main(sys.argv[1:])
print(json.dumps([n for n in names if n in sys.modules]), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("snapshot", ["fork", "copy", "stopped", "concurrent"])
def test_a_scan_imports_neither_ctypes_nor_shutil(targets, snapshot):
    """graph.c's stdin and stdout are pipes, so the scan reads what they
    hold (capture/in_flight.py: pidfd_getfd and tee)."""
    target = targets.start(PROGRAMS / "graph.c")
    res = subprocess.run(
        [sys.executable, "-c", FRESH_PROBE, "scan", str(target.pid), "--json"]
        + ["--snapshot", snapshot],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["leak_count"] == 11
    assert json.loads(res.stderr.strip().splitlines()[-1]) == []
