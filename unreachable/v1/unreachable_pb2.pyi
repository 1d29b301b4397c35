import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Snapshot(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT_AUTO: _ClassVar[Snapshot]
    SNAPSHOT_FORK: _ClassVar[Snapshot]
    SNAPSHOT_STOPPED: _ClassVar[Snapshot]
    SNAPSHOT_COPY: _ClassVar[Snapshot]
    SNAPSHOT_CONCURRENT: _ClassVar[Snapshot]

class Sweep(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SWEEP_AUTO: _ClassVar[Sweep]
    SWEEP_CHILD: _ClassVar[Sweep]
    SWEEP_SCANNER: _ClassVar[Sweep]

class ScanStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCAN_STAGE_UNSPECIFIED: _ClassVar[ScanStage]
    SCAN_STAGE_STARTED: _ClassVar[ScanStage]
    SCAN_STAGE_ATTACHED: _ClassVar[ScanStage]
    SCAN_STAGE_CAPTURED: _ClassVar[ScanStage]
    SCAN_STAGE_ALLOCATIONS: _ClassVar[ScanStage]
    SCAN_STAGE_MARKED: _ClassVar[ScanStage]
    SCAN_STAGE_FOLDED: _ClassVar[ScanStage]
    SCAN_STAGE_DONE: _ClassVar[ScanStage]

class Trigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_UNSPECIFIED: _ClassVar[Trigger]
    TRIGGER_SIGNAL: _ClassVar[Trigger]
    TRIGGER_SCHEDULED: _ClassVar[Trigger]
SNAPSHOT_AUTO: Snapshot
SNAPSHOT_FORK: Snapshot
SNAPSHOT_STOPPED: Snapshot
SNAPSHOT_COPY: Snapshot
SNAPSHOT_CONCURRENT: Snapshot
SWEEP_AUTO: Sweep
SWEEP_CHILD: Sweep
SWEEP_SCANNER: Sweep
SCAN_STAGE_UNSPECIFIED: ScanStage
SCAN_STAGE_STARTED: ScanStage
SCAN_STAGE_ATTACHED: ScanStage
SCAN_STAGE_CAPTURED: ScanStage
SCAN_STAGE_ALLOCATIONS: ScanStage
SCAN_STAGE_MARKED: ScanStage
SCAN_STAGE_FOLDED: ScanStage
SCAN_STAGE_DONE: ScanStage
TRIGGER_UNSPECIFIED: Trigger
TRIGGER_SIGNAL: Trigger
TRIGGER_SCHEDULED: Trigger

class ScanRequest(_message.Message):
    __slots__ = ("pid", "contents", "limit", "snapshot", "sweep", "mark_threads", "baseline")
    PID_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SWEEP_FIELD_NUMBER: _ClassVar[int]
    MARK_THREADS_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    contents: bool
    limit: int
    snapshot: Snapshot
    sweep: Sweep
    mark_threads: int
    baseline: bool
    def __init__(self, pid: _Optional[int] = ..., contents: _Optional[bool] = ..., limit: _Optional[int] = ..., snapshot: _Optional[_Union[Snapshot, str]] = ..., sweep: _Optional[_Union[Sweep, str]] = ..., mark_threads: _Optional[int] = ..., baseline: _Optional[bool] = ...) -> None: ...

class ScanProgress(_message.Message):
    __slots__ = ("stage", "stage_name", "elapsed_ms")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    STAGE_NAME_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    stage: ScanStage
    stage_name: str
    elapsed_ms: float
    def __init__(self, stage: _Optional[_Union[ScanStage, str]] = ..., stage_name: _Optional[str] = ..., elapsed_ms: _Optional[float] = ...) -> None: ...

class ScanEvent(_message.Message):
    __slots__ = ("progress", "report")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    progress: ScanProgress
    report: ScanReport
    def __init__(self, progress: _Optional[_Union[ScanProgress, _Mapping]] = ..., report: _Optional[_Union[ScanReport, _Mapping]] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("pc", "map", "rel_pc", "function", "offset", "file", "line")
    PC_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    REL_PC_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    pc: int
    map: str
    rel_pc: int
    function: str
    offset: int
    file: str
    line: int
    def __init__(self, pc: _Optional[int] = ..., map: _Optional[str] = ..., rel_pc: _Optional[int] = ..., function: _Optional[str] = ..., offset: _Optional[int] = ..., file: _Optional[str] = ..., line: _Optional[int] = ...) -> None: ...

class Leak(_message.Message):
    __slots__ = ("address", "size", "referenced_count", "referenced_size", "similar_count", "similar_size", "similar_referenced_count", "similar_referenced_size", "total_size", "backtrace", "contents", "type", "baseline_site")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    REFERENCED_COUNT_FIELD_NUMBER: _ClassVar[int]
    REFERENCED_SIZE_FIELD_NUMBER: _ClassVar[int]
    SIMILAR_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIMILAR_SIZE_FIELD_NUMBER: _ClassVar[int]
    SIMILAR_REFERENCED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIMILAR_REFERENCED_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    BACKTRACE_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BASELINE_SITE_FIELD_NUMBER: _ClassVar[int]
    address: int
    size: int
    referenced_count: int
    referenced_size: int
    similar_count: int
    similar_size: int
    similar_referenced_count: int
    similar_referenced_size: int
    total_size: int
    backtrace: _containers.RepeatedCompositeFieldContainer[Frame]
    contents: bytes
    type: str
    baseline_site: int
    def __init__(self, address: _Optional[int] = ..., size: _Optional[int] = ..., referenced_count: _Optional[int] = ..., referenced_size: _Optional[int] = ..., similar_count: _Optional[int] = ..., similar_size: _Optional[int] = ..., similar_referenced_count: _Optional[int] = ..., similar_referenced_size: _Optional[int] = ..., total_size: _Optional[int] = ..., backtrace: _Optional[_Iterable[_Union[Frame, _Mapping]]] = ..., contents: _Optional[bytes] = ..., type: _Optional[str] = ..., baseline_site: _Optional[int] = ...) -> None: ...

class SuppressionUse(_message.Message):
    __slots__ = ("pattern", "file", "line", "count", "bytes")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    file: str
    line: int
    count: int
    bytes: int
    def __init__(self, pattern: _Optional[str] = ..., file: _Optional[str] = ..., line: _Optional[int] = ..., count: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class SuppressedLeak(_message.Message):
    __slots__ = ("leak", "suppression")
    LEAK_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSION_FIELD_NUMBER: _ClassVar[int]
    leak: Leak
    suppression: str
    def __init__(self, leak: _Optional[_Union[Leak, _Mapping]] = ..., suppression: _Optional[str] = ...) -> None: ...

class Suppressed(_message.Message):
    __slots__ = ("count", "bytes", "used", "leaks")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    LEAKS_FIELD_NUMBER: _ClassVar[int]
    count: int
    bytes: int
    used: _containers.RepeatedCompositeFieldContainer[SuppressionUse]
    leaks: _containers.RepeatedCompositeFieldContainer[SuppressedLeak]
    def __init__(self, count: _Optional[int] = ..., bytes: _Optional[int] = ..., used: _Optional[_Iterable[_Union[SuppressionUse, _Mapping]]] = ..., leaks: _Optional[_Iterable[_Union[SuppressedLeak, _Mapping]]] = ...) -> None: ...

class BaselineSite(_message.Message):
    __slots__ = ("site", "is_new", "old_count", "old_bytes", "count", "bytes")
    SITE_FIELD_NUMBER: _ClassVar[int]
    IS_NEW_FIELD_NUMBER: _ClassVar[int]
    OLD_COUNT_FIELD_NUMBER: _ClassVar[int]
    OLD_BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    site: _containers.RepeatedScalarFieldContainer[str]
    is_new: bool
    old_count: int
    old_bytes: int
    count: int
    bytes: int
    def __init__(self, site: _Optional[_Iterable[str]] = ..., is_new: _Optional[bool] = ..., old_count: _Optional[int] = ..., old_bytes: _Optional[int] = ..., count: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class BaselineComparison(_message.Message):
    __slots__ = ("file", "leak_count", "leak_bytes", "unlisted_count", "unlisted_bytes", "now_count", "now_bytes", "sites")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LEAK_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNLISTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNLISTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    NOW_COUNT_FIELD_NUMBER: _ClassVar[int]
    NOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    SITES_FIELD_NUMBER: _ClassVar[int]
    file: str
    leak_count: int
    leak_bytes: int
    unlisted_count: int
    unlisted_bytes: int
    now_count: int
    now_bytes: int
    sites: _containers.RepeatedCompositeFieldContainer[BaselineSite]
    def __init__(self, file: _Optional[str] = ..., leak_count: _Optional[int] = ..., leak_bytes: _Optional[int] = ..., unlisted_count: _Optional[int] = ..., unlisted_bytes: _Optional[int] = ..., now_count: _Optional[int] = ..., now_bytes: _Optional[int] = ..., sites: _Optional[_Iterable[_Union[BaselineSite, _Mapping]]] = ...) -> None: ...

class RootBytes(_message.Message):
    __slots__ = ("kind", "bytes")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    bytes: int
    def __init__(self, kind: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class ScanReport(_message.Message):
    __slots__ = ("schema", "pid", "command", "leak_count", "leak_bytes", "allocation_count", "allocation_bytes", "pause_ms", "scan_ms", "snapshot", "threads", "bytes_scanned", "pages_skipped", "roots", "leaks", "sweep", "snapshot_note", "sweep_note", "mark_threads", "allocations", "symbol_note", "suppressed", "baseline", "hold_ms", "mark_passes", "mark_bytes_read")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    LEAK_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAUSE_MS_FIELD_NUMBER: _ClassVar[int]
    SCAN_MS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    BYTES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    PAGES_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    LEAKS_FIELD_NUMBER: _ClassVar[int]
    SWEEP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_NOTE_FIELD_NUMBER: _ClassVar[int]
    SWEEP_NOTE_FIELD_NUMBER: _ClassVar[int]
    MARK_THREADS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    SYMBOL_NOTE_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    MARK_PASSES_FIELD_NUMBER: _ClassVar[int]
    MARK_BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    schema: int
    pid: int
    command: str
    leak_count: int
    leak_bytes: int
    allocation_count: int
    allocation_bytes: int
    pause_ms: float
    scan_ms: float
    snapshot: str
    threads: int
    bytes_scanned: int
    pages_skipped: int
    roots: _containers.RepeatedCompositeFieldContainer[RootBytes]
    leaks: _containers.RepeatedCompositeFieldContainer[Leak]
    sweep: str
    snapshot_note: str
    sweep_note: str
    mark_threads: int
    allocations: str
    symbol_note: str
    suppressed: Suppressed
    baseline: BaselineComparison
    hold_ms: float
    mark_passes: int
    mark_bytes_read: int
    def __init__(self, schema: _Optional[int] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., leak_count: _Optional[int] = ..., leak_bytes: _Optional[int] = ..., allocation_count: _Optional[int] = ..., allocation_bytes: _Optional[int] = ..., pause_ms: _Optional[float] = ..., scan_ms: _Optional[float] = ..., snapshot: _Optional[str] = ..., threads: _Optional[int] = ..., bytes_scanned: _Optional[int] = ..., pages_skipped: _Optional[int] = ..., roots: _Optional[_Iterable[_Union[RootBytes, _Mapping]]] = ..., leaks: _Optional[_Iterable[_Union[Leak, _Mapping]]] = ..., sweep: _Optional[str] = ..., snapshot_note: _Optional[str] = ..., sweep_note: _Optional[str] = ..., mark_threads: _Optional[int] = ..., allocations: _Optional[str] = ..., symbol_note: _Optional[str] = ..., suppressed: _Optional[_Union[Suppressed, _Mapping]] = ..., baseline: _Optional[_Union[BaselineComparison, _Mapping]] = ..., hold_ms: _Optional[float] = ..., mark_passes: _Optional[int] = ..., mark_bytes_read: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("pid", "name", "contents")
    PID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    name: str
    contents: bool
    def __init__(self, pid: _Optional[int] = ..., name: _Optional[str] = ..., contents: _Optional[bool] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("trigger", "time", "name", "summary", "report", "unit", "growth")
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    GROWTH_FIELD_NUMBER: _ClassVar[int]
    trigger: Trigger
    time: _timestamp_pb2.Timestamp
    name: str
    summary: str
    report: ScanReport
    unit: str
    growth: _containers.RepeatedCompositeFieldContainer[LeakGrowth]
    def __init__(self, trigger: _Optional[_Union[Trigger, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., name: _Optional[str] = ..., summary: _Optional[str] = ..., report: _Optional[_Union[ScanReport, _Mapping]] = ..., unit: _Optional[str] = ..., growth: _Optional[_Iterable[_Union[LeakGrowth, _Mapping]]] = ...) -> None: ...

class LeakGrowth(_message.Message):
    __slots__ = ("site", "bytes", "count", "first_bytes", "scans", "seconds", "bytes_per_hour", "backtrace")
    SITE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCANS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    BACKTRACE_FIELD_NUMBER: _ClassVar[int]
    site: str
    bytes: int
    count: int
    first_bytes: int
    scans: int
    seconds: float
    bytes_per_hour: float
    backtrace: _containers.RepeatedCompositeFieldContainer[Frame]
    def __init__(self, site: _Optional[str] = ..., bytes: _Optional[int] = ..., count: _Optional[int] = ..., first_bytes: _Optional[int] = ..., scans: _Optional[int] = ..., seconds: _Optional[float] = ..., bytes_per_hour: _Optional[float] = ..., backtrace: _Optional[_Iterable[_Union[Frame, _Mapping]]] = ...) -> None: ...

class HeapDumpRequest(_message.Message):
    __slots__ = ("pid",)
    PID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    def __init__(self, pid: _Optional[int] = ...) -> None: ...

class HeapRecord(_message.Message):
    __slots__ = ("size", "num_allocations", "frames")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    size: int
    num_allocations: int
    frames: _containers.RepeatedCompositeFieldContainer[Frame]
    def __init__(self, size: _Optional[int] = ..., num_allocations: _Optional[int] = ..., frames: _Optional[_Iterable[_Union[Frame, _Mapping]]] = ...) -> None: ...

class HeapDumpResponse(_message.Message):
    __slots__ = ("pid", "command", "total_memory", "backtrace_size", "allocation_count", "records", "pause_ms", "maps", "fingerprint")
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MEMORY_FIELD_NUMBER: _ClassVar[int]
    BACKTRACE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_MS_FIELD_NUMBER: _ClassVar[int]
    MAPS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    command: str
    total_memory: int
    backtrace_size: int
    allocation_count: int
    records: _containers.RepeatedCompositeFieldContainer[HeapRecord]
    pause_ms: float
    maps: str
    fingerprint: str
    def __init__(self, pid: _Optional[int] = ..., command: _Optional[str] = ..., total_memory: _Optional[int] = ..., backtrace_size: _Optional[int] = ..., allocation_count: _Optional[int] = ..., records: _Optional[_Iterable[_Union[HeapRecord, _Mapping]]] = ..., pause_ms: _Optional[float] = ..., maps: _Optional[str] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class ListTargetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Target(_message.Message):
    __slots__ = ("pid", "command", "name", "options", "enabled", "shim")
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    SHIM_FIELD_NUMBER: _ClassVar[int]
    pid: int
    command: str
    name: str
    options: str
    enabled: bool
    shim: str
    def __init__(self, pid: _Optional[int] = ..., command: _Optional[str] = ..., name: _Optional[str] = ..., options: _Optional[str] = ..., enabled: _Optional[bool] = ..., shim: _Optional[str] = ...) -> None: ...

class ListTargetsResponse(_message.Message):
    __slots__ = ("targets",)
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[Target]
    def __init__(self, targets: _Optional[_Iterable[_Union[Target, _Mapping]]] = ...) -> None: ...

class WhyRequest(_message.Message):
    __slots__ = ("pid", "address", "snapshot")
    PID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    address: int
    snapshot: Snapshot
    def __init__(self, pid: _Optional[int] = ..., address: _Optional[int] = ..., snapshot: _Optional[_Union[Snapshot, str]] = ...) -> None: ...

class RetainersRequest(_message.Message):
    __slots__ = ("pid", "site", "limit", "snapshot")
    PID_FIELD_NUMBER: _ClassVar[int]
    SITE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    site: str
    limit: int
    snapshot: Snapshot
    def __init__(self, pid: _Optional[int] = ..., site: _Optional[str] = ..., limit: _Optional[int] = ..., snapshot: _Optional[_Union[Snapshot, str]] = ...) -> None: ...

class RetentionReport(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...
