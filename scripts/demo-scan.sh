#!/usr/bin/env bash
# Start a small leaking program under the shim and scan it: the main job of
# unreachable, end to end, on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$out"' EXIT
gcc -g -O1 -o "$out/leaky" examples/leaky.c
unreachable-cli run --options "backtrace=16" -- "$out/leaky" &
pid=$!
sleep 1
echo "\$ unreachable-cli scan $pid"
rc=0
unreachable-cli scan "$pid" || rc=$?
echo "(exit status $rc: 0 no leak, 1 leaks found, 2 scan failed)"
[ "$rc" -le 1 ]
