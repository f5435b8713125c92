"""The line plots' loops compiled for the CPU by numba: aliased polylines, Bresenham's algorithm as the
torch path (line_plots.py, and OpenCV) walks it, one image per iteration, into images or as bits
(polylines_packed, for render_polylines_packed), and the plots' points,
series_points' float32 arithmetic in one pass (bench/bench_series.py). line_plots.py chooses them where
numba runs.

All run in parallel on as many threads as torch uses (ComfyUI's and the user's setting; never more).
Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np

from ..core.numba import falls_back, jit, torch_threads


@jit(parallel=True)
def _value_range(values, counts):
    """(low, high) float32 [B] of the finite values among the first counts[b] of each series values
    [B,T]; (inf, -inf) where there are none (line_plots.value_range's "per_image")."""
    low = np.full(values.shape[0], np.inf, np.float32)
    high = np.full(values.shape[0], -np.inf, np.float32)
    for b in numba.prange(values.shape[0]):
        for t in range(counts[b]):
            v = values[b, t]
            if np.isfinite(v):
                low[b], high[b] = min(low[b], v), max(high[b], v)
    return low, high


@jit(parallel=True)
def _series_points(values, counts, low, high, height, width):
    """line_plots.series_points of y values [B,T] with (low, high) [B], in its float32 arithmetic
    and order of operations: the same points [B,T,2], NaN at padding and non-finite values."""
    batch, steps = values.shape
    points = np.empty((batch, steps, 2), np.float32)
    top, rows = np.float32(height - 0.5), np.float32(height - 1)
    biggest = np.float32(np.finfo(np.float32).max)
    for b in numba.prange(batch):
        spacing = np.float32(max(counts[b] - 1, 1))
        span = high[b] - low[b]
        for t in range(steps):
            v = values[b, t]
            if t < counts[b] and np.isfinite(v):
                unit = (v - low[b]) / span
                if np.isnan(unit):  # a flat series: 0 / 0, the middle row (nan_to_num_(0.5))
                    unit = np.float32(0.5)
                elif np.isinf(unit):
                    unit = biggest if unit > 0 else -biggest
                points[b, t, 0] = np.float32(0.5) + np.float32(t * (width - 1)) / spacing
                points[b, t, 1] = top - unit * rows
            else:
                points[b, t, 0] = points[b, t, 1] = np.nan
    return points


@jit(parallel=True)
def _inside(points, counts, height, width):
    """Whether each of the first counts[b] points of each series is inside the frame or a gap (a
    coordinate not finite)."""
    inside = np.ones(points.shape[0], np.bool_)
    for b in numba.prange(points.shape[0]):
        for t in range(counts[b]):
            x, y = points[b, t, 0], points[b, t, 1]
            if np.isfinite(x) and np.isfinite(y) and not (x >= 0 and x < width and y >= 0 and y < height):
                inside[b] = False
                break
    return inside


# The minor coordinate of a segment's step i is (2 i minor + major) // (2 major) (Bresenham's error
# term, as line_plots._lines computes it), taken as a product with a rounded-up reciprocal: exact
# while numerator x divisor < 2**_SHIFT, i.e. for segments up to MAX_EXTENT pixels long; independent
# of the previous step, so no branch to mispredict (measured 1.5x the incremental error term)
_SHIFT = 44
MAX_EXTENT = 16384


@jit(inline="always")
def _segment(points, b, t):
    """Bresenham's walk of segment t of series b (points [B,T,2]): (steps, minor extent, its divisor,
    the divisor's reciprocal, the first pixel x and y, the x and y of a major step, of a minor step);
    steps -1 across a gap (a point not finite). Walked from the end with the larger x (see
    line_plots._lines); step i's pixel is first + i major + minor_i minor_step, minor_i =
    ((2 minor i + divisor) reciprocal) >> _SHIFT."""
    if not (np.isfinite(points[b, t, 0] + points[b, t, 1]) and np.isfinite(points[b, t + 1, 0] + points[b, t + 1, 1])):
        return -1, 0, 1, 0, 0, 0, 0, 0, 0, 0
    # the pixels holding the ends
    ax, ay = np.int64(np.floor(points[b, t, 0])), np.int64(np.floor(points[b, t, 1]))
    bx, by = np.int64(np.floor(points[b, t + 1, 0])), np.int64(np.floor(points[b, t + 1, 1]))
    if ax < bx:
        ax, ay, bx, by = bx, by, ax, ay
    dx, dy = bx - ax, by - ay
    sx, sy = (dx > 0) - (dx < 0), (dy > 0) - (dy < 0)
    if abs(dx) >= abs(dy):
        major, minor, mx, my, nx, ny = abs(dx), abs(dy), sx, 0, 0, sy
    else:
        major, minor, mx, my, nx, ny = abs(dy), abs(dx), 0, sy, sx, 0
    length = max(major, 1)
    return major, minor, length, ((1 << _SHIFT) + 2 * length - 1) // (2 * length), ax, ay, mx, my, nx, ny


@jit(parallel=True)
def _polylines(out, points, counts, value, start, stop):
    height, width = out.shape[1], out.shape[2]
    flat = out.reshape(out.shape[0], height * width)
    for b in numba.prange(start, stop):
        image = flat[b]
        image[:] = 0  # cleared here, in cache, rather than as a separate pass over the batch
        for t in range(counts[b] - 1):
            major, minor, length, reciprocal, ax, ay, mx, my, nx, ny = _segment(points, b, t)
            origin, step, side = ay * width + ax, my * width + mx, ny * width + nx
            for i in range(major + 1):
                minor_steps = ((2 * minor * i + length) * reciprocal) >> _SHIFT
                image[np.uint64(origin + i * step + minor_steps * side)] = value


@jit(parallel=True)
def _polylines_packed(out, points, counts, start, stop):
    """_polylines' pixels as set bits of out uint8 [B,H,ceil(W/8)] (np.packbits' order: the leftmost
    pixel the high bit): 1/8 of the bytes to clear and keep."""
    for b in numba.prange(start, stop):
        image = out[b]
        image[:] = 0
        for t in range(counts[b] - 1):
            major, minor, length, reciprocal, ax, ay, mx, my, nx, ny = _segment(points, b, t)
            for i in range(major + 1):
                minor_steps = ((2 * minor * i + length) * reciprocal) >> _SHIFT
                x = ax + i * mx + minor_steps * nx
                image[ay + i * my + minor_steps * ny, x >> 3] |= np.uint8(0x80 >> (x & 7))


@falls_back
def series_points(values: np.ndarray, counts: np.ndarray, scale: str, height: int, width: int):
    """line_plots.series_points of y values float32 [B,T] (counts int64 [B]) over the (low, high) of
    line_plots.value_range(scale): the same points float32 [B,T,2], in one pass each."""
    torch_threads()
    low, high = _value_range(values, counts)
    if scale == "shared" and len(low):
        low, high = np.full_like(low, low.min()), np.full_like(high, high.max())
    return _series_points(values, counts, low, high, height, width)


@falls_back
def polylines(
    images: np.ndarray, points: np.ndarray, counts: np.ndarray, value: float, on_progress=None, chunk: int = 1024
) -> bool:
    """1-px aliased polylines into images uint8 or float32 [B,H,W] (overwritten), points float32 [B,T,2]
    (pixel xy; pixel (i, j) holds the points in [i, i+1) x [j, j+1); a point with a coordinate not
    finite is a gap), counts int64 [B]: the torch path's pixels. Returns False, drawing nothing, if a
    finite point within its series' count is outside the frame (the torch path clips those segments)
    or the frame is over MAX_EXTENT pixels wide or high. on_progress(done, total) after every `chunk`
    images."""
    torch_threads()
    batch, height, width = images.shape
    if max(height, width) > MAX_EXTENT or not _inside(points, counts, height, width).all():
        return False
    for start in range(0, batch, chunk):
        stop = min(batch, start + chunk)
        _polylines(images, points, counts, images.dtype.type(value), start, stop)
        if on_progress is not None:
            on_progress(stop, batch)
    return True


@falls_back
def polylines_packed(
    bits: np.ndarray, points: np.ndarray, counts: np.ndarray, width: int, on_progress=None, chunk: int = 1024
) -> bool:
    """polylines' pixels in a frame `width` pixels wide as set bits of bits uint8 [B,H,ceil(width/8)]
    (overwritten; the leftmost pixel of each byte its high bit); the same arguments, checks and result."""
    torch_threads()
    batch, height = bits.shape[:2]
    if max(height, width) > MAX_EXTENT or not _inside(points, counts, height, width).all():
        return False
    for start in range(0, batch, chunk):
        stop = min(batch, start + chunk)
        _polylines_packed(bits, points, counts, start, stop)
        if on_progress is not None:
            on_progress(stop, batch)
    return True
