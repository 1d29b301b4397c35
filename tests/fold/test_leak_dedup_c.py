"""native/scanner/leak_dedup.c under ASan+UBSan (tests/fold/c/leak_dedup_test.c)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cbuild import REPO_DIR, build

SCANNER = REPO_DIR / "native" / "scanner"


def test_leak_dedup_under_sanitizers() -> None:
    exe = build(
        [Path(__file__).parent / "c" / "leak_dedup_test.c", SCANNER / "leak_dedup.c"],
        name="leak_dedup_test",
        cflags=[f"-I{SCANNER}"],
        sanitize=True,
    )
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok leak_dedup"
