"""The report model is the one definition of a report: JSON and proto carry
every field of it, and a field added to the model without being carried
fails here."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.report import schema
from unreachable.report.json_report import format_json
from unreachable.rpc.convert import report_from_dict, report_to_model, report_to_proto
from unreachable.symbolize.frames import Frame
from unreachable.triage import baseline as baselines
from unreachable.triage import suppressions
from unreachable.v1 import unreachable_pb2 as pb

DOCS = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"

# Model fields whose proto form is not written yet: the daemon's remote
# reports do not carry them. Each must really be missing from the proto
# (test_not_over_grpc_is_true), so the day the proto gets the field this
# fails until the field's codec converts it.
NOT_OVER_GRPC: set[str] = set()


def _frame(i: int) -> Frame:
    return Frame(
        pc=0x7F0000001000 + i,
        map=f"/usr/lib/lib at {i}.so",
        rel_pc=0x1000 + i,
        function=f"ns::f<int (*)(char)>(unsigned long) [clone .{i}]",
        offset=4 + i,
        file="/src/a at b.cc",
        line=10 + i,
    )


def _leak(i: int) -> LeakEntry:
    return LeakEntry(
        address=0x55550000 + 0x100 * i,
        size=24 + i,
        referenced_count=2,
        referenced_size=160,
        similar_count=3,
        similar_size=72,
        similar_referenced_count=6,
        similar_referenced_size=480,
        total_size=736 + i,
        contents=bytes([i]) * 8,
        backtrace=[_frame(i), _frame(i + 1)],
        type="ns::Foo",
    )


def full_report() -> ScanReport:
    """A report with every field of the model set to something other than
    its default (test_every_field_is_set checks it)."""
    leaks = [_leak(1), _leak(2)]
    report = ScanReport(
        pid=1234,
        command="app --flag",
        leak_count=9,
        leak_bytes=900,
        allocation_count=20,
        allocation_bytes=2000,
        pause_ms=0.125,
        scan_ms=3.5,
        snapshot="copy",
        threads=3,
        leaks=leaks,
        hold_ms=0.25,
        roots={"stack": 4096, "globals": 512},
        pages_skipped=2,
        bytes_scanned=65536,
        allocations="glibc heap",
        sweep="child",
        sweep_note="sweep note",
        mark_threads=4,
        mark_passes=2,
        mark_bytes_read=1 << 20,
        snapshot_note="snapshot note",
        symbol_note="1 of 2 frames left unsymbolized",
    )
    rule = suppressions.parse("leak:^ns::g$", "supp.txt")[0]
    block = suppressions.parse("\nleak:size=8,contents=0101", "supp.txt")[0]
    report.suppressed = suppressions.Suppressed(
        count=5,
        bytes=50,
        used=[suppressions.RuleUse(rule, 4, 40), suppressions.RuleUse(block, 1, 10)],
        leaks=[(_leak(3), rule), (_leak(4), block)],
    )
    site = baselines.Site(baselines.site_key(leaks[0].backtrace, leaks[0].size), 1, 10, 3, 30)
    grown = baselines.Site(baselines.site_key(leaks[1].backtrace, leaks[1].size), 0, 0, 2, 20)
    site.in_baseline = True
    old = baselines.Baseline("old.json", 7, 70, {}, 1, 8)
    report.baseline = baselines.Comparison(old, 11, 110, [site, grown])
    report.baseline.site_of = {id(leaks[0]): site, id(leaks[1]): grown}
    return report


def _comparable(report: ScanReport) -> dict[str, Any]:
    """The report as plain data: a baseline's sites per entry by position,
    not by id() of the entry."""
    d = dataclasses.asdict(report)
    if report.baseline is not None:
        d["baseline"]["site_of"] = [report.baseline.site_of.get(id(leak)) for leak in report.leaks]
    return d


def _set_fields(obj: Any, path: str = "") -> list[str]:
    """Fields of obj (and of the model's own dataclasses in it) left at
    their defaults. A codec field's structure is the triage's own: set is
    enough."""
    left = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        default = schema._default(f)
        if default is not dataclasses.MISSING and value == default:
            left.append(path + f.name)
        if f.metadata.get("codec"):
            continue
        for item in value if isinstance(value, list) else [value]:
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                left += _set_fields(item, f"{path}{f.name}.")
    return left


def test_every_field_is_set() -> None:
    assert _set_fields(full_report()) == []


def test_json_round_trip() -> None:
    report = full_report()
    text = format_json(report)
    back = schema.report_from_json(json.loads(text))
    assert _comparable(back) == _comparable(report)
    assert format_json(back) == text


def test_proto_round_trip() -> None:
    report = full_report()
    back = report_to_model(report_to_proto(report))
    for name in NOT_OVER_GRPC:
        setattr(report, name, None)
    assert _comparable(back) == _comparable(report)


def test_json_to_proto_to_model() -> None:
    """The daemon's path: the worker's JSON, to the proto it sends, to the
    model the CLI prints."""
    report = full_report()
    for name in NOT_OVER_GRPC:
        setattr(report, name, None)
    assert _comparable(report_to_model(report_from_dict(json.loads(format_json(report))))) == (
        _comparable(report)
    )


def test_not_over_grpc_is_true() -> None:
    """A codec field either converts to its proto field or the proto has none."""
    for f in dataclasses.fields(ScanReport):
        if codec := f.metadata.get("codec"):
            if f.name in NOT_OVER_GRPC:
                assert f.name not in pb.ScanReport.DESCRIPTOR.fields_by_name
            else:
                assert schema.codec(codec).to_proto is not None, f.name


@pytest.mark.parametrize(
    ("model", "message", "extra"),
    [
        (ScanReport, pb.ScanReport, {"schema"}),
        # An entry's site in the baseline: the report's baseline codec writes it.
        (LeakEntry, pb.Leak, {"baseline_site"}),
        (Frame, pb.Frame, set()),
    ],
)
def test_proto_has_no_field_the_model_lacks(model: type, message: Any, extra: set[str]) -> None:
    proto = set(message.DESCRIPTOR.fields_by_name)
    fields = {f.name for f in dataclasses.fields(model)}
    assert proto - fields == extra
    assert fields - proto <= NOT_OVER_GRPC


def test_json_keys_are_documented() -> None:
    """Every key of a full report appears in docs/report-schema.md's tables."""
    names = re.findall(r"`([a-z_.]+)`", DOCS.read_text())
    documented = {part for name in names for part in name.split(".")}
    d = json.loads(format_json(full_report()))
    keys = set(d) | set(d["leaks"][0]) | set(d["baseline"]) | set(d["suppressions"][0])
    assert keys - documented == set()
