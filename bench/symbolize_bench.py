"""Cold and warm symbolization of 1,000 frames across libc, libstdc++ and a test program.

Not a test: prints timings against the targets (cold <= 1 s, warm <= 50 ms).

    python bench/symbolize_bench.py [--runs 5]

cold:        empty on-disk cache, nothing in memory (a first scan)
warm (disk): on-disk cache filled by the cold run, nothing in memory (a second
             `unreachable-cli scan` process)
warm (mem):  the same process again (the daemon's repeated scans)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import results  # noqa: E402
from tests.symbolize import program  # noqa: E402
from unreachable.process.maps import Mapping, parse_maps  # noqa: E402
from unreachable.symbolize import objects  # noqa: E402
from unreachable.symbolize.elf_file import read_elf  # noqa: E402
from unreachable.symbolize.elf_symbols import symbols_from_images  # noqa: E402
from unreachable.symbolize.frames import Symbolizer  # noqa: E402

TARGETS = {"cold": 1.0, "warm (disk)": 0.050, "warm (mem)": 0.050}


def _pc_for(maps: list[Mapping], path: str, vaddr: int) -> int | None:
    image = read_elf(path)
    for seg in image.loads:
        if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            off = vaddr - seg.vaddr + seg.offset
            for m in maps:
                if m.path == path and m.offset <= off < m.offset + (m.end - m.start):
                    return m.start + off - m.offset
    return None


def frames_to_symbolize(maps: list[Mapping], total: int = 1000) -> list[int]:
    """pcs inside functions of libc (40), libstdc++ (40) and the program (all of them)."""
    rng = random.Random(6)
    exe = str(program.program())
    libs = {m.path for m in maps if m.path.startswith("/")}
    libc = next(p for p in libs if os.path.basename(p).startswith("libc.so"))
    libstdcxx = next(p for p in libs if "libstdc++" in p)
    plan = [(libc, 40, 350), (libstdcxx, 40, 350), (exe, 0, 300)]
    pcs: list[int] = []
    for path, nfunc, nframes in plan:
        syms = symbols_from_images(read_elf(path))
        funcs = [(s, z) for s, z in zip(syms.starts, syms.sizes, strict=True) if z > 16]
        chosen = rng.sample(funcs, nfunc) if nfunc else funcs
        picked: set[int] = set()
        while len(picked) < min(nframes, sum(z - 1 for _, z in chosen)):
            start, size = rng.choice(chosen)
            pc = _pc_for(maps, path, start + rng.randrange(1, size))
            if pc is not None:
                picked.add(pc)
        pcs += sorted(picked)
    rng.shuffle(pcs)
    return pcs[:total]


def _time(maps: list[Mapping], pcs: list[int], cache_dir: str) -> tuple[float, list]:
    stacks = {i: tuple(pcs[i : i + 20]) for i in range(0, len(pcs), 20)}
    t0 = time.perf_counter()
    out = Symbolizer(None, maps, cache_dir=cache_dir).symbolize(stacks)
    return time.perf_counter() - t0, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    run = program.run()
    maps = parse_maps(run.maps_text)
    pcs = frames_to_symbolize(maps)
    results: dict[str, list[float]] = {k: [] for k in TARGETS}
    resolved = with_line = 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="symbench-") as cache:
            objects.clear_memory_cache()
            cold, out = _time(maps, pcs, cache)
            objects.clear_memory_cache()
            disk, out2 = _time(maps, pcs, cache)
            mem, out3 = _time(maps, pcs, cache)
            assert out == out2 == out3
            results["cold"].append(cold)
            results["warm (disk)"].append(disk)
            results["warm (mem)"].append(mem)
            frames = [f for stack in out.values() for f in stack]
            resolved = sum(bool(f.function) for f in frames)
            with_line = sum(bool(f.line) for f in frames)
    by_map: dict[str, int] = {}
    for pc in pcs:
        m = next(m for m in maps if m.start <= pc < m.end)
        by_map[os.path.basename(m.path)] = by_map.get(os.path.basename(m.path), 0) + 1
    print(f"{len(pcs)} frames: {by_map}; {resolved} with a function, {with_line} with file:line")
    print(f"median of {args.runs} runs:")
    for name, target in TARGETS.items():
        t = statistics.median(results[name])
        print(
            f"  {name:12s} {t * 1000:9.2f} ms   target {target * 1000:6.0f} ms"
            f"   ratio {t / target:6.3f}  (min {min(results[name]) * 1000:.2f} ms)"
        )
    return 0


if __name__ == "__main__":
    results.run("symbolize_bench", "Symbolization", main)
