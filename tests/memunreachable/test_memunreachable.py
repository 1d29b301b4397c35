"""libmemunreachable's C and C++ interface (unreachable/memunreachable.h),
called from inside programs that run under the shim."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cbuild import INCLUDE_DIR, build

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
CLI_LINE = " ".join(shlex.quote(a) for a in CLI)
PREFIX = "libmemunreachable: "
NOBODY = 65534
DROP = ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS", "UNREACHABLE_CLI", "UNREACHABLE_LMU_TIMEOUT")


def c_program() -> Path:
    return build(PROGRAMS / "lmu_c.c")


def cxx_program() -> Path:
    return build(PROGRAMS / "lmu_cxx.cpp", cxx=True)


def run(
    exe: Path,
    *args: str,
    shim: Path | None,
    env: dict[str, str] | None = None,
    options: str | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in DROP}
    full["UNREACHABLE_CLI"] = CLI_LINE
    if shim is not None:
        full["LD_PRELOAD"] = str(shim)
    if options is not None:
        full["UNREACHABLE_MALLOC_OPTIONS"] = options
    full.update(env or {})
    return subprocess.run(
        [str(exe), *args], env=full, capture_output=True, text=True, timeout=600, cwd=cwd
    )


def results(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def log_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(PREFIX)]


def parse_info(stdout: str, tag: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    head: dict[str, str] = {}
    leaks: list[dict[str, str]] = []
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        fields = dict(kv.split("=", 1) for kv in rest.split(" ") if "=" in kv)
        if word == tag:
            head = fields
        elif word == f"{tag}.leak":
            leaks.append(fields)
    assert head, f"no {tag} line in {stdout!r}"
    return head, leaks


# ---- the header ------------------------------------------------------------


def test_header_installed_next_to_the_others():
    from unreachable._paths import include_dir

    installed = include_dir() / "unreachable" / "memunreachable.h"
    assert installed.is_file()
    assert installed.read_bytes() == (INCLUDE_DIR / "unreachable" / "memunreachable.h").read_bytes()
    out = subprocess.run([*CLI, "shim-path", "--include"], capture_output=True, text=True)
    assert Path(out.stdout.strip()) == include_dir()


C_USE = """#include <unreachable/memunreachable.h>
int main(void) { return NoLeaks && NoLeaks() && LogUnreachableMemory(false, 1) ? 0 : 1; }
"""
CXX_USE = """#include <unreachable/memunreachable.h>
int main() {
  android::UnreachableMemoryInfo info;
  bool ok = android::GetUnreachableMemory(info, 10) && GetUnreachableMemory(info);
  std::string s = GetUnreachableMemoryString(true, 5) + android::GetUnreachableMemoryString();
  size_t sizes = sizeof(Leak) + Leak::contents_length + Leak::Backtrace::max_frames;
  return ok && !s.empty() && sizes ? 0 : 1;
}
"""


@pytest.mark.parametrize(
    ("compiler", "std", "source"),
    [
        ("gcc", "-std=c99", C_USE),
        ("gcc", "-std=c11", C_USE),
        ("g++", "-std=c++11", CXX_USE),
        ("g++", "-std=c++17", CXX_USE),
        ("g++", "-std=c++20", CXX_USE),
    ],
)
def test_header_links_without_the_shim(tmp_path, compiler, std, source):
    """Pedantic, warnings as errors, -O0, installed include dir, no -l: the
    weak references resolve at run time (or stay NULL)."""
    from unreachable._paths import include_dir

    src = tmp_path / ("use.c" if compiler == "gcc" else "use.cpp")
    src.write_text(source)
    exe = tmp_path / "use"
    subprocess.run(
        [compiler, std, "-O0", "-Wall", "-Wextra", "-Werror", "-pedantic",
         f"-I{include_dir()}", str(src), "-o", str(exe)],
        check=True,
    )  # fmt: skip


# ---- C interface ------------------------------------------------------------


def test_noleaks_before_and_after_dropping_a_pointer(shim):
    r = results(run(c_program(), "basic", shim=shim))
    assert r == {
        "clean": "1",
        "reachable": "1",
        "dropped": "0",
        "dropped_again": "0",
        "restored": "1",
        "freed": "1",
    }


@pytest.mark.parametrize("contents", [True, False])
def test_log_unreachable_memory_writes_the_cli_text_report(targets, tmp_path, contents):
    log = tmp_path / "stderr.txt"
    mode = "log" if contents else "log-nocontents"
    target = targets.start(
        PROGRAMS / "lmu_c.c", mode, str(log), env={"UNREACHABLE_CLI": CLI_LINE}, wait_ready=False
    )
    assert target.read_line(timeout=300) == "log 1"
    assert target.read_line().startswith("READY")
    logged = log.read_text()
    lines = logged.splitlines()
    assert lines and all(line.startswith(PREFIX) for line in lines), logged
    body = "\n".join(line[len(PREFIX) :] for line in lines) + "\n"
    assert lines[0] == PREFIX + "  24 bytes in 1 unreachable allocation"
    # What the CLI prints from outside for the same process: the same text
    # (which shows no contents unasked).
    outside = subprocess.run(
        [*CLI, "scan", str(target.pid), "--contents" if contents else "--no-contents"],
        capture_output=True,
        text=True,
    )
    assert outside.returncode == 1, outside.stderr
    assert body == outside.stdout
    if contents:
        row = r"^   [0-9a-f]+: 68 65 6c 6c 6f 20 6c 65 61 6b 00 .*hello leak"
        assert re.search(row, body, re.M)
    else:
        assert "contents" not in body


@pytest.mark.parametrize("found", ["unreachable-cli", "python3"])
def test_scanner_found_on_path(shim, tmp_path, found):
    """Without UNREACHABLE_CLI: unreachable-cli from PATH, else python3 -m."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if found == "unreachable-cli":
        wrapper = bin_dir / "unreachable-cli"
        marker = shlex.quote(str(tmp_path / "used"))  # PATH has no touch: a builtin
        wrapper.write_text(f'#!/bin/sh\n: > {marker}\nexec {CLI_LINE} "$@"\n')
        wrapper.chmod(0o755)
    else:
        (bin_dir / "python3").symlink_to(sys.executable)
    env = {"UNREACHABLE_CLI": "", "PATH": str(bin_dir)}
    proc = run(c_program(), "basic", shim=shim, env=env)
    assert results(proc)["dropped"] == "0", proc.stderr
    assert (tmp_path / "used").exists() == (found == "unreachable-cli")


def test_no_scanner_found_returns_false_with_a_reason(shim):
    proc = run(c_program(), "one", shim=shim, env={"UNREACHABLE_CLI": "/nonexistent/scanner"})
    assert results(proc) == {"noleaks": "0"}
    lines = log_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(PREFIX + "no scanner found"), proc.stderr


def test_no_scanner_on_path_returns_false_with_a_reason(shim):
    proc = run(c_program(), "one", shim=shim, env={"UNREACHABLE_CLI": "", "PATH": "/nonexistent"})
    assert results(proc) == {"noleaks": "0"}
    lines = log_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(PREFIX + "no scanner found"), proc.stderr


@pytest.mark.parametrize(
    ("cli", "reason"),
    [
        ("sh -c 'echo scan went wrong >&2; exit 2' sh #", "scan went wrong"),
        ("echo not a report #", "exited with status 0 without a report"),
        ("sh -c 'kill -9 $$' sh #", "killed by signal 9"),
        (f"{CLI_LINE} scan --limit -5 #", "--limit"),  # the CLI itself refuses
    ],
)
def test_scanner_failures_return_false_with_the_reason(shim, cli, reason):
    proc = run(c_program(), "one", shim=shim, env={"UNREACHABLE_CLI": cli})
    assert results(proc) == {"noleaks": "0"}
    lines = log_lines(proc.stderr)
    assert len(lines) == 1 and reason in lines[0], proc.stderr


def test_a_hung_scanner_is_killed_and_the_call_returns_false(shim):
    proc = run(
        c_program(),
        "one",
        shim=shim,
        env={"UNREACHABLE_CLI": "sleep 600 #", "UNREACHABLE_LMU_TIMEOUT": "1"},
    )
    assert results(proc) == {"noleaks": "0"}
    lines = log_lines(proc.stderr)
    assert len(lines) == 1 and "did not finish within 1 s" in lines[0], proc.stderr


def test_each_call_stands_alone_after_a_failure(shim):
    proc = run(c_program(), "recover", "/nonexistent/scanner", CLI_LINE, shim=shim)
    assert results(proc) == {"bad": "0", "good": "1", "bad_again": "0"}
    assert len(log_lines(proc.stderr)) == 2, proc.stderr


def test_without_the_shim_the_weak_symbols_are_null():
    assert results(run(c_program(), "one", shim=None)) == {"noshim": "1"}
    proc = run(cxx_program(), "noshim", shim=None)
    assert results(proc)["get"] == "ok=0"
    assert "Failed to get unreachable memory" in proc.stdout
    assert PREFIX + "libunreachable_shim.so is not loaded" in proc.stderr


def test_no_permission_returns_false_with_a_reason(shim):
    if os.geteuid() != 0:
        pytest.skip("needs root: the program drops CAP_SYS_PTRACE and becomes non-dumpable")
    proc = run(c_program(), "no-permission", shim=shim)
    r = results(proc)
    if "skip" in r:
        pytest.skip("cannot drop CAP_SYS_PTRACE from the bounding set here (no CAP_SETPCAP)")
    assert r == {"noleaks": "0", "log": "0"}
    lines = log_lines(proc.stderr)
    assert len(lines) == 2, proc.stderr
    assert all("not dumpable" in line for line in lines), proc.stderr


# ---- as a non-root user -------------------------------------------------------


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _copy_for_nobody(root: Path) -> None:
    """The package (sources, _native, shim) and pyelftools, readable by all."""
    import elftools

    import unreachable
    from unreachable._paths import shim_path

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    pkg = root / "unreachable"
    shutil.copytree(Path(unreachable.__file__).parent, pkg, ignore=ignore)
    for native in shim_path().parent.glob("*.so"):  # _native and the shim, as built
        shutil.copy2(native, pkg / native.name)
    shutil.copytree(Path(elftools.__file__).parent, root / "elftools", ignore=ignore)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture(scope="module")
def nobody_scanner() -> Iterator[tuple[Path, str]]:
    """(shim, UNREACHABLE_CLI) that uid 65534 can use, or skip saying why not.

    The interpreter running the tests often lives where other users cannot
    reach it (/root/.pyenv), so the package is copied to a world-readable
    directory and run by the first interpreter nobody can execute.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to uid 65534")
    root = Path(tempfile.mkdtemp(prefix="lmu-nobody-"))
    try:
        root.chmod(0o755)
        _copy_for_nobody(root)
        why = []
        for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
            probe_cmd = [
                python,
                "-c",
                "import sys, unreachable.cli.main, unreachable.scan; "
                f"assert sys.version_info[:2] == {tuple(sys.version_info[:2])}",
            ]
            try:
                probe = subprocess.run(
                    probe_cmd,
                    preexec_fn=_drop_to_nobody,
                    env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(root)},
                    capture_output=True,
                    text=True,
                    cwd="/",
                )
            except OSError as e:
                why.append(f"{python}: {e.strerror}")
                continue
            if probe.returncode == 0:
                cli = f"env PYTHONPATH={shlex.quote(str(root))} {shlex.quote(python)}"
                yield (
                    root / "unreachable" / "libunreachable_shim.so",
                    cli + " -m unreachable.cli.main",
                )
                return
            why.append(f"{python}: " + (probe.stderr.strip().splitlines() or ["?"])[-1])
        pytest.skip("uid 65534 cannot run the scanner: " + "; ".join(why))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_as_nobody(scanner: tuple[Path, str], mode: str) -> subprocess.CompletedProcess[str]:
    shim, cli = scanner
    # cwd "/": `python -m` puts the cwd first on sys.path, and the checkout's
    # unreachable/ (without the built _native) must not shadow the copy.
    return run(c_program(), mode, shim=shim, env={"UNREACHABLE_CLI": cli}, cwd="/")


def test_non_root_program_scans_itself(nobody_scanner):
    proc = _run_as_nobody(nobody_scanner, "nobody")
    assert results(proc) == {"uid": "65534", "clean": "1", "dropped": "0"}, proc.stderr


def test_non_root_not_dumpable_fails_with_a_reason(nobody_scanner):
    proc = _run_as_nobody(nobody_scanner, "nobody-notdumpable")
    assert results(proc) == {"uid": "65534", "clean": "0", "dropped": "0"}
    assert all("not dumpable" in line for line in log_lines(proc.stderr)), proc.stderr


def test_non_root_under_yama_ptrace_scope_1(request):
    scope_file = Path("/proc/sys/kernel/yama/ptrace_scope")
    if not scope_file.exists():
        pytest.skip("this kernel has no Yama LSM (/proc/sys/kernel/yama/ptrace_scope missing)")
    scope = int(scope_file.read_text())
    if scope != 1:
        pytest.skip(f"Yama ptrace_scope is {scope}: only 1 restricts tracing to descendants")
    # Only PR_SET_PTRACER lets the child scanner trace its parent here.
    r = results(_run_as_nobody(request.getfixturevalue("nobody_scanner"), "nobody"))
    assert r == {"uid": "65534", "clean": "1", "dropped": "0"}


# ---- C++ interface ------------------------------------------------------------


def test_get_unreachable_memory_with_a_limit_and_a_reused_info(shim):
    proc = run(cxx_program(), "limit", shim=shim)
    sizes = [500, 400, 300, 200, 100]
    for tag, n in (("first", 3), ("second", 3), ("all", 5)):
        head, leaks = parse_info(proc.stdout, tag)
        assert head["ok"] == "1", proc.stderr
        assert (head["num_leaks"], head["leak_bytes"]) == ("5", "1500"), head
        assert int(head["num_allocations"]) >= 5
        assert int(head["allocation_bytes"]) >= 1500
        assert head["entries"] == str(n)
        assert [int(leak["size"]) for leak in leaks] == sizes[:n]
        assert [int(leak["total"]) for leak in leaks] == sizes[:n]
        for leak in leaks:
            i = sizes.index(int(leak["size"]))
            assert leak["contents"] == f"leak-{4 - i}"
            assert leak["referenced"] == "0/0" and leak["similar"] == "0/0/0/0"


def test_get_unreachable_memory_twice(shim):
    proc = run(cxx_program(), "twice", shim=shim)
    for tag in ("round0", "round1"):
        head, leaks = parse_info(proc.stdout, tag)
        assert head["ok"] == "1", proc.stderr
        assert (head["num_leaks"], head["entries"]) == ("1", "1")
        assert leaks[0]["size"] == "1024"


def test_version_greater_than_zero_is_refused(shim):
    proc = run(cxx_program(), "version", shim=shim)
    r = results(proc)
    assert r["version1"] == "ok=0"
    assert r["string_nonempty"] == "1"
    assert PREFIX + "unsupported UnreachableMemoryInfo version 1" in proc.stderr


def test_from_a_multithreaded_program(shim):
    proc = run(cxx_program(), "threads", shim=shim)
    for tag in ("thread0", "thread1"):
        head, leaks = parse_info(proc.stdout, tag)
        assert head["ok"] == "1", proc.stderr
        assert (head["num_leaks"], head["leak_bytes"]) == ("1", "777"), proc.stdout
        assert leaks[0]["size"] == "777" and leaks[0]["contents"] == "leak-0"
    assert results(proc)["noleaks"] == "0"


TEXT_HEAD = re.compile(r"  \d+ bytes in \d+ unreachable allocations?\n  ABI: '\w+'\n\n")
LEAK_LINE = re.compile(r"  \d+ bytes unreachable at [0-9a-f]+$")


@pytest.mark.parametrize("contents", [False, True])
@pytest.mark.parametrize("options", [None, "backtrace=16"])
def test_string_and_info_match_the_cli(targets, contents, options):
    mode = "compare-contents" if contents else "compare"
    target = targets.start(
        PROGRAMS / "lmu_cxx.cpp",
        mode,
        cxx=True,
        options=options,
        env={"UNREACHABLE_CLI": CLI_LINE},
        wait_ready=False,
    )
    lines = []
    line = target.read_line(timeout=300)
    while not line.startswith("READY"):
        lines.append(line)
        line = target.read_line(timeout=300)
    stdout = "\n".join(lines) + "\n"
    head, leaks = parse_info(stdout, "info")
    assert head["ok"] == "1"
    start = next(i for i, line in enumerate(lines) if line.startswith("text "))
    inside = "\n".join(lines[start + 1 :]) + "\n"
    assert len(inside) == int(lines[start].split()[1])

    flags = ["--contents"] if contents else ["--no-contents"]
    outside = subprocess.run(
        [*CLI, "scan", str(target.pid), *flags], capture_output=True, text=True
    )
    assert outside.returncode == 1, outside.stderr
    assert inside == outside.stdout
    # The text follows the CLI's (libmemunreachable's) format rules.
    assert TEXT_HEAD.match(inside), inside
    assert inside.startswith("  356 bytes in 3 unreachable allocations\n")
    assert sum(1 for line in inside.splitlines() if LEAK_LINE.match(line)) == 3
    assert ("contents:" in inside) == contents
    assert inside.endswith("\n\n")

    report = json.loads(
        subprocess.run(
            [*CLI, "scan", "--json", "--contents", str(target.pid)], capture_output=True, text=True
        ).stdout
    )
    assert (int(head["num_leaks"]), int(head["leak_bytes"])) == (3, 356)
    assert len(leaks) == len(report["leaks"]) == 3
    for mine, theirs in zip(leaks, report["leaks"], strict=True):
        assert int(mine["begin"], 16) == theirs["address"]
        assert int(mine["size"]) == theirs["size"]
        assert int(mine["total"]) == theirs["total_size"]
        assert bytes.fromhex(theirs["contents_hex"]).rstrip(b"\0").decode() == mine["contents"]
        pcs = [int(pc, 16) for pc in mine["frames"].split(",") if pc]
        assert pcs == [f["pc"] for f in theirs["backtrace"]][:16]
        assert bool(pcs) == (options is not None)


UGLY_FUNCTION = (
    "(anonymous namespace)::Maker<char (*)(int)>::operator()(char (*)(int), unsigned long) const"
)
UGLY_FILE = "/src/dir at home (copy)/make leak.cc"


def test_names_and_paths_a_text_reader_would_split_come_through_exactly(targets):
    """Leaks whose frames' function and source file hold spaces, parentheses
    and " at ": the structure's pcs are the CLI's, and the text is the CLI's
    byte for byte, naming them whole."""
    target = targets.start(
        PROGRAMS / "lmu_cxx.cpp",
        "names",
        cxx=True,
        options="backtrace=16",
        env={"UNREACHABLE_CLI": CLI_LINE},
        wait_ready=False,
    )
    lines = []
    line = target.read_line(timeout=300)
    while not line.startswith("READY"):
        lines.append(line)
        line = target.read_line(timeout=300)
    head, leaks = parse_info("\n".join(lines), "info")
    assert head["ok"] == "1" and head["num_leaks"] == "2"
    start = next(i for i, line in enumerate(lines) if line.startswith("text "))
    inside = "\n".join(lines[start + 1 :]) + "\n"

    outside = subprocess.run(
        [*CLI, "scan", str(target.pid), "--no-contents"], capture_output=True, text=True
    )
    assert outside.returncode == 1, outside.stderr
    assert inside == outside.stdout
    report = json.loads(
        subprocess.run(
            [*CLI, "scan", "--json", str(target.pid)], capture_output=True, text=True
        ).stdout
    )
    assert len(leaks) == len(report["leaks"]) == 2
    for mine, theirs in zip(leaks, report["leaks"], strict=True):
        pcs = [int(pc, 16) for pc in mine["frames"].split(",") if pc]
        assert pcs == [f["pc"] for f in theirs["backtrace"]][:16]
        top = theirs["backtrace"][0]
        assert (top["function"], top["file"]) == (UGLY_FUNCTION, UGLY_FILE), top
    assert f"({UGLY_FUNCTION}+" in inside
    assert f" {UGLY_FILE}:" in inside


# ---- the report stream, written by hand -------------------------------------


def _stream(leaks: list[dict], text: bytes, **header: int) -> bytes:
    from unreachable import _native

    fields = {
        "magic": _native.LMU_MAGIC,
        "version": _native.LMU_VERSION,
        "leak_size": _native.abi_sizeof("ur_lmu_leak"),
        "leak_count": 5,
        "leak_bytes": 500,
        "allocation_count": 9,
        "allocation_bytes": 900,
        "entries": len(leaks),
        "text_length": len(text),
    }
    records = [_native.abi_encode("ur_lmu_leak", leak) for leak in leaks]
    return b"".join([_native.abi_encode("ur_lmu_header", fields | header), *records, text])


LEAK = {
    "begin": 0x1234,
    "size": 48,
    "referenced_count": 1,
    "referenced_size": 16,
    "similar_count": 2,
    "similar_size": 96,
    "similar_referenced_count": 3,
    "similar_referenced_size": 4,
    "total_size": 164,
    "contents_length": 6,
    "contents": b"a-b(c)",
    "num_frames": 3,
    "frames": [0x10, 0x20, 0x30],
}


def test_the_stream_is_read_as_written(shim, tmp_path):
    """The reader takes the records as they are: the scanner is a `cat` of
    a stream written here."""
    stream = tmp_path / "stream"
    stream.write_bytes(_stream([LEAK], b"  text at (x)\nend\n"))
    proc = run(cxx_program(), "twice", shim=shim, env={"UNREACHABLE_CLI": f"cat {stream} #"})
    head, leaks = parse_info(proc.stdout, "round0")
    assert head == {
        "ok": "1",
        "num_leaks": "5",
        "leak_bytes": "500",
        "num_allocations": "9",
        "allocation_bytes": "900",
        "entries": "1",
    }
    assert leaks == [
        {
            "begin": "1234",
            "size": "48",
            "referenced": "1/16",
            "similar": "2/96/3/4",
            "total": "164",
            "contents": "a-b(c)",
            "frames": "10,20,30",
        }
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"magic": 0x31434552554D4C56},
        {"version": 2},
        {"leak_size": 232},
        {"entries": 2},  # more records than written
        {"text_length": 3},  # less text than written
        {"text_length": 1 << 62},
        {"num_frames": 17},
        {"contents_length": 33},
    ],
)
def test_a_stream_that_is_not_whole_is_no_report(shim, tmp_path, bad):
    header = {k: v for k, v in bad.items() if k not in LEAK}
    leak = LEAK | {k: v for k, v in bad.items() if k in LEAK}
    stream = tmp_path / "stream"
    stream.write_bytes(_stream([leak], b"text\n", **header))
    proc = run(c_program(), "one", shim=shim, env={"UNREACHABLE_CLI": f"cat {stream} #"})
    assert results(proc) == {"noleaks": "0"}
    lines = log_lines(proc.stderr)
    assert len(lines) == 1 and "exited with status 0 without a report" in lines[0], proc.stderr
