"""Line-plot datasets end to end (read series, draw, write shards), side by side in one run:

- RasterKit's job (utils/datasets.py, what `rasterkit plots` runs) writing WebDataset tars of PNG, N
  images (1M by default) in one process (the CLI's default), and on fewer images in 2 processes;
- the floor: writing the same bytes (the finished shards, held in memory) to fresh files;
- the baseline a user would write: cv2.polylines + cv2.imwrite PNG, one file an image, in a
  multiprocessing Pool of every core, on fewer images (a rate: it holds steady with the count), and
  matplotlib, the reports' own tool, on a few hundred;
- uint8 NPY shards (50 KB an image at 224x224: capped at --npy-n images to spare the disk) and their floor;
- the same WebDataset job on Dask (rasterkit plots --dask: run_dask on a local cluster of a worker a
  core), for its overhead on one machine against as many local processes.

Series: random walks of 100 points, float32 .npy; plots 224x224, 1 px aliased lines, one channel.
    .venv/bin/python bench/bench_datasets.py [--n 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import cv2
import numpy as np

from _common import report, table
from utils import datasets as D  # noqa: E402  (_common puts the repository root on sys.path)

SIZE, STEPS = 224, 100


def series(path: Path, count: int) -> None:
    out = np.lib.format.open_memmap(path, "w+", np.float32, (count, STEPS))
    rng = np.random.default_rng(0)
    for start in range(0, count, 100_000):
        stop = min(start + 100_000, count)
        out[start:stop] = np.cumsum(rng.standard_normal((stop - start, STEPS), np.float32), 1)
    out.flush()


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def files(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def write_floor(contents: dict[Path, bytes], folder: Path) -> float:
    """Seconds to write `contents` to fresh files, as the job does (no fsync)."""
    folder.mkdir()

    def write():
        for name, data in contents.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)

    return seconds(write)


def _baseline_chunk(task) -> None:
    path, start, stop, out = task
    values = np.load(path, mmap_mode="r")[start:stop]
    x = np.linspace(0, SIZE - 1, STEPS)
    for i, v in enumerate(values):
        y = (SIZE - 1) * (1 - (v - v.min()) / max(float(v.max() - v.min()), 1e-12))
        image = np.zeros((SIZE, SIZE), np.uint8)
        cv2.polylines(image, [np.stack([x, y], 1).round().astype(np.int32)], False, 255, 1)
        cv2.imwrite(f"{out}/{start + i:09d}.png", image)


def baseline(path: Path, count: int, out: Path) -> float:
    """cv2.polylines + PNG files in a Pool of every core, 1000 series a task."""
    out.mkdir()
    tasks = [(str(path), s, min(s + 1000, count), str(out)) for s in range(0, count, 1000)]
    with Pool(os.cpu_count()) as pool:
        return seconds(lambda: pool.map(_baseline_chunk, tasks))


def matplotlib_baseline(path: Path, count: int, out: Path) -> float:
    """The reports' pipeline: one matplotlib figure an image, saved as PNG (one process)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir()
    values = np.load(path, mmap_mode="r")[:count]

    def draw():
        figure = plt.figure(figsize=(SIZE / 100, SIZE / 100), dpi=100)
        for i, v in enumerate(values):
            figure.clear()
            axes = figure.add_axes((0, 0, 1, 1))
            axes.axis("off")
            axes.plot(v, color="white", linewidth=1)
            figure.savefig(out / f"{i:09d}.png", facecolor="black")
        plt.close(figure)

    return seconds(draw)


def run_dask(job: D.Job, workers: int) -> tuple[float, float]:
    """The job through run_dask on a local Dask cluster of `workers` processes of one thread (the same
    shard writer as --processes, one task a shard): (seconds to start the cluster, seconds to write)."""
    from dask.distributed import LocalCluster

    start = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster:
        started = time.perf_counter() - start
        return started, seconds(lambda: D.run_dask(job, cluster.scheduler_address, progress=False))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000, help="images of the WebDataset job (default 1M)")
    parser.add_argument("--npy-n", type=int, default=50_000, help="images of the NPY job (50 KB each)")
    parser.add_argument("--baseline-n", type=int, default=20_000, help="images of the cv2 + Pool baseline")
    parser.add_argument(
        "--processes-n", type=int, default=200_000, help="images of the 2-process and Dask runs (0: none)"
    )
    parser.add_argument("--quick", action="store_true", help="20k images, 5k for NPY, baseline, processes, Dask")
    args = parser.parse_args()
    if args.quick:
        args.n, args.npy_n, args.baseline_n, args.processes_n = 20_000, 5_000, 5_000, 5_000
    cores = os.cpu_count()
    work = Path(tempfile.mkdtemp(prefix="rasterkit-bench-"))
    plot = D.Plot(width=SIZE, height=SIZE)
    rows, notes, loads = [], [], []

    def row(name, count, took, peer=None, floor=None):
        rate = count / took
        rows.append(
            [
                name,
                f"{count:,}",
                f"{took:.1f}",
                f"{rate:,.0f}",
                f"{rate / peer:.1f}x" if peer else "",
                f"{took / floor:.2f}x" if floor else "",
            ]
        )
        loads.append(os.getloadavg()[0])
        return rate

    try:
        path = work / "series.npy"
        series(path, max(args.n, args.npy_n, args.baseline_n, args.processes_n))
        source = D.Source(str(path), "npy")
        # warm-up: numba's compilation and the first page faults are not part of a dataset's cost
        D.run(D.Job(source, str(work / "warm"), "wds", plot, shard_size=1000), progress=False)
        shutil.rmtree(work / "warm")

        cv2.setNumThreads(1)  # the Pool's processes are the parallelism, as a user's script would have it
        took = baseline(path, args.baseline_n, work / "baseline")
        peer = row(f"baseline: cv2.polylines + PNG files, Pool({cores})", args.baseline_n, took)
        shutil.rmtree(work / "baseline")
        matplotlib_count = min(300, args.baseline_n)
        row(
            "baseline: matplotlib figure + PNG files, 1 process",
            matplotlib_count,
            matplotlib_baseline(path, matplotlib_count, work / "matplotlib"),
            peer,
        )
        shutil.rmtree(work / "matplotlib")
        cv2.setNumThreads(0)
        notes.append(
            f"The baselines ran on fewer images: their rate holds with the count (one file an image); at "
            f"{peer:,.0f} images/s the cv2 script would take {args.n / peer:,.0f} s for {args.n:,}."
        )

        wds = _limited(D.Job(source, str(work / "wds"), "wds", plot, shard_size=1000), args.n)
        took = seconds(lambda: D.run(wds, progress=True))
        one = took / args.n
        floor = write_floor(files(work / "wds"), work / "wds-floor")
        shards_mb = sum(p.stat().st_size for p in (work / "wds").glob("*.tar")) / 1e6
        row("floor: writing the same WebDataset tars", args.n, floor, peer)
        row("RasterKit: WebDataset tars of 1-bit PNG, 1 process (the CLI's default)", args.n, took, peer, floor)
        notes.append(
            f"WebDataset shards: {shards_mb:,.0f} MB for {args.n:,} images "
            f"({shards_mb * 1e3 / args.n:.2f} KB an image)."
        )
        shutil.rmtree(work / "wds-floor")
        shutil.rmtree(work / "wds")

        count = args.processes_n
        if count:
            job = _limited(D.Job(source, str(work / "procs"), "wds", plot, shard_size=1000), count)
            local = seconds(lambda: D.run(job, progress=True, processes=cores))
            row(f"RasterKit: the same, {cores} processes (--processes {cores})", count, local, peer)
            shutil.rmtree(work / "procs")
            notes.append(
                f"{cores} processes: {local / count / one:.2f}x the time an image of one process "
                f"({count:,} images, their start included: torch's import and numba's cache in each)."
            )
            try:
                import dask.distributed  # noqa: F401
            except ImportError:
                notes.append("Dask: not installed, not measured.")
            else:
                dask_job = _limited(D.Job(source, str(work / "dask"), "wds", plot, shard_size=1000), count)
                started, took = run_dask(dask_job, cores)
                shutil.rmtree(work / "dask")
                row(f"RasterKit on Dask, local, {cores} workers of 1 thread (--dask auto)", count, took, peer)
                notes.append(
                    f"Dask's overhead on one machine: {took / local:.2f}x the time of {cores} local processes, "
                    f"{took / count / one:.2f}x that of one process ({count:,} images; the cluster's start, "
                    f"{started:.1f} s, not counted). On one machine Dask only adds overhead: it is for more "
                    f"than one machine or GPU."
                )

        npy = _limited(D.Job(source, str(work / "npy"), "npy", plot, shard_size=1000), args.npy_n)
        took = seconds(lambda: D.run(npy, progress=True))
        floor = write_floor(files(work / "npy"), work / "npy-floor")
        row("floor: writing the same NPY shards", args.npy_n, floor, peer)
        row("RasterKit: uint8 NPY shards, 1 process", args.npy_n, took, peer, floor)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # other work on the machine slows every row, each by as much as it is running then
    notes.append(f"Load average (1 min) after each row: {', '.join(f'{load:.1f}' for load in loads)} on {cores} cores.")

    text = table(["pipeline (read, draw, write)", "images", "s", "images/s", "vs cv2 baseline", "vs write floor"], rows)
    report(
        "datasets",
        "Line-plot datasets end to end: RasterKit's CLI job against the write floor and a user's cv2 + Pool script",
        [
            (
                "224x224 plots of 100-point series, written to local disk",
                text + "\n\n" + "\n".join(f"- {n}" for n in notes),
            )
        ],
        "bench/bench_datasets.py" + (" --quick" if args.quick else f" --n {args.n}"),
    )


def _limited(job: D.Job, count: int) -> D.Job:
    """The job over the first `count` series of its file (copied once into a .npy of their own)."""
    array = np.load(job.source.path, mmap_mode="r")
    if len(array) == count:
        return job
    view = Path(job.source.path).with_name(f"series-{count}.npy")
    if not view.exists():
        out = np.lib.format.open_memmap(view, "w+", np.float32, (count, STEPS))
        out[:] = array[:count]
        out.flush()
    return D.Job(D.Source(str(view), "npy"), job.out, job.format, job.plot, job.shard_size)


if __name__ == "__main__":
    main()
