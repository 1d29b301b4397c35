"""Why the kernel refused this process access to another (ptrace_may_access), in one clause.

The kernel lets a process read another's memory map or memory, or attach to
it, when (1) both run as the same user, or the caller has CAP_SYS_PTRACE;
(2) the target holds no capability the caller lacks, or the caller has
CAP_SYS_PTRACE; (3) the target is dumpable, or the caller has CAP_SYS_PTRACE;
and (4) no security module objects: Yama (kernel.yama.ptrace_scope), Landlock,
SELinux, AppArmor, BPF. The reason is read back from /proc, rule by rule, so
the message names the rule that applies, not a guess at a remedy.
"""

from __future__ import annotations

import os

CAP_SYS_PTRACE = 19
# Bit numbers of capabilities(7), for naming what a target holds that we lack.
CAPABILITY_NAMES = (
    "chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap "
    "linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner "
    "sys_module sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice "
    "sys_resource sys_time sys_tty_config mknod lease audit_write audit_control setfcap "
    "mac_override mac_admin syslog wake_alarm block_suspend audit_read perfmon bpf "
    "checkpoint_restore"
).split()
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def _status(pid: int | str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status", errors="surrogateescape") as f:
            return {k: v.strip() for k, _, v in (line.partition(":") for line in f)}
    except OSError:
        return {}


def _caps(status: dict[str, str], field: str) -> int:
    try:
        return int(status.get(field, ""), 16)
    except ValueError:
        return 0


def _uid(status: dict[str, str]) -> int | None:
    try:
        return int(status["Uid"].split()[1])  # the effective uid
    except (KeyError, IndexError, ValueError):
        return None


def _cap_names(mask: int) -> str:
    names = [
        "CAP_" + (CAPABILITY_NAMES[bit] if bit < len(CAPABILITY_NAMES) else str(bit)).upper()
        for bit in range(mask.bit_length())
        if mask >> bit & 1
    ]
    return ", ".join(names)


def _yama_scope() -> int | None:
    try:
        with open(YAMA_SCOPE) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _is_ancestor(pid: int) -> bool:
    current = os.getppid()
    for _ in range(4096):  # a cycle cannot happen; bound the walk anyway
        if current == pid:
            return True
        if current <= 1:
            return False
        ppid = _status(current).get("PPid", "0")
        current = int(ppid) if ppid.isdigit() else 0
    return False


def why_denied(pid: int) -> str:
    """The rule that keeps this process from pid, for `no permission to ... of pid N: <this>`."""
    me, target = _status("self"), _status(pid)
    my_uid, target_uid = os.geteuid(), _uid(target)
    has_ptrace = bool(_caps(me, "CapEff") >> CAP_SYS_PTRACE & 1)
    who = f"this process (uid {my_uid})" if my_uid else "this process (root)"
    yama = _yama_scope()
    if yama == 3:
        return "Yama forbids every ptrace attach on this machine (kernel.yama.ptrace_scope = 3)"
    if not has_ptrace:
        if my_uid == 0:
            who = "this process runs as root but without CAP_SYS_PTRACE (dropped from its "
            who += "capability bounding set, e.g. by a container runtime), and"
        else:
            who += " lacks CAP_SYS_PTRACE, and"
        if target_uid is not None and target_uid != my_uid:
            return f"{who} pid {pid} belongs to uid {target_uid} (run as its user or as root)"
        missing = _caps(target, "CapPrm") & ~_caps(me, "CapEff")
        if missing:
            return f"{who} pid {pid} holds capabilities it lacks ({_cap_names(missing)})"
        if yama == 2:
            return f"{who} Yama lets only CAP_SYS_PTRACE holders attach (ptrace_scope = 2)"
        if yama == 1 and not _is_ancestor(pid):
            return (
                f"{who} Yama lets it trace only its own descendants "
                f"(kernel.yama.ptrace_scope = 1; pid {pid} is not one)"
            )
        return (
            f"{who} pid {pid} is not dumpable (it changed its credentials, or set "
            "PR_SET_DUMPABLE to 0)"
        )
    who = "this process runs as root" if my_uid == 0 else f"this process runs as uid {my_uid}"
    yama_text = "Yama is not enabled" if yama is None else f"Yama allows it (scope {yama})"
    active = _active_security_modules()
    modules = f"active here: {active}" if active else "Landlock, SELinux, AppArmor, BPF"
    if pid == 1:
        return (
            f"the kernel refused although {who} with CAP_SYS_PTRACE and {yama_text}: pid 1, "
            f"the init of this pid namespace, is shielded by the kernel or a security module "
            f"({modules}), not by its owner or its capabilities"
        )
    return (
        f"the kernel refused although {who} with CAP_SYS_PTRACE and {yama_text}: "
        f"a security module ({modules}) or the kernel's own policy denies it"
    )


# LSM_ID_* of <linux/lsm.h>, as lsm_list_modules(2) reports the active ones.
LSM_NAMES = {
    100: "capability",
    101: "selinux",
    102: "smack",
    103: "tomoyo",
    104: "apparmor",
    105: "yama",
    106: "loadpin",
    107: "safesetid",
    108: "lockdown",
    109: "bpf",
    110: "landlock",
    111: "ima",
    112: "evm",
    113: "ipe",
}
SYS_LSM_LIST_MODULES = 461  # the same number on every architecture (Linux 6.8+)


def _active_security_modules() -> str:
    """The kernel's active security modules, or "" where it cannot say."""
    try:
        with open("/sys/kernel/security/lsm") as f:
            return f.read().strip().replace(",", ", ")
    except OSError:
        pass
    # Imported here: only a refused scan on a kernel without securityfs
    # gets this far, and ctypes was ~2 ms of every scan's imports.
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ids = (ctypes.c_uint64 * 64)()
        size = ctypes.c_uint32(ctypes.sizeof(ids))
        count = libc.syscall(SYS_LSM_LIST_MODULES, ids, ctypes.byref(size), 0)
    except (OSError, AttributeError):
        return ""
    if count <= 0:
        return ""
    return ", ".join(LSM_NAMES.get(i, f"lsm {i}") for i in ids[:count])
