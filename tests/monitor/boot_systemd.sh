#!/bin/sh
# PID 1 of a private namespace (tests/monitor/test_systemd.py): the real
# systemd, booted over an overlay of / whose upper layer is a tmpfs, so
# nothing it writes reaches the host's file systems.
#   boot_systemd.sh BASE STAGING
# BASE: an empty directory (a tmpfs is mounted on it in this namespace).
# STAGING: files to copy into the overlay's root (etc/..., usr/...).
# Exit 77: this machine cannot do it (the reason on stderr).
set -eu
B=$1
S=$2
mount --make-rprivate / || { echo "cannot make mounts private" >&2; exit 77; }
mount -t tmpfs -o mode=0755 tmpfs "$B" || { echo "cannot mount a tmpfs" >&2; exit 77; }
mkdir "$B/upper" "$B/work" "$B/root"
R=$B/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$B/upper,workdir=$B/work" "$R" ||
  { echo "cannot mount an overlay of /" >&2; exit 77; }
# Never go on without the overlay: systemd-tmpfiles on the real root empties /tmp.
grep -q " $R overlay " /proc/self/mounts || { echo "overlay missing" >&2; exit 77; }
mount -t proc proc "$R/proc"
mount --bind /sys "$R/sys"
# Fresh cgroup mounts: they show this cgroup namespace's root, which the
# test made a dedicated cgroup, so systemd's cgroups stay under it.
mount -t tmpfs -o mode=0755 cgroup "$R/sys/fs/cgroup"
mkdir "$R/sys/fs/cgroup/systemd" "$R/sys/fs/cgroup/unified"
mount -t cgroup -o none,name=systemd cgroup "$R/sys/fs/cgroup/systemd" ||
  { echo "cannot mount the name=systemd cgroup hierarchy" >&2; exit 77; }
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup/unified" ||
  { echo "cannot mount cgroup2" >&2; exit 77; }
mount --rbind /dev "$R/dev"
mount -t tmpfs tmpfs "$R/run"
mount -t tmpfs tmpfs "$R/tmp"
cp -a "$S/." "$R/"
if [ -f "$S/unreachable.sysusers" ]; then
  systemd-sysusers --root="$R" "$S/unreachable.sysusers" >/dev/null
fi
# Units that would touch the host's kernel settings or devices.
for u in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
  systemd-udev-trigger.service systemd-udev-settle.service systemd-sysctl.service \
  systemd-modules-load.service systemd-binfmt.service proc-sys-fs-binfmt_misc.automount \
  systemd-remount-fs.service systemd-random-seed.service systemd-hwdb-update.service \
  systemd-firstboot.service sys-kernel-debug.mount sys-kernel-tracing.mount \
  sys-kernel-config.mount sys-fs-fuse-connections.mount dev-hugepages.mount dev-mqueue.mount \
  systemd-pstore.service kmod-static-nodes.service systemd-tmpfiles-setup-dev.service \
  systemd-timesyncd.service systemd-logind.service getty.target; do
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done
# pivot_root, not chroot: the services' own mount namespaces (PrivateTmp=,
# ProtectSystem=, ...) must be built on this root, not on the host's.
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
umount -l /.oldroot
cd /
echo booting
exec /lib/systemd/systemd --system --unit=test.target
