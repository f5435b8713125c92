"""Anti-aliased 2D primitives from signed distance fields, tile-binned, on batches of frames.

Conventions: pixel coordinates, x right, y down, pixel centres at +0.5. A primitive's coverage of a
pixel is clamp(0.5 - d, 0, 1), d the signed distance from the pixel centre to the shape's edge
(negative inside): exact box-filter coverage for straight edges along the axes, within 0.05 for
any other straight edge. Primitives are composited source-over in index order with premultiplied
alpha, so overlapping translucent fills build up as they would drawn one after another.

Primitives of one group (the segments of a polyline) form one shape: their coverages merge by
maximum before compositing, so joints are drawn once.

The work is organised in three steps, each one batched over every primitive of every frame:
  1. binning: each primitive is listed in the 8x8 tiles that its bounds touch, less the tiles its
     shape cannot reach, and the (tile, primitive) pairs are sorted by tile then drawing order;
  2. coverage of each pair on its tile's 64 pixels, one dense evaluation per class of pairs (the
     kind; for boxes, whether the tile is near a rounded corner, and whether the box is turned;
     tiles covered fully need none);
  3. compositing of every tile at once: the transmittance above each pair is a product over the
     pairs above it in its tile, a segmented product over the sorted pairs taken by doubling
     (log2 of the deepest tile's depth passes), and each tile sums its pairs' contributions.
Cost follows the covered area, not frame area times primitive count. The host waits for the device
once per chunk of frames, as on the CUDA kernel's path: the number of pairs, read with bounds that size
the rest (each class group's pairs, each tile's shapes).
On the CPU, where numba is installed, compositor_cpu.py does the same work as one compiled loop; on
NVIDIA GPUs with CuPy, compositor_cuda.py's kernel composites the binned pairs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.batching import expand_counts
from ..core.device import chunk_size, cupy_usable, normalize, numba_usable, on_huge_pages, run_chunked
from .compositor_cuda import composite_tiles_cuda
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
    DISC_CX,
    DISC_CY,
    DISC_RADIUS,
    DISC_RING_HALF,
    ELLIPSE,
    ELLIPSE_COS,
    ELLIPSE_CX,
    ELLIPSE_CY,
    ELLIPSE_RADIUS_X,
    ELLIPSE_RADIUS_Y,
    ELLIPSE_RING_HALF,
    ELLIPSE_SIN,
    ELLIPSE_STEPS,
    HALO,
    HALO_COS,
    HALO_CX,
    HALO_CY,
    HALO_HALF_X,
    HALO_HALF_Y,
    HALO_RADIUS,
    HALO_SIN,
    HALO_WIDTH,
    N_KINDS,
    N_PAIR_CLASSES,
    N_PARAMS,
    PAIR_BOX_FILL,
    PAIR_BOX_FILL_CORNER,
    PAIR_BOX_STROKE,
    PAIR_BOX_STROKE_CORNER,
    PAIR_DISC,
    PAIR_ELLIPSE,
    PAIR_HALO,
    PAIR_MISSED,
    PAIR_SEGMENT,
    PAIR_SOLID,
    PAIR_SPRITE,
    PAIR_TRIANGLE,
    PAIR_TURNED_FILL,
    PAIR_TURNED_STROKE,
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
    TILE,
    TRIANGLE,
    TRIANGLE_AX,
    TRIANGLE_BX,
    TRIANGLE_CX,
    TRIANGLE_CY,
)
from .primitives import Primitives, tile_spans

# -- coverage per class of (tile, primitive) pairs ------------------------------------------------
# Each evaluation takes params p [m,N_PARAMS], the centre of each pair's tile's first pixel, origin [m,2],
# and the pixel offsets inside a tile g [T] (0, 1, ..., T-1); it returns coverage [m,T*T], pixels
# row after row. The classes of pairs (PAIR_*) and their order of evaluation: constants.py.


def _from_distance(d: torch.Tensor) -> torch.Tensor:
    return (0.5 - d).clamp(0.0, 1.0)


def _thin(half: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Strokes thinner than 1 px are drawn 1 px wide at proportionally lower opacity."""
    return half.clamp_min(0.5)[:, None], (2 * half).clamp(0, 1)[:, None]


@functools.lru_cache(maxsize=8)
def _tile_steps(tile: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """0 .. tile - 1, int64 [T], and the pixels' offsets in a tile, x and y, int64 [2,T*T] (pixels row after
    row), on the device: made once a tile size and device (constants: never written to)."""
    steps = torch.arange(tile, device=device)
    return steps, torch.stack(torch.meshgrid(steps, steps, indexing="xy")).view(2, -1)


def _offsets(g: torch.Tensor) -> torch.Tensor:
    """The pixels' offsets in a tile [2,T*T] (_tile_steps') of g [T] (0 .. T-1)."""
    return _tile_steps(g.numel(), g.device)[1]


def _pixels(origin: torch.Tensor, g: torch.Tensor):
    """Pixel centres ox + gx, oy + gy as columns ox, oy [m,1] and rows gx, gy [1,T*T]."""
    gx, gy = _offsets(g)
    return origin[:, 0:1], origin[:, 1:2], gx[None], gy[None]


def _col(p: torch.Tensor, first: int, last: int | None = None) -> torch.Tensor:
    """The params columns first .. last (constants.py names them) of p [m,N_PARAMS], a view [m,k]; last
    None: the column `first` alone, [m,1]."""
    return p[:, first : (first if last is None else last) + 1]


def _segment_coverage(p, origin, g, butt_caps: bool = True):
    """butt_caps False: no segment has butt ends (their coverage is not computed)."""
    half, weight = _thin(p[:, SEGMENT_HALF_WIDTH])
    # the x and y columns at once: the same values as one at a time (a sum of two is one rounded addition)
    d = _col(p, SEGMENT_BX, SEGMENT_BY) - _col(p, SEGMENT_AX, SEGMENT_AY)
    length = torch.sqrt((d * d).sum(1, keepdim=True)).clamp_min(1e-12)
    u = d / length
    to = origin[:, None] - _col(p, SEGMENT_AX, SEGMENT_BY).view(-1, 2, 2)  # [m,2,2]: from end a, from end b
    pixel = to[..., None] + _offsets(g)  # [m,2,2,T*T]: from each end, x and y
    px, py = pixel[:, :, 0], pixel[:, :, 1]
    along = (pixel * u[:, None, :, None]).sum(2)
    across = (px[:, 0] * u[:, 1:2] - py[:, 0] * u[:, 0:1]).abs()
    # how far past the ends, measured from each end: (p - b).u, where (p - a).u - length loses the low bits
    # of a long segment's length (the torch path, whose CPU sqrt is not correctly rounded, and the kernels
    # then differed by ~ulp(length) at its far cap)
    beyond = torch.maximum(-along[:, 0], along[:, 1])
    cap = _from_distance(torch.sqrt(beyond.clamp_min(0) ** 2 + across * across) - half)
    if butt_caps:  # butt ends: the product of the side and end coverages is exact where edges meet at right angles
        cap = torch.where(_col(p, SEGMENT_BUTT) > 0, _from_distance(across - half) * _from_distance(beyond), cap)
    return cap * weight


def _separable_box(offset: torch.Tensor, half_size: torch.Tensor) -> torch.Tensor:
    """Coverage [m,S,T,T] of S boxes per pair with sharp corners: offset [m,1,2,T] (|x - cx| per column,
    |y - cy| per row), half sizes [m,S,2]. The product of the two sides' coverages: exact, and one
    product per pixel."""
    side = _from_distance(offset - half_size[..., None])
    return side[..., 0, None, :] * side[..., 1, :, None]


def _rounded_box(offset: torch.Tensor, half_size: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """Coverage [m,S,T,T] of boxes with corners of radius [m,S], from their signed distance."""
    q = offset - (half_size - radius[..., None])[..., None]
    outside = q.clamp_min(0) ** 2
    distance = (
        torch.sqrt(outside[..., 0, None, :] + outside[..., 1, :, None])
        + torch.maximum(q[..., 0, None, :], q[..., 1, :, None]).clamp_max(0)
        - radius[..., None, None]
    )
    return _from_distance(distance)


def _box_coverage(p, origin, g, pair_class):
    """Coverage of box pairs of classes PAIR_BOX_FILL, PAIR_BOX_STROKE, PAIR_BOX_STROKE_CORNER, PAIR_BOX_FILL_CORNER
    (pair_class [m], each row's; rows of later classes get values that no one reads). Both are an outer
    box less an inner one: a fill is its box less nothing, an outline the box grown by half the stroke
    width less the box shrunk by as much. Coverage is separable except in tiles near a corner, where a
    box whose radius is >= 1 is evaluated from its rounded distance."""
    fill = ((pair_class == PAIR_BOX_FILL) | (pair_class == PAIR_BOX_FILL_CORNER))[:, None]

    def on_strokes(values, fill_value):  # values [m,k] on the stroke rows, fill_value on fill rows
        return values.masked_fill(fill, fill_value)

    offset = ((origin - _col(p, BOX_CX, BOX_CY))[..., None] + g).abs()[:, None]  # [m,1,2,T]
    size, radius, arms = _col(p, BOX_HALF_X, BOX_HALF_Y), _col(p, BOX_RADIUS), _col(p, BOX_CORNER_LENGTH)
    half = _col(p, BOX_HALF_STROKE).clamp_min(0.5)  # outlines thinner than 1 px are drawn 1 px wide, fainter
    grow = half.masked_fill(fill, 0.0)
    # the inner box: none for fills, nor on an axis the stroke is wider than (size -1: no pixel)
    inner = (size - half).masked_fill_(size <= half, -1.0)
    sizes = torch.stack([size + grow, on_strokes(inner, -1.0)], 1)  # [m,2,2] outer, inner
    radii = torch.cat([radius + grow, (radius - half).clamp_min(0)], 1)  # [m,2]
    rounded = (radii >= 1) & (pair_class >= PAIR_BOX_STROKE_CORNER)[:, None]  # near a corner
    coverage = torch.where(rounded[..., None, None], _rounded_box(offset, sizes, radii), _separable_box(offset, sizes))
    weight = on_strokes((2 * _col(p, BOX_HALF_STROKE)).clamp(0, 1), 1.0)[..., None]
    outline = (coverage[:, 0] - coverage[:, 1]).clamp_min(0) * weight
    # corner-only outlines keep pixels near both a vertical and a horizontal side; soft ends (AA)
    arms = on_strokes(arms.masked_fill(arms <= 0, float("inf")), float("inf"))  # inf: the whole outline
    keep = (offset[:, 0] - (size - arms)[..., None] + 0.5).clamp(0, 1)
    return (outline * (keep[:, 0, None, :] * keep[:, 1, :, None])).reshape(p.shape[0], -1)


def _turned_box(ax, ay, hx, hy, r):
    """Coverage [m,N] of boxes at |offset from the centre| ax, ay [m,N] along their axes, half sizes hx,
    hy and corner radius r [m,1]: from the signed distance where r >= 1, else the product of the sides'
    coverages (sharper corners, as for unturned boxes)."""
    qx, qy = ax - (hx - r), ay - (hy - r)
    cx, cy = qx.clamp_min(0), qy.clamp_min(0)
    rounded = _from_distance(torch.sqrt(cx * cx + cy * cy) + torch.maximum(qx, qy).clamp_max(0) - r)
    return torch.where(r >= 1, rounded, _from_distance(ax - hx) * _from_distance(ay - hy))


def _turned_box_coverage(p, origin, g, pair_class):
    """Coverage of the pairs of turned boxes, classes PAIR_TURNED_FILL and PAIR_TURNED_STROKE (pair_class [m],
    each row's), in the box's frame, every pixel as unturned boxes near a corner are (no part is
    separable): a fill is its box, an outline the box grown by half the stroke width less the box shrunk
    by as much."""
    ox, oy, gx, gy = _pixels(origin, g)
    x, y = (ox - _col(p, BOX_CX)) + gx, (oy - _col(p, BOX_CY)) + gy
    cos, sin = _col(p, BOX_COS), _col(p, BOX_SIN)
    ax, ay = (cos * x + sin * y).abs(), (cos * y - sin * x).abs()
    hx, hy, r, arms = _col(p, BOX_HALF_X), _col(p, BOX_HALF_Y), _col(p, BOX_RADIUS), _col(p, BOX_CORNER_LENGTH)
    stroke = (pair_class == PAIR_TURNED_STROKE)[:, None]
    half = _col(p, BOX_HALF_STROKE).clamp_min(0.5) * stroke  # 0 on fills
    outer = _turned_box(ax, ay, hx + half, hy + half, r + half)
    # the inner box: none for fills, nor where the stroke is wider than the box
    has_inner = stroke & (hx > half) & (hy > half)
    inner = _turned_box(ax, ay, hx - half, hy - half, (r - half).clamp_min(0)) * has_inner
    weight = torch.where(stroke, (2 * _col(p, BOX_HALF_STROKE)).clamp(0, 1), 1.0)
    outline = (outer - inner).clamp_min(0) * weight
    arms = arms.masked_fill(~stroke | (arms <= 0), float("inf"))  # inf: the whole outline
    keep = ((ax - (hx - arms)) + 0.5).clamp(0, 1) * ((ay - (hy - arms)) + 0.5).clamp(0, 1)
    return outline * keep


def _halo_coverage(p, origin, g):
    """Coverage of halos: outside their box (the box fill's complement, so that halo and fill meet without
    a seam), 1 - smoothstep of the distance d from the box over the halo's width: (1 - t)^2 (1 + 2t),
    t = d / width clamped to 0..1."""
    ox, oy, gx, gy = _pixels(origin, g)
    x, y = (ox - _col(p, HALO_CX)) + gx, (oy - _col(p, HALO_CY)) + gy
    cos, sin = _col(p, HALO_COS), _col(p, HALO_SIN)
    ax, ay = (cos * x + sin * y).abs(), (cos * y - sin * x).abs()
    hx, hy, r = _col(p, HALO_HALF_X), _col(p, HALO_HALF_Y), _col(p, HALO_RADIUS)
    qx, qy = ax - (hx - r), ay - (hy - r)
    cx, cy = qx.clamp_min(0), qy.clamp_min(0)
    distance = torch.sqrt(cx * cx + cy * cy) + torch.maximum(qx, qy).clamp_max(0) - r
    t = (distance / _col(p, HALO_WIDTH)).clamp(0, 1)
    return (1 - _turned_box(ax, ay, hx, hy, r)) * ((1 - t) * (1 - t) * (1 + 2 * t))


def _ellipse_distance(ax, ay, a, b):
    """Signed distance from points at |offset from the centre| along the axes, ax, ay [m,N], to
    ellipses of semi-axes a, b [m,1]: the closest point on the quarter ellipse by ELLIPSE_STEPS steps
    of a trig-free iteration (each step moves the point along the ellipse by the arc that the circle of
    curvature at it subtends). Points on an axis are moved 1e-3 px off it, where the start needs a
    direction."""
    px, py = ax.clamp_min(1e-3), ay.clamp_min(1e-3)
    tx = torch.full_like(px, 0.70710677)
    ty = tx
    ab = a * a - b * b
    for _ in range(ELLIPSE_STEPS):
        ex, ey = ab * (tx * tx * tx) / a, -ab * (ty * ty * ty) / b  # the centre of curvature
        rx, ry = a * tx - ex, b * ty - ey
        qx, qy = px - ex, py - ey
        ratio = torch.sqrt(rx * rx + ry * ry) / torch.sqrt(qx * qx + qy * qy).clamp_min(1e-6)
        tx, ty = ((qx * ratio + ex) / a).clamp(0, 1), ((qy * ratio + ey) / b).clamp(0, 1)
        norm = torch.sqrt(tx * tx + ty * ty).clamp_min(1e-6)
        tx, ty = tx / norm, ty / norm
    dx, dy = px - a * tx, py - b * ty
    distance = torch.sqrt(dx * dx + dy * dy)
    inside = (px / a) * (px / a) + (py / b) * (py / b) <= 1
    return torch.where(inside, -distance, distance)


def _ellipse_coverage(p, origin, g):
    """Coverage of ellipse fills (ring half width 0) and outlines (rings centred on the curve)."""
    ox, oy, gx, gy = _pixels(origin, g)
    x, y = (ox - _col(p, ELLIPSE_CX)) + gx, (oy - _col(p, ELLIPSE_CY)) + gy
    cos, sin = _col(p, ELLIPSE_COS), _col(p, ELLIPSE_SIN)
    distance = _ellipse_distance(
        (cos * x + sin * y).abs(), (cos * y - sin * x).abs(), _col(p, ELLIPSE_RADIUS_X), _col(p, ELLIPSE_RADIUS_Y)
    )
    ring_half, weight = _thin(p[:, ELLIPSE_RING_HALF])
    ring = _from_distance(distance.abs() - ring_half) * weight
    return torch.where(_col(p, ELLIPSE_RING_HALF) > 0, ring, _from_distance(distance))


def _disc_coverage(p, origin, g, rings: bool = True):
    """rings False: no disc is a ring (their coverage is not computed)."""
    offset = (origin - _col(p, DISC_CX, DISC_CY))[..., None] + _offsets(g)  # [m,2,T*T]
    # the x and y squares at once: a sum of two is one rounded addition, as x^2 + y^2
    distance = torch.sqrt((offset**2).sum(1)) - _col(p, DISC_RADIUS)
    if not rings:
        return _from_distance(distance)
    ring_half, weight = _thin(p[:, DISC_RING_HALF])
    ring = _from_distance(distance.abs() - ring_half) * weight
    return torch.where(_col(p, DISC_RING_HALF) > 0, ring, _from_distance(distance))


def _triangle_coverage(p, origin, g):
    """Coverage of filled triangles: the product of the pixel's coverages by the three edges' half-planes,
    each from the signed distance to the edge's line (see primitives.triangles)."""
    ox, oy, gx, gy = _pixels(origin, g)
    coverage = None
    for first, second in ((TRIANGLE_AX, TRIANGLE_BX), (TRIANGLE_BX, TRIANGLE_CX), (TRIANGLE_CX, TRIANGLE_AX)):
        ex, ey = _col(p, second) - _col(p, first), _col(p, second + 1) - _col(p, first + 1)
        length = torch.sqrt(ex * ex + ey * ey).clamp_min(1e-12)
        x, y = (ox - _col(p, first)) + gx, (oy - _col(p, first + 1)) + gy
        side = _from_distance((ey * x - ex * y) / length)  # outside the edge: > 0 (its corners clockwise)
        coverage = side if coverage is None else coverage * side
    return coverage


def _sprite_coverage(p, origin, g, atlas):
    # the atlas pixel of each pixel, x and y at once: [m,2,T*T]; whole numbers, exact in float32 (pixel
    # centres less 0.5, less the sprite's corner, which sprites() floors)
    uv = ((origin - 0.5) - _col(p, SPRITE_X0, SPRITE_Y0))[..., None] + _offsets(g)
    inside = ((uv >= 0) & (uv < _col(p, SPRITE_WIDTH, SPRITE_HEIGHT)[..., None])).all(1)
    at = (_col(p, SPRITE_ATLAS_X, SPRITE_ATLAS_Y)[..., None] + uv).long()
    # outside its sprite a pixel may index past the atlas (its value is not used)
    index = torch.add(at[:, 0], at[:, 1], alpha=atlas.shape[1]).clamp_(0, atlas.numel() - 1)
    return atlas.view(-1)[index] * inside


@functools.lru_cache(maxsize=8)
def _class_numbers(device: torch.device) -> torch.Tensor:
    """0 .. N_PAIR_CLASSES, int64 on the device: made once a device (a constant: never written to)."""
    return torch.arange(N_PAIR_CLASSES + 1, device=device)


def _pair_coverage(prims, pairs: _Pairs, atlas, g) -> torch.Tensor:
    """Coverage float [Q, T*T] of the Q pairs in their order (those of missed pairs: any value), one dense
    evaluation per class group that may be present; g int64 [T]: 0 .. T-1. With one group (and solid pairs)
    every pair goes through it. Else the pairs are sorted by class, and as the host knows each group's size
    only as a bound (pairs.group_bounds: pairs of the kinds that feed it), each group reads that many sorted
    pairs from its start (on the device): the surplus falls on later classes, whose own evaluations
    overwrite it, or on missed and solid ones (solid ones are filled last)."""
    params, count, device = prims.params, pairs.primitive.numel(), g.device
    evaluations = (
        (PAIR_SEGMENT, lambda p, o, c: _segment_coverage(p, o, g, pairs.butt_caps)),
        (PAIR_BOX_FILL, lambda p, o, c: _box_coverage(p, o, g, c)),
        (PAIR_TURNED_FILL, lambda p, o, c: _turned_box_coverage(p, o, g, c)),
        (PAIR_DISC, lambda p, o, c: _disc_coverage(p, o, g, pairs.disc_rings)),
        (PAIR_ELLIPSE, lambda p, o, c: _ellipse_coverage(p, o, g)),
        (PAIR_HALO, lambda p, o, c: _halo_coverage(p, o, g)),
        (PAIR_SPRITE, lambda p, o, c: _sprite_coverage(p, o, g, atlas)),
        (PAIR_TRIANGLE, lambda p, o, c: _triangle_coverage(p, o, g)),
    )
    *bounds, solid = pairs.group_bounds
    present = [(first, evaluate, bound) for (first, evaluate), bound in zip(evaluations, bounds, strict=True) if bound]
    primitive, origin = pairs.primitive, pairs.origin
    if len(present) == 1:
        coverage = present[0][1](params[primitive], origin, pairs.pair_class)
    else:
        classes, by_class = torch.sort(pairs.pair_class)
        class_start = torch.searchsorted(classes, _class_numbers(device))
        # evaluated in class order, then put back in the pairs' order once; params and origin side by side,
        # so that each group gathers its rows of both at once
        by_class_rows = torch.cat([params[primitive], origin], 1)[by_class]
        sorted_coverage = torch.empty(count, g.numel() ** 2, device=device)
        slot = torch.arange(max(bound for *_, bound in present), device=device)
        # in class order; the `bound` sorted pairs from a group's start lie within the pairs, as the pairs of
        # earlier classes come from the kinds of earlier groups; its surplus rows (later classes') are rewritten
        for first, evaluate, bound in present:
            position = slot[:bound] + class_start[first]
            by_row = classes[position] if first in (PAIR_BOX_FILL, PAIR_TURNED_FILL) else None
            rows = by_class_rows[position]
            sorted_coverage.index_copy_(0, position, evaluate(rows[:, :N_PARAMS], rows[:, N_PARAMS:], by_row))
        coverage = torch.empty_like(sorted_coverage).index_copy_(0, by_class, sorted_coverage)
    if solid:  # a solid pair covers its whole tile
        coverage.masked_fill_((pairs.pair_class == PAIR_SOLID)[:, None], 1.0)
    return coverage


# -- binning ----------------------------------------------------------------------------------------


def _host(values: torch.Tensor) -> list:
    """A small tensor's values on the host: the one place where this module waits for the device."""
    return values.tolist()


@dataclass
class _Pairs:
    """The (tile, primitive) pairs of a chunk of frames, sorted by tile, then drawing order. Pairs whose
    primitive cannot reach the tile, though its bounds do, come last, with tile == n_tiles.

    tile int64 [Q] (frame * tiles_y * tiles_x + row * tiles_x + column, frames of the chunk),
    primitive int64 [Q], pair_class int64 [Q], origin float32 [Q,2] (centre of the tile's first pixel),
    per_kind: pairs per primitive kind (host ints); butt_caps: some segments have butt ends. For the torch
    path (else 0 and ()): depth, a bound on the shapes of any tile; merge, whether consecutive primitives
    share a group (their pairs in a tile merge into one shape); group_bounds, a bound on the pairs of each
    class group that _pair_coverage evaluates (the pairs of the kinds that feed it); disc_rings, some discs
    are rings (False: their ring's coverage and classes are not computed)."""

    tile: torch.Tensor
    primitive: torch.Tensor
    pair_class: torch.Tensor
    origin: torch.Tensor
    per_kind: list
    butt_caps: bool
    frames: int
    tiles_y: int
    tiles_x: int
    depth: int = 0
    merge: bool = False
    group_bounds: tuple = ()
    disc_rings: bool = True

    @property
    def n_tiles(self) -> int:
        return self.frames * self.tiles_y * self.tiles_x


def _classify(
    prims: Primitives,
    primitive: torch.Tensor,
    origin: torch.Tensor,
    per_kind: list,
    turned_boxes: bool,
    disc_rings: bool,
    tile: int,
) -> torch.Tensor:
    """Class int64 [Q] of the pairs of primitive [Q] and tiles whose first pixel centre is origin [Q,2].

    PAIR_MISSED where the shape cannot reach any pixel of the tile though its bounds do (far from a
    segment's line, outside a disc or an ellipse or inside a ring, inside a box outline or halo); PAIR_SOLID where
    it covers every pixel (box fills, discs and ellipses). Each kind present is tested on every pair
    (pairs are cheap next to pixels), and the kind of the pair picks. turned_boxes: some boxes are
    turned (sin != 0); disc_rings: some discs are rings."""
    p = prims.params[primitive]
    groups = [
        kinds
        for kinds in ((SEGMENT,), (BOX_FILL, BOX_STROKE), (DISC,), (SPRITE,), (ELLIPSE,), (HALO,), (TRIANGLE,))
        if any(per_kind[k] for k in kinds)
    ]
    kind = prims.kind[primitive] if len(groups) > 1 or len(groups[0]) > 1 else None
    reach = tile * 0.7072 + 1  # half the tile diagonal, plus the anti-aliasing margin
    # from the primitive's anchor to the tile's centre
    to_centre = (origin - _col(p, ANCHOR_X, ANCHOR_Y)) + (tile - 1) / 2
    pair_class = None
    for kinds in groups:
        if kinds == (SEGMENT,):
            d = _col(p, SEGMENT_BX, SEGMENT_BY) - _col(p, SEGMENT_AX, SEGMENT_AY)
            t = ((to_centre * d).sum(1, keepdim=True) / (d * d).sum(1, keepdim=True).clamp_min(1e-12)).clamp(0, 1)
            missed = (
                torch.addcmul(to_centre, t, d, value=-1).norm(dim=1) > p[:, SEGMENT_HALF_WIDTH].clamp_min(0.5) + reach
            )
            found = missed * PAIR_MISSED  # PAIR_SEGMENT is 0
        elif kinds in ((DISC,), (ELLIPSE,)):
            # an ellipse lies between the circles of its smaller and larger semi-axes
            distance = to_centre.norm(dim=1)
            if kinds == (DISC,):
                ring_half, outer, inner = p[:, DISC_RING_HALF], p[:, DISC_RADIUS], p[:, DISC_RADIUS]
            else:
                radii = _col(p, ELLIPSE_RADIUS_X, ELLIPSE_RADIUS_Y)
                ring_half, outer, inner = p[:, ELLIPSE_RING_HALF], radii.amax(1), radii.amin(1)
            base = PAIR_DISC if kinds == (DISC,) else PAIR_ELLIPSE
            # (the margins have px of slack: their rounding never changes a class that matters)
            solid = distance + (tile * 0.7072 + 0.5) <= inner
            if kinds == (DISC,) and not disc_rings:  # filled discs: ring_half 0 (its clamp 0.5)
                missed = distance > outer + (0.5 + reach)
            else:
                missed = (distance > outer + ring_half.clamp_min(0.5) + reach) | (
                    (ring_half > 0) & (distance < inner - ring_half.clamp_min(0.5) - reach)
                )
                solid &= ring_half == 0
            found = (missed * (PAIR_MISSED - base) + base).masked_fill_(solid, PAIR_SOLID)
        elif kinds == (SPRITE,):  # a class of their own, whatever the tile
            if pair_class is not None:
                pair_class = pair_class.masked_fill_(kind == SPRITE, PAIR_SPRITE)
                continue
            found = torch.full_like(primitive, PAIR_SPRITE)
        elif kinds == (HALO,):
            found = _classify_halos(p, to_centre, tile)
        elif kinds == (TRIANGLE,):
            found = _classify_triangles(p, to_centre, tile)
        else:
            found = _classify_boxes(p, to_centre, kind, per_kind, turned_boxes, tile)
        if pair_class is None:
            pair_class = found
        else:
            of_kinds = (kind == kinds[0]) if len(kinds) == 1 else (kind >= kinds[0]) & (kind <= kinds[-1])
            pair_class = torch.where(of_kinds, found, pair_class)
    return pair_class


def _classify_boxes(p, to_centre, kind, per_kind, turned_boxes, tile):
    """The classes of pairs of box fills and strokes (see _classify). A tile is near a corner where its
    farthest pixel centres (|to_centre| + (T-1)/2 on each axis, as the CUDA kernel measures them) reach
    both corner bands. A fill covers the tiles inside its straight parts; an outline misses those
    (stroke half width + 1) further in. Turned boxes are measured in their own frame, where the tile's
    pixel centres reach (T-1)/2 (|cos| + |sin|) along each axis; they also miss the tiles outside them."""
    stroke = (
        (kind == BOX_STROKE)[:, None] if per_kind[BOX_FILL] and per_kind[BOX_STROKE] else bool(per_kind[BOX_STROKE])
    )
    spread = (tile - 1) / 2
    if turned_boxes:
        cos, sin = _col(p, BOX_COS), _col(p, BOX_SIN)
        to_centre = torch.cat(
            [cos * to_centre[:, :1] + sin * to_centre[:, 1:], cos * to_centre[:, 1:] - sin * to_centre[:, :1]], 1
        )
        spread = spread * (cos.abs() + sin.abs())
    distance = to_centre.abs()
    half_size = _col(p, BOX_HALF_X, BOX_HALF_Y)
    straight = half_size - _col(p, BOX_RADIUS)
    near = (distance + (spread + 1) >= straight).all(1)
    inner = (distance + (_col(p, BOX_HALF_STROKE) + 0.5) * stroke + (spread + 1) <= straight).all(1)
    fill = near * (PAIR_BOX_FILL_CORNER - PAIR_BOX_FILL) + PAIR_BOX_FILL
    outline = near + PAIR_BOX_STROKE
    if turned_boxes:
        turned = p[:, BOX_SIN] != 0
        outside = (distance - (spread + 1) > half_size + _col(p, BOX_HALF_STROKE).clamp_min(0.5) * stroke).any(1)
        fill = torch.where(turned, PAIR_TURNED_FILL, fill).masked_fill_(outside, PAIR_MISSED)
        outline = torch.where(turned, PAIR_TURNED_STROKE, outline).masked_fill_(outside, PAIR_MISSED)
    fill, outline = fill.masked_fill_(inner, PAIR_SOLID), outline.masked_fill_(inner, PAIR_MISSED)
    if not per_kind[BOX_STROKE]:
        return fill
    return torch.where(stroke[:, 0], outline, fill) if per_kind[BOX_FILL] else outline


def _classify_halos(p, to_centre, tile):
    """The classes of halo pairs (see _classify): PAIR_MISSED for tiles beyond the halo's width from its box
    or inside the box's straight parts (where the fill covers every pixel), else PAIR_HALO; measured in the
    box's frame, as turned boxes are."""
    cos, sin = _col(p, HALO_COS), _col(p, HALO_SIN)
    to_centre = torch.cat(
        [cos * to_centre[:, :1] + sin * to_centre[:, 1:], cos * to_centre[:, 1:] - sin * to_centre[:, :1]], 1
    )
    spread = (tile - 1) / 2 * (cos.abs() + sin.abs()) + 1
    distance = to_centre.abs()
    half_size = _col(p, HALO_HALF_X, HALO_HALF_Y)
    outside = (distance - spread > half_size + _col(p, HALO_WIDTH)).any(1)
    inner = (distance + spread + 0.5 <= half_size - _col(p, HALO_RADIUS)).all(1)
    return (outside | inner) * (PAIR_MISSED - PAIR_HALO) + PAIR_HALO


def _classify_triangles(p, to_centre, tile):
    """The classes of triangle pairs (see _classify), from the tile centre's signed distances to the edges'
    lines: PAIR_MISSED where one is beyond the tile's reach (every pixel is then at least 0.5 px outside
    that edge), PAIR_SOLID where all are at least half the tile's diagonal and 0.5 px inside, else
    PAIR_TRIANGLE."""
    corners = p[:, TRIANGLE_AX : TRIANGLE_CY + 1].view(-1, 3, 2)
    centre = to_centre[:, None] + (corners[:, :1] - corners)  # [m,3,2]: from each corner
    edge = corners.roll(-1, 1) - corners
    length = torch.sqrt((edge * edge).sum(-1)).clamp_min(1e-12)
    farthest = ((edge[..., 1] * centre[..., 0] - edge[..., 0] * centre[..., 1]) / length).amax(1)
    found = (farthest > tile * 0.7072 + 1.5) * (PAIR_MISSED - PAIR_TRIANGLE) + PAIR_TRIANGLE
    return found.masked_fill_(farthest + (tile * 0.7072 + 0.5) <= 0, PAIR_SOLID)


def _depth_bounds(span, frame, drawn, frames, tiles_y, tiles_x) -> torch.Tensor:
    """Per frame, the most primitives whose tile spans (span int64 [P,4], first and last column and row)
    cover one of its tiles (frame [P] in 0 .. frames - 1; drawn bool [P]: the others count for none), a
    bound on any tile's shapes: int64 [frames]. From 2D differences, +1 at a span's first and past its
    last corner and -1 at the other two, summed along rows and columns."""
    per_grid = max(1, DEPTH_GRID_CELLS // ((tiles_y + 1) * (tiles_x + 1)))
    if frames > per_grid:  # not a grid of every frame at once (frames x cells): per_grid frames at a time
        bounds = []
        for first in range(0, frames, per_grid):
            n = min(per_grid, frames - first)
            shown = drawn & (frame >= first) & (frame < first + n)
            bounds.append(_depth_bounds(span, (frame - first).clamp(0, n - 1), shown, n, tiles_y, tiles_x))
        return torch.cat(bounds)
    device = span.device
    corner, sign = _depth_corners(device)
    corners = span + corner  # [P,4]: first column and row, past the last ones
    rows = corners[:, 1::2]
    if frames > 1:
        rows = torch.add(rows, frame[:, None], alpha=tiles_y + 1)
    index = rows[:, :, None] * (tiles_x + 1) + corners[:, None, 0::2]  # [P,2,2]
    value = drawn[:, None, None] * sign
    grid = torch.zeros(frames * (tiles_y + 1) * (tiles_x + 1), dtype=torch.int64, device=device)
    grid.index_add_(0, index.view(-1), value.view(-1))
    return grid.view(frames, tiles_y + 1, tiles_x + 1).cumsum(1).cumsum(2).amax((1, 2))


@functools.lru_cache(maxsize=8)
def _depth_corners(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """_depth_bounds' constants on the device (made once a device, never written to): each tile span
    column's corner offset, 0 for the first column and row, 1 past the last ones, int64 [4], and the
    differences' signs at the four corners, int64 [2,2] (rows by columns): 1, -1 and -1, 1."""
    step = torch.arange(2, device=device)
    side = 1 - 2 * step
    return step.repeat_interleave(2), side[:, None] * side


# _depth_bounds' grid cells at once (int64: 32 MB), so that a plan of a long video takes little memory
DEPTH_GRID_CELLS = 1 << 22


@dataclass
class PairPlan:
    """What binning needs the host to know of the primitives on frames first .. first + len(pairs) - 1,
    read from the device at once: per frame, its (tile, primitive) pairs per variant (2 * N_KINDS host
    ints: each kind's, then those of its turned primitives, butt-ended segments and rings) and, for the torch
    path (else empty), a bound on the shapes of any of its tiles; merge: whether consecutive primitives
    share a group anywhere. draw_plan makes one for draw, which then reads nothing more. spans: the
    primitives' tile spans, their sizes, pair counts and frames that it was made from (_bin's, on their
    device), which a chunk of all its frames reuses."""

    first: int
    pairs: list
    depth: list
    merge: bool
    spans: tuple = ()

    def chunk(self, start: int, frames: int) -> tuple[list, int, bool]:
        """Pairs per variant, depth bound and merge of frames start .. start + frames - 1."""
        rows = slice(start - self.first, start - self.first + frames)
        per_variant = [sum(column) for column in zip(*self.pairs[rows], strict=True)] or [0] * (2 * N_KINDS)
        return per_variant, max(self.depth[rows], default=0), self.merge


def _pair_counts(prims: Primitives, sizes, frame, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each primitive's (tile, primitive) pairs int64 [P] (its tile span's sizes [P,2]; 0 off frames 0 ..
    frames - 1 (frame [P]) or transparent) and its frame clamped to them."""
    in_chunk = frame.clamp(0, frames - 1)
    return sizes.prod(1) * ((frame == in_chunk) & (prims.color[:, 3] > 0)), in_chunk


def _plan(prims: Primitives, span, sizes, counts, in_chunk, frame_start, frames, tiles_y, tiles_x, depth) -> PairPlan:
    """The PairPlan of frames frame_start .. + frames - 1 (the primitives' tile spans and their sizes, and
    pairs and frames less frame_start: _pair_counts'), with the torch path's depth bounds if `depth`, in one
    host read."""
    # pairs per kind, those of turned primitives (sin != 0: BOX_SIN, the column of ELLIPSE_SIN and HALO_SIN),
    # of segments with butt ends and of rings (SEGMENT_BUTT_FLAG and DISC_RING_FLAG: the same column) apart,
    # per frame
    flag = prims.params[:, BOX_SIN] != 0
    variant = torch.add(prims.kind, flag, alpha=N_KINDS)
    if frames > 1:
        variant.add_(in_chunk, alpha=2 * N_KINDS)
    read = [torch.zeros(frames * 2 * N_KINDS, dtype=torch.int64, device=span.device).index_add_(0, variant, counts)]
    if depth:
        group = prims.group
        read += [_depth_bounds(span, in_chunk, counts > 0, frames, tiles_y, tiles_x), (group[1:] == group[:-1]).any()]
    host = _host(torch.cat([part.view(-1) for part in read]) if depth else read[0])
    width = 2 * N_KINDS
    pairs = [host[at : at + width] for at in range(0, frames * width, width)]
    bounds, merge = (host[frames * width : -1], bool(host[-1])) if depth else ([], False)
    return PairPlan(frame_start, pairs, bounds, merge, (span, sizes, counts, in_chunk))


def draw_plan(prims: Primitives, batch: int, height: int, width: int, tile: int = TILE) -> PairPlan:
    """The PairPlan of prims over a batch of frames [batch,H,W] for draw's torch path (one host read),
    which draw(plan=...) then uses for every chunk instead of a read of its own; its pairs size the
    memory that path needs."""
    span, sizes = tile_spans(prims.bounds, height, width, tile)
    counts, frame = _pair_counts(prims, sizes, prims.frame, batch)
    return _plan(prims, span, sizes, counts, frame, 0, batch, -(-height // tile), -(-width // tile), depth=True)


def _bin(
    prims: Primitives,
    frame_start: int,
    frames: int,
    height: int,
    width: int,
    tile: int,
    torch_path: bool = False,
    plan: PairPlan | None = None,
) -> _Pairs:
    """The sorted (tile, primitive) pairs of the primitives on frames frame_start .. + frames - 1 (with the
    torch path's bounds if torch_path): from `plan` (draw_plan's, for these frames) where given, else
    from a read of this chunk's."""
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)
    n_tiles = frames * tiles_y * tiles_x
    frame = prims.frame - frame_start if frame_start else prims.frame
    if plan is None:  # the one host read of a chunk: pairs, and for the torch path bounds that size the rest
        span, sizes = tile_spans(prims.bounds, height, width, tile)
        counts, in_chunk = _pair_counts(prims, sizes, frame, frames)
        plan = _plan(prims, span, sizes, counts, in_chunk, frame_start, frames, tiles_y, tiles_x, torch_path)
    elif (plan.first, len(plan.pairs)) == (frame_start, frames) and plan.spans[0].device == prims.bounds.device:
        span, sizes, counts, in_chunk = plan.spans  # the plan's frames are this chunk's
    else:
        span, sizes = tile_spans(prims.bounds, height, width, tile)
        counts, in_chunk = _pair_counts(prims, sizes, frame, frames)
    per_variant, depth, merge = plan.chunk(frame_start, frames)
    per_kind = [a + b for a, b in zip(per_variant[:N_KINDS], per_variant[N_KINDS:], strict=False)]
    turned_boxes = per_variant[N_KINDS + BOX_FILL] + per_variant[N_KINDS + BOX_STROKE] > 0
    butt_caps = per_variant[N_KINDS + SEGMENT] > 0
    primitive, rank = expand_counts(counts, sum(per_kind))
    first_tile = torch.stack(
        [
            span[:, 0],
            span[:, 1],
            sizes[:, 0],
            torch.add(span[:, 0], torch.add(span[:, 1], frame, alpha=tiles_y), alpha=tiles_x),
        ],
        1,
    )[primitive]
    row, column = rank // first_tile[:, 2], rank % first_tile[:, 2]  # from the first tile
    origin = (first_tile[:, :2] + torch.stack([column, row], 1)) * float(tile) + 0.5
    rings = per_variant[N_KINDS + DISC] > 0
    pair_class = (
        _classify(prims, primitive, origin, per_kind, turned_boxes, rings, tile) if primitive.numel() else primitive
    )
    # sorted by tile, then drawing order (the stable sort keeps the primitives' order); missed pairs last
    tile_id = (
        torch.add(column, row, alpha=tiles_x).add_(first_tile[:, 3]).masked_fill_(pair_class == PAIR_MISSED, n_tiles)
    )
    tile_id, order = torch.sort(tile_id, stable=True)
    group_bounds = ()
    if torch_path:  # _pair_coverage's groups: segments, boxes, turned boxes, discs, ellipses, halos, sprites,
        # triangles; solid
        straight_boxes = per_variant[BOX_FILL] + per_variant[BOX_STROKE]
        group_bounds = (
            per_kind[SEGMENT],
            straight_boxes,
            per_kind[BOX_FILL] + per_kind[BOX_STROKE] - straight_boxes,
            per_kind[DISC],
            per_kind[ELLIPSE],
            per_kind[HALO],
            per_kind[SPRITE],
            per_kind[TRIANGLE],
            per_kind[BOX_FILL] + per_kind[DISC] + per_kind[ELLIPSE] + per_kind[TRIANGLE],
        )
    return _Pairs(
        tile_id,
        primitive[order],
        pair_class[order],
        origin[order],
        per_kind,
        butt_caps,
        frames,
        tiles_y,
        tiles_x,
        depth,
        bool(merge),
        group_bounds,
        rings,
    )


def bin_tiles(prims: Primitives, batch: int, height: int, width: int, tile: int = TILE):
    """(tile, primitive) pairs sorted by tile then by drawing order.

    Returns tile_id int64 [Q] (frame * tiles_y * tiles_x + row * tiles_x + column), primitive
    int64 [Q] and solid bool [Q] (the primitive covers the whole tile: no distance to evaluate).
    Tiles inside a primitive's bounds that it cannot reach are left out.
    """
    pairs = _bin(prims, 0, batch, height, width, tile)
    kept = _host((pairs.pair_class != PAIR_MISSED).sum())
    return pairs.tile[:kept], pairs.primitive[:kept], pairs.pair_class[:kept] == PAIR_SOLID


# -- compositing -------------------------------------------------------------------------------------


def _transmittance_above(alpha: torch.Tensor, tile: torch.Tensor, changed: torch.Tensor, depth: int) -> torch.Tensor:
    """Per entry of alpha [m,N] (shapes sorted by tile [m], bottom to top; changed [m-1]: tile[1:] !=
    tile[:-1]), the product of 1 - alpha over the entries above it in its tile, for tiles of at most
    `depth` entries. By doubling: once each entry holds the product over the next `step` entries of
    its tile, multiplying in the one `step` further on extends it to the next 2 * step."""
    above = torch.empty_like(alpha)
    above[-1:].fill_(1.0)
    torch.sub(1.0, alpha[1:], out=above[:-1]).masked_fill_(changed[:, None], 1.0)
    one = above[-1]  # 1 throughout: no entry lies above the last
    step, factor = 1, torch.empty_like(alpha)  # one buffer for every pass's factors
    while step < depth - 1:
        other_tile = changed if step == 1 else tile[step:] != tile[:-step]
        torch.where(other_tile[:, None], one, above[step:], out=factor[step:])
        above[:-step].mul_(factor[step:])
        step *= 2
    return above


def _composite_layer(tiles: torch.Tensor, prims: Primitives, pairs: _Pairs, atlas, tile: int) -> None:
    """Source-over of every tile's pairs at once (torch path), added into tiles [n_tiles + 1, T * T * 4]
    (zeros; tile after tile, each its T rows of T premultiplied RGBA pixels; the last a spare that takes
    the missed pairs and unused rows). Sized by the bounds that _bin read (no host wait here)."""
    device, count = tiles.device, pairs.tile.numel()
    coverage = _pair_coverage(prims, pairs, atlas, _tile_steps(tile, device)[0])
    tile_id, colour = pairs.tile, prims.color[pairs.primitive]
    changed = tile_id[1:] != tile_id[:-1]
    if pairs.merge:  # a group's pairs in a tile merge by maximum coverage into one shape (at most `count`)
        group = prims.group[pairs.primitive]
        shape = torch.cumsum(F.pad(changed | (group[1:] != group[:-1]), (1, 0)), 0)  # from 0: no change first
        coverage = torch.zeros_like(coverage).scatter_reduce_(0, shape[:, None].expand_as(coverage), coverage, "amax")
        # a shape's pairs share its tile and colour (one group): whichever pair's write lands is the same
        colour = colour.new_empty(count, 4).index_put_((shape,), colour)
        tile_id = tile_id.new_full((count,), pairs.n_tiles).index_put_((shape,), tile_id)
        changed = tile_id[1:] != tile_id[:-1]
    alpha = coverage.mul_(colour[:, 3:])
    weight = alpha.mul_(_transmittance_above(alpha, tile_id, changed, pairs.depth))  # what reaches the viewer
    added = (weight[..., None] * F.pad(colour[:, :3], (0, 1), value=1.0)[:, None]).view(-1, tile * tile * 4)
    # a pixel's shapes summed in their order: index_add_ does that on the CPU, where index_put_ adds from
    # several threads in any order (so that two draws differed in the last bit); on a GPU index_put_ sorts
    # and sums in order, where index_add_ adds atomically in any order
    if device.type == "cpu":
        tiles.index_add_(0, tile_id, added)
    else:
        tiles.index_put_((tile_id,), added, accumulate=True)


def _write_outputs(frames, image, alpha, layer, prims, pairs, atlas, tile: int) -> None:
    """Layer [b,H,W,4] from the pairs (zero where none reaches), alpha [b,H,W] from it, and image
    [b,H,W,C]: the layer over frames [b,H,W,C] (alpha composited too; image None: not wanted). Torch
    path."""
    batch, height, width, channels = frames.shape
    tiles = torch.zeros(pairs.n_tiles + 1, tile * tile * 4, device=layer.device)
    if pairs.tile.numel():
        _composite_layer(tiles, prims, pairs, atlas, tile)
    rows = tiles[:-1].view(batch, pairs.tiles_y, pairs.tiles_x, tile, tile, 4).transpose(2, 3)
    if height == pairs.tiles_y * tile and width == pairs.tiles_x * tile:
        layer.view(rows.shape).copy_(rows)
    else:  # the frame ends inside its last tiles
        layer.copy_(rows.reshape(batch, pairs.tiles_y * tile, pairs.tiles_x * tile, 4)[:, :height, :width])
    alpha.copy_(layer[..., 3])
    if image is None:
        return
    keep = 1 - alpha[..., None]
    for colour in (slice(0, 3), slice(3, 4))[: 1 + (channels == 4)]:
        torch.addcmul(layer[..., colour], frames[..., colour], keep, out=image[..., colour])


def _render(
    frames, image, alpha, layer, prims: Primitives, frame_start: int, atlas, tile: int, straight: bool, plan=None
) -> None:
    """Draw the primitives of frames frame_start .. + b - 1 over frames [b,H,W,C] into image, alpha
    and layer (on frames' device; straight alpha if `straight`; alpha and layer may be None: not
    wanted; plan: draw's): the CuPy kernel on NVIDIA GPUs (compositor_cuda.py), numba's loop on the CPU
    (compositor_cpu.py), else the torch path."""
    kernel = cupy_usable(frames.device)
    if (
        not kernel
        and numba_usable(frames.device)
        and _compositor_cpu().render(frames, image, alpha, layer, prims, frame_start, atlas, tile, straight)
    ):
        return
    batch, height, width, _ = frames.shape
    if alpha is None:  # not wanted: this chunk's only
        alpha = torch.empty(batch, height, width, device=frames.device)
    if layer is None:
        layer = torch.empty(batch, height, width, 4, device=frames.device)
    pairs = _bin(prims, frame_start, batch, height, width, tile, torch_path=not kernel, plan=plan)
    if pairs.per_kind[SPRITE] and atlas is None:
        raise ValueError("sprite primitives need the atlas they index")
    if pairs.tile.numel() and kernel:
        composite_tiles_cuda(frames, image, alpha, layer, pairs, prims, atlas, tile)
    else:
        _write_outputs(frames, image, alpha, layer, prims, pairs, atlas, tile)
    if straight:
        straight_alpha(layer, in_place=True)


def _compositor_cpu():
    """compositor_cpu, imported on the first CPU draw (numba takes a while to import)."""
    from . import compositor_cpu

    return compositor_cpu


def _checked_images(images) -> torch.Tensor:
    """images as draw() takes them: a float tensor [B,H,W,C], C = 3 or 4 (any float dtype), detached."""
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[-1] not in (3, 4):
        got = f"shape {tuple(images.shape)}" if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images: expected a float tensor [B,H,W,C] with C = 3 or 4 channels, got {got}")
    if not images.is_floating_point():
        raise ValueError(f"images: expected float values in 0..1 (any float dtype), got dtype {images.dtype}")
    return images.detach()


def draw(
    images: torch.Tensor,
    prims: Primitives,
    atlas: torch.Tensor | None = None,
    device=None,
    on_progress=None,
    tile: int | None = None,
    layer_alpha: str = "premultiplied",
    image_only: bool = False,
    plan: PairPlan | None = None,
    out: tuple | None = None,
):
    """Render `prims` over `images` and return (image, alpha, layer) on the images' device.

    images float [B,H,W,C] of any float dtype (rendered in float32), C = 3 or 4 (alpha is composited
    too); never modified; a ValueError names anything else. Tensors that require grad are read detached
    (the outputs carry no gradient).
    prims: primitives whose `frame` indexes the batch; atlas float [Ha,Wa] for SPRITE primitives.
    device: where to render (default: where the images are); frames move there one chunk at a
    time, each chunk in one transfer.
    Returns image [B,H,W,C] in the images' dtype (composite), alpha float32 [B,H,W] and layer float32
    [B,H,W,4] (RGB premultiplied, or with layer_alpha="straight" straight as straight_alpha gives it;
    alpha); with image_only, alpha and layer are None (on the CPU neither is made: 60% of the memory).
    plan: draw_plan(prims, B, H, W, tile) where the caller made one (to size the memory): the chunks'
    binning reads nothing more from the device.
    out: (image, alpha, layer) to write into and return, shaped, typed and placed as draw makes them
    (alpha and layer None with image_only), e.g. views of a longer batch's outputs; default new ones.
    """
    if layer_alpha not in ("premultiplied", "straight"):
        raise ValueError(f"layer_alpha: 'premultiplied' or 'straight', got {layer_alpha!r}")
    images = _checked_images(images)
    prims = Primitives(*(t.detach() for t in prims.fields()))
    atlas = atlas.detach() if atlas is not None else None
    batch, height, width, channels = images.shape
    home = images.device
    device = normalize(device) if device is not None else home
    tile = tile or TILE
    if out is not None:
        image_out, alpha_out, layer_out = out
    else:
        image_out = on_huge_pages(torch.empty(images.shape, dtype=images.dtype, device=home))
        alpha_out = None if image_only else on_huge_pages(torch.empty(batch, height, width, device=home))
        layer_out = None if image_only else on_huge_pages(torch.empty(batch, height, width, 4, device=home))
    if images.numel() == 0:  # no pixel to draw
        return image_out, alpha_out, layer_out
    # per frame pixel: the outputs and the pair temporaries (~8 pair pixels of ~40 bytes in a dense
    # scene); chunks of at most ~32 megapixels (256 on a GPU, where each chunk's fixed cost of ~3 ms is
    # the larger part), and less work in numba's loop (below), keep progress reports (and interrupt
    # checks) coming on long videos
    frame_bytes = height * width * ((channels + 5) * 4 + 320)
    pixels = (32 << 20) if device.type == "cpu" else (256 << 20)
    limit = max(1, pixels // (height * width))
    first = None  # the first primitive of each frame, where each chunk gets only its frames' primitives
    if numba_usable(device):
        # numba's loop: chunks sized by work (dense scenes cost far more than their pixels), each given only
        # its frames' primitives (re-reading all of them per chunk cost more than drawing); within a frame
        # the drawing order stays, and that loop reads nothing else
        prims = prims.to(device)  # read on the host here (primitives made on a GPU, drawn on the CPU)
        if batch > 1:  # (one frame is one chunk: its work is not counted)
            work = _compositor_cpu().tile_work(prims, batch, height, width, tile) or _cpu_work(
                prims, batch, height, width, tile
            )
            limit = chunk_size(batch, frame_bytes, device, min(limit, max(1, CPU_CHUNK_WORK * batch // work)))
        if limit < batch:  # chunks: sorted by frame (one chunk reads them all, in any order)
            prims = prims.select(prims.frame.argsort(stable=True))
            first = torch.searchsorted(prims.frame, torch.arange(batch + 1)).tolist()
    moved = {}  # the primitives and atlas on each device that renders: one transfer each

    def render_frames(start, stop, dev):
        if dev not in moved:
            moved[dev] = prims.to(dev), (atlas.to(dev).float() if atlas is not None else None)
        outputs = [out if out is None else out[start:stop] for out in (image_out, alpha_out, layer_out)]
        # rendered in float32 on dev: an output elsewhere or of another dtype gets a float32 stand-in
        staged = [
            out if out is None or (dev == home and out.dtype == torch.float32) else torch.empty(out.shape, device=dev)
            for out in outputs
        ]
        on_device, sheet = moved[dev]
        if first is not None:
            on_device = on_device.select(slice(first[start], first[stop]))
        # one transfer in the images' dtype, converted on the device
        _render(
            images[start:stop].to(dev).float(), *staged, on_device, start, sheet, tile, layer_alpha == "straight", plan
        )
        for out, result in zip(outputs, staged, strict=False):
            if result is not out:  # one transfer back (and the conversion to the images' dtype)
                out.copy_(result)

    run_chunked(render_frames, batch, frame_bytes, device, on_progress, limit=limit)
    return image_out, alpha_out, layer_out


# Work of one chunk of frames in numba's loop: its pixels plus the pixels of the tiles each primitive
# reaches (~5 ns each on a 2-core CPU, ~20 ns when it is busy): under a second between interrupt checks.
# 200 labelled boxes with halos on a 256^2 frame reach ~13M tile pixels: two such frames a chunk.
CPU_CHUNK_WORK = 32 << 20


def _cpu_work(prims: Primitives, batch: int, height: int, width: int, tile: int) -> int:
    """draw's work on the CPU for `batch` frames: their pixels and the pixels of every primitive's tiles."""
    _span, sizes = tile_spans(prims.bounds, height, width, tile)
    return batch * height * width + int(sizes.prod(1).sum()) * tile * tile


def coverage(
    prims: Primitives, batch: int, height: int, width: int, atlas: torch.Tensor | None = None, device=None
) -> torch.Tensor:
    """The alpha output of draw() for `prims` (atlas: as draw's) over a batch [batch,H,W] of any images:
    the opacity they lay down, float [batch,H,W] on `device` (default: the CPU). Where numba's loop runs
    only that is written (no image, no layer: an eighth of draw's writes); elsewhere draw over blank
    frames."""
    device = normalize(device) if device is not None else torch.device("cpu")
    if min(batch, height, width) < 0:
        raise ValueError(f"coverage: batch, height and width must be >= 0, got {batch}, {height}, {width}")
    if batch * height * width == 0:
        return torch.zeros(batch, height, width, device=device)
    if numba_usable(device):
        alpha = on_huge_pages(torch.empty(batch, height, width))
        if _compositor_cpu().render(
            torch.empty(batch, height, width, 0), None, alpha, None, prims.to(device), 0, atlas, TILE
        ):
            return alpha
    return draw(torch.zeros(batch, height, width, 3, device=device), prims, atlas)[1]


def straight_alpha(layer: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """A premultiplied RGBA layer [...,4] as straight alpha (ComfyUI's IMAGE-with-alpha convention: what
    Save Image stores); RGB is 0 where alpha is 0. A new tensor, or `layer` itself converted in place
    (no new layer-sized allocation: on the CPU its page faults cost more than the division)."""
    alpha = layer[..., 3:4]
    # dividing by infinity gives RGB 0 where alpha is 0
    divisor = torch.where(alpha > 0, alpha, torch.inf)
    if in_place:
        layer[..., :3].div_(divisor).clamp_(0, 1)
        return layer
    straight = layer / divisor  # one pass over the whole layer: no strided temporaries, no concatenation
    straight.clamp_(0, 1)[..., 3:] = alpha
    return straight


def composite(images: torch.Tensor, layer: torch.Tensor) -> torch.Tensor:
    """Source-over of a premultiplied layer [B,H,W,4] on images [B,H,W,C]; a new tensor."""
    keep = 1 - layer[..., 3:4]
    rgb = images[..., :3] * keep + layer[..., :3]
    if images.shape[-1] == 4:
        return torch.cat([rgb, images[..., 3:] * keep + layer[..., 3:4]], dim=-1)
    return rgb
