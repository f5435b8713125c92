"""PrimitiveMesh against fogleman/primitive, side by side in one run.

Three photographs (bench/photos, see its README for sources and licences) are shrunk to 256 px on
the longer side (bilinear, as primitive's own resize does) and approximated by both with the same
settings: 100 and 200 triangles and 100 combo shapes, alpha 128, 1000 random candidates and
mutations 100 (primitive's defaults). Both render their result at 256 px; RMSE (0..255, RGB) is
measured against that same shrunk photograph.

primitive is built from source under bench/peers/ (git-ignored, never committed). It has no go.mod;
without the module proxy, clone it and its dependencies (fogleman/gg, golang/freetype, nfnt/resize,
and golang/image at 4aa0222f, the last commit that builds with Go 1.19) and name them in `replace`
lines (built so here with Debian's golang-go 1.19, primitive at 0373c216):
    git clone <fogleman/primitive> bench/peers/primitive; git clone <each dependency> bench/peers/deps/<name>
    (cd bench/peers/deps/<name> && go mod init <its module path>)   # gg, freetype, resize
    bench/peers/primitive/go.mod: module github.com/fogleman/primitive, `require` each at v0.0.0 and
        `replace github.com/fogleman/gg => ../deps/gg` (and so on for the others)
    cd bench/peers/primitive && GOPROXY=off GOFLAGS=-mod=mod go build -o primitive_bin .
Without the binary, only RasterKit's figures are printed.
    .venv/bin/python bench/bench_primitive.py [--quick]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from _common import ROOT, peak_memory, report, table
from demo import load_pack  # noqa: E402  (_common puts the repository root on sys.path)

QUICK = "--quick" in sys.argv
PEER = ROOT / "bench" / "peers" / "primitive" / "primitive_bin"
PHOTOS = sorted((ROOT / "bench" / "photos").glob("*.jpg"))[: 1 if QUICK else None]
RUNS = (
    [("triangle", 1, 30), ("combo", 0, 30)]
    if QUICK
    else [("triangle", 1, 100), ("triangle", 1, 200), ("combo", 0, 100)]
)
SIZE = 256


def rmse(image: np.ndarray, reference: np.ndarray) -> float:
    """RMSE over RGB in 0..255 of two uint8 or 0..255 float arrays [H,W,3]."""
    return float(np.sqrt(((image[..., :3].astype(np.float64) - reference[..., :3]) ** 2).mean()))


def ours(node, photo: np.ndarray, shape_type: str, shapes: int) -> tuple[float, float, str]:
    image = torch.from_numpy(photo.astype(np.float32) / 255)[None]
    start = time.perf_counter()
    (result, *_), memory = peak_memory(
        lambda: node.run(
            image,
            shapes=shapes,
            shape_type=shape_type,
            alpha=128,
            candidates=1000,
            mutations=100,
            working_size=SIZE,
            output_size=SIZE,
            seed=0,
        ),
        "cpu",
    )
    seconds = time.perf_counter() - start
    return seconds, rmse(result[0].numpy() * 255, photo), memory


def peer(path: Path, photo: np.ndarray, mode: int, shapes: int, folder: Path) -> tuple[float, float, str]:
    out = folder / "primitive_out.png"
    start = time.perf_counter()
    process = subprocess.Popen(
        [
            str(PEER),
            "-i",
            str(path),
            "-o",
            str(out),
            "-n",
            str(shapes),
            "-m",
            str(mode),
            "-a",
            "128",
            "-r",
            str(SIZE),
            "-s",
            str(SIZE),
        ],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)  # this child's own peak resident set
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"primitive failed ({process.returncode})")
    return seconds, rmse(np.asarray(Image.open(out).convert("RGB")), photo), f"{usage.ru_maxrss / 1024:,.0f} MiB"


def main():
    node = load_pack().nodes.primitives.PrimitiveMesh
    have_peer = PEER.exists()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for photo_path in PHOTOS:
            picture = Image.open(photo_path).convert("RGB")
            picture.thumbnail((SIZE, SIZE), Image.BILINEAR)
            shrunk = folder / f"{photo_path.stem}.png"
            picture.save(shrunk)
            photo = np.asarray(picture)
            for shape_type, mode, shapes in RUNS:
                our_time, our_rmse, our_memory = ours(node, photo, shape_type, shapes)
                row = [
                    photo_path.stem,
                    f"{photo.shape[1]}x{photo.shape[0]}",
                    shape_type,
                    shapes,
                    f"{our_time:.2f} ({our_memory})",
                    f"{our_rmse:.2f}",
                ]
                if have_peer:
                    peer_time, peer_rmse, peer_memory = peer(shrunk, photo, mode, shapes, folder)
                    row += [f"{peer_time:.2f} ({peer_memory})", f"{peer_rmse:.2f}", f"{peer_time / our_time:.2f}x"]
                else:
                    row += ["-", "-", "-"]
                rows.append(row)
                print(" | ".join(str(c) for c in row), flush=True)
    header = [
        "photo",
        "size",
        "shape_type",
        "shapes",
        "RasterKit s (peak memory)",
        "RasterKit RMSE",
        "primitive s (peak memory)",
        "primitive RMSE",
        "speed-up",
    ]
    note = (
        "Wall time per run (one run each; RasterKit includes the node's resize and the anti-aliased render). "
        "RMSE: 0..255, RGB, against the photograph shrunk to 256 px. alpha 128, 1000 candidates, mutations 100; "
        "primitive uses every core (Go workers); RasterKit's coverage sums run on as many threads as torch "
        "(numba's loop, utils/color_optimizer/search_cpu.py), the rest of its search on one."
    )
    if not have_peer:
        note += f" primitive was not built ({PEER.relative_to(ROOT)} missing): its columns are empty."
    report(
        "primitive",
        "PrimitiveMesh vs fogleman/primitive",
        [("Results", note + "\n\n" + table(header, rows))],
        ".venv/bin/python bench/bench_primitive.py" + (" --quick" if QUICK else ""),
    )


if __name__ == "__main__":
    main()
