"""A target that overwrites the shim's registry in its own memory (a heap
overflow, a hostile program) steers neither the scanner's memory nor its
time, and gets no leaks made of forged entries: shards naming one table,
size maps naming one map, 2^22 thread slots, a span of "the shim's
memory" over the program's globals (its roots: 493 made-up leaks where
there is 1), a stack table claiming 2^28 stacks. Each scan
ends with one line and exit 2 (or, for the stack table, the real leak),
its peak memory near a clean scan's, the target left running untraced."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cgroups import memory_cgroup
from tests.support.targets import Target, TargetFactory

PROGRAM = Path(__file__).resolve().parent / "programs" / "forged_registry.c"
CORRUPT = "the shim's registry is unreadable: it is corrupt"
# Above a clean scan's peak: a forged registry may cost this much more,
# not the 1-2.5 GiB it cost when its pieces were read as they were.
SLACK_BYTES = 48 << 20

# Run the CLI and print its peak memory (its own and its children's).
_PEAK = """
import json, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"rc": r.returncode, "stderr": r.stderr, "peak": peak}))
"""


def scan(target: Target, mode: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak bytes) of `unreachable-cli scan`."""
    cli = [sys.executable, "-m", "unreachable.cli.main", "scan", "--snapshot", mode]
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, *cli, str(target.pid)],
        capture_output=True,
        text=True,
        timeout=300,  # a safety net: the scan's own bounds end it long before
        check=True,
    )
    res = json.loads(out.stdout)
    return res["rc"], res["stderr"], res["peak"]


def left_as_found(target: Target) -> None:
    assert target.alive()
    assert target.state() in "SR"
    assert target.tracer() == 0


def clean_peak(targets: TargetFactory, mode: str, options: str) -> int:
    clean = targets.start(PROGRAM, "none", options=options)
    rc, err, peak = scan(clean, mode)
    assert rc == 1, err  # its one real leak
    return peak


@pytest.mark.parametrize("mode", ["stopped", "auto", "concurrent"])
@pytest.mark.parametrize("what", ["shards", "maps", "threads", "regions"])
def test_a_forged_registry_is_refused_in_one_line(targets, mode, what):
    # Shards hold the blocks only with backtraces; without, the size maps do.
    options = "backtrace=4" if what == "shards" else ""
    base = clean_peak(targets, mode, options)
    target = targets.start(PROGRAM, what, "1024", options=options)
    rc, err, peak = scan(target, mode)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert CORRUPT in err
    assert "internal error" not in err and "Traceback" not in err
    assert peak <= base + SLACK_BYTES, (peak >> 20, base >> 20)
    left_as_found(target)


def test_a_stack_table_claiming_millions_of_stacks_reads_only_those_asked(targets):
    base = clean_peak(targets, "stopped", "backtrace=4")
    target = targets.start(PROGRAM, "stacks", options="backtrace=4")
    rc, err, peak = scan(target, "stopped")
    assert rc == 1, err
    assert peak <= base + SLACK_BYTES, (peak >> 20, base >> 20)
    left_as_found(target)


# Four shards more than the shim's, each claiming 2^32 entries (64 GiB) of
# memory the process never touched: 256 GiB of tables that read as empty.
HUGE_TABLES = 4
TABLE_CLAIM = (1 << 32) * 16


def test_shard_tables_claiming_64_gib_each_read_only_what_is_present(targets):
    """The reader walks the page tables and reads the pages there are: the
    real tables' few KiB, not a quarter of a TiB of zeros."""
    from unreachable import _native
    from unreachable.capture.target import open_target

    target = targets.start(PROGRAM, "tables", str(HUGE_TABLES))
    addr = open_target(target.pid).shim.descriptor_addr
    read = _native.read_registry(target.pid, addr)
    assert read["tables_read"] < 16 << 20, read["tables_read"]
    assert read["tables_read"] < TABLE_CLAIM * HUGE_TABLES // 1000
    left_as_found(target)


@pytest.mark.parametrize("mode", ["stopped", "copy", "concurrent"])
def test_a_scan_of_shard_tables_claiming_64_gib_each_finds_the_leak(targets, mode):
    base = clean_peak(targets, mode, "")
    target = targets.start(PROGRAM, "tables", str(HUGE_TABLES), options="")
    rc, err, peak = scan(target, mode)
    assert rc == 1, err  # the real leak, the forged tables read as empty
    assert peak <= base + SLACK_BYTES, (peak >> 20, base >> 20)
    left_as_found(target)


@pytest.mark.parametrize("mode", ["stopped", "auto"])
def test_a_size_map_list_longer_than_the_shim_makes_is_refused_unallocated(targets, mode):
    """2^24 refs (256 MiB of list, the old bound) where the shim makes at
    most 2^16: refused before the list is allocated or read."""
    base = clean_peak(targets, mode, "")
    target = targets.start(PROGRAM, "maplist", str(1 << 24), options="")
    rc, err, peak = scan(target, mode)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert CORRUPT in err
    assert peak <= base + SLACK_BYTES, (peak >> 20, base >> 20)
    left_as_found(target)


@pytest.mark.parametrize(
    ("what", "says"),
    [
        ("magic", "the shim's registry descriptor is not one (magic"),
        ("version", "runs a shim with registry ABI"),
    ],
)
@pytest.mark.parametrize("mode", ["stopped", "auto"])
def test_a_descriptor_of_another_magic_or_version_is_refused_in_one_line(targets, mode, what, says):
    target = targets.start(PROGRAM, what, options="")
    rc, err, _ = scan(target, mode)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert says in err
    assert "internal error" not in err and "Traceback" not in err
    left_as_found(target)


@pytest.mark.parametrize("mode", ["stopped", "fork"])
def test_forged_shard_counts_do_not_make_the_scanners_memory_estimate(targets, mode):
    """Every shard claiming 2^32 - 1 live entries (2^40 in all) over its real
    table: the scanner's estimate of its sweep's memory, made before it
    reads the tables, took the counts as they were and refused a 20,001
    allocation sweep as needing terabytes. It counts no more entries than
    the tables' present pages hold: the scan fits and finds the leak."""
    target = targets.start(PROGRAM, "counts", options="backtrace=4")
    with memory_cgroup("ur-forged-counts") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.limit(160 << 20)
        cli = [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)]
        res = subprocess.run(
            [*cli, "--snapshot", mode, "--sweep", "scanner", "--json"],
            preexec_fn=cg.enter,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 1, res.stderr
        assert json.loads(res.stdout)["leak_count"] == 1
        assert cg.oom_kills() == 0
    left_as_found(target)


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """Another process, whose thread a forged helper tid names."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_helper_tid_naming_another_process_is_no_helper(targets, bystander):
    """The scanner seizes the helper to wake it (write tracking) and asks
    it for snapshots: a tid the target wrote is believed only as one of its
    own threads. It was taken as it was, in the scanner's own pid namespace:
    another process's thread, which a root scanner could seize."""
    from unreachable import _native
    from unreachable.capture.target import current_helper_tid, open_target

    target = targets.start(PROGRAM, "helper", str(bystander.pid), options="", wait_helper=False)
    assert current_helper_tid(open_target(target.pid)) == 0
    with pytest.raises(OSError) as refused:  # the waker checks the tid itself
        _native.nudge_thread(target.pid, bystander.pid)
    assert refused.value.errno == errno.ESRCH
    for mode in ("copy", "concurrent", "auto"):
        rc, err, _ = scan(target, mode)
        assert rc in (1, 2), err
        assert "internal error" not in err and "Traceback" not in err
        left_as_found(target)
    assert Path(f"/proc/{bystander.pid}/status").read_text().count("TracerPid:\t0\n") == 1
