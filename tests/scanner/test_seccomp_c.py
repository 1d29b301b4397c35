"""C unit test of the classic-BPF seccomp evaluator (see c/seccomp_test.c),
under ASan+UBSan; tests/scan/test_seccomp.py runs it on real filters."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cbuild import NATIVE_DIR, build, native_sources

SCANNER = NATIVE_DIR / "scanner"


def test_seccomp_evaluator() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "seccomp_test.c",
            *native_sources("scanner", "seccomp_check.c"),
        ],
        name="seccomp_test",
        cflags=[f"-I{SCANNER}"],
        sanitize=True,
    )
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"
