"""C unit test of the copy snapshot's page sync (see c/page_sync_test.c)
under ASan+UBSan, against a real process that write-protects its own memory
with an asynchronous userfaultfd; tests/capture/test_copy_snapshot.py runs
the whole copy snapshot on scan targets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cbuild import INCLUDE_DIR, NATIVE_DIR, UNIT_TEST_INCLUDE, build, native_sources

SCANNER = NATIVE_DIR / "scanner"
MARK = NATIVE_DIR / "mark"


def test_page_sync() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "page_sync_test.c",
            *native_sources("scanner", "page_sync.c", "memory.c", "cow.c"),
            *native_sources("mark", "alloc.c"),
        ],
        name="page_sync_test",
        cflags=[
            f"-I{SCANNER}",
            f"-I{MARK}",
            f"-I{INCLUDE_DIR}",
            f"-I{UNIT_TEST_INCLUDE}",
            "-pthread",
        ],
        ldflags=["-pthread"],
        sanitize=True,
    )
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    if result.stdout.startswith("skip:"):
        pytest.skip(result.stdout.strip())
    assert result.stdout.strip() == "ok page_sync"


def test_read_live() -> None:
    """ur_mem_read_live (c/read_live_test.c): process_vm_readv for the pages
    a process maps alone, /proc/PID/mem for the rest, spans of any alignment."""
    exe = build(
        [
            Path(__file__).parent / "c" / "read_live_test.c",
            *native_sources("scanner", "memory.c", "cow.c"),
            *native_sources("mark", "alloc.c"),
        ],
        name="read_live_test",
        cflags=[
            f"-I{SCANNER}",
            f"-I{MARK}",
            f"-I{INCLUDE_DIR}",
            f"-I{UNIT_TEST_INCLUDE}",
            "-pthread",
        ],
        ldflags=["-pthread"],
        sanitize=True,
    )
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok read_live"
