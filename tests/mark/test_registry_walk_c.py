"""native/mark/registry_walk.h's counts of a size map's live entries under
ASan+UBSan: tests/mark/c/registry_walk_test.c."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import NATIVE_DIR, UNIT_TEST_INCLUDE, build, run_unit_test


def test_registry_walk_counts_under_sanitizers() -> None:
    exe = build(
        [Path(__file__).parent / "c" / "registry_walk_test.c"],
        name="registry_walk_test",
        cflags=[f"-I{NATIVE_DIR / 'mark'}", f"-I{UNIT_TEST_INCLUDE}"],
        sanitize=True,
    )
    assert run_unit_test(exe).strip() == "ok registry_walk"
