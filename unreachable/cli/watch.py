"""unreachable-cli watch: print the reports unreachabled publishes, as they come."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from unreachable.rpc.options import DEFAULT_ADDRESS, add_remote_options

if TYPE_CHECKING:  # imported lazily at run time: grpc loads slowly
    from unreachable.v1 import unreachable_pb2 as pb


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watch",
        help="print leak reports from unreachabled as they are produced",
        description="Follow the reports of signal-triggered (check_unreachable_on_signal) "
        "and scheduled scans. Runs until interrupted.",
    )
    p.add_argument("--pid", type=int, default=0, help="only reports of this pid")
    p.add_argument("--name", default="", help="only reports of processes with this name")
    p.add_argument("--json", action="store_true", help="one JSON report per line")
    p.add_argument(
        "--contents", action="store_true", help="include leak contents (if the daemon allows)"
    )
    add_remote_options(p, default=DEFAULT_ADDRESS)
    p.set_defaults(handler=handle)


def _growth_lines(event: pb.WatchEvent) -> list[str]:
    from unreachable.report.text import format_frame
    from unreachable.rpc.convert import frame_to_model

    lines = []
    for g in event.growth:
        lines.append(
            f"  growing: {g.bytes} bytes in {g.count} unreachable allocations from site "
            f"{g.site}, up from {g.first_bytes} over {g.scans} scans in {g.seconds:.0f} s "
            f"({g.bytes_per_hour:.0f} bytes/hour)"
        )
        lines += [format_frame(i, frame_to_model(f)) for i, f in enumerate(g.backtrace)]
    return lines


def handle(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf.json_format import MessageToDict

    from unreachable.report.json_report import report_to_dict
    from unreachable.report.text import format_report
    from unreachable.rpc.client import open_channel, rpc_error, stub
    from unreachable.rpc.convert import report_to_model
    from unreachable.v1 import unreachable_pb2 as pb

    request = pb.WatchRequest(pid=args.pid, name=args.name, contents=args.contents)
    with open_channel(args) as channel:
        call = stub(channel).Watch(request, timeout=args.timeout)
        try:
            for event in call:
                report = report_to_model(event.report)
                if args.json:
                    line = {
                        "trigger": pb.Trigger.Name(event.trigger).removeprefix("TRIGGER_").lower(),
                        "time": event.time.ToJsonString(),
                        "name": event.name,
                        "report": report_to_dict(report),
                        "growth": [
                            MessageToDict(g, preserving_proto_field_name=True) for g in event.growth
                        ],
                    }
                    sys.stdout.write(json.dumps(line) + "\n")
                else:
                    sys.stdout.write(f"{event.time.ToJsonString()} {event.summary}\n")
                    for text in _growth_lines(event):
                        sys.stdout.write(text + "\n")
                    sys.stdout.write(format_report(report))
                sys.stdout.flush()
        except grpc.RpcError as e:
            raise rpc_error(e, args.remote) from None
        except KeyboardInterrupt:
            call.cancel()
            raise
    return 0
