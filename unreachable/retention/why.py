"""unreachable-cli why PID ADDRESS: a shortest chain from a root to the block
holding ADDRESS, as a report (dict shaped as docs/report-schema.md says)
and as text."""

from __future__ import annotations

import json
from typing import Any

from unreachable.errors import InvalidArgument
from unreachable.model.report import ScanReport
from unreachable.report.text import format_frame
from unreachable.retention.collect import GraphCollector, graph_scan
from unreachable.scan import ScanOptions
from unreachable.symbolize.frame import Frame, frame_to_dict

TEXT_FRAMES = 4  # frames of each block's allocation site in the text report


def why(pid: int, address: int, options: ScanOptions | None = None) -> dict[str, Any]:
    """The report; InvalidArgument when ADDRESS lies in no live block."""
    collector = GraphCollector(pid, why=address)
    report = graph_scan(pid, options, collector)
    return build(collector, report, address)


def _block(c: GraphCollector, index: int, frames: dict[int, list[Frame]]) -> dict[str, Any]:
    address, size, stack = c.block(index)
    return {
        "address": address,
        "size": size,
        "backtrace": [frame_to_dict(f) for f in frames.get(stack, [])],
    }


def build(c: GraphCollector, report: ScanReport, address: int) -> dict[str, Any]:
    answer = c.why
    if answer is None or answer["block"] < 0:
        raise InvalidArgument(
            f"{address:#x} is not inside any live allocation of process {report.pid}"
        )
    frames = c.frames()
    target = _block(c, answer["block"], frames)
    target["offset"] = address - target["address"]
    chain: list[dict[str, Any]] = []
    path = answer["path"]
    for j, (index, _offset, _value) in enumerate(path):
        step = _block(c, index, frames)
        if j + 1 < len(path):
            _, offset, value = path[j + 1]
            step["pointer_offset"] = offset if offset >= 0 else None
            step["points_to"] = value
        else:
            step["pointer_offset"] = None
            step["points_to"] = None
        chain.append(step)
    root = None
    if answer["reachable"] and answer["hit"] >= 0:
        root = c.describe_hit(c.hits[answer["hit"]])
    return {
        "pid": report.pid,
        "command": report.command,
        "address": address,
        "block": target,
        "reachable": bool(answer["reachable"]),
        "root": root,
        "chain": chain,
        "leak": chain[0]["address"] if not answer["reachable"] and chain else None,
        "referrers": [
            {"address": c.block(i)[0], "size": c.block(i)[1]} for i in answer["referrers"]
        ],
        "snapshot": report.snapshot,
        "pause_ms": round(report.pause_ms, 3),
    }


def format_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def _where(block: dict[str, Any]) -> str:
    off = block["offset"]
    into = "the start" if off == 0 else f"{off} bytes into"
    if off and off == block["size"]:
        into = "one past the end"
    return f"{into} of a {block['size']}-byte block at {block['address']:#x}"


def _frames(block: dict[str, Any]) -> list[str]:
    return [format_frame(i, Frame(**f)) for i, f in enumerate(block["backtrace"][:TEXT_FRAMES])]


def format_text(data: dict[str, Any]) -> str:
    target = data["block"]
    lines = [f"{data['address']:#x} is {_where(target)} in process {data['pid']}"]
    chain = data["chain"]
    if data["reachable"]:
        root = data["root"]
        lines.append(f"reachable through {len(chain)} block{'' if len(chain) == 1 else 's'}:")
        held = f"holds {chain[0]['address']:#x}" if chain else ""
        if root is not None:
            at = (
                f" (the word at {root['address']:#x} {held})" if "address" in root else f" ({held})"
            )
            lines.append(f"  root  {root['kind']}: {root['name']}{at}")
    else:
        refs = data["referrers"]
        by = ", ".join(f"{r['address']:#x}" for r in refs) or "nothing"
        lines.append(f"unreachable: a leak. Referenced by {by}.")
        if chain:
            lines.append(f"  the leak it belongs to is the {chain[0]['size']}-byte block at "
                         f"{chain[0]['address']:#x}, which the scan reports:")  # fmt: skip
    for j, step in enumerate(chain):
        line = f"  #{j}  {step['size']} bytes at {step['address']:#x}"
        if step["pointer_offset"] is not None:
            line += f": +{step['pointer_offset']:#x} -> {step['points_to']:#x}"
        elif j == len(chain) - 1:
            line += "  (the block asked about)"
        lines.append(line)
        lines += _frames(step)
    return "\n".join(lines) + "\n"
