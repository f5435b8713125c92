"""The mask overlay's passes over the masks compiled for the CPU by numba (masks.py chooses them where numba
runs): the tile peaks in one read of every mask, then the listed tiles' pixels, their marching-squares pieces
and the objects' bounds and centroid sums, each a loop over the listed tiles only. The same tiles, values
and pieces as the torch path's (its float32 arithmetic, its order), without its frame-sized temporaries and
its hundreds of small operations: on the CPU those cost several times the one read of the masks.

The longer loops run in parallel on as many threads as torch uses (ComfyUI's and the user's setting; never
more); the short ones (the pieces' count and join, the primitives' fields) on one, where a second did not
pay. Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np

from ..core.numba import falls_back, jit, prefetch, torch_threads
from .constants import (
    N_PARAMS,
    SEGMENT,
    SEGMENT_AX,
    SEGMENT_AY,
    SEGMENT_BX,
    SEGMENT_BY,
    SEGMENT_HALF_WIDTH,
    SPRITE,
    SPRITE_ATLAS_X,
    SPRITE_ATLAS_Y,
    SPRITE_HEIGHT,
    SPRITE_WIDTH,
    SPRITE_X0,
    SPRITE_Y0,
    TILE,
)

# Marching squares (masks._CASES, the torch path's table): the edges joined by each case's two pieces
# (-1: none), cases 16 and 17 the saddles whose centre is inside
_CASE_EDGES = np.array(
    [
        [-1, -1, -1, -1],
        [3, 0, -1, -1],
        [0, 1, -1, -1],
        [3, 1, -1, -1],
        [1, 2, -1, -1],
        [3, 0, 1, 2],
        [0, 2, -1, -1],
        [2, 3, -1, -1],
        [2, 3, -1, -1],
        [0, 2, -1, -1],
        [0, 1, 2, 3],
        [1, 2, -1, -1],
        [3, 1, -1, -1],
        [0, 1, -1, -1],
        [3, 0, -1, -1],
        [-1, -1, -1, -1],
        [0, 1, 2, 3],
        [3, 0, 1, 2],
    ],
    np.int64,
)


@jit(inline="always")
def _larger(a, b):
    return a if a > b else b


@jit(inline="always")
def _larger8(v, i):
    """The largest of v[i .. i + 7], a tree of comparisons (a chain waits on each one in turn)."""
    return _larger(
        _larger(_larger(v[i], v[i + 1]), _larger(v[i + 2], v[i + 3])),
        _larger(_larger(v[i + 4], v[i + 5]), _larger(v[i + 6], v[i + 7])),
    )


@jit(inline="always")
def _sum8(v, i):
    """v[i] + ... + v[i + 7] as a tree of additions."""
    return ((v[i] + v[i + 1]) + (v[i + 2] + v[i + 3])) + ((v[i + 4] + v[i + 5]) + (v[i + 6] + v[i + 7]))


@jit(parallel=True)
def _tile_peaks(masks, bits, parts):
    """masks.tile_peaks of float32 masks [M,H,W] (bits: the same memory as int32 [M*H*W]): each band of T
    rows of a mask read once. Most bands of a mask are empty: a first loop ORs the band's bits, all 0 but
    the sign's where every pixel is 0 (an OR vectorises; a float maximum does not, for NaN's rules), and
    only the other bands are read again, from the cache, 8 rows at a time where the band is whole (each
    column's maximum and sum in registers), then each tile's maximum of its columns. NaN where a tile holds
    a NaN: a NaN loses every comparison, so the sums find it: a tile whose sum is not finite (a NaN, an
    infinity, an overflow; rare) is read again after the bands. `parts` consecutive runs of bands."""
    count, height, width = masks.shape
    rows, columns = (height + TILE - 1) // TILE, (width + TILE - 1) // TILE
    peak = np.empty((count, rows, columns), np.float32)
    unusual = np.zeros(count * rows, np.bool_)  # a band with a tile whose sum is not finite
    jobs = count * rows
    for part in numba.prange(parts):
        best = np.empty(width, np.float32)  # each column's maximum over the band
        total = np.empty(width, np.float32)  # and its sum
        for job in range(part * jobs // parts, (part + 1) * jobs // parts):
            m, ty = job // rows, job % rows
            y0 = ty * TILE
            y1 = min(y0 + TILE, height)
            any_bit = np.int32(0)
            for i in range(np.uint64((m * height + y0) * width), np.uint64((m * height + y1) * width)):
                any_bit |= bits[i]  # the band's rows are one run of memory (a view per row cost more)
            if any_bit & np.int32(0x7FFFFFFF) == 0:
                for tx in range(columns):
                    peak[m, ty, tx] = np.float32(0.0)
                continue
            if y1 - y0 == 8:
                r0, r1, r2, r3 = masks[m, y0], masks[m, y0 + 1], masks[m, y0 + 2], masks[m, y0 + 3]
                r4, r5, r6, r7 = masks[m, y0 + 4], masks[m, y0 + 5], masks[m, y0 + 6], masks[m, y0 + 7]
                for x in range(np.uint64(width)):  # unsigned: no wrap-around checks, the loop vectorises
                    v0, v1, v2, v3, v4, v5, v6, v7 = r0[x], r1[x], r2[x], r3[x], r4[x], r5[x], r6[x], r7[x]
                    best[x] = _larger(
                        _larger(_larger(v0, v1), _larger(v2, v3)), _larger(_larger(v4, v5), _larger(v6, v7))
                    )
                    total[x] = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))
            else:
                first = masks[m, y0]
                for x in range(np.uint64(width)):
                    best[x] = first[x]
                    total[x] = first[x]
                for y in range(y0 + 1, y1):
                    row = masks[m, y]
                    for x in range(np.uint64(width)):
                        best[x] = _larger(row[x], best[x])
                        total[x] += row[x]
            odd = False
            for tx in range(columns):
                x0, x1 = tx * TILE, min(tx * TILE + TILE, width)
                if x1 - x0 == 8:
                    top, check = _larger8(best, x0), _sum8(total, x0)
                else:
                    top, check = best[x0], total[x0]
                    for x in range(x0 + 1, x1):
                        top = _larger(best[x], top)
                        check += total[x]
                peak[m, ty, tx] = top
                odd = odd or check - check != 0
            unusual[job] = odd
    # the rare bands read again, in parallel only where there are some (a parallel loop over every band to
    # find none of them took ~0.05 ms on the 2-core test machine)
    found = np.flatnonzero(unusual)
    if found.shape[0] > 0:
        for k in numba.prange(found.shape[0]):
            m, ty = found[k] // rows, found[k] % rows
            for tx in range(columns):  # NaN where a NaN is (it wins the torch path's maximum)
                for y in range(ty * TILE, min(ty * TILE + TILE, height)):
                    for x in range(tx * TILE, min(tx * TILE + TILE, width)):
                        if masks[m, y, x] != masks[m, y, x]:
                            peak[m, ty, tx] = np.float32(np.nan)
    return peak


@jit(inline="always")
def _unit(v):
    """nan_to_num(v, nan=0, posinf=1, neginf=0) clamped to 0..1: fmax gives 0 for NaN, without the branches
    that comparisons compiled to (~0.1 ms of the listing at 1080p)."""
    return np.fmin(np.fmax(v, np.float32(0.0)), np.float32(1.0))


@jit(inline="always")
def _near(grid, m, y, x, outside):
    """masks._near: grid [M,Y,X] is True at (m, y, x) or the tile above, to the left or above-left of it
    (`outside` beyond the grid)."""
    up, left = y > 0, x > 0
    return (
        grid[m, y, x]
        or (grid[m, y - 1, x] if up else outside)
        or (grid[m, y, x - 1] if left else outside)
        or (grid[m, y - 1, x - 1] if up and left else outside)
    )


@jit(inline="always")
def _filled_bounds(peak, m):
    """The first row, stop row, first column and stop column of the tiles with mask in them (a peak above
    0 or NaN: not at or below 0) of source m; stop row 0 where there are none. Each row's tiles at or
    below 0 are counted first (a loop that vectorises): most rows have none with mask."""
    rows, columns = peak.shape[1], peak.shape[2]
    top, bottom, left, right = rows, 0, columns, 0
    for y in range(rows):
        empty = 0
        for x in range(np.uint64(columns)):
            empty += peak[m, y, x] <= 0
        if empty == columns:
            continue
        top, bottom = min(top, y), y + 1
        x = 0
        while peak[m, y, x] <= 0:
            x += 1
        left = min(left, x)
        x = columns - 1
        while peak[m, y, x] <= 0:
            x -= 1
        right = max(right, x + 1)
    return top, bottom, left, right


@jit(parallel=True)
def _listed_counts(peak, grid_y, grid_x, outlines):
    """masks.overlay_memory's count per source of the tiles (of a grid_y x grid_x grid) with mask in them,
    or, with outlines, with it in them or above, left or above-left of them; int64 [M]."""
    count = peak.shape[0]
    counts = np.zeros(count, np.int64)
    for m in numba.prange(count):
        top, bottom, left, right = _filled_bounds(peak, m)
        n = 0
        for y in range(top, min(bottom + outlines, grid_y)):
            for x in range(left, min(right + outlines, grid_x)):
                filled = False
                for dy in range(2 if outlines else 1):
                    for dx in range(2 if outlines else 1):
                        yy, xx = y - dy, x - dx
                        if 0 <= yy < peak.shape[1] and 0 <= xx < peak.shape[2]:
                            v = peak[m, yy, xx]
                            filled = filled or v != v or v > 0
                n += filled
        counts[m] = n
    return counts


@jit(inline="always")
def _prefetch_row(masks, m, y, span, fill, reach):
    """Asks for the pixels of the tiles of row y of tiles of mask m that _list_tiles will read: each of
    their T + 1 rows, its first and last pixel (one or two cache lines)."""
    height, width = masks.shape[1], masks.shape[2]
    for x in range(span[m, 2], span[m, 3]):
        if fill[m, y, x] or reach[m, y, x]:
            for i in range(TILE + 1):
                yy = min(y * TILE - 1 + i, height - 1)  # y >= 2
                prefetch(masks, m, yy, max(x * TILE - 1, 0))
                prefetch(masks, m, yy, min(x * TILE + TILE - 1, width - 1))


@jit(parallel=True)
def _list_tiles(masks, peak, threshold, outlines):
    """masks._list_tiles with the masks' tile peaks known: the same pairs in the same order, values and
    flags. The grid's extra row and column (the cells on the bottom and right edges) have no peak."""
    count, height, width = masks.shape
    grid_y, grid_x = height // TILE + 1, width // TILE + 1
    fill = np.zeros((count, grid_y, grid_x), np.bool_)
    reach = np.zeros((count, grid_y, grid_x), np.bool_)  # the tiles whose cells reach a tile above the level
    starts = np.zeros(count + 1, np.int64)  # the pairs of each source, then where they start
    # each source's listed tiles lie within the bounds of its filled ones (above the level is filled too),
    # one more row and column down and right (the cells reaching them): the grids are worked there only
    span = np.zeros((count, 4), np.int64)  # first row, stop row, first column, stop column
    for m in numba.prange(count):
        top, bottom, left, right = _filled_bounds(peak, m)
        if bottom == 0:
            continue
        bottom, right = min(bottom + outlines, grid_y), min(right + outlines, grid_x)
        span[m, 0], span[m, 1], span[m, 2], span[m, 3] = top, bottom, left, right
        for y in range(top, min(bottom, peak.shape[1])):
            for x in range(left, min(right, peak.shape[2])):
                v = peak[m, y, x]
                fill[m, y, x] = v != v or v > 0
                reach[m, y, x] = outlines and (v != v or v > threshold)
        if outlines:  # from the bottom right: each tile's own above-threshold flag is read before it changes
            for y in range(bottom - 1, top - 1, -1):
                for x in range(right - 1, left - 1, -1):
                    reach[m, y, x] = _near(reach, m, y, x, False)
        n = 0
        for y in range(top, bottom):
            for x in range(left, right):
                n += fill[m, y, x] or reach[m, y, x]
        starts[m + 1] = n
    for m in range(count):
        starts[m + 1] += starts[m]
    pairs = starts[count]
    source, ty, tx = np.empty(pairs, np.int64), np.empty(pairs, np.int64), np.empty(pairs, np.int64)
    fills, cells = np.empty(pairs, np.bool_), np.empty(pairs, np.bool_)
    values = np.empty((pairs, TILE + 1, TILE + 1), np.float32)
    below = np.ones((count, grid_y, grid_x), np.bool_)  # a cell is under the level here (not listed: yes)
    for m in numba.prange(count):
        p = starts[m]
        for y in range(span[m, 0], span[m, 1]):
            first = p  # the listed tiles of this row of tiles: first .. p - 1
            # their pixels two rows of tiles on asked for now: they are scattered, and the masks' pass before
            # this one left none of them in cache (the first two rows too: no faster)
            if y + 2 < span[m, 1]:
                _prefetch_row(masks, m, y + 2, span, fill, reach)
            for x in range(span[m, 2], span[m, 3]):
                if fill[m, y, x] or reach[m, y, x]:
                    source[p], ty[p], tx[p], fills[p], cells[p] = m, y, x, fill[m, y, x], reach[m, y, x]
                    p += 1
            # pixel row after pixel row, each along its tiles: the reads go forward through memory, as the
            # prefetcher follows them (a tile's 9 rows at a time were 9 jumps of a frame's width)
            for i in range(TILE + 1):
                yy = y * TILE - 1 + i
                inside = 0 <= yy < height
                for q in range(first, p):  # indexed, not through row views (each view costs reference counting)
                    x0 = tx[q] * TILE - 1
                    if inside and x0 >= 0 and x0 + TILE < width:  # the row's T + 1 pixels lie in the frame
                        for j in range(TILE + 1):
                            values[q, i, j] = _unit(masks[m, yy, x0 + j])
                    else:
                        for j in range(TILE + 1):
                            inner = inside and 0 <= x0 + j < width
                            values[q, i, j] = _unit(masks[m, yy, x0 + j]) if inner else np.float32(0.0)
            # a pixel of the tile (not of its one-pixel border) at or below the level, or a row below the frame
            below_frame = y * TILE + TILE > height
            for q in range(first, p):
                low = below_frame
                for i in range(1, TILE + 1):
                    for j in range(1, TILE + 1):
                        low = low or values[q, i, j] <= threshold
                below[m, y, tx[q]] = low
    if outlines:
        # a cell crosses the level only where its tiles hold values on both sides of it (a loop too short to
        # repay waking the other threads)
        for p in range(pairs):
            cells[p] = cells[p] and _near(below, source[p], ty[p], tx[p], True)
    return source, ty, tx, values, fills, cells


@jit(inline="always")
def _cross(lo, hi, threshold):
    """Where the level crosses an edge from lo to hi, 0..1 along it (masks._contour_pieces' cross)."""
    step = np.float32(1.0) if hi == lo else hi - lo
    return min(max((threshold - lo) / step, np.float32(0.0)), np.float32(1.0))


@jit(inline="always")
def _crossing(edge, x, y, a00, a01, a10, a11, threshold):
    """Where the level crosses edge 0..3 (top, right, bottom, left) of the cell whose top-left pixel centre
    is x, y and corner values a00, a01, a10, a11 (found where a piece ends there, not four per cell)."""
    if edge == 0:
        return x + _cross(a00, a01, threshold), y
    if edge == 1:
        return x + np.float32(1.0), y + _cross(a01, a11, threshold)
    if edge == 2:
        return x + _cross(a10, a11, threshold), y + np.float32(1.0)
    return x, y + _cross(a00, a10, threshold)


@jit(inline="always")
def _case(values, p, cy, cx, threshold):
    """The marching-squares case of cell (cy, cx) of pair p: 0..15, 16 and 17 for the saddles whose centre
    is inside."""
    c00, c01 = values[p, cy, cx], values[p, cy, cx + 1]
    c10, c11 = values[p, cy + 1, cx], values[p, cy + 1, cx + 1]
    case = (c00 > threshold) + 2 * (c01 > threshold) + 4 * (c11 > threshold) + 8 * (c10 > threshold)
    if (case == 5 or case == 10) and (c00 + c01 + c10 + c11) / np.float32(4.0) > threshold:
        case = case // 5 + 15
    return case


# The number of ones in each byte (a popcount)
_ONES = np.array([bin(byte).count("1") for byte in range(256)], np.int64)


@jit(inline="always")
def _above(values, p, i, threshold):
    """Row i of pair p's values as bits: bit j is set where values[p, i, j] is above the level."""
    bits = 0
    for j in range(TILE + 1):
        bits |= np.int64(values[p, i, j] > threshold) << j
    return bits


@jit(inline="always")
def _crossed(top, bottom):
    """The cells of a row (bit cx: cell cx) whose corners, rows top and bottom of _above, lie on both
    sides of the level: the marching-squares cases other than 0 and 15, the cells with pieces."""
    a, b = top & 0xFF, (top >> 1) & 0xFF
    return (a ^ b) | (a ^ (bottom & 0xFF)) | (a ^ ((bottom >> 1) & 0xFF))


@jit(inline="always")
def _saddles(top, bottom):
    """The cells of a row (as _crossed) whose diagonal corners are alike and differ from the other two: the
    saddles, two pieces each."""
    a, b = top & 0xFF, (top >> 1) & 0xFF
    c, d = bottom & 0xFF, (bottom >> 1) & 0xFF
    return ~((a ^ d) | (b ^ c)) & (a ^ b) & 0xFF


@jit()
def _piece_starts(values, cells, threshold):
    """The pairs with cells (keep int64 [K]) and where each one's marching-squares pieces start in
    _contour_pieces' output (first int64 [K + 1]: the last, their count). Each cell on the level has one
    piece, a saddle two: counted a row of cells at a time from the corners' bits (one thread: the loop took
    as long on two)."""
    keep = np.flatnonzero(cells)
    first = np.zeros(keep.shape[0] + 1, np.int64)
    for k in range(keep.shape[0]):
        n = 0
        top = _above(values, keep[k], 0, threshold)
        for cy in range(TILE):
            bottom = _above(values, keep[k], cy + 1, threshold)
            n += _ONES[_crossed(top, bottom)] + _ONES[_saddles(top, bottom)]
            top = bottom
        first[k + 1] = first[k] + n
    return keep, first


@jit(parallel=True)
def _contour_pieces(values, ty, tx, keep, first, threshold, table):
    """masks._contour_pieces: the pieces of every cell of the pairs `keep` (_piece_starts'), pair after
    pair, cell after cell (row-major), a cell's first piece first: owner int64 [S], a, b float32 [S,2].
    Only the cells on the level are visited (_crossed), lowest bit first."""
    owner = np.empty(first[-1], np.int64)
    a, b = np.empty((first[-1], 2), np.float32), np.empty((first[-1], 2), np.float32)
    for k in numba.prange(keep.shape[0]):
        p, s = keep[k], first[k]
        top = _above(values, p, 0, threshold)
        for cy in range(TILE):
            bottom = _above(values, p, cy + 1, threshold)
            crossed = _crossed(top, bottom)
            top = bottom
            while crossed:
                cx = _ONES[(crossed & -crossed) - 1]  # the lowest set bit's place: the ones below it
                crossed &= crossed - 1
                case = _case(values, p, cy, cx, threshold)
                a00, a01 = values[p, cy, cx], values[p, cy, cx + 1]
                a10, a11 = values[p, cy + 1, cx], values[p, cy + 1, cx + 1]
                x = np.float32(tx[p] * TILE - 1 + cx) + np.float32(0.5)  # the cell's top-left pixel centre
                y = np.float32(ty[p] * TILE - 1 + cy) + np.float32(0.5)
                for piece in range(2):
                    if table[case, 2 * piece] < 0:
                        continue
                    owner[s] = p
                    a[s, 0], a[s, 1] = _crossing(table[case, 2 * piece], x, y, a00, a01, a10, a11, threshold)
                    b[s, 0], b[s, 1] = _crossing(table[case, 2 * piece + 1], x, y, a00, a01, a10, a11, threshold)
                    s += 1
    return owner, a, b


@jit(parallel=True)
def _blurred(grid, taps):
    """masks._blurred: grid [S,R,C] convolved with taps [2r+1] along its columns, then its rows, zeros
    beyond its edges, each sum tap after tap as the torch path adds them (the first tap's product, then
    each next one's added; a product with a zero beyond the edge added too). Each pass a row at a time,
    tap after tap along the row (what vectorises; unsigned columns: no wrap-around checks); the sources'
    rows in parallel."""
    count, rows, columns = grid.shape
    radius = (taps.shape[0] - 1) // 2
    across = np.empty_like(grid)
    out = np.empty_like(grid)
    for job in numba.prange(count * rows):
        m, y = job // rows, job % rows
        for k in range(taps.shape[0]):  # along the row: the columns x - r + k
            shift, tap = k - radius, taps[k]
            start = min(max(-shift, 0), columns)  # the columns x whose x + shift lies in the row
            stop = max(min(columns - shift, columns), start)
            zero = np.float32(0.0) * tap
            for x in range(np.uint64(start)):
                across[m, y, x] = zero if k == 0 else across[m, y, x] + zero
            for x in range(np.uint64(start), np.uint64(stop)):
                v = grid[m, y, x + np.uint64(k) - np.uint64(radius)]  # x + shift, unsigned
                across[m, y, x] = v * tap if k == 0 else across[m, y, x] + v * tap
            for x in range(np.uint64(stop), np.uint64(columns)):
                across[m, y, x] = zero if k == 0 else across[m, y, x] + zero
    for job in numba.prange(count * rows):
        m, y = job // rows, job % rows
        for k in range(taps.shape[0]):  # down the columns: the rows y - r + k
            yy, tap = y - radius + k, taps[k]
            inside = 0 <= yy < rows
            if inside:
                for x in range(np.uint64(columns)):
                    v = across[m, yy, x]
                    out[m, y, x] = v * tap if k == 0 else out[m, y, x] + v * tap
            else:
                zero = np.float32(0.0) * tap
                for x in range(np.uint64(columns)):
                    out[m, y, x] = zero if k == 0 else out[m, y, x] + zero
    return out


@jit()
def _joined(owner, a, b):
    """masks._joined: the same runs, found by the same comparisons and subtractions, in one pass (each
    array indexed by the later piece of two neighbours), then the runs written out."""
    n = owner.shape[0]
    line = np.zeros(n, np.int64)
    for i in range(n):
        dx, dy = b[i, 0] - a[i, 0], b[i, 1] - a[i, 1]
        if dx == 0 and dy == 0:
            line[i] = 0
        elif dy == 0:
            line[i] = 1
        elif dx == 0:
            line[i] = 2
        elif dx == dy:
            line[i] = 3
        elif dx == -dy:
            line[i] = 4
    join = np.zeros(n, np.bool_)
    prev_end, cur_end = np.zeros(n, np.int64), np.zeros(n, np.int64)  # the end each shares: 0 a, 1 b
    for i in range(1, n):
        p = i - 1
        bb = b[p, 0] == a[i, 0] and b[p, 1] == a[i, 1]
        ba = b[p, 0] == b[i, 0] and b[p, 1] == b[i, 1]
        ab = a[p, 0] == a[i, 0] and a[p, 1] == a[i, 1]
        aa = a[p, 0] == b[i, 0] and a[p, 1] == b[i, 1]
        if owner[i] != owner[p] or line[i] != line[p] or line[i] == 0 or not (bb or ba or ab or aa):
            continue
        prev_end[i] = 1 if bb or ba else 0
        cur_end[i] = 0 if bb else 1 if ba else 0 if ab else 1
        px, py = (b[p, 0], b[p, 1]) if prev_end[i] == 1 else (a[p, 0], a[p, 1])  # the shared point
        fx, fy = (a[p, 0], a[p, 1]) if prev_end[i] == 1 else (b[p, 0], b[p, 1])
        gx, gy = (b[i, 0], b[i, 1]) if cur_end[i] == 0 else (a[i, 0], a[i, 1])
        before, after = (fy - py, gy - py) if line[i] == 2 else (fx - px, gx - px)
        join[i] = (before < 0 and after > 0) or (before > 0 and after < 0)
    keep = join.copy()  # a piece joined on both sides through the same end: its second join dropped
    for i in range(1, n - 1):
        if join[i] and join[i + 1] and cur_end[i] == prev_end[i + 1]:
            keep[i + 1] = False
    runs = 0
    for i in range(n):
        runs += not keep[i]
    out_owner = np.empty(runs, np.int64)
    out_a, out_b = np.empty((runs, 2), np.float32), np.empty((runs, 2), np.float32)
    r = -1
    for i in range(n):
        if not keep[i]:  # a run starts: from its first piece's end not shared with the next
            r += 1
            out_owner[r] = owner[i]
            far = 0 if i + 1 == n or not keep[i + 1] or prev_end[i + 1] == 1 else 1
            out_a[r, 0], out_a[r, 1] = (a[i, 0], a[i, 1]) if far == 0 else (b[i, 0], b[i, 1])
            out_b[r, 0], out_b[r, 1] = b[i, 0], b[i, 1]
        else:  # to the end of this piece not shared with the previous
            out_b[r, 0], out_b[r, 1] = (b[i, 0], b[i, 1]) if cur_end[i] == 0 else (a[i, 0], a[i, 1])
    return out_owner, out_a, out_b


@jit(parallel=True)
def _extents(values, fills, source, ty, tx, sources, threshold, far):
    """The pixels above the threshold of the filled pairs of each source: low float32 [M,2] (the smallest
    x and y), high [M,2] (the largest + 1), sums [M,3] (the mask's sum and its sums weighted by the pixel
    centres' x and y), tile by tile in pair order as the torch path adds them (far and -far: none). The
    sources in parallel (their pairs are consecutive)."""
    low = np.full((sources, 2), far, np.float32)
    high = np.full((sources, 2), -far, np.float32)
    sums = np.zeros((sources, 3), np.float32)
    first = np.searchsorted(source, np.arange(sources + 1))
    for m in numba.prange(sources):
        for p in range(first[m], first[m + 1]):
            if not fills[p]:
                continue
            total, along_x, along_y = np.float32(0.0), np.float32(0.0), np.float32(0.0)
            for i in range(TILE):
                yy = np.float32(ty[p] * TILE + i)
                for j in range(TILE):
                    v = values[p, i + 1, j + 1]
                    if v > threshold:
                        xx = np.float32(tx[p] * TILE + j)
                        low[m, 0], low[m, 1] = min(low[m, 0], xx), min(low[m, 1], yy)
                        high[m, 0] = max(high[m, 0], xx + np.float32(1.0))
                        high[m, 1] = max(high[m, 1], yy + np.float32(1.0))
                        total += v
                        along_x += v * (xx + np.float32(0.5))
                        along_y += v * (yy + np.float32(0.5))
            sums[m, 0] += total
            sums[m, 1] += along_x
            sums[m, 2] += along_y
    return low, high, sums


@jit()
def _fills_and_outlines(
    values, fills, source, ty, tx, owner, a, b, shown, frame, colors, fill_alpha, line_alpha, half, row0, height, width
):
    """masks.overlay's fills and outlines as the torch path builds them (sprites() of _tile_sprites, then
    segments(), one group per object's pieces), in one pass: object after object, each its source's filled
    pairs, then object after object its source's pieces. fill_alpha 0: no fills; line_alpha 0: no outlines.
    Returns the fields frame, kind, params, color, bounds, group (fills one group each, each object's pieces
    one); a fill's sprite shows its pair's values in place (the atlas holds values [P,T+1,T+1] as rows of
    T + 1 from row0 on)."""
    pairs, objects, sources = values.shape[0], shown.shape[0], 0
    for k in range(objects):
        sources = max(sources, shown[k] + 1)
    # where each source's filled pairs and pieces start (both are listed source after source)
    filled_at, pieces_at = np.zeros(sources + 1, np.int64), np.zeros(sources + 1, np.int64)
    for p in range(pairs):
        if fills[p] and source[p] < sources:
            filled_at[source[p] + 1] += 1
    for s in range(owner.shape[0]):
        if source[owner[s]] < sources:
            pieces_at[source[owner[s]] + 1] += 1
    for m in range(sources):
        filled_at[m + 1] += filled_at[m]
        pieces_at[m + 1] += pieces_at[m]
    n_filled = 0
    for p in range(pairs):
        n_filled += fills[p]
    filled = np.empty(n_filled, np.int64)  # the filled pairs, in order
    f = 0
    for p in range(pairs):
        if fills[p]:
            filled[f] = p
            f += 1
    # each object's first fill and first piece among the primitives
    first_fill, first_piece = np.zeros(objects + 1, np.int64), np.zeros(objects + 1, np.int64)
    for k in range(objects):
        m = shown[k]
        first_fill[k + 1] = first_fill[k] + ((filled_at[m + 1] - filled_at[m]) if fill_alpha > 0 else 0)
        first_piece[k + 1] = first_piece[k] + ((pieces_at[m + 1] - pieces_at[m]) if line_alpha > 0 else 0)
    n_fill, total = first_fill[objects], first_fill[objects] + first_piece[objects]
    out_frame, out_kind = np.empty(total, np.int64), np.empty(total, np.int64)
    params = np.zeros((total, N_PARAMS), np.float32)
    color, bounds = np.empty((total, 4), np.float32), np.empty((total, 4), np.float32)
    group = np.empty(total, np.int64)
    reach = max(half, np.float32(0.5)) + np.float32(1.0)
    for k in range(objects):  # one thread: at 1080p this loop's ~0.1 ms took 0.3 ms on two
        m = shown[k]
        for i in range(first_fill[k + 1] - first_fill[k]):
            q, f = first_fill[k] + i, filled_at[m] + i
            p = filled[f]
            x0, y0 = np.float32(tx[p] * TILE), np.float32(ty[p] * TILE)
            rect_w = np.float32(min(width - tx[p] * TILE, TILE))
            rect_h = np.float32(min(height - ty[p] * TILE, TILE))
            out_frame[q], out_kind[q], group[q] = frame[k], SPRITE, q
            params[q, SPRITE_X0], params[q, SPRITE_Y0] = x0, y0
            params[q, SPRITE_WIDTH], params[q, SPRITE_HEIGHT] = rect_w, rect_h
            # the tile's pixels: its values from their second row and column (the first are its border)
            params[q, SPRITE_ATLAS_X] = np.float32(1.0)
            params[q, SPRITE_ATLAS_Y] = np.float32(row0 + 1 + p * (TILE + 1))
            color[q, 0], color[q, 1], color[q, 2], color[q, 3] = colors[k, 0], colors[k, 1], colors[k, 2], fill_alpha
            # to the last pixels' centres (masks._tile_sprites)
            bounds[q, 0], bounds[q, 1] = x0, y0
            bounds[q, 2], bounds[q, 3] = (x0 + rect_w) - np.float32(0.5), (y0 + rect_h) - np.float32(0.5)
        for i in range(first_piece[k + 1] - first_piece[k]):
            q, s = n_fill + first_piece[k] + i, pieces_at[m] + i
            out_frame[q], out_kind[q], group[q] = frame[k], SEGMENT, n_fill + k
            ax, ay, bx, by = a[s, 0], a[s, 1], b[s, 0], b[s, 1]
            params[q, SEGMENT_AX], params[q, SEGMENT_AY], params[q, SEGMENT_BX], params[q, SEGMENT_BY] = ax, ay, bx, by
            params[q, SEGMENT_HALF_WIDTH] = half
            color[q, 0], color[q, 1], color[q, 2], color[q, 3] = colors[k, 0], colors[k, 1], colors[k, 2], line_alpha
            bounds[q, 0], bounds[q, 1] = min(ax, bx) - reach, min(ay, by) - reach
            bounds[q, 2], bounds[q, 3] = max(ax, bx) + reach, max(ay, by) + reach
    return out_frame, out_kind, params, color, bounds, group


@falls_back
def tile_peaks(masks: np.ndarray) -> np.ndarray:
    """masks.tile_peaks of float32 masks [M,H,W] (C-contiguous)."""
    # a run of bands a thread (numba.parallel_chunksize's dynamic schedule made this loop 10% slower)
    return _tile_peaks(masks, masks.reshape(-1).view(np.int32), torch_threads())


@falls_back
def list_tiles(masks: np.ndarray, peak: np.ndarray, threshold: float, outlines: bool) -> tuple:
    """masks._list_tiles' fields (source, ty, tx, values, fill, cells) of float32 masks [M,H,W] and their
    tile peaks (float32, C-contiguous)."""
    torch_threads()
    return _list_tiles(masks, peak, np.float32(threshold), outlines)


@falls_back
def listed_counts(peak: np.ndarray, grid_y: int, grid_x: int, outlines: bool) -> np.ndarray:
    """_listed_counts of the masks' tile peaks (float32, C-contiguous)."""
    torch_threads()
    return _listed_counts(peak, grid_y, grid_x, outlines)


@falls_back
def contour_pieces(values, ty, tx, cells, threshold: float, check) -> tuple:
    """masks._contour_pieces of the listed tiles' fields: (owner, a, b); check(pieces) called with their
    count before they are made (it raises to refuse them)."""
    torch_threads()
    keep, first = _piece_starts(values, cells, np.float32(threshold))
    check(int(first[-1]))
    return _contour_pieces(values, ty, tx, keep, first, np.float32(threshold), _CASE_EDGES)


@falls_back
def blurred(grid: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """masks._blurred of float32 grid [S,R,C] (C-contiguous) and taps float32 [2r+1]."""
    torch_threads()
    return _blurred(grid, taps)


@falls_back
def joined(owner, a, b) -> tuple:
    """masks._joined of the pieces (owner int64 [S], a, b float32 [S,2])."""
    return _joined(owner, a, b)


@falls_back
def fills_and_outlines(
    tiles: tuple, pieces: tuple, shown, frame, colors, fill_alpha, line_alpha, half, row0, height, width
):
    """_fills_and_outlines of the listed tiles' fields (source, ty, tx, values, fill) and the pieces (owner,
    a, b) for objects showing sources `shown` on frames `frame` (int64 [K]) in colors float32 [K,3]."""
    source, ty, tx, values, fills = tiles
    return _fills_and_outlines(
        values,
        fills,
        source,
        ty,
        tx,
        *pieces,
        shown,
        frame,
        colors,
        np.float32(fill_alpha),
        np.float32(line_alpha),
        np.float32(half),
        row0,
        height,
        width,
    )


@falls_back
def extents(values, fills, source, ty, tx, sources: int, threshold: float, far: float) -> tuple:
    """The objects' bounds and centroid sums per source (see _extents): (low, high, sums)."""
    torch_threads()
    return _extents(values, fills, source, ty, tx, sources, np.float32(threshold), np.float32(far))
