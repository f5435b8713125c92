"""Run by ComfyUI-Manager (and comfy-cli, the Comfy Registry's installer) after requirements.txt.

Everywhere, installs numba (the CPU loops of the overlays, line plots, mesh rasterizer and
PrimitiveMesh's search) where it is missing, holding numpy at the version ComfyUI has: where no numba
wheel fits that numpy or this Python, pip refuses and nothing changes (RASTERKIT_DISABLE_NUMBA set:
skipped). It is not in requirements.txt because pip would otherwise be free to move ComfyUI's numpy,
or fail the pack's whole install.

On a machine whose torch is a CUDA build and sees an NVIDIA GPU, installs the CuPy wheel for torch's
CUDA major version, so that the pack's CUDA kernels are used with no manual step. Does nothing on
macOS, AMD (ROCm), CPU-only machines, when CuPy already imports, or with RASTERKIT_DISABLE_CUPY set;
never fails the install: without CuPy or numba the same results come from the torch path.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

CUPY_CUDA_MAJORS = (11, 12, 13)  # the cupy-cuda{major}x wheels on PyPI


def cupy_wheel(cuda_version: str | None, hip_version: str | None, gpus: int) -> str | None:
    """The CuPy package for a torch build (torch.version.cuda, torch.version.hip) seeing `gpus` CUDA
    devices, or None where CuPy does not apply."""
    if hip_version or not cuda_version or gpus == 0:
        return None
    major = int(cuda_version.split(".")[0])
    return f"cupy-cuda{major}x" if major in CUPY_CUDA_MAJORS else None


def pip_install(packages: list[str], why: str) -> None:
    print(f"RasterKit: installing {' '.join(packages)} {why}")
    result = subprocess.run([sys.executable, "-m", "pip", "install", *packages], check=False)
    if result.returncode != 0:
        print(f"RasterKit: {packages[0]} did not install; the torch path will be used (same results, slower)")


def install_numba() -> None:
    if os.environ.get("RASTERKIT_DISABLE_NUMBA") or importlib.util.find_spec("numba") is not None:
        return
    try:
        import numpy
    except ImportError:
        return
    pip_install(["numba", f"numpy=={numpy.__version__}"], "for the CPU loops (numpy held where it is)")


def install_cupy() -> None:
    if os.environ.get("RASTERKIT_DISABLE_CUPY") or importlib.util.find_spec("cupy") is not None:
        return
    try:
        import torch
    except ImportError:
        return
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wheel = cupy_wheel(torch.version.cuda, torch.version.hip, gpus)
    if wheel is None:
        return
    pip_install([wheel], f"for the CUDA kernels (torch {torch.__version__}, CUDA {torch.version.cuda})")


def main() -> None:
    install_numba()
    install_cupy()


if __name__ == "__main__":
    main()
