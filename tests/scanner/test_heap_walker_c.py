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

from tests.support.cbuild import REPO_DIR, build

SCANNER = REPO_DIR / "native" / "scanner"
MARK = REPO_DIR / "native" / "mark"
HARNESS = Path(__file__).parent / "c" / "walker_test.c"
CORE = [
    SCANNER / "memory.c",
    SCANNER / "pthread_team.c",
    *(
        MARK / name
        for name in (
            "alloc.c",
            "radix_sort.c",
            "heap_walker.c",
            "leak_folding.c",
            "sweep_core.c",
            "mem_direct.c",
            "raw_thread.c",
            "work_pool.c",
        )
    ),
]


# (build, marking threads): TSan only checks the teams. "frozen": the /proc
# reader loaded once and frozen, the team reading it through views of their
# own, as a copy snapshot (or stopped mode once released) is swept.
VARIANTS = [
    ("proc", 1),
    ("proc", 4),
    ("direct", 1),
    ("direct", 4),
    ("tsan", 4),
    ("frozen", 4),
    ("tsan-frozen", 4),
]


@pytest.fixture(scope="module", params=VARIANTS, ids=[f"{k}-{n}" for k, n in VARIANTS])
def harness(request: pytest.FixtureRequest) -> tuple[Path, int]:
    kind, team = request.param
    exe = build(
        [HARNESS, *CORE],
        name=f"walker_test_{kind}",
        cflags=[
            f"-I{SCANNER}",
            f"-I{MARK}",
            *(["-DUR_TEST_DIRECT"] if kind == "direct" else []),
            *(["-DUR_TEST_FROZEN"] if kind.endswith("frozen") else []),
            *(["-fsanitize=thread"] if kind.startswith("tsan") else []),
        ],
        ldflags=["-fsanitize=thread"] if kind.startswith("tsan") else None,
        sanitize=kind in ("proc", "frozen"),
    )
    return exe, team


def _cases() -> list[str]:
    text = HARNESS.read_text()
    start = text.index("static const struct test tests[]")
    lines = text[start:].splitlines()
    return [line.split('"')[1] for line in lines if line.strip().startswith('{"')]


@pytest.mark.parametrize("case", _cases())
def test_c_unit(harness: tuple[Path, int], case: str) -> None:
    exe, team = harness
    env = {
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
        "UBSAN_OPTIONS": "print_stacktrace=1",
        "TSAN_OPTIONS": "halt_on_error=1",
        "UR_TEST_TEAM": str(team),
    }
    result = subprocess.run([str(exe), case], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, f"{case} failed:\n{result.stdout}\n{result.stderr}"
    assert f"ok {case}" in result.stdout
