"""What the shim exports: the malloc family (with jemalloc's extensions and C++
operator new and delete), the malloc_debug interface and the descriptor,
what guards the unwinder's descriptors and signal mask, sigaltstack, unshare and setns, nothing
else."""

from __future__ import annotations

from pathlib import Path

from elftools.elf.elffile import ELFFile

from tests.shim.support import program, run_ok

EXPECTED_FUNCS = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "memalign",
    "aligned_alloc", "valloc", "pvalloc", "malloc_usable_size",
    "malloc_iterate", "malloc_disable", "malloc_enable", "malloc_backtrace",
    "get_malloc_leak_info", "free_malloc_leak_info",
    # libmemunreachable's C interface (memunreachable.h) and its C++ header's entry point
    "LogUnreachableMemory", "NoLeaks", "unreachable_lmu_scan", "unreachable_lmu_release",
    # jemalloc's non-standard API, for programs linked with jemalloc (jemalloc_api.c)
    "mallocx", "rallocx", "xallocx", "sallocx", "dallocx", "sdallocx", "nallocx",
    # C++ operator new and delete, every form (cxx_new.c)
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
    "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    # counts the calls in progress, so a thread attached inside one waits not on itself
    "pthread_getattr_np",
    # keep libunwind's pipe out of the program's way (unwinder_fds.c)
    "pipe2", "close", "close_range", "closefrom",
    # libunwind's address check is not made under the program's seccomp filter (sandbox.c)
    "prctl", "syscall", "mincore", "msync",
    # libunwind's signal mask around its table lookup, answered without the call there
    # under the program's own seccomp filter (sandbox.c)
    "sigprocmask",
    # records each thread's alternate signal stack for the scanner (altstack.c)
    "sigaltstack",
    # the helper thread steps aside for calls that need a single thread (namespaces.c)
    "unshare", "setns",
    # set*id reach the helper too while glibc is kept single-threaded (single_thread.c)
    "setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid",
    "setresgid", "setgroups",
}  # fmt: skip


def defined_dynamic_symbols(path: Path) -> dict[str, tuple[str, int]]:
    with path.open("rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        return {
            sym.name: (sym["st_info"]["type"], sym["st_size"])
            for sym in dynsym.iter_symbols()
            if sym.name and sym["st_shndx"] != "SHN_UNDEF"
        }


def test_exports(shim: Path) -> None:
    syms = defined_dynamic_symbols(shim)
    assert syms["unreachable_descriptor"] == ("STT_OBJECT", 200)
    funcs = {name for name, (kind, _) in syms.items() if kind == "STT_FUNC"}
    assert funcs == EXPECTED_FUNCS
    assert set(syms) == EXPECTED_FUNCS | {"unreachable_descriptor"}


def test_descriptor_fields_and_helper(shim: Path) -> None:
    assert run_ok(program("descriptor.c"), "", shim=shim, options="") == "OK\n"


def test_headers_installed(shim: Path) -> None:
    from unreachable._paths import include_dir

    assert (include_dir() / "unreachable" / "malloc_debug.h").is_file()
