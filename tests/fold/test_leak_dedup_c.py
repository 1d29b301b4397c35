"""native/scanner/leak_dedup.c under ASan+UBSan (tests/fold/c/leak_dedup_test.c)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import REPO_DIR, UNIT_TEST_INCLUDE, build, run_unit_test

SCANNER = REPO_DIR / "native" / "scanner"


def test_leak_dedup_under_sanitizers() -> None:
    exe = build(
        [Path(__file__).parent / "c" / "leak_dedup_test.c", SCANNER / "leak_dedup.c"],
        name="leak_dedup_test",
        cflags=[f"-I{SCANNER}", f"-I{UNIT_TEST_INCLUDE}"],
        sanitize=True,
    )
    assert run_unit_test(exe).strip() == "ok leak_dedup"
