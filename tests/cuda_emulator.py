"""Runs the CUDA kernels of the engines (utils/cuda.py's plumbing) on the CPU, so that CI (no GPU) tests their logic.

The kernel source is compiled by the system C++ compiler with a small shim for the CUDA built-ins
(blockIdx, threadIdx, atomicMin, ...), and a generated launcher runs every block and thread in
sequence. The kernels use no shared memory, barriers or warp functions, so a sequential run is a
faithful schedule; rounding follows IEEE like NVRTC with --fmad=false. Test aid only: users never
need a compiler.
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
struct Dim { unsigned x, y, z; };
static Dim blockIdx, threadIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
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
        launcher = f"""
extern "C" void launch(long long emulated_grid, long long emulated_block, {match.group(1)}) {{
    blockDim.x = (unsigned)emulated_block;
    for (long long b = 0; b < emulated_grid; ++b)
        for (long long t = 0; t < emulated_block; ++t) {{
            blockIdx.x = (unsigned)b;
            threadIdx.x = (unsigned)t;
            {name}({", ".join(names)});
        }}
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
        self.launch(grid[0], block[0], *values)


def install(monkeypatch) -> None:
    """Route the engines (utils/cuda.py's plumbing) to the emulator on CPU tensors, and let the callers take the
    kernel path on the CPU (unless RASTERKIT_DISABLE_CUPY is set, as on the real device)."""
    import os

    from rasterkit.utils import cuda, gpu_rendering, mesh_rasterizer

    def usable(device):
        return not os.environ.get("RASTERKIT_DISABLE_CUPY")

    monkeypatch.setattr(cuda, "kernel", functools.cache(EmulatedKernel))
    monkeypatch.setattr(cuda, "stream", contextlib.nullcontext)
    # .numpy() shares memory with a contiguous CPU tensor, so in-place writes land in the tensor
    monkeypatch.setattr(cuda, "arrays", lambda *tensors: [t.contiguous().numpy() for t in tensors])
    monkeypatch.setattr(gpu_rendering, "cupy_usable", usable)
    monkeypatch.setattr(mesh_rasterizer, "cupy_usable", usable)
