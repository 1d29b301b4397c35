"""_native's view of abi.h: the one place Python learns a structure's layout."""

from __future__ import annotations

import os

import pytest

from tests.scanner.procs import fields, program, spawn
from unreachable import _native
from unreachable.capture.descriptor import read_descriptor_header


def test_layouts_are_abi_h_s():
    # The sizes abi.h asserts for itself; offsets come from offsetof.
    assert _native.abi_sizeof("ur_descriptor") == 200
    assert _native.abi_sizeof("ur_leak_record") == 40
    assert _native.abi_field("ur_descriptor", "magic") == (0, 8)
    assert _native.abi_field("ur_write_tracker", "heartbeat") == (16, 8)
    assert _native.ABI_MAGIC.to_bytes(8, "little") == b"UREACHB1"


def test_encode_then_decode_keeps_every_field():
    module = {
        "bias": 1,
        "start": 2,
        "end": 3,
        "path": 4,
        "path_len": 5,
        "build_id_len": 2,
        "build_id": b"\xab\xcd" + bytes(30),
    }
    raw = _native.abi_encode("ur_module", module)
    assert len(raw) == _native.abi_sizeof("ur_module")
    assert _native.abi_decode("ur_module", raw) == module
    err = {"cmd": _native.TRACK_FAILED, "error": -5}
    tracker = _native.abi_decode("ur_write_tracker", _native.abi_encode("ur_write_tracker", err))
    assert tracker == {**err, "scanner_pid": 0, "ranges": 0, "heartbeat": 0, "reserved": 0}
    two = _native.abi_encode("ur_altstack", {"tid": 7, "sp": 8}) * 2 + b"\0"
    assert [e["tid"] for e in _native.abi_decode_array("ur_altstack", two)] == [7, 7]


def test_arrays_of_rows_encode_in_field_order():
    """The sweep's inputs and the mark's graph records: rows packed back to
    back, signed fields kept signed, a row of the wrong width refused."""
    ranges = _native.abi_encode_array("ur_range", [(0x1000, 0x2000), (0x3000, 0x3008)])
    assert len(ranges) == 2 * _native.abi_sizeof("ur_range") == 32
    assert _native.abi_decode_array("ur_range", ranges) == [
        {"begin": 0x1000, "end": 0x2000},
        {"begin": 0x3000, "end": 0x3008},
    ]
    spans = _native.abi_encode_array("ur_layout_span", [(1, 2, True)])
    assert _native.abi_decode_array("ur_layout_span", spans) == [
        {"begin": 1, "end": 2, "demand_zero": 1}
    ]
    sites = _native.abi_encode_array("ur_root_site", [(-1, -17, 64, 2)])
    assert _native.abi_decode_array("ur_root_site", sites)[0]["key"] == -17
    assert _native.abi_encode_array("ur_block", []) == b""
    with pytest.raises(ValueError, match="has 2 fields, got 3"):
        _native.abi_encode_array("ur_range", [(1, 2, 3)])
    with pytest.raises(OverflowError):
        _native.abi_encode_array("ur_root_hit", [(0, 0, 1 << 32, 0)])


def test_registers_decode_by_the_kernels_layout():
    names = [name for name, _, _ in _native.abi_fields("user_regs_struct")]
    assert names[0] == "r15" and names[16] == "rip" and names[21] == "fs_base"
    assert [off for _, off, _ in _native.abi_fields("user_regs_struct")] == [
        8 * i for i in range(len(names))
    ]
    raw = b"".join(i.to_bytes(8, "little") for i in range(len(names)))
    assert _native.abi_decode("user_regs_struct", raw)["rsp"] == names.index("rsp")


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="no struct"):
        _native.abi_sizeof("ur_nothing")
    with pytest.raises(ValueError, match="no field"):
        _native.abi_encode("ur_leak_record", {"reserved": 1})
    with pytest.raises(OverflowError):
        _native.abi_encode("ur_leak_record", {"stack_id": 1 << 32})
    with pytest.raises(ValueError, match="200 bytes"):
        _native.abi_decode("ur_descriptor", bytes(199))


def test_a_live_shims_descriptor_decodes():
    with spawn([str(program("registry"))]) as (proc, line):
        f = fields(line)
        fd = os.open(f"/proc/{proc.pid}/mem", os.O_RDONLY)
        try:
            raw = os.pread(fd, _native.abi_sizeof("ur_descriptor"), f["descriptor"])
        finally:
            os.close(fd)
        d = _native.abi_decode("ur_descriptor", raw)
        assert (d["magic"], d["version"]) == (_native.ABI_MAGIC, _native.ABI_VERSION)
        # registry.c's own values, field by field: the offsets are the compiler's.
        assert (d["size"], d["num_shards"], d["max_threads"]) == (len(raw), 2, 4)
        assert (d["helper_tid"], d["region_begin"], d["region_end"]) == (777, 0x10000, 0x20000)
        header = read_descriptor_header(proc.pid, f["descriptor"])
        assert header.enabled == bool(d["enabled"]) and header.options == d["options"]
