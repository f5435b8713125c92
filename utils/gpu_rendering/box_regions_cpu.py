"""box_regions' edits compiled for the CPU by numba: one pass that copies the frames (dimmed outside their
boxes), then the blur or pixelation of each box's pixels only (the torch path blurs whole frames), each
frame on its own thread. box_regions.py chooses it where numba runs; it gives the torch path's pixels
(to float32 rounding: its running sums start at each box rather than at the frame's edge).

Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np

from ..core.numba import falls_back, jit, torch_threads

NONE, BLUR, PIXELATE = 0, 1, 2  # the `edit` argument, in box_regions.INSIDE_EDITS' order


@jit(parallel=True)
def _dim_outside(src, dst, rects, first, keep):
    """dst = src, its colour times `keep` where no box of its frame covers the pixel (rects int64 [N,4]:
    first column, first row, stop column, stop row; the boxes of frame b at first[b]:first[b + 1])."""
    batch, height, width, channels = src.shape
    for job in numba.prange(batch * height):
        b, y = job // height, job % height
        inside = np.zeros(width, np.bool_)
        for i in range(first[b], first[b + 1]):
            if rects[i, 1] <= y < rects[i, 3]:
                inside[rects[i, 0] : rects[i, 2]] = True
        for x in range(width):
            scale = np.float32(1.0) if inside[x] else keep
            for c in range(min(channels, 3)):
                dst[b, y, x, c] = src[b, y, x, c] * scale
            for c in range(3, channels):
                dst[b, y, x, c] = src[b, y, x, c]


@jit(parallel=True)
def _edit_boxes(src, dst, rects, first, edit, size):
    """The colour of each box's pixels in dst: box_regions.box_blur's (edit BLUR) or pixelated's (PIXELATE)
    of src. The frames in parallel, their boxes in order (where boxes overlap, the later one's sums)."""
    batch, height, width, channels = src.shape
    colours = min(channels, 3)
    before = size // 2
    after = size - 1 - before
    for b in numba.prange(batch):
        for i in range(first[b], first[b + 1]):
            x0, y0, x1, y1 = rects[i, 0], rects[i, 1], rects[i, 2], rects[i, 3]
            if x1 <= x0 or y1 <= y0:
                continue
            if edit == PIXELATE:
                for by in range(y0 // size, (y1 - 1) // size + 1):
                    for bx in range(x0 // size, (x1 - 1) // size + 1):
                        top, left = by * size, bx * size
                        bottom, right = min(top + size, height), min(left + size, width)
                        count = np.float32((bottom - top) * (right - left))
                        for c in range(colours):
                            total = np.float32(0.0)
                            for y in range(top, bottom):
                                for x in range(left, right):
                                    total += src[b, y, x, c]
                            mean = total / count
                            for y in range(max(top, y0), min(bottom, y1)):
                                for x in range(max(left, x0), min(right, x1)):
                                    dst[b, y, x, c] = mean
                continue
            # blur: each row's window means from its running sums (over the box's columns and the window's
            # reach), then the columns' window sums of those, a row of them at a time
            top, bottom = max(y0 - before, 0), min(y1 + after, height)
            left, right = max(x0 - before, 0), min(x1 + after, width)
            rows = np.empty((bottom - top, x1 - x0, colours), np.float32)
            running = np.empty((right - left + 1, colours), np.float32)
            running[0] = 0
            for y in range(top, bottom):
                for x in range(left, right):
                    for c in range(colours):
                        running[x - left + 1, c] = running[x - left, c] + src[b, y, x, c]
                for x in range(x0, x1):
                    lo, hi = max(x - before, 0), min(x + after + 1, width)
                    scale = np.float32(1.0) / np.float32(hi - lo)
                    for c in range(colours):
                        rows[y - top, x - x0, c] = (running[hi - left, c] - running[lo - left, c]) * scale
            totals = np.zeros((x1 - x0, colours), np.float32)
            for y in range(top, min(y0 + after + 1, height)):
                totals += rows[y - top]
            for y in range(y0, y1):
                if y > y0:
                    if y - before - 1 >= 0:
                        for x in range(x1 - x0):
                            for c in range(colours):
                                totals[x, c] -= rows[y - before - 1 - top, x, c]
                    if y + after < height:
                        for x in range(x1 - x0):
                            for c in range(colours):
                                totals[x, c] += rows[y + after - top, x, c]
                scale = np.float32(1.0) / np.float32(min(y + after + 1, height) - max(y - before, 0))
                for x in range(x1 - x0):
                    for c in range(colours):
                        dst[b, y, x0 + x, c] = totals[x, c] * scale


@falls_back
def edit_regions(src: np.ndarray, rects: np.ndarray, first: np.ndarray, edit: int, size: int, dim_outside: float):
    """box_regions.edit_regions of float32 frames src [B,H,W,C] and the boxes' pixel rects int64 [N,4] in
    frame order (frame b's at first[b]:first[b + 1]): a new array."""
    torch_threads()
    dst = np.empty_like(src)
    _dim_outside(src, dst, rects, first, np.float32(1.0 - dim_outside))
    if edit != NONE:
        _edit_boxes(src, dst, rects, first, edit, size)
    return dst
