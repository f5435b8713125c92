"""Batch line plots: RasterKit's render_polylines against OpenCV polylines and Pillow, one run.

5000 images of 224x224 from 100-point series, single channel. The peers draw one image per call
into uint8 arrays, as the fastest Python pipelines do; RasterKit draws the whole batch at once, into
float32 (what an IMAGE holds) and into uint8 (like for like with the peers).
    .venv/bin/python bench/bench_series.py [--quick]
"""

from __future__ import annotations

import sys

import cv2
import numpy as np
import torch

from _common import peak_memory, report, table, timed, timed_together
from utils.core.device import on_huge_pages, torch_device  # noqa: E402  (_common puts the repository root on sys.path)
from utils.gpu_rendering import render_polylines, series_points, value_range  # noqa: E402

QUICK = "--quick" in sys.argv
COUNT, STEPS, SIZE = (500 if QUICK else 5000), 100, 224


def opencv(points):
    for p in points:
        image = np.zeros((SIZE, SIZE), np.uint8)
        cv2.polylines(image, [p], False, 255, 1)


def opencv_batch(points):
    """Like for like with RasterKit: the plots kept, in one new [N,H,W] uint8 batch."""
    out = np.zeros((len(points), SIZE, SIZE), np.uint8)
    for image, p in zip(out, points, strict=True):
        cv2.polylines(image, [p], False, 255, 1)
    return out


def opencv_aa(points):
    for p in points:
        image = np.zeros((SIZE, SIZE), np.uint8)
        cv2.polylines(image, [p], False, 255, 2, cv2.LINE_AA)


def output_floor(dtype):
    """Allocating and writing once (on torch's threads) an output batch as RasterKit's: any path that
    keeps its plots pays this."""
    return on_huge_pages(torch.empty(COUNT, SIZE, SIZE, dtype=dtype)).fill_(0)


def pillow(points):
    from PIL import Image, ImageDraw

    for p in points:
        image = Image.new("L", (SIZE, SIZE))
        ImageDraw.Draw(image).line(p, fill=255, width=1)


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    values = torch.cumsum(torch.randn(COUNT, STEPS, generator=torch.Generator().manual_seed(0)), 1)
    lengths = torch.full((COUNT,), STEPS)
    points = series_points(values, lengths, *value_range(values, lengths, "per_image"), SIZE, SIZE)
    as_int = [p.astype(np.int32) for p in points.floor().numpy()]
    as_tuples = [[tuple(q) for q in p.tolist()] for p in points.numpy()]
    repeat = 3

    rows = []

    def row(name, seconds, count=COUNT, peer=None):
        versus = f"{peer / seconds:.2f}x" if peer else ""
        rows.append([name, f"{seconds * 1e3:.1f}", f"{count / seconds:,.0f}", versus])

    # side by side, in turns: RasterKit's CPU path, the peer's loop into one reused image, OpenCV keeping
    # its plots in a new batch as RasterKit does
    def ours_u8():
        return render_polylines(values, SIZE, SIZE, mode="aliased", dtype=torch.uint8, device=device)

    def ours_f32():
        return render_polylines(values, SIZE, SIZE, mode="aliased", dtype=torch.float32, device=device)

    times = timed_together(
        [ours_u8, ours_f32, lambda: opencv(as_int), lambda: opencv_batch(as_int), lambda: output_floor(torch.uint8)],
        9,
        sync=sync,
    )
    peer = times[2]
    memory = [
        peak_memory(fn, device)[1] for fn in (ours_u8, ours_f32, lambda: opencv(as_int), lambda: opencv_batch(as_int))
    ]
    row(f"RasterKit aliased (Bresenham), uint8 ({memory[0]})", times[0], peer=peer)
    row(f"RasterKit aliased (Bresenham), float32 ({memory[1]})", times[1], peer=peer)
    row(f"OpenCV polylines, 1 px, uint8 ({memory[2]})", peer, peer=peer)
    row(
        f"OpenCV polylines, 1 px, uint8, into one new batch (the plots kept, as RasterKit's) ({memory[3]})",
        times[3],
        peer=peer,
    )
    row("floor: RasterKit's uint8 batch allocated and written once", times[4], peer=peer)
    row("Pillow ImageDraw.line, 1 px, uint8", timed(lambda: pillow(as_tuples), repeat), peer=peer)
    aa_count = COUNT // 10
    peer_aa = timed(lambda: opencv_aa(as_int[:aa_count]), repeat)
    ours_aa = timed(
        lambda: render_polylines(values[:aa_count], SIZE, SIZE, mode="antialiased", line_width=2.0, device=device),
        repeat,
        sync=sync,
    )
    row(f"RasterKit anti-aliased 2 px, float32 ({aa_count} images)", ours_aa, aa_count, peer_aa)
    row(f"OpenCV polylines LINE_AA 2 px, uint8 ({aa_count} images)", peer_aa, aa_count, peer_aa)
    if device.type == "cuda":
        resident = values.to(device)
        for dtype in (torch.float32, torch.uint8):
            gpu = timed(lambda: render_polylines(resident, SIZE, SIZE, mode="aliased", dtype=dtype), 10, 2, sync)
            row(f"RasterKit aliased, GPU-resident series and images, {str(dtype)[6:]}", gpu, peer=peer)
        gpu_aa = timed(lambda: render_polylines(resident, SIZE, SIZE, mode="antialiased", line_width=2.0), 5, 1, sync)
        row("RasterKit anti-aliased 2 px, GPU-resident, float32", gpu_aa, peer=peer_aa)
    report(
        "series",
        f"Batch line plots: {COUNT} images of {SIZE}x{SIZE}, {STEPS}-point series",
        [
            (
                f"Median wall time, peak memory in brackets (RasterKit on {device})",
                table(["renderer", "ms", "images/s", "vs OpenCV"], rows),
            ),
            (
                "Notes",
                "vs OpenCV: images/s over OpenCV's in the same mode (1 px or LINE_AA). A fresh output batch is "
                "page-faulted on first touch (5000 x 224 x 224 uint8 = 250 MB, float32 = 1 GB): on the CPU that "
                "is part of RasterKit's time and none of the peers', which reuse a 50 KB image in cache; the "
                "OpenCV row 'into one new batch' keeps its plots as RasterKit does. On the CPU RasterKit's aliased "
                "plots are numba's Bresenham loop over the images in parallel "
                "(utils/gpu_rendering/line_plots_cpu.py; OpenCV's polylines without numba), with the torch path's "
                "pixels: all walk a segment from its end with the larger x; its output batch is on transparent "
                "huge pages where Linux offers them. The first five rows ran in turns, 9 rounds.",
            ),
        ],
        "make bench  # or .venv/bin/python bench/bench_series.py",
    )


if __name__ == "__main__":
    main()
