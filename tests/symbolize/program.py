"""Build and run tests/symbolize/programs/frames.cpp, and parse what it prints."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.support.cbuild import build

SOURCE = Path(__file__).resolve().parent / "programs" / "frames.cpp"


@cache
def program() -> Path:
    return build(SOURCE, cxx=True, cflags=["-O0"])


@cache
def lines() -> dict[str, int]:
    """LINE:<name> markers of the source -> line number."""
    out = {}
    for i, text in enumerate(SOURCE.read_text().splitlines(), 1):
        m = re.search(r"// LINE:(\w+)", text)
        if m:
            out[m.group(1)] = i
    return out


@dataclass
class Run:
    before: list[tuple[int, tuple[int, ...]]]  # (size, pcs) recorded before "snapshot"
    after: list[tuple[int, tuple[int, ...]]]  # recorded after it
    maps_text: str

    @property
    def all(self) -> list[tuple[int, tuple[int, ...]]]:
        return self.before + self.after


def run(binary: Path | None = None, leaks: int = 3) -> Run:
    out = subprocess.run(
        [str(binary or program()), str(leaks)], capture_output=True, text=True, check=True
    ).stdout
    head, _, rest = out.partition("MAPS\n")
    maps_text = rest.split("END\n")[0]
    before: list[tuple[int, tuple[int, ...]]] = []
    after: list[tuple[int, tuple[int, ...]]] = []
    current = before
    for line in head.splitlines():
        if line == "snapshot":
            current = after
        elif line.startswith("rec "):
            parts = line.split()
            current.append((int(parts[1]), tuple(int(x, 16) for x in parts[2:])))
    return Run(before, after, maps_text)


def copy_program(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(program(), dest)
    return dest
