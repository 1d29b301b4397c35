"""Entry point of unreachable-cli.

Exit codes (docs/cli.md): 0 success and no leak, 1 success and leaks found,
2 the command could not be done (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import sys
from typing import Any

from unreachable.errors import EXIT_FAILED, ScanError
from unreachable.printable import printable

# The command modules (unreachable/cli/NAME.py, command NAME with '-' for
# '_'), in the order --help lists them. A command line that names one
# imports that one only: every process the leak check at exit checks starts
# this CLI, and the others' imports (sqlite3, datetime, ...) would be
# start-up time spent for nothing.
COMMANDS = (
    "scan",
    "run",
    "shim_path",
    "targets",
    "watch",
    "heapdump",
    "diff",
    "history",
    "why",
    "retainers",
)


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size() gives it: $COLUMNS,
    else stdout's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, told the width: given none, it imports shutil
    for it (with bz2, lzma and fnmatch: ~2.5 ms of every command's
    start-up), and argparse makes one for every argument added, help or
    not."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """A parser, and each command's, with _HelpFormatter unless told another."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """argv: the command line to parse, when known; a parser for its command
    only (its usage and errors are the same as the full parser's)."""
    parser = _Parser(
        prog="unreachable-cli",
        description="Find native memory leaks in running processes by proving memory unreachable.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    first = argv[0] if argv else ""
    named = first.replace("-", "_")
    for command in (named,) if named in COMMANDS and "_" not in first else COMMANDS:
        importlib.import_module(f"unreachable.cli.{command}").add_parser(sub)
    return parser


def _build_parser_quickly(argv: list[str]) -> argparse.ArgumentParser:
    """build_parser, which imports the command's modules, without the
    cyclic garbage collector: imports make objects that live as long as the
    process, so its ~20 passes over them (a few ms) freed nothing. Then
    they are frozen (gc.freeze: the collector leaves them alone from then
    on): left young, the command's first collection walked them all, 5-11
    ms of a scan, for the few hundred they hold in cycles. An in-process
    caller's own objects of that moment are frozen with them, as they are
    at exit (_freeze_at_exit)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build_parser(argv)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


_exit_frozen = False


def _freeze_at_exit() -> None:
    """At exit, the interpreter's last collection walks every object still
    there (those of the ~90 modules a scan imports: ~10 ms of every scan)
    to free memory the kernel takes back a moment later: frozen, they are
    left to it. Only objects in reference cycles are concerned, and nothing
    a command opens is closed by that collection (every session and file is
    closed by a `with` or `finally`)."""
    global _exit_frozen
    if not _exit_frozen:
        atexit.register(gc.freeze)
        _exit_frozen = True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _freeze_at_exit()
    parser = _build_parser_quickly(argv)
    args = parser.parse_args(argv)
    if getattr(args, "remote", None):
        # Before grpc's first import, when its C core reads it: it would print
        # a failed TLS handshake on stderr ahead of the one-line error below.
        # A GRPC_VERBOSITY in the environment still wins.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        return int(args.handler(args))
    except ScanError as e:
        # One line, whatever a path or name of the target's it quotes holds.
        print(f"unreachable-cli: error: {printable(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("unreachable-cli: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): not an error of the scan.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - one line for users; the traceback on request
        if os.environ.get("UNREACHABLE_DEBUG"):
            raise
        print(
            f"unreachable-cli: internal error: {type(e).__name__}: {printable(str(e))} "
            "(set UNREACHABLE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
