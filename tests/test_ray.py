"""The dataset job on Ray Data (utils/datasets.run_ray) writes the same bytes as the single-process run,
on a local Ray instance of 2 CPUs started by the test."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[data]', see requirements-dev.txt)")
pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'ray[data]')")

# `utils.datasets` (not the pack's rasterkit.utils): Ray's workers import the job's module by name, and
# there `utils` is importable from the repository root on PYTHONPATH.
from utils import datasets as D  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[1:]])}},
    )
    yield
    ray.shutdown()


@pytest.mark.parametrize("fmt", ["npy", "wds"])
def test_ray_writes_the_single_process_bytes(tmp_path, local_ray, fmt):
    series = np.cumsum(np.random.default_rng(1).standard_normal((300, 40)), 1).astype(np.float32)
    series[17] = np.nan  # a malformed row, skipped the same way
    np.save(tmp_path / "s.npy", series)
    plot = D.Plot(width=32, height=32)
    source = D.source_for(str(tmp_path / "s.npy"))
    one = D.run(D.Job(source, str(tmp_path / "one"), format=fmt, plot=plot, shard_size=64), progress=False)
    many = D.run_ray(D.Job(source, str(tmp_path / "ray"), format=fmt, plot=plot, shard_size=64), cpus=1)
    assert many == one and one["images"] == 299 and [e["row"] for e in one["errors"]] == [17]
    files = lambda folder: {p.name: p.read_bytes() for p in sorted(folder.iterdir())}  # noqa: E731
    assert files(tmp_path / "ray") == files(tmp_path / "one")
