"""Run one program, then kill and reap every process it left behind.

The glibc parity harness (test_glibc_parity.py) runs each test program
through this script. It makes itself a child subreaper, so every descendant
of the program whose parent dies becomes its child, whatever process group
or session the descendant moved to (glibc's own test driver puts its test
in a group of its own). When the program has exited, or its time is up, the
script kills its children with SIGKILL and reaps them, again and again as
their own orphans come to it, until it has none. Without that, a forked
child hung in a group of its own outlives the run, and one whose parent
died stays a zombie where PID 1 does not reap orphans.

    python reaper.py --status FILE --timeout SECONDS [--set NAME=VALUE]... -- PROGRAM [ARG]...

The program runs with this script's environment plus each --set (so that
LD_PRELOAD reaches the program and not this interpreter), and its stdout and
stderr. FILE receives one line: `exit N`, `signal N` or `timeout`. Exit 0
once every process is gone; 2 with a one-line error for bad arguments.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def children() -> list[int]:
    """Processes whose parent is this one, zombies included."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:  # gone meanwhile
            continue
        # The command name may hold spaces, parentheses and bytes that are no
        # UTF-8 (another test's program names itself so): fields follow the last ')'.
        if int(stat.rpartition(b")")[2].split()[1]) == me:
            found.append(int(entry))
    return found


def kill_all() -> None:
    """SIGKILL and reap every child, and the orphans each one leaves, until none is left.

    A child is reaped only after the kernel has handed its own children to
    this subreaper, so each round finds the next generation."""
    while kids := children():
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--status", type=Path, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("command", nargs="+")
    args = ap.parse_args()
    env = dict(os.environ)
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            ap.error(f"--set wants NAME=VALUE, got {item!r}")
        env[name] = value
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(
            f"reaper: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}",
            file=sys.stderr,
        )
        return 1
    try:
        proc = subprocess.Popen(args.command, env=env)
    except OSError as e:
        print(f"reaper: cannot run {args.command[0]}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        code = proc.wait(timeout=args.timeout)
        status = f"signal {-code}" if code < 0 else f"exit {code}"
    except subprocess.TimeoutExpired:
        status = "timeout"
    kill_all()
    args.status.write_text(status + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
