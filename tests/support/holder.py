"""A Python process that maps memory, fills it, prints its address and
holds it until its stdin closes: a live target for the native readers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def python_holder(source: str) -> Iterator[tuple[int, int]]:
    """(pid, the address source printed) while the process runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.pid, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()
