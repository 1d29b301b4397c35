"""why and retainers on a program whose heap has a known structure
(programs/retention.c): exact chains, root names, offsets and retained sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.targets import Target
from tests.support.tracking import copy_unsupported
from unreachable.errors import InvalidArgument
from unreachable.retention.retainers import retainers
from unreachable.retention.why import why
from unreachable.scan import ScanOptions

PROGRAM = Path(__file__).parent / "programs" / "retention.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


@pytest.fixture
def target(targets) -> Target:
    return targets.start(PROGRAM, options="backtrace=8")


def _exe(t: Target) -> str:
    return os.readlink(f"/proc/{t.pid}/exe")


def _list_thread(t: Target) -> int:
    return t.int("list_tid")


def _chain(data: dict) -> list[tuple[int, int, int | None]]:
    return [(s["address"], s["size"], s["pointer_offset"]) for s in data["chain"]]


def _functions(block: dict) -> list[str]:
    return [f["function"] for f in block["backtrace"]]


@pytest.mark.parametrize(
    "snapshot",
    [
        "fork",
        "stopped",
        pytest.param(
            "copy", marks=pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
        ),
    ],
)
def test_why_a_cache_entry_names_the_global_and_each_offset(target, snapshot):
    t = target
    data = why(t.pid, t.int("c3_value"), ScanOptions(snapshot=snapshot))
    assert data["snapshot"] == snapshot
    assert data["reachable"] is True
    root = data["root"]
    assert (root["kind"], root["symbol"], root["offset"], root["object"]) == (
        "global",
        "g_cache",
        5 * 8,
        _exe(t),
    )
    assert root["address"] == t.int("cache") + 5 * 8
    assert root["value"] == t.int("c1")
    assert root["name"] == f"g_cache+0x28 in {_exe(t)}"
    assert _chain(data) == [
        (t.int("c1"), 40, 0),
        (t.int("c2"), 40, 0),
        (t.int("c3"), 40, 0x20),
        (t.int("c3_value"), 100, None),
    ]
    assert [s["points_to"] for s in data["chain"]] == [
        t.int("c2"),
        t.int("c3"),
        t.int("c3_value"),
        None,
    ]
    assert data["block"]["address"] == t.int("c3_value") and data["block"]["offset"] == 0
    assert _functions(data["chain"][0])[:2] == ["cache_put", "fill_cache"]
    assert data["leak"] is None and data["referrers"] == []


def test_why_an_interior_address_finds_its_block(target):
    t = target
    data = why(t.pid, t.int("c3_value") + 8)
    assert (data["block"]["address"], data["block"]["offset"]) == (t.int("c3_value"), 8)
    assert len(data["chain"]) == 4


def test_why_a_list_names_the_thread_stack_slot_of_its_head(target):
    t = target
    data = why(t.pid, t.int("n4"))
    root = data["root"]
    assert (root["kind"], root["thread"], root["address"], root["value"]) == (
        "stack",
        _list_thread(t),
        t.int("head_at"),
        t.int("head"),
    )
    # The unwound stack says whose frame the slot is in: hold_list's, called
    # from list_thread, at its call of pause().
    frame = root["frame"]
    assert (frame["index"], frame["function"]) == (1, "hold_list")
    assert frame["file"].endswith("retention.c") and frame["line"] > 0
    assert root["name"] == (
        f"stack of thread {_list_thread(t)}, frame #1 hold_list at {frame['file']}:"
        f"{frame['line']} (the word at {t.int('head_at'):#x}, SP+{root['sp_offset']:#x})"
    )
    assert _chain(data) == [
        (t.int("head"), 32, 0),
        (t.int("n2"), 32, 0),
        (t.int("n3"), 32, 0),
        (t.int("n4"), 32, None),
    ]
    assert _functions(data["chain"][0])[:2] == ["make_list", "hold_list"]


def test_why_a_thread_local_names_the_variable(target):
    t = target
    data = why(t.pid, t.int("tls"))
    root = data["root"]
    assert (root["kind"], root["thread"], root["value"]) == ("tls", t.int("list_tid"), t.int("tls"))
    assert root["name"] == f"TLS of thread {t.int('list_tid')}: tls_slot+0x0 in {_exe(t)}"
    assert _chain(data) == [(t.int("tls"), 56, None)]


def test_why_a_register_names_it(target):
    t = target
    data = why(t.pid, t.int("reg"))
    root = data["root"]
    assert (root["kind"], root["thread"], root["value"]) == (
        "registers",
        t.int("reg_tid"),
        t.int("reg"),
    )
    assert root["name"] == f"register r12 of thread {t.int('reg_tid')}"
    assert "address" not in root
    assert _chain(data) == [(t.int("reg"), 88, None)]


def test_why_a_connection_names_the_epoll_registration(target):
    t = target
    data = why(t.pid, t.int("buf"))
    root = data["root"]
    assert (root["kind"], root["value"]) == ("kernel", t.int("conn"))
    assert (root["fd"], root["epoll_fd"]) == (t.int("conn_fd"), t.int("epoll_fd"))
    assert root["name"] == (
        f"epoll data of fd {t.int('conn_fd')} in epoll fd {t.int('epoll_fd')} (held by the kernel)"
    )
    assert "address" not in root
    assert _chain(data) == [(t.int("conn"), 64, 8), (t.int("buf"), 200, None)]


def test_why_a_leaked_block_is_a_leak_and_names_what_points_at_it(target):
    t = target
    data = why(t.pid, t.int("leaked"))
    assert data["reachable"] is False and data["root"] is None
    assert data["leak"] == t.int("leak")
    assert _chain(data) == [(t.int("leak"), 48, 16), (t.int("leaked"), 48, None)]
    assert data["referrers"] == [{"address": t.int("leak"), "size": 48}]


def test_why_an_address_in_no_block_is_bad_input(target):
    with pytest.raises(InvalidArgument, match="is not inside any live allocation"):
        why(target.pid, 0x10)


def _by_name(entries: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in entries}


def test_retainers_exact_sizes_per_root_and_site(target):
    t = target
    data = retainers(t.pid, limit=100)
    roots = _by_name(data["roots"])
    cache = roots[f"g_cache in {_exe(t)}"]
    assert (cache["kind"], cache["retained_bytes"], cache["retained_count"]) == ("global", 560, 8)
    stack = roots[f"stack of thread {_list_thread(t)}"]
    assert (stack["kind"], stack["retained_bytes"], stack["retained_count"]) == ("stack", 128, 4)
    epoll = roots["epoll data (held by the kernel)"]
    assert (epoll["kind"], epoll["retained_bytes"], epoll["retained_count"]) == ("kernel", 264, 2)
    regs = roots[f"registers of thread {t.int('reg_tid')}"]
    assert (regs["kind"], regs["retained_bytes"], regs["retained_count"]) == ("registers", 88, 1)
    # The thread's TLS also holds what glibc allocated for it (its DTV).
    tls = roots[f"TLS of thread {t.int('list_tid')}"]
    assert ("keep_in_tls", 56, 1) in [
        (s["backtrace"][0]["function"], s["bytes"], s["count"]) for s in tls["sites"]
    ]
    # The cache's sites: 4 entries of 40 bytes, 4 values of 100.
    assert sorted((s["bytes"], s["count"]) for s in cache["sites"]) == [(160, 4), (400, 4)]
    sites = {
        (s["backtrace"][0]["function"], s["backtrace"][0]["line"]): s
        for s in data["sites"]
        if s["backtrace"]
    }
    entry = next(s for (fn, _), s in sites.items() if fn == "cache_put" and s["bytes"] == 160)
    # A chain of entries counts once: its head dominates the rest.
    assert (entry["retained_bytes"], entry["retained_count"], entry["count"]) == (560, 8, 4)
    assert entry["held_by"] == [{"root": f"g_cache in {_exe(t)}", "bytes": 560}]
    # Bucket 5's head retains 420 bytes, bucket 9's 140: `why` starts there.
    assert entry["largest"] == t.int("c1")
    value = next(s for (fn, _), s in sites.items() if fn == "cache_put" and s["bytes"] == 400)
    assert (value["retained_bytes"], value["retained_count"]) == (400, 4)
    nodes = next(s for (fn, _), s in sites.items() if fn == "make_list")
    assert (nodes["retained_bytes"], nodes["retained_count"], nodes["count"]) == (128, 4, 4)
    # The leak is no one's.
    assert data["reachable_bytes"] == data["allocation_bytes"] - 96


def test_retainers_site_pattern_keeps_the_matching_sites_and_their_roots(target):
    t = target
    data = retainers(t.pid, site="cache_*", limit=100)
    assert [r["name"] for r in data["roots"]] == [f"g_cache in {_exe(t)}"]
    assert (data["roots"][0]["site_bytes"], data["roots"][0]["site_count"]) == (560, 8)
    assert {s["backtrace"][0]["function"] for s in data["sites"]} == {"cache_put"}
    assert retainers(t.pid, site="no_such_function")["roots"] == []
    nothing = retainers(t.pid, limit=0)
    assert (nothing["roots"], nothing["sites"]) == ([], [])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_cli_why_and_retainers(target):
    t = target
    res = _cli("why", str(t.pid), t.info["buf"].removeprefix("0x"))
    assert res.returncode == 0, res.stderr
    assert (
        f"root  kernel: epoll data of fd {t.int('conn_fd')} in epoll fd {t.int('epoll_fd')} "
        f"(held by the kernel) (holds {t.int('conn'):#x})"
    ) in res.stdout
    assert f"#0  64 bytes at {t.int('conn'):#x}: +0x8 -> {t.int('buf'):#x}" in res.stdout
    res = _cli("why", str(t.pid), t.info["leaked"], "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["leak"] == t.int("leak")
    res = _cli("retainers", str(t.pid), "--json", "--limit", "2")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert len(data["roots"]) == 2 and data["roots"][0]["name"] == f"g_cache in {_exe(t)}"
    res = _cli("retainers", str(t.pid), "--site", "make_list")
    assert res.returncode == 0, res.stderr
    assert f"128 bytes in 4 blocks (of 128)  stack: stack of thread {_list_thread(t)}" in res.stdout


def test_cli_bad_input_is_one_line_and_exit_2(target):
    res = _cli("why", str(target.pid), "0x10")
    assert res.returncode == 2
    assert res.stderr == (
        f"unreachable-cli: error: 0x10 is not inside any live allocation of process {target.pid}\n"
    )
    res = _cli("why", str(target.pid), "nowhere")
    assert res.returncode == 2 and "not a hexadecimal address" in res.stderr
    res = _cli("retainers", str(target.pid), "--site", "*")
    assert res.returncode == 2 and res.stderr.count("\n") == 1


def test_retainers_without_backtraces_groups_blocks_by_size(targets):
    t = targets.start(PROGRAM)
    data = retainers(t.pid, limit=100)
    stack = _by_name(data["roots"])[f"stack of thread {t.int('list_tid')}"]
    assert stack["sites"] == [{"bytes": 128, "count": 4, "backtrace": [], "size": 32}]
    cache = _by_name(data["roots"])[f"g_cache in {_exe(t)}"]
    assert (cache["retained_bytes"], cache["retained_count"]) == (560, 8)
    assert sorted((s["size"], s["bytes"]) for s in cache["sites"]) == [(40, 160), (100, 400)]
    res = _cli("retainers", str(t.pid))
    assert res.returncode == 0, res.stderr
    assert "128 bytes in 4 blocks from 32-byte blocks (no backtrace)" in res.stdout


SHAPES = Path(__file__).parent / "programs" / "retention_shapes.c"


def test_dominators_of_a_diamond_a_cycle_a_shared_block_and_a_long_list(targets):
    t = targets.start(SHAPES)
    data = retainers(t.pid, limit=1000)
    roots = _by_name(data["roots"])
    one, two = roots[f"g_one in {_exe(t)}"], roots[f"g_two in {_exe(t)}"]
    chain = roots[f"g_chain in {_exe(t)}"]
    assert (one["retained_bytes"], one["retained_count"]) == (160, 5)
    assert (two["retained_bytes"], two["retained_count"]) == (120, 2)
    assert (chain["retained_bytes"], chain["retained_count"]) == (1_600_000, 200_000)
    shared = roots["several roots, none alone"]
    assert {"bytes": 72, "count": 1, "backtrace": [], "size": 72} in shared["sites"]
    sites = {s["size"]: s for s in data["sites"]}
    # D heads the cycle D <-> E: its site retains both; A's retains all five.
    assert (sites[40]["retained_bytes"], sites[40]["retained_count"]) == (88, 2)
    assert (sites[16]["retained_bytes"], sites[16]["retained_count"]) == (160, 5)
    assert sites[16]["held_by"] == [{"root": f"g_one in {_exe(t)}", "bytes": 160}]
    assert (sites[16]["largest"], sites[40]["largest"]) == (t.int("a"), t.int("d"))
    # A list of one site counts once: its head retains the rest.
    assert (sites[8]["retained_bytes"], sites[8]["count"]) == (1_600_000, 200_000)
    assert sites[72]["held_by"] == [{"root": "several roots", "bytes": 72}]


def test_why_takes_a_shortest_chain(targets):
    t = targets.start(SHAPES)
    e = why(t.pid, t.int("e"))
    assert e["root"]["name"] == f"g_one+0x0 in {_exe(t)}"
    assert e["root"]["address"] == t.int("one")
    # Through B (A's first pointer), not C: both are as short.
    assert _chain(e) == [
        (t.int("a"), 16, 0),
        (t.int("b"), 24, 0),
        (t.int("d"), 40, 0),
        (t.int("e"), 48, None),
    ]
    h = why(t.pid, t.int("h"))
    assert h["root"]["address"] == t.int("two")
    assert _chain(h) == [(t.int("f"), 56, 8), (t.int("h"), 72, None)]


def test_a_cxx_global_is_named_demangled(targets):
    """why and retainers print a C++ global as its frames are printed,
    demangled: cache::table, not _ZN5cache5tableE."""
    t = targets.start(PROGRAM.parent / "cxx_global.cpp", cxx=True)
    root = why(t.pid, t.int("block"), ScanOptions())["root"]
    assert (root["symbol"], root["name"]) == ("cache::table", f"cache::table+0x0 in {_exe(t)}")
    names = [r["name"] for r in retainers(t.pid, ScanOptions())["roots"]]
    assert f"cache::table in {_exe(t)}" in names


def test_a_stripped_programs_bss_is_named_as_its_globals(targets):
    """The .bss past a stripped program's file pages is an anonymous
    mapping, but it holds the program's globals: why and retainers say so,
    not "anonymous memory"."""
    t = targets.start(PROGRAM.parent / "stripped_bss.c", ldflags=["-s"])
    with open(f"/proc/{t.pid}/maps") as maps:
        slot = t.int("slot")
        line = next(
            ln
            for ln in maps
            if int(ln.split("-")[0], 16) <= slot < int(ln.split()[0].split("-")[1], 16)
        )
    assert len(line.split()) == 5, line  # precondition: no file named there
    root = why(t.pid, t.int("block"), ScanOptions())["root"]
    assert (root["kind"], root["region"]) == ("global", f"globals of {_exe(t)}"), root
    names = [r["name"] for r in retainers(t.pid, ScanOptions())["roots"]]
    assert f"globals of {_exe(t)}" in names, names


def test_a_stripped_programs_data_and_bss_are_one_retainer(targets):
    """.data (the file's writable pages) and .bss past them (anonymous) are
    one object's globals: one entry, holding both blocks, not two entries
    of one name."""
    t = targets.start(PROGRAM.parent / "stripped_bss.c", ldflags=["-s"])
    name = f"globals of {_exe(t)}"
    mine = [r for r in retainers(t.pid, ScanOptions())["roots"] if r["name"] == name]
    assert [(r["retained_count"], r["retained_bytes"]) for r in mine] == [(2, 300)], mine
    regions = {
        why(t.pid, t.int(b), ScanOptions())["root"]["region"] for b in ("block", "data_block")
    }
    assert regions == {name}, regions


def test_two_loads_of_one_library_are_two_retainers(targets):
    """dlmopen loads one stripped library twice: each load's .data and .bss
    are one entry of its own, named by where it is loaded, holding its own
    two blocks."""
    lib = build(PROGRAM.parent / "twice_loaded_lib.c", shared=True, ldflags=["-s"])
    t = targets.start(PROGRAM.parent / "twice_loaded.c", str(lib))
    with open(f"/proc/{t.pid}/maps") as maps:
        # Each load's first mapping: the file's first page (a library is linked at 0).
        firsts = [ln for ln in maps if ln.rstrip().endswith(str(lib)) and ln.split()[2] == "0" * 8]
    names = [f"globals of {lib} (loaded at {int(ln.split('-')[0], 16):#x})" for ln in firsts]
    assert len(names) == 2, firsts
    held = {
        r["name"]: (r["retained_count"], r["retained_bytes"])
        for r in retainers(t.pid, ScanOptions())["roots"]
        if str(lib) in r["name"]
    }
    assert held == dict.fromkeys(names, (2, 300)), held


def _sections(path: str) -> dict[str, tuple[int, int]]:
    """name -> (address, end) of each section, as readelf prints them."""
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True)
    sections = {}
    for line in out.stdout.splitlines():
        f = line.replace("[ ", "[").split()
        if len(f) > 5 and f[0].startswith("[") and f[1].startswith("."):
            sections[f[1]] = (int(f[3], 16), int(f[3], 16) + int(f[5], 16))
    return sections


@pytest.mark.parametrize("held", ["", "data_"])
def test_a_global_without_a_symbol_is_named_by_its_address_in_the_object(targets, held):
    """Without a symbol, a global is named by the word's address in the
    object's own address space (what readelf and gdb show, as a frame's
    rel_pc is), in .bss past the file's pages and in .data alike: an offset
    into its mapping points nowhere in the file (0x58 into a stripped
    library's .data page named its ELF header)."""
    t = targets.start(PROGRAM.parent / "stripped_bss.c", ldflags=["-s"])
    exe = _exe(t)
    with open(f"/proc/{t.pid}/maps") as maps:
        first = next(ln for ln in maps if ln.rstrip().endswith(exe))
    assert first.split()[2] == "00000000", first  # precondition: a PIE, linked at 0
    vaddr = t.int(held + "slot") - int(first.split("-")[0], 16)
    section = ".bss" if held == "" else ".data"
    lo, hi = _sections(exe)[section]
    assert lo <= vaddr < hi, (hex(vaddr), section, hex(lo), hex(hi))
    root = why(t.pid, t.int(held + "block"), ScanOptions())["root"]
    assert root["kind"] == "global" and "symbol" not in root, root
    assert root["name"] == f"{exe}+{vaddr:#x} (no symbol)", root
    assert root["vaddr"] == vaddr, root


def test_two_file_statics_of_one_name_are_told_apart(targets):
    """Two source files' `static void *table` are two variables: retainers
    gives each its own entry and why its own root, named with its address
    in the object (readelf's), not two entries of one name."""
    t = targets.start([PROGRAM.parent / "static_twice.c", PROGRAM.parent / "static_twice_other.c"])
    exe = _exe(t)
    held = {
        r["name"]: r["retained_bytes"]
        for r in retainers(t.pid, ScanOptions())["roots"]
        if r.get("symbol", "").startswith("table")
    }
    assert len(held) == 2 and sorted(held.values()) == [100, 200], held
    roots = [why(t.pid, t.int(b), ScanOptions())["root"] for b in ("block", "other")]
    assert roots[0]["region"] != roots[1]["region"], roots
    for root, size in zip(roots, (100, 200), strict=True):
        assert held[root["region"]] == size and root["region"].endswith(f" in {exe}"), root
