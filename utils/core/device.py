"""Backend choice in one place: torch device, optional accelerators, chunk sizes, OOM policy.

torch is the array library everywhere; CuPy kernels, numba's CPU loops and FAISS are optional
accelerators that callers use only when `cupy_usable(device)` / `numba_usable(device)` /
`faiss_usable()` say so.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")

# Fraction of the free memory one job (and one chunk) may use: the rest is headroom for temporaries
# that the estimates do not see and for other processes (ComfyUI keeps models resident). Jobs whose
# estimated peak is above it are refused (check_memory) rather than left to the kernel's OOM killer.
MEMORY_FRACTION = 0.5
CPU_FALLBACK_BYTES = 4 << 30


def torch_device(preferred: str | torch.device | None = None) -> torch.device:
    """The device to render on: `preferred`, else $RASTERKIT_DEVICE, else CUDA/ROCm, MPS, CPU.

    ROCm builds of torch report themselves as "cuda", so one branch serves NVIDIA and AMD.
    """
    name = preferred or os.environ.get("RASTERKIT_DEVICE")
    if name:
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


@functools.cache
def _cupy_module():
    if torch.version.hip is not None:  # cupy-cuda* wheels are NVIDIA-only
        return None
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # not installed, no driver, wrong CUDA major: all mean "not usable"
        return None
    return cupy


def backend_description(device: torch.device) -> str:
    """One line saying which path renders on `device` and how to switch (logged once at start)."""
    device = torch.device(device)
    if device.type == "cpu":
        if os.environ.get("RASTERKIT_DISABLE_NUMBA"):
            return "RasterKit: torch path on cpu (numba's loops off: unset RASTERKIT_DISABLE_NUMBA to use them)"
        if importlib.util.find_spec("numba") is None:
            return (
                "RasterKit: torch path on cpu (pip install numba in ComfyUI's Python, or reinstall the pack, for "
                "the faster CPU loops)"
            )
        return "RasterKit: numba's loops and the torch path on cpu (set RASTERKIT_DISABLE_NUMBA=1 for torch only)"
    if device.type != "cuda" or torch.version.hip is not None:
        return f"RasterKit: torch path on {device.type}" + (" (ROCm)" if torch.version.hip else "")
    if os.environ.get("RASTERKIT_DISABLE_CUPY"):
        return "RasterKit: torch path on CUDA (CuPy kernels off: unset RASTERKIT_DISABLE_CUPY to use them)"
    if importlib.util.find_spec("cupy") is None:
        major = (torch.version.cuda or "12").split(".")[0]
        return (
            f"RasterKit: torch path on CUDA (pip install cupy-cuda{major}x in ComfyUI's Python, or reinstall "
            f"the pack, for the faster CUDA kernels)"
        )
    return "RasterKit: CUDA kernels through CuPy (set RASTERKIT_DISABLE_CUPY=1 for the torch path)"


def cupy_usable(device: torch.device) -> bool:
    """True when CuPy kernels can run on `device` (an NVIDIA CUDA device with cupy importable)."""
    if os.environ.get("RASTERKIT_DISABLE_CUPY"):
        return False
    return torch.device(device).type == "cuda" and _cupy_module() is not None


@functools.cache
def _numba_importable() -> bool:
    try:
        import numba  # noqa: F401
    except Exception:  # not installed, or no build for this Python or numpy: the torch path serves
        return False
    return True


def numba_usable(device: torch.device) -> bool:
    """True when the numba-compiled CPU loops can run on `device`: the CPU, with numba importable and
    $RASTERKIT_DISABLE_NUMBA unset."""
    if os.environ.get("RASTERKIT_DISABLE_NUMBA"):
        return False
    return torch.device(device).type == "cpu" and _numba_importable()


@functools.cache
def faiss_usable() -> bool:
    """True when the faiss module (CPU or GPU build) imports."""
    try:
        import faiss  # noqa: F401
    except Exception:
        return False
    return True


_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14
# Only the whole 2 MiB pages inside a tensor are advised: they are its own while it lives, from a fresh
# mapping or glibc's heap alike (a 1080p frame's outputs, 8-33 MB, come from the heap once glibc's mmap
# threshold has grown to 32 MiB, and still fault fresh pages after a trim: 16k faults, 20 ms more a draw).
# On the heap the advice outlives the tensor: memory glibc reuses there faults 2 MiB at a time, at most
# the heap's own size, which those outputs grew it to anyway. From two huge pages, which hold one whole
# one wherever the tensor starts.
_HUGE_PAGES_FROM = 2 * _HUGE_PAGE


@functools.cache
def _madvise():
    """libc's madvise on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return madvise


def on_huge_pages(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (new, not yet written), asking Linux to back it with transparent huge pages where it
    offers them (THP "madvise" or "always"). Its first writes then fault 2 MiB pages, not 4 KiB ones:
    a 4K float32 RGBA layer's first touch takes 10 ms instead of 48 ms on the 2-core test machine, where
    page faults are most of writing a fresh output (a 1080p mask overlay's three outputs 31 -> 15 ms).
    No effect elsewhere, on small tensors or off the CPU."""
    nbytes = tensor.numel() * tensor.element_size()
    madvise = _madvise() if tensor.device.type == "cpu" and nbytes >= _HUGE_PAGES_FROM else None
    if madvise is not None:
        start = -(-tensor.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
        stop = (tensor.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
        madvise(start, stop - start, _MADV_HUGEPAGE)  # refused (THP off): nothing changes
    return tensor


def free_memory_bytes(device: torch.device) -> int:
    """Bytes that a new allocation on `device` can count on, as reported by the backend."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        # memory cached by torch's allocator is free for torch tensors too
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return CPU_FALLBACK_BYTES


def chunk_size(total: int, bytes_per_item: int, device: torch.device, limit: int | None = None) -> int:
    """How many of `total` items (each needing about `bytes_per_item`) to process at once."""
    budget = free_memory_bytes(device) * MEMORY_FRACTION
    size = int(budget // max(1, bytes_per_item))
    if limit is not None:
        size = min(size, limit)
    return max(1, min(total, size))


def memory_budget(device: torch.device) -> int:
    """Bytes one job may use on `device`: MEMORY_FRACTION of what it has free."""
    return int(free_memory_bytes(device) * MEMORY_FRACTION)


def check_memory(estimate: int, what: str, device: torch.device) -> None:
    """Refuse, before allocating anything, work whose estimated peak of `estimate` bytes exceeds
    MEMORY_FRACTION of what `device` has free: a ValueError naming `what` (the inputs that set the
    size) and both figures."""
    free = free_memory_bytes(device)
    if estimate > free * MEMORY_FRACTION:
        where = "this machine" if torch.device(device).type == "cpu" else str(device)
        raise ValueError(
            f"{what} needs ~{estimate / 1e9:.1f} GB; {where} has {free / 1e9:.1f} GB free (a job may "
            f"use {MEMORY_FRACTION:.0%} of it): use smaller inputs or split the work"
        )


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError):
        return True
    # MPS, ROCm and the CPU allocator raise a plain RuntimeError
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def run_chunked(
    fn: Callable[[int, int, torch.device], T],
    total: int,
    bytes_per_item: int,
    device: torch.device,
    on_chunk: Callable[[int, int], None] | None = None,
    limit: int | None = None,
) -> list[T]:
    """Call `fn(start, stop, device)` over [0, total) in chunks sized from free memory.

    OOM policy: an out-of-memory error halves the chunk and retries it; when a single item still
    does not fit on an accelerator, the rest of the work moves to the CPU. `on_chunk(done, total)`
    is called after every finished chunk (progress bars, interrupt checks).
    Returns the results of `fn` in order.
    """
    device = torch.device(device)
    size = chunk_size(total, bytes_per_item, device, limit)
    results: list[T] = []
    start = 0
    while start < total:
        stop = min(total, start + size)
        try:
            results.append(fn(start, stop, device))
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if size > 1:
                size = max(1, size // 2)
            elif device.type != "cpu":
                device = torch.device("cpu")
            else:
                raise
            continue
        start = stop
        if on_chunk is not None:
            on_chunk(start, total)
    return results


def normalize(device: str | torch.device) -> torch.device:
    """`device` with its index filled in, so that "cuda" and "cuda:0" compare equal."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
