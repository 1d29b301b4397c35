"""unreachable-cli run and shim-path, as scripts and systemd units use them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "unreachable.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def test_shim_path_is_absolute_and_exists():
    res = cli("shim-path")
    assert res.returncode == 0
    path = Path(res.stdout.strip())
    assert path.is_absolute() and path.is_file() and path.name == "libunreachable_shim.so"


def test_shim_path_include():
    res = cli("shim-path", "--include")
    assert (Path(res.stdout.strip()) / "unreachable" / "abi.h").is_file()


def test_run_execs_so_the_pid_is_the_commands():
    # $$ in the child shell is the pid that `run` exec'ed into.
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "--options",
            "backtrace=8",
            "--",
            "sh",
            "-c",
            'echo $$; tr "\\0" "\\n" < /proc/$$/environ | grep -E "^(LD_PRELOAD|UNREACHABLE)"',
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    lines = out.splitlines()
    assert int(lines[0]) == proc.pid
    assert any(
        line.startswith("LD_PRELOAD=") and "libunreachable_shim.so" in line for line in lines
    )
    assert "UNREACHABLE_MALLOC_OPTIONS=backtrace=8" in lines


def test_run_rejects_bad_options_with_one_line():
    res = cli("run", "--options", "backtrace=999", "--", "true")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "backtrace" in res.stderr and "Traceback" not in res.stderr


def test_run_unknown_option():
    res = cli("run", "--options", "no_such_option", "--", "true")
    assert res.returncode == 2 and "no_such_option" in res.stderr


def test_run_missing_command():
    res = cli("run")
    assert res.returncode == 2 and "missing command" in res.stderr


def test_run_command_not_found():
    res = cli("run", "--", "/nonexistent/prog")
    assert res.returncode == 2 and "command not found" in res.stderr


def test_run_huge_pages_adds_glibcs_tunable_to_the_users():
    res = subprocess.run(
        [*CLI, "run", "--huge-pages", "--", "sh", "-c", 'echo "$GLIBC_TUNABLES"'],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


def test_run_without_huge_pages_leaves_tunables_alone():
    res = subprocess.run(
        [*CLI, "run", "--", "sh", "-c", 'echo "${GLIBC_TUNABLES-unset}"'],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert res.stdout.strip() == "unset"


def test_run_warns_that_a_set_id_program_ignores_the_shim(tmp_path):
    from tests.support.setid import setgid_sleep

    exe = setgid_sleep(tmp_path)
    res = cli("run", "--", str(exe), "0")
    assert res.returncode == 0, res.stderr  # it still runs, without the shim
    assert re.search(r"warning: .*sleep-setgid is set-group-ID: .*ignores LD_PRELOAD", res.stderr)
