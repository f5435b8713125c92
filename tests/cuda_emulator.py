"""Runs the CUDA kernels of the engines (utils/cuda.py's plumbing) on the CPU, so that CI (no GPU) tests their logic.

The kernel source is compiled by the system C++ compiler with a small shim for the CUDA built-ins
(blockIdx, threadIdx, atomicMin, ...), and a generated launcher runs the blocks one after another.
Rounding follows IEEE like NVRTC with --fmad=false. Test aid only: users never need a compiler.

Within a block, threads run one after another where the source has no barrier. Where it has
(`__syncthreads()`), they are cooperative threads (POSIX ucontext, one OS thread): each runs until
its next barrier, in thread order, and when every thread of the block waits there all go on; so the
schedule is deterministic and a barrier means what it means on the GPU. `__shared__` variables are
the kernel's static locals, which is a block's shared memory since one block runs at a time. A
barrier that some threads of a block pass while others have returned is a CUDA error: the launch
raises. Warp functions are not emulated.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

COMPILER = shutil.which("g++") or shutil.which("clang++")

_SHIM = r"""
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
struct Dim { unsigned x, y, z; };
static Dim blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
static float __int_as_float(int bits) { float f; std::memcpy(&f, &bits, 4); return f; }
static int __float_as_int(float f) { int bits; std::memcpy(&bits, &f, 4); return bits; }

/* cooperative threads of one block: each a context with its own stack */
enum { EMULATED_READY, EMULATED_WAITING, EMULATED_DONE };
static ucontext_t emulated_scheduler;
static ucontext_t* emulated_context;
static int* emulated_state;
static long long emulated_thread;
static std::function<void()> emulated_body;

static void __syncthreads() {
    if (!emulated_context) return;  /* a sequential run: no other thread to wait for */
    emulated_state[emulated_thread] = EMULATED_WAITING;
    swapcontext(&emulated_context[emulated_thread], &emulated_scheduler);
}

static void emulated_start() {
    emulated_body();
    emulated_state[emulated_thread] = EMULATED_DONE;
}

/* Runs one block of `threads` cooperative threads; returns 0, or 1 when a barrier was not reached by all. */
static int emulated_run_block(long long threads, size_t stack_bytes, char* stacks) {
    for (long long t = 0; t < threads; ++t) {
        getcontext(&emulated_context[t]);
        emulated_context[t].uc_stack.ss_sp = stacks + t * stack_bytes;
        emulated_context[t].uc_stack.ss_size = stack_bytes;
        emulated_context[t].uc_link = &emulated_scheduler;
        makecontext(&emulated_context[t], emulated_start, 0);
        emulated_state[t] = EMULATED_READY;
    }
    for (;;) {
        for (long long t = 0; t < threads; ++t) {
            if (emulated_state[t] != EMULATED_READY) continue;
            emulated_thread = t;
            threadIdx.x = (unsigned)t;
            swapcontext(&emulated_scheduler, &emulated_context[t]);
        }
        long long waiting = 0, done = 0;
        for (long long t = 0; t < threads; ++t) {
            waiting += emulated_state[t] == EMULATED_WAITING;
            done += emulated_state[t] == EMULATED_DONE;
        }
        if (done == threads) return 0;
        if (done > 0) return 1;
        for (long long t = 0; t < threads; ++t) emulated_state[t] = EMULATED_READY;
    }
}
using std::max;
using std::min;
static long long atomicMin(long long* address, long long value) {
    long long old = *address;
    if (value < old) *address = value;
    return old;
}
"""

_POINTER_TYPES = {"float": np.float32, "long long": np.int64, "int": np.int32}


class EmulatedKernel:
    """Callable like cupy.RawKernel: kernel(grid, block, args) with numpy arrays for pointers."""

    def __init__(self, source: str, name: str):
        match = re.search(r"void\s+" + name + r"\s*\((.*?)\)\s*\{", source, re.S)
        self.parameters = [p.strip() for p in match.group(1).split(",")]
        names = [re.findall(r"\w+", p)[-1] for p in self.parameters]
        self.cooperative = "__syncthreads" in source
        call = f"{name}({', '.join(names)});"
        if self.cooperative:
            body = f"""
    const size_t stack_bytes = 1 << 17;
    char* stacks = (char*)std::malloc(stack_bytes * emulated_block);
    emulated_context = new ucontext_t[emulated_block];
    emulated_state = new int[emulated_block];
    emulated_body = [&]() {{ {call} }};
    int failed = 0;
    for (long long b = 0; b < emulated_grid && !failed; ++b) {{
        blockIdx.x = (unsigned)b;
        failed = emulated_run_block(emulated_block, stack_bytes, stacks);
    }}
    delete[] emulated_context;
    delete[] emulated_state;
    emulated_context = 0;
    std::free(stacks);
    return failed;"""
        else:
            body = f"""
    for (long long b = 0; b < emulated_grid; ++b)
        for (long long t = 0; t < emulated_block; ++t) {{
            blockIdx.x = (unsigned)b;
            threadIdx.x = (unsigned)t;
            {call}
        }}
    return 0;"""
        launcher = f"""
extern "C" int launch(long long emulated_grid, long long emulated_block, {match.group(1)}) {{
    blockDim.x = (unsigned)emulated_block;
    gridDim.x = (unsigned)emulated_grid;{body}
}}
"""
        code = _SHIM + source + launcher
        directory = Path(tempfile.gettempdir()) / "rasterkit-cuda-emulator"
        directory.mkdir(exist_ok=True)
        library = directory / f"{name}-{hashlib.sha1(code.encode()).hexdigest()[:12]}.so"
        if not library.exists():
            cpp = library.with_suffix(".cpp")
            cpp.write_text(code)
            subprocess.run([COMPILER, "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(library), str(cpp)],
                           check=True)
        self.launch = ctypes.CDLL(str(library)).launch
        self.launch.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + [self._ctype(p) for p in self.parameters]
        self.launch.restype = ctypes.c_int
        self.name = name

    @staticmethod
    def _pointee(parameter: str) -> str:
        return parameter.replace("const ", "").split("*")[0].strip()

    def _ctype(self, parameter: str):
        if "*" in parameter:
            return ctypes.c_void_p
        return ctypes.c_int if parameter.split()[0] == "int" else ctypes.c_longlong

    def __call__(self, grid, block, args):
        assert len(args) == len(self.parameters), (len(args), self.parameters)
        values = []
        for parameter, value in zip(self.parameters, args):
            if "*" in parameter:  # the dtype the kernel reads must be the array's
                assert value.dtype == _POINTER_TYPES[self._pointee(parameter)], (parameter, value.dtype)
                assert value.flags.c_contiguous, parameter
                values.append(value.ctypes.data)
            else:
                expected = np.int32 if self._ctype(parameter) is ctypes.c_int else np.int64
                assert type(value) is expected, (parameter, type(value))
                values.append(int(value))
        if self.launch(grid[0], block[0], *values):
            raise RuntimeError(f"emulated kernel {self.name}: a __syncthreads() was not reached by every thread of "
                               "a block (some had returned)")


def install(monkeypatch) -> None:
    """Route the engines (utils/cuda.py's plumbing) to the emulator on CPU tensors, and let the callers take the
    kernel path on the CPU (unless RASTERKIT_DISABLE_CUPY is set, as on the real device): every engine module
    that asks `cupy_usable` is answered yes."""
    import importlib
    import os
    import pkgutil
    import sys

    from rasterkit import utils
    from rasterkit.utils import cuda

    def usable(device):
        return not os.environ.get("RASTERKIT_DISABLE_CUPY")

    for module in pkgutil.walk_packages(utils.__path__, "rasterkit.utils."):
        importlib.import_module(module.name)
    monkeypatch.setattr(cuda, "kernel", functools.cache(EmulatedKernel))
    monkeypatch.setattr(cuda, "stream", contextlib.nullcontext)
    # .numpy() shares memory with a contiguous CPU tensor, so in-place writes land in the tensor
    monkeypatch.setattr(cuda, "arrays", lambda *tensors: [t.contiguous().numpy() for t in tensors])
    for name, module in list(sys.modules.items()):
        if name.startswith("rasterkit.utils") and hasattr(module, "cupy_usable") and name != "rasterkit.utils.device":
            monkeypatch.setattr(module, "cupy_usable", usable)
