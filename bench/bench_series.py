"""Batch line plots: RasterKit's render_polylines against OpenCV polylines and Pillow, one run.

5000 images of 224x224 from 100-point series, single channel. The peers draw one image per call
into uint8 arrays, as the fastest Python pipelines do; RasterKit draws the whole batch at once into
float32 (what an IMAGE holds).
    .venv/bin/python bench/bench_series.py [--quick]
"""
from __future__ import annotations

import sys

import cv2
import numpy as np
import torch

from _common import report, table, timed

from utils.device import torch_device  # noqa: E402  (_common puts the repository root on sys.path)
from utils.gpu_rendering import _series_points, _value_range, render_polylines  # noqa: E402

QUICK = "--quick" in sys.argv
COUNT, STEPS, SIZE = (500 if QUICK else 5000), 100, 224


def opencv(points):
    for p in points:
        image = np.zeros((SIZE, SIZE), np.uint8)
        cv2.polylines(image, [p], False, 255, 1)


def opencv_aa(points):
    for p in points:
        image = np.zeros((SIZE, SIZE), np.uint8)
        cv2.polylines(image, [p], False, 255, 2, cv2.LINE_AA)


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
    points = _series_points(values, lengths, *_value_range(values, lengths, "per_image"), SIZE, SIZE)
    as_int = [p.astype(np.int32) for p in points.floor().numpy()]
    as_tuples = [[tuple(q) for q in p.tolist()] for p in points.numpy()]
    repeat = 3

    rows = []
    ours = timed(lambda: render_polylines(values, SIZE, SIZE, mode="aliased", device=device), repeat, sync=sync)
    rows.append(["RasterKit aliased (Bresenham), float32", f"{ours * 1e3:.0f}", f"{COUNT / ours:,.0f}"])
    peer = timed(lambda: opencv(as_int), repeat)
    rows.append(["OpenCV polylines, 1 px, uint8", f"{peer * 1e3:.0f}", f"{COUNT / peer:,.0f}"])
    pil = timed(lambda: pillow(as_tuples), repeat)
    rows.append(["Pillow ImageDraw.line, 1 px, uint8", f"{pil * 1e3:.0f}", f"{COUNT / pil:,.0f}"])
    aa_count = COUNT // 10
    ours_aa = timed(lambda: render_polylines(values[:aa_count], SIZE, SIZE, mode="antialiased", line_width=2.0,
                                             device=device), repeat, sync=sync)
    rows.append([f"RasterKit anti-aliased 2 px, float32 ({aa_count} images)", f"{ours_aa * 1e3:.0f}",
                 f"{aa_count / ours_aa:,.0f}"])
    peer_aa = timed(lambda: opencv_aa(as_int[:aa_count]), repeat)
    rows.append([f"OpenCV polylines LINE_AA 2 px, uint8 ({aa_count} images)", f"{peer_aa * 1e3:.0f}",
                 f"{aa_count / peer_aa:,.0f}"])
    if device.type == "cuda":
        resident = values.to(device)
        gpu = timed(lambda: render_polylines(resident, SIZE, SIZE, mode="aliased"), 10, 2, sync)
        rows.append(["RasterKit aliased, GPU-resident series", f"{gpu * 1e3:.1f}", f"{COUNT / gpu:,.0f}"])
    report("series", f"Batch line plots: {COUNT} images of {SIZE}x{SIZE}, {STEPS}-point series", [
        (f"Median wall time (RasterKit on {device})", table(["renderer", "ms", "images/s"], rows)),
    ], "make bench  # or .venv/bin/python bench/bench_series.py")


if __name__ == "__main__":
    main()
