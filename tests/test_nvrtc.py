"""Every CUDA kernel of the engines compiled by the real NVRTC, as CuPy compiles it on a user's GPU, with
no GPU: NVRTC from the NVIDIA wheels (requirements-dev.txt: nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvrtc
13), called through ctypes, for the architectures in ARCHS. Any error or warning fails; so does float64
in the PTX. Registers, spills and stack (local memory) are printed in pytest's summary.

The kernels are found by reading the engine modules: every `cuda.kernel(SOURCE, name)` call in utils/
(utils/cuda.py is the only place that makes a cupy.RawKernel), so a new kernel cannot be missed.
"""

from __future__ import annotations

import ast
import ctypes
import importlib
import importlib.util
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("75", "86", "89", "90")
# where each wheel puts its library, under the `nvidia` namespace package
WHEEL_LIBRARIES = {"12": "cuda_nvrtc/lib/libnvrtc.so.12", "13": "cu13/lib/libnvrtc.so.13"}
REPORT: list[str] = []  # conftest.py prints it after the tests


def cupy_options(arch: str) -> tuple[str, ...]:
    """The options CuPy's RawKernel passes to NVRTC for utils/cuda.py's kernels (cupy/_core/core.pyx
    assemble_cupy_compiler_options and cupy/cuda/compiler.py _compile_with_cache_cuda, CuPy 13 and 14):
    ours (--std given, so no default --std=c++17), the include paths (left out: no kernel includes a
    header, test_no_kernel_includes_a_header), -ftz=true, -arch=sm_XX (a cubin for the device's own
    architecture) and --device-as-default-execution-space."""
    from rasterkit.utils.core import cuda

    return (*cuda.OPTIONS, "-ftz=true", f"-arch=sm_{arch}", "--device-as-default-execution-space")


def kernel_sources() -> dict[str, tuple[str, set[str]]]:
    """{"module.SOURCE": (source text, names launched)} of every cuda.kernel(SOURCE, name) call in
    utils/; a name that is not a string literal stands for every __global__ function of the source."""
    found: dict[str, tuple[str, set[str]]] = {}
    for path in sorted((ROOT / "utils").rglob("*.py")):
        module_name = "rasterkit." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "kernel"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "cuda"
            ):
                continue
            source_arg, name_arg = node.args
            assert isinstance(source_arg, ast.Name), f"{path}: cuda.kernel's source must be a module-level name"
            source = getattr(importlib.import_module(module_name), source_arg.id)
            key = f"{module_name.removeprefix('rasterkit.utils.')}.{source_arg.id}"
            names = found.setdefault(key, (source, set()))[1]
            if isinstance(name_arg, ast.Constant):
                names.add(name_arg.value)
            else:
                names.update(global_functions(source))
    return found


def global_functions(source: str) -> list[str]:
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(', source)


class Nvrtc:
    """One libnvrtc through ctypes: compile(source, options) -> (log, ptx)."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        self.version = f"{major.value}.{minor.value}"

    def _check(self, result: int) -> None:
        if result:
            raise RuntimeError(self.lib.nvrtcGetErrorString(result).decode())

    def _text(self, program, size_fn, get_fn) -> str:
        size = ctypes.c_size_t()
        self._check(size_fn(program, ctypes.byref(size)))
        buffer = ctypes.create_string_buffer(size.value)
        self._check(get_fn(program, buffer))
        return buffer.value.decode(errors="replace")

    def compile(self, source: str, name: str, options: tuple[str, ...]) -> tuple[int, str, str]:
        """(NVRTC's result code, the program log, the PTX or "" on failure)."""
        program = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None)
        )
        try:
            encoded = [o.encode() for o in options]
            result = self.lib.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
            log = self._text(program, self.lib.nvrtcGetProgramLogSize, self.lib.nvrtcGetProgramLog)
            ptx = "" if result else self._text(program, self.lib.nvrtcGetPTXSize, self.lib.nvrtcGetPTX)
            return result, log, ptx
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(program))


def _nvrtc_libraries() -> dict[str, Path]:
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    return {
        major: root / relative
        for major, relative in WHEEL_LIBRARIES.items()
        for root in map(Path, roots)
        if (root / relative).exists()
    }


LIBRARIES = _nvrtc_libraries()
needs_nvrtc = pytest.mark.skipif(
    not LIBRARIES,
    reason="no NVRTC wheel installed (pip install -r requirements-dev.txt: nvidia-cuda-nvrtc-cu12, nvidia-cuda-nvrtc)",
)
SOURCES = kernel_sources()


def resources(log: str) -> dict[str, str]:
    """{kernel: "R regs, S spill B, L stack B"} from ptxas' -v lines in the log."""
    found, current = {}, None
    for line in log.splitlines():
        if match := re.search(r"Function properties for (\w+)", line):
            current = match.group(1)
        elif current and (
            match := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                r"loads",
                line,
            )
        ):
            found[current] = f"stack {match.group(1)} B, spill {int(match.group(2)) + int(match.group(3))} B"
        elif current and (match := re.search(r"Used (\d+) registers", line)):
            found[current] = f"{match.group(1)} regs, " + found.get(current, "")
    return found


def test_every_kernel_is_found_and_every_launched_name_is_in_its_source():
    assert len(SOURCES) >= 4, sorted(SOURCES)  # composite, rasterize, PrimitiveMesh search and render
    for key, (source, names) in SOURCES.items():
        assert names, key
        assert names <= set(global_functions(source)), (key, names - set(global_functions(source)))


def test_only_utils_cuda_makes_a_raw_kernel():
    """Kernels compiled anywhere else would escape this file's checks and CuPy's options."""
    for path in (ROOT / "utils").rglob("*.py"):
        if path.name != "cuda.py":
            assert not re.search(r"RawKernel|RawModule|compile_with_cache", path.read_text()), path


def test_no_kernel_includes_a_header():
    """CuPy adds include paths this test leaves out; a kernel that needs them needs them added here."""
    for key, (source, _) in SOURCES.items():
        assert "#include" not in source, key


@needs_nvrtc
@pytest.mark.parametrize("major", sorted(WHEEL_LIBRARIES))
def test_every_kernel_compiles_cleanly_with_nvrtc(major):
    if major not in LIBRARIES:
        pytest.skip(f"the CUDA {major} NVRTC wheel is not installed")
    nvrtc = Nvrtc(LIBRARIES[major])
    jobs = [(key, arch) for key in SOURCES for arch in ARCHS]

    def build(job):
        key, arch = job
        # -v only prints ptxas' resource usage into the log; the code is the same
        return nvrtc.compile(SOURCES[key][0], key, (*cupy_options(arch), "--ptxas-options=-v"))

    with ThreadPoolExecutor(2) as pool:  # NVRTC programs are independent; ctypes lets go of the GIL
        results = list(pool.map(build, jobs))
    failures = []
    for (key, arch), (result, log, ptx) in zip(jobs, results, strict=False):
        diagnostics = [line for line in log.splitlines() if re.search(r"\b(warning|error)\b", line, re.I)]
        if result or diagnostics:
            failures.append(f"{key} sm_{arch}: NVRTC result {result}\n{log}")
            continue
        if re.search(r"\.f64\b", ptx):
            lines = [line.strip() for line in ptx.splitlines() if ".f64" in line]
            failures.append(f"{key} sm_{arch}: float64 in the PTX, e.g. {lines[:3]}")
        usage = resources(log)
        for name in sorted(SOURCES[key][1]):
            REPORT.append(f"NVRTC {nvrtc.version} sm_{arch} {name}: {usage.get(name, 'no ptxas report')}")
    assert not failures, "\n".join(failures)
