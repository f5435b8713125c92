"""The kernel tests (marked `kernels`: those using the `kernel` fixture) once more, emulated under
AddressSanitizer and UBSan, with every launch also run in reverse block and thread order and required to
give bit-identical arrays (tests/cuda_emulator.py's SANITIZE and CHECK_ORDER). A pytest run of its own:
the ASan runtime has to be loaded before Python starts. Memory errors and order dependence fail CI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cuda_emulator

TESTS = Path(__file__).resolve().parent


@pytest.mark.skipif(
    not cuda_emulator.ASAN_RUNTIME or not Path(cuda_emulator.ASAN_RUNTIME).is_file(),
    reason="the compiler has no AddressSanitizer runtime",
)
def test_the_kernel_tests_pass_sanitized_and_in_reverse_order():
    env = {
        **os.environ,
        "LD_PRELOAD": cuda_emulator.ASAN_RUNTIME,
        "RASTERKIT_EMULATOR_SANITIZE": "1",
        "RASTERKIT_EMULATOR_CHECK_ORDER": "1",
        # Python and torch are not built with ASan: their leaks and mismatched allocators are not ours
        "ASAN_OPTIONS": "detect_leaks=0:alloc_dealloc_mismatch=0",
        "UBSAN_OPTIONS": "print_stacktrace=1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "kernels and not gpu", "-x", str(TESTS)],
        env=env,
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-6000:]
    assert " passed" in run.stdout, run.stdout[-2000:]
