"""Suppressions in LeakSanitizer's format on real scans of tests/triage/programs/sites.c.

sites.c leaks 31 bytes from load_config and 3 x 48 bytes from cache_insert
(175 bytes in 4 allocations).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.targets import Target
from unreachable.model.report import LeakEntry
from unreachable.symbolize.frames import Frame
from unreachable.triage.suppressions import rule_for, template_match

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
DASHES = "-" * 53


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "UNREACHABLE_SUPPRESSIONS"}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120, env=full | (env or {})
    )


def one_line_error(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res
    assert res.stdout == "" and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def generated_rules(pid: int, out: Path) -> list[str]:
    """The rules `--print-suppressions` writes to out for the target's leaks."""
    res = cli("scan", str(pid), "--print-suppressions", str(out))
    assert res.returncode == 1, res.stderr
    return [line for line in out.read_text().splitlines() if line.startswith("leak:")]


def rescan_after_growth(target: Target, supp: Path, status: int) -> dict:
    """The target leaks once more from the same sites ("grow"); its JSON
    report under those suppressions, the scan's exit status checked."""
    target.send("grow")
    assert target.read_line().startswith("GROWN")
    again = cli("scan", str(target.pid), "--json", "--suppressions", str(supp))
    assert again.returncode == status, again.stderr
    return json.loads(again.stdout)


@pytest.mark.parametrize(
    "templ,text,expected",
    [
        ("foo", "xfooy", True),  # plain text: a substring
        ("^foo", "xfoo", False),
        ("^foo", "foox", True),
        ("foo$", "xfoo", True),
        ("foo$", "foox", False),
        ("a*b", "axxb", True),
        ("a*b$", "abxb", False),  # segments taken at their first occurrence, no backtracking
        ("foo*$", "xfooy", True),
        ("*", "anything", True),
        ("", "anything", True),
        ("foo", "", False),  # an empty name never matches
        ("^", "x", True),
        ("operator new", "operator new(unsigned long)", True),
        ("Foo", "foo", False),  # case-sensitive
        ("f?o", "foo", False),  # no ?: a literal
    ],
)
def test_template_match_is_lsans(templ: str, text: str, expected: bool) -> None:
    assert template_match(templ, text) is expected


def test_function_rule_sets_leaks_apart_in_text(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    supp = tmp_path / "app.supp"
    supp.write_text("# known: the config string is kept until exit\n  leak:load_config  \n")
    res = cli("scan", str(target.pid), "--suppressions", str(supp))
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "  144 bytes in 3 unreachable allocations"
    assert "load_config" not in "\n".join(lines[: lines.index(DASHES)])
    block = lines[lines.index(DASHES) :]
    assert block[:5] == [
        DASHES,
        "Suppressions used:",
        "  count      bytes template",
        "      1         31 load_config",
        DASHES,
    ]


def test_everything_suppressed_exits_zero_and_json_lists_it_apart(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    supp = tmp_path / "all.supp"
    # A module rule (the program's own path) and a file rule that would match too:
    # the module of frame #00 is tried first.
    supp.write_text("leak:*/sites-*\nleak:sites.c\n")
    res = cli("scan", str(target.pid), "--json", "--suppressions", str(supp))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["leak_count"], doc["leak_bytes"], doc["leaks"]) == (0, 0, [])
    assert (doc["suppressed_count"], doc["suppressed_bytes"]) == (4, 175)
    assert doc["suppressions"] == [
        {"pattern": "*/sites-*", "file": str(supp), "line": 1, "count": 4, "bytes": 175}
    ]
    listed = sorted(
        (e["size"], e["similar_count"], e["suppression"]) for e in doc["suppressed_leaks"]
    )
    assert listed == [(31, 0, "*/sites-*"), (48, 2, "*/sites-*")]


def test_environment_and_option_files_add_up(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    (tmp_path / "a.supp").write_text("leak:^cache_insert$\n")
    (tmp_path / "b.supp").write_text("leak:^load_config$\n")
    res = cli(
        "scan",
        str(target.pid),
        "--json",
        "--suppressions",
        str(tmp_path / "b.supp"),
        env={"UNREACHABLE_SUPPRESSIONS": str(tmp_path / "a.supp")},
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(s["pattern"], s["count"], s["bytes"]) for s in doc["suppressions"]] == [
        ("^cache_insert$", 3, 144),
        ("^load_config$", 1, 31),
    ]


def test_print_suppressions_suppresses_exactly_the_current_leaks(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    out = tmp_path / "gen.supp"
    res = cli("scan", str(target.pid), "--print-suppressions", str(out))
    assert res.returncode == 1, res.stderr  # the scan itself still reports them
    rules = [line for line in out.read_text().splitlines() if not line.startswith("#") and line]
    assert sorted(rules) == ["leak:^cache_insert$", "leak:^load_config$"]
    again = cli("scan", str(target.pid), "--json", "--suppressions", str(out))
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["leak_count"], doc["suppressed_count"], doc["suppressed_bytes"]) == (0, 4, 175)


def test_a_stripped_programs_strdup_leak_is_not_suppressed_by_strdup(targets, tmp_path):
    """Its only named frames are libc's (__strdup): a rule naming one would
    set aside every strdup leak the program makes later. The generated rule
    names the block instead, and a new strdup leak is still reported."""
    target = targets.start(PROGRAMS / "stripped_strdup.c", options="backtrace=16", ldflags=["-s"])
    out = tmp_path / "gen.supp"
    rules = generated_rules(target.pid, out)
    assert rules == ["leak:size=17,contents=" + b"mail_version=3.7\0".hex()], rules
    doc = rescan_after_growth(target, out, 1)
    assert (doc["leak_count"], doc["suppressed_count"]) == (1, 1), doc


def test_a_block_rule_holds_no_address(targets, tmp_path):
    """A stripped program's leak is named by its block; a pointer in the
    block's first words (to its name, to a function) differs from block to
    block of the same site and moves with ASLR. The rule stops before it,
    and suppresses the next block leaked from that site."""
    target = targets.start(PROGRAMS / "stripped_method.c", options="backtrace=16", ldflags=["-s"])
    out = tmp_path / "gen.supp"
    rules = generated_rules(target.pid, out)
    assert rules == ["leak:size=96,contents=" + (0x504).to_bytes(8, "little").hex()], rules
    doc = rescan_after_growth(target, out, 0)
    assert (doc["leak_count"], doc["suppressed_count"]) == (0, 4), doc


@pytest.mark.parametrize(
    "strip,expected",
    [
        (False, "leak:^load_users$"),
        (True, "leak:size=40,contents=" + (b"users" + bytes(27)).hex()),
    ],
)
def test_a_librarys_allocation_wrapper_is_not_the_rule(targets, tmp_path, strip, expected):
    """The leak comes through its library's entry point (table_new) and
    malloc wrapper (table_alloc), as postfix's libdb leaks come through
    db_create and __os_malloc: a rule naming either would set aside every
    later leak made through them. The rule names the call into the
    library, or the block when the caller has no name (a stripped program),
    and a new leak through the library is still reported."""
    lib = build(PROGRAMS / "table_alloc.c", shared=True, name="libtable_alloc")
    ldflags = ["-s"] * strip + [str(lib)]
    target = targets.start(PROGRAMS / "wrapped_leaks.c", options="backtrace=16", ldflags=ldflags)
    out = tmp_path / "gen.supp"
    rules = generated_rules(target.pid, out)
    text = out.read_text()
    assert "table_alloc" in text and "table_new" in text  # in the comments' backtrace
    assert rules == [expected], text
    doc = rescan_after_growth(target, out, 1)
    assert (doc["leak_count"], doc["leak_bytes"], doc["suppressed_count"]) == (1, 40, 1), doc


LIBDB = "/usr/lib/x86_64-linux-gnu/libdb-5.3.so"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


@pytest.mark.parametrize(
    "frames,expected",
    [
        # Debian's libdb 5.3 under a stripped program's db_create, as recorded.
        (
            [(LIBDB, "__os_malloc"), (LIBDB, "__os_calloc"), (LIBDB, "__db_create_internal")]
            + [(LIBDB, "db_create"), ("/usr/sbin/prog", ""), (LIBC, "__libc_start_call_main")],
            "size=16,contents=6b6579",
        ),
        # The same, called from a named function of the program.
        (
            [(LIBDB, "__os_malloc"), (LIBDB, "db_create"), ("/usr/sbin/prog", "open_map")],
            "^open_map$",
        ),
        # Called from main: a rule naming main would set aside every leak.
        ([(LIBDB, "__os_malloc"), ("/usr/sbin/prog", "main")], "size=16,contents=6b6579"),
        ([(LIBC, "__strdup"), ("/usr/sbin/prog", "main")], "size=16,contents=6b6579"),
        # A program's own wrapper: only the wrapper is skipped, not the
        # program's frames up to a library that calls back into it.
        (
            [("/usr/sbin/prog", "xmalloc"), ("/usr/sbin/prog", "xstrdup")]
            + [("/usr/sbin/prog", "on_event"), ("/usr/lib/libevent-2.1.so.7", "event_loop")],
            "^on_event$",
        ),
        # The backtrace ends inside the library.
        ([(LIBDB, "__os_malloc"), (LIBDB, "db_create")], "size=16,contents=6b6579"),
        # A function that is no wrapper is the site, in a library or not.
        ([(LIBDB, "__db_open"), ("/usr/sbin/prog", "main")], "^__db_open$"),
    ],
)
def test_generated_rule_names_the_site_on_recorded_backtraces(frames, expected):
    backtrace = [Frame(0x1000 + i, m, 0x10 * i, f, 0) for i, (m, f) in enumerate(frames)]
    leak = LeakEntry(0x5000, 16, 0, 0, 0, 0, 0, 0, 16, b"key", backtrace)
    assert rule_for(leak) == expected


def test_block_rules_match_leaks_without_backtraces(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c")  # no backtraces
    supp = tmp_path / "blocks.supp"
    supp.write_text(
        "leak:size=31,contents=" + b"listen=".hex() + "\n"
        "leak:size=40-48\n"
        "leak:size=31,contents=" + b"other".hex() + "\n"
    )
    res = cli("scan", str(target.pid), "--json", "--suppressions", str(supp))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(s["line"], s["count"], s["bytes"]) for s in doc["suppressions"]] == [
        (1, 1, 31),
        (2, 3, 144),
    ]
    assert all("contents_hex" not in e for e in doc["suppressed_leaks"])  # not asked for


def test_generated_block_rules_name_size_and_contents(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c")
    out = tmp_path / "gen.supp"
    rules = sorted(generated_rules(target.pid, out))
    config = b"listen=127.0.0.1:8080 workers=\0".hex()
    cache = "63" * 32  # 'c' x 32: the first 32 of its 48 bytes
    # One rule for the three 48-byte blocks, whose first bytes are the same.
    assert rules == [f"leak:size=31,contents={config}", f"leak:size=48,contents={cache}"]
    again = cli("scan", str(target.pid), "--suppressions", str(out))
    assert again.returncode == 0, again.stdout


@pytest.mark.parametrize(
    "text,error",
    [
        ("leak:ok\nrace:foo\n", r"^unreachable-cli: error: {f}:2: unknown suppression type 'race'"),
        (
            "# fine\n\nfoo\n",
            r"^unreachable-cli: error: {f}:3: not a suppression: expected leak:PATTERN$",
        ),
        ("leak:size=12-3\n", r"^unreachable-cli: error: {f}:1: size range 12-3 is empty$"),
        (
            "leak:size=1,contents=abc\n",
            r"^unreachable-cli: error: {f}:1: contents must be whole bytes",
        ),
        ("leak:size=x\n", r"^unreachable-cli: error: {f}:1: bad block rule 'size=x'"),
    ],
)
def test_bad_file_is_one_line_with_its_line_number(tmp_path, text, error):
    supp = tmp_path / "bad.supp"
    supp.write_text(text)
    # Refused before any target is touched: pid 1 is never scanned.
    line = one_line_error(cli("scan", "1", "--suppressions", str(supp)))
    assert re.search(error.format(f=re.escape(str(supp))), line), line


def test_missing_file_from_the_environment(tmp_path):
    missing = tmp_path / "none.supp"
    res = cli("scan", "1", env={"UNREACHABLE_SUPPRESSIONS": str(missing)})
    line = one_line_error(res)
    assert line == f"unreachable-cli: error: {missing}: cannot read: No such file or directory"


def test_profiles_add_up_to_the_totals_left(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    supp = tmp_path / "app.supp"
    supp.write_text("leak:load_config\n")
    res = cli("scan", str(target.pid), "--format", "collapsed", "--suppressions", str(supp))
    assert res.returncode == 1, res.stderr
    weights = [int(line.rsplit(" ", 1)[1]) for line in res.stdout.splitlines()]
    assert sum(weights) == 144
    assert "load_config" not in res.stdout
