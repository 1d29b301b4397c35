"""C unit tests of the mark core (see c/walker_test.c): over the scanner's
/proc reader under ASan+UBSan, and over the snapshot child's direct loads.

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
    *(
        MARK / name
        for name in (
            "alloc.c",
            "radix_sort.c",
            "heap_walker.c",
            "leak_folding.c",
            "sweep_core.c",
            "mem_direct.c",
        )
    ),
]


@pytest.fixture(scope="module", params=["proc", "direct"])
def harness(request: pytest.FixtureRequest) -> Path:
    direct = request.param == "direct"
    return build(
        [HARNESS, *CORE],
        name=f"walker_test_{request.param}",
        cflags=[
            f"-I{SCANNER}",
            f"-I{MARK}",
            *(["-DUR_TEST_DIRECT"] if direct else []),
        ],
        sanitize=not direct,
    )


def _cases() -> list[str]:
    text = HARNESS.read_text()
    start = text.index("static const struct test tests[]")
    lines = text[start:].splitlines()
    return [line.split('"')[1] for line in lines if line.strip().startswith('{"')]


@pytest.mark.parametrize("case", _cases())
def test_c_unit(harness: Path, case: str) -> None:
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run(
        [str(harness), case], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, f"{case} failed:\n{result.stdout}\n{result.stderr}"
    assert f"ok {case}" in result.stdout
