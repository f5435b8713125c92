"""CuPy plumbing shared by the engines' CUDA kernels (each engine keeps its kernel source beside its
torch path: gpu_rendering.py, mesh_rasterizer.py).

Kernels are compiled at first use by NVRTC (shipped inside the cupy-cuda* wheels: no compiler to
install) with fused multiply-adds off (--fmad=false), so that rounding matches the torch path, and
read torch tensors in place through DLPack, on torch's current stream. Callers check
`device.cupy_usable` first. tests/cuda_emulator.py swaps these three functions for a CPU emulation;
tests/test_nvrtc.py compiles every kernel with OPTIONS and the options CuPy adds.
"""

from __future__ import annotations

import contextlib
import functools

import torch

# CuPy appends -ftz=true after these (and NVRTC takes the last of two --ftz), so the kernels flush float
# denormals to zero; tests/cuda_emulator.py flushes them too.
OPTIONS = ("--fmad=false", "--std=c++14")


@functools.cache
def kernel(source: str, name: str):
    import cupy

    return cupy.RawKernel(source, name, options=OPTIONS)


@contextlib.contextmanager
def stream(device: torch.device | None = None):
    """Launch on `device` (a CUDA device; the current one where None or without an index) and on torch's
    current stream there, so that kernels queue behind torch's work on the tensors' own GPU."""
    import cupy

    device = torch.device("cuda") if device is None else torch.device(device)
    index = torch.cuda.current_device() if device.index is None else device.index
    current = torch.cuda.current_stream(index)
    if hasattr(cupy.cuda.Stream, "from_external") and hasattr(current, "__cuda_stream__"):  # CuPy 14 on
        launch_stream = cupy.cuda.Stream.from_external(current)
    else:
        launch_stream = cupy.cuda.ExternalStream(current.cuda_stream)
    with cupy.cuda.Device(index), launch_stream:
        yield


def arrays(*tensors: torch.Tensor):
    """Zero-copy CuPy views of contiguous torch tensors."""
    import cupy

    return [cupy.from_dlpack(t.contiguous()) for t in tensors]
