"""Generated gRPC/protobuf code for protos/unreachable/v1 (scripts/check_protos.sh keeps it in sync)."""
