#!/usr/bin/env bash
# Install everything unreachable needs on a fresh Debian/Ubuntu machine, then
# the package itself (editable, so the checkout's tests run against it).
#   bash scripts/install.sh          # runtime
#   bash scripts/install.sh --test   # runtime + test tools
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# gcc/make/binutils (c++filt) build and symbolize; libunwind-dev for the
# shim's unwinder; systemd for the monitoring unit checks.
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential binutils libunwind-dev pkg-config python3-dev python3-pip systemd >/dev/null

# The tests' extras: a library and five services the tests start and scan
# themselves (tests/scan/test_real_services.py); gdb's gcore makes the core
# files tests/scan/test_core.py scans, and libc6-dbg's symbols check the
# glibc heap walk's own way of finding glibc's structures; strace counts the
# shim helper's system calls (tests/shim/test_teardown.py). No service may start during
# the install (policy-rc.d says 101, unless the machine has its own policy).
if [ "${1:-}" = "--test" ]; then
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    made_policy=1
    trap '$SUDO rm -f "$policy"' EXIT
    $SUDO chmod 755 "$policy"
  fi
  $SUDO apt-get install -y -qq --no-install-recommends \
    libjemalloc2 redis-server memcached nginx-light bind9 nodejs gdb libc6-dbg strace >/dev/null
  if [ -n "$made_policy" ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
  # glibc 2.31, 2.35, 2.39, 2.41, 2.42 and 2.43 beside this system's, unpacked under tests/.glibc for
  # the glibc heap walk's tests (tests/scan/test_glibc_versions.py).
  bash scripts/fetch-test-glibcs.sh
fi

PY=${PYTHON:-python3}
extra=""
if [ "${1:-}" = "--test" ]; then extra="[test,dev]"; fi
# Build isolation would fetch scikit-build-core again on every install; it is
# installed once here instead so editable rebuilds are fast and offline.
$PY -m pip install -q --upgrade "scikit-build-core>=0.10" "cmake>=3.20" ninja
$PY -m pip install -q --no-build-isolation -e ".${extra}"
# An editable install leaves the package as sources: with PYTHONDONTWRITEBYTECODE
# set (as some environments do), every CLI run would compile them all again, a
# tenth of a second of every scan. Python reads the .pyc written here whatever
# that variable says, and recompiles a module whose source is newer.
$PY -m compileall -q unreachable
echo "installed: $(command -v unreachable-cli)"
