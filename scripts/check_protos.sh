#!/bin/sh
# Regenerate the committed gRPC/protobuf code (unreachable/v1) into a temporary
# directory and fail on any difference. Needs the `dev` extra (grpcio-tools
# pinned to the version that generated the committed files).
#   scripts/check_protos.sh          check (CI)
#   scripts/check_protos.sh --write  regenerate in place
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
FILES="unreachable_pb2.py unreachable_pb2.pyi unreachable_pb2_grpc.py"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m grpc_tools.protoc -Iprotos --python_out="$tmp" --pyi_out="$tmp" \
  --grpc_python_out="$tmp" protos/unreachable/v1/unreachable.proto

if [ "${1:-}" = "--write" ]; then
  for f in $FILES; do cp "$tmp/unreachable/v1/$f" "unreachable/v1/$f"; done
  echo "regenerated unreachable/v1"
  exit 0
fi

status=0
for f in $FILES; do
  if ! diff -u "unreachable/v1/$f" "$tmp/unreachable/v1/$f"; then
    status=1
  fi
done
extra=$(cd "$tmp/unreachable/v1" && ls | grep -v -x -F "$(printf '%s\n' $FILES)" || true)
if [ -n "$extra" ]; then
  echo "protoc produced files not committed: $extra" >&2
  status=1
fi
if [ $status -ne 0 ]; then
  echo "unreachable/v1 is stale: run scripts/check_protos.sh --write (grpcio-tools $("$PY" -c 'import grpc_tools, importlib.metadata as m; print(m.version("grpcio-tools"))'))" >&2
  exit 1
fi
echo "unreachable/v1 matches protos/"
