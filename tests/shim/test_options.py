"""UNREACHABLE_MALLOC_OPTIONS: bionic's syntax, limits and error messages.

The parser itself runs under ASan/UBSan through options_cli; the same cases
then run through the real shim, which must print the message once with the
`unreachable: ` prefix and otherwise stay out of the way (inert, enabled=0).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.shim.support import program, run, run_ok, unit

ERRORS = [
    ("foo", "unknown option foo"),
    ("backtrace guard=1 nope=3", "unknown option nope"),
    ("backtrace 5", "unknown option 5"),
    ("backtrace=x", "bad value for option 'backtrace'"),
    ("bt=12x", "bad value for option 'bt', non space found after option: x"),
    ("bt=-1", "bad value for option 'bt', value cannot be negative: -1"),
    ("backtrace=0", "bad value for option 'backtrace', value must be >= 1: 0"),
    ("backtrace=257", "bad value for option 'backtrace', value must be <= 256: 257"),
    ("bt_en_on_sig=1000", "bad value for option 'bt_en_on_sig', value must be <= 256: 1000"),
    (
        "bt=99999999999999999999",
        "bad value for option 'bt': Numerical result out of range",
    ),
    ("verbose=1", "value set for option 'verbose' which does not take a value"),
    ("leak_track = yes", "value set for option 'leak_track' which does not take a value"),
    ("bt_full=1", "value set for option 'bt_full' which does not take a value"),
    # options that need a value fail like bionic's release build when given none
    ("backtrace_size", "bad value for option 'backtrace_size'"),
    ("bt_min_sz=", "bad value for option 'bt_min_sz'"),
    ("bt_max_sz=0", "bad value for option 'bt_max_sz', value must be >= 1: 0"),
    ("guard=16385", "bad value for option 'guard', value must be <= 16384: 16385"),
    ("front_guard=0", "bad value for option 'front_guard', value must be >= 1: 0"),
    ("expand_alloc=20000", "bad value for option 'expand_alloc', value must be <= 16384: 20000"),
    ("free_track=0", "bad value for option 'free_track', value must be >= 1: 0"),
    (
        "free_track_backtrace_num_frames=257",
        "bad value for option 'free_track_backtrace_num_frames', value must be <= 256: 257",
    ),
    (
        "record_allocs=50000001",
        "bad value for option 'record_allocs', value must be <= 50000000: 50000001",
    ),
    ("fill=abc", "bad value for option 'fill'"),
    ("fill_on_free=-5", "bad value for option 'fill_on_free', value cannot be negative: -5"),
]

ALL_OPTIONS = (
    "guard front_guard=16 rear_guard bt_dmp_on_ex bt_dmp_pre=/tmp/x bt_full fill=10 "
    "fill_on_alloc fill_on_free expand_alloc free_track=5 free_track_backtrace_num_frames=0 "
    "leak_track record_allocs record_allocs_file=/tmp/r record_allocs_on_exit verify_pointers "
    "abort_on_error check_unreachable_on_signal log_allocator_stats_on_signal "
    "log_allocator_stats_on_exit"
)
SIZE_MAX_STR = str(2**64 - 1)


def parse(options: str) -> subprocess.CompletedProcess[str]:
    return run(unit("options_cli.c", "options.c"), options, shim=None)


@pytest.mark.parametrize(("options", "message"), ERRORS)
def test_parser_errors(options: str, message: str) -> None:
    result = parse(options)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == f"error: prog: {message}\n"
    assert result.stderr == ""


def parsed(options: str) -> dict[str, str]:
    result = parse(options)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok ")
    return dict(kv.split("=", 1) for kv in result.stdout[3:].split())


SIZE_MAX = str(2**64 - 1)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("", {"backtrace": "0", "frames": "0", "min": "0", "max": SIZE_MAX, "verbose": "0"}),
        ("backtrace", {"backtrace": "1", "frames": "16"}),
        ("bt", {"backtrace": "1", "frames": "16"}),
        ("bt=", {"backtrace": "1", "frames": "16"}),  # empty value: the default
        ("  backtrace  =  7  ", {"backtrace": "1", "frames": "7"}),
        ("backtrace=256", {"frames": "256"}),
        ("bt=1\tverbose\n", {"frames": "1", "verbose": "1"}),
        ("backtrace_enable_on_signal", {"on_signal": "1", "backtrace": "0", "frames": "16"}),
        ("bt_en_on_sig=4 bt=9", {"on_signal": "1", "backtrace": "1", "frames": "9"}),
        ("backtrace_size=64", {"min": "64", "max": "64"}),
        ("bt_sz=64 bt_min_sz=10", {"min": "10", "max": "64"}),  # later options win
        ("bt_min_sz=10 bt_max_sz=20", {"min": "10", "max": "20"}),
        ("backtrace_min_size=010", {"min": "10"}),  # base 10, not octal
        ("bt_max_sz=" + str(2**63 - 1), {"max": str(2**63 - 1)}),
        ("free_track_backtrace_num_frames=0", {"ft_frames": "0", "free_track": "0"}),
        ("verbose", {"verbose": "1", "unimplemented": ""}),
        # guards: the front one padded to 16 so pointers stay aligned
        ("guard", {"front": "32", "rear": "32"}),
        ("guard guard=8 bt_full", {"front": "16", "rear": "8", "full": "1"}),
        ("front_guard=17", {"front": "32", "rear": "0"}),
        ("rear_guard=17", {"front": "0", "rear": "17"}),
        ("fill", {"fill_alloc": SIZE_MAX_STR, "fill_free": SIZE_MAX_STR}),
        ("fill_on_alloc=10", {"fill_alloc": "10", "fill_free": "0"}),
        ("fill_on_free", {"fill_alloc": "0", "fill_free": SIZE_MAX_STR}),
        ("expand_alloc", {"expand": "16"}),
        # free_track turns on fill_on_free (whole) and 16 free frames unless set before
        ("free_track", {"free_track": "100", "fill_free": SIZE_MAX_STR, "ft_frames": "16"}),
        ("fill_on_free=8 free_track=3", {"free_track": "3", "fill_free": "8"}),
        ("free_track free_track_backtrace_num_frames=0", {"ft_frames": "0"}),
        ("free_track_backtrace_num_frames=0 free_track", {"ft_frames": "16"}),
        ("record_allocs", {"record": "8000000", "record_file": "/tmp/record_allocs.txt"}),
        ("record_allocs=5 record_allocs_file=/x/y", {"record": "5", "record_file": "/x/y"}),
        ("bt bt_dmp_pre=/a/b bt_dmp_on_ex", {"prefix": "/a/b", "dump_on_exit": "1"}),
        ("bt_dmp_pre", {"prefix": "/tmp/backtrace_heap"}),
        # LeakSanitizer's exit-time check and its exit status (23 unless given)
        ("verbose", {"leak_check": "0", "leak_exitcode": "23"}),
        ("leak_check_at_exit", {"leak_check": "1", "leak_exitcode": "23"}),
        ("leak_check_at_exit leak_check_exitcode=0", {"leak_check": "1", "leak_exitcode": "0"}),
        (
            ALL_OPTIONS,
            {
                "unimplemented": "",
                "leak_track": "1",
                "verify": "1",
                "abort": "1",
                "unreachable": "1",
                "stats_signal": "1",
                "stats_exit": "1",
                "record_on_exit": "1",
                "front": "16",
                "rear": "32",
                "expand": "16",
                "ft_frames": "0",
                "free_track": "5",
                "prefix": "/tmp/x",
                "record_file": "/tmp/r",
            },
        ),  # fmt: skip
    ],
)
def test_parser_values(options: str, expected: dict[str, str]) -> None:
    got = parsed(options)
    for key, value in expected.items():
        assert got[key] == value, (key, got)


def descriptor_program() -> Path:
    return program("descriptor.c")


@pytest.mark.parametrize(("options", "message"), ERRORS)
def test_shim_reports_error_and_stays_inert(shim: Path, options: str, message: str) -> None:
    exe = descriptor_program()
    result = run(exe, options, "inert", shim=shim, options=options)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "OK inert\n"
    assert result.stderr == f"unreachable: {exe}: {message}\n"


@pytest.mark.parametrize("options", ["", "bt", "backtrace=4 bt_sz=12", "bt_en_on_sig"])
def test_valid_options_are_quiet(shim: Path, options: str) -> None:
    exe = descriptor_program()
    result = run(exe, options, shim=shim, options=options)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""


def test_every_option_is_implemented(shim: Path) -> None:
    exe = descriptor_program()
    opts = ALL_OPTIONS.replace("abort_on_error ", "")  # leak_track reports at exit
    result = run(exe, opts, shim=shim, options=opts)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "OK\n"
    assert "not implemented" not in result.stderr
    assert "malloc_debug: +++ " in result.stderr  # leak_track's list at exit


def test_verbose(shim: Path) -> None:
    exe = descriptor_program()
    result = run(exe, "verbose", shim=shim, options="verbose")
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"unreachable: {exe}: malloc debug enabled\n"


def test_verbose_names_the_signal(shim: Path) -> None:
    exe = descriptor_program()
    opts = "bt_en_on_sig verbose"
    proc = subprocess.Popen(
        [str(exe), opts],
        env={"LD_PRELOAD": str(shim), "UNREACHABLE_MALLOC_OPTIONS": opts},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    sig = int(signal.SIGRTMAX) - 19  # glibc's SIGRTMAX, as the shim computes it
    assert err.splitlines() == [
        f"unreachable: {exe}: malloc debug enabled",
        f"malloc_debug: {exe}: Run: 'kill -{sig} {proc.pid}' to enable backtracing.",
        f"malloc_debug: {exe}: Run: 'kill -{sig + 2} {proc.pid}' to dump the backtrace.",
    ]


def test_options_string_in_descriptor(shim: Path) -> None:
    opts = "  bt=3   verbose "
    run_ok(descriptor_program(), opts, shim=shim, options=opts)
