"""The overlay compositor's loop compiled for the CPU by numba: the CUDA kernel's loop (each pixel of a
tile takes its primitives in drawing order) with the torch path's tile classes, in one pass that writes
every pixel of the image, alpha and layer once. On the CPU the torch path's dense per-class evaluations
and its compositing by doubling make many frame-sized temporaries; this loop makes none, so its cost is
the outputs' first touch plus the covered pixels (bench/bench_boxes.py).

It runs in parallel on as many threads as torch uses (ComfyUI's and the user's setting; never more).
Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..core.numba import PARTS_PER_THREAD, balanced, falls_back, jit, torch_threads
from .constants import (
    ANCHOR_X,
    ANCHOR_Y,
    BOX_CORNER_LENGTH,
    BOX_COS,
    BOX_CX,
    BOX_CY,
    BOX_FILL,
    BOX_HALF_STROKE,
    BOX_HALF_X,
    BOX_HALF_Y,
    BOX_RADIUS,
    BOX_SIN,
    BOX_STROKE,
    DISC,
    DISC_RADIUS,
    DISC_RING_HALF,
    ELLIPSE,
    ELLIPSE_COS,
    ELLIPSE_RADIUS_X,
    ELLIPSE_RADIUS_Y,
    ELLIPSE_RING_HALF,
    ELLIPSE_SIN,
    ELLIPSE_STEPS,
    HALO,
    HALO_COS,
    HALO_HALF_X,
    HALO_HALF_Y,
    HALO_RADIUS,
    HALO_SIN,
    HALO_WIDTH,
    PAIR_MISSED,
    PAIR_SOLID,
    SEGMENT,
    SEGMENT_AX,
    SEGMENT_AY,
    SEGMENT_BUTT,
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
    TRIANGLE,
    TRIANGLE_AX,
    TRIANGLE_AY,
    TRIANGLE_BX,
    TRIANGLE_CX,
)


@jit(inline="always")
def _from_distance(d):
    return min(max(np.float32(0.5) - d, np.float32(0.0)), np.float32(1.0))


@jit(inline="always")
def _thin_weight(half):
    return min(max(np.float32(2.0) * half, np.float32(0.0)), np.float32(1.0))


@jit(inline="always")
def _box(ax, ay, hx, hy, r, rounded):
    """Coverage of a box at |offset from its centre| ax, ay along its axes (see _turned_box)."""
    if rounded and r >= 1.0:
        qx, qy = ax - (hx - r), ay - (hy - r)
        cx, cy = max(qx, np.float32(0.0)), max(qy, np.float32(0.0))
        return _from_distance(np.sqrt(np.float32(cx * cx + cy * cy)) + min(max(qx, qy), np.float32(0.0)) - r)
    return _from_distance(ax - hx) * _from_distance(ay - hy)


@jit(inline="always")
def _ellipse_distance(ax, ay, a, b):
    """See compositor._ellipse_distance."""
    px, py = max(ax, np.float32(1e-3)), max(ay, np.float32(1e-3))
    tx = ty = np.float32(0.70710677)
    ab = a * a - b * b
    for _ in range(ELLIPSE_STEPS):
        ex, ey = ab * (tx * tx * tx) / a, -ab * (ty * ty * ty) / b
        rx, ry = a * tx - ex, b * ty - ey
        qx, qy = px - ex, py - ey
        ratio = np.sqrt(np.float32(rx * rx + ry * ry)) / max(np.sqrt(np.float32(qx * qx + qy * qy)), np.float32(1e-6))
        tx = min(max((qx * ratio + ex) / a, np.float32(0.0)), np.float32(1.0))
        ty = min(max((qy * ratio + ey) / b, np.float32(0.0)), np.float32(1.0))
        norm = max(np.sqrt(np.float32(tx * tx + ty * ty)), np.float32(1e-6))
        tx, ty = tx / norm, ty / norm
    dx, dy = px - a * tx, py - b * ty
    distance = np.sqrt(np.float32(dx * dx + dy * dy))
    return -distance if (px / a) * (px / a) + (py / b) * (py / b) <= 1.0 else distance


@jit(inline="always")
def _edge_distance(params, p, first, second, x, y):
    """Signed distance from the point x, y (its offset from the corner `first`, as the torch path forms it)
    to the line of the triangle edge from corner `first` to corner `second` (columns of x; y follows):
    > 0 outside (see compositor._triangle_coverage)."""
    ex, ey = params[p, second] - params[p, first], params[p, second + 1] - params[p, first + 1]
    length = max(np.sqrt(np.float32(ex * ex + ey * ey)), np.float32(1e-12))
    return (ey * x - ex * y) / length


@jit(inline="always")
def _coverage(kind, pair_class, params, p, ox, oy, gx, gy, atlas):
    """Coverage of primitive p (params [P,10]) at the pixel centre ox + gx, oy + gy (its tile's first
    pixel centre, the pixel's place in the tile), each offset formed as the torch path forms it."""
    if pair_class == PAIR_SOLID:
        return np.float32(1.0)
    x, y = (ox - params[p, ANCHOR_X]) + gx, (oy - params[p, ANCHOR_Y]) + gy
    if kind == SEGMENT:
        half, weight = max(params[p, SEGMENT_HALF_WIDTH], np.float32(0.5)), _thin_weight(params[p, SEGMENT_HALF_WIDTH])
        dx, dy = params[p, SEGMENT_BX] - params[p, SEGMENT_AX], params[p, SEGMENT_BY] - params[p, SEGMENT_AY]
        length = max(np.sqrt(np.float32(dx * dx + dy * dy)), np.float32(1e-12))
        ux, uy = dx / length, dy / length
        along = x * ux + y * uy
        across = abs(x * uy - y * ux)
        # from the far end (see compositor._segment_coverage)
        beyond = max(-along, ((ox - params[p, SEGMENT_BX]) + gx) * ux + ((oy - params[p, SEGMENT_BY]) + gy) * uy)
        if params[p, SEGMENT_BUTT] > 0.0:
            return _from_distance(across - half) * _from_distance(beyond) * weight
        b = max(beyond, np.float32(0.0))
        return _from_distance(np.sqrt(np.float32(b * b + across * across)) - half) * weight
    if kind == BOX_FILL or kind == BOX_STROKE:
        cosine, sine = params[p, BOX_COS], params[p, BOX_SIN]
        turned = sine != 0.0
        ax = abs(cosine * x + sine * y) if turned else abs(x)
        ay = abs(cosine * y - sine * x) if turned else abs(y)
        hx, hy, r = params[p, BOX_HALF_X], params[p, BOX_HALF_Y], params[p, BOX_RADIUS]
        rounded = turned or pair_class == _NEAR_CORNER
        if kind == BOX_FILL:
            return _box(ax, ay, hx, hy, r, rounded)
        half, weight = max(params[p, BOX_HALF_STROKE], np.float32(0.5)), _thin_weight(params[p, BOX_HALF_STROKE])
        inner = np.float32(0.0)
        if hx > half and hy > half:
            inner = _box(ax, ay, hx - half, hy - half, max(r - half, np.float32(0.0)), rounded)
        outer = _box(ax, ay, hx + half, hy + half, r + half, rounded)
        outline = max(outer - inner, np.float32(0.0)) * weight
        arms = params[p, BOX_CORNER_LENGTH]
        if arms > 0.0:
            keep_x = min(max((ax - (hx - arms)) + np.float32(0.5), np.float32(0.0)), np.float32(1.0))
            keep_y = min(max((ay - (hy - arms)) + np.float32(0.5), np.float32(0.0)), np.float32(1.0))
            outline = outline * (keep_x * keep_y)
        return outline
    if kind == DISC or kind == ELLIPSE:
        if kind == DISC:
            distance, ring = np.sqrt(np.float32(x * x + y * y)) - params[p, DISC_RADIUS], params[p, DISC_RING_HALF]
        else:
            cosine, sine = params[p, ELLIPSE_COS], params[p, ELLIPSE_SIN]
            distance = _ellipse_distance(
                abs(cosine * x + sine * y),
                abs(cosine * y - sine * x),
                params[p, ELLIPSE_RADIUS_X],
                params[p, ELLIPSE_RADIUS_Y],
            )
            ring = params[p, ELLIPSE_RING_HALF]
        if ring > 0.0:
            return _from_distance(abs(distance) - max(ring, np.float32(0.5))) * _thin_weight(ring)
        return _from_distance(distance)
    if kind == HALO:  # see compositor._halo_coverage
        cosine, sine = params[p, HALO_COS], params[p, HALO_SIN]
        ax, ay = abs(cosine * x + sine * y), abs(cosine * y - sine * x)
        hx, hy, r = params[p, HALO_HALF_X], params[p, HALO_HALF_Y], params[p, HALO_RADIUS]
        qx, qy = ax - (hx - r), ay - (hy - r)
        cx, cy = max(qx, np.float32(0.0)), max(qy, np.float32(0.0))
        distance = np.sqrt(np.float32(cx * cx + cy * cy)) + min(max(qx, qy), np.float32(0.0)) - r
        t = min(max(distance / params[p, HALO_WIDTH], np.float32(0.0)), np.float32(1.0))
        fade = (np.float32(1.0) - t) * (np.float32(1.0) - t) * (np.float32(1.0) + np.float32(2.0) * t)
        return (np.float32(1.0) - _box(ax, ay, hx, hy, r, True)) * fade
    if kind == TRIANGLE:  # see compositor._triangle_coverage
        coverage = np.float32(1.0)
        for first, second in ((TRIANGLE_AX, TRIANGLE_BX), (TRIANGLE_BX, TRIANGLE_CX), (TRIANGLE_CX, TRIANGLE_AX)):
            dx, dy = (ox - params[p, first]) + gx, (oy - params[p, first + 1]) + gy
            coverage = coverage * _from_distance(_edge_distance(params, p, first, second, dx, dy))  # 1 x: exact
        return coverage
    if kind == SPRITE:
        u = np.int64(np.rint(((ox - np.float32(0.5)) - params[p, SPRITE_X0]) + gx))  # half to even, as torch.round
        v = np.int64(np.rint(((oy - np.float32(0.5)) - params[p, SPRITE_Y0]) + gy))
        if u < 0 or v < 0 or u >= np.int64(params[p, SPRITE_WIDTH]) or v >= np.int64(params[p, SPRITE_HEIGHT]):
            return np.float32(0.0)
        column = min(max(np.int64(params[p, SPRITE_ATLAS_X]) + u, 0), atlas.shape[1] - 1)
        row = min(max(np.int64(params[p, SPRITE_ATLAS_Y]) + v, 0), atlas.shape[0] - 1)
        return atlas[row, column]
    return np.float32(0.0)


_EVALUATE, _NEAR_CORNER = 0, 1  # the other classes a tile can have: PAIR_SOLID, PAIR_MISSED


@jit(inline="always")
def _tile_class(kind, params, p, ox, oy, tile):
    """How primitive p meets the tile whose first pixel centre is ox, oy, as compositor._classify
    decides it (the same float32 arithmetic): PAIR_MISSED (no pixel covered), PAIR_SOLID (every pixel covered),
    _NEAR_CORNER (a box's tile near a rounded corner) or _EVALUATE."""
    spread = np.float32((tile - 1) / 2)
    reach = np.float32(tile * 0.7072 + 1)
    tx, ty = (ox - params[p, ANCHOR_X]) + spread, (oy - params[p, ANCHOR_Y]) + spread  # anchor to the tile's centre
    if kind == SEGMENT:
        dx, dy = params[p, SEGMENT_BX] - params[p, SEGMENT_AX], params[p, SEGMENT_BY] - params[p, SEGMENT_AY]
        t = min(max((tx * dx + ty * dy) / max(dx * dx + dy * dy, np.float32(1e-12)), np.float32(0.0)), np.float32(1.0))
        ex, ey = tx - t * dx, ty - t * dy
        if np.sqrt(np.float32(ex * ex + ey * ey)) > max(params[p, SEGMENT_HALF_WIDTH], np.float32(0.5)) + reach:
            return PAIR_MISSED
        return _EVALUATE
    if kind == DISC or kind == ELLIPSE:
        distance = np.sqrt(np.float32(tx * tx + ty * ty))
        if kind == DISC:
            ring, outer, inner = params[p, DISC_RING_HALF], params[p, DISC_RADIUS], params[p, DISC_RADIUS]
        else:
            ring, outer = params[p, ELLIPSE_RING_HALF], max(params[p, ELLIPSE_RADIUS_X], params[p, ELLIPSE_RADIUS_Y])
            inner = min(params[p, ELLIPSE_RADIUS_X], params[p, ELLIPSE_RADIUS_Y])
        if distance > outer + max(ring, np.float32(0.5)) + reach:
            return PAIR_MISSED
        if ring > 0.0 and distance < inner - max(ring, np.float32(0.5)) - reach:
            return PAIR_MISSED
        if ring == 0.0 and distance + np.float32(tile * 0.7072) + np.float32(0.5) <= inner:
            return PAIR_SOLID
        return _EVALUATE
    if kind == BOX_FILL or kind == BOX_STROKE:
        cosine, sine = params[p, BOX_COS], params[p, BOX_SIN]
        if sine != 0.0:  # measured in the box's frame
            tx, ty = cosine * tx + sine * ty, cosine * ty - sine * tx
            spread = spread * (abs(cosine) + abs(sine))
        tx, ty = abs(tx), abs(ty)
        stroke = np.float32(1.0) if kind == BOX_STROKE else np.float32(0.0)
        hx, hy, r = params[p, BOX_HALF_X], params[p, BOX_HALF_Y], params[p, BOX_RADIUS]
        half = params[p, BOX_HALF_STROKE]
        if (
            tx - (spread + 1) > hx + max(half, np.float32(0.5)) * stroke
            or ty - (spread + 1) > hy + max(half, np.float32(0.5)) * stroke
        ):
            return PAIR_MISSED
        margin = (half + np.float32(0.5)) * stroke + (spread + 1)
        if tx + margin <= hx - r and ty + margin <= hy - r:  # inside the straight parts
            return PAIR_MISSED if kind == BOX_STROKE else PAIR_SOLID
        if tx + (spread + 1) >= hx - r and ty + (spread + 1) >= hy - r:
            return _NEAR_CORNER
        return _EVALUATE
    if kind == HALO:  # see compositor._classify_halos
        cosine, sine = params[p, HALO_COS], params[p, HALO_SIN]
        tx, ty = abs(cosine * tx + sine * ty), abs(cosine * ty - sine * tx)
        spread = spread * (abs(cosine) + abs(sine)) + np.float32(1.0)
        hx, hy, width = params[p, HALO_HALF_X], params[p, HALO_HALF_Y], params[p, HALO_WIDTH]
        if tx - spread > hx + width or ty - spread > hy + width:
            return PAIR_MISSED
        r = params[p, HALO_RADIUS]
        if tx + spread + np.float32(0.5) <= hx - r and ty + spread + np.float32(0.5) <= hy - r:
            return PAIR_MISSED
        return _EVALUATE
    if kind == TRIANGLE:  # see compositor._classify_triangles
        farthest = np.float32(-np.inf)
        for first, second in ((TRIANGLE_AX, TRIANGLE_BX), (TRIANGLE_BX, TRIANGLE_CX), (TRIANGLE_CX, TRIANGLE_AX)):
            cx = tx + (params[p, TRIANGLE_AX] - params[p, first])
            cy = ty + (params[p, TRIANGLE_AY] - params[p, first + 1])
            farthest = max(farthest, _edge_distance(params, p, first, second, cx, cy))
        if farthest > np.float32(tile * 0.7072 + 1.5):
            return PAIR_MISSED
        if farthest + np.float32(tile * 0.7072 + 0.5) <= 0.0:
            return PAIR_SOLID
        return _EVALUATE
    return _EVALUATE


@jit(inline="always")
def _tile_coverage(kind, found, params, p, ox, oy, tile, atlas, out, sides):
    """Coverage of primitive p on the tile whose first pixel centre is ox, oy into out [T*T] (row-major),
    `found` its _tile_class. A box along the axes away from its corners is separable, as in the torch
    path: each side's coverage is found once per column and once per row (into sides [2,3,T])."""
    if (kind == BOX_FILL or kind == BOX_STROKE) and params[p, BOX_SIN] == 0.0 and found == _EVALUATE:
        hx, hy, stroke = params[p, BOX_HALF_X], params[p, BOX_HALF_Y], kind == BOX_STROKE
        half = max(params[p, BOX_HALF_STROKE], np.float32(0.5)) if stroke else np.float32(0.0)
        weight = _thin_weight(params[p, BOX_HALF_STROKE]) if stroke else np.float32(1.0)
        arms = params[p, BOX_CORNER_LENGTH] if stroke and params[p, BOX_CORNER_LENGTH] > 0.0 else np.float32(np.inf)
        has_inner = stroke and hx > half and hy > half
        for axis in range(2):  # x, y: the outer box, the inner one and the corner arms' keep
            h = hx if axis == 0 else hy
            for g in range(tile):
                a = abs(((ox - params[p, BOX_CX]) if axis == 0 else (oy - params[p, BOX_CY])) + np.float32(g))
                sides[axis, 0, g] = _from_distance(a - (h + half))
                sides[axis, 1, g] = _from_distance(a - (h - half)) if has_inner else np.float32(0.0)
                sides[axis, 2, g] = min(max((a - (h - arms)) + np.float32(0.5), np.float32(0.0)), np.float32(1.0))
        for gy in range(tile):
            for gx in range(tile):
                outline = max(sides[0, 0, gx] * sides[1, 0, gy] - sides[0, 1, gx] * sides[1, 1, gy], np.float32(0.0))
                out[gy * tile + gx] = outline * weight * (sides[0, 2, gx] * sides[1, 2, gy])
        return
    if kind == SEGMENT and found == _EVALUATE:
        for i in range(np.uint64(tile * tile)):  # a loop: a slice's view costs reference counting
            out[i] = np.float32(0.0)
        _segment_tile(params, p, ox, oy, tile, out)
        return
    if kind == SPRITE and found == _EVALUATE and _whole_pixels(params[p, SPRITE_X0], params[p, SPRITE_Y0], ox, oy):
        _sprite_tile(params, p, ox, oy, tile, atlas, out)
        return
    for gy in range(tile):
        for gx in range(tile):
            out[gy * tile + gx] = _coverage(kind, found, params, p, ox, oy, np.float32(gx), np.float32(gy), atlas)


@jit(inline="always")
def _segment_tile(params, p, ox, oy, tile, out):
    """_coverage of segment p over a tile, its own values (direction, length, the tile's offsets from its
    ends) worked out once: the same float32 operations. Only the pixels whose centres lie within the box of
    its ends grown by half + 0.75 are evaluated: the others have no coverage (a round end covers to half +
    0.5 from the segment, a butt end to a corner sqrt(0.25 + (half + 0.5)^2) <= half + 0.625 away along an
    axis; the rest is float rounding, which grows with the coordinates). Its bounds reach further (half + 1,
    widened by a pixel on each side): they took 2x the pixels of a mask outline's pieces. Only those
    pixels of out are written; returns their rows and columns: first_y, last_y, first_x, last_x."""
    half, weight = max(params[p, SEGMENT_HALF_WIDTH], np.float32(0.5)), _thin_weight(params[p, SEGMENT_HALF_WIDTH])
    ax, ay, bx, by = params[p, SEGMENT_AX], params[p, SEGMENT_AY], params[p, SEGMENT_BX], params[p, SEGMENT_BY]
    reach = (half + np.float32(0.75)) + (max(abs(ax), abs(ay), abs(bx), abs(by)) + abs(ox) + abs(oy)) * np.float32(1e-6)
    first_x, last_x = _reached(min(ax, bx) - reach, max(ax, bx) + reach, ox, tile)
    first_y, last_y = _reached(min(ay, by) - reach, max(ay, by) + reach, oy, tile)
    dx, dy = params[p, SEGMENT_BX] - params[p, SEGMENT_AX], params[p, SEGMENT_BY] - params[p, SEGMENT_AY]
    length = max(np.sqrt(np.float32(dx * dx + dy * dy)), np.float32(1e-12))
    ux, uy = dx / length, dy / length
    butt = params[p, SEGMENT_BUTT] > 0.0
    from_ax, from_ay = ox - params[p, SEGMENT_AX], oy - params[p, SEGMENT_AY]
    from_bx, from_by = ox - params[p, SEGMENT_BX], oy - params[p, SEGMENT_BY]
    for gy in range(first_y, last_y + 1):
        fy = np.float32(gy)
        y, by = from_ay + fy, from_by + fy
        for gx in range(np.uint64(first_x), np.uint64(last_x + 1)):
            fx = np.float32(gx)
            x = from_ax + fx
            along = x * ux + y * uy
            across = abs(x * uy - y * ux)
            beyond = max(-along, (from_bx + fx) * ux + by * uy)
            if butt:
                value = _from_distance(across - half) * _from_distance(beyond) * weight
            else:
                b = max(beyond, np.float32(0.0))
                value = _from_distance(np.sqrt(np.float32(b * b + across * across)) - half) * weight
            out[np.uint64(gy * tile) + gx] = value
    return first_y, last_y, first_x, last_x


@jit(inline="always")
def _reached(low, high, first, tile):
    """The first and last of a tile's pixels (centres at first + 0 .. tile - 1) within low .. high (last <
    first: none; NaN: all)."""
    to_low, to_high = low - first, high - first
    start, stop = 0, tile - 1
    if to_low > np.float32(tile):
        start = tile
    elif to_low > np.float32(0.0):
        start = np.int64(np.ceil(to_low))
    if to_high < np.float32(-1.0):
        stop = -1
    elif to_high < np.float32(tile - 1):
        stop = np.int64(np.floor(to_high))
    return start, stop


@jit(inline="always")
def _whole_pixels(x0, y0, ox, oy):
    """A sprite's corner x0, y0 and the tile's first pixel centre ox, oy on whole pixels within 2^22: the
    general path's rounded atlas offsets ((ox - 0.5) - x0) + gx are then exact integers."""
    limit = np.float32(1 << 22)
    return (
        np.floor(x0) == x0 and np.floor(y0) == y0 and abs(x0) < limit and abs(y0) < limit and ox < limit and oy < limit
    )


@jit(inline="always")
def _sprite_tile(params, p, ox, oy, tile, atlas, out):
    """_coverage of a sprite on whole pixels over a tile: its atlas rows copied (clamped into the atlas as
    _coverage clamps them), 0 outside the sprite."""
    u0 = np.int64(ox - np.float32(0.5)) - np.int64(params[p, SPRITE_X0])
    v0 = np.int64(oy - np.float32(0.5)) - np.int64(params[p, SPRITE_Y0])
    width, height = np.int64(params[p, SPRITE_WIDTH]), np.int64(params[p, SPRITE_HEIGHT])
    ax, ay = np.int64(params[p, SPRITE_ATLAS_X]), np.int64(params[p, SPRITE_ATLAS_Y])
    last_column, last_row = atlas.shape[1] - 1, atlas.shape[0] - 1
    if (
        u0 >= 0
        and v0 >= 0
        and u0 + tile <= width
        and v0 + tile <= height
        and ax + u0 >= 0
        and ay + v0 >= 0
        and ax + u0 + tile - 1 <= last_column
        and ay + v0 + tile - 1 <= last_row
    ):  # the tile lies within the sprite and its atlas rows: a copy of them
        for gy in range(tile):
            row = ay + v0 + gy
            for gx in range(np.uint64(tile)):
                out[np.uint64(gy * tile) + gx] = atlas[row, np.uint64(ax + u0) + gx]
        return
    for gy in range(tile):
        v = v0 + gy
        row = min(max(ay + v, 0), last_row)
        for gx in range(tile):
            u = u0 + gx
            inside = u >= 0 and v >= 0 and u < width and v < height
            out[gy * tile + gx] = atlas[row, min(max(ax + u, 0), last_column)] if inside else np.float32(0.0)


@jit(inline="always")
def _over(layer, x0, coverage, at, tile, cr, cg, cb, ca):
    """Source-over of a shape of colour cr, cg, cb, opacity ca and coverage [T*T] (coverage[at:], flat)
    onto a tile of layer [T, W, 4] (premultiplied) at column x0 (unsigned indices: no wrap-around checks)."""
    for gy in range(tile):
        for gx in range(np.uint64(tile)):
            a = coverage[np.uint64(at + gy * tile) + gx] * ca
            keep = np.float32(1.0) - a
            x = np.uint64(x0) + gx
            layer[gy, x, 0] = a * cr + keep * layer[gy, x, 0]  # indexed, not through views: a view in
            layer[gy, x, 1] = a * cg + keep * layer[gy, x, 1]  # an inner loop costs reference counting
            layer[gy, x, 2] = a * cb + keep * layer[gy, x, 2]
            layer[gy, x, 3] = a + keep * layer[gy, x, 3]


@jit(inline="always")
def _clear(flat, width, x0, tile):
    """A tile at column x0 set to 0 in flat, a layer [T, width, 4] as one run (what the compiler vectorises;
    a view of each row cost reference counting)."""
    for gy in range(tile):
        for i in range(np.uint64((gy * width + x0) * 4), np.uint64((gy * width + x0 + tile) * 4)):
            flat[i] = np.float32(0.0)


@jit(inline="always")
def _over_solid(layer, x0, tile, cr, cg, cb, ca):
    """Source-over of colour cr, cg, cb at opacity ca over a whole tile of layer [T, W, 4]."""
    keep = np.float32(1.0) - ca
    for gy in range(tile):
        for x in range(np.uint64(x0), np.uint64(x0 + tile)):
            layer[gy, x, 0] = ca * cr + keep * layer[gy, x, 0]
            layer[gy, x, 1] = ca * cg + keep * layer[gy, x, 1]
            layer[gy, x, 2] = ca * cb + keep * layer[gy, x, 2]
            layer[gy, x, 3] = ca + keep * layer[gy, x, 3]


@jit(inline="always")
def _floor_divide(a, b):
    """torch.floor_divide of float32 a by b > 0, as torch rounds it (Python's floor division)."""
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != 0 and mod < 0:
        div -= np.float32(1.0)
    whole = np.floor(div)
    return whole + np.float32(1.0) if div - whole > np.float32(0.5) else whole


@jit()
def _tile_spans(bounds, frame, opacity, frames, height, width, tile):
    """primitives.tile_spans of bounds float32 [P,4] (the same floor divisions and clamps: span int64 [P,4])
    and each primitive's visibility bool [P]: on frames 0 .. frames - 1 (frame int64 [P]), opacity [P] > 0,
    its span in the frame. Also the tile pixels of all non-empty spans, visible or not (compositor._cpu_work's)."""
    tiles_y, tiles_x = (height + tile - 1) // tile, (width + tile - 1) // tile
    low = (np.float32(0.0), np.float32(0.0), np.float32(-1.0), np.float32(-1.0))
    high = (np.float32(tiles_x), np.float32(tiles_y), np.float32(tiles_x - 1), np.float32(tiles_y - 1))
    exact = tile & (tile - 1) == 0  # a power of two: v / tile is exact, its floor torch's floor division
    span = np.empty((bounds.shape[0], 4), np.int64)
    visible = np.empty(bounds.shape[0], np.bool_)
    pixels = 0
    for p in range(bounds.shape[0]):
        for c in range(4):
            v = bounds[p, c]
            v = v if v - v == 0 else np.float32(-1.0)  # NaN and infinities: -1, as nan_to_num
            whole = np.floor(v / np.float32(tile)) if exact else _floor_divide(v, np.float32(tile))
            span[p, c] = np.int64(min(max(whole, low[c]), high[c]))  # clamped as floats
        columns, rows = span[p, 2] - span[p, 0] + 1, span[p, 3] - span[p, 1] + 1
        visible[p] = 0 <= frame[p] < frames and opacity[p] > 0 and columns > 0 and rows > 0
        pixels += columns * rows * tile * tile if columns > 0 and rows > 0 else 0
    return span, visible, pixels


@jit()
def _bands(span, frame, visible, frames, tiles_y):
    """The primitives that each band (a row of tiles of a frame: frame * tiles_y + row) may reach, in
    drawing order: start int64 [frames * tiles_y + 1] into listed int64 [...]. span int64 [P,4]: first
    and last tile column and row; visible bool [P]."""
    start = np.zeros(frames * tiles_y + 1, np.int64)
    for p in range(span.shape[0]):
        if visible[p]:
            for row in range(span[p, 1], span[p, 3] + 1):
                start[frame[p] * tiles_y + row + 1] += 1
    for band in range(frames * tiles_y):
        start[band + 1] += start[band]
    listed, filled = np.empty(start[-1], np.int64), start[:-1].copy()
    for p in range(span.shape[0]):
        if visible[p]:
            for row in range(span[p, 1], span[p, 3] + 1):
                band = frame[p] * tiles_y + row
                listed[filled[band]] = p
                filled[band] += 1
    return start, listed


_ALL, _IMAGE_ONLY, _ALPHA_ONLY = range(3)  # the outputs _composite writes


@jit(parallel=True)
def _composite(
    band_start,
    listed,
    span,
    kind,
    params,
    color,
    group,
    atlas,
    source,
    image,
    alpha,
    layer,
    tile,
    straight,
    written,
    parts,
):
    """Every band of every frame of source [b,H,W,C] into image, alpha and layer (see render), or those
    `written` names (_IMAGE_ONLY, _ALPHA_ONLY): the band's primitives (band_start, listed from _bands)
    in drawing order, each over the tiles of its span (span [P,4]) that _tile_class does not rule out;
    `parts` parts of every parts-th band, which the threads take as they finish."""
    frames, height, width, channels = source.shape
    tiles_y, tiles_x = (height + tile - 1) // tile, (width + tile - 1) // tile
    for part in numba.prange(parts):  # each part draws every parts-th band with buffers of its own
        band_layer = np.empty((tile, tiles_x * tile, 4), np.float32)  # only its drawn tiles are read
        band_flat = band_layer.reshape(-1)
        drawn = np.empty(tiles_x, np.bool_)
        # the current shape (a group's primitives merge by maximum coverage): its coverage per tile
        shape = np.empty(tiles_x * tile * tile, np.float32)  # tile after tile
        in_shape, shape_tiles = np.zeros(tiles_x, np.bool_), np.empty(tiles_x, np.int64)
        coverage, sides = np.empty(tile * tile, np.float32), np.empty((2, 3, tile), np.float32)
        for band in range(part, frames * tiles_y, parts):  # a band: one row of tiles of one frame
            frame, row = band // tiles_y, band % tiles_y
            oy = np.float32(row * tile) + np.float32(0.5)
            drawn[:] = False
            n_shape = 0
            first, last = band_start[band], band_start[band + 1]
            for k in range(first, last):
                p = listed[k]
                alone = (
                    (k == first or group[listed[k - 1]] != group[p])  # its group's only primitive here
                    and (k + 1 == last or group[listed[k + 1]] != group[p])
                )
                for column in range(span[p, 0], span[p, 2] + 1):
                    ox = np.float32(column * tile) + np.float32(0.5)
                    found = _tile_class(kind[p], params, p, ox, oy, tile)
                    if found == PAIR_MISSED:
                        continue
                    if alone and not drawn[column]:
                        drawn[column] = True
                        _clear(band_flat, tiles_x * tile, column * tile, tile)
                    if alone and found == PAIR_SOLID:  # one opacity over the whole tile
                        _over_solid(band_layer, column * tile, tile, color[p, 0], color[p, 1], color[p, 2], color[p, 3])
                        continue
                    at = np.uint64(column * tile * tile)  # the shape's tile (unsigned: the loops vectorise)
                    if not alone and kind[p] == SEGMENT and found == _EVALUATE:
                        # an outline's piece reaches a few of the tile's pixels: only those are worked out
                        # and merged (a new shape tile is cleared first: the max of 0 and coverage)
                        first_y, last_y, first_x, last_x = _segment_tile(params, p, ox, oy, tile, coverage)
                        if not in_shape[column]:
                            in_shape[column] = True
                            shape_tiles[n_shape] = column
                            n_shape += 1
                            for i in range(np.uint64(tile * tile)):
                                shape[at + i] = np.float32(0.0)
                        for gy in range(first_y, last_y + 1):
                            line = np.uint64(gy * tile)
                            for gx in range(np.uint64(first_x), np.uint64(last_x + 1)):
                                shape[at + line + gx] = max(shape[at + line + gx], coverage[line + gx])
                        continue
                    if found == PAIR_SOLID:
                        for i in range(np.uint64(tile * tile)):
                            coverage[i] = np.float32(1.0)
                    else:
                        _tile_coverage(kind[p], found, params, p, ox, oy, tile, atlas, coverage, sides)
                    if alone:  # a shape of its own: straight onto the layer
                        _over(
                            band_layer,
                            column * tile,
                            coverage,
                            0,
                            tile,
                            color[p, 0],
                            color[p, 1],
                            color[p, 2],
                            color[p, 3],
                        )
                        continue
                    if not in_shape[column]:
                        in_shape[column] = True
                        shape_tiles[n_shape] = column
                        n_shape += 1
                        for i in range(np.uint64(tile * tile)):
                            shape[at + i] = coverage[i]
                    else:
                        for i in range(np.uint64(tile * tile)):
                            shape[at + i] = max(shape[at + i], coverage[i])
                if alone or (k + 1 < last and group[listed[k + 1]] == group[p]):
                    continue
                for i in range(n_shape):  # the shape is complete: source-over onto the tiles it reached
                    column = shape_tiles[i]
                    if not drawn[column]:
                        drawn[column] = True
                        _clear(band_flat, tiles_x * tile, column * tile, tile)
                    _over(
                        band_layer,
                        column * tile,
                        shape,
                        column * tile * tile,
                        tile,
                        color[p, 0],
                        color[p, 1],
                        color[p, 2],
                        color[p, 3],
                    )
                    in_shape[column] = False
                n_shape = 0
            _write_band(band_layer, drawn, source, image, alpha, layer, frame, row, tile, straight, written)


@jit(inline="always")
def _write_band(band_layer, drawn, source, image, alpha, layer, frame, row, tile, straight, written):
    """Every pixel of a band written once, in the outputs `written` names: the layer over the source, the
    layer (straight alpha if `straight`) and its alpha. Undrawn runs of tiles are slice copies and fills,
    drawn ones loops over unsigned columns: numba checks a signed index for wrapping around, which keeps
    the compiler from vectorising (a plain loop copying a row ran ~15x slower than the slice)."""
    height, width, channels = source.shape[1], source.shape[2], source.shape[3]
    tiles_x = drawn.shape[0]
    for y in range(row * tile, min(row * tile + tile, height)):
        band = band_layer[y - row * tile]
        sources, pixels, alphas, layers = source[frame, y], image[frame, y], alpha[frame, y], layer[frame, y]
        source_row, image_row, layer_row = sources.reshape(-1), pixels.reshape(-1), layers.reshape(-1)
        column = 0
        while column < tiles_x:  # runs of undrawn tiles and of drawn ones
            end = column + 1
            while end < tiles_x and drawn[end] == drawn[column]:
                end += 1
            x0, x1 = column * tile, min(end * tile, width)
            if not drawn[column]:
                if written != _ALPHA_ONLY:
                    image_row[x0 * channels : x1 * channels] = source_row[x0 * channels : x1 * channels]
                if written != _IMAGE_ONLY:
                    alphas[x0:x1] = np.float32(0.0)
                if written == _ALL:
                    layer_row[x0 * 4 : x1 * 4] = np.float32(0.0)
                column = end
                continue
            column = end
            for x in range(np.uint64(x0), np.uint64(x1)):
                la = band[x, 3]
                if written != _ALPHA_ONLY:
                    keep = np.float32(1.0) - la
                    for c in range(3):
                        pixels[x, c] = band[x, c] + sources[x, c] * keep
                    if channels == 4:
                        pixels[x, 3] = la + sources[x, 3] * keep
                if written != _IMAGE_ONLY:
                    alphas[x] = la
                if written == _ALL:
                    # straight alpha as compositor.straight_alpha gives it: RGB / alpha in 0..1, 0 where
                    # alpha is 0
                    if straight and la > 0.0:
                        scale = np.float32(1.0) / la
                        for c in range(3):
                            layers[x, c] = min(max(band[x, c] * scale, np.float32(0.0)), np.float32(1.0))
                    else:
                        for c in range(3):
                            layers[x, c] = np.float32(0.0) if straight else band[x, c]
                    layers[x, 3] = la


@falls_back
def render(
    frames: torch.Tensor,
    image: torch.Tensor | None,
    alpha: torch.Tensor | None,
    layer: torch.Tensor | None,
    prims,
    frame_start: int,
    atlas: torch.Tensor | None,
    tile: int,
    straight: bool = False,
) -> bool:
    """Draw the primitives of frames frame_start .. + b - 1 over frames float32 [b,H,W,C] into image
    [b,H,W,C], alpha [b,H,W] and layer [b,H,W,4] (contiguous float32 CPU tensors; premultiplied, or
    straight alpha if `straight`), every pixel once. Alpha and layer None: the image only; image and
    layer None: the alpha only (frames may then have 0 channels: they are not read).
    Returns False, writing nothing, where this loop does not apply (not float32 on the CPU); None
    where numba failed (see falls_back)."""
    outputs = [t for t in (frames, image, alpha, layer) if t is not None]
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in outputs):
        return False
    if not all(t.is_contiguous() for t in outputs[1:]):
        return False
    written = _ALPHA_ONLY if image is None else _IMAGE_ONLY if alpha is None or layer is None else _ALL
    batch, height, width, _ = frames.shape
    # outputs not written: empty rows of every frame (their rows' views are taken, never read or written)
    image = torch.zeros(batch, height, 0, 1) if image is None else image
    alpha = torch.zeros(batch, height, 0) if written == _IMAGE_ONLY else alpha
    layer = torch.zeros(batch, height, 0, 4) if written != _ALL else layer
    frame = (prims.frame - frame_start).numpy()
    color = prims.color.float().contiguous().numpy()
    span, visible, _pixels = _tile_spans(
        prims.bounds.float().contiguous().numpy(), frame, np.ascontiguousarray(color[:, 3]), batch, height, width, tile
    )
    if atlas is None and bool((visible & (prims.kind.numpy() == SPRITE)).any()):
        raise ValueError("sprite primitives need the atlas they index")
    atlas = torch.zeros(1, 1) if atlas is None else atlas.float().contiguous()
    band_start, listed = _bands(span, frame, visible, batch, -(-height // tile))
    # parts of interleaved bands, taken by the threads as they finish (core.numba.balanced)
    parts = max(1, min(batch * -(-height // tile), torch_threads() * PARTS_PER_THREAD))
    with balanced(parts):
        _composite(
            band_start,
            listed,
            span,
            prims.kind.contiguous().numpy(),
            prims.params.float().contiguous().numpy(),
            color,
            prims.group.contiguous().numpy(),
            atlas.numpy(),
            frames.contiguous().numpy(),
            image.numpy(),
            alpha.numpy(),
            layer.numpy(),
            tile,
            straight,
            written,
            parts,
        )
    return True


@falls_back
def tile_work(prims, batch: int, height: int, width: int, tile: int) -> int:
    """compositor._cpu_work: the pixels of `batch` frames and of the tiles of every primitive's span."""
    span, visible, pixels = _tile_spans(
        prims.bounds.float().contiguous().numpy(),
        np.zeros(len(prims), np.int64),
        np.ones(len(prims), np.float32),
        1,
        height,
        width,
        tile,
    )
    return batch * height * width + pixels
