"""Run by ComfyUI-Manager (and comfy-cli, the Comfy Registry's installer) after requirements.txt.

Everywhere, installs numba (the CPU loops of the overlays, line plots, mesh rasterizer and
PrimitiveMesh's search) where it is missing, holding numpy at the version ComfyUI has: where no numba
wheel fits that numpy or this Python, pip refuses and nothing changes (RASTERKIT_DISABLE_NUMBA set:
skipped). It is not in requirements.txt because pip would otherwise be free to move ComfyUI's numpy,
or fail the pack's whole install. Then, where those loops will run (no GPU for torch), compiles them
(utils/warmup.py) so that no first prompt waits for numba: once, about a minute on a small CPU, printed.

On a machine whose torch is a CUDA build and sees an NVIDIA GPU, installs the CuPy wheel for torch's
CUDA major version, so that the pack's CUDA kernels are used with no manual step. Does nothing on
macOS, AMD (ROCm), CPU-only machines, when CuPy already imports, or with RASTERKIT_DISABLE_CUPY set;
never fails the install: without CuPy or numba the same results come from the torch path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.abspath(__file__))

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


# Run in subprocesses (a fresh import of a numba just installed; a crash cannot fail the install), each
# compiling one part of the loop families (numba compiles on one core). The pack is imported under the name
# ComfyUI gives it (nodes.load_custom_node: its folder's path with "." as "_x_"), as numba's cache is kept
# per module name. Each prints the loops still uncached when it ended, and where the cache is.
_COMPILE = """
import importlib, json, sys, types
root, part, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
name = root.replace(".", "_x_")
pack = types.ModuleType(name)
pack.__path__ = [root]
sys.modules[name] = pack
warmup = importlib.import_module(name + ".utils.warmup")
warmup.compile_all(list(warmup.FAMILIES)[part::parts])
print(json.dumps({"uncached": warmup.uncached(), "cache": warmup.cache_folder()}))
"""
COMPILE_PROCESSES = 3  # at most, one a core: more than three parts would be too small to pay their imports


def compile_cpu_loops() -> None:
    """Compile numba's CPU loops now, where they will run (numba imports, not disabled, torch sees no
    GPU); a failure only means they compile in the background at ComfyUI's start instead."""
    importlib.invalidate_caches()  # numba may have been installed a moment ago
    if os.environ.get("RASTERKIT_DISABLE_NUMBA") or importlib.util.find_spec("numba") is None:
        return
    try:
        import torch
    except ImportError:
        return
    mps = getattr(torch.backends, "mps", None)
    if torch.cuda.is_available() or (mps is not None and mps.is_available()):
        return
    print("RasterKit: compiling the CPU loops with numba (once, about a minute)", flush=True)
    start = time.perf_counter()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parts = max(1, min(cores, COMPILE_PROCESSES))
    with tempfile.TemporaryDirectory() as folder:
        # each part's output in a file of its own: a part waiting on a full pipe would stop compiling
        logs = [open(os.path.join(folder, f"{part}.log"), "w+") for part in range(parts)]  # noqa: SIM115
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", _COMPILE, ROOT, str(part), str(parts)], stdout=log, stderr=subprocess.STDOUT
            )
            for part, log in enumerate(logs)
        ]
        failed, reports = [], []
        for process, log in zip(processes, logs, strict=True):
            code = process.wait()
            log.seek(0)
            printed = log.read()
            log.close()
            try:
                if code != 0:
                    raise ValueError(printed.strip()[-300:])
                reports.append(json.loads(printed.strip().splitlines()[-1]))
            except (ValueError, IndexError) as error:  # a crash, or no report: the install goes on
                failed.append(str(error) or "no report")
    if not failed:
        # a loop cached when any part ended stays cached; one uncached at every part's end did not compile
        # (numba failed on this machine: the torch path serves)
        missing = set.intersection(*(set(report.get("uncached", ())) for report in reports))
        failed = ["not compiled: " + ", ".join(sorted(missing))] if missing else []
    if not failed:
        print(
            f"RasterKit: CPU loops ready in {time.perf_counter() - start:.0f} s, numba's cache in {reports[0]['cache']}"
        )
    else:
        print(f"RasterKit: compiling the CPU loops failed ({failed[0]}); they compile at ComfyUI's start instead")


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
    compile_cpu_loops()
    install_cupy()


if __name__ == "__main__":
    main()
