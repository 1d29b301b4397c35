"""Function symbols of one ELF file, as sorted arrays for bisect lookups.

pyelftools' iter_symbols() is 10-30x slower than unpacking the symbol table
raw, so the tables are unpacked with
struct (unreachable.symbolize.elf_file).
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from functools import lru_cache

from unreachable.symbolize.elf_file import STB_GLOBAL, STB_WEAK, ElfImage, NotElf, read_elf

_RANK = {STB_GLOBAL: 2, STB_WEAK: 1}


@dataclass(frozen=True, slots=True)
class ElfSymbols:
    first_load_vaddr: int
    starts: list[int]
    sizes: list[int]
    names: list[str]

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(name, offset) of the function containing vaddr."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        while i >= 0:
            start, size = self.starts[i], self.sizes[i]
            if vaddr < start + max(size, 1):
                return self.names[i], vaddr - start
            if size:  # sized symbol that doesn't cover vaddr: nothing earlier will
                return None
            i -= 1
        return None

    def to_json(self) -> dict[str, int | list[int] | list[str]]:
        return {"first": self.first_load_vaddr, "s": self.starts, "z": self.sizes, "n": self.names}

    @classmethod
    def from_json(cls, value: object) -> ElfSymbols | None:
        if not isinstance(value, dict):
            return None
        s, z, n = value.get("s"), value.get("z"), value.get("n")
        if not (isinstance(s, list) and isinstance(z, list) and isinstance(n, list)):
            return None
        if not len(s) == len(z) == len(n):
            return None
        return cls(int(value.get("first", 0)), s, z, n)


def _preference(binding: int, name: str) -> tuple[int, int, int]:
    """Among aliases at one address: global over weak over local, then fewer '_'."""
    return (_RANK.get(binding, 0), -(len(name) - len(name.lstrip("_"))), -len(name))


def symbols_from_images(*images: ElfImage) -> ElfSymbols:
    """The first of .symtab (in image order), else the first image's .dynsym."""
    raw: list[tuple[int, int, int, str]] = []
    for image in images:
        if image.has_symtab:
            raw = image.function_symbols(".symtab")
            if raw:
                break
    if not raw and images:
        raw = images[0].function_symbols(".dynsym")
    best: dict[int, tuple[int, int, str]] = {}
    for value, size, binding, name in raw:
        if not name:
            continue
        cur = best.get(value)
        if (
            cur is None
            or (size and not cur[0])
            or (
                bool(size) == bool(cur[0])
                and _preference(binding, name) > _preference(cur[1], cur[2])
            )
        ):
            best[value] = (size, binding, name)
    starts = sorted(best)
    first = (
        images[0].loads[0].vaddr - images[0].loads[0].offset if images and images[0].loads else 0
    )
    return ElfSymbols(
        first_load_vaddr=first,
        starts=starts,
        sizes=[best[s][0] for s in starts],
        names=[best[s][2] for s in starts],
    )


@lru_cache(maxsize=256)
def _load(path: str, dev: int, ino: int, mtime: int) -> ElfSymbols | None:
    del dev, ino, mtime  # cache key only
    try:
        return symbols_from_images(read_elf(path))
    except (OSError, NotElf, ValueError):
        return None


def load_symbols(path: str) -> ElfSymbols | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _load(path, st.st_dev, st.st_ino, st.st_mtime_ns)
