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
twice per chunk of frames (the number of pairs; the sizes of the pair classes), the CUDA kernel once.
On the CPU, where numba is installed, utils/rendering_cpu.py does the same work as one compiled loop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core import cuda
from . import polylines_cpu
from ..core.batching import expand_counts
from ..core.device import cupy_usable, normalize, numba_usable, on_huge_pages, run_chunked

TILE = 8  # measured on the CPU: 8x8 beats 16x16 (less waste along edges) and 4x4 (overhead)
SEGMENT, BOX_FILL, BOX_STROKE, DISC, SPRITE, ELLIPSE = range(6)
N_KINDS = 6
N_PARAMS = 10


@dataclass
class Primitives:
    """P primitives over a batch of frames, drawn in index order (later ones over earlier ones).

    frame  int64   [P]     frame index in the batch
    kind   int64   [P]     SEGMENT, BOX_FILL, BOX_STROKE, DISC, SPRITE or ELLIPSE
    params float32 [P,10]  geometry, by kind (see the builders)
    color  float32 [P,4]   straight RGB in 0..1 and opacity (the same within a group)
    bounds float32 [P,4]   x0, y0, x1, y1: pixels outside have zero coverage
    group  int64   [P]     consecutive primitives with equal group are one shape
    """

    frame: torch.Tensor
    kind: torch.Tensor
    params: torch.Tensor
    color: torch.Tensor
    bounds: torch.Tensor
    group: torch.Tensor

    def fields(self) -> tuple[torch.Tensor, ...]:
        return self.frame, self.kind, self.params, self.color, self.bounds, self.group

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def to(self, device) -> "Primitives":
        return Primitives(*(t.to(device) for t in self.fields()))

    def select(self, keep: torch.Tensor) -> "Primitives":
        return Primitives(*(t[keep] for t in self.fields()))


def _runs(group: torch.Tensor) -> torch.Tensor:
    """Runs of equal consecutive values of group [P] numbered 0, 1, 2, ...: the same shapes, ids < P."""
    change = torch.ones_like(group, dtype=torch.bool)
    change[1:] = group[1:] != group[:-1]
    return torch.cumsum(change, 0) - 1


def concat(*parts: Primitives) -> Primitives:
    """Primitives of `parts` in that order (the later parts are drawn over the earlier ones)."""
    groups, offset = [], 0
    for part in parts:  # renumbered so that groups of different parts never meet
        groups.append(_runs(part.group) + offset)
        offset += len(part)
    merged = [torch.cat(ts) for ts in zip(*(p.fields()[:5] for p in parts))]
    return Primitives(*merged, torch.cat(groups))


def empty(device=None) -> Primitives:
    return Primitives(torch.zeros(0, dtype=torch.int64, device=device), torch.zeros(0, dtype=torch.int64, device=device),
                      torch.zeros(0, N_PARAMS, device=device), torch.zeros(0, 4, device=device),
                      torch.zeros(0, 4, device=device), torch.zeros(0, dtype=torch.int64, device=device))


def _column(value, n: int, like: torch.Tensor) -> torch.Tensor:
    """A per-primitive float [n] from a scalar or a tensor of n values (a view: read it, do not write).
    A Python number is filled in on the device: no upload of host data."""
    if isinstance(value, torch.Tensor):
        return value.to(like.device, torch.float32).expand(n)
    return like.new_full((), float(value), dtype=torch.float32).expand(n)


def _constants(values, device, dtype=torch.float32) -> torch.Tensor:
    """A tensor [k] of k Python numbers filled in on the device, with no upload of host data (on CUDA a
    tensor made from a list is a pageable copy that waits for the stream): the most common value, then a
    fill for each run of another value."""
    base = max(values, key=values.count)
    out = torch.full((len(values),), base, dtype=dtype, device=device)
    start = 0
    while start < len(values):
        stop = start + 1
        while stop < len(values) and values[stop] == values[start]:
            stop += 1
        if values[start] != base:
            out[start:stop].fill_(values[start])
        start = stop
    return out


def _rows(value, n: int, width: int, device) -> torch.Tensor:
    """float32 [n,width] (a view) of a tensor [width] or [n,width], or of `width` Python numbers."""
    if isinstance(value, torch.Tensor):
        return value.to(device, torch.float32).expand(n, width)
    return _constants([float(v) for v in value], device).expand(n, width)


def _columns(values, n: int, like: torch.Tensor) -> list[torch.Tensor]:
    """float32 [n] views of each of `values`: tensors as _column gives them, the Python numbers among them
    filled in at once (one _constants)."""
    numbers = [float(v) for v in values if not isinstance(v, torch.Tensor)]
    filled = iter(_constants(numbers, like.device).unbind() if numbers else ())
    return [_column(v, n, like) if isinstance(v, torch.Tensor) else next(filled).expand(n) for v in values]


def _colors(color, n: int, like: torch.Tensor) -> torch.Tensor:
    return _rows(color, n, 4, like.device).clone()


def _frames(frame, device) -> torch.Tensor:
    """int64 frame indices on the device from a tensor or a Python int (filled in: no upload)."""
    if isinstance(frame, torch.Tensor):
        return frame.to(device, torch.int64)
    return torch.full((), int(frame), dtype=torch.int64, device=device)


def _make(frame, kind: int, params: list[torch.Tensor], color, bounds) -> Primitives:
    n = bounds.shape[0]
    packed = torch.zeros(n, N_PARAMS, dtype=torch.float32, device=bounds.device)
    packed[:, : len(params)] = torch.stack(params, dim=1) if params else packed[:, :0]
    frame = _frames(frame, bounds.device).expand(n).clone()
    return Primitives(frame, torch.full((n,), kind, dtype=torch.int64, device=bounds.device), packed,
                      _colors(color, n, bounds), bounds.float(), torch.arange(n, device=bounds.device))


def segments(frame, a: torch.Tensor, b: torch.Tensor, width, color, caps: str = "round") -> Primitives:
    """Line segments a->b (float [P,2] each) of `width` pixels with round or butt caps.

    params: ax, ay, bx, by, half width, butt (0/1).
    """
    n = a.shape[0]
    half = _column(width, n, a) / 2
    butt = torch.full((n,), float(caps == "butt"), device=a.device)
    reach = torch.maximum(half, torch.full_like(half, 0.5)) + 1.0
    bounds = torch.stack([torch.minimum(a[:, 0], b[:, 0]) - reach, torch.minimum(a[:, 1], b[:, 1]) - reach,
                          torch.maximum(a[:, 0], b[:, 0]) + reach, torch.maximum(a[:, 1], b[:, 1]) + reach], dim=1)
    return _make(frame, SEGMENT, [a[:, 0], a[:, 1], b[:, 0], b[:, 1], half, butt], color, bounds)


def polylines(frame, points: torch.Tensor, lengths: torch.Tensor, width, color) -> Primitives:
    """Open polylines with round caps and joins: one group of segments per polyline, so that
    a translucent polyline is drawn once where its segments overlap.

    frame int64 [L] (or scalar), points float [L, N, 2] padded, lengths int64 [L] (points used,
    >= 2 to draw anything), width scalar or [L], color [4] or [L, 4] (a tensor or 4 numbers).
    Returns the L * (N-1) segments, line after line. Segments past a length or with a non-finite end
    get opacity 0, which draws nothing (no pair), so a NaN point makes a gap: no mask picks the others
    (a host wait on a GPU).
    """
    n_lines, n_points = points.shape[:2]
    if n_points < 2:
        return empty(points.device)
    device, n = points.device, n_lines * (n_points - 1)
    a, b = points[:, :-1], points[:, 1:]
    finite = _finite(points).all(-1)
    steps = torch.arange(n_points - 1, device=device)
    valid = (steps < (lengths.to(device)[:, None] - 1)) & finite[:, :-1] & finite[:, 1:]
    half = _column(width, n_lines, points)[:, None, None].expand(n_lines, n_points - 1, 1) / 2
    reach = half.clamp_min(0.5) + 1.0
    # params: ax, ay, bx, by, half width, then zeros (round caps)
    params = torch.cat([a, b, half, points.new_zeros(()).expand(n_lines, n_points - 1, N_PARAMS - 5)], -1)
    bounds = torch.cat([torch.minimum(a, b) - reach, torch.maximum(a, b) + reach], -1)
    colour = _rows(color, n_lines, 4, device)[:, None].expand(n_lines, n_points - 1, 4)
    colour = torch.cat([colour[..., :3], (colour[..., 3] * valid)[..., None]], -1)
    if isinstance(frame, torch.Tensor):
        frame = frame.to(device, torch.int64).expand(n_lines)[:, None].expand(n_lines, n_points - 1).reshape(n)
    else:
        frame = torch.full((n,), int(frame), dtype=torch.int64, device=device)
    return Primitives(frame, torch.full((n,), SEGMENT, dtype=torch.int64, device=device), params.view(n, N_PARAMS),
                      colour.view(n, 4), bounds.view(n, 4), torch.arange(n, device=device) // (n_points - 1))


def _turn(angle, n: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin float [n] of `angle` (radians, scalar or [n])."""
    turn = _column(angle, n, like)
    return torch.cos(turn), torch.sin(turn)


def ellipses(frame, center: torch.Tensor, radii: torch.Tensor, width, color, angle=0.0,
             fill_color=None) -> Primitives:
    """Ellipse outlines of `width` pixels centred on the curve, center and radii (x, y) float [P,2],
    turned by `angle` (radians, clockwise on screen, scalar or [P]) about their centres; with
    fill_color ([4] or [P,4]), each ellipse's fill under its outline (2P primitives, fill then outline).
    Semi-axes under 0.5 px are drawn 0.5 px; an outline of zero width draws nothing.
    params: cx, cy, radius x, radius y, ring half width (0: the fill), 0, 0, 0, cos, sin.
    """
    n = center.shape[0]
    center, radii = center.float(), radii.float().abs().clamp_min(0.5)
    cos, sin = _turn(angle, n, center)
    ring_half = _column(width, n, center) / 2
    reach = torch.stack([torch.hypot(radii[:, 0] * cos, radii[:, 1] * sin),
                         torch.hypot(radii[:, 0] * sin, radii[:, 1] * cos)], 1)  # the turned ellipse's half extents
    grow = (ring_half.clamp_min(0.5) + 1.0)[:, None]  # the outline and the anti-aliasing margin
    bounds = torch.cat([center - reach - grow, center + reach + grow], 1)
    bounds[:, 1].masked_fill_(ring_half <= 0, -1.0)  # no outline: no tile is listed
    zero = torch.zeros((), device=center.device).expand(n)
    params = [center[:, 0], center[:, 1], radii[:, 0], radii[:, 1], ring_half, zero, zero, zero, cos, sin]
    outlines = _make(frame, ELLIPSE, params, color, bounds)
    if fill_color is None:
        return outlines
    fills = _make(frame, ELLIPSE, params[:4] + [zero] * 4 + params[8:], fill_color,
                  torch.cat([center - reach - 1.0, center + reach + 1.0], 1))
    pairs = [torch.stack([f, o], 1).flatten(0, 1) for f, o in zip(fills.fields()[:5], outlines.fields()[:5])]
    return Primitives(*pairs, torch.arange(2 * n, device=center.device))


def rounded_boxes(frame, xyxy: torch.Tensor, stroke_width=2.0, radius=0.0, stroke_color=(1, 1, 1, 1),
                  fill_color=(1, 1, 1, 0), corner_length=0.0, angle=0.0) -> Primitives:
    """Boxes [P,4] (x1,y1,x2,y2, any order) with a stroke centred on the outline and a fill, turned by
    `angle` (radians, clockwise on screen, scalar or [P]) about their centres.

    Each box gives its fill then its stroke: 2P primitives. A zero-opacity part, or a stroke of
    zero width (its bounds are empty), draws nothing.
    corner_length > 0 draws only the corners of the outline, each arm that long.
    params: cx, cy, half width, half height, radius, stroke half width, corner length, 0, cos, sin
    (sin 0: the box is drawn along the axes).
    """
    n = xyxy.shape[0]
    device = xyxy.device
    xyxy = xyxy.float()
    low, high = torch.minimum(xyxy[:, :2], xyxy[:, 2:]), torch.maximum(xyxy[:, :2], xyxy[:, 2:])
    centre, half_size = (low + high) / 2, (high - low) / 2
    if isinstance(radius, torch.Tensor):
        r = torch.minimum(_column(radius, n, xyxy).clamp_min(0), half_size.amin(1))
    else:  # the same values in fewer ops
        r = half_size.amin(1).clamp_max(max(float(radius), 0.0))
    host_colours = not (isinstance(fill_color, torch.Tensor) or isinstance(stroke_color, torch.Tensor))
    # stroke_width / 2: exact for a number and for a tensor
    stroke_half, corner_length, zero, one, *colours = _columns(
        [stroke_width / 2, corner_length, 0.0, 1.0, *((*fill_color, *stroke_color) if host_colours else ())], n, xyxy)
    if isinstance(angle, (int, float)) and angle == 0:
        cos, sin = one, zero
    else:
        cos, sin = _turn(angle, n, xyxy)
        # the turned box's bounds: its half extents along the axes less its half size
        spread = (torch.stack([cos, sin], 1).abs()[:, None, :] * torch.stack([half_size, half_size.flip(1)], 1)).sum(2)
        spread = spread - half_size
        low, high = low - spread, high + spread
    params = torch.stack([centre[:, 0], centre[:, 1], half_size[:, 0], half_size[:, 1], r, stroke_half,
                          corner_length, zero, cos, sin], 1)
    # the box grown by the anti-aliasing margin (fill), and by half the stroke too (stroke)
    grow = F.pad((stroke_half.clamp_min(0.5) + 1.0)[:, None], (1, 0), value=1.0)
    bounds = torch.cat([low[:, None] - grow[..., None], high[:, None] + grow[..., None]], 2)
    bounds[:, 1].masked_fill_((stroke_half <= 0)[:, None], -1.0)  # empty: no tile is listed
    if host_colours:
        colors = torch.stack(colours, 1)
    else:
        colors = torch.stack([_rows(fill_color, n, 4, device), _rows(stroke_color, n, 4, device)], 1)
    if isinstance(frame, torch.Tensor):
        frame = frame.to(device, torch.int64).expand(n)[:, None].expand(n, 2)
    else:
        frame = torch.full((2 * n,), int(frame), dtype=torch.int64, device=device)
    return Primitives(frame.reshape(2 * n),
                      torch.arange(BOX_FILL, BOX_STROKE + 1, device=device).repeat(n),
                      params[:, None].expand(n, 2, N_PARAMS).reshape(2 * n, N_PARAMS), colors.reshape(2 * n, 4),
                      bounds.reshape(2 * n, 4), torch.arange(2 * n, device=device))


HALO_RINGS = 6  # nested outlines whose opacities compose to a halo fading outwards


def halos(frame, xyxy: torch.Tensor, width, radius, color, angle=0.0) -> Primitives:
    """Soft rings `width` pixels wide around boxes [P,4] whose corners have `radius`: HALO_RINGS outlines
    from the box edge out to 1/k, 2/k, ... of the width, one group each ring, with opacities that compose
    to color's opacity * (1 - m/k) in the m-th band out from the box. color [4] or [P,4]; angle turns the
    boxes as in rounded_boxes."""
    color = torch.as_tensor(color, dtype=torch.float32, device=xyxy.device).expand(xyxy.shape[0], 4)
    opacity = color[:, 3:]
    target = [opacity * (1 - m / HALO_RINGS) for m in range(HALO_RINGS + 1)]
    rings = []
    for m in range(HALO_RINGS):  # a fixed few rings, each built for every box at once
        reach = width * (m + 1) / HALO_RINGS
        ring_opacity = 1 - (1 - target[m]) / (1 - target[m + 1])
        grown = xyxy.float() + torch.tensor([-1.0, -1.0, 1.0, 1.0], device=xyxy.device) * (reach / 2)
        rings.append(rounded_boxes(frame, grown, reach, radius + reach / 2, torch.cat([color[:, :3], ring_opacity], 1),
                                   (0, 0, 0, 0), angle=angle))
    return concat(*rings)


def discs(frame, center: torch.Tensor, radius, color, ring_width=0.0) -> Primitives:
    """Filled discs (ring_width 0) or rings of `ring_width` centred on the circle, center [P,2].

    params: cx, cy, radius, ring half width.
    """
    n = center.shape[0]
    r = _column(radius, n, center)
    ring_half = _column(ring_width, n, center) / 2
    reach = r + ring_half + 1.0
    bounds = torch.stack([center[:, 0] - reach, center[:, 1] - reach, center[:, 0] + reach, center[:, 1] + reach], 1)
    return _make(frame, DISC, [center[:, 0], center[:, 1], r, ring_half], color, bounds)


def sprites(frame, origin: torch.Tensor, atlas_rect: torch.Tensor, color) -> Primitives:
    """Alpha bitmaps from an atlas (glyph runs of labels), placed at integer pixel `origin` [P,2].

    atlas_rect int [P,4]: x, y, width, height inside the atlas passed to `draw`; the atlas value
    is the coverage, `color` tints it. params: x0, y0, width, height, atlas x, atlas y.
    """
    origin = origin.float().floor()
    rect = atlas_rect.float()
    bounds = torch.stack([origin[:, 0], origin[:, 1], origin[:, 0] + rect[:, 2], origin[:, 1] + rect[:, 3]], 1)
    return _make(frame, SPRITE, [origin[:, 0], origin[:, 1], rect[:, 2], rect[:, 3], rect[:, 0], rect[:, 1]],
                 color, bounds)


# -- coverage per class of (tile, primitive) pairs ------------------------------------------------
# Each evaluation takes params p [m,10], the centre of each pair's tile's first pixel, origin [m,2],
# and the pixel offsets inside a tile g [T] (0, 1, ..., T-1); it returns coverage [m,T*T], pixels
# row after row.

# Classes of pairs, in the order in which they are evaluated. Box pairs form one run (fills, strokes,
# strokes near a rounded corner, fills near one), so that one evaluation shares its work among them:
# the strokes are contiguous, and so are the tiles near corners. Turned boxes (sin != 0) are not
# separable: their fills and strokes form a run of their own.
(_SEGMENT, _BOX_FILL, _BOX_STROKE, _BOX_STROKE_CORNER, _BOX_FILL_CORNER, _TURNED_FILL, _TURNED_STROKE, _DISC,
 _ELLIPSE, _SPRITE, _SOLID, _MISSED) = range(12)
_N_CLASSES = 12


def _from_distance(d: torch.Tensor) -> torch.Tensor:
    return (0.5 - d).clamp(0.0, 1.0)


def _thin(half: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Strokes thinner than 1 px are drawn 1 px wide at proportionally lower opacity."""
    return half.clamp_min(0.5)[:, None], (2 * half).clamp(0, 1)[:, None]


def _pixels(origin: torch.Tensor, g: torch.Tensor):
    """Pixel centres ox + gx, oy + gy as columns ox, oy [m,1] and rows gx, gy [1,T*T]."""
    tile = g.numel()
    return origin[:, 0:1], origin[:, 1:2], g.repeat(tile)[None], g.repeat_interleave(tile)[None]


def _segment_coverage(p, origin, g, butt_caps: bool = True):
    """butt_caps False: no segment has butt ends (their coverage is not computed)."""
    _, _, gx, gy = _pixels(origin, g)
    half, weight = _thin(p[:, 4])
    # the x and y columns at once: the same values as one at a time (a sum of two is one rounded addition)
    d = p[:, 2:4] - p[:, 0:2]
    length = torch.sqrt((d * d).sum(1, keepdim=True)).clamp_min(1e-12)
    u = d / length
    to = origin[:, None] - p[:, 0:4].view(-1, 2, 2)  # [m,2,2]: from end a, from end b
    px, py = to[..., 0:1] + gx, to[..., 1:2] + gy  # [m,2,T*T]
    along = px * u[:, None, 0:1] + py * u[:, None, 1:2]
    across = (px[:, 0] * u[:, 1:2] - py[:, 0] * u[:, 0:1]).abs()
    # how far past the ends, measured from each end: (p - b).u, where (p - a).u - length loses the low bits
    # of a long segment's length (the torch path, whose CPU sqrt is not correctly rounded, and the kernels
    # then differed by ~ulp(length) at its far cap)
    beyond = torch.maximum(-along[:, 0], along[:, 1])
    cap = _from_distance(torch.sqrt(beyond.clamp_min(0) ** 2 + across * across) - half)
    if butt_caps:  # butt ends: the product of the side and end coverages is exact where edges meet at right angles
        cap = torch.where(p[:, 5:6] > 0, _from_distance(across - half) * _from_distance(beyond), cap)
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
    distance = (torch.sqrt(outside[..., 0, None, :] + outside[..., 1, :, None])
                + torch.maximum(q[..., 0, None, :], q[..., 1, :, None]).clamp_max(0) - radius[..., None, None])
    return _from_distance(distance)


def _box_coverage(p, origin, g, counts):
    """Coverage of box pairs of classes _BOX_FILL, _BOX_STROKE, _BOX_STROKE_CORNER, _BOX_FILL_CORNER,
    counts [4] of each, in that order. Both are an outer box less an inner one: a fill is its box less
    nothing, an outline the box grown by half the stroke width less the box shrunk by as much. Coverage
    is separable except in tiles near a corner, where a box whose radius is >= 1 is evaluated from its
    rounded distance."""
    fills, strokes, stroke_corners, fill_corners = counts
    stroke = slice(fills, fills + strokes + stroke_corners)

    def on_strokes(values, fill_value):  # values [m,k] of the stroke rows, fill_value on fill rows
        return F.pad(values[stroke], (0, 0, fills, fill_corners), value=fill_value)

    offset = ((origin - p[:, :2])[..., None] + g).abs()[:, None]  # [m,1,2,T]
    size, radius, arms = p[:, 2:4], p[:, 4:5], p[:, 6:7]
    half = p[:, 5:6].clamp_min(0.5)  # outlines thinner than 1 px are drawn 1 px wide, fainter
    grow = on_strokes(half, 0.0)
    # the inner box: none for fills, nor on an axis the stroke is wider than (size -1: no pixel)
    inner = (size - half).masked_fill_(size <= half, -1.0)
    sizes = torch.stack([size + grow, on_strokes(inner, -1.0)], 1)  # [m,2,2] outer, inner
    radii = torch.cat([radius + grow, (radius - half).clamp_min(0)], 1)  # [m,2]
    coverage = _separable_box(offset, sizes)
    if stroke_corners + fill_corners:
        corner = slice(fills + strokes, None)
        coverage[corner] = torch.where(radii[corner, :, None, None] >= 1,
                                       _rounded_box(offset[corner], sizes[corner], radii[corner]), coverage[corner])
    outline = (coverage[:, 0] - coverage[:, 1]).clamp_min(0) * on_strokes((2 * p[:, 5:6]).clamp(0, 1), 1.0)[..., None]
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


def _turned_box_coverage(p, origin, g, counts):
    """Coverage of the pairs of turned boxes, classes _TURNED_FILL then _TURNED_STROKE (counts [2]), in
    the box's frame, every pixel as unturned boxes near a corner are (no part is separable): a fill is
    its box, an outline the box grown by half the stroke width less the box shrunk by as much."""
    fills = counts[0]
    ox, oy, gx, gy = _pixels(origin, g)
    x, y = (ox - p[:, 0:1]) + gx, (oy - p[:, 1:2]) + gy
    cos, sin = p[:, 8:9], p[:, 9:10]
    ax, ay = (cos * x + sin * y).abs(), (cos * y - sin * x).abs()
    hx, hy, r, arms = p[:, 2:3], p[:, 3:4], p[:, 4:5], p[:, 6:7]
    stroke = torch.arange(p.shape[0], device=p.device)[:, None] >= fills
    half = p[:, 5:6].clamp_min(0.5) * stroke  # 0 on fills
    outer = _turned_box(ax, ay, hx + half, hy + half, r + half)
    # the inner box: none for fills, nor where the stroke is wider than the box
    has_inner = stroke & (hx > half) & (hy > half)
    inner = _turned_box(ax, ay, hx - half, hy - half, (r - half).clamp_min(0)) * has_inner
    weight = torch.where(stroke, (2 * p[:, 5:6]).clamp(0, 1), 1.0)
    outline = (outer - inner).clamp_min(0) * weight
    arms = arms.masked_fill(~stroke | (arms <= 0), float("inf"))  # inf: the whole outline
    keep = ((ax - (hx - arms)) + 0.5).clamp(0, 1) * ((ay - (hy - arms)) + 0.5).clamp(0, 1)
    return outline * keep


ELLIPSE_STEPS = 4  # closest-point iterations: within 0.02 px of the true distance up to 15:1 axes


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
    x, y = (ox - p[:, 0:1]) + gx, (oy - p[:, 1:2]) + gy
    cos, sin = p[:, 8:9], p[:, 9:10]
    distance = _ellipse_distance((cos * x + sin * y).abs(), (cos * y - sin * x).abs(), p[:, 2:3], p[:, 3:4])
    ring_half, weight = _thin(p[:, 4])
    ring = _from_distance(distance.abs() - ring_half) * weight
    return torch.where(p[:, 4:5] > 0, ring, _from_distance(distance))


def _disc_coverage(p, origin, g):
    ox, oy, gx, gy = _pixels(origin, g)
    distance = torch.sqrt(((ox - p[:, 0:1]) + gx) ** 2 + ((oy - p[:, 1:2]) + gy) ** 2) - p[:, 2:3]
    ring_half, weight = _thin(p[:, 3])
    ring = _from_distance(distance.abs() - ring_half) * weight
    return torch.where(p[:, 3:4] > 0, ring, _from_distance(distance))


def _sprite_coverage(p, origin, g, atlas):
    ox, oy, gx, gy = _pixels(origin, g)
    u = ((ox - 0.5 - p[:, 0:1]) + gx).round().long()
    v = ((oy - 0.5 - p[:, 1:2]) + gy).round().long()
    inside = (u >= 0) & (v >= 0) & (u < p[:, 2:3].long()) & (v < p[:, 3:4].long())
    ax = (p[:, 4:5].long() + u).clamp(0, atlas.shape[1] - 1)
    ay = (p[:, 5:6].long() + v).clamp(0, atlas.shape[0] - 1)
    return atlas[ay, ax] * inside


def _pair_coverage(prims, primitive, origin, by_class, class_counts, atlas, g, butt_caps: bool) -> torch.Tensor:
    """Coverage float [k, T*T] of k pairs in their order, one dense evaluation per class present;
    by_class [k]: the pairs in class order; class_counts: pairs per class (host ints); g int64 [T]:
    0 .. T-1; butt_caps: some segments have butt ends."""
    several = sum(count > 0 for count in class_counts[:_MISSED]) > 1
    coverage = torch.empty(origin.shape[0], g.numel() ** 2, device=origin.device)
    start = 0
    for first, last, evaluate in (
            (_SEGMENT, _SEGMENT, lambda p, o: _segment_coverage(p, o, g, butt_caps)),
            (_BOX_FILL, _BOX_FILL_CORNER, lambda p, o: _box_coverage(p, o, g, class_counts[_BOX_FILL:_TURNED_FILL])),
            (_TURNED_FILL, _TURNED_STROKE,
             lambda p, o: _turned_box_coverage(p, o, g, class_counts[_TURNED_FILL:_DISC])),
            (_DISC, _DISC, lambda p, o: _disc_coverage(p, o, g)),
            (_ELLIPSE, _ELLIPSE, lambda p, o: _ellipse_coverage(p, o, g)),
            (_SPRITE, _SPRITE, lambda p, o: _sprite_coverage(p, o, g, atlas)),
            (_SOLID, _SOLID, None)):
        count = sum(class_counts[first:last + 1])
        if count == 0:
            continue
        if not several:
            return coverage.fill_(1.0) if evaluate is None else evaluate(prims.params[primitive], origin)
        elif evaluate is None:  # a solid pair covers its whole tile
            coverage.index_fill_(0, by_class[start:start + count], 1.0)
        else:
            rows = by_class[start:start + count]
            coverage.index_copy_(0, rows, evaluate(prims.params[primitive[rows]], origin[rows]))
        start += count
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
    per_kind: pairs per primitive kind (host ints); butt_caps: some segments have butt ends."""

    tile: torch.Tensor
    primitive: torch.Tensor
    pair_class: torch.Tensor
    origin: torch.Tensor
    per_kind: list
    butt_caps: bool
    frames: int
    tiles_y: int
    tiles_x: int

    @property
    def n_tiles(self) -> int:
        return self.frames * self.tiles_y * self.tiles_x


def _classify(prims: Primitives, primitive: torch.Tensor, origin: torch.Tensor, per_kind: list,
              turned_boxes: bool, tile: int) -> torch.Tensor:
    """Class int64 [Q] of the pairs of primitive [Q] and tiles whose first pixel centre is origin [Q,2].

    _MISSED where the shape cannot reach any pixel of the tile though its bounds do (far from a
    segment's line, outside a disc or an ellipse or inside a ring, inside a box outline); _SOLID where
    it covers every pixel (box fills, discs and ellipses). Each kind present is tested on every pair
    (pairs are cheap next to pixels), and the kind of the pair picks. turned_boxes: some boxes are
    turned (sin != 0)."""
    p = prims.params[primitive]
    groups = [kinds for kinds in ((SEGMENT,), (BOX_FILL, BOX_STROKE), (DISC,), (SPRITE,), (ELLIPSE,))
              if any(per_kind[k] for k in kinds)]
    kind = prims.kind[primitive] if len(groups) > 1 or len(groups[0]) > 1 else None
    reach = tile * 0.7072 + 1  # half the tile diagonal, plus the anti-aliasing margin
    to_centre = (origin - p[:, :2]) + (tile - 1) / 2  # from the primitive's anchor to the tile's centre
    pair_class = None
    for kinds in groups:
        if kinds == (SEGMENT,):
            d = p[:, 2:4] - p[:, :2]
            t = ((to_centre * d).sum(1, keepdim=True) / (d * d).sum(1, keepdim=True).clamp_min(1e-12)).clamp(0, 1)
            missed = (to_centre - t * d).norm(dim=1) > p[:, 4].clamp_min(0.5) + reach
            found = missed * (_MISSED - _SEGMENT) + _SEGMENT
        elif kinds in ((DISC,), (ELLIPSE,)):
            # an ellipse lies between the circles of its smaller and larger semi-axes
            distance, ring_half = to_centre.norm(dim=1), p[:, 3] if kinds == (DISC,) else p[:, 4]
            outer, inner = (p[:, 2], p[:, 2]) if kinds == (DISC,) else (p[:, 2:4].amax(1), p[:, 2:4].amin(1))
            base = _DISC if kinds == (DISC,) else _ELLIPSE
            missed = ((distance > outer + ring_half.clamp_min(0.5) + reach)
                      | ((ring_half > 0) & (distance < inner - ring_half.clamp_min(0.5) - reach)))
            solid = (ring_half == 0) & (distance + tile * 0.7072 + 0.5 <= inner)
            found = (missed * (_MISSED - base) + base).masked_fill_(solid, _SOLID)
        elif kinds == (SPRITE,):
            found = torch.full_like(primitive, _SPRITE)
        else:
            found = _classify_boxes(p, to_centre, kind, per_kind, turned_boxes, tile)
        if pair_class is None:
            pair_class = found
        else:
            pair_class = torch.where((kind >= kinds[0]) & (kind <= kinds[-1]), found, pair_class)
    return pair_class


def _classify_boxes(p, to_centre, kind, per_kind, turned_boxes, tile):
    """The classes of pairs of box fills and strokes (see _classify). A tile is near a corner where its
    farthest pixel centres (|to_centre| + (T-1)/2 on each axis, as the CUDA kernel measures them) reach
    both corner bands. A fill covers the tiles inside its straight parts; an outline misses those
    (stroke half width + 1) further in. Turned boxes are measured in their own frame, where the tile's
    pixel centres reach (T-1)/2 (|cos| + |sin|) along each axis; they also miss the tiles outside them."""
    stroke = (kind == BOX_STROKE)[:, None] if per_kind[BOX_FILL] and per_kind[BOX_STROKE] else bool(per_kind[BOX_STROKE])
    spread = (tile - 1) / 2
    if turned_boxes:
        cos, sin = p[:, 8:9], p[:, 9:10]
        to_centre = torch.cat([cos * to_centre[:, :1] + sin * to_centre[:, 1:],
                               cos * to_centre[:, 1:] - sin * to_centre[:, :1]], 1)
        spread = spread * (cos.abs() + sin.abs())
    distance = to_centre.abs()
    straight = p[:, 2:4] - p[:, 4:5]
    near = (distance + (spread + 1) >= straight).all(1)
    inner = (distance + (p[:, 5:6] + 0.5) * stroke + (spread + 1) <= straight).all(1)
    fill = near * (_BOX_FILL_CORNER - _BOX_FILL) + _BOX_FILL
    outline = near + _BOX_STROKE
    if turned_boxes:
        turned = p[:, 9] != 0
        outside = (distance - (spread + 1) > p[:, 2:4] + p[:, 5:6].clamp_min(0.5) * stroke).any(1)
        fill = torch.where(turned, _TURNED_FILL, fill).masked_fill_(outside, _MISSED)
        outline = torch.where(turned, _TURNED_STROKE, outline).masked_fill_(outside, _MISSED)
    fill, outline = fill.masked_fill_(inner, _SOLID), outline.masked_fill_(inner, _MISSED)
    if not per_kind[BOX_STROKE]:
        return fill
    return torch.where(stroke[:, 0], outline, fill) if per_kind[BOX_FILL] else outline


def tile_spans(bounds: torch.Tensor, height: int, width: int, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last tile column and row int64 [P,4] of bounds float [P,4], clamped to the frame, and
    the span's columns and rows int64 [P,2] (0 for bounds past the frame, NaN or infinite)."""
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)
    span = torch.nan_to_num(bounds, nan=-1.0, posinf=-1.0, neginf=-1.0).div(tile).floor_()
    for column, (low, high) in enumerate(((0, tiles_x), (0, tiles_y), (-1, tiles_x - 1), (-1, tiles_y - 1))):
        span[:, column].clamp_(low, high)  # Python bounds: no upload of host data
    span = span.long()
    return span, (span[:, 2:] - span[:, :2] + 1).clamp_min_(0)


def _bin(prims: Primitives, frame_start: int, frames: int, height: int, width: int, tile: int) -> _Pairs:
    """The sorted (tile, primitive) pairs of the primitives on frames frame_start .. + frames - 1."""
    device = prims.bounds.device
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)
    n_tiles = frames * tiles_y * tiles_x
    span, sizes = tile_spans(prims.bounds, height, width, tile)
    frame = prims.frame - frame_start if frame_start else prims.frame
    counts = sizes.prod(1) * ((frame == frame.clamp(0, frames - 1)) & (prims.color[:, 3] > 0))
    # pairs per kind, those of turned primitives (sin != 0) and of segments with butt ends apart
    flag = torch.where(prims.kind == SEGMENT, prims.params[:, 5], prims.params[:, 9]) != 0
    variant = torch.add(prims.kind, flag, alpha=N_KINDS)
    per_variant = _host(torch.zeros(2 * N_KINDS, dtype=torch.int64, device=device).index_add_(0, variant, counts))
    per_kind = [a + b for a, b in zip(per_variant[:N_KINDS], per_variant[N_KINDS:])]
    turned_boxes = per_variant[N_KINDS + BOX_FILL] + per_variant[N_KINDS + BOX_STROKE] > 0
    butt_caps = per_variant[N_KINDS + SEGMENT] > 0
    primitive, rank = expand_counts(counts, sum(per_kind))
    first_tile = torch.stack([span[:, 0], span[:, 1], sizes[:, 0],
                              (frame * tiles_y + span[:, 1]) * tiles_x + span[:, 0]], 1)[primitive]
    row, column = rank // first_tile[:, 2], rank % first_tile[:, 2]  # from the first tile
    origin = (first_tile[:, :2] + torch.stack([column, row], 1)) * float(tile) + 0.5
    pair_class = _classify(prims, primitive, origin, per_kind, turned_boxes, tile) if primitive.numel() else primitive
    # sorted by tile, then drawing order (the stable sort keeps the primitives' order); missed pairs last
    tile_id = (first_tile[:, 3] + row * tiles_x + column).masked_fill_(pair_class == _MISSED, n_tiles)
    tile_id, order = torch.sort(tile_id, stable=True)
    return _Pairs(tile_id, primitive[order], pair_class[order], origin[order], per_kind, butt_caps, frames, tiles_y,
                  tiles_x)


def bin_tiles(prims: Primitives, batch: int, height: int, width: int, tile: int = TILE):
    """(tile, primitive) pairs sorted by tile then by drawing order.

    Returns tile_id int64 [Q] (frame * tiles_y * tiles_x + row * tiles_x + column), primitive
    int64 [Q] and solid bool [Q] (the primitive covers the whole tile: no distance to evaluate).
    Tiles inside a primitive's bounds that it cannot reach are left out.
    """
    pairs = _bin(prims, 0, batch, height, width, tile)
    kept = _host((pairs.pair_class != _MISSED).sum())
    return pairs.tile[:kept], pairs.primitive[:kept], pairs.pair_class[:kept] == _SOLID


# -- compositing -------------------------------------------------------------------------------------

def _transmittance_above(alpha: torch.Tensor, tile: torch.Tensor, changed: torch.Tensor, depth: int) -> torch.Tensor:
    """Per entry of alpha [m,N] (shapes sorted by tile [m], bottom to top; changed [m-1]: tile[1:] !=
    tile[:-1]), the product of 1 - alpha over the entries above it in its tile, for tiles of at most
    `depth` entries. By doubling: once each entry holds the product over the next `step` entries of
    its tile, multiplying in the one `step` further on extends it to the next 2 * step."""
    above = torch.empty_like(alpha)
    above[-1:].fill_(1.0)
    torch.sub(1.0, alpha[1:], out=above[:-1]).masked_fill_(changed[:, None], 1.0)
    one = torch.ones((), device=alpha.device)
    step, factor = 1, torch.empty_like(alpha)  # one buffer for every pass's factors
    while step < depth - 1:
        torch.where((tile[step:] != tile[:-step])[:, None], one, above[step:], out=factor[step:])
        above[:-step] *= factor[step:]
        step *= 2
    return above


def _composite_layer(tiles: torch.Tensor, prims: Primitives, pairs: _Pairs, atlas, tile: int) -> None:
    """Source-over of every tile's pairs at once (torch path), added into tiles [n_tiles, T * T * 4]
    (zeros; tile after tile, each its T rows of T premultiplied RGBA pixels)."""
    device = tiles.device
    # what the host needs to size the work: pairs per class, shapes (a group's pairs in a tile merge
    # into one shape) and the most shapes in one tile
    classes, by_class = torch.sort(pairs.pair_class)
    class_start = torch.searchsorted(classes, torch.arange(_N_CLASSES + 1, device=device))
    changed = pairs.tile[1:] != pairs.tile[:-1]
    group = prims.group[pairs.primitive]
    new_shape = F.pad(changed | (group[1:] != group[:-1]), (1, 0), value=True)
    shapes_per_tile = torch.zeros(pairs.n_tiles + 1, dtype=torch.int64, device=device).index_add_(
        0, pairs.tile, new_shape.long())[:-1]
    stats = _host(torch.cat([class_start, torch.stack([shapes_per_tile.sum(), shapes_per_tile.amax()])]))
    class_counts = [b - a for a, b in zip(stats[:_N_CLASSES], stats[1:_N_CLASSES + 1])]
    kept, (n_shapes, depth) = stats[_MISSED], stats[_N_CLASSES + 1:]
    if kept == 0:
        return
    tile_id, primitive = pairs.tile[:kept], pairs.primitive[:kept]
    g = torch.arange(tile, device=device)
    coverage = _pair_coverage(prims, primitive, pairs.origin[:kept], by_class[:kept], class_counts, atlas, g,
                              pairs.butt_caps)
    colour, changed = prims.color[primitive], changed[:kept - 1]
    if n_shapes < kept:  # a group's pairs in a tile merge by maximum coverage into one shape
        shape = torch.cumsum(new_shape[:kept], 0) - 1
        coverage = torch.zeros(n_shapes, tile * tile, device=device).scatter_reduce_(
            0, shape[:, None].expand_as(coverage), coverage, "amax")
        # a shape's pairs share its tile and colour (one group): whichever pair's write lands is the same
        colour = colour.new_empty(n_shapes, 4).index_put_((shape,), colour)
        tile_id = tile_id.new_empty(n_shapes).index_put_((shape,), tile_id)
        changed = tile_id[1:] != tile_id[:-1]
    alpha = coverage.mul_(colour[:, 3:])
    weight = alpha.mul_(_transmittance_above(alpha, tile_id, changed, depth))  # what reaches the viewer
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
    tiles = torch.zeros(pairs.n_tiles, tile * tile * 4, device=layer.device)
    if pairs.tile.numel():
        _composite_layer(tiles, prims, pairs, atlas, tile)
    rows = tiles.view(batch, pairs.tiles_y, pairs.tiles_x, tile, tile, 4).transpose(2, 3)
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


def _render(frames, image, alpha, layer, prims: Primitives, frame_start: int, atlas, tile: int,
            straight: bool) -> None:
    """Draw the primitives of frames frame_start .. + b - 1 over frames [b,H,W,C] into image, alpha
    and layer (on frames' device; straight alpha if `straight`; alpha and layer may be None: not
    wanted): the CuPy kernel on NVIDIA GPUs, numba's loop on the CPU (utils/rendering_cpu.py), else
    the torch path."""
    kernel = cupy_usable(frames.device)
    if not kernel and numba_usable(frames.device) and _rendering_cpu().render(frames, image, alpha, layer, prims,
                                                                              frame_start, atlas, tile, straight):
        return
    batch, height, width, _ = frames.shape
    if alpha is None:  # not wanted: this chunk's only
        alpha = torch.empty(batch, height, width, device=frames.device)
    if layer is None:
        layer = torch.empty(batch, height, width, 4, device=frames.device)
    pairs = _bin(prims, frame_start, batch, height, width, tile)
    if pairs.per_kind[SPRITE] and atlas is None:
        raise ValueError("sprite primitives need the atlas they index")
    if pairs.tile.numel() and kernel:
        composite_tiles_cuda(frames, image, alpha, layer, pairs, prims, atlas, tile)
    else:
        _write_outputs(frames, image, alpha, layer, prims, pairs, atlas, tile)
    if straight:
        straight_alpha(layer, in_place=True)


def _rendering_cpu():
    """utils/rendering_cpu, imported on the first CPU draw (numba takes a while to import, and that
    module takes its constants from this one)."""
    from . import compositor_cpu as rendering_cpu
    return rendering_cpu


def _checked_images(images) -> torch.Tensor:
    """images as draw() takes them: a float tensor [B,H,W,C], C = 3 or 4 (any float dtype), detached."""
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[-1] not in (3, 4):
        got = f"shape {tuple(images.shape)}" if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images: expected a float tensor [B,H,W,C] with C = 3 or 4 channels, got {got}")
    if not images.is_floating_point():
        raise ValueError(f"images: expected float values in 0..1 (any float dtype), got dtype {images.dtype}")
    return images.detach()


def draw(images: torch.Tensor, prims: Primitives, atlas: torch.Tensor | None = None, device=None,
         on_progress=None, tile: int | None = None, layer_alpha: str = "premultiplied", image_only: bool = False):
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
    image_out = on_huge_pages(torch.empty(images.shape, dtype=images.dtype, device=home))
    alpha_out = None if image_only else on_huge_pages(torch.empty(batch, height, width, device=home))
    layer_out = None if image_only else on_huge_pages(torch.empty(batch, height, width, 4, device=home))
    if images.numel() == 0:  # no pixel to draw
        return image_out, alpha_out, layer_out
    moved = {}  # the primitives and atlas on each device that renders: one transfer each

    def render_frames(start, stop, dev):
        if dev not in moved:
            moved[dev] = prims.to(dev), (atlas.to(dev).float() if atlas is not None else None)
        outputs = [out if out is None else out[start:stop] for out in (image_out, alpha_out, layer_out)]
        # rendered in float32 on dev: an output elsewhere or of another dtype gets a float32 stand-in
        staged = [out if out is None or (dev == home and out.dtype == torch.float32) else
                  torch.empty(out.shape, device=dev) for out in outputs]
        on_device, sheet = moved[dev]
        # one transfer in the images' dtype, converted on the device
        _render(images[start:stop].to(dev).float(), *staged, on_device, start, sheet, tile, layer_alpha == "straight")
        for out, result in zip(outputs, staged):
            if result is not out:  # one transfer back (and the conversion to the images' dtype)
                out.copy_(result)

    # per frame pixel: the outputs and the pair temporaries (~8 pair pixels of ~40 bytes in a dense
    # scene); chunks of at most ~32 megapixels (256 on a GPU, where each chunk's fixed cost of ~3 ms is
    # the larger part) keep progress reports (and interrupt checks) coming on long videos
    pixels = (32 << 20) if device.type == "cpu" else (256 << 20)
    run_chunked(render_frames, batch, height * width * ((channels + 5) * 4 + 320), device, on_progress,
                limit=max(1, pixels // (height * width)))
    return image_out, alpha_out, layer_out


def coverage(prims: Primitives, batch: int, height: int, width: int, atlas: torch.Tensor | None = None,
             device=None) -> torch.Tensor:
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
        if _rendering_cpu().render(torch.empty(batch, height, width, 0), None, alpha, None, prims.to(device), 0,
                                   atlas, TILE):
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


# -- batch polyline images ----------------------------------------------------------------------------

def _finite(values: torch.Tensor) -> torch.Tensor:
    """isfinite in two elementwise operations (x - x is 0 only for finite x)."""
    return (values - values) == 0


def value_range(values: torch.Tensor, lengths: torch.Tensor, scale: str, per_image: int = 1):
    """(low, high) float [B,1] of the finite y values within each length of values [B,T]: over the
    per_image consecutive series of each image (scale "per_image"), or over all ("shared")."""
    ignored = ~((torch.arange(values.shape[1], device=values.device)[None] < lengths[:, None]) & _finite(values))
    low = values.masked_fill(ignored, float("inf")).amin(1, keepdim=True)
    high = values.masked_fill(ignored, -float("inf")).amax(1, keepdim=True)
    if scale == "shared":
        low, high = low.amin(0, keepdim=True).expand_as(low), high.amax(0, keepdim=True).expand_as(high)
    elif per_image > 1:  # the series of an image share its range
        low = low.view(-1, per_image).amin(1, keepdim=True).expand(-1, per_image).reshape(-1, 1)
        high = high.view(-1, per_image).amax(1, keepdim=True).expand(-1, per_image).reshape(-1, 1)
    return low, high


def series_points(values: torch.Tensor, lengths: torch.Tensor, low, high, height: int, width: int):
    """Pixel-space points [B,T,2] of B series: y values [B,T] at evenly spaced x, or xy [B,T,2].

    y values are mapped low -> bottom row centre, high -> top row centre (a flat series: the
    middle row); xy are taken as pixel coordinates. Padding and non-finite values become NaN (gaps)."""
    batch, steps = values.shape[:2]
    valid = torch.arange(steps, device=values.device)[None] < lengths[:, None]
    if values.ndim == 3:
        return values.masked_fill(~(valid[..., None] & _finite(values)), float("nan"))
    unit = ((values - low) / (high - low)).nan_to_num_(0.5)  # a flat series: 0 / 0
    y = (height - 0.5) - unit * (height - 1)
    x = 0.5 + torch.arange(steps, device=values.device)[None] * (width - 1) / (lengths[:, None] - 1).clamp_min(1)
    return torch.stack([x.expand(batch, -1), y], -1).masked_fill_(~(valid & _finite(values))[..., None], float("nan"))


_PIECE = 8  # Bresenham steps per piece: dense [piece, pieces] operations, no per-pixel gathers


@dataclass
class _Lines:
    """Bresenham's algorithm for every segment of B polylines, up to the enumeration of its pixels.

    columns [k,S]: per segment (S = B * (T-1), image after image) the major extent (>= 1) and twice
    it, twice the minor one, the first and last step, then the values a step's pixel is computed from
    (see _line_pixels), all float32 when exact (`flat`: every point inside a frame of at most 2**23
    pixels), else int64. segment, rank int64 [P]: the pieces of _PIECE steps, each with its segment
    and its rank in it; piece_start: the first piece of each image and the number of pieces (host
    ints)."""

    columns: torch.Tensor
    segment: torch.Tensor
    rank: torch.Tensor
    piece_start: list
    flat: bool


def _lines(points: torch.Tensor, height: int, width: int, inside: bool = False) -> _Lines:
    """The segments of B polylines, points float [B,T,2] (NaN = gap, T >= 2): pixel (i, j) spans
    [i, i+1) x [j, j+1), so a segment joins the pixels that hold its ends. inside: every finite point
    is known to lie in the frame (else a host sync checks). Waits for the device once for the sizes."""
    batch, steps = points.shape[:2]
    ends = points.floor()
    finite = _finite(ends[..., 0] + ends[..., 1])
    ok = finite[:, :-1] & finite[:, 1:]
    # the common case in float32 (exact: Bresenham's numerators stay below 2**24), else int64
    flat = 2 * height * width <= 2**24 and (inside or bool(
        ((ends >= 0).all(-1) & (ends[..., 0] < width) & (ends[..., 1] < height)).logical_or_(~finite).all()))
    ends = ends.nan_to_num(0.0, 0.0, 0.0)  # segments with a non-finite end get no step
    if not flat:  # far points clamped: exact within 2**29 px
        ends = ends.clamp(-2**29, 2**29).long()
    # each segment walked from its end with the larger x, as OpenCV's line iterator walks it: where a
    # step falls exactly halfway between two rows (or columns), it takes the one nearer to that end
    a, b = ends[:, :-1], ends[:, 1:]
    from_b = a[..., :1] < b[..., :1]
    a, delta = torch.where(from_b, b, a), torch.where(from_b, a - b, b - a)
    size_of = delta.abs()
    major_is_x = size_of[..., 0] >= size_of[..., 1]
    major, minor = size_of.amax(-1), size_of.amin(-1)
    unit = delta.sign()
    # x and y moved by one step along the longer axis of each segment, and by one along the shorter
    major_step = unit * torch.stack([major_is_x, ~major_is_x], -1)
    minor_step = unit - major_step
    if flat:  # all inside the frame: flat indices within the image, strides 1 along x and W along y
        first, last = torch.zeros_like(major), major
        # x + width * y of the steps (whole numbers: exact in float32)
        per_segment = [major_step[..., 0] + major_step[..., 1] * width, minor_step[..., 0] + minor_step[..., 1] * width,
                       a[..., 1] * width + a[..., 0]]
    else:  # segments that leave the frame: only the steps whose major coordinate is inside it
        start = torch.where(major_is_x, a[..., 0], a[..., 1])
        direction = torch.where(major_is_x, unit[..., 0], unit[..., 1])
        extent = torch.where(major_is_x, width, height)
        # steps s with start + direction * s in [0, extent); a one-pixel segment (direction 0) has step 0
        first = torch.where(direction > 0, -start, start - (extent - 1))
        last = torch.where(direction > 0, extent - 1 - start, start)
        point_inside = (start >= 0) & (start < extent)
        first = torch.where(direction == 0, (~point_inside).long(), first.clamp_min(0))
        last = torch.where(direction == 0, 0, torch.minimum(last, major))
        per_segment = [a[..., 0], a[..., 1], *major_step.unbind(-1), *minor_step.unbind(-1)]
    pieces = torch.div(last - first, _PIECE, rounding_mode="floor").long().add_(1).clamp_min_(0).mul_(ok)
    length = major.clamp_min(1)
    columns = torch.stack([length, 2 * length, 2 * minor, first, last, *per_segment]).view(5 + len(per_segment), -1)
    piece_start = [0] + np.cumsum(_host(pieces.sum(1))).tolist()
    segment, rank = expand_counts(pieces.view(-1), piece_start[-1])
    return _Lines(columns, segment, rank, piece_start, flat)


def _line_pixels(lines: _Lines, start: int, stop: int, height: int, width: int) -> torch.Tensor:
    """Flat indices int64 [N] (within images start .. stop-1: (b - start)*H*W + y*W + x) of the pixels
    that Bresenham's algorithm draws for their segments, image after image; where segments meet, a
    pixel is listed twice. Steps outside the frame are listed as (stop - start)*H*W, past the last
    pixel, when the lines leave the frame (not lines.flat)."""
    pieces = slice(lines.piece_start[start], lines.piece_start[stop])
    segment = lines.segment[pieces]
    step, offset, rest = _dda_steps(lines.columns, segment, lines.rank[pieces])
    per_image = lines.columns.shape[1] // (len(lines.piece_start) - 1)
    image = segment // per_image - start
    if lines.flat:
        along, across, base = rest
        local = offset.mul_(across).addcmul_(step, along).add_(base).long()
        return local.add_(image * (height * width)).T.reshape(-1)
    x0, y0, major_x, major_y, minor_x, minor_y = rest
    x = x0 + step * major_x + offset * minor_x
    y = y0 + step * major_y + offset * minor_y
    pixel = (image * height + y) * width + x
    outside = (x < 0) | (x >= width) | (y < 0) | (y >= height)
    return pixel.masked_fill_(outside, (stop - start) * height * width).T.reshape(-1)


def _bresenham(points: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Flat indices (b*H*W + y*W + x) int64 [N] of the pixels that Bresenham's algorithm draws for
    every segment of every polyline (points float [B,T,2], NaN = gap), all segments at once. Pixels
    outside the frame are left out."""
    if points.shape[1] < 2:
        return torch.zeros(0, dtype=torch.int64, device=points.device)
    lines = _lines(points, height, width)
    pixel = _line_pixels(lines, 0, points.shape[0], height, width)
    return pixel if lines.flat else pixel[pixel < points.shape[0] * height * width]


def _dda_steps(columns: torch.Tensor, segment: torch.Tensor, rank: torch.Tensor, piece: int = _PIECE):
    """Bresenham's steps of pieces of `piece` steps of segments (columns [5+k,S] as _Lines holds them:
    the major extent (>= 1), twice it, twice the minor extent, first and last step, then k values),
    the pieces given by segment and rank int64 [P], so that per pixel there are only dense [piece, P]
    operations and no gathers. Returns step [piece,P] (steps along the major axis; the last one
    repeated to fill the last piece), offset [piece,P] (the step along the minor axis that Bresenham
    picks: step * minor / major rounded half up), and the k values as [1,P] rows."""
    # one gather for every per-segment value a piece needs
    length, double_length, twice_minor, first, last, *rest = columns.index_select(1, segment)[:, None]  # [1, P]
    # [piece, P]: long rows of P make fast elementwise loops (rows of `piece` would not)
    step = torch.minimum(first + rank * piece + torch.arange(piece, device=columns.device)[:, None], last)
    if columns.dtype.is_floating_point:
        # (2 step minor + major) // (2 major), in floating point: numerator and denominator are whole
        # numbers held exactly, and a correctly rounded quotient is a whole number only if it is exact
        offset = torch.addcmul(length, step, twice_minor).div_(double_length).floor_()
    else:
        offset = torch.addcmul(length, step, twice_minor).div_(double_length, rounding_mode="floor")
    return step, offset, rest


def fill_coverage(points: torch.Tensor, lengths: torch.Tensor, height: int, width: int,
                   antialiased: bool) -> torch.Tensor:
    """Coverage float [B,H,W] of the area under evenly spaced series (points [B,T,2] from
    series_points, lengths [B]): the rows below the curve, whose height at each pixel column is
    linearly interpolated between points; columns over a gap are left empty."""
    steps = points.shape[1]
    # the index (fractional) of the series point at each column centre: x_i = 0.5 + i (W-1) / (n-1)
    column = torch.arange(width, device=points.device, dtype=points.dtype)
    position = column[None] * ((lengths[:, None] - 1).clamp_min(0) / max(width - 1, 1))
    left = position.floor().long().clamp(0, max(steps - 2, 0))
    t = position - left
    y0 = points[..., 1].gather(1, left)
    y1 = points[..., 1].gather(1, (left + 1).clamp(max=steps - 1))
    curve = torch.where(lengths[:, None] > 1, y0 + (y1 - y0) * t, float("nan"))  # [B,W]; NaN over gaps
    row = torch.arange(height, device=points.device, dtype=points.dtype)[None, :, None]
    if antialiased:
        coverage = (row + 1 - curve[:, None, :]).clamp(0, 1)
    else:
        coverage = (row + 0.5 >= curve[:, None, :]).to(points.dtype)
    return torch.nan_to_num(coverage, nan=0.0)


def render_polylines(values, height: int, width: int, lengths: torch.Tensor | None = None,
                     mode: str = "aliased", line_width: float = 1.0, scale: str = "per_image",
                     color=(1.0, 1.0, 1.0, 1.0), background=(0.0, 0.0, 0.0), fill_color=None,
                     channels: int = 1, dtype: torch.dtype = torch.float32, device=None,
                     on_progress=None) -> torch.Tensor:
    """B line plots at once: [B,H,W] (channels 1: coverage times the line's opacity) or [B,H,W,3].

    values: y float [B,T] at evenly spaced x (the first at the left pixel centre, the last at the
    right one), or pixel xy float [B,T,2]; or a Ragged of either. lengths int [B] for ragged series
    (points past a length are ignored; default all T). NaN or infinite values leave a gap (the
    segments to and from them are not drawn); a series of fewer than 2 points gives a blank image.
    mode: "aliased" draws 1-px lines exactly as Bresenham's algorithm would (8-connected, one pixel
    per step along the longer axis, pixel (i, j) holds the points in [i, i+1) x [j, j+1));
    "antialiased" draws `line_width` px lines with round joins and caps through `draw`.
    scale: y values min-max scaled "per_image" or "shared" by all, the lowest to the bottom row
    centre, the highest to the top one (a flat series: the middle row).
    color RGBA, background RGB (channels 3), fill_color RGBA or None (y values only): the area
    under the curve, drawn under the line.
    dtype: a floating type (values 0..1) or torch.uint8 (0..255, as image pipelines store them).
    Rendered on `device` (default: that of values) in memory-sized chunks of images, all segments
    of a chunk at once; the result is on the device of `values`.
    """
    from ..core.batching import Ragged

    if isinstance(values, Ragged):
        values, lengths = values.values, values.lengths
    if mode not in ("aliased", "antialiased"):
        raise ValueError(f"mode: expected 'aliased' or 'antialiased', got {mode!r}")
    if scale not in ("per_image", "shared"):
        raise ValueError(f"scale: expected 'per_image' or 'shared', got {scale!r}")
    if values.ndim not in (2, 3) or (values.ndim == 3 and values.shape[2] != 2):
        raise ValueError(f"values: expected y values [B,T] or xy points [B,T,2], got shape {tuple(values.shape)}")
    if fill_color is not None and values.ndim == 3:
        raise ValueError("fill_color: filling under the curve needs y values, not xy points")
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 1 or 3, got {channels!r}")
    if not (dtype.is_floating_point or dtype == torch.uint8):
        raise ValueError(f"dtype: expected a floating type or torch.uint8, got {dtype}")
    home = values.device
    device = torch.device(device) if device is not None else home
    batch, steps = values.shape[:2]
    lengths = torch.full((batch,), steps, dtype=torch.long) if lengths is None else lengths.long().clamp(0, steps)
    out = _output((batch, height, width) + ((3,) if channels == 3 else ()), dtype, home)
    # CPU chunks of 4 M pixels keep the per-pixel temporaries in a 1 MB L2 cache: measured 2x faster
    # per image than 16 M or 64 M on a 2-core EPYC
    limit = max(1, ((4 << 20) if device.type == "cpu" else (256 << 20)) // (height * width))
    if mode == "aliased" and channels == 1 and fill_color is None:
        _plot_lines(out, values, lengths, scale, color, device, limit, on_progress)
        return out
    low, high = value_range(values.float(), lengths.to(home), scale) if values.ndim == 2 else (None, None)

    def plot(start, stop, dev):
        chunk = slice(start, stop)
        on = lambda t: None if t is None else t[chunk].to(dev)  # noqa: E731
        points = series_points(on(values).float(), on(lengths), on(low), on(high), height, width)
        target = out[chunk] if dev == home else torch.empty(out[chunk].shape, dtype=dtype, device=dev)
        _plot(target, points, on(lengths), mode, line_width, color, background, fill_color)
        if dev != home:
            out[chunk] = target.to(home)

    run_chunked(plot, batch, height * width * 4 * 12, device, on_progress, limit=limit)
    return out


def _output(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The output batch of render_polylines, uninitialised: every path writes every pixel (the CPU
    loops clear each image just before drawing it, while it is in cache); on the CPU on huge pages."""
    out = torch.empty(shape, dtype=dtype, device=device)
    return on_huge_pages(out) if device.type == "cpu" else out


def _plot_lines(out, values, lengths, scale, color, device, limit, on_progress) -> None:
    """The fast path of render_polylines: 1-px aliased lines into out [B,H,W] (float 0..1 or uint8),
    pixels written once each, straight into the output. On the CPU numba's loop or OpenCV draws them
    where either gives the same pixels (polylines_cpu); else the segments of the whole batch are set
    up at once (one transfer, one host sync for their sizes) and chunks of images enumerate their
    pixels."""
    batch, height, width = out.shape
    home = out.device
    levels = 1.0 if out.dtype.is_floating_point else 255.0
    value = float(color[3]) * levels
    value = value if levels == 1 else round(value)
    on = lambda t: None if t is None else t.to(device)  # noqa: E731
    points = None
    if device.type == "cpu" and values.ndim == 2:  # series_points: None unless numba runs where values are
        points = polylines_cpu.series_points(values, lengths, scale, height, width)
    if points is None:
        low, high = value_range(values.float(), lengths.to(home), scale) if values.ndim == 2 else (None, None)
        points = series_points(on(values).float(), on(lengths), on(low), on(high), height, width)
    if device.type == "cpu" and polylines_cpu.draw(out, points, lengths, value, on_progress):
        return
    lines = _lines(points, height, width, inside=values.ndim == 2) if values.shape[1] > 1 else None

    def plot(start, stop, dev):
        target = out[start:stop] if dev == home else torch.empty(out[start:stop].shape, dtype=out.dtype, device=dev)
        target.zero_()
        if lines is not None:
            pixels = _line_pixels(lines, start, stop, height, width).to(dev)
            if lines.flat:
                target.view(-1).index_fill_(0, pixels, value)
            else:  # steps outside the frame land one past its last pixel
                canvas = torch.zeros(target.numel() + 1, dtype=out.dtype, device=dev).index_fill_(0, pixels, value)
                target.copy_(canvas[:-1].view_as(target))
        if dev != home:
            out[start:stop] = target.to(home)

    run_chunked(plot, batch, height * width * 4 * 12, device, on_progress, limit=limit)


def _plot(out, points, lengths, mode, line_width, color, background, fill_color):
    """Draw b plots of points [b,T,2] into out [b,H,W] or [b,H,W,3] (float 0..1 or uint8 0..255).
    color, background and fill_color: numbers, used as scalars or filled in on the device (no upload)."""
    batch, height, width = out.shape[:3]
    device = points.device
    scale = 1.0 if out.dtype.is_floating_point else 255.0
    if mode == "aliased":
        line = torch.zeros(batch * height * width, device=device)
        if points.shape[1] > 1:
            line.index_fill_(0, _bresenham(points, height, width), 1.0)
        line = line.view(batch, height, width)
    else:
        prims = polylines(torch.arange(batch, device=device), points, lengths, line_width, (1.0, 1.0, 1.0, 1.0))
        line = coverage(prims, batch, height, width, device=device)
    line = line.mul_(color[3])  # a new tensor either way: scaled in place
    under = None
    if fill_color is not None:
        under = fill_coverage(points, lengths, height, width, mode == "antialiased") * fill_color[3]
    if out.ndim == 3:  # source-over of the line's coverage on the fill's
        result = line if under is None else line + under * (1 - line)
    else:
        rgb = _constants([float(v) for v in (*background[:3], *color[:3], *(fill_color or ())[:3])], device)
        result = rgb[:3].expand(batch, height, width, 3)
        if under is not None:
            result = torch.lerp(result, rgb[6:9].expand_as(result), under[..., None])
        result = torch.lerp(result, rgb[3:6].expand_as(result), line[..., None])
    out.copy_(result if scale == 1 else (result * scale).round_())


# Coverage per kind and source-over compositing, as the torch path above computes them: one block
# per tile (one thread per pixel); each thread walks its tile's pairs in drawing order.
_COMPOSITE_SOURCE = r"""
#define SEGMENT 0
#define BOX_FILL 1
#define BOX_STROKE 2
#define DISC 3
#define SPRITE 4
#define ELLIPSE 5
#define ELLIPSE_STEPS {ELLIPSE_STEPS}

__device__ __forceinline__ float from_distance(float d) { return fminf(fmaxf(0.5f - d, 0.0f), 1.0f); }

// coverage of a rounded box at |offset from centre| ax, ay along its axes: from its signed distance near
// a rounded corner (anywhere on a turned box), else the product of its sides' coverages (see
// _box_coverage, _turned_box_coverage)
__device__ float box_fill(float ax, float ay, float hx, float hy, float r, bool near_corner, bool turned) {
    if ((turned || near_corner) && r >= 1.0f) {
        float qx = ax - (hx - r), qy = ay - (hy - r);
        float cx = fmaxf(qx, 0.0f), cy = fmaxf(qy, 0.0f);
        return from_distance(sqrtf(cx * cx + cy * cy) + fminf(fmaxf(qx, qy), 0.0f) - r);
    }
    return from_distance(ax - hx) * from_distance(ay - hy);
}

// signed distance to an ellipse of semi-axes a, b from |offset from centre| ax, ay along its axes (see
// _ellipse_distance)
__device__ float ellipse_distance(float ax, float ay, float a, float b) {
    float px = fmaxf(ax, 1e-3f), py = fmaxf(ay, 1e-3f);
    float tx = 0.70710677f, ty = 0.70710677f;
    float ab = a * a - b * b;
    for (int step = 0; step < ELLIPSE_STEPS; ++step) {
        float ex = ab * (tx * tx * tx) / a, ey = -ab * (ty * ty * ty) / b;
        float rx = a * tx - ex, ry = b * ty - ey;
        float qx = px - ex, qy = py - ey;
        float ratio = sqrtf(rx * rx + ry * ry) / fmaxf(sqrtf(qx * qx + qy * qy), 1e-6f);
        tx = fminf(fmaxf((qx * ratio + ex) / a, 0.0f), 1.0f);
        ty = fminf(fmaxf((qy * ratio + ey) / b, 0.0f), 1.0f);
        float norm = fmaxf(sqrtf(tx * tx + ty * ty), 1e-6f);
        tx = tx / norm;
        ty = ty / norm;
    }
    float dx = px - a * tx, dy = py - b * ty;
    float distance = sqrtf(dx * dx + dy * dy);
    return (px / a) * (px / a) + (py / b) * (py / b) <= 1.0f ? -distance : distance;
}

__device__ float coverage(long long kind, const float* p, float ox, float oy, float gx, float gy, float tile_last,
                          const float* atlas, int atlas_h, int atlas_w) {
    if (kind == SEGMENT) {
        float half = fmaxf(p[4], 0.5f), weight = fminf(fmaxf(2.0f * p[4], 0.0f), 1.0f);
        float dx = p[2] - p[0], dy = p[3] - p[1];
        float length = fmaxf(sqrtf(dx * dx + dy * dy), 1e-12f);
        float ux = dx / length, uy = dy / length;
        float px = (ox - p[0]) + gx, py = (oy - p[1]) + gy;
        float qx = (ox - p[2]) + gx, qy = (oy - p[3]) + gy;  // from the far end: see _segment_coverage
        float along = px * ux + py * uy;
        float across = fabsf(px * uy - py * ux);
        float beyond = fmaxf(-along, qx * ux + qy * uy);
        float value;
        if (p[5] > 0.0f) {
            value = from_distance(across - half) * from_distance(beyond);
        } else {
            float b = fmaxf(beyond, 0.0f);
            value = from_distance(sqrtf(b * b + across * across) - half);
        }
        return value * weight;
    }
    if (kind == BOX_FILL || kind == BOX_STROKE) {
        float x = (ox - p[0]) + gx, y = (oy - p[1]) + gy;
        float cosine = p[8], sine = p[9];
        bool turned = sine != 0.0f;
        float ax = fabsf(turned ? cosine * x + sine * y : x), ay = fabsf(turned ? cosine * y - sine * x : y);
        float hx = p[2], hy = p[3], r = p[4];
        // near a rounded corner: decided once per tile, from the tile's centre, as binning does (turned
        // boxes are measured from their distance everywhere)
        float middle = 0.5f * tile_last;
        bool near_corner = (fabsf((ox - p[0]) + middle) + (middle + 1.0f) >= hx - r)
                           && (fabsf((oy - p[1]) + middle) + (middle + 1.0f) >= hy - r);
        if (kind == BOX_FILL) return box_fill(ax, ay, hx, hy, r, near_corner, turned);
        float half = fmaxf(p[5], 0.5f), weight = fminf(fmaxf(2.0f * p[5], 0.0f), 1.0f);
        float inner = box_fill(ax, ay, hx - half, hy - half, fmaxf(r - half, 0.0f), near_corner, turned);
        if (!(hx > half && hy > half)) inner = 0.0f;
        float outer = box_fill(ax, ay, hx + half, hy + half, r + half, near_corner, turned);
        float outline = fmaxf(outer - inner, 0.0f) * weight;
        float corner = p[6];
        if (corner > 0.0f) {
            float keep_x = fminf(fmaxf((ax - (hx - corner)) + 0.5f, 0.0f), 1.0f);
            float keep_y = fminf(fmaxf((ay - (hy - corner)) + 0.5f, 0.0f), 1.0f);
            outline = outline * (keep_x * keep_y);
        }
        return outline;
    }
    if (kind == DISC) {
        float dx = (ox - p[0]) + gx, dy = (oy - p[1]) + gy;
        float distance = sqrtf(dx * dx + dy * dy) - p[2];
        if (p[3] > 0.0f) {
            float half = fmaxf(p[3], 0.5f), weight = fminf(fmaxf(2.0f * p[3], 0.0f), 1.0f);
            return from_distance(fabsf(distance) - half) * weight;
        }
        return from_distance(distance);
    }
    if (kind == ELLIPSE) {
        float x = (ox - p[0]) + gx, y = (oy - p[1]) + gy;
        float cosine = p[8], sine = p[9];
        float distance = ellipse_distance(fabsf(cosine * x + sine * y), fabsf(cosine * y - sine * x), p[2], p[3]);
        if (p[4] > 0.0f) {
            float half = fmaxf(p[4], 0.5f), weight = fminf(fmaxf(2.0f * p[4], 0.0f), 1.0f);
            return from_distance(fabsf(distance) - half) * weight;
        }
        return from_distance(distance);
    }
    if (kind == SPRITE) {
        long long u = (long long)rintf(((ox - 0.5f) - p[0]) + gx);
        long long v = (long long)rintf(((oy - 0.5f) - p[1]) + gy);
        if (u < 0 || v < 0 || u >= (long long)p[2] || v >= (long long)p[3]) return 0.0f;
        long long x = min(max((long long)p[4] + u, 0LL), (long long)atlas_w - 1);
        long long y = min(max((long long)p[5] + v, 0LL), (long long)atlas_h - 1);
        return atlas[y * atlas_w + x];
    }
    return 0.0f;
}

extern "C" __global__ void composite_tiles(
        const long long* tile_start, long long n_tiles, long long tile_offset, long long pair_begin,
        long long pair_end, const long long* primitive, const long long* kind, const float* params,
        const float* color, const long long* group, const float* atlas, int atlas_h, int atlas_w,
        const float* source, float* image, float* alpha, float* layer, int height, int width, int channels,
        int tiles_y, int tiles_x, int tile) {
    long long t = tile_offset + blockIdx.x;
    if (t >= n_tiles) return;
    // this launch draws the tile's pairs in [pair_begin, pair_end); the launch that holds the tile's last
    // pair finishes it (the first launch, for a tile without pairs)
    long long first = tile_start[t], last = tile_start[t + 1];
    long long start = max(first, pair_begin), stop = min(last, pair_end);
    bool finishes = last <= pair_end && (last > pair_begin || pair_begin == 0);
    if (start >= stop && !finishes) return;
    int gx = threadIdx.x % tile, gy = threadIdx.x / tile;
    long long frame = t / ((long long)tiles_y * tiles_x);
    int rest = (int)(t % ((long long)tiles_y * tiles_x));
    int row = rest / tiles_x, column = rest % tiles_x;
    int x = column * tile + gx, y = row * tile + gy;
    if (x >= width || y >= height) return;
    float ox = (float)(column * tile) + 0.5f, oy = (float)(row * tile) + 0.5f;
    float tile_last = (float)(tile - 1);
    long long pixel = (frame * height + y) * (long long)width + x;

    // premultiplied layer, built bottom to top; a group's pairs merge by maximum coverage first
    float lr = 0.0f, lg = 0.0f, lb = 0.0f, la = 0.0f;
    long long current = -1;
    bool pending = false;  // a shape is open: current, merged and its colour
    float merged = 0.0f, cr = 0.0f, cg = 0.0f, cb = 0.0f, ca = 0.0f;
    if (first < start) {  // the tile goes on from the launch before: its layer so far, and an open shape's coverage
        const float* so_far = layer + pixel * 4;
        lr = so_far[0]; lg = so_far[1]; lb = so_far[2]; la = so_far[3];
        long long p = primitive[start - 1];
        if (group[primitive[start]] == group[p]) {
            current = group[p];
            pending = true;
            merged = alpha[pixel];
            cr = color[p * 4]; cg = color[p * 4 + 1]; cb = color[p * 4 + 2]; ca = color[p * 4 + 3];
        }
    }
    for (long long k = start; k <= stop; ++k) {
        long long g = -2;
        float value = 0.0f;
        long long p = 0;
        if (k < stop) {
            p = primitive[k];
            g = group[p];
            value = coverage(kind[p], params + p * 10, ox, oy, (float)gx, (float)gy, tile_last, atlas, atlas_h, atlas_w);
        }
        if (k < stop && pending && g == current) {
            merged = fmaxf(merged, value);
            continue;
        }
        if (k == stop && pending && stop < last && group[primitive[stop]] == current) {
            alpha[pixel] = merged;  // the shape goes on in the next launch: its coverage so far waits in alpha
            break;
        }
        if (pending) {  // the shape below is complete: source-over
            float a = merged * ca, keep = 1.0f - a;
            lr = a * cr + keep * lr; lg = a * cg + keep * lg; lb = a * cb + keep * lb; la = a + keep * la;
        }
        if (k < stop) {
            current = g;
            pending = true;
            merged = value;
            cr = color[p * 4]; cg = color[p * 4 + 1]; cb = color[p * 4 + 2]; ca = color[p * 4 + 3];
        }
    }
    float* out = layer + pixel * 4;
    out[0] = lr; out[1] = lg; out[2] = lb; out[3] = la;
    if (!finishes) return;
    // every pixel of the frames is written: the layer, its alpha, and the layer over the source
    alpha[pixel] = la;
    const float* below = source + pixel * channels;
    float* composite = image + pixel * channels;
    float keep = 1.0f - la;
    composite[0] = lr + below[0] * keep; composite[1] = lg + below[1] * keep; composite[2] = lb + below[2] * keep;
    if (channels == 4) composite[3] = la + below[3] * keep;
}
""".replace("{ELLIPSE_STEPS}", str(ELLIPSE_STEPS))


# Pairs per launch of composite_tiles: a block walks its tile's pairs one after another, so a launch's time
# follows the most pairs of one tile in it; 2**17 pairs of the costliest kind (ellipses, ~700 cycles a pair
# in one thread) take ~60 ms at 1.5 GHz, under a desktop GPU's watchdog (~2 s) with a wide margin.
PAIRS_PER_LAUNCH = 1 << 17
_GRID_LIMIT = (1 << 31) - 1  # CUDA's gridDim.x; also the kernel's int32 indices (pixel columns, tile of a frame)


def _check_launch(frames, image, alpha, layer, pairs: _Pairs, tile: int) -> None:
    """What composite_tiles reads and writes, checked on the host before a launch: float32 [b,H,W,C] frames
    and image (C = 3 or 4), alpha [b,H,W] and layer [b,H,W,4], all contiguous on one device (the kernel
    writes the outputs in place: a copy would hide its writes), and sizes within its grid and int32 indices."""
    batch, height, width, channels = frames.shape
    expected = {"frames": (frames, frames.shape), "image": (image, frames.shape), "alpha": (alpha, frames.shape[:3]),
                "layer": (layer, (batch, height, width, 4))}
    for name, (tensor, shape) in expected.items():
        if tensor.dtype != torch.float32 or tuple(tensor.shape) != tuple(shape) or not tensor.is_contiguous() \
                or tensor.device != frames.device:
            raise ValueError(f"composite_tiles: {name} must be a contiguous float32 tensor {tuple(shape)} on "
                             f"{frames.device}, got {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}"
                             f"{'' if tensor.is_contiguous() else ', not contiguous'}")
    if channels not in (3, 4):
        raise ValueError(f"composite_tiles: frames must have 3 or 4 channels, got {channels}")
    if not 1 <= tile <= 32:
        raise ValueError(f"composite_tiles: tile must be 1 to 32 pixels (one thread per pixel, 1024 a block), got {tile}")
    if pairs.n_tiles >= _GRID_LIMIT or max(height, width, pairs.tiles_y * pairs.tiles_x * tile) >= _GRID_LIMIT:
        raise ValueError(f"composite_tiles: {pairs.n_tiles} tiles of {height}x{width} frames exceed the kernel's "
                         f"limits ({_GRID_LIMIT} blocks, int32 indices): draw fewer frames at once")


def composite_tiles_cuda(frames: torch.Tensor, image: torch.Tensor, alpha: torch.Tensor, layer: torch.Tensor,
                         pairs: _Pairs, prims: Primitives, atlas: torch.Tensor | None, tile: int) -> None:
    """Composite the sorted pairs over frames float32 [b,H,W,C] (C = 3 or 4) into image float32 [b,H,W,C],
    alpha float32 [b,H,W] and layer float32 [b,H,W,4] (contiguous, on frames' CUDA device; anything else is
    refused, see _check_launch), every pixel once: one block per tile, one thread per pixel, in launches of
    at most PAIRS_PER_LAUNCH pairs (a tile with more goes on in the next launch from the layer it left)."""
    _check_launch(frames, image, alpha, layer, pairs, tile)
    _, height, width, channels = frames.shape
    tile_start = torch.searchsorted(pairs.tile, torch.arange(pairs.n_tiles + 1, device=frames.device))
    if atlas is None:
        atlas = torch.zeros(1, 1, device=frames.device)
    total = pairs.tile.numel()
    launches = [(0, total, 0, pairs.n_tiles)]  # pair range, first tile and tile count of each launch
    if total > PAIRS_PER_LAUNCH:  # the tiles that each range of pairs falls in: one read of the device
        begins = torch.arange(0, total, PAIRS_PER_LAUNCH, device=frames.device)
        found = _host(torch.cat([tile_start[-1:], torch.searchsorted(tile_start, begins, right=True) - 1]))
        kept, first_tiles = found[0], [0] + found[2:]
        launches = [(begin, total if begin + PAIRS_PER_LAUNCH >= kept else begin + PAIRS_PER_LAUNCH, first,
                     (pairs.n_tiles if begin + PAIRS_PER_LAUNCH >= kept else first_tiles[i + 1] + 1) - first)
                    for i, (begin, first) in enumerate(zip(range(0, kept, PAIRS_PER_LAUNCH), first_tiles))] or launches
    # the tensors the kernel reads, detached (DLPack refuses tensors that require grad) and in its types
    reads = cuda.arrays(*(t.detach() for t in (tile_start, pairs.primitive, prims.kind.long(), prims.params.float(),
                                                prims.color.float(), prims.group.long(), atlas.float())))
    pixels = cuda.arrays(frames.detach(), image, alpha, layer)
    with cuda.stream(frames.device):
        for begin, end, first, count in launches:
            args = [reads[0], np.int64(pairs.n_tiles), np.int64(first), np.int64(begin), np.int64(end), *reads[1:],
                    np.int32(atlas.shape[0]), np.int32(atlas.shape[1]), *pixels]
            args += [np.int32(v) for v in (height, width, channels, pairs.tiles_y, pairs.tiles_x, tile)]
            cuda.kernel(_COMPOSITE_SOURCE, "composite_tiles")((count,), (tile * tile,), tuple(args))
