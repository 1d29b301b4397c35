"""`unreachable-cli scan --remote`: the Scan RPC, returning the report an embedded scan would."""

from __future__ import annotations

import argparse

import grpc

from unreachable.errors import ScanError
from unreachable.model.report import ScanReport
from unreachable.rpc.client import open_channel, rpc_error, stub
from unreachable.rpc.convert import SNAPSHOT_ENUM, SWEEP_ENUM, report_to_model
from unreachable.rpc.progress import StageBar
from unreachable.scan import ScanOptions
from unreachable.v1 import unreachable_pb2 as pb


def remote_scan(
    args: argparse.Namespace, options: ScanOptions, bar: StageBar | None = None
) -> ScanReport:
    """bar: where to draw the daemon's progress (None: nowhere)."""
    request = pb.ScanRequest(
        pid=args.pid,
        contents=options.contents,
        limit=options.limit,
        snapshot=SNAPSHOT_ENUM[options.snapshot],
        sweep=SWEEP_ENUM[options.sweep],
        mark_threads=options.mark_threads,
        baseline=args.daemon_baseline,
    )
    report: pb.ScanReport | None = None
    channel = open_channel(args)
    try:
        call = stub(channel).Scan(request, timeout=args.timeout)
        try:
            for event in call:
                if event.HasField("report"):
                    report = event.report
                elif bar is not None:
                    bar.update(event.progress.stage_name, event.progress.elapsed_ms)
        except grpc.RpcError as e:
            raise rpc_error(e, args.remote) from None
        except KeyboardInterrupt:
            call.cancel()  # the daemon kills the scan and the target is released
            raise
    finally:
        if bar is not None:
            bar.close()
        channel.close()
    if report is None:
        raise ScanError(f"unreachabled at {args.remote} ended the scan without a report")
    return report_to_model(report)
