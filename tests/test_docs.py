"""The docs describe how the code works, for a newcomer: history belongs in
git log, measurements in bench/RESULTS.md, and nothing points outside the
repository. These checks keep dated diary entries, session and issue
numbers, and paths of one machine out of docs/ and README.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]

# Each rule: what it finds, and why the text must not have it.
EVERYWHERE = {
    "a date": re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    "an issue number": re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE),
    # Docs name files from the repository's root (`native/shim/shim.c`), so
    # a path that climbs with ../ or a machine's absolute path leaves it.
    "a file outside the repository": re.compile(r"(?<![.\w])\.\./|/work/"),
}
# Words checked in prose only: a code span may name a file or an API
# (`session.c`, `release=session`). A session as a piece of history is
# numbered or placed in time ("session 14", "the last session"); the
# kernel's sessions (setsid, autogroups) are neither.
PROSE = {
    "a session": re.compile(
        r"\bsessions?\s*#?\d+"
        r"|\b(this|that|last|previous|next|earlier|later|current|example|one)\s+sessions?\b",
        re.IGNORECASE,
    ),
}
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _findings(text: str) -> list[str]:
    found = []
    prose = CODE_SPAN.sub("", text)
    for number, (line, prose_line) in enumerate(
        zip(text.splitlines(), prose.splitlines(), strict=True), start=1
    ):
        for what, pattern in EVERYWHERE.items():
            if m := pattern.search(line):
                found.append(f"{number}: {what} ({m.group(0)!r})")
        for what, pattern in PROSE.items():
            if m := pattern.search(prose_line):
                found.append(f"{number}: {what} ({m.group(0)!r})")
    return found


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_docs_carry_no_history_and_no_outside_paths(path: Path) -> None:
    found = _findings(path.read_text())
    assert not found, f"{path.relative_to(REPO)}:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "Measured 2026-11-24 on the VM.",
        "as session 14 found",
        "An example session:",
        "as the last session measured",
        "this session's numbers",
        "(issue 3)",
        "see issue #12",
        "the repro in ../elsewhere/repro",
        "/work/main/examples/leaky.c:26",
    ],
)
def test_each_rule_finds_what_it_is_for(text: str) -> None:
    assert _findings(text)


def test_code_spans_may_name_sessions() -> None:
    assert not _findings("`native/scanner/session.c` and `sweep(release=session)`")


def test_the_kernels_sessions_are_no_history() -> None:
    assert not _findings("the child calls setsid(): a session of its own, as a login session")


def test_an_elided_path_is_no_path_outside() -> None:
    assert not _findings("#00  pc 00000000000012fa  .../sites (cache_insert+27) .../sites.c:31")
