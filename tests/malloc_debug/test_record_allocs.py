"""record_allocs: SIGRTMAX-18 dumps every call in bionic's line format, then starts over."""

from __future__ import annotations

import os
import signal

from tests.malloc_debug.support import wait_file

RECORD = signal.SIGRTMAX - 18


def read_values(p, until="READY"):
    out = {}
    while (line := p.read_line()) != until:
        key, _, value = line.partition(" ")
        out[key] = value
    return out


def main_sequence(v):
    t = v["main"]
    return [
        f"{t}: malloc {v['a']} 20",
        f"{t}: calloc {v['b']} 32 4",
        f"{t}: realloc {v['c']} {v['a']} 12",
        f"{t}: realloc {v['d']} 0x0 30",
        f"{t}: memalign {v['e']} 16 104",
        f"{t}: memalign {v['f']} 64 8",
        f"{t}: memalign {v['g']} 32 64",
        f"{t}: free {v['b']}",
        f"{t}: realloc 0x0 {v['d']} 0",
    ]


def check_first_dump(lines, v):
    expected = main_sequence(v)
    start = lines.index(expected[0])
    main_lines = [ln for ln in lines[start:] if ln.startswith(v["main"] + ":")]
    assert main_lines[: len(expected)] == expected
    wtid, waddr = v["thread"].split()[0], v["thread"].split()[2]
    worker = [ln for ln in lines if ln.startswith(wtid + ":")]
    assert f"{wtid}: malloc {waddr} 77" in worker
    assert worker.index(f"{wtid}: malloc {waddr} 77") < worker.index(f"{wtid}: free {waddr}")
    assert worker[-1] == f"{wtid}: thread_done 0x0"


def test_dump_on_signal_then_start_over(procs, tmp_path):
    out = tmp_path / "rec.txt"
    p = procs.start("record_allocs.c", options=f"record_allocs record_allocs_file={out}")
    v = read_values(p)
    os.kill(p.pid, RECORD)  # the process is idle: the helper thread writes the file
    text = wait_file(out, lambda t: "thread_done" in t)
    check_first_dump(text.splitlines(), v)
    out.unlink()
    p.send("go")
    x = read_values(p)["x"]
    os.kill(p.pid, RECORD)
    t = v["main"]
    text = wait_file(out, lambda s: f"{t}: free {x}" in s)
    lines = text.splitlines()
    assert lines[lines.index(f"{t}: malloc {x} 5") + 1] == f"{t}: free {x}"
    assert not any(f"malloc {v['a']} 20" in ln for ln in lines)  # dumped records are gone
    assert p.finish() == 0


def test_total_entries_limit(procs, tmp_path):
    out = tmp_path / "rec.txt"
    p = procs.start("record_allocs.c", options=f"record_allocs=5 record_allocs_file={out}")
    read_values(p)
    os.kill(p.pid, RECORD)
    text = wait_file(out, lambda t: t.count("\n") >= 5)
    assert len(text.splitlines()) == 5
    p.send("go")
    x = read_values(p)["x"]
    os.kill(p.pid, RECORD)  # room again after the dump, and only the new calls
    text = wait_file(out, lambda t: f"free {x}" in t)
    assert [ln.split(": ", 1)[1] for ln in text.splitlines()] == [f"malloc {x} 5", f"free {x}"]


def test_record_allocs_on_exit(procs, tmp_path):
    out = tmp_path / "rec.txt"
    opts = f"record_allocs record_allocs_on_exit record_allocs_file={out}"
    p = procs.start("record_allocs.c", "exit", options=opts)
    assert p.finish() == 0
    assert not out.exists()
    lines = (tmp_path / f"rec.txt.{p.pid}").read_text().splitlines()
    v = {}
    assert p.proc.stdout is not None
    for line in p.proc.stdout.read().decode().splitlines():
        key, _, value = line.partition(" ")
        v[key] = value
    check_first_dump(lines, v)


def test_verbose_names_the_signal(procs, tmp_path):
    opts = f"record_allocs verbose record_allocs_file={tmp_path}/r"
    p = procs.start("record_allocs.c", "exit", options=opts)
    p.finish()
    prog = p.proc.args[0]
    line = f"malloc_debug: {prog}: Run: 'kill -{RECORD} {p.pid}' to dump the allocation records."
    assert line in p.stderr().splitlines()
