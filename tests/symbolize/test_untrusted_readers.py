"""The readers beside the symbolizer (a file's variables and TLS segment,
its call frame information, glibc's facts) open a path of the target's
choosing after a stat: swapped meanwhile for a FIFO, a huge sparse file or a
crafted header, it must neither stall nor swell a root scan."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

# Each reader runs in a process of its own, so that one blocked in open()
# before the fix is killed by the timeout instead of hanging the run.
TIMEOUT = 30.0
READ = {
    "tls segment": "from unreachable.symbolize.data_symbols import _tls_segment as f",
    "call frames": "from unreachable.retention.unwind import _load_cfi\n"
    "def f(p):\n"
    "    import os; s = os.stat(p)\n"
    "    return _load_cfi(p, s.st_dev, s.st_ino, s.st_mtime_ns)",
    "glibc facts": "from unreachable.allocations.glibc_libc import libc_facts as f",
}


def _read(reader: str, path: Path, limit_bytes: int = 0) -> str:
    """What the reader did with path: 'ok ...' or the exception's class."""
    script = (
        "import resource, sys\n"
        f"limit = {limit_bytes}\n"
        "if limit: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        f"{READ[reader]}\n"
        "try:\n"
        "    print('ok', f(sys.argv[1]))\n"
        "except BaseException as e:\n"
        "    print(type(e).__name__)\n"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", script, str(path)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return "blocked"
    return r.stdout.strip() or r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("reader", sorted(READ))
def test_a_fifo_in_place_of_the_mapped_file_is_not_waited_for(tmp_path, reader):
    fifo = tmp_path / "libc.so.6"
    os.mkfifo(fifo)
    assert _read(reader, fifo) in ("UnsafeFile", "ok None")


def test_a_huge_sparse_libc_is_refused_unread(tmp_path):
    libc = tmp_path / "libc.so.6"
    with open(libc, "wb") as f:
        f.truncate(512 << 20)
    assert _read("glibc facts", libc, limit_bytes=256 << 20) == "UnsafeFile"


def test_a_program_header_table_of_4_gib_is_not_read_whole(tmp_path):
    elf = tmp_path / "lib.so"
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    # e_phoff 64, e_phentsize and e_phnum at their maximum: 4 GiB of table.
    fields = (ident, 3, 62, 1, 0, 64, 0, 0, 64, 0xFFFF, 0xFFFF, 0, 0, 0)
    header = struct.pack("<16sHHIQQQIHHHHHH", *fields)
    with open(elf, "wb") as f:
        f.write(header)
        f.truncate((4 << 30) - 1)
    assert _read("tls segment", elf, limit_bytes=1 << 30) == "ok (0, 0)"
