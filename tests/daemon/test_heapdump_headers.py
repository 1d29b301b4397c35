"""Every way of dumping the heap writes the same header and names the same
files: the shim's dump on a signal and at exit, `unreachable-cli heapdump`
here and through unreachabled. The target is started as "./idle-..." from its
own directory, so dladdr names it by that relative argv[0]; every dump must
name it by the path /proc/PID/maps shows, as bionic does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.malloc_debug.support import env_for, exe, wait_file
from unreachable.heapdump.dump_format import parse_dump

CLI = [sys.executable, "-m", "unreachable.cli.main"]
DUMP = signal.SIGRTMAX - 17


def header(text: str) -> list[str]:
    """The lines before the first record."""
    return text.split("\nz ", 1)[0].splitlines()


def main_program_paths(text: str, program: str) -> set[str]:
    """The paths bt_info gives the frames of the main program (named by its
    file name, however the dump spells the directory)."""
    dump = parse_dump(text)
    return {
        info.map
        for r in dump.records
        for info in r.bt_info or ()
        if os.path.basename(info.map) == os.path.basename(program)
    }


def test_dumps_share_header_and_main_program_path(shim, daemon, tmp_path):
    program = exe("idle.c")
    prefix = tmp_path / "heap"
    options = f"backtrace=16 backtrace_full backtrace_dump_on_exit backtrace_dump_prefix={prefix}"
    proc = subprocess.Popen(
        [f"./{program.name}"],
        cwd=program.parent,
        executable=str(program),
        env=env_for(shim, options),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("READY")
        pid = proc.pid
        real = os.readlink(f"/proc/{pid}/exe")
        os.kill(pid, DUMP)
        on_signal = wait_file(tmp_path / f"heap.{pid}.txt", lambda t: t.endswith("END\n"))
        local = subprocess.run([*CLI, "heapdump", str(pid)], capture_output=True, text=True)
        remote = subprocess.run(
            [*CLI, "heapdump", str(pid), "--remote", daemon.address],
            capture_output=True,
            text=True,
        )
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    at_exit = (tmp_path / f"heap.{pid}.exit.txt").read_text()

    dumps = {"signal": on_signal, "exit": at_exit, "cli": local.stdout, "remote": remote.stdout}
    headers = {how: header(text) for how, text in dumps.items()}
    assert headers["signal"][2] == f"Build fingerprint: '{parse_dump(on_signal).fingerprint}'"
    assert parse_dump(on_signal).fingerprint != ""
    # the allocation totals differ (the CLI captures at another moment): the
    # version and fingerprint lines and the layout do not
    assert {how: h[:4] for how, h in headers.items()} == {
        how: headers["signal"][:4] for how in dumps
    }
    assert {how: main_program_paths(text, real) for how, text in dumps.items()} == {
        how: {real} for how in dumps
    }
