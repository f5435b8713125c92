"""gpu_rendering's loops compiled for the CPU by numba: the tile compositor, aliased polylines and
the points of line plots.

The compositor is the CUDA kernel's loop (each pixel of a tile takes its primitives in drawing order)
with the torch path's tile classes, in one pass that writes every pixel of the image, alpha and layer
once. On the CPU the torch path's dense per-class evaluations and its compositing by doubling make
many frame-sized temporaries; this loop makes none, so its cost is the outputs' first touch plus the
covered pixels (bench/bench_boxes.py). Aliased polylines are Bresenham's algorithm as the torch path
(and OpenCV) walk it, one image per iteration, and the plots' points are series_points' float32
arithmetic in one pass (bench/bench_series.py).

All run in parallel on as many threads as torch uses (ComfyUI's and the user's setting; never more).
Compiled on first use and cached beside this file.
"""
from __future__ import annotations

import functools
import zlib

import numba
import numpy as np
import torch

from .compositor import _MISSED, _SOLID, BOX_FILL, BOX_STROKE, DISC, ELLIPSE, ELLIPSE_STEPS, SEGMENT, SPRITE, tile_spans


def falls_back(fn):
    """fn, made to return None where numba cannot compile or run its loop on this machine (the caller
    then takes the torch path, which gives the same pixels); the log says so once."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except numba.core.errors.NumbaError as error:
            if not _failed:
                _failed.append(error)
                print(f"RasterKit: numba's CPU loop failed ({type(error).__name__}: {str(error)[:300]}); the torch "
                      f"path draws instead (set RASTERKIT_DISABLE_NUMBA=1 to skip the attempt)")
            return None
    return call


_failed: list = []


def torch_threads() -> int:
    """Sets numba's thread count to torch's (ComfyUI's and the user's setting: never more) and returns it."""
    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    return threads


def _jit(**options):
    """numba.njit with its on-disk cache, one cache per name this module is imported under: numba's
    cached code imports its module again by name, and the pack is imported under its folder's path by
    ComfyUI, as `rasterkit` by the tests and as `utils` by the benchmarks."""
    def compile(fn):
        fn.__qualname__ = f"{fn.__qualname__}_{zlib.crc32(__name__.encode()):08x}"  # a name for files
        return numba.njit(cache=True, **options)(fn)
    return compile


@_jit(inline="always")
def _from_distance(d):
    return min(max(np.float32(0.5) - d, np.float32(0.0)), np.float32(1.0))


@_jit(inline="always")
def _thin_weight(half):
    return min(max(np.float32(2.0) * half, np.float32(0.0)), np.float32(1.0))


@_jit(inline="always")
def _box(ax, ay, hx, hy, r, rounded):
    """Coverage of a box at |offset from its centre| ax, ay along its axes (see _turned_box)."""
    if rounded and r >= 1.0:
        qx, qy = ax - (hx - r), ay - (hy - r)
        cx, cy = max(qx, np.float32(0.0)), max(qy, np.float32(0.0))
        return _from_distance(np.sqrt(np.float32(cx * cx + cy * cy)) + min(max(qx, qy), np.float32(0.0)) - r)
    return _from_distance(ax - hx) * _from_distance(ay - hy)


@_jit(inline="always")
def _ellipse_distance(ax, ay, a, b):
    """See gpu_rendering._ellipse_distance."""
    px, py = max(ax, np.float32(1e-3)), max(ay, np.float32(1e-3))
    tx = ty = np.float32(0.70710677)
    ab = a * a - b * b
    for _ in range(ELLIPSE_STEPS):
        ex, ey = ab * (tx * tx * tx) / a, -ab * (ty * ty * ty) / b
        rx, ry = a * tx - ex, b * ty - ey
        qx, qy = px - ex, py - ey
        ratio = np.sqrt(np.float32(rx * rx + ry * ry)) / max(np.sqrt(np.float32(qx * qx + qy * qy)),
                                                                 np.float32(1e-6))
        tx = min(max((qx * ratio + ex) / a, np.float32(0.0)), np.float32(1.0))
        ty = min(max((qy * ratio + ey) / b, np.float32(0.0)), np.float32(1.0))
        norm = max(np.sqrt(np.float32(tx * tx + ty * ty)), np.float32(1e-6))
        tx, ty = tx / norm, ty / norm
    dx, dy = px - a * tx, py - b * ty
    distance = np.sqrt(np.float32(dx * dx + dy * dy))
    return -distance if (px / a) * (px / a) + (py / b) * (py / b) <= 1.0 else distance


@_jit(inline="always")
def _coverage(kind, pair_class, params, p, ox, oy, gx, gy, atlas):
    """Coverage of primitive p (params [P,10]) at the pixel centre ox + gx, oy + gy (its tile's first
    pixel centre, the pixel's place in the tile), each offset formed as the torch path forms it."""
    if pair_class == _SOLID:
        return np.float32(1.0)
    x, y = (ox - params[p, 0]) + gx, (oy - params[p, 1]) + gy
    if kind == SEGMENT:
        half, weight = max(params[p, 4], np.float32(0.5)), _thin_weight(params[p, 4])
        dx, dy = params[p, 2] - params[p, 0], params[p, 3] - params[p, 1]
        length = max(np.sqrt(np.float32(dx * dx + dy * dy)), np.float32(1e-12))
        ux, uy = dx / length, dy / length
        along = x * ux + y * uy
        across = abs(x * uy - y * ux)
        # from the far end (see gpu_rendering._segment_coverage)
        beyond = max(-along, ((ox - params[p, 2]) + gx) * ux + ((oy - params[p, 3]) + gy) * uy)
        if params[p, 5] > 0.0:
            return _from_distance(across - half) * _from_distance(beyond) * weight
        b = max(beyond, np.float32(0.0))
        return _from_distance(np.sqrt(np.float32(b * b + across * across)) - half) * weight
    if kind == BOX_FILL or kind == BOX_STROKE:
        cosine, sine = params[p, 8], params[p, 9]
        turned = sine != 0.0
        ax = abs(cosine * x + sine * y) if turned else abs(x)
        ay = abs(cosine * y - sine * x) if turned else abs(y)
        hx, hy, r = params[p, 2], params[p, 3], params[p, 4]
        rounded = turned or pair_class == _NEAR_CORNER
        if kind == BOX_FILL:
            return _box(ax, ay, hx, hy, r, rounded)
        half, weight = max(params[p, 5], np.float32(0.5)), _thin_weight(params[p, 5])
        inner = np.float32(0.0)
        if hx > half and hy > half:
            inner = _box(ax, ay, hx - half, hy - half, max(r - half, np.float32(0.0)), rounded)
        outer = _box(ax, ay, hx + half, hy + half, r + half, rounded)
        outline = max(outer - inner, np.float32(0.0)) * weight
        arms = params[p, 6]
        if arms > 0.0:
            keep_x = min(max((ax - (hx - arms)) + np.float32(0.5), np.float32(0.0)), np.float32(1.0))
            keep_y = min(max((ay - (hy - arms)) + np.float32(0.5), np.float32(0.0)), np.float32(1.0))
            outline = outline * (keep_x * keep_y)
        return outline
    if kind == DISC or kind == ELLIPSE:
        if kind == DISC:
            distance, ring = np.sqrt(np.float32(x * x + y * y)) - params[p, 2], params[p, 3]
        else:
            cosine, sine = params[p, 8], params[p, 9]
            distance = _ellipse_distance(abs(cosine * x + sine * y), abs(cosine * y - sine * x), params[p, 2],
                                         params[p, 3])
            ring = params[p, 4]
        if ring > 0.0:
            return _from_distance(abs(distance) - max(ring, np.float32(0.5))) * _thin_weight(ring)
        return _from_distance(distance)
    if kind == SPRITE:
        u = np.int64(np.rint(((ox - np.float32(0.5)) - params[p, 0]) + gx))  # half to even, as torch.round
        v = np.int64(np.rint(((oy - np.float32(0.5)) - params[p, 1]) + gy))
        if u < 0 or v < 0 or u >= np.int64(params[p, 2]) or v >= np.int64(params[p, 3]):
            return np.float32(0.0)
        column = min(max(np.int64(params[p, 4]) + u, 0), atlas.shape[1] - 1)
        row = min(max(np.int64(params[p, 5]) + v, 0), atlas.shape[0] - 1)
        return atlas[row, column]
    return np.float32(0.0)


_EVALUATE, _NEAR_CORNER = 0, 1  # the other classes a tile can have: _SOLID, _MISSED


@_jit(inline="always")
def _tile_class(kind, params, p, ox, oy, tile):
    """How primitive p meets the tile whose first pixel centre is ox, oy, as gpu_rendering._classify
    decides it (the same float32 arithmetic): _MISSED (no pixel covered), _SOLID (every pixel covered),
    _NEAR_CORNER (a box's tile near a rounded corner) or _EVALUATE."""
    spread = np.float32((tile - 1) / 2)
    reach = np.float32(tile * 0.7072 + 1)
    tx, ty = (ox - params[p, 0]) + spread, (oy - params[p, 1]) + spread  # anchor to the tile's centre
    if kind == SEGMENT:
        dx, dy = params[p, 2] - params[p, 0], params[p, 3] - params[p, 1]
        t = min(max((tx * dx + ty * dy) / max(dx * dx + dy * dy, np.float32(1e-12)), np.float32(0.0)),
                np.float32(1.0))
        ex, ey = tx - t * dx, ty - t * dy
        if np.sqrt(np.float32(ex * ex + ey * ey)) > max(params[p, 4], np.float32(0.5)) + reach:
            return _MISSED
        return _EVALUATE
    if kind == DISC or kind == ELLIPSE:
        distance = np.sqrt(np.float32(tx * tx + ty * ty))
        if kind == DISC:
            ring, outer, inner = params[p, 3], params[p, 2], params[p, 2]
        else:
            ring, outer = params[p, 4], max(params[p, 2], params[p, 3])
            inner = min(params[p, 2], params[p, 3])
        if distance > outer + max(ring, np.float32(0.5)) + reach:
            return _MISSED
        if ring > 0.0 and distance < inner - max(ring, np.float32(0.5)) - reach:
            return _MISSED
        if ring == 0.0 and distance + np.float32(tile * 0.7072) + np.float32(0.5) <= inner:
            return _SOLID
        return _EVALUATE
    if kind == BOX_FILL or kind == BOX_STROKE:
        cosine, sine = params[p, 8], params[p, 9]
        if sine != 0.0:  # measured in the box's frame
            tx, ty = cosine * tx + sine * ty, cosine * ty - sine * tx
            spread = spread * (abs(cosine) + abs(sine))
        tx, ty = abs(tx), abs(ty)
        stroke = np.float32(1.0) if kind == BOX_STROKE else np.float32(0.0)
        hx, hy, r, half = params[p, 2], params[p, 3], params[p, 4], params[p, 5]
        if (tx - (spread + 1) > hx + max(half, np.float32(0.5)) * stroke
                or ty - (spread + 1) > hy + max(half, np.float32(0.5)) * stroke):
            return _MISSED
        margin = (half + np.float32(0.5)) * stroke + (spread + 1)
        if tx + margin <= hx - r and ty + margin <= hy - r:  # inside the straight parts
            return _MISSED if kind == BOX_STROKE else _SOLID
        if tx + (spread + 1) >= hx - r and ty + (spread + 1) >= hy - r:
            return _NEAR_CORNER
        return _EVALUATE
    return _EVALUATE


@_jit(inline="always")
def _tile_coverage(kind, found, params, p, ox, oy, tile, atlas, out, sides):
    """Coverage of primitive p on the tile whose first pixel centre is ox, oy into out [T*T] (row-major),
    `found` its _tile_class. A box along the axes away from its corners is separable, as in the torch
    path: each side's coverage is found once per column and once per row (into sides [2,3,T])."""
    if (kind == BOX_FILL or kind == BOX_STROKE) and params[p, 9] == 0.0 and found == _EVALUATE:
        hx, hy, stroke = params[p, 2], params[p, 3], kind == BOX_STROKE
        half = max(params[p, 5], np.float32(0.5)) if stroke else np.float32(0.0)
        weight = _thin_weight(params[p, 5]) if stroke else np.float32(1.0)
        arms = params[p, 6] if stroke and params[p, 6] > 0.0 else np.float32(np.inf)
        has_inner = stroke and hx > half and hy > half
        for axis in range(2):  # x, y: the outer box, the inner one and the corner arms' keep
            h = hx if axis == 0 else hy
            for g in range(tile):
                a = abs(((ox - params[p, 0]) if axis == 0 else (oy - params[p, 1])) + np.float32(g))
                sides[axis, 0, g] = _from_distance(a - (h + half))
                sides[axis, 1, g] = _from_distance(a - (h - half)) if has_inner else np.float32(0.0)
                sides[axis, 2, g] = min(max((a - (h - arms)) + np.float32(0.5), np.float32(0.0)), np.float32(1.0))
        for gy in range(tile):
            for gx in range(tile):
                outline = max(sides[0, 0, gx] * sides[1, 0, gy] - sides[0, 1, gx] * sides[1, 1, gy], np.float32(0.0))
                out[gy * tile + gx] = outline * weight * (sides[0, 2, gx] * sides[1, 2, gy])
        return
    for gy in range(tile):
        for gx in range(tile):
            out[gy * tile + gx] = _coverage(kind, found, params, p, ox, oy, np.float32(gx), np.float32(gy), atlas)


@_jit(inline="always")
def _over(layer, x0, coverage, tile, cr, cg, cb, ca):
    """Source-over of a shape of colour cr, cg, cb, opacity ca and coverage [T*T] onto a tile of
    layer [T, W, 4] (premultiplied) at column x0."""
    for gy in range(tile):
        for gx in range(tile):
            a = coverage[gy * tile + gx] * ca
            keep = np.float32(1.0) - a
            x = x0 + gx
            layer[gy, x, 0] = a * cr + keep * layer[gy, x, 0]  # indexed, not through views: a view in
            layer[gy, x, 1] = a * cg + keep * layer[gy, x, 1]  # an inner loop costs reference counting
            layer[gy, x, 2] = a * cb + keep * layer[gy, x, 2]
            layer[gy, x, 3] = a + keep * layer[gy, x, 3]


@_jit(inline="always")
def _over_solid(layer, x0, tile, cr, cg, cb, ca):
    """Source-over of colour cr, cg, cb at opacity ca over a whole tile of layer [T, W, 4]."""
    keep = np.float32(1.0) - ca
    for gy in range(tile):
        for x in range(x0, x0 + tile):
            layer[gy, x, 0] = ca * cr + keep * layer[gy, x, 0]
            layer[gy, x, 1] = ca * cg + keep * layer[gy, x, 1]
            layer[gy, x, 2] = ca * cb + keep * layer[gy, x, 2]
            layer[gy, x, 3] = ca + keep * layer[gy, x, 3]


@_jit()
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


@_jit(parallel=True)
def _composite(band_start, listed, span, kind, params, color, group, atlas, source, image, alpha, layer, tile,
               straight, written, parts):
    """Every band of every frame of source [b,H,W,C] into image, alpha and layer (see render), or those
    `written` names (_IMAGE_ONLY, _ALPHA_ONLY): the band's primitives (band_start, listed from _bands)
    in drawing order, each over the tiles of its span (span [P,4]) that _tile_class does not rule out;
    `parts` threads take every parts-th band."""
    frames, height, width, channels = source.shape
    tiles_y, tiles_x = (height + tile - 1) // tile, (width + tile - 1) // tile
    for part in numba.prange(parts):  # each thread draws every parts-th band with buffers of its own
        band_layer = np.empty((tile, tiles_x * tile, 4), np.float32)  # only its drawn tiles are read
        drawn = np.empty(tiles_x, np.bool_)
        # the current shape (a group's primitives merge by maximum coverage): its coverage per tile
        shape = np.empty((tiles_x, tile * tile), np.float32)
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
                alone = ((k == first or group[listed[k - 1]] != group[p])  # its group's only primitive here
                         and (k + 1 == last or group[listed[k + 1]] != group[p]))
                for column in range(span[p, 0], span[p, 2] + 1):
                    ox = np.float32(column * tile) + np.float32(0.5)
                    found = _tile_class(kind[p], params, p, ox, oy, tile)
                    if found == _MISSED:
                        continue
                    if alone and not drawn[column]:
                        drawn[column] = True
                        band_layer[:, column * tile:(column + 1) * tile] = 0.0
                    if alone and found == _SOLID:  # one opacity over the whole tile
                        _over_solid(band_layer, column * tile, tile, color[p, 0], color[p, 1], color[p, 2],
                                    color[p, 3])
                        continue
                    if found == _SOLID:
                        coverage[:] = 1.0
                    else:
                        _tile_coverage(kind[p], found, params, p, ox, oy, tile, atlas, coverage, sides)
                    if alone:  # a shape of its own: straight onto the layer
                        _over(band_layer, column * tile, coverage, tile, color[p, 0], color[p, 1], color[p, 2],
                              color[p, 3])
                    elif not in_shape[column]:
                        in_shape[column] = True
                        shape_tiles[n_shape] = column
                        n_shape += 1
                        shape[column] = coverage
                    else:
                        for i in range(tile * tile):
                            shape[column, i] = max(shape[column, i], coverage[i])
                if alone or (k + 1 < last and group[listed[k + 1]] == group[p]):
                    continue
                for i in range(n_shape):  # the shape is complete: source-over onto the tiles it reached
                    column = shape_tiles[i]
                    if not drawn[column]:
                        drawn[column] = True
                        band_layer[:, column * tile:(column + 1) * tile] = 0.0
                    _over(band_layer, column * tile, shape[column], tile, color[p, 0], color[p, 1], color[p, 2],
                          color[p, 3])
                    in_shape[column] = False
                n_shape = 0
            _write_band(band_layer, drawn, source, image, alpha, layer, frame, row, tile, straight, written)


@_jit(inline="always")
def _write_band(band_layer, drawn, source, image, alpha, layer, frame, row, tile, straight, written):
    """Every pixel of a band written once, in the outputs `written` names: the layer over the source, the
    layer (straight alpha if `straight`) and its alpha; undrawn runs of tiles as flat copies and fills
    (what the compiler vectorises)."""
    height, width, channels = source.shape[1], source.shape[2], source.shape[3]
    tiles_x = drawn.shape[0]
    for y in range(row * tile, min(row * tile + tile, height)):
        gy = y - row * tile
        if written == _ALPHA_ONLY:
            alpha_row = alpha[frame, y]
            for column in range(tiles_x):
                x0, x1 = column * tile, min(column * tile + tile, width)
                for x in range(x0, x1):
                    alpha_row[x] = band_layer[gy, x, 3] if drawn[column] else np.float32(0.0)
            continue
        image_row, source_row = image[frame, y].reshape(-1), source[frame, y].reshape(-1)
        column = 0
        while column < tiles_x:
            end = column + 1
            while end < tiles_x and drawn[end] == drawn[column]:
                end += 1
            x0, x1 = column * tile, min(end * tile, width)
            if not drawn[column]:
                for i in range(x0 * channels, x1 * channels):
                    image_row[i] = source_row[i]
            else:
                for x in range(x0, x1):
                    la = band_layer[gy, x, 3]
                    keep = np.float32(1.0) - la
                    for c in range(3):
                        image_row[x * channels + c] = band_layer[gy, x, c] + source_row[x * channels + c] * keep
                    if channels == 4:
                        image_row[x * 4 + 3] = la + source_row[x * 4 + 3] * keep
            column = end
        if written == _IMAGE_ONLY:
            continue
        layer_row, alpha_row = layer[frame, y].reshape(-1), alpha[frame, y]
        for column in range(tiles_x):
            x0, x1 = column * tile, min(column * tile + tile, width)
            if not drawn[column]:
                for i in range(x0 * 4, x1 * 4):
                    layer_row[i] = 0.0
                for x in range(x0, x1):
                    alpha_row[x] = 0.0
                continue
            for x in range(x0, x1):
                la = band_layer[gy, x, 3]
                # straight alpha as gpu_rendering.straight_alpha gives it: RGB / alpha in 0..1, 0 where
                # alpha is 0
                scale = np.float32(1.0) / la if straight and la > 0.0 else np.float32(1.0)
                for c in range(3):
                    value = band_layer[gy, x, c]
                    if straight:
                        value = min(max(value * scale, np.float32(0.0)), np.float32(1.0)) if la > 0.0 else 0.0
                    layer_row[x * 4 + c] = value
                layer_row[x * 4 + 3] = la
                alpha_row[x] = la


@falls_back
def render(frames: torch.Tensor, image: torch.Tensor | None, alpha: torch.Tensor | None,
           layer: torch.Tensor | None, prims, frame_start: int, atlas: torch.Tensor | None, tile: int,
           straight: bool = False) -> bool:
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
    image = torch.zeros(0, 0, 0, 1) if image is None else image  # not written: shapes for the compiler
    alpha = torch.zeros(0, 0, 0) if written == _IMAGE_ONLY else alpha
    layer = torch.zeros(0, 0, 0, 4) if written != _ALL else layer
    batch, height, width, _ = frames.shape
    span, sizes = tile_spans(prims.bounds, height, width, tile)
    frame = prims.frame - frame_start
    visible = (frame >= 0) & (frame < batch) & (prims.color[:, 3] > 0) & (sizes > 0).all(1)
    if atlas is None and bool((visible & (prims.kind == SPRITE)).any()):
        raise ValueError("sprite primitives need the atlas they index")
    atlas = torch.zeros(1, 1) if atlas is None else atlas.float().contiguous()
    band_start, listed = _bands(span.numpy(), frame.numpy(), visible.numpy(), batch, -(-height // tile))
    threads = torch_threads()
    _composite(band_start, listed, span.numpy(), prims.kind.contiguous().numpy(),
               prims.params.float().contiguous().numpy(), prims.color.float().contiguous().numpy(),
               prims.group.contiguous().numpy(), atlas.numpy(), frames.contiguous().numpy(), image.numpy(),
               alpha.numpy(), layer.numpy(), tile, straight, written, threads)
    return True


@_jit(parallel=True)
def _value_range(values, counts):
    """(low, high) float32 [B] of the finite values among the first counts[b] of each series values
    [B,T]; (inf, -inf) where there are none (gpu_rendering.value_range's "per_image")."""
    low = np.full(values.shape[0], np.inf, np.float32)
    high = np.full(values.shape[0], -np.inf, np.float32)
    for b in numba.prange(values.shape[0]):
        for t in range(counts[b]):
            v = values[b, t]
            if np.isfinite(v):
                low[b], high[b] = min(low[b], v), max(high[b], v)
    return low, high


@_jit(parallel=True)
def _series_points(values, counts, low, high, height, width):
    """gpu_rendering.series_points of y values [B,T] with (low, high) [B], in its float32 arithmetic
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


@_jit(parallel=True)
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
# term, as gpu_rendering._lines computes it), taken as a product with a rounded-up reciprocal: exact
# while numerator x divisor < 2**_SHIFT, i.e. for segments up to MAX_EXTENT pixels long; independent
# of the previous step, so no branch to mispredict (measured 1.5x the incremental error term)
_SHIFT = 44
MAX_EXTENT = 16384


@_jit(parallel=True)
def _polylines(out, points, counts, value, start, stop):
    height, width = out.shape[1], out.shape[2]
    flat = out.reshape(out.shape[0], height * width)
    for b in numba.prange(start, stop):
        image = flat[b]
        image[:] = 0  # cleared here, in cache, rather than as a separate pass over the batch
        for t in range(counts[b] - 1):
            if not (np.isfinite(points[b, t, 0] + points[b, t, 1])
                    and np.isfinite(points[b, t + 1, 0] + points[b, t + 1, 1])):
                continue  # a gap
            # the pixels holding the ends, walked from the end with the larger x (see gpu_rendering._lines)
            ax, ay = np.int64(np.floor(points[b, t, 0])), np.int64(np.floor(points[b, t, 1]))
            bx, by = np.int64(np.floor(points[b, t + 1, 0])), np.int64(np.floor(points[b, t + 1, 1]))
            if ax < bx:
                ax, ay, bx, by = bx, by, ax, ay
            dx, dy = bx - ax, by - ay
            sx, sy = (dx > 0) - (dx < 0), (dy > 0) - (dy < 0)
            if abs(dx) >= abs(dy):
                major, minor, step, side = abs(dx), abs(dy), sx, sy * width
            else:
                major, minor, step, side = abs(dy), abs(dx), sy * width, sx
            length = max(major, 1)
            reciprocal = ((1 << _SHIFT) + 2 * length - 1) // (2 * length)
            origin = ay * width + ax
            for i in range(major + 1):
                minor_steps = ((2 * minor * i + length) * reciprocal) >> _SHIFT
                image[np.uint64(origin + i * step + minor_steps * side)] = value


@falls_back
def series_points(values: np.ndarray, counts: np.ndarray, scale: str, height: int, width: int):
    """gpu_rendering.series_points of y values float32 [B,T] (counts int64 [B]) over the (low, high) of
    gpu_rendering.value_range(scale): the same points float32 [B,T,2], in one pass each."""
    torch_threads()
    low, high = _value_range(values, counts)
    if scale == "shared" and len(low):
        low, high = np.full_like(low, low.min()), np.full_like(high, high.max())
    return _series_points(values, counts, low, high, height, width)


@falls_back
def polylines(images: np.ndarray, points: np.ndarray, counts: np.ndarray, value: float, on_progress=None,
              chunk: int = 1024) -> bool:
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
