"""unreachable-cli run: exec a command with the shim preloaded (the pid stays CMD's)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys

from unreachable._paths import shim_path
from unreachable.errors import InvalidArgument
from unreachable.process.secure_exec import gains_privileges
from unreachable.shim_env import OPTIONS_ENV, huge_pages_unavailable, shim_environment
from unreachable.triage.suppressions import ENV as SUPPRESSIONS_ENV
from unreachable.triage.suppressions import load as load_suppressions

# Options that already decide whether backtraces are recorded.
BACKTRACE_OPTIONS = {"backtrace", "bt", "backtrace_enable_on_signal", "bt_en_on_sig"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run a command under the shim",
        description="Run CMD with the shim preloaded and malloc_debug options set, by exec.",
    )
    p.add_argument(
        "--options",
        default=None,
        metavar="STR",
        help=f"malloc_debug options, e.g. 'backtrace=16' (sets {OPTIONS_ENV})",
    )
    p.add_argument(
        "--huge-pages",
        action="store_true",
        help="put the brk heap on transparent huge pages (glibc.malloc.hugetlb=1): "
        "a fork snapshot of a big heap then pauses CMD ~5x less (docs/pause.md)",
    )
    p.add_argument(
        "--check-at-exit",
        action="store_true",
        help="each process of CMD (children and exec'd programs too: the environment) scans "
        "itself as it exits, after its atexit handlers and static destructors, prints the "
        "leaks to stderr and exits with status 23 when any remain after suppressions "
        "(adds leak_check_at_exit and, unless --options chooses backtraces, backtrace; "
        "leak_check_exitcode=N in --options sets another status)",
    )
    p.add_argument(
        "--suppressions",
        action="append",
        default=[],
        metavar="FILE",
        help=f"suppression file for the scans at exit (repeatable; added to ${SUPPRESSIONS_ENV} "
        "as absolute paths, so they hold wherever CMD changes directory)",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- CMD [ARGS...]",
        help="the command to run, after '--' when it has options of its own",
    )
    p.set_defaults(handler=handle)


def check_options(options: str, shim: str) -> None:
    """Reject a bad option string before exec, with the shim's own message.

    The shim is the one parser of option strings; it prints one line per
    error and stays inert. Running it once on /bin/true costs ~2 ms and keeps
    a second parser from drifting away from the real one.
    """
    true = shutil.which("true") or "/bin/true"
    env = dict(os.environ, LD_PRELOAD=shim, **{OPTIONS_ENV: options})
    env.pop("UNREACHABLE_VERBOSE", None)
    # The shim reports bad options as it starts; the probe then kills itself,
    # so that leak_check_at_exit does not scan it as it exits.
    probe = [true] if "leak_check_at_exit" not in options else ["/bin/sh", "-c", "kill -KILL $$"]
    res = subprocess.run(probe, env=env, capture_output=True, text=True)
    errors = [line for line in res.stderr.splitlines() if line.startswith("unreachable: ")]
    bad = [line for line in errors if "not implemented yet" not in line and "enabled" not in line]
    if bad:
        # The shim names the program it runs in; here that is only the probe.
        message = bad[0].removeprefix("unreachable: ").removeprefix(f"{true}: ")
        message = message.removeprefix("/bin/sh: ")
        raise InvalidArgument(f"bad --options: {message}")


def exit_check_options(options: str | None) -> str:
    """OPTIONS with leak_check_at_exit, and backtrace unless they choose."""
    tokens = (options or "").split()
    names = {t.split("=", 1)[0] for t in tokens}
    if "leak_check_at_exit" not in names:
        tokens.append("leak_check_at_exit")
    if not names & BACKTRACE_OPTIONS:
        tokens.append("backtrace")
    return " ".join(tokens)


def handle(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise InvalidArgument(
            "run: missing command "
            "(usage: unreachable-cli run [--options STR] [--huge-pages] -- CMD ...)"
        )
    shim = str(shim_path())
    if args.check_at_exit:
        args.options = exit_check_options(args.options)
    if args.options is not None:
        check_options(args.options, shim)
    if args.huge_pages and (why := huge_pages_unavailable()):
        print(f"unreachable-cli: note: {why}", file=sys.stderr)
    env = shim_environment(os.environ, shim, args.options, huge_pages=args.huge_pages)
    if args.suppressions:
        load_suppressions(args.suppressions)  # a bad file: one line, exit 2, before exec
        given = [os.path.abspath(p) for p in args.suppressions]
        env[SUPPRESSIONS_ENV] = ":".join([*filter(None, [env.get(SUPPRESSIONS_ENV)]), *given])
    if args.check_at_exit and not env.get("UNREACHABLE_CLI"):
        # The scanner each exiting process starts: this one, wherever PATH leads.
        env["UNREACHABLE_CLI"] = shlex.join([sys.executable, "-m", "unreachable.cli.main"])
    exe = shutil.which(cmd[0], path=env.get("PATH"))
    if exe and (why := gains_privileges(exe)):
        print(
            f"unreachable-cli: warning: {exe} is {why}: the dynamic loader ignores LD_PRELOAD"
            " for it, so it runs without the shim (run a copy of it without that)",
            file=sys.stderr,
        )
    try:
        os.execvpe(cmd[0], cmd, env)
    except FileNotFoundError:
        raise InvalidArgument(f"run: command not found: {cmd[0]}") from None
    except PermissionError:
        raise InvalidArgument(f"run: permission denied: {cmd[0]}") from None
    return 0  # not reached
