"""pprof's profile.proto (github.com/google/pprof proto/profile.proto), built at run time.

The test decodes what unreachable.report.pprof encodes by hand with the
protobuf package, so both sides don't share an encoder.
"""

from __future__ import annotations

from functools import cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
MESSAGES = {
    "Profile": [
        ("sample_type", 1, F.TYPE_MESSAGE, True, "ValueType"),
        ("sample", 2, F.TYPE_MESSAGE, True, "Sample"),
        ("mapping", 3, F.TYPE_MESSAGE, True, "Mapping"),
        ("location", 4, F.TYPE_MESSAGE, True, "Location"),
        ("function", 5, F.TYPE_MESSAGE, True, "Function"),
        ("string_table", 6, F.TYPE_STRING, True, None),
        ("drop_frames", 7, F.TYPE_INT64, False, None),
        ("keep_frames", 8, F.TYPE_INT64, False, None),
        ("time_nanos", 9, F.TYPE_INT64, False, None),
        ("duration_nanos", 10, F.TYPE_INT64, False, None),
        ("period_type", 11, F.TYPE_MESSAGE, False, "ValueType"),
        ("period", 12, F.TYPE_INT64, False, None),
        ("comment", 13, F.TYPE_INT64, True, None),
        ("default_sample_type", 14, F.TYPE_INT64, False, None),
    ],
    "ValueType": [("type", 1, F.TYPE_INT64, False, None), ("unit", 2, F.TYPE_INT64, False, None)],
    "Sample": [
        ("location_id", 1, F.TYPE_UINT64, True, None),
        ("value", 2, F.TYPE_INT64, True, None),
        ("label", 3, F.TYPE_MESSAGE, True, "Label"),
    ],
    "Label": [
        ("key", 1, F.TYPE_INT64, False, None),
        ("str", 2, F.TYPE_INT64, False, None),
        ("num", 3, F.TYPE_INT64, False, None),
        ("num_unit", 4, F.TYPE_INT64, False, None),
    ],
    "Mapping": [
        ("id", 1, F.TYPE_UINT64, False, None),
        ("memory_start", 2, F.TYPE_UINT64, False, None),
        ("memory_limit", 3, F.TYPE_UINT64, False, None),
        ("file_offset", 4, F.TYPE_UINT64, False, None),
        ("filename", 5, F.TYPE_INT64, False, None),
        ("build_id", 6, F.TYPE_INT64, False, None),
        ("has_functions", 7, F.TYPE_BOOL, False, None),
        ("has_filenames", 8, F.TYPE_BOOL, False, None),
        ("has_line_numbers", 9, F.TYPE_BOOL, False, None),
        ("has_inline_frames", 10, F.TYPE_BOOL, False, None),
    ],
    "Location": [
        ("id", 1, F.TYPE_UINT64, False, None),
        ("mapping_id", 2, F.TYPE_UINT64, False, None),
        ("address", 3, F.TYPE_UINT64, False, None),
        ("line", 4, F.TYPE_MESSAGE, True, "Line"),
        ("is_folded", 5, F.TYPE_BOOL, False, None),
    ],
    "Line": [
        ("function_id", 1, F.TYPE_UINT64, False, None),
        ("line", 2, F.TYPE_INT64, False, None),
        ("column", 3, F.TYPE_INT64, False, None),
    ],
    "Function": [
        ("id", 1, F.TYPE_UINT64, False, None),
        ("name", 2, F.TYPE_INT64, False, None),
        ("system_name", 3, F.TYPE_INT64, False, None),
        ("filename", 4, F.TYPE_INT64, False, None),
        ("start_line", 5, F.TYPE_INT64, False, None),
    ],
}


@cache
def profile_class() -> type:
    fd = descriptor_pb2.FileDescriptorProto(
        name="test_profile.proto", package="perftools.profiles.test", syntax="proto3"
    )
    for name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=name)
        for fname, num, ftype, repeated, type_name in fields:
            f = msg.field.add(name=fname, number=num, type=ftype)
            f.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if type_name:
                f.type_name = f".perftools.profiles.test.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("perftools.profiles.test.Profile")
    )


def decode(data: bytes):  # noqa: ANN201
    import gzip

    profile = profile_class()()
    profile.ParseFromString(gzip.decompress(data))
    return profile
