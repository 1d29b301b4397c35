#!/usr/bin/env bash
# Other glibc releases for the tests of the glibc heap walk on processes that
# run without the shim (tests/scan/test_glibc_versions.py, docs/glibc-heap.md):
# libc6, libc6-dev, libc6-dbg and libgcc-s1 of Debian releases, fetched with apt from the
# mirror this system's apt already uses (its own state kept under tests/.glibc,
# the system's configuration and packages untouched) and unpacked, not
# installed, into tests/.glibc/SUITE/root.
#   bash scripts/fetch-test-glibcs.sh [SUITE ...]    # default: bullseye trixie
# An archive that cannot be reached leaves tests/.glibc/SUITE/unavailable with
# the reason, which the tests print when they skip; the exit status is 0 then.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$PWD/tests/.glibc
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
PACKAGES=(libc6 libc6-dev libc6-dbg libgcc-s1)
suites=("$@")
if [ ${#suites[@]} = 0 ]; then suites=(bullseye trixie); fi

# The Debian mirror of this system's own release, as apt knows it.
. /etc/os-release
mirror=$(apt-cache policy 2>/dev/null |
  awk -v s=" ${VERSION_CODENAME:-}/main amd64 Packages" 'index($0, s) { print $2; exit }')

unavailable() { # SUITE REASON
  mkdir -p "$OUT/$1"
  echo "$2" >"$OUT/$1/unavailable"
  echo "fetch-test-glibcs: $1: $2" >&2
}

for suite in "${suites[@]}"; do
  dir=$OUT/$suite
  if [ -f "$dir/version" ] && [ -d "$dir/root" ]; then continue; fi
  rm -rf "$dir"
  if [ -z "$mirror" ]; then
    unavailable "$suite" "this system's apt has no Debian mirror for ${VERSION_CODENAME:-its release} to take $suite from"
    continue
  fi
  if [ ! -r "$KEYRING" ]; then
    unavailable "$suite" "no Debian archive keyring ($KEYRING) to check $suite's packages with"
    continue
  fi
  apt_dir=$dir/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dir/debs"
  echo "deb [signed-by=$KEYRING] $mirror $suite main" >"$apt_dir/sources.list"
  opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o Dir::State::status=/dev/null -o APT::Architectures=amd64
    -o APT::Sandbox::User=root)
  # An unreachable archive is only a warning to apt-get update.
  failed='^(E:|W: Failed to fetch|W: Some index files)'
  if ! log=$(apt-get "${opts[@]}" update 2>&1) || grep -Eq "$failed" <<<"$log"; then
    unavailable "$suite" "Debian's archive could not be reached for $suite: $(grep -Em1 "$failed" <<<"$log" || tail -n1 <<<"$log")"
    continue
  fi
  if ! log=$(cd "$dir/debs" && apt-get "${opts[@]}" download "${PACKAGES[@]}" 2>&1); then
    unavailable "$suite" "downloading ${PACKAGES[*]} of $suite failed: $(tail -n1 <<<"$log")"
    continue
  fi
  root=$dir/root
  mkdir -p "$root"
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
  # Packages of a merged-/usr release ship /usr/lib only; the linker scripts
  # and the loader's own links still name /lib and /lib64.
  [ -e "$root/lib" ] || ln -s usr/lib "$root/lib"
  [ -e "$root/lib64" ] || ln -s usr/lib64 "$root/lib64"
  # Absolute links (/lib64/ld-linux-x86-64.so.2 -> /lib/...) point into root.
  find "$root" -type l -lname '/*' | while read -r link; do
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$root$(readlink "$link")")" "$link"
  done
  rm -rf "$root/usr/share" # documentation and gdb scripts: nothing the tests use
  dpkg-deb -f "$dir"/debs/libc6_*.deb Version >"$dir/version"
  rm -rf "$apt_dir" "$dir/debs"
  echo "fetch-test-glibcs: $suite: glibc $(cat "$dir/version") in $root"
done
exit 0
