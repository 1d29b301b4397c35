"""`heapdump --file` and `diff` on hostile or broken files: one line and exit 2
(or a warning), in bounded time and memory, never a hang or a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "unreachable.cli.main"]
HEADER = "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'fp'\n\n"


def cli(*args: str, limit_as: int = 2 << 30) -> subprocess.CompletedProcess[str]:
    """The CLI in a child whose address space is capped: a file read whole
    into memory fails instead of taking the machine's memory."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
        env=os.environ | {"UNREACHABLE_CACHE_DIR": "off"},
    )


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("unreachable-cli: error: "), res.stderr
    assert "internal error" not in res.stderr
    return lines[0].removeprefix("unreachable-cli: error: ")


@pytest.mark.parametrize("command", ["heapdump", "diff"])
def test_devices_fifos_and_directories_are_refused(tmp_path, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):
        args = ["heapdump", "--file", path] if command == "heapdump" else ["diff", path, path]
        assert one_error(cli(*args)) == f"cannot read {path}: not a regular file"


def test_a_line_without_end_is_refused_in_bounded_memory(tmp_path):
    """A file of zeros and no newline: one line of 64 MiB, refused after 1 MiB."""
    path = tmp_path / "zeros"
    with open(path, "wb") as f:
        f.truncate(64 << 20)
    res = cli("heapdump", "--file", str(path), limit_as=1 << 30)
    assert one_error(res) == f"{path}:1: line longer than 1048576 bytes"


def test_fifo_in_maps_does_not_hang(tmp_path):
    fifo = tmp_path / "libhang.so"
    os.mkfifo(fifo)
    path = tmp_path / "dump.txt"
    path.write_text(
        HEADER + "z 0  sz      100  num    1  bt 10010\n"
        f"MAPS\n00010000-00020000 r-xp 00000000 00:00 7 {fifo}\nEND\n"
    )
    res = cli("heapdump", "--file", str(path))
    assert res.returncode == 0, res.stderr
    assert f"{fifo}: not a regular file" in res.stderr
    assert f"#00  pc 0000000000000010  {fifo}" in res.stdout


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("z 0  sz " + "9" * 5000 + "  num 1  bt 1000", "not an allocation record: 'z 0  sz 999"),
        ("z 0  sz 18446744073709551616  num 1  bt 1000", "number out of range"),
        ("z 0  sz 1  num 1  bt 1000 " + "a" * 17, "not an allocation record"),
        ("z 0  sz 1  num 1  bt" + " 1" * 257, "257 frames in one record (at most 256)"),
        ("Total memory: " + "1" * 5000, "bad number"),
    ],
)
def test_bad_lines_are_named(tmp_path, line, what):
    path = tmp_path / "dump.txt"
    path.write_text(
        HEADER + "Total memory: 1\nz 0  sz 1  num 1  bt 1000\n" + line + "\nMAPS\nEND\n"
    )
    message = one_error(cli("heapdump", "--file", str(path)))
    assert message.startswith(f"{path}:7: {what}"), message
    assert len(message) < 200


def test_deep_json_and_big_numbers_in_reports(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert one_error(cli("diff", str(deep), str(deep))) == f"{deep}: JSON nested too deeply"
    big = tmp_path / "big.json"
    big.write_text('{"leaks": [{"size": ' + "9" * 5000 + "}]}")
    assert one_error(cli("diff", str(big), str(big))).startswith(f"{big}: bad JSON: ")
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"leaks": [{"size": 16, "backtrace": [{"pc": "x"}]}]}')
    assert one_error(cli("diff", str(wrong), str(wrong))) == (
        f"{wrong}: not a valid report: 'pc' is not a number from 0 to 2^64-1"
    )
    broken = tmp_path / "broken.json"
    broken.write_text('{"leaks": [\n{"size": 16,\n')
    assert one_error(cli("diff", str(broken), str(broken))).startswith(f"{broken}:3: bad JSON")


@pytest.mark.parametrize("cut", ["END\n", "MAPS\n"])
def test_truncated_dump_warns(tmp_path, cut):
    full = HEADER + "Allocation records: 1\nz 0  sz      100  num    1  bt 1000\nMAPS\nEND\n"
    path = tmp_path / "dump.txt"
    path.write_text(full[: full.index(cut)])
    for args in (["heapdump", "--file", str(path)], ["diff", str(path), str(path)]):
        res = cli(*args)
        assert res.returncode == 0, res.stderr
        warnings = [ln for ln in res.stderr.splitlines() if "warning" in ln]
        assert warnings and all(
            ln.startswith(f"unreachable-cli: warning: {path}: no ") and "truncated" in ln
            for ln in warnings
        ), res.stderr


def test_record_count_mismatch_warns(tmp_path):
    path = tmp_path / "dump.txt"
    path.write_text(HEADER + "Allocation records: 5\nz 0  sz 1  num 1  bt 1000\nMAPS\nEND\n")
    res = cli("heapdump", "--file", str(path))
    assert res.returncode == 0
    assert "the header says 5 allocation records, the file has 1" in res.stderr


def peak_rss(*args: str) -> int:
    """Max RSS in bytes of the CLI run alone in a fresh parent (RUSAGE_CHILDREN
    of this test process also counts the compilers it ran)."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(rc)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", wrapper, *CLI, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"UNREACHABLE_CACHE_DIR": "off"},
    )
    assert res.returncode == 0, res.stderr
    return int(res.stdout) * 1024


def test_big_dump_reads_in_memory_proportional_to_its_backtraces(tmp_path: Path):
    """40 MB of records sharing 1,000 backtraces: the CLI holds less than the
    file's size on top of what it takes to read a tiny dump (the reader that
    held the file, its lines and an object per record took ~8x the file)."""
    path = tmp_path / "big.txt"
    stacks = [" ".join(f"{0x400000 + 16 * (i * 7 + k):x}" for k in range(12)) for i in range(1000)]
    with open(path, "w") as f:
        f.write(HEADER)
        i = 0
        while f.tell() < 40 << 20:
            f.write(f"z 0  sz {i % 5000 + 1:8d}  num    {i % 7 + 1}  bt {stacks[i % 1000]}\n")
            i += 1
        f.write("MAPS\nEND\n")
    size = path.stat().st_size
    tiny = tmp_path / "tiny.txt"
    tiny.write_text(HEADER + f"z 0  sz 1  num 1  bt {stacks[0]}\nMAPS\nEND\n")
    base = peak_rss("heapdump", "--file", str(tiny))
    out = tmp_path / "out.txt"
    big = peak_rss("heapdump", "--file", str(path), "-o", str(out))
    assert big - base < size * 3 // 4, f"{(big - base) >> 20} MiB over {size >> 20} MiB"
    assert "1000 backtraces" in out.read_text()[:1000]
