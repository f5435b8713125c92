"""Aliased line plots on the CPU: numba's Bresenham loop (utils/rendering_cpu.py) where numba is
installed, else OpenCV.

cv2.polylines draws 1-px lines with Bresenham's algorithm, walking each segment from its end with the
larger x: the pixels of gpu_rendering's torch path, which follows the same convention (tested equal),
and of the numba loop. Either, straight into the output batch, beats the torch path's pixel
enumeration on the CPU (measured on 5000 plots of 224x224 from 100-point series: bench/bench_series.py);
numba's loop also draws images in parallel without a Python call per image. OpenCV draws on one
thread; nothing here starts others beyond torch's thread count.
"""
from __future__ import annotations

import cv2
import numpy as np
import torch

from ..core.device import numba_usable

# the dtypes numpy and OpenCV share
NUMPY_DTYPES = {torch.uint8: np.uint8, torch.float16: np.float16, torch.float32: np.float32}


def series_points(values: torch.Tensor, lengths: torch.Tensor, scale: str, height: int, width: int):
    """gpu_rendering.series_points of y values [B,T] over gpu_rendering.value_range(values, lengths,
    scale), the same points [B,T,2] from numba's loops in one pass each (the torch ops take 7 ms of
    5000 series of 100 values here, the loops 0.5 ms); None where those loops are not used."""
    if not numba_usable(values.device):
        return None
    from . import compositor_cpu as rendering_cpu  # numba: imported on first use (slow to import)
    points = rendering_cpu.series_points(values.float().contiguous().numpy(), lengths.long().contiguous().numpy(),
                                         scale, height, width)
    return None if points is None else torch.from_numpy(points)


def draw(out: torch.Tensor, points: torch.Tensor, lengths: torch.Tensor, value: float, on_progress=None,
         chunk: int = 1024) -> bool:
    """1-px aliased polylines into out [B,H,W] (overwritten), points float [B,T,2] (pixel xy),
    lengths int [B]: pixel (i, j) holds the points in [i, i+1) x [j, j+1); a series of fewer than 2
    points leaves its image blank. on_progress(done, total) after every `chunk` images (interrupt
    checks). Draws with numba's loop (uint8 or float32 out, numba installed; a point not finite is a
    gap, as on the torch path), else with OpenCV. Returns False, drawing nothing, where these would
    not give the torch path's pixels: out or points not on the CPU, out of a dtype OpenCV does not draw
    into, a finite point within its series' length outside the frame (OpenCV clips a segment that
    leaves the frame before walking it, which can move its pixels), or for OpenCV one not finite."""
    if out.device.type != "cpu" or out.dtype not in NUMPY_DTYPES or points.device.type != "cpu":
        return False
    if numba_usable(out.device) and out.dtype in (torch.uint8, torch.float32):
        from . import compositor_cpu as rendering_cpu
        return bool(rendering_cpu.polylines(out.numpy(), points.float().contiguous().numpy(),
                                            lengths.long().contiguous().numpy(), value, on_progress, chunk))
    batch, steps = points.shape[:2]
    height, width = out.shape[1:3]
    xy, counts = points.numpy(), lengths.numpy()
    valid = np.arange(steps)[None] < counts[:, None]
    x, y = xy[..., 0][valid], xy[..., 1][valid]
    with np.errstate(invalid="ignore"):  # NaN compares False: not usable
        if not ((x >= 0) & (x < width) & (y >= 0) & (y < height)).all():
            return False
    ends = np.floor(np.nan_to_num(xy)).astype(np.int32)
    images = out.numpy()
    for start in range(0, batch, chunk):
        stop = min(batch, start + chunk)
        for index in range(start, stop):
            images[index] = 0
            if counts[index] > 1:
                cv2.polylines(images[index], [ends[index, :counts[index]]], False, value, 1, cv2.LINE_8)
        if on_progress is not None:
            on_progress(stop, batch)
    return True
