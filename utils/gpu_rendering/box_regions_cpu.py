"""box_regions' edits compiled for the CPU by numba: one pass that copies the frames (dimmed outside their
boxes) and marks each frame's union of boxes, then the blur or the pixelation. The blur runs once a frame
over the bounds of its boxes' union, sliding sums along its rows then down its columns (rows, bands of
columns in parallel), and writes the union's pixels (overlapping boxes blurred once, as the torch path's
whole-frame blur); the pixelation each box's blocks. box_regions.py chooses it where numba runs; it gives
the torch path's pixels (to float32 rounding: its sums slide from the union's edge where the torch path's
run from the frame's).

Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np

from ..core.numba import falls_back, jit, torch_threads

NONE, BLUR, PIXELATE = 0, 1, 2  # the `edit` argument, in box_regions.INSIDE_EDITS' order


BAND = 64  # columns a thread takes at a time in the blur's pass down the columns


@jit(parallel=True)
def _dim_outside(src, dst, inside, rects, first, keep):
    """dst = src, its colour times `keep` where no box of its frame covers the pixel (rects int64 [N,4]:
    first column, first row, stop column, stop row; the boxes of frame b at first[b]:first[b + 1]); inside
    bool [B,H,W] set to those pixels' union mask."""
    batch, height, width, channels = src.shape
    for job in numba.prange(batch * height):
        b, y = job // height, job % height
        row = inside[b, y]
        row[:] = False
        for i in range(first[b], first[b + 1]):
            if rects[i, 1] <= y < rects[i, 3]:
                row[rects[i, 0] : rects[i, 2]] = True
        for x in range(width):
            scale = np.float32(1.0) if row[x] else keep
            for c in range(min(channels, 3)):
                dst[b, y, x, c] = src[b, y, x, c] * scale
            for c in range(3, channels):
                dst[b, y, x, c] = src[b, y, x, c]


@jit()
def _union_spans(rects, first):
    """int64 [B,4]: the first column, first row, stop column and stop row of the bounds of each frame's
    nonempty rects (all 0 for a frame without one)."""
    batch = first.shape[0] - 1
    spans = np.zeros((batch, 4), np.int64)
    for b in range(batch):
        found = False
        for i in range(first[b], first[b + 1]):
            if rects[i, 2] <= rects[i, 0] or rects[i, 3] <= rects[i, 1]:
                continue
            if not found:
                spans[b] = rects[i]
                found = True
            else:
                spans[b, 0], spans[b, 1] = min(spans[b, 0], rects[i, 0]), min(spans[b, 1], rects[i, 1])
                spans[b, 2], spans[b, 3] = max(spans[b, 2], rects[i, 2]), max(spans[b, 3], rects[i, 3])
    return spans


@jit(parallel=True)
def _row_means(src, rows, spans, before, after):
    """rows[b, r, x - x0]: the mean of src's pixels x - before .. x + after (cut to the frame) of row
    max(y0 - before, 0) + r, for the columns x0 .. x1 of frame b's span (spans [B,4] x0, y0, x1, y1) and
    the rows its vertical windows reach; a sliding sum along each row, the rows in parallel."""
    batch, height, width, channels = src.shape
    colours = min(channels, 3)
    depth = rows.shape[1]
    for job in numba.prange(batch * depth):
        b, r = job // depth, job % depth
        x0, y0, x1, y1 = spans[b, 0], spans[b, 1], spans[b, 2], spans[b, 3]
        y = max(y0 - before, 0) + r
        if x1 <= x0 or y >= min(y1 + after, height):
            continue
        total = np.zeros(colours, np.float32)
        for x in range(max(x0 - before, 0), min(x0 + after + 1, width)):
            for c in range(colours):
                total[c] += src[b, y, x, c]
        for x in range(x0, x1):
            if x > x0:
                if x - before - 1 >= 0:
                    for c in range(colours):
                        total[c] -= src[b, y, x - before - 1, c]
                if x + after < width:
                    for c in range(colours):
                        total[c] += src[b, y, x + after, c]
            scale = np.float32(1.0) / np.float32(min(x + after + 1, width) - max(x - before, 0))
            for c in range(colours):
                rows[b, r, x - x0, c] = total[c] * scale


@jit(parallel=True)
def _column_means(rows, dst, inside, spans, before, after):
    """dst's colour where `inside` (frame b's union mask, within its span): the mean of rows' (_row_means)
    window means over the rows y - before .. y + after (cut to the frame); a sliding sum down each band of
    BAND columns, the frames' bands in parallel."""
    batch, height, width, _ = dst.shape
    colours = rows.shape[3]
    bands = (rows.shape[2] + BAND - 1) // BAND
    for job in numba.prange(batch * bands):
        b, k = job // bands, job % bands
        x0, y0, x1, y1 = spans[b, 0], spans[b, 1], spans[b, 2], spans[b, 3]
        c0 = k * BAND  # the band's first column, from x0
        c1 = min(c0 + BAND, x1 - x0)
        if c1 <= c0:
            continue
        top = max(y0 - before, 0)
        totals = np.zeros((c1 - c0, colours), np.float32)
        for y in range(top, min(y0 + after + 1, height)):
            totals += rows[b, y - top, c0:c1]
        for y in range(y0, y1):
            if y > y0:
                if y - before - 1 >= 0:
                    totals -= rows[b, y - before - 1 - top, c0:c1]
                if y + after < height:
                    totals += rows[b, y + after - top, c0:c1]
            scale = np.float32(1.0) / np.float32(min(y + after + 1, height) - max(y - before, 0))
            for x in range(c0, c1):
                if inside[b, y, x0 + x]:
                    for c in range(colours):
                        dst[b, y, x0 + x, c] = totals[x - c0, c] * scale


@jit(parallel=True)
def _pixelate_boxes(src, dst, rects, first, size):
    """The colour of each box's pixels in dst: box_regions.pixelated's of src. The frames in parallel,
    their boxes in order."""
    batch, height, width, channels = src.shape
    colours = min(channels, 3)
    for b in numba.prange(batch):
        for i in range(first[b], first[b + 1]):
            x0, y0, x1, y1 = rects[i, 0], rects[i, 1], rects[i, 2], rects[i, 3]
            if x1 <= x0 or y1 <= y0:
                continue
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


@falls_back
def edit_regions(src: np.ndarray, rects: np.ndarray, first: np.ndarray, edit: int, size: int, dim_outside: float):
    """box_regions.edit_regions of float32 frames src [B,H,W,C] and the boxes' pixel rects int64 [N,4] in
    frame order (frame b's at first[b]:first[b + 1]): a new array."""
    torch_threads()
    batch, height, width, channels = src.shape
    dst = np.empty_like(src)
    inside = np.empty((batch, height, width), np.bool_)
    _dim_outside(src, dst, inside, rects, first, np.float32(1.0 - dim_outside))
    if edit == PIXELATE:
        _pixelate_boxes(src, dst, rects, first, size)
    elif edit == BLUR:
        before, after = size // 2, size - 1 - size // 2
        spans = _union_spans(rects, first)
        depth = int((np.minimum(spans[:, 3] + after, height) - np.maximum(spans[:, 1] - before, 0)).max(initial=0))
        columns = int((spans[:, 2] - spans[:, 0]).max(initial=0))
        if depth > 0 and columns > 0:
            rows = np.empty((batch, depth, columns, min(channels, 3)), np.float32)
            _row_means(src, rows, spans, before, after)
            _column_means(rows, dst, inside, spans, before, after)
    return dst
