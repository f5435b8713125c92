"""The library: a wheel of the repository installs utils/ as `rasterkit`, importable and drawing without
ComfyUI, the repository root (the node pack) and the source tree; its console script runs."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from the repository (no network: the venv's setuptools) and installed with
    --target into a bare folder: (wheel, folder)."""
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp / "dist").glob("rasterkit-*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp / "site"), str(wheel)],
        check=True,
        capture_output=True,
    )
    return wheel, tmp / "site"


def bare_python(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run code with only the installed folder and the venv's own site-packages (torch, numpy): -I
    drops PYTHONPATH, the current folder and the user site; the folder is appended to sys.path."""
    prelude = f"import sys; sys.path.insert(0, {str(site)!r}); "
    return subprocess.run(
        [sys.executable, "-I", "-c", prelude + code], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_wheel_holds_utils_as_rasterkit_and_nothing_of_the_pack(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {"rasterkit/" + str(p.relative_to(ROOT / "utils")) for p in (ROOT / "utils").rglob("*.py")}
    assert sources <= names  # every module and subpackage of utils/, the coming packages included
    assert not [n for n in names if n.startswith(("nodes/", "tests/", "web/", "bench/")) or n == "__init__.py"]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "rasterkit = rasterkit.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_import_and_render_without_comfyui(installed, tmp_path):
    _, site = installed
    code = """
import rasterkit, torch
from rasterkit.gpu_rendering import render_polylines
from rasterkit.core import torch_device
images = render_polylines(torch.tensor([[0.0, 1.0, 0.5]]), 8, 12, dtype=torch.uint8)
assert images.shape == (1, 8, 12) and images.dtype == torch.uint8 and int(images.max()) == 255
assert not [m for m in sys.modules if m.split('.')[0] in ('comfy', 'nodes', 'utils')]
print(rasterkit.__file__)
"""
    result = bare_python(site, code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(site)


def test_console_script_and_module(installed, tmp_path):
    _, site = installed
    import numpy as np

    np.save(tmp_path / "s.npy", np.cumsum(np.ones((5, 10)), 1))
    run_cli = "from rasterkit.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(site)!r}); {run_cli}",
            "plots",
            "s.npy",
            "--out",
            "out",
            "--width",
            "16",
            "--height",
            "16",
            "--no-progress",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "5 images in 1 shard" in result.stdout
    assert np.load(tmp_path / "out" / "shard-000000.npy").shape == (5, 16, 16)
    script = (site / "bin" / "rasterkit").read_text()
    assert "from rasterkit.cli import main" in script
    result = bare_python(
        site,
        "import runpy; sys.argv = ['rasterkit', '--help']; runpy.run_module('rasterkit', run_name='__main__')",
        tmp_path,
    )
    assert "plots" in result.stdout
