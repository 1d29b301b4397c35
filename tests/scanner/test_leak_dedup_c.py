"""native/scanner/leak_dedup.c under ASan+UBSan (tests/scanner/c/leak_dedup_test.c)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import (
    NATIVE_DIR,
    UNIT_TEST_INCLUDE,
    build,
    native_sources,
    run_unit_test,
)


def test_leak_dedup_under_sanitizers() -> None:
    exe = build(
        [
            Path(__file__).parent / "c" / "leak_dedup_test.c",
            *native_sources("scanner", "leak_dedup.c"),
        ],
        name="leak_dedup_test",
        cflags=[f"-I{NATIVE_DIR / 'scanner'}", f"-I{UNIT_TEST_INCLUDE}"],
        sanitize=True,
    )
    assert run_unit_test(exe).strip() == "ok leak_dedup"
