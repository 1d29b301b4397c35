"""unreachable-cli run: exec a command with the shim preloaded (the pid stays CMD's)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess

from unreachable._paths import shim_path
from unreachable.errors import InvalidArgument

OPTIONS_ENV = "UNREACHABLE_MALLOC_OPTIONS"


def add_parser(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")
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
    res = subprocess.run([true], env=env, capture_output=True, text=True)
    errors = [line for line in res.stderr.splitlines() if line.startswith("unreachable: ")]
    bad = [line for line in errors if "not implemented yet" not in line and "enabled" not in line]
    if bad:
        # The shim names the program it runs in; here that is only the probe.
        message = bad[0].removeprefix("unreachable: ").removeprefix(f"{true}: ")
        raise InvalidArgument(f"bad --options: {message}")


def handle(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise InvalidArgument(
            "run: missing command (usage: unreachable-cli run [--options STR] -- CMD ...)"
        )
    shim = str(shim_path())
    env = dict(os.environ)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim}:{preload}" if preload else shim
    if args.options is not None:
        check_options(args.options, shim)
        env[OPTIONS_ENV] = args.options
    try:
        os.execvpe(cmd[0], cmd, env)
    except FileNotFoundError:
        raise InvalidArgument(f"run: command not found: {cmd[0]}") from None
    except PermissionError:
        raise InvalidArgument(f"run: permission denied: {cmd[0]}") from None
    return 0  # not reached
