import numpy as np
import pytest
import torch

from rasterkit.utils.core import device as D


def test_torch_device_honours_preference_and_environment(monkeypatch):
    assert D.torch_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("RASTERKIT_DEVICE", "cpu")
    assert D.torch_device() == torch.device("cpu")


def test_accelerator_probes_are_booleans():
    assert D.cupy_usable(torch.device("cpu")) is False
    assert isinstance(D.faiss_usable(), bool)


def test_chunk_size_follows_free_memory(monkeypatch):
    monkeypatch.setattr(D, "free_memory_bytes", lambda device: 1000)
    assert D.chunk_size(100, 10, torch.device("cpu")) == 50  # half of free memory
    assert D.chunk_size(100, 10_000, torch.device("cpu")) == 1
    assert D.chunk_size(3, 1, torch.device("cpu")) == 3
    assert D.chunk_size(100, 1, torch.device("cpu"), limit=7) == 7


def test_run_chunked_covers_everything_in_order():
    seen = []
    out = D.run_chunked(
        lambda a, b, dev: list(range(a, b)), 10, 1, torch.device("cpu"), on_chunk=lambda d, t: seen.append(d), limit=3
    )
    assert sum(out, []) == list(range(10))
    assert seen == [3, 6, 9, 10]


def test_out_of_memory_halves_the_chunk_and_retries():
    calls = []

    def fn(start, stop, device):
        calls.append((start, stop))
        if stop - start > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return stop - start

    assert sum(D.run_chunked(fn, 8, 1, torch.device("cpu"), limit=8)) == 8
    assert calls[:3] == [(0, 8), (0, 4), (0, 2)]


def test_out_of_memory_on_one_item_falls_back_to_cpu():
    devices = []

    def fn(start, stop, device):
        devices.append(device.type)
        if device.type != "cpu":
            raise torch.OutOfMemoryError("simulated")
        return start

    assert D.run_chunked(fn, 2, 1, torch.device("meta"), limit=1) == [0, 1]
    assert devices == ["meta", "cpu", "cpu"]


def test_other_errors_are_not_swallowed():
    def fn(start, stop, device):
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        D.run_chunked(fn, 4, 1, torch.device("cpu"))


def test_cpu_that_runs_out_of_memory_raises():
    def fn(start, stop, device):
        raise torch.OutOfMemoryError("simulated")

    with pytest.raises(torch.OutOfMemoryError):
        D.run_chunked(fn, 1, 1, torch.device("cpu"))


@pytest.mark.parametrize(
    "cuda, hip, gpus, wheel",
    [
        ("12.8", None, 1, "cupy-cuda12x"),
        ("13.0", None, 2, "cupy-cuda13x"),
        ("11.8", None, 1, "cupy-cuda11x"),
        ("12.8", None, 0, None),  # a CUDA build of torch on a machine without an NVIDIA GPU
        (None, "6.3.4", 1, None),  # ROCm: CuPy's wheels are NVIDIA-only
        (None, None, 0, None),  # CPU or Apple
        ("10.2", None, 1, None),  # no wheel for that CUDA major
    ],
)
def test_install_picks_the_cupy_wheel_of_torchs_cuda_major(cuda, hip, gpus, wheel):
    import install

    assert install.cupy_wheel(cuda, hip, gpus) == wheel


def test_install_never_runs_pip_for_cupy_without_an_nvidia_gpu(monkeypatch):
    import subprocess

    import install

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip must not run on this CPU machine"))
    monkeypatch.setattr(install.importlib.util, "find_spec", lambda name: object())  # numba is there
    monkeypatch.setattr(install, "compile_cpu_loops", lambda: None)  # its own subprocess: tests/test_warmup.py
    install.main()


def test_install_adds_numba_holding_numpy_where_it_is(monkeypatch):
    import subprocess

    import numpy

    import install

    commands = []
    refused = lambda command, **k: commands.append(command) or subprocess.CompletedProcess(command, 1)  # noqa: E731
    monkeypatch.setattr(subprocess, "run", refused)
    monkeypatch.setattr(install.importlib.util, "find_spec", lambda name: None if name == "numba" else object())
    install.main()  # pip refusing (returncode 1) does not fail the install
    assert commands == [[install.sys.executable, "-m", "pip", "install", "numba", f"numpy=={numpy.__version__}"]]
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    install.main()
    assert len(commands) == 1


def test_the_start_line_says_which_path_and_how_to_switch(monkeypatch):
    from rasterkit.utils.core import device

    assert device.backend_description(torch.device("cpu")).startswith("RasterKit: numba's loops")
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    assert "numba's loops off" in device.backend_description(torch.device("cpu"))
    monkeypatch.delenv("RASTERKIT_DISABLE_NUMBA")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(device.importlib.util, "find_spec", lambda name: None)
    assert "pip install numba" in device.backend_description(torch.device("cpu"))
    assert "pip install cupy-cuda12x" in device.backend_description(torch.device("cuda"))
    monkeypatch.setattr(device.importlib.util, "find_spec", lambda name: object())
    assert "RASTERKIT_DISABLE_CUPY=1" in device.backend_description(torch.device("cuda"))
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    assert "CuPy kernels off" in device.backend_description(torch.device("cuda"))


def test_huge_pages_are_asked_for_inside_a_large_new_cpu_tensor_only(monkeypatch):
    calls = []
    monkeypatch.setattr(D, "_madvise", lambda: lambda start, length, advice: calls.append((start, length, advice)))
    big = torch.empty(40 << 20, dtype=torch.uint8)
    assert D.on_huge_pages(big) is big
    ((start, length, advice),) = calls
    assert advice == 14 and start % (2 << 20) == 0 and length % (2 << 20) == 0 and length >= 36 << 20
    assert big.data_ptr() <= start and start + length <= big.data_ptr() + big.numel()
    D.on_huge_pages(torch.empty(1 << 20, dtype=torch.uint8))  # small: may share heap pages, left alone
    assert len(calls) == 1
    monkeypatch.setattr(D, "_madvise", lambda: None)  # not Linux
    D.on_huge_pages(big).fill_(3)
    assert int(big.sum()) == 3 * (40 << 20)


def test_huge_pages_on_this_machine_keep_the_contents():
    zeros = D.on_huge_pages(torch.from_numpy(np.zeros((64 << 20) // 4, np.float32)))
    assert not zeros.any()
    zeros[::4099] = 2.0
    assert float(zeros.sum()) == 2.0 * len(range(0, zeros.numel(), 4099))
