"""CuPy plumbing shared by the engines' CUDA kernels (each engine keeps its kernel source beside its
torch path: gpu_rendering.py, mesh_rasterizer.py).

Kernels are compiled at first use by NVRTC (shipped inside the cupy-cuda* wheels: no compiler to
install) with fused multiply-adds off (--fmad=false), so that rounding matches the torch path, and
read torch tensors in place through DLPack, on torch's current stream. Callers check
`device.cupy_usable` first. tests/cuda_emulator.py swaps these three functions for a CPU emulation.
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def kernel(source: str, name: str):
    import cupy

    return cupy.RawKernel(source, name, options=("--fmad=false", "--std=c++14"))


def stream():
    """torch's current stream as a CuPy stream, so that kernels queue behind torch's work."""
    import cupy

    stream = torch.cuda.current_stream()
    if hasattr(cupy.cuda.Stream, "from_external") and hasattr(stream, "__cuda_stream__"):  # CuPy 14 on
        return cupy.cuda.Stream.from_external(stream)
    return cupy.cuda.ExternalStream(stream.cuda_stream)


def arrays(*tensors: torch.Tensor):
    """Zero-copy CuPy views of contiguous torch tensors."""
    import cupy

    return [cupy.from_dlpack(t.contiguous()) for t in tensors]
