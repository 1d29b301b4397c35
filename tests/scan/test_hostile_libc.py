"""A process running with a libc.so.6 whose section headers are made up
(the loader reads only program headers, so the process runs): pyelftools
fails only as the sections are walked, deep in finding the heap's roots.
A scan without the shim says in one line which file it could not read
(exit 2), as for any libc it cannot walk; it was an internal error."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from unreachable.allocations import glibc_libc

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")
SHF_COMPRESSED = 0x800

# (section, offset of the field in its header, format, value; a negative
# value counts from the file's end): each makes pyelftools raise from inside
# a walk, not while it opens the file.
MADE_UP = {
    "relr-entry-size": (".relr.dyn", 0x38, "<Q", 0xFFFFFFFF),  # ELFError
    "compressed-relocations": (".rela.plt", 0x08, "<Q", SHF_COMPRESSED),  # ELFCompressionError
    "note-at-the-files-end": (".note.gnu.build-id", 0x18, "<Q", -8),  # ELFParseError
    "symbols-of-no-size": (".dynsym", 0x38, "<Q", 0),  # ELFError
}


def _section_header(data: bytes, name: str) -> int:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x3C)
    names = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 0x18)[0]
    for i in range(shnum):
        at = names + struct.unpack_from("<I", data, shoff + i * 64)[0]
        if data[at : data.index(b"\0", at)].decode() == name:
            return shoff + i * 64
    raise LookupError(name)


def made_up_libc(directory: Path, how: str) -> Path:
    section, field, fmt, value = MADE_UP[how]
    data = bytearray(LIBC.read_bytes())
    header = _section_header(data, section)
    if field == 0x08:
        value |= struct.unpack_from(fmt, data, header + field)[0]
    if value < 0:
        value += len(data)
    struct.pack_into(fmt, data, header + field, value)
    directory.mkdir()
    (directory / "libc.so.6").write_bytes(data)
    return directory / "libc.so.6"


@pytest.mark.parametrize("how", sorted(MADE_UP))
def test_facts_of_a_made_up_libc_are_refused_in_one_line(tmp_path, how):
    if not LIBC.exists():
        pytest.skip(f"no {LIBC}")
    path = made_up_libc(tmp_path / "lib", how)
    glibc_libc._facts.cache_clear()
    with pytest.raises(glibc_libc.LibcUnsupported, match="unreadable ELF"):
        glibc_libc.libc_facts(str(path))
    glibc_libc._facts.cache_clear()


def test_a_scan_of_a_process_running_a_made_up_libc_says_so(tmp_path):
    lib = made_up_libc(tmp_path / "lib", "relr-entry-size").parent
    sleeper = shutil.which("sleep") or "/bin/sleep"
    target = subprocess.Popen([sleeper, "60"], env={"LD_LIBRARY_PATH": str(lib)})
    try:
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert target.poll() is None
    finally:
        target.kill()
        target.wait(timeout=10)
    assert res.returncode == 2, res.stderr
    assert "internal error" not in res.stderr
    assert f"{lib}/libc.so.6: unreadable ELF" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
