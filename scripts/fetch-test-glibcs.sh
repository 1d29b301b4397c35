#!/usr/bin/env bash
# Other glibc releases for the tests of the glibc heap walk on processes that
# run without the shim (tests/scan/test_glibc_versions.py, docs/glibc-heap.md):
# libc6, libc6-dev, libc6-dbg and libgcc-s1 of Debian and Ubuntu releases,
# fetched with apt (its own state kept under tests/.glibc, the system's
# configuration and packages untouched) and unpacked, not installed, into
# tests/.glibc/SUITE/root.
#   bash scripts/fetch-test-glibcs.sh [SUITE ...]  # default: bullseye jammy noble trixie questing resolute
# Debian suites come from the Debian mirror this system's apt already uses.
# Ubuntu suites come from the mirror Debian's debootstrap names for them,
# checked with the keyring of Debian's ubuntu-keyring package (both taken from
# Debian's trixie, checked with Debian's keyring). apt checks every Release
# file's signature and every package's SHA-256 against it.
# An archive that cannot be reached leaves tests/.glibc/SUITE/unavailable with
# the reason, which the tests print when they skip; the exit status is 0 then.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$PWD/tests/.glibc
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
PACKAGES=(libc6 libc6-dev libc6-dbg libgcc-s1)
UBUNTU=" focal jammy noble plucky questing resolute "
suites=("$@")
if [ ${#suites[@]} = 0 ]; then suites=(bullseye jammy noble trixie questing resolute); fi

# The Debian mirror of this system's own release, as apt knows it.
. /etc/os-release
mirror=$(apt-cache policy 2>/dev/null |
  awk -v s=" ${VERSION_CODENAME:-}/main amd64 Packages" 'index($0, s) { print $2; exit }')

unavailable() { # SUITE REASON
  mkdir -p "$OUT/$1"
  echo "$2" >"$OUT/$1/unavailable"
  echo "fetch-test-glibcs: $1: $2" >&2
}

# fetch DIR SOURCE-LINE PACKAGE...: the packages' .debs into DIR/debs, with
# apt state of its own under DIR/apt. On failure, prints why and returns 1.
fetch() {
  local dir=$1 source=$2
  shift 2
  local apt_dir=$dir/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dir/debs"
  echo "$source" >"$apt_dir/sources.list"
  local opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o Dir::State::status=/dev/null -o APT::Architectures=amd64
    -o APT::Sandbox::User=root)
  # An unreachable archive, or a Release file whose signature does not
  # check, is only a warning to apt-get update.
  local failed='^(E:|W: Failed to fetch|W: Some index files|W: GPG error|W: The repository)'
  local log
  if ! log=$(apt-get "${opts[@]}" update 2>&1) || grep -Eq "$failed" <<<"$log"; then
    echo "the archive could not be reached or checked: $(grep -Em1 "$failed" <<<"$log" || tail -n1 <<<"$log")"
    return 1
  fi
  if ! log=$(cd "$dir/debs" && apt-get "${opts[@]}" download "$@" 2>&1); then
    echo "downloading $* failed: $(tail -n1 <<<"$log")"
    return 1
  fi
  rm -rf "$apt_dir"
}

# ubuntu_source SUITE: the apt source line for an Ubuntu suite (the mirror
# and keyring fetched once under tests/.glibc/.ubuntu), or why there is none.
ubuntu_source() {
  local tools=$OUT/.ubuntu
  if [ ! -f "$tools/mirror" ]; then
    rm -rf "$tools"
    local why
    if ! why=$(fetch "$tools" "deb [signed-by=$KEYRING] $mirror trixie main" ubuntu-keyring debootstrap); then
      echo "Debian's ubuntu-keyring and debootstrap (for Ubuntu's mirror and keys): $why"
      return 1
    fi
    for deb in "$tools"/debs/*.deb; do dpkg-deb -x "$deb" "$tools/root"; done
    # debootstrap's script for Ubuntu releases names the mirror of amd64's.
    awk '/amd64\|i386\)/ { f = 1 } f && $1 == "default_mirror" { print $2; exit }' \
      "$tools/root/usr/share/debootstrap/scripts/gutsy" >"$tools/mirror.new"
    if [ ! -s "$tools/mirror.new" ]; then
      echo "debootstrap's Ubuntu script names no mirror for amd64"
      return 1
    fi
    mv "$tools/mirror.new" "$tools/mirror"
  fi
  echo "deb [signed-by=$tools/root/usr/share/keyrings/ubuntu-archive-keyring.gpg] $(cat "$tools/mirror") $1 main"
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
  if [[ $UBUNTU == *" $suite "* ]]; then
    if ! source=$(ubuntu_source "$suite"); then
      unavailable "$suite" "$source"
      continue
    fi
  else
    source="deb [signed-by=$KEYRING] $mirror $suite main"
  fi
  if ! why=$(fetch "$dir" "$source" "${PACKAGES[@]}"); then
    unavailable "$suite" "$suite: $why"
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
  rm -rf "$dir/debs"
  echo "fetch-test-glibcs: $suite: glibc $(cat "$dir/version") in $root"
done
exit 0
