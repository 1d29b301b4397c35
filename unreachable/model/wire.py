"""How a model field travels when its JSON or proto form is not the plain one.

The report model (model/report.py) is the one definition of a scan report:
report/schema.py derives the JSON report and the proto messages from its
fields. A field goes by its own name, as its own type, unless `wire()`
says otherwise here, next to the field. Kept apart from schema.py so that
model.py can use it without importing what the conversions need.
"""

from __future__ import annotations

from typing import Any


def wire(
    *,
    json: str = "",
    json_digits: int | None = None,
    proto_pairs: tuple[str, str] | None = None,
    codec: str = "",
) -> dict[str, Any]:
    """The metadata of a model field (dataclasses.field(metadata=...)) whose
    wire form is not the plain one.

    json: the JSON key, when not the field's name (bytes are then hex).
    json_digits: floats are rounded to that many decimals in JSON.
    proto_pairs: a dict[str, int] is a repeated message of these two fields.
    codec: the field is a structure of its own, converted by the codec of
        that name in report/schema.py (suppressions, baselines)."""
    return {"json": json, "json_digits": json_digits, "proto_pairs": proto_pairs, "codec": codec}
