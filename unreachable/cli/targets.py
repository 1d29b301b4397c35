"""unreachable-cli targets: the processes running under the shim (here or on a daemon's host)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from unreachable.daemon.targets import TargetInfo, list_targets
from unreachable.rpc.options import add_remote_options


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "targets",
        help="list the processes that run under the shim",
        description="List the processes that run with the shim loaded, their options and "
        "whether the shim is active. Nothing is stopped.",
    )
    p.add_argument("--json", action="store_true", help="one JSON array")
    add_remote_options(p)
    p.set_defaults(handler=handle)


def _remote(args: argparse.Namespace) -> list[TargetInfo]:
    import grpc

    from unreachable.rpc.client import open_channel, rpc_error, stub
    from unreachable.v1 import unreachable_pb2 as pb

    with open_channel(args) as channel:
        try:
            reply = stub(channel).ListTargets(pb.ListTargetsRequest(), timeout=args.timeout)
        except grpc.RpcError as e:
            raise rpc_error(e, args.remote) from None
    return [
        TargetInfo(t.pid, t.command, t.name, t.options, t.enabled, t.shim) for t in reply.targets
    ]


def handle(args: argparse.Namespace) -> int:
    targets = _remote(args) if args.remote else list_targets()
    if args.json:
        sys.stdout.write(json.dumps([asdict(t) for t in targets], indent=2) + "\n")
        return 0
    if not targets:
        print("no process runs under the shim (that this user may read)", file=sys.stderr)
        return 0
    sys.stdout.write(f"{'PID':>7}  {'NAME':<16} {'SHIM':<8} {'OPTIONS':<24} COMMAND\n")
    for t in targets:
        state = "active" if t.enabled else "inert"
        sys.stdout.write(
            f"{t.pid:>7}  {t.name:<16} {state:<8} {t.options or '-':<24} {t.command}\n"
        )
    return 0
