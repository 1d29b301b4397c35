"""C unit tests of the mark core (see c/walker_test.c): over the scanner's
/proc reader under ASan+UBSan, and over the snapshot child's direct loads;
each alone and as a team of four marking threads (pthreads under ASan+UBSan
and under TSan, raw clones with direct loads, as the snapshot child runs).

Ports libmemunreachable's HeapWalker and LeakFolding tests, plus scale cases
for the iterative code paths and a brute-force reference for folding.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cbuild import NATIVE_DIR, UNIT_TEST_INCLUDE, build, cmake_sources, native_sources

SCANNER = NATIVE_DIR / "scanner"
MARK = NATIVE_DIR / "mark"
HARNESS = Path(__file__).parent / "c" / "walker_test.c"
# The whole mark core as CMake lists it, the snapshot child's direct loads
# and raw clones included, over the scanner's /proc reader and the pthread
# team the scanner marks with.
CORE = [
    *native_sources("scanner", "memory.c", "cow.c", "pin_gate.c", "pthread_team.c"),
    *cmake_sources("mark"),
    *cmake_sources("mark_child"),
]


# (build, marking threads, how it marks): TSan only checks the teams.
# "frozen": the /proc reader loaded once and frozen, the team reading it
# through views of their own, as a copy snapshot (or stopped mode once
# released) is swept. "graph": the reference graph (the default); "walk":
# its fallback for heaps too dense in pointers, marking from the roots;
# "partial": a graph of one edge in all, so every block that points
# anywhere is dense and read again in passes (a reader that cannot hold the
# heap has one, within 6 edges a block).
VARIANTS = [
    ("proc", 1, "graph"),
    ("proc", 4, "graph"),
    ("direct", 1, "graph"),
    ("direct", 4, "graph"),
    ("tsan", 4, "graph"),
    ("frozen", 4, "graph"),
    ("tsan-frozen", 4, "graph"),
    ("proc", 1, "partial"),
    ("frozen", 4, "partial"),
    ("direct", 4, "partial"),
    ("tsan", 4, "partial"),
    ("proc", 1, "walk"),
    ("direct", 4, "walk"),
    ("tsan", 4, "walk"),
]


# TSan builds and runs each case several times slower: marked slow
# (`-m "not slow"` leaves them out of a quick run; the full suite runs them).
PARAMS = [
    pytest.param(v, id=f"{v[0]}-{v[1]}-{v[2]}", marks=[pytest.mark.slow] if "tsan" in v[0] else [])
    for v in VARIANTS
]


@pytest.fixture(scope="module", params=PARAMS)
def harness(request: pytest.FixtureRequest) -> tuple[Path, int, str]:
    kind, team, mark = request.param
    exe = build(
        [HARNESS, *CORE],
        name=f"walker_test_{kind}",
        cflags=[
            f"-I{SCANNER}",
            f"-I{MARK}",
            f"-I{UNIT_TEST_INCLUDE}",
            *(["-DUR_TEST_DIRECT"] if kind == "direct" else []),
            *(["-DUR_TEST_FROZEN"] if kind.endswith("frozen") else []),
            *(["-fsanitize=thread"] if kind.startswith("tsan") else []),
        ],
        ldflags=["-fsanitize=thread"] if kind.startswith("tsan") else None,
        sanitize=kind in ("proc", "frozen"),
    )
    return exe, team, mark


def _cases() -> list[str]:
    text = HARNESS.read_text()
    start = text.index("static const struct test tests[]")
    lines = text[start:].splitlines()
    return [line.split('"')[1] for line in lines if line.strip().startswith('{"')]


@pytest.mark.parametrize("case", _cases())
def test_c_unit(harness: tuple[Path, int, str], case: str) -> None:
    exe, team, mark = harness
    env = {
        **({"UR_TEST_MAX_EDGES": "0"} if mark == "walk" else {}),
        **({"UR_TEST_MAX_EDGES": "1", "UR_TEST_PARTIAL": "1"} if mark == "partial" else {}),
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
        "UBSAN_OPTIONS": "print_stacktrace=1",
        "TSAN_OPTIONS": "halt_on_error=1",
        "UR_TEST_TEAM": str(team),
    }
    result = subprocess.run([str(exe), case], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, f"{case} failed:\n{result.stdout}\n{result.stderr}"
    assert f"ok {case}" in result.stdout
