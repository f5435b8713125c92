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


BAND = 64  # columns of a frame's span a thread blurs at a time (its rows' window means stay in its cache)


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
def _blur_union(src, dst, inside, spans, before, after):
    """dst's colour where `inside` (each frame's union mask) within frame b's span (spans [B,4] x0, y0, x1,
    y1): the mean of src's window y - before .. y + after, x - before .. x + after (cut to the frame). For
    each band of BAND columns of a span (the frames' bands in parallel): each row's window means, a sliding
    sum along it (one per colour, in registers), for the rows the band's windows reach, then a sliding sum
    of those down the band's columns."""
    batch, height, width, channels = src.shape
    colours = min(channels, 3)
    c1_, c2_ = min(1, colours - 1), min(2, colours - 1)  # a missing colour reads the last (never written)
    bands = (width + BAND - 1) // BAND
    for job in numba.prange(batch * bands):
        b, k = job // bands, job % bands
        x0, y0, x1, y1 = spans[b, 0], spans[b, 1], spans[b, 2], spans[b, 3]
        start = x0 + k * BAND
        stop = min(start + BAND, x1)
        if stop <= start or y1 <= y0:
            continue
        top, bottom = max(y0 - before, 0), min(y1 + after, height)
        n = (stop - start) * 3
        rows = np.empty((bottom - top, n), np.float32)
        for y in range(top, bottom, 2):  # two rows at a time: six independent sums
            z = min(y + 1, bottom - 1)  # the second row (the first again past the end: the same values)
            t0, t1, t2 = np.float32(0.0), np.float32(0.0), np.float32(0.0)
            u0, u1, u2 = np.float32(0.0), np.float32(0.0), np.float32(0.0)
            for x in range(max(start - before, 0), min(start + after + 1, width)):
                t0 += src[b, y, x, 0]
                t1 += src[b, y, x, c1_]
                t2 += src[b, y, x, c2_]
                u0 += src[b, z, x, 0]
                u1 += src[b, z, x, c1_]
                u2 += src[b, z, x, c2_]
            row, row2 = rows[y - top], rows[z - top]
            for x in range(start, stop):
                if x > start:
                    if x - before - 1 >= 0:
                        w = x - before - 1
                        t0 -= src[b, y, w, 0]
                        t1 -= src[b, y, w, c1_]
                        t2 -= src[b, y, w, c2_]
                        u0 -= src[b, z, w, 0]
                        u1 -= src[b, z, w, c1_]
                        u2 -= src[b, z, w, c2_]
                    if x + after < width:
                        w = x + after
                        t0 += src[b, y, w, 0]
                        t1 += src[b, y, w, c1_]
                        t2 += src[b, y, w, c2_]
                        u0 += src[b, z, w, 0]
                        u1 += src[b, z, w, c1_]
                        u2 += src[b, z, w, c2_]
                scale = np.float32(1.0) / np.float32(min(x + after + 1, width) - max(x - before, 0))
                i = (x - start) * 3
                row[i], row[i + 1], row[i + 2] = t0 * scale, t1 * scale, t2 * scale
                row2[i], row2[i + 1], row2[i + 2] = u0 * scale, u1 * scale, u2 * scale
        totals = np.zeros(n, np.float32)
        for y in range(top, min(y0 + after + 1, height)):
            row = rows[y - top]
            for i in range(n):
                totals[i] += row[i]
        for y in range(y0, y1):
            if y > y0:
                if y - before - 1 >= 0:
                    row = rows[y - before - 1 - top]
                    for i in range(n):
                        totals[i] -= row[i]
                if y + after < height:
                    row = rows[y + after - top]
                    for i in range(n):
                        totals[i] += row[i]
            scale = np.float32(1.0) / np.float32(min(y + after + 1, height) - max(y - before, 0))
            for x in range(start, stop):
                if inside[b, y, x]:
                    for c in range(colours):
                        dst[b, y, x, c] = totals[(x - start) * 3 + c] * scale


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
    dst = np.empty_like(src)
    inside = np.empty(src.shape[:3], np.bool_)
    _dim_outside(src, dst, inside, rects, first, np.float32(1.0 - dim_outside))
    if edit == PIXELATE:
        _pixelate_boxes(src, dst, rects, first, size)
    elif edit == BLUR:
        before, after = size // 2, size - 1 - size // 2
        _blur_union(src, dst, inside, _union_spans(rects, first), before, after)
    return dst
