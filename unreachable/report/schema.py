"""The JSON report and the proto messages, derived from the report model.

model/report.py is the one definition of a scan report: these functions walk
its dataclass fields (dataclasses.fields and their type hints), so a field
added there is written to JSON and proto without being listed again. A field
goes by its own name and type; model/wire.py's `wire()` metadata says where
it does not (a JSON key, float rounding, a dict sent as repeated pairs, a
structure with its own codec). The JSON keys are the model's field names,
which is the documented schema (docs/report-schema.md); the proto's fields
have the same names (protos/unreachable/v1/unreachable.proto), and a model
field the proto lacks is an error, not a silent omission.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.symbolize.frame import Frame

SCHEMA_VERSION = 1
T = TypeVar("T")


@dataclass(slots=True, eq=False, repr=False)
class Codec:
    """A field that is a structure of its own (what suppressions and a
    baseline did to the report): its JSON keys at the report's top level,
    and per leak entry."""

    to_json: Callable[[ScanReport, Callable[[LeakEntry], dict[str, Any]]], dict[str, Any]]
    leak_json: Callable[[ScanReport, LeakEntry, dict[str, Any]], dict[str, Any]]
    from_json: Callable[[dict[str, Any], list[LeakEntry]], Any]
    # Over gRPC, given the whole report and its message (a codec may write
    # into the leak messages too). None: the field does not travel yet.
    to_proto: Callable[[ScanReport, Any], None] | None = None
    from_proto: Callable[[Any, list[LeakEntry]], Any] | None = None


_CODECS: dict[str, Codec] = {}


def codec(name: str) -> Codec:
    """A codec field's codec. The triage's modules (suppressions, baselines:
    a few ms of imports) are imported when a report has such a field set,
    or is read back, not by every scan's report."""
    if not _CODECS:
        from unreachable.triage import codecs as triage_codecs

        _CODECS["suppressed"] = Codec(
            triage_codecs.suppressed_to_json,
            lambda _report, _leak, d: d,
            lambda d, _leaks: triage_codecs.suppressed_from_json(d, leak_from_json),
            lambda report, msg: triage_codecs.suppressed_to_proto(report, msg, to_proto),
            lambda msg, _leaks: triage_codecs.suppressed_from_proto(
                msg, lambda m: from_proto(LeakEntry, m)
            ),
        )
        _CODECS["baseline"] = Codec(
            triage_codecs.baseline_to_json,
            triage_codecs.baseline_leak_json,
            triage_codecs.baseline_from_json,
            triage_codecs.baseline_to_proto,
            triage_codecs.baseline_from_proto,
        )
    return _CODECS[name]


_HINTS: dict[type, dict[str, Any]] = {}
# model.py names the triage's types (a codec field's) only for type
# checkers; their codecs read and write them, so they are not resolved here.
_CODEC_TYPES = {"Suppressed": object, "Comparison": object}


def _hints(cls: type) -> dict[str, Any]:
    """The types of the fields that are not a codec's."""
    if cls not in _HINTS:
        hints = typing.get_type_hints(cls, localns={**_CODEC_TYPES, "Frame": Frame})
        codecs = {f.name for f in dataclasses.fields(cls) if f.metadata.get("codec")}
        _HINTS[cls] = {k: v for k, v in hints.items() if k not in codecs}
    return _HINTS[cls]


def _optional(tp: Any) -> Any:
    """X for `X | None`, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return None


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


# ---- JSON ----------------------------------------------------------------------


# How to_json writes a value of a field's type (None: as it is).
ToJson = Callable[[Any], Any] | None


def _json_writer(tp: Any, digits: int | None) -> ToJson:
    if dataclasses.is_dataclass(tp):
        return to_json
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        if (each := _json_writer(item, None)) is None:
            return list
        return lambda value: [each(v) for v in value]
    if typing.get_origin(tp) is dict:
        return dict
    if tp is bytes:
        return bytes.hex
    if tp is float and digits is not None:
        return lambda value: round(value, digits)
    return None


_JSON_FIELDS: dict[type, list[tuple[str, str, bool, ToJson]]] = {}


def _json_fields(cls: type) -> list[tuple[str, str, bool, ToJson]]:
    """Each field to_json writes: its name, its JSON key, whether it is
    optional (left out when None) and how its value is written. Worked out
    once per class: a report's every entry is written by it."""
    if cls not in _JSON_FIELDS:
        hints = _hints(cls)
        plan = []
        for f in dataclasses.fields(cls):
            if f.metadata.get("codec"):
                continue
            tp = hints[f.name]
            inner = _optional(tp)
            key = f.metadata.get("json") or f.name
            plan.append(
                (
                    f.name,
                    key,
                    inner is not None,
                    _json_writer(inner or tp, f.metadata.get("json_digits")),
                )
            )
        _JSON_FIELDS[cls] = plan
    return _JSON_FIELDS[cls]


def _value_from_json(tp: Any, value: Any) -> Any:
    if dataclasses.is_dataclass(tp):
        return from_json(typing.cast(type, tp), value)
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return [_value_from_json(item, v) for v in value]
    if typing.get_origin(tp) is dict:
        return dict(value)
    if tp is bytes:
        return bytes.fromhex(value)
    if tp is float:
        return float(value)
    return value


def to_json(obj: Any) -> dict[str, Any]:
    """A model dataclass as its JSON object. Codec fields are left to the
    report (report_to_json); an optional field that is None is left out."""
    out: dict[str, Any] = {}
    for name, key, optional, write in _json_fields(type(obj)):
        value = getattr(obj, name)
        if optional and value is None:
            continue
        out[key] = value if write is None else write(value)
    return out


def from_json(cls: type[T], d: dict[str, Any]) -> T:
    """The model dataclass `cls` from its JSON object; a key left out (a
    report older than the field) takes the field's default."""
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f.metadata.get("json") or f.name
        if f.metadata.get("codec") or key not in d:
            continue
        tp = hints[f.name]
        values[f.name] = _value_from_json(_optional(tp) or tp, d[key])
    return cls(**values)


def leak_from_json(d: dict[str, Any]) -> LeakEntry:
    return from_json(LeakEntry, d)


def report_to_json(report: ScanReport) -> dict[str, Any]:
    """The JSON report (docs/report-schema.md)."""
    out = {"schema": SCHEMA_VERSION, **to_json(report)}
    # A codec writes nothing for its field left None (no suppressions, no baseline).
    codecs = [
        (f.name, codec(c))
        for f in dataclasses.fields(report)
        if (c := f.metadata.get("codec")) and getattr(report, f.name) is not None
    ]
    leaks = []
    for leak, d in zip(report.leaks, out["leaks"], strict=True):
        for _, field_codec in codecs:
            d = field_codec.leak_json(report, leak, d)
        leaks.append(d)
    out["leaks"] = leaks
    for _, field_codec in codecs:
        out |= field_codec.to_json(report, to_json)
    return out


def report_from_json(d: dict[str, Any]) -> ScanReport:
    """A JSON report (this version's, or an older one's) as the model."""
    report = from_json(ScanReport, d)
    for f in dataclasses.fields(report):
        if name := f.metadata.get("codec"):
            setattr(report, f.name, codec(name).from_json(d, report.leaks))
    return report


# ---- proto ---------------------------------------------------------------------


def proto_text(value: Any) -> Any:
    """A str as protobuf takes it: /proc's text (a mapped file's path, a
    thread name) may hold bytes that are no UTF-8, read as surrogate
    escapes, which protobuf refuses; they travel as \\xNN escapes instead."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return value


def to_proto(obj: Any, msg: Any) -> Any:
    """Fill the proto message `msg` from the model dataclass `obj`, field by
    field of the same name; returns msg. KeyError: the proto has no field
    for one of the model's."""
    hints = _hints(type(obj))
    names = msg.DESCRIPTOR.fields_by_name
    codecs: list[Callable[[Any, Any], None]] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if codec_name := f.metadata.get("codec"):
            if value is not None and (encode := codec(codec_name).to_proto) is not None:
                codecs.append(encode)
            continue
        if f.name not in names:
            raise KeyError(f"{msg.DESCRIPTOR.full_name} has no field {f.name}")
        tp = hints[f.name]
        if (inner := _optional(tp)) is not None:
            if value is None:
                continue
            tp = inner
        if dataclasses.is_dataclass(tp):
            getattr(msg, f.name).SetInParent()
            to_proto(value, getattr(msg, f.name))
        elif typing.get_origin(tp) is list:
            (item,) = typing.get_args(tp)
            field = getattr(msg, f.name)
            for v in value:
                if dataclasses.is_dataclass(item):
                    to_proto(v, field.add())
                else:
                    field.append(proto_text(v))
        elif (pairs := f.metadata.get("proto_pairs")) is not None:
            key, val = pairs
            field = getattr(msg, f.name)
            for k, v in value.items():
                field.add(**{key: proto_text(k), val: proto_text(v)})
        else:
            setattr(msg, f.name, proto_text(value))
    for encode in codecs:  # once the leak messages they may write into exist
        encode(obj, msg)
    return msg


def from_proto(cls: type[T], msg: Any) -> T:
    """The model dataclass `cls` from a proto message. proto3 cannot tell a
    scalar left unset (by a daemon older than the field) from its zero, so
    a zero takes the field's default."""
    values: dict[str, Any] = {}
    codecs: list[tuple[str, Callable[[Any, list[LeakEntry]], Any]]] = []
    hints = _hints(cls)
    names = msg.DESCRIPTOR.fields_by_name
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if codec_name := f.metadata.get("codec"):
            if (decode := codec(codec_name).from_proto) is not None:
                codecs.append((f.name, decode))
            continue
        if f.name not in names:
            raise KeyError(f"{msg.DESCRIPTOR.full_name} has no field {f.name}")
        tp = hints[f.name]
        raw = getattr(msg, f.name)
        if (inner := _optional(tp)) is not None:
            if not msg.HasField(f.name):
                continue
            tp = inner
        if dataclasses.is_dataclass(tp):
            values[f.name] = from_proto(typing.cast(type, tp), raw)
        elif typing.get_origin(tp) is list:
            (item,) = typing.get_args(tp)
            if dataclasses.is_dataclass(item):
                values[f.name] = [from_proto(typing.cast(type, item), m) for m in raw]
            else:
                values[f.name] = list(raw)
        elif (pairs := f.metadata.get("proto_pairs")) is not None:
            key, val = pairs
            values[f.name] = {getattr(m, key): getattr(m, val) for m in raw}
        elif raw or (default := _default(f)) is dataclasses.MISSING:
            values[f.name] = bytes(raw) if tp is bytes else raw
        else:
            values[f.name] = default
    out = cls(**values)
    for name, decode in codecs:  # once the leaks they may refer to exist
        setattr(out, name, decode(msg, getattr(out, "leaks", [])))
    return out
