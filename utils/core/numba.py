"""numba plumbing shared by the engines' CPU loops (each engine keeps its loops beside its torch path:
gpu_rendering/compositor_cpu.py, mesh_rasterizer/raster_cpu.py, ...): the compile decorator with
numba's on-disk cache, the fallback to the torch path where numba fails, and the thread count.

Importing this module imports numba (slow): engines import their loop modules on first use, where
`device.numba_usable` says they run.
"""

from __future__ import annotations

import functools
import logging
import os
import zlib

import numba
import torch
from llvmlite import ir
from numba.core import cgutils
from numba.core.cpu import ParallelOptions
from numba.extending import intrinsic

# numba's threading layer, where the user has chosen none and before numba's first parallel loop: OpenMP
# ("omp") first, then TBB, then numba's own workqueue. With torch loaded first (Linux wheels), numba's
# OpenMP binds to torch's runtime: one pool of threads for torch's ops and numba's loops, whose idle
# threads sleep where OMP_WAIT_POLICY=PASSIVE was set before torch loaded (prestartup_script.py, which
# ComfyUI runs first); set here too for an OpenMP runtime that loads later. Quiet, omp ran the engines'
# loops 1.3-2x faster than workqueue, which starts its threads for each loop; busy, no slower
# (bench/results/threads.md). (A numba without the private flag: its own defaults, never an import error.)
if not {"NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY"} & set(os.environ) and not getattr(
    numba.np.ufunc.parallel, "_is_initialized", True
):
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "tbb", "workqueue"]
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def falls_back(fn):
    """fn, made to return None where numba cannot compile or run its loop on this machine (the caller
    then takes the torch path, which gives the same pixels); the log says so once."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except numba.core.errors.NumbaError as error:
            if not _failed:
                _failed.append(error)
                logging.getLogger("rasterkit").warning(
                    f"RasterKit: numba's CPU loop failed ({type(error).__name__}: {str(error)[:300]}); the torch "
                    f"path draws instead (set RASTERKIT_DISABLE_NUMBA=1 to skip the attempt)"
                )
            return None

    return call


_failed: list = []


def torch_threads() -> int:
    """Sets numba's thread count to torch's (ComfyUI's and the user's setting: never more) and returns it."""
    wanted = torch.get_num_threads()
    threads = max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)  # starts numba's threads on first use
    if torch.get_num_threads() != wanted:
        # numba's OpenMP layer shares torch's runtime (libgomp loads once) and set its thread count to all
        # of numba's threads when they started: torch.set_num_threads(1) became 2 on a 2-core machine
        torch.set_num_threads(wanted)
    return threads


# Parts a prange loop's iterations are cut into, per thread, taken by the threads as they finish (numba's
# dynamic scheduling): with other processes busy, a thread the system deschedules delays one small part,
# where one equal share a thread (the default) left the other threads waiting for its whole share.
PARTS_PER_THREAD = 4


def balanced(iterations: int):
    """A context for calling a loop of `iterations` prange iterations in PARTS_PER_THREAD parts a thread
    (numba.parallel_chunksize), after torch_threads."""
    return numba.parallel_chunksize(max(1, iterations // (numba.get_num_threads() * PARTS_PER_THREAD)))


# parallel=True's loops: the prange loops only. numba also turns array set-ups (np.zeros, np.ones, slice
# fills) into parallel loops of their own, each waking the threads (~50 us a loop on the 2-core test
# machine: a quarter of the mask listing's time). Options, not a dict: numba empties a dict as it reads it,
# so each compile after a dispatcher's first took the defaults
PRANGE_ONLY = ParallelOptions(
    {
        "prange": True,
        "comprehension": False,
        "reduction": False,
        "inplace_binop": False,
        "setitem": False,
        "numpy": False,
        "stencil": False,
        "fusion": False,
    }
)


def jit(**options):
    """numba.njit with its on-disk cache, one cache per name the loop's module is imported under: numba's
    cached code imports its module again by name, and the pack is imported under its folder's path by
    ComfyUI, as `rasterkit` by the tests and as `utils` by the benchmarks."""

    def compile(fn):
        fn.__qualname__ = f"{fn.__qualname__}_{zlib.crc32(fn.__module__.encode()):08x}"  # a name for files
        if options.get("parallel") is True:
            options["parallel"] = PRANGE_ONLY
        return numba.njit(cache=True, **options)(fn)

    return compile


@intrinsic
def prefetch(typingctx, array, i, j, k):
    """In a compiled loop: prefetch(array, i, j, k) asks the CPU to bring element [i, j, k] of a 3-D array
    into its caches (LLVM's prefetch: a read, kept in every level; never a fault), so that a later read of
    scattered memory need not wait for it (the mask listing's tiles: ~0.2 ms of 1.5 at 1080p)."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        data = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, data, list(args[1:]), wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        int32 = ir.IntType(32)
        llvm_prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, int32, int32, int32]), "llvm.prefetch.p0i8"
        )
        read, all_levels, data = (ir.Constant(int32, v) for v in (0, 3, 1))
        builder.call(llvm_prefetch, [builder.bitcast(pointer, byte_pointer), read, all_levels, data])
        return context.get_dummy_value()

    return numba.types.void(array, i, j, k), codegen
