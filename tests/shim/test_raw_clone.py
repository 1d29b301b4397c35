"""Children made by a raw clone() without CLONE_VM (vsftpd's sessions:
syscall(SYS_clone, CLONE_NEWIPC | SIGCHLD)), past glibc's fork() and its
fork handlers, while the parent's threads allocate. The shim's syscall()
runs its fork handlers around the call (native/shim/raw_clone.c): the child
is a process of its own to the scanner, scanned exactly, with no helper
thread (glibc still lists the parent's threads there, so none is started:
its set*id() calls must not hang). Before, a child kept its parent's
descriptor and helper tid, and any of the shim's locks another thread held
at the clone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.shim.support import program, run_ok
from tests.support.raw_clone import (
    CHURN_SIZES,
    GRANDCHILD_LEAK,
    LEAK_SIZE,
    THREADS,
    raw_clone_family,
)
from tests.support.targets import wait_for_helper
from unreachable import _native
from unreachable.capture.target import open_target
from unreachable.daemon.targets import list_targets, target_info

CLI = [sys.executable, "-m", "unreachable.cli.main"]
NO_HELPER = "helper thread is not running (the process was made by a raw clone()"


def scan(pid: int, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "scan", str(pid), "--json", "--snapshot", mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


def leaks(res: subprocess.CompletedProcess[str]) -> set[tuple[int, int]]:
    assert res.returncode in (0, 1), res.stderr
    return {(leak["address"], leak["size"]) for leak in json.loads(res.stdout)["leaks"]}


@pytest.mark.parametrize("how", ["newipc", "newpid", "parent", "clone3"])
def test_each_child_is_a_process_of_its_own(shim, how):
    with raw_clone_family(shim, how, children=6) as family:
        assert len(family.children) == 6
        expected = 0 if os.geteuid() == 0 else 1  # EPERM
        assert all(c.setgroups == expected for c in family.children)
        listed = {t.pid for t in list_targets()}
        assert family.parent.pid in listed
        for child in family.children:
            assert child.pid in listed
            header = open_target(child.pid).header
            assert header.helper_tid == 0 and header.no_helper == _native.NO_HELPER_RAW_CLONE
            info = target_info(child.pid)
            assert info is not None and info.enabled
        quiet = family.quiet()
        assert leaks(scan(quiet.pid, "stopped")) == {(quiet.leak, LEAK_SIZE)}


def test_every_mode_on_a_child(shim):
    with raw_clone_family(shim, "newipc") as family:
        child = family.quiet()
        for mode in ("stopped", "auto"):
            res = scan(child.pid, mode)
            assert leaks(res) == {(child.leak, LEAK_SIZE)}, mode
            doc = json.loads(res.stdout)
            assert doc["snapshot"] == "stopped"
            if mode == "auto":
                assert NO_HELPER in doc["snapshot_note"]
        for mode in ("fork", "copy", "concurrent"):
            res = scan(child.pid, mode)
            assert res.returncode == 2, (mode, res.stdout)
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and NO_HELPER in lines[0], (mode, res.stderr)


def test_a_child_cloned_while_threads_allocate(shim):
    """The threads it lacks may have held a block in a register alone as it
    was cloned: that block is the child's leak too, as in a forked child."""
    with raw_clone_family(shim, "newipc") as family:
        child = family.busy()
        found = leaks(scan(child.pid, "stopped"))
        assert (child.leak, LEAK_SIZE) in found
        others = found - {(child.leak, LEAK_SIZE)}
        assert len(others) <= THREADS and all(size in CHURN_SIZES for _, size in others)


def test_the_parent_scans_as_before(shim):
    """The handlers gave every lock back in the parent: its helper forks."""
    with raw_clone_family(shim, "newipc") as family:
        assert open_target(family.parent.pid).header.no_helper == 0
        res = scan(family.parent.pid, "fork")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["snapshot"] == "fork"


def test_a_clone_sharing_descriptors_is_left_alone(shim):
    """CLONE_FILES: the child's set-up would close the parent's kept files;
    the call is the kernel's as before, and the children still run."""
    with raw_clone_family(shim, "files") as family:
        assert len(family.children) == 4
        assert scan(family.parent.pid, "fork").returncode == 0


def test_a_childs_own_fork_has_a_helper_again(shim):
    """glibc's fork() in the child forgets the threads it never had: the
    grandchild gets a helper, and a fork scan, exactly."""
    with raw_clone_family(shim, "newipc", children=4, grandchildren=True) as family:
        assert len(family.grandchildren) == 2  # one per quiet child
        for grandchild in family.grandchildren:
            assert wait_for_helper(grandchild.pid)
            assert open_target(grandchild.pid).header.no_helper == 0
        grandchild = family.grandchildren[0]
        res = scan(grandchild.pid, "fork")
        assert json.loads(res.stdout)["snapshot"] == "fork"
        # Its parent's leak is its own too: the same address in its copy.
        quiet = {(c.leak, LEAK_SIZE) for c in family.children if c.quiet}
        found = leaks(res)
        assert (grandchild.leak, GRANDCHILD_LEAK) in found and len(found) == 2
        assert found - {(grandchild.leak, GRANDCHILD_LEAK)} <= quiet


def test_clone3_with_an_unreadable_argument_fails_as_the_kernel_says(shim):
    """The shim reads clone3's argument to tell a fork from a thread: an
    address the kernel cannot read (1; a struct running onto a PROT_NONE
    page) crashed the program in the shim (SIGSEGV) instead of failing
    with EFAULT (programs/clone3_fault.c)."""
    exe = program("clone3_fault.c")
    assert run_ok(exe, shim=None) == "EFAULT EFAULT\n"  # the kernel's answer
    assert run_ok(exe, shim=shim) == "EFAULT EFAULT\n"
