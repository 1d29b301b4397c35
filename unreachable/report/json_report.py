"""The JSON report; its schema is documented in docs/report-schema.md and
derived from the report model by report/schema.py."""

from __future__ import annotations

import json
from typing import Any

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.report.schema import SCHEMA_VERSION, report_to_json, to_json

__all__ = ["SCHEMA_VERSION", "format_json", "leak_to_dict", "report_to_dict"]


def leak_to_dict(leak: LeakEntry) -> dict[str, Any]:
    return to_json(leak)


def report_to_dict(report: ScanReport) -> dict[str, Any]:
    return report_to_json(report)


def format_json(report: ScanReport) -> str:
    return json.dumps(report_to_dict(report), indent=2) + "\n"
