"""native/mark/entry_order.c (a registry's entries put in address order by
both readers) under ASan+UBSan: tests/scanner/c/entry_order_test.c."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cbuild import REPO_DIR, build

MARK = REPO_DIR / "native" / "mark"


def test_entry_order_under_sanitizers() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "entry_order_test.c",
            *(MARK / name for name in ("entry_order.c", "radix_sort.c", "alloc.c")),
        ],
        name="entry_order_test",
        cflags=[f"-I{MARK}"],
        sanitize=True,
    )
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok entry_order"
