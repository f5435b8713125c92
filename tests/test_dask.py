"""The dataset job on Dask (utils/datasets.run_dask, `rasterkit plots --dask`) writes the same bytes as the
single-process run, in every format, on a local cluster of 2 worker processes started by the test; a
rerun skips the shards that are done and writes the missing one again."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dask.distributed", reason="dask.distributed is not installed (pip install 'dask[distributed]')")

# `utils.datasets` (not the pack's rasterkit.utils): the workers unpickle the tasks by module name, and
# there `utils` is importable from the repository root (conftest.py puts it on sys.path, which spawned
# processes inherit).
from utils import datasets as D  # noqa: E402
from utils.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with D._local_cluster(2, 1, []) as local:
        yield local.scheduler_address


@pytest.fixture
def source(tmp_path):
    series = np.cumsum(np.random.default_rng(1).standard_normal((300, 40)), 1).astype(np.float32)
    series[17] = np.nan  # a malformed row, skipped the same way
    np.save(tmp_path / "s.npy", series)
    return D.source_for(str(tmp_path / "s.npy"))


def files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", D.FORMATS)
def test_dask_writes_the_single_process_bytes(tmp_path, cluster, source, fmt):
    # the CLI's size: ISA-L deflated the same scanlines of much smaller plots (32x32) to other bytes now
    # and then, in one process as much as in several (docs/library.md)
    plot = D.Plot(width=224, height=224)
    one = D.run(D.Job(source, str(tmp_path / "one"), format=fmt, plot=plot, shard_size=64), progress=False)
    job = D.Job(source, str(tmp_path / "dask"), format=fmt, plot=plot, shard_size=64)
    many = D.run_dask(job, cluster, progress=False)
    assert many == one and one["images"] == 299 and [e["row"] for e in one["errors"]] == [17]
    assert files(tmp_path / "dask") == files(tmp_path / "one")

    lost = tmp_path / "dask" / job.name(2)
    lost.unlink() if lost.is_file() else [p.unlink() for p in lost.iterdir()]
    stamp = (tmp_path / "dask" / job.name(0)).stat().st_mtime_ns
    assert D.run_dask(job, cluster, progress=False) == one
    assert files(tmp_path / "dask") == files(tmp_path / "one")
    assert (tmp_path / "dask" / job.name(0)).stat().st_mtime_ns == stamp  # done and verified: not rewritten


def test_cli_dask(tmp_path, cluster, source, capsys):
    command = ["plots", source.path, "--format", "wds", "--shard-size", "100", "--no-progress", "--out"]
    assert main([*command, str(tmp_path / "one")]) == 0
    assert main([*command, str(tmp_path / "dask"), "--dask", cluster]) == 0
    assert "299 images in 3 shards in" in capsys.readouterr().out
    assert files(tmp_path / "dask") == files(tmp_path / "one")
    assert main([*command, str(tmp_path / "none"), "--dask", "auto", "--dask-threads", "0"]) == 2
    assert "--dask-threads 0: expected at least 1" in capsys.readouterr().err
