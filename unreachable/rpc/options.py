"""Command-line options naming a daemon (kept free of grpc imports: local scans never load it)."""

from __future__ import annotations

import argparse

DEFAULT_SOCKET = "/run/unreachable/unreachabled.sock"
DEFAULT_ADDRESS = f"unix:{DEFAULT_SOCKET}"
DEFAULT_NOTIFY_SOCKET = "/run/unreachable/notify.sock"


def add_remote_options(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    g = p.add_argument_group("daemon (unreachabled)")
    g.add_argument(
        "--remote",
        metavar="ADDR",
        default=default,
        help="ask unreachabled at ADDR: unix:/path or host:port"
        + (f" (default {default})" if default else " (default: do it here, in this process)"),
    )
    g.add_argument("--tls-ca", metavar="PEM", help="CA certificate(s) the daemon's must chain to")
    g.add_argument("--tls-cert", metavar="PEM", help="client certificate (mTLS)")
    g.add_argument("--tls-key", metavar="PEM", help="client private key (mTLS)")
    g.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext TCP (only to a daemon listening on loopback with --insecure-tcp)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="deadline of the request (default: none)",
    )
