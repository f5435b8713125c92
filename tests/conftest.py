"""Shared fixtures. The pack is imported as the package `rasterkit` (ComfyUI imports it by its
folder name, which a clone may not have), and utils/ is importable on its own from the root.

The tests mirror the packages (tests/nodes/, tests/live/, ...) and are imported by their file names
(pytest's default import mode), so no two test files may share a name; what several test files use
lives in a helper module here in tests/, never in a test file."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# tests/'s helper modules (opcount, cuda_emulator, node_inputs) for the tests in its subfolders too
sys.path.insert(0, str(ROOT / "tests"))

from demo import load_pack  # noqa: E402

PACK = load_pack()

import cuda_emulator  # noqa: E402
from rasterkit.utils.core.device import cupy_usable  # noqa: E402


@pytest.fixture(scope="session")
def pack():
    return PACK


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA device: GPU tests run on a machine with one")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "kernel" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kernels)


def pytest_terminal_summary(terminalreporter):
    """The kernels' registers, spills and stack as NVRTC's ptxas reported them (tests/test_nvrtc.py)."""
    nvrtc = sys.modules.get("test_nvrtc")
    if nvrtc is not None and nvrtc.REPORT:
        terminalreporter.section("kernel resources (NVRTC, per architecture)")
        for line in nvrtc.REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(
    params=[
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(
                    not (torch.cuda.is_available() and cupy_usable("cuda")),
                    reason="needs a CUDA device with cupy importable",
                ),
            ],
        ),
        "emulated",
    ]
)
def kernel(request, monkeypatch):
    """Where the CUDA kernels of a test run: "cuda" (a GPU with CuPy, -m gpu) or "emulated" (on the CPU
    through tests/cuda_emulator.py). The emulated runs fail, never skip, without a C++ compiler: a CI
    that silently stopped checking the kernels would look green."""
    if request.param == "emulated":
        assert cuda_emulator.COMPILER is not None, "the CPU emulation of the kernels needs g++ or clang++"
        cuda_emulator.install(monkeypatch)
    return request.param


@pytest.fixture
def kernel_device(kernel):
    """The torch device of the `kernel` fixture's runs: the GPU, or the CPU for the emulator."""
    return "cuda" if kernel == "cuda" else "cpu"


@pytest.fixture
def torch_path(monkeypatch):
    """Run fn(*args, **kwargs) on the torch path (the CuPy kernels and numba's CPU loops switched off)."""

    def run(fn, *args, **kwargs):
        with monkeypatch.context() as patch:
            patch.setenv("RASTERKIT_DISABLE_CUPY", "1")
            patch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
            return fn(*args, **kwargs)

    return run
