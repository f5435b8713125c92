"""Runs the CUDA kernels of the engines (utils/cuda.py's plumbing) on the CPU, so that CI (no GPU) tests their logic.

The kernel source is compiled by the system C++ compiler with a small shim for the CUDA built-ins
(blockIdx, threadIdx, the atomics and intrinsics the kernels use: add others as kernels need them), and
a generated launcher runs the blocks one after another. Rounding follows IEEE like NVRTC with
--fmad=false, and float denormals are flushed to zero as CuPy's -ftz=true does (x86-64 and arm64; the
caller's floating-point mode is restored after each launch). Test aid only: users never need a compiler.

Two checks for CI (tests/test_kernels_sanitized.py turns them on in a pytest run of its own):
SANITIZE (RASTERKIT_EMULATOR_SANITIZE=1) builds the kernels with AddressSanitizer and UBSan, which stop the
process at the first out-of-bounds access or undefined behaviour; the process must have the ASan runtime
loaded first (LD_PRELOAD=ASAN_RUNTIME). CHECK_ORDER (RASTERKIT_EMULATOR_CHECK_ORDER=1) runs every launch
twice, blocks and threads in order and then in reverse order from the same inputs, and raises
RuntimeError unless every array comes out bit-identical: a kernel whose result depends on the order its
threads run in would differ from run to run on a GPU.

Grids and blocks are 1-D (blockDim.x up to 1024, CUDA's limit). Kernel parameters: pointers to float,
int, unsigned int, long long, unsigned long long and unsigned char (numpy arrays of that dtype) and scalars
of int, unsigned int, long long, unsigned long long and float (numpy scalars of that type); typedefs of
these in the source are understood.

Within a block, threads run one after another where the kernel cannot reach a barrier. Where it can
(`__syncthreads()` in its body or in a function or macro it uses), they are cooperative threads (POSIX
ucontext, one OS thread, a stack of STACK_BYTES each): each runs until its next barrier, in thread
order, and when every thread of the block waits there all go on; so the schedule is deterministic and
a barrier means what it means on the GPU. `__shared__` variables are the kernel's static locals, which
is a block's shared memory since one block runs at a time (a block must write them before it reads
them, as on the GPU: they keep the last block's values). The rule for barriers is CUDA's: every thread
of a block reaches each one; a barrier that some threads wait at while others have returned raises
RuntimeError. Not emulated: dynamic (`extern __shared__`) shared memory, warp functions (shuffles,
votes, __syncwarp), 2-D and 3-D launches; a kernel that uses them does not compile or is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

COMPILER = shutil.which("g++") or shutil.which("clang++")
STACK_BYTES = 1 << 18  # per cooperative thread; untouched pages cost nothing
MAX_BLOCK = 1024  # threads per block, CUDA's limit
SANITIZE = os.environ.get("RASTERKIT_EMULATOR_SANITIZE") == "1"
CHECK_ORDER = os.environ.get("RASTERKIT_EMULATOR_CHECK_ORDER") == "1"
_SANITIZER_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
ASAN_RUNTIME = (
    COMPILER
    and subprocess.run([COMPILER, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
)

_SHIM = r"""
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
/* tell ASan which stack runs, or it takes a cooperative thread's frames for overflows */
#define FIBER_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define FIBER_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define FIBER_START(save, bottom, size)
#define FIBER_FINISH(save, bottom, size)
#endif
struct Dim { unsigned x, y, z; };
static Dim blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
/* one block runs at a time, so a block's shared memory can be the kernel's static locals */
#define __shared__ static
using std::max;
using std::min;

/* libdevice's sincospif and cospif: the product by pi in double, then rounded, is within their 1 ulp */
static void sincospif(float x, float* s, float* c) {
    *s = (float)std::sin(M_PI * x);
    *c = (float)std::cos(M_PI * x);
}
static float cospif(float x) { return (float)std::cos(M_PI * x); }
static float __int_as_float(int bits) { float f; std::memcpy(&f, &bits, 4); return f; }
static int __float_as_int(float f) { int bits; std::memcpy(&bits, &f, 4); return bits; }
/* CUDA's atomics that the kernels use; threads never interleave inside one, so a plain update is atomic */
static long long atomicMin(long long* address, long long value) {
    long long old = *address;
    if (value < old) *address = value;
    return old;
}

/* cooperative threads of one block: each a context with its own stack */
enum { EMULATED_READY, EMULATED_WAITING, EMULATED_DONE };
static ucontext_t emulated_scheduler;
static ucontext_t* emulated_context;
static int* emulated_state;
static long long emulated_thread;
static std::function<void()> emulated_body;
static int emulated_unexpected_barrier;  /* a kernel run sequentially met a barrier: the emulator misjudged it */
static const void* emulated_scheduler_bottom;
static size_t emulated_scheduler_size;

/* CuPy compiles with -ftz=true: float denormals in and out are zero (FTZ and DAZ); returns the mode to restore */
static unsigned long long emulated_flush_denormals() {
#if defined(__x86_64__)
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040);
    return saved;
#elif defined(__aarch64__)
    unsigned long long saved;
    __asm__ volatile("mrs %0, fpcr" : "=r"(saved));
    __asm__ volatile("msr fpcr, %0" : : "r"(saved | (1ull << 24)));
    return saved;
#else
#error "the emulator flushes denormals on x86-64 and arm64 only"
#endif
}

static void emulated_restore_denormals(unsigned long long saved) {
#if defined(__x86_64__)
    _mm_setcsr((unsigned)saved);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(saved));
#endif
}

static void __syncthreads() {
    if (!emulated_context) {
        emulated_unexpected_barrier = 1;
        return;
    }
    emulated_state[emulated_thread] = EMULATED_WAITING;
    void* fake_stack;
    FIBER_START(&fake_stack, emulated_scheduler_bottom, emulated_scheduler_size);
    swapcontext(&emulated_context[emulated_thread], &emulated_scheduler);
    FIBER_FINISH(fake_stack, &emulated_scheduler_bottom, &emulated_scheduler_size);
}

static void emulated_start() {
    FIBER_FINISH(0, &emulated_scheduler_bottom, &emulated_scheduler_size);
    emulated_body();
    emulated_state[emulated_thread] = EMULATED_DONE;
    FIBER_START(0, emulated_scheduler_bottom, emulated_scheduler_size);
}

/* Runs one block of `threads` cooperative threads, in reverse order where `reversed`; returns 0, or 1 when a
   barrier was not reached by all. */
static int emulated_run_block(long long threads, size_t stack_bytes, char* stacks, int reversed) {
    for (long long t = 0; t < threads; ++t) {
        getcontext(&emulated_context[t]);
        emulated_context[t].uc_stack.ss_sp = stacks + t * stack_bytes;
        emulated_context[t].uc_stack.ss_size = stack_bytes;
        emulated_context[t].uc_link = &emulated_scheduler;
        makecontext(&emulated_context[t], emulated_start, 0);
        emulated_state[t] = EMULATED_READY;
    }
    for (;;) {
        for (long long i = 0; i < threads; ++i) {
            long long t = reversed ? threads - 1 - i : i;
            if (emulated_state[t] != EMULATED_READY) continue;
            emulated_thread = t;
            threadIdx.x = (unsigned)t;
            void* fake_stack;
            FIBER_START(&fake_stack, stacks + t * stack_bytes, stack_bytes);
            swapcontext(&emulated_scheduler, &emulated_context[t]);
            FIBER_FINISH(fake_stack, 0, 0);
        }
        long long done = 0;
        for (long long t = 0; t < threads; ++t) done += emulated_state[t] == EMULATED_DONE;
        if (done == threads) return 0;
        if (done > 0) return 1;
        for (long long t = 0; t < threads; ++t) emulated_state[t] = EMULATED_READY;
    }
}
"""

_TYPES = {
    "float": np.float32,
    "int": np.int32,
    "unsigned": np.uint32,
    "unsigned int": np.uint32,
    "long long": np.int64,
    "long long int": np.int64,
    "unsigned long long": np.uint64,
    "unsigned long long int": np.uint64,
    "unsigned char": np.uint8,
}
_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof"}


def _without_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)


def _reaches_barrier(source: str, name: str) -> bool:
    """Whether kernel `name` can reach __syncthreads(): in its body, or in a function or macro whose name
    it uses, and so on. Errs towards yes (every such name counts as a call); the launcher of a kernel judged
    barrier-free checks at run time that it meets none."""
    code = _without_comments(source)
    uses: dict[str, set[str]] = {}  # function or macro -> the names in its body
    for match in re.finditer(r"#\s*define\s+(\w+)((?:[^\n]*\\\n)*[^\n]*)", code):
        uses.setdefault(match.group(1), set()).update(re.findall(r"\w+", match.group(2)))
    for match in re.finditer(r"(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?\{", code):
        if match.group(1) in _KEYWORDS:
            continue
        end, depth = match.end(), 1
        while depth and end < len(code):
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            end += 1
        uses.setdefault(match.group(1), set()).update(re.findall(r"\w+", code[match.end() : end]))
    if name not in uses:
        return "__syncthreads" in code
    seen, pending = set(), [name]
    while pending:
        current = pending.pop()
        if current == "__syncthreads":
            return True
        if current not in seen and current in uses:
            seen.add(current)
            pending.extend(uses[current])
    return False


class EmulatedKernel:
    """Callable like cupy.RawKernel: kernel(grid, block, args) with numpy arrays for pointers and numpy
    scalars of the parameters' types."""

    def __init__(self, source: str, name: str):
        match = re.search(r"void\s+" + name + r"\s*\((.*?)\)\s*\{", source, re.S)
        self.parameters = [p.strip() for p in match.group(1).split(",")]
        names = [re.findall(r"\w+", p)[-1] for p in self.parameters]
        typedefs = dict(
            (alias, " ".join(kind.split()))
            for kind, alias in re.findall(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", _without_comments(source))
        )
        self.types = [self._type(p, typedefs) for p in self.parameters]
        self.cooperative = _reaches_barrier(source, name)
        call = f"{name}({', '.join(names)});"
        if self.cooperative:
            body = f"""
    char* stacks = (char*)std::malloc((size_t){STACK_BYTES} * emulated_block);
    emulated_context = new ucontext_t[emulated_block];
    emulated_state = new int[emulated_block];
    emulated_body = [&]() {{ {call} }};
    int failed = 0;
    for (long long i = 0; i < emulated_grid && !failed; ++i) {{
        blockIdx.x = (unsigned)(emulated_reversed ? emulated_grid - 1 - i : i);
        failed = emulated_run_block(emulated_block, {STACK_BYTES}, stacks, emulated_reversed);
    }}
    delete[] emulated_context;
    delete[] emulated_state;
    emulated_context = 0;
    std::free(stacks);
    emulated_restore_denormals(saved_mode);
    return failed;"""
        else:
            body = f"""
    emulated_unexpected_barrier = 0;
    for (long long b = 0; b < emulated_grid; ++b)
        for (long long t = 0; t < emulated_block; ++t) {{
            blockIdx.x = (unsigned)(emulated_reversed ? emulated_grid - 1 - b : b);
            threadIdx.x = (unsigned)(emulated_reversed ? emulated_block - 1 - t : t);
            {call}
        }}
    emulated_restore_denormals(saved_mode);
    return emulated_unexpected_barrier ? 2 : 0;"""
        launcher = f"""
extern "C" int launch(long long emulated_grid, long long emulated_block, int emulated_reversed, {match.group(1)}) {{
    blockDim.x = (unsigned)emulated_block;
    gridDim.x = (unsigned)emulated_grid;
    unsigned long long saved_mode = emulated_flush_denormals();{body}
}}
"""
        code = _SHIM + source + launcher
        flags = ["-O2", "-ffp-contract=off", "-shared", "-fPIC"]
        if SANITIZE:
            assert _asan_loaded(), f"RASTERKIT_EMULATOR_SANITIZE=1 needs LD_PRELOAD={ASAN_RUNTIME}"
            flags += _SANITIZER_FLAGS
        directory = Path(tempfile.gettempdir()) / "rasterkit-cuda-emulator"
        directory.mkdir(exist_ok=True)
        # one library per source and flags, kept between runs: a sanitized build takes seconds
        library = directory / f"{name}-{hashlib.sha1((code + str(flags)).encode()).hexdigest()[:12]}.so"
        if not library.exists():
            cpp = library.with_name(f"{library.stem}-{os.getpid()}.cpp")
            cpp.write_text(code)
            built = library.with_name(f"{library.stem}-{os.getpid()}.so")
            subprocess.run([COMPILER, *flags, "-o", str(built), str(cpp)], check=True)
            os.replace(built, library)  # whole, even with another process building the same one
            cpp.unlink()
        self.launch = ctypes.CDLL(str(library)).launch
        self.launch.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int] + [
            ctypes.c_void_p if "*" in p else np.ctypeslib.as_ctypes_type(t)
            for p, t in zip(self.parameters, self.types, strict=False)
        ]
        self.launch.restype = ctypes.c_int
        self.name = name

    @staticmethod
    def _type(parameter: str, typedefs: dict[str, str]):
        """The numpy type of a scalar parameter or of what a pointer parameter points to."""
        words = [w for w in re.findall(r"\w+", parameter.split("*")[0]) if w not in ("const", "__restrict__")]
        if "*" not in parameter:
            words = words[:-1]  # the parameter's name
        kind = " ".join(words)
        kind = typedefs.get(kind, kind)
        assert kind in _TYPES, f"emulated kernel parameter {parameter!r}: type {kind!r} is not emulated"
        return _TYPES[kind]

    def __call__(self, grid, block, args):
        assert len(args) == len(self.parameters), (len(args), self.parameters)
        assert all(n == 1 for n in (*grid[1:], *block[1:])), f"1-D launches only: grid {grid}, block {block}"
        assert 1 <= block[0] <= MAX_BLOCK, f"{block[0]} threads per block: CUDA allows 1 to {MAX_BLOCK}"
        values, arrays = [], {}
        for parameter, kind, value in zip(self.parameters, self.types, args, strict=False):
            if "*" in parameter:  # the dtype the kernel reads must be the array's
                assert value.dtype == kind, (parameter, value.dtype)
                assert value.flags.c_contiguous, parameter
                values.append(value.ctypes.data)
                arrays[parameter] = value
            else:
                assert type(value) is kind, (parameter, type(value))
                values.append(value.item())
        if CHECK_ORDER:
            before = {parameter: array.copy() for parameter, array in arrays.items()}
            self._run(grid, block, values, 0)
            in_order = {parameter: array.copy() for parameter, array in arrays.items()}
            for parameter, array in arrays.items():
                np.copyto(array, before[parameter])
            self._run(grid, block, values, 1)
            for parameter, array in arrays.items():
                if not np.array_equal(array.view(np.uint8), in_order[parameter].view(np.uint8)):
                    raise RuntimeError(
                        f"emulated kernel {self.name}: {parameter} differs when its blocks and threads "
                        "run in reverse order: the result depends on the order threads run in"
                    )
        else:
            self._run(grid, block, values, 0)

    def _run(self, grid, block, values, reversed_order: int) -> None:
        failed = self.launch(grid[0], block[0], reversed_order, *values)
        if failed == 1:
            raise RuntimeError(
                f"emulated kernel {self.name}: a __syncthreads() was not reached by every thread of "
                "a block (some had returned)"
            )
        if failed == 2:
            raise RuntimeError(
                f"emulated kernel {self.name} reached a __syncthreads() though the emulator found none "
                "in its calls and ran its threads one after another: results not to be trusted"
            )


def _asan_loaded() -> bool:
    return hasattr(ctypes.CDLL(None), "__asan_init")


def install(monkeypatch) -> None:
    """Route the engines (utils/cuda.py's plumbing) to the emulator on CPU tensors, and let the callers take the
    kernel path on the CPU (unless RASTERKIT_DISABLE_CUPY is set, as on the real device): every module of
    rasterkit.utils and its subpackages that has a `cupy_usable` is answered yes."""
    import importlib
    import os
    import pkgutil
    import sys

    from rasterkit import utils
    from rasterkit.utils.core import cuda

    def usable(device):
        return not os.environ.get("RASTERKIT_DISABLE_CUPY")

    for module in pkgutil.walk_packages(utils.__path__, "rasterkit.utils."):
        if not module.name.endswith(".__main__"):  # the CLI's entry point runs the CLI when imported
            importlib.import_module(module.name)
    monkeypatch.setattr(cuda, "kernel", functools.cache(EmulatedKernel))
    monkeypatch.setattr(cuda, "stream", contextlib.nullcontext)
    # .numpy() shares memory with a contiguous CPU tensor, so in-place writes land in the tensor
    monkeypatch.setattr(cuda, "arrays", lambda *tensors: [t.contiguous().numpy() for t in tensors])
    for name, module in list(sys.modules.items()):
        if name.startswith("rasterkit.utils") and hasattr(module, "cupy_usable"):
            monkeypatch.setattr(module, "cupy_usable", usable)
