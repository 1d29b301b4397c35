"""Entry point of unreachabled: arguments and an optional TOML file into a Config, then serve.

Settings come from --config FILE (TOML, keys as in Config: socket_mode = "0660")
and are overridden by the command line.
"""

from __future__ import annotations

import os

# gRPC and fork do not mix: scans run in subprocesses (spawned, never forked
# without exec), and grpc's own fork handlers stay off. Before any grpc import.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "0"

import argparse  # noqa: E402
import asyncio  # noqa: E402
import sys  # noqa: E402
import tomllib  # noqa: E402
from typing import Any  # noqa: E402

from unreachable.daemon.config import Config, ConfigError, values_from_toml  # noqa: E402


def _mode(text: str) -> int:
    try:
        return int(str(text), 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mode: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unreachabled",
        description="Serve leak scans of shimmed processes over gRPC (docs/daemon.md).",
    )
    p.add_argument("--config", metavar="FILE", help="TOML settings (the options below win)")
    # Every option below defaults to SUPPRESS: one not given stays out of the
    # namespace, so the TOML file's value survives (load_config). Config's
    # defaults only name themselves in the help.
    defaults = Config()
    _add_unix_socket_options(p, defaults)
    _add_tcp_options(p)
    _add_scan_options(p, defaults)
    _add_state_options(p, defaults)
    return p


def _add_unix_socket_options(p: argparse.ArgumentParser, d: Config) -> None:
    s = argparse.SUPPRESS
    p.add_argument("--socket", default=s, help=f"gRPC unix socket ('' = none; {d.socket})")
    p.add_argument("--socket-mode", type=_mode, default=s, help="its file mode (0660)")
    p.add_argument("--socket-group", default=s, metavar="GROUP", help="its group")
    p.add_argument(
        "--notify-socket",
        default=s,
        help=f"socket shims ask for scans on ('' = none; {d.notify_socket})",
    )
    p.add_argument("--notify-mode", type=_mode, default=s, help="its file mode (0666)")


def _add_tcp_options(p: argparse.ArgumentParser) -> None:
    s = argparse.SUPPRESS
    p.add_argument("--tcp", default=s, metavar="HOST:PORT", help="also listen on TCP (mTLS)")
    p.add_argument("--tls-cert", default=s, metavar="PEM", help="server certificate chain")
    p.add_argument("--tls-key", default=s, metavar="PEM", help="server private key")
    p.add_argument(
        "--tls-client-ca",
        default=s,
        metavar="PEM",
        help="require client certificates signed by this CA (mTLS)",
    )
    p.add_argument(
        "--insecure-tcp",
        action="store_true",
        default=s,
        help="plaintext TCP, for tests (every local user may scan); loopback HOST only",
    )
    p.add_argument(
        "--dangerously-allow-unauthenticated-tcp",
        action="store_true",
        default=s,
        help="TLS without --tls-client-ca: anyone who reaches the port may scan every process",
    )


def _add_scan_options(p: argparse.ArgumentParser, d: Config) -> None:
    s = argparse.SUPPRESS
    p.add_argument(
        "--allow-contents",
        action="store_true",
        default=s,
        help="let clients that ask receive the first bytes of leaked blocks (may hold secrets)",
    )
    p.add_argument(
        "--scan-interval",
        type=float,
        default=s,
        metavar="SECONDS",
        help="scan every shimmed process this often and publish to Watch (0 = never)",
    )
    p.add_argument(
        "--scan-timeout",
        type=float,
        default=s,
        metavar="SECONDS",
        help=f"kill a scan that runs longer than this ({d.scan_timeout:g})",
    )
    p.add_argument(
        "--max-concurrent-scans",
        type=int,
        default=s,
        metavar="N",
        help=f"scans running at once, of different pids; more wait ({d.max_concurrent_scans})",
    )
    p.add_argument(
        "--mark-threads",
        type=int,
        default=s,
        metavar="N",
        help="threads a scan's snapshot child marks with, unless a request says (0 = CPUs, <= 4)",
    )


def _add_state_options(p: argparse.ArgumentParser, d: Config) -> None:
    """Where the daemon keeps and reports what it did: history, metrics, logs."""
    s = argparse.SUPPRESS
    p.add_argument(
        "--history",
        default=s,
        metavar="FILE",
        help="SQLite history of scans ('' = none; default $STATE_DIRECTORY/history.sqlite)",
    )
    p.add_argument(
        "--metrics",
        default=s,
        metavar="HOST:PORT",
        help="serve Prometheus metrics here (loopback only; port 0 picks one)",
    )
    p.add_argument(
        "--journal-socket",
        default=s,
        metavar="PATH",
        help=f"send structured log records here when it exists ('' = never; {d.journal_socket})",
    )
    p.add_argument(
        "--log-level",
        default=s,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help=f"least severe messages logged ({d.log_level})",
    )


def load_config(argv: list[str] | None = None) -> Config:
    args = vars(build_parser().parse_args(argv))
    path = args.pop("config", None)
    values: dict[str, Any] = {}
    if path:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read {path}: {e}") from None
        values = values_from_toml(data, path)
    values.update(args)
    config = Config(**values)
    config.validate()
    return config


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as e:
        print(f"unreachabled: error: {e}", file=sys.stderr)
        return 2
    from unreachable.daemon.journal import setup_logging

    setup_logging(config.log_level, config.journal_socket)
    from unreachable.daemon.server import serve

    try:
        return asyncio.run(serve(config))
    except ConfigError as e:
        print(f"unreachabled: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
