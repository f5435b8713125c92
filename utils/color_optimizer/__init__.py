"""Primitive image approximation: shapes added one at a time, each found by a batched search.

The method is fogleman/primitive's: for each new shape, many random candidates, hill climbing from
the best of them, and the shape's colour solved in closed form for its opacity. Here every step is
batched: thousands of candidates, of every image of a batch, are scored in one pass, and the best
`PARENTS` of each image are hill-climbed side by side, `mutations` proposals each per round.

Scoring cost follows the rows a candidate spans, not its area. A shape is described by where its
edges cross each pixel row (sorted crossings with nonzero-winding transitions: polygons, the
outline of a stroked Bezier, or the two roots of an ellipse's equation). The sums of the per-pixel
terms that the colour and the error change need are read from row prefix sums at those crossings,
so a candidate costs a few gathers per row it spans. The prefix sums are integers (fixed point):
exact, so no float64 is needed anywhere and every device sums alike.

A shape is searched without the host waiting on the device: the rows of all candidates go into a
number of slots and the climbs run a number of rounds, both chosen on the host from the shape
before (`_Schedule`), and the host reads one status word per shape. That is the torch path (CPU,
ROCm, Apple MPS, CUDA without CuPy). On NVIDIA GPUs with CuPy the search is three CUDA kernels per
shape (search_kernels.py) and the render one (render_kernel.py), over the same prefix sums, shape
geometry and constants.

Images are RGB, or premultiplied RGBA to fit transparency (fogleman/primitive's error over four
channels): a shape paints its colour and an alpha channel of 1, at its opacity, source-over.

Conventions: pixel coordinates, x right, y down, pixel centres at +0.5. During the search coverage
is binary, sampled at pixel centres (as primitive's scanlines); `render` draws the same shapes
anti-aliased (exact box-filter coverage along x, `SUBROWS` samples per pixel along y).

Shape parameters, float [.., 8] (unused entries 0; angles in degrees, clockwise on screen):
    triangle           x1 y1 x2 y2 x3 y3
    rectangle          x1 y1 x2 y2                 (opposite corners)
    rotated_rectangle  cx cy width height angle
    ellipse            cx cy rx ry
    rotated_ellipse    cx cy rx ry angle
    circle             cx cy r
    quadratic          x1 y1 cx cy x2 y2 width     (stroked quadratic Bezier, butt caps)
    polygon            x1 y1 x2 y2 x3 y3 x4 y4     (nonzero fill)
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..core.batching import expand_counts
from ..core.device import MEMORY_FRACTION, cupy_usable, free_memory_bytes, numba_usable
from ..inputs.text import short

KINDS = ("triangle", "rectangle", "rotated_rectangle", "ellipse", "rotated_ellipse", "circle", "quadratic",
         "polygon")
TRIANGLE, RECTANGLE, ROTATED_RECTANGLE, ELLIPSE, ROTATED_ELLIPSE, CIRCLE, QUADRATIC, POLYGON = range(8)
N_PARAMS = 8
# Hill climbs per image and shape, each from one of the best random candidates (the CUDA kernels' too).
# 16 rather than 8, measured at 256 px, 100 shapes: combo RMSE 26.8 against 27.6 on astronaut (three
# seeds; fogleman/primitive 27.1), triangles 26.7 against 27.3, for a third more time.
PARENTS = 16
MAX_ROUNDS = 1000
# Row slots scored at most between two interrupt checks (`_score_in_parts`): at 2048 px, measured on one
# core of a 2-core CPU shared with other jobs, up to ~0.2 s with numba's loops and ~0.6 s on the torch path.
PART_ROWS = 2 ** 19
MAX_KINDS_TEXT = 256  # every kind named once, with room for spaces, repeats and "combo"
INT32_MAX = 2 ** 31 - 1  # the CUDA kernels' int (sizes, indices) and grid x limit
SUBROWS = 8      # anti-aliasing samples per pixel along y in `render`
CURVE_STEPS = 8   # segments of a stroked Bezier's outline on each side while searching (render: more)
# Random shapes, in pixels of a 256 px image (scaled with it): a triangle's vertices within RANDOM_TRIANGLE
# of its first, a chain's (Bezier, 4-gon) each within RANDOM_CHAIN of the one before, sizes 1 + up to
# RANDOM_SIZE, Bezier widths 1 + up to RANDOM_STROKE. Shared with the CUDA kernels (search_kernels.py).
RANDOM_TRIANGLE, RANDOM_CHAIN, RANDOM_SIZE, RANDOM_STROKE = 15, 20, 31, 2

# The ways a shape meets a row: a convex polygon (one span), any 4-vertex polygon, a stroke outline
# polygon (sorted crossings, nonzero winding), an ellipse (the two roots of its equation).
_CONVEX, _POLY4, _STROKE, _ELLIPTIC = range(4)
_FAMILY = (_CONVEX, _CONVEX, _CONVEX, _ELLIPTIC, _ELLIPTIC, _ELLIPTIC, _STROKE, _POLY4)

# Parameter roles: how each is mutated and clamped.
_UNUSED, _VX, _VY, _CX, _CY, _SIZE, _ANGLE, _WIDTH = range(8)
_ROLES = (
    (_VX, _VY, _VX, _VY, _VX, _VY, _UNUSED, _UNUSED),
    (_CX, _CY, _CX, _CY, _UNUSED, _UNUSED, _UNUSED, _UNUSED),
    (_CX, _CY, _SIZE, _SIZE, _ANGLE, _UNUSED, _UNUSED, _UNUSED),
    (_CX, _CY, _SIZE, _SIZE, _UNUSED, _UNUSED, _UNUSED, _UNUSED),
    (_CX, _CY, _SIZE, _SIZE, _ANGLE, _UNUSED, _UNUSED, _UNUSED),
    (_CX, _CY, _SIZE, _UNUSED, _UNUSED, _UNUSED, _UNUSED, _UNUSED),
    (_VX, _VY, _VX, _VY, _VX, _VY, _WIDTH, _UNUSED),
    (_VX, _VY, _VX, _VY, _VX, _VY, _VX, _VY),
)
# A mutation moves one group of parameters (a vertex, a size, the angle), as primitive's do.
_GROUPS = (
    ((0, 1), (2, 3), (4, 5)),
    ((0, 1), (2, 3)),
    ((0, 1), (2, 3), (4,)),
    ((0, 1), (2,), (3,)),
    ((0, 1), (2, 3), (4,)),
    ((0, 1), (2,)),
    ((0, 1), (2, 3), (4, 5), (6,)),
    ((0, 1), (2, 3), (4, 5), (6, 7)),
)


def kind_codes(shape_type: str, name: str = "shape_type") -> tuple[int, ...]:
    """The kind codes a search draws from, ascending: one kind, all of them for "combo", or any
    subset written as kind names separated by commas or spaces (e.g. "triangle, ellipse"), at most
    MAX_KINDS_TEXT characters. A ValueError that starts with `name` (the input it came from) for
    anything else."""
    if not isinstance(shape_type, str) or len(shape_type) > MAX_KINDS_TEXT:
        got = f"{len(shape_type)} characters" if isinstance(shape_type, str) else short(shape_type)
        raise ValueError(f"{name}: expected kind names separated by commas, at most {MAX_KINDS_TEXT} characters, "
                         f"got {got}")
    names = [part for part in re.split(r"[\s,]+", str(shape_type).strip().lower()) if part]
    unknown = [part for part in names if part not in KINDS + ("combo",)]
    if not names or unknown:
        raise ValueError(f"{name}: expected one of {', '.join(KINDS + ('combo',))}, or several separated by commas, "
                         f"got {short(shape_type)}")
    if "combo" in names:
        return tuple(range(len(KINDS)))
    return tuple(sorted({KINDS.index(part) for part in names}))


@dataclass
class Approximation:
    """N shapes per image of a batch of B, in drawing order; images that stopped early (no shape
    improved them) are padded with shapes of zero opacity.

    kind   int64   [B,N]     index into KINDS
    params float32 [B,N,8]   working-size pixel coordinates (see the module docstring)
    color  float32 [B,N,3]   RGB in 0..1, quantised to 8 bits
    alpha  float32 [B,N]     opacity in 0..1 (a multiple of 1/255; 0 for padding)
    count  int64   [B]       shapes actually placed
    error  float32 [B,N+1]   sum of squared error over the C channels (0..1 units) of the working
                             image, after 0..N shapes (point-sampled coverage, as searched; after
                             the first, each as the search predicted it from its sums)
    background float32 [B,C] C = 3: RGB; C = 4: premultiplied RGBA (the fit is then RGBA),
                             straight colour and alpha quantised to 8 bits
    height, width: the working size
    """

    kind: torch.Tensor
    params: torch.Tensor
    color: torch.Tensor
    alpha: torch.Tensor
    count: torch.Tensor
    error: torch.Tensor
    background: torch.Tensor
    height: int
    width: int


@functools.lru_cache(maxsize=128)
def _constant(values: tuple, device: torch.device, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A small table of numbers [len(values)] as a tensor on `device`, made once per process by
    device fills: a tensor made from host data is an upload that waits for the stream on a GPU."""
    return torch.stack([torch.full((), v, dtype=dtype, device=device) for v in values])


def _family_of(kind):
    """The family code [K] of each kind [K] (int64)."""
    return _constant(_FAMILY, kind.device).index_select(0, kind)


# -- geometry: where shapes cross rows ---------------------------------------------------------------

def _rotation(angle_degrees):
    radians = angle_degrees * (math.pi / 180)
    return torch.cos(radians), torch.sin(radians)


def _rotated_rectangle(p):
    cos, sin = _rotation(p[:, 4])
    corner_x = _constant((-0.5, 0.5, 0.5, -0.5), p.device, torch.float32) * p[:, 2:3]
    corner_y = _constant((-0.5, -0.5, 0.5, 0.5), p.device, torch.float32) * p[:, 3:4]
    return torch.stack([p[:, 0:1] + corner_x * cos[:, None] - corner_y * sin[:, None],
                        p[:, 1:2] + corner_x * sin[:, None] + corner_y * cos[:, None]], 2)


_VERTICES = {
    TRIANGLE: lambda p: torch.cat([p[:, :6], p[:, 4:6]], 1).view(-1, 4, 2),  # last vertex repeated: a null edge
    RECTANGLE: lambda p: torch.stack([p[:, 0], p[:, 1], p[:, 2], p[:, 1], p[:, 2], p[:, 3], p[:, 0], p[:, 3]],
                                     1).view(-1, 4, 2),
    ROTATED_RECTANGLE: _rotated_rectangle,
    POLYGON: lambda p: p.reshape(-1, 4, 2),
}


def _polygon4(kind, p, kinds):
    """Vertices [K,4,2] of triangles, rectangles and 4-gons; only the forms of `kinds` are computed."""
    present = [k for k in _VERTICES if k in kinds]
    vertices = _VERTICES[present[0]](p)
    for code in present[1:]:
        vertices = torch.where((kind == code)[:, None, None], _VERTICES[code](p), vertices)
    return vertices


def _stroke_outline(p, steps: int = CURVE_STEPS):
    """Outline polygon [K, 2*(steps+1), 2] of quadratic Beziers stroked p[:,6] wide, butt caps."""
    t = torch.linspace(0, 1, steps + 1, device=p.device)[None, :, None]
    a, c, b = p[:, None, 0:2], p[:, None, 2:4], p[:, None, 4:6]
    point = (1 - t) ** 2 * a + 2 * (1 - t) * t * c + t ** 2 * b
    tangent = (1 - t) * (c - a) + t * (b - c)
    # a degenerate tangent (control point on an end point) falls back to the chord's direction
    tangent = torch.where(tangent.norm(dim=-1, keepdim=True) > 1e-6, tangent, (b - a).expand_as(tangent))
    normal = torch.stack([-tangent[..., 1], tangent[..., 0]], -1)
    normal = normal / normal.norm(dim=-1, keepdim=True).clamp_min(1e-6) * (p[:, None, 6:7] / 2)
    return torch.cat([point + normal, (point - normal).flip(1)], 1)


def _ellipse_form(kind, p):
    """Centre and quadratic form of ellipses: cx, cy, A, B, C [K] with
    A dx^2 + B dx dy + C dy^2 <= 1 inside, and the half height [K]."""
    circle = kind == CIRCLE
    rx = p[:, 2].clamp_min(1e-3)
    ry = torch.where(circle, rx, p[:, 3].clamp_min(1e-3))
    cos, sin = _rotation(torch.where(kind == ROTATED_ELLIPSE, p[:, 4], torch.zeros_like(p[:, 4])))
    ix, iy = 1 / rx ** 2, 1 / ry ** 2
    form = (cos ** 2 * ix + sin ** 2 * iy, 2 * cos * sin * (ix - iy), sin ** 2 * ix + cos ** 2 * iy)
    half_height = torch.sqrt((rx * sin) ** 2 + (ry * cos) ** 2)
    return p[:, 0], p[:, 1], *form, half_height


def _edge_crossings(vertices, y):
    """Where rows y [Q] cross the edges of closed polygons vertices [Q,V,2] (half-open in y, so a
    row through a vertex counts it once): crosses bool [Q,V], x [Q,V], y1 > y0 [Q,V]."""
    x0, y0 = vertices[..., 0], vertices[..., 1]
    x1, y1 = vertices.roll(-1, 1).unbind(-1)
    y = y[:, None]
    crosses = (y0 <= y) != (y1 <= y)
    t = (y - y0) / torch.where(crosses, y1 - y0, torch.ones_like(y0))
    return crosses, x0 + t * (x1 - x0), y1 > y0


def _polygon_crossings(vertices, y):
    """Crossings of rows y [Q] with closed polygons vertices [Q,V,2]: x [Q,V] sorted and the
    change of inside-ness (nonzero winding) at each, s [Q,V] in {-1, 0, 1}."""
    crosses, x, downward = _edge_crossings(vertices, y)
    direction = torch.where(crosses, torch.where(downward, 1, -1), 0)
    x, order = torch.sort(torch.where(crosses, x, float("inf")), 1)
    winding = torch.cumsum(direction.gather(1, order), 1)
    inside = (winding != 0).to(torch.int8)
    return x, inside - torch.nn.functional.pad(inside[:, :-1], (1, 0))


def _ellipse_crossings(form, y):
    """Crossings of rows y [Q] with ellipses (form: cx, cy, A, B, C per row [Q]): x [Q,2], s [Q,2]."""
    cx, cy, a, b, c = form
    dy = y - cy
    discriminant = (b * dy) ** 2 - 4 * a * (c * dy * dy - 1)
    root = torch.sqrt(discriminant.clamp_min(0))
    x = torch.stack([cx + (-b * dy - root) / (2 * a), cx + (-b * dy + root) / (2 * a)], 1)
    hit = (discriminant > 0).to(torch.int8)[:, None]
    return x, _constant((1, -1), y.device, torch.int8) * hit


# -- scoring -----------------------------------------------------------------------------------------

class Terms(NamedTuple):
    """Row prefix sums of the per-pixel terms that scoring reads, in fixed point: exact integer sums,
    the same on every device, no float64.

    prefix int32 [B*H*(W+1), T+1]: row (b*H + y)*(W+1) + j sums pixels 0..j-1 of row y of image b, in
    units of 1/scale. The terms, over the C channels (3, or 4 for RGBA): at a fixed opacity a,
    u = target - (1 - a) current (C) and |u|^2 - |target - current|^2 (T = C + 1); when the opacity is
    searched (alpha None), d = target - current (C), current (C), d.current and |current|^2 (T = 2C + 2);
    last, 1 (the pixel count). Every term lies in -C..C.
    """

    prefix: torch.Tensor
    scale: float
    height: int
    width: int
    alpha: float | None
    channels: int


def _terms(target, current, alpha: float | None) -> Terms:
    """`Terms` of images target and current [B,H,W,C] (0..1), for a fixed opacity alpha or a searched one (None)."""
    batch, height, width, channels = target.shape
    d = target - current
    one = torch.ones_like(d[..., :1])
    if alpha is None:
        terms = [d, current, (d * current).sum(-1, keepdim=True), (current * current).sum(-1, keepdim=True), one]
    else:
        u = d + alpha * current
        terms = [u, ((u * u) - (d * d)).sum(-1, keepdim=True), one]
    # the largest power of two that keeps a row's sum of terms within int32
    scale = float(2 ** math.floor(math.log2((2 ** 31 - 1) / (channels * (width + 1) + 1))))
    fixed = torch.round(torch.cat(terms, -1) * scale).to(torch.int32)
    prefix = torch.nn.functional.pad(torch.cumsum(fixed, 2, dtype=torch.int32), (0, 0, 1, 0))
    return Terms(prefix.view(batch * height * (width + 1), -1), scale, height, width, alpha, channels)


def _pixel_index(x, width: int):
    """Pixels of a row whose centre lies left of x: clamp(ceil(x - 0.5), 0, width)."""
    return x.clamp(-1, width + 1).sub_(0.5).ceil_().clamp_(0, width).long()


def _edges(vertices):
    """Edges of closed polygons vertices [K,V,2]: y0, y1, x0 and dx/dy [K,V,4] (0 for level edges)."""
    following = vertices.roll(-1, 1)
    step = following - vertices
    dx, dy = step[..., 0], step[..., 1]
    return torch.stack([vertices[..., 1], following[..., 1], vertices[..., 0], dx / torch.where(dy == 0, 1, dy)], -1)


def _shape_rows(family: int, kind, params, kinds, height: int, live=None):
    """Geometry of K shapes as `family` describes them (polygon edges [K,V,4] as `_edges`, or the
    ellipse form [K,5]: cx, cy, A, B, C) and the pixel rows whose centres they span: first [K] and
    count [K] (0 for shapes of other families, and where live [K] is False)."""
    if family == _ELLIPTIC:
        cx, cy, a, b, c, half = _ellipse_form(kind, params)
        geometry = torch.stack([cx, cy, a, b, c], 1)
        y_min, y_max = cy - half, cy + half
    else:
        if family == _STROKE:
            vertices = _stroke_outline(params)
        elif family == _CONVEX and not {RECTANGLE, ROTATED_RECTANGLE} & set(kinds):
            vertices = params[:, :6].reshape(-1, 3, 2)  # triangles alone: no null fourth edge
        else:
            vertices = _polygon4(kind, params, kinds)
        geometry = _edges(vertices)
        y_min, y_max = vertices[..., 1].amin(1), vertices[..., 1].amax(1)
    first = torch.ceil(y_min - 0.5).clamp(0, height).long()
    last = torch.floor(y_max - 0.5).clamp(-1, height - 1).long()
    count = (last - first + 1).clamp_min(0)
    if len(_families(kinds)) > 1:
        count = torch.where(_family_of(kind) == family, count, 0)
    return geometry, first, count if live is None else torch.where(live, count, 0)


def _slots(first, count, capacity: int):
    """The rows of K shapes (first [K], count [K]) laid out shape after shape in `capacity` slots,
    without reading the total on the host: owner [C] and row [C] of each slot, used [C] (False past
    the total), each shape's slot range start, end [K] (clamped to the capacity), whether all its
    rows fit [K], and the total ()."""
    end = torch.cumsum(count, 0)
    start = end - count
    clamped = start.clamp_max(capacity)
    # a slot's owner is the last shape starting at or before it (shapes without rows start where
    # the next one does, so they are passed over)
    starts = torch.zeros(capacity + 1, dtype=torch.int64, device=count.device)
    starts.index_put_((clamped,), torch.ones_like(clamped), accumulate=True)
    owner = torch.cumsum(starts[:capacity], 0) - 1
    slot = torch.arange(capacity, device=count.device)
    row = (first - start).index_select(0, owner) + slot
    total = end[-1]
    return owner, row, slot < total, clamped, end.clamp_max(capacity), (end <= capacity) | (count == 0), total


def _slot_columns(family: int, geometry, owner, row, used, width: int):
    """Where the slots' rows cross their shapes, as pixel indices (`_pixel_index`): for convex shapes
    and ellipses [left, right] columns [C,2] (equal where the row misses the shape or the slot is
    unused) and None; for other polygons columns [C,V] and the transitions s [C,V] (nonzero winding;
    0 in unused slots)."""
    if family == _ELLIPTIC:
        y = row.float() + 0.5
        cx, cy, a, b, c = geometry.index_select(0, owner).t()
        dy = y - cy
        discriminant = (b * dy) ** 2 - 4 * a * (c * dy * dy - 1)
        root = torch.sqrt(discriminant.clamp_min(0))  # a miss gives root 0: an empty span
        x = torch.stack([cx + (-b * dy - root) / (2 * a), cx + (-b * dy + root) / (2 * a)], 1)
        column = _pixel_index(x, width)
        return torch.where(used[:, None], column, 0), None
    y0, y1, x0, slope = geometry.index_select(0, owner).unbind(-1)
    y = torch.where(used, row + 0.5, float("nan"))[:, None]  # an unused slot's row crosses nothing
    misses = (y0 <= y) == (y1 <= y)
    x = (y - y0).mul_(slope).add_(x0)
    if family == _CONVEX:  # (in place where the temporaries allow: measured 25% faster)
        left = torch.where(misses, float("inf"), x).amin(1)
        span = torch.stack([left, x.masked_fill_(misses, -float("inf")).amax(1)], 1)
        column = _pixel_index(span, width)
        return torch.maximum(column, column[:, :1]), None  # a miss: right = left
    crosses = ~misses
    direction = torch.where(crosses, torch.where(y1 > y0, 1, -1), 0)
    x, order = torch.sort(torch.where(crosses, x, float("inf")), 1)
    inside = (torch.cumsum(direction.gather(1, order), 1) != 0).to(torch.int8)
    before = torch.nn.functional.pad(inside[:, :-1], (1, 0))
    return _pixel_index(x, width), inside - before


def _mixed_geometry(kind, params, kinds):
    """Geometry of K shapes of several families in one form: polygon edges [K,V,4] as `_edges` (every
    polygon's vertices padded to the longest outline by repeating its last one: null edges; an
    ellipse's edges cross no row), the ellipse form [K,5] (cx, cy, A, B, C), whether each shape is an
    ellipse [K], and the y extent of each shape's rows, y_min and y_max [K]."""
    elliptic = _family_of(kind) == _ELLIPTIC
    vertices = _polygon4(kind, params, kinds) if set(_VERTICES) & set(kinds) else None
    if QUADRATIC in kinds:
        outline = _stroke_outline(params)
        vertices = outline if vertices is None else torch.where(
            (kind == QUADRATIC)[:, None, None], outline,
            torch.cat([vertices, vertices[:, 3:].expand(-1, outline.shape[1] - 4, 2)], 1))
    cx, cy, a, b, c, half = _ellipse_form(kind, params)
    y_min, y_max = cy - half, cy + half
    if vertices is not None:
        y_min = torch.where(elliptic, y_min, vertices[..., 1].amin(1))
        y_max = torch.where(elliptic, y_max, vertices[..., 1].amax(1))
        vertices = vertices.masked_fill(elliptic[:, None, None], float("nan"))  # NaN edges cross no row
    else:
        vertices = torch.full((kind.shape[0], 1, 2), float("nan"), device=params.device)
    return _edges(vertices), torch.stack([cx, cy, a, b, c], 1), elliptic, y_min, y_max


def _mixed_columns(edges, form, elliptic, owner, row, used, width: int):
    """`_slot_columns` for slots of shapes of several families (`_mixed_geometry`): columns [C,V+2]
    and transitions s [C,V+2], the polygon crossings sorted with their nonzero-winding transitions,
    then an ellipse's two roots (+1, -1; transitions 0 where the slot is not an ellipse's)."""
    y0, y1, x0, slope = edges.index_select(0, owner).unbind(-1)
    y = torch.where(used, row + 0.5, float("nan"))[:, None]  # an unused slot's row crosses nothing
    crosses = (y0 <= y) != (y1 <= y)
    x = (y - y0).mul_(slope).add_(x0)
    direction = torch.where(crosses, torch.where(y1 > y0, 1, -1), 0)
    x, order = torch.sort(torch.where(crosses, x, float("inf")), 1)
    inside = (torch.cumsum(direction.gather(1, order), 1) != 0).to(torch.int8)
    before = torch.nn.functional.pad(inside[:, :-1], (1, 0))
    cx, cy, a, b, c = form.index_select(0, owner).t()
    dy = y[:, 0] - cy
    discriminant = (b * dy) ** 2 - 4 * a * (c * dy * dy - 1)
    root = torch.sqrt(discriminant.clamp_min(0))
    roots = torch.stack([cx + (-b * dy - root) / (2 * a), cx + (-b * dy + root) / (2 * a)], 1)
    hit = (elliptic.index_select(0, owner) & used)[:, None]
    column = torch.cat([_pixel_index(x, width), torch.where(hit, _pixel_index(roots, width), 0)], 1)
    return column, torch.cat([inside - before, _constant((1, -1), hit.device, torch.int8) * hit], 1)


def _mixed_slots(kind, params, kinds, regions: list[int], height: int, width: int, live=None):
    """`_slots` and `_slot_columns` for K shapes of several families at once: the shapes in family
    order (order [K]: the shapes by family, stable), each family's rows in its own region of one slot
    array (regions: slots per family), so that what fits is what the family's own slots would hold,
    and the crossings of every family in one pass (`_mixed_columns`). Returns order, owner [C] (an
    index into order), row [C], start and end [K] of each ordered shape's slots, whether all its rows
    fit [K] (ordered), the rows each family needed int64 [F], and column, s [C,V+2]."""
    device = kind.device
    families = _families(kinds)
    rank_of = _constant(tuple(families.index(f) if f in families else 0 for f in _FAMILY), device)
    order = torch.argsort(rank_of.index_select(0, kind), stable=True)
    kind, params = kind.index_select(0, order), params.index_select(0, order)
    rank = rank_of.index_select(0, kind)
    edges, form, elliptic, y_min, y_max = _mixed_geometry(kind, params, kinds)
    first = torch.ceil(y_min - 0.5).clamp(0, height).long()
    count = (torch.floor(y_max - 0.5).clamp(-1, height - 1).long() - first + 1).clamp_min(0)
    if live is not None:
        count = torch.where(live.index_select(0, order), count, 0)
    # each shape's rows within its family's region (a running count per family), then the region's place
    ends = torch.cumsum((rank[:, None] == torch.arange(len(families), device=device)) * count[:, None], 0)
    end = ends.gather(1, rank[:, None]).squeeze(1)
    limit = _constant(tuple(regions), device).index_select(0, rank)
    fits = (end <= limit) | (count == 0)
    offset = _constant(tuple(sum(regions[:i]) for i in range(len(regions))), device).index_select(0, rank)
    start, end = offset + end - count, offset + end.clamp_max(limit)
    start = start.clamp_max(end)
    slots = sum(regions)
    # a slot's owner is the last shape starting at or before it (shapes in family order: starts ascend)
    starts = torch.zeros(slots + 1, dtype=torch.int64, device=device)
    starts.index_put_((start,), torch.ones_like(start), accumulate=True)
    owner = (torch.cumsum(starts[:slots], 0) - 1).clamp_min(0)
    slot = torch.arange(slots, device=device)
    used = (slot >= start.index_select(0, owner)) & (slot < end.index_select(0, owner))
    row = (first - start).index_select(0, owner) + slot
    column, s = _mixed_columns(edges, form, elliptic, owner, row, used, width)
    return order, owner, row, start, end, fits, ends[-1], column, s


def _mixed_sums(terms: Terms, image, kind, params, kinds, capacity: dict | None, live):
    """`_coverage_sums` of shapes of several families at once (`_mixed_slots`)."""
    families = _families(kinds)
    regions = [kind.shape[0] * terms.height if capacity is None else capacity[f] for f in families]
    order, owner, row, start, end, fits, needed, column, s = _mixed_slots(kind, params, kinds, regions, terms.height,
                                                                          terms.width, live)
    image = image.index_select(0, order)
    at = ((image * terms.height).index_select(0, owner) + row.clamp(0, terms.height - 1))[:, None] * \
        (terms.width + 1) + column
    values = terms.prefix.index_select(0, at.view(-1)).view(*at.shape, -1)
    per_row = (values * -s[..., None].to(torch.int32)).sum(1, dtype=torch.int64)
    running = torch.nn.functional.pad(torch.cumsum(per_row.t(), 1, dtype=torch.int64), (1, 0))
    sums = (running.index_select(1, end) - running.index_select(1, start)).t()
    unsorted = lambda x: torch.empty_like(x).index_copy_(0, order, x)  # noqa: E731
    return unsorted(sums), unsorted(fits), dict(zip(families, needed.unbind()))


def _search_cpu():
    """color_optimizer/search_cpu (numba's coverage sums), imported on first use: numba is slow to import."""
    from . import search_cpu
    return search_cpu


def _families(kinds) -> list[int]:
    return sorted({_FAMILY[k] for k in kinds})


def _coverage_sums(terms: Terms, image, kind, params, kinds, capacity: dict | None = None, live=None):
    """Sums over the pixels each of K shapes covers (centre sampled) of the `Terms`: int64 [K,T+1]
    (units of 1/terms.scale; the last is the pixel count). image int64 [K] picks each shape's image;
    shapes where live [K] is False get no rows (sums 0).

    Each family of shapes among `kinds` lays its rows out in capacity[family] slots (default K*H,
    always enough). Also returns which shapes' rows all fit [K] (the sums of the others are
    partial) and the slots each family needed {family: () int64}."""
    if len(_families(kinds)) > 1 and not numba_usable(kind.device):  # one pass for every family
        return _mixed_sums(terms, image, kind, params, kinds, capacity, live)
    needed = {}
    sums, fits = 0, True
    for family in _families(kinds):
        slots = kind.shape[0] * terms.height if capacity is None else capacity[family]
        geometry, first, rows = _shape_rows(family, kind, params, kinds, terms.height, live)
        if family in (_CONVEX, _ELLIPTIC) and numba_usable(kind.device):
            # the CPU: numba's loop over each shape's rows, no slots (what fits is decided alike)
            found = _search_cpu().coverage_sums(terms.prefix, image, geometry, first, rows, family == _ELLIPTIC,
                                                terms.height, terms.width)
            if found is not None:
                end = torch.cumsum(rows, 0)
                fits = fits & ((end <= slots) | (rows == 0))
                needed[family] = end[-1]
                sums = sums + found
                continue
        owner, row, used, start, end, fit, needed[family] = _slots(first, rows, slots)
        fits = fits & fit
        column, s = _slot_columns(family, geometry, owner, row, used, terms.width)
        at = ((image * terms.height).index_select(0, owner) + row.clamp(0, terms.height - 1))[:, None] * \
            (terms.width + 1) + column
        if s is None:  # one span [left, right) per row: the difference of two prefixes, exact in int32
            at = at.t().contiguous()
            per_row = terms.prefix.index_select(0, at[1]) - terms.prefix.index_select(0, at[0])
        else:  # the negated transitions weigh the prefixes (in int32: a product is a prefix or its negation)
            values = terms.prefix.index_select(0, at.view(-1)).view(*at.shape, -1)
            per_row = (values * -s[..., None].to(torch.int32)).sum(1, dtype=torch.int64)
        # rows of a shape are consecutive slots: its sums are differences of an exact running sum
        # (taken along contiguous memory: terms first)
        running = torch.nn.functional.pad(torch.cumsum(per_row.t(), 1, dtype=torch.int64), (1, 0))
        sums = sums + (running.index_select(1, end) - running.index_select(1, start)).t()
    return sums, fits, needed


def _opacity_sums(terms: Terms, sums, alpha):
    """Sums of u = target - (1 - a) current [K,C] and of |u|^2 - |target - current|^2 [K] at opacity
    alpha [K], and the pixel count [K], float32, from `_coverage_sums`."""
    values, c = sums.float() / terms.scale, terms.channels
    if terms.alpha is not None:
        return values[:, 0:c], values[:, c], values[:, c + 1]
    return (values[:, 0:c] + alpha[:, None] * values[:, c:2 * c],
            2 * alpha * values[:, 2 * c] + alpha * alpha * values[:, 2 * c + 1], values[:, 2 * c + 2])


def _paint(color, channels: int):
    """What a shape of colour [..,3] adds at full opacity, over `channels`: RGB, or premultiplied RGBA (alpha 1)."""
    return color if channels == 3 else torch.cat([color, torch.ones_like(color[..., :1])], -1)


def _error_change(opacity_sums, color, alpha):
    """Change [K] of the squared error over the covered pixels when drawing `color` [K,3] at `alpha` [K]
    (opacity_sums: `_opacity_sums` at that alpha): the sum of |u - a paint|^2 - |target - current|^2."""
    sum_u, sum_q, count = opacity_sums
    color = _paint(color, sum_u.shape[1])
    return sum_q - 2 * alpha * (color * sum_u).sum(1) + alpha * alpha * count * (color * color).sum(1)


def optimal_colors(opacity_sums, alpha):
    """Closed-form colour [K,3] minimising the squared error over the covered pixels at opacity
    alpha [K] (opacity_sums: `_opacity_sums` at that alpha): the mean of u / a, clamped to 0..1 (the
    error is a separable convex quadratic per channel, so clamping the mean gives the constrained
    optimum; an alpha channel's paint is 1 whatever the colour)."""
    sum_u, _, count = opacity_sums
    return (sum_u[:, :3] / (alpha * count.clamp_min(1))[:, None]).clamp(0, 1)


def score(terms: Terms, image, kind, params, alpha, kinds, capacity: dict | None = None, live=None):
    """Error change [K] float32, optimal colour [K,3] of K candidates, and the row slots each family
    needed (see `_coverage_sums`). The change is inf for invalid shapes, where live [K] is False and
    for candidates whose rows did not fit the slots (not scored: a search passes them over).

    image int64 [K] picks each candidate's image; kind int64 [K] (codes among `kinds`); params
    float [K,8]; alpha float [K] in (0, 1] (terms.alpha where that is fixed).
    """
    sums, fits, needed = _coverage_sums(terms, image, kind, params, kinds, capacity, live)
    opacity_sums = _opacity_sums(terms, sums, alpha)
    color = optimal_colors(opacity_sums, alpha)
    change = _error_change(opacity_sums, color, alpha).masked_fill(~fits, float("inf"))
    if QUADRATIC in kinds:
        change = torch.where(_valid(kind, params, kinds), change, float("inf"))
    if live is not None:
        change = torch.where(live, change, float("inf"))
    return change, color, needed


def _valid(kind, p, kinds):
    """primitive's rule for Beziers: the chord is longer than either control leg (no hairpins)."""
    if QUADRATIC not in kinds:
        return torch.ones_like(kind, dtype=torch.bool)
    leg = lambda i, j: ((p[:, i:i + 2] - p[:, j:j + 2]) ** 2).sum(1)  # noqa: E731
    chord = leg(0, 4)
    return (kind != QUADRATIC) | ((chord > leg(0, 2)) & (chord > leg(2, 4)))


# -- random shapes and mutations ---------------------------------------------------------------------

def _role_tables(height: int, width: int, device):
    """Per kind: lower and upper bounds of its parameters [8,2,8]; per kind and group (kind * 4 +
    group) the mutation sigma of the parameters the group moves, 0 for the others [32,8]."""
    scale = max(height, width) / 256
    margin = 16 * scale
    lo = {_VX: -margin, _VY: -margin, _CX: 0.0, _CY: 0.0, _SIZE: 1.0, _ANGLE: -math.inf, _WIDTH: 1.0}
    hi = {_VX: width + margin, _VY: height + margin, _CX: float(width), _CY: float(height),
          _SIZE: float(max(height, width)), _ANGLE: math.inf, _WIDTH: max(1.0, 16 * scale)}
    sigma = {_VX: 16 * scale, _VY: 16 * scale, _CX: 16 * scale, _CY: 16 * scale, _SIZE: 16 * scale, _ANGLE: 32.0,
             _WIDTH: max(0.5, scale)}
    device = torch.device(device)
    # per-role values looked up by the role tables, all made on the device (no upload)
    value = lambda table: _constant(tuple(table.get(r, 0.0) for r in range(len(_ROLES))), device,  # noqa: E731
                                    torch.float32)
    roles = _constant(sum(_ROLES, ()), device)
    bounds = torch.stack([value(lo).index_select(0, roles), value(hi).index_select(0, roles)]).view(2, -1, N_PARAMS)
    member = _constant(tuple(int(i in members) for groups in _GROUPS for members in groups + ((),) * (4 - len(groups))
                             for i in range(N_PARAMS)), device, torch.float32).view(-1, 4, N_PARAMS)
    steps = value(sigma).index_select(0, roles).view(-1, 1, N_PARAMS) * member
    return bounds.transpose(0, 1).contiguous(), steps.view(-1, N_PARAMS)


def random_shapes(kinds: tuple[int, ...], count: int, height: int, width: int, generator, device):
    """`count` random shapes drawn as primitive draws them (small, anywhere): kind [count], params [count,8]."""
    scale = max(height, width) / 256
    choice = torch.randint(len(kinds), (count,), generator=generator, device=device)
    kind = _constant(tuple(kinds), torch.device(device)).index_select(0, choice)
    u = torch.rand(count, N_PARAMS, generator=generator, device=device)
    anchor_x, anchor_y = u[:, 0] * width, u[:, 1] * height
    spread = lambda i, reach: (u[:, i] * 2 - 1) * reach * scale  # noqa: E731
    size = lambda i: 1 + u[:, i] * RANDOM_SIZE * scale  # noqa: E731
    zero = torch.zeros_like(anchor_x)
    chain_x2, chain_y2 = anchor_x + spread(2, RANDOM_CHAIN), anchor_y + spread(3, RANDOM_CHAIN)
    forms = {
        TRIANGLE: [anchor_x, anchor_y, anchor_x + spread(2, RANDOM_TRIANGLE), anchor_y + spread(3, RANDOM_TRIANGLE),
                   anchor_x + spread(4, RANDOM_TRIANGLE), anchor_y + spread(5, RANDOM_TRIANGLE), zero, zero],
        RECTANGLE: [anchor_x, anchor_y, (anchor_x + size(2)).clamp(max=width), (anchor_y + size(3)).clamp(max=height),
                    zero, zero, zero, zero],
        ROTATED_RECTANGLE: [anchor_x, anchor_y, size(2), size(3), u[:, 4] * 360, zero, zero, zero],
        ELLIPSE: [anchor_x, anchor_y, size(2), size(3), zero, zero, zero, zero],
        ROTATED_ELLIPSE: [anchor_x, anchor_y, size(2), size(3), u[:, 4] * 360, zero, zero, zero],
        CIRCLE: [anchor_x, anchor_y, size(2), zero, zero, zero, zero, zero],
        QUADRATIC: [anchor_x, anchor_y, chain_x2, chain_y2, chain_x2 + spread(4, RANDOM_CHAIN),
                    chain_y2 + spread(5, RANDOM_CHAIN), (1 + u[:, 6] * RANDOM_STROKE) * scale, zero],
        POLYGON: [anchor_x, anchor_y, anchor_x + spread(2, RANDOM_CHAIN), anchor_y + spread(3, RANDOM_CHAIN),
                  anchor_x + spread(4, RANDOM_CHAIN), anchor_y + spread(5, RANDOM_CHAIN),
                  anchor_x + spread(6, RANDOM_CHAIN), anchor_y + spread(7, RANDOM_CHAIN)],
    }
    params = torch.stack(forms[kinds[0]], 1)
    for code in kinds[1:]:
        params = torch.where((kind == code)[:, None], torch.stack(forms[code], 1), params)
    return kind, params


def mutate(kind, params, alpha, search_alpha: bool, tables, generator, kinds):
    """One random move per shape (kind [K] among `kinds`, params [K,8], alpha [K]): a Gaussian step
    of one parameter group (a vertex, the sizes, the angle), clamped to the frame's margins; with
    search_alpha, the opacity moves by -10..10 / 255."""
    bounds, steps = tables
    count, device = kind.shape[0], kind.device
    pick = torch.rand(count, generator=generator, device=device)
    step = torch.randn(count, N_PARAMS, generator=generator, device=device)
    if len(kinds) == 1:  # one kind: its table rows, no per-shape lookups
        group = kinds[0] * 4 + (pick * len(_GROUPS[kinds[0]])).long()
        low, high = bounds[kinds[0]]
    else:
        n_groups = _constant(tuple(len(g) for g in _GROUPS), device)
        group = kind * 4 + (pick * n_groups.index_select(0, kind)).long()
        low, high = bounds.index_select(0, kind).unbind(1)
    moved = torch.minimum(torch.maximum(params + step * steps.index_select(0, group), low), high)
    if search_alpha:
        change = torch.randint(-10, 11, (count,), generator=generator, device=device) / 255
        alpha = (alpha + change).clamp(1 / 255, 1)
    return moved, alpha


# -- the search --------------------------------------------------------------------------------------

def _commit_mask(kind, params, batch: int, height: int, width: int, kinds):
    """Binary coverage [B,H,W] (centre sampled) of one shape per image (kind [B], params [B,8])."""
    edges = torch.zeros(batch * height * (width + 1), dtype=torch.int32, device=params.device)
    for family in _families(kinds):
        geometry, first, rows = _shape_rows(family, kind, params, kinds, height)
        owner, row, used, _, _, _, _ = _slots(first, rows, batch * height)
        column, s = _slot_columns(family, geometry, owner, row, used, width)
        if s is None:  # a span: +1 at its left column, -1 at its right (an empty one cancels)
            s = _constant((1, -1), column.device).expand_as(column)
        at = ((owner * height + row.clamp(0, height - 1)) * (width + 1))[:, None] + column
        edges.index_put_((at.reshape(-1),), s.reshape(-1).to(torch.int32), accumulate=True)
    return torch.cumsum(edges.view(batch, height, width + 1), 2)[..., :width] > 0


@contextlib.contextmanager
def _one_cpu_thread(device: torch.device):
    """On the CPU, run with one intra-op thread: the search is thousands of small operations, which
    threads barely speed up, and when another process holds a core each one waits for the busy
    thread (measured on 2 shared cores: 13x slower with 2 threads than with 1)."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def approximate(target: torch.Tensor, shapes: int, kinds: tuple[int, ...], alpha: int = 128,
                candidates: int = 1000, mutations: int = 100, background: torch.Tensor | None = None,
                generator: torch.Generator | None = None, on_shape=None, on_round=None) -> Approximation:
    """Approximate each image of target [B,H,W,C] (0..1; C = 3 RGB, or 4 premultiplied RGBA: a fit
    of the colours and the transparency) with `shapes` shapes of `kinds`.

    alpha: 1..255 fixed opacity, or 0 to search it per shape (starting at 128).
    candidates: random shapes per image and shape; the best PARENTS are hill-climbed, `mutations`
    proposals per round, each until a round brings it no improvement. background [B,C] (default:
    the mean colour of each image). generator: a torch.Generator on target's device (seeded:
    deterministic). on_shape(done, total, canvas): called after each shape (progress, interrupts,
    previews) with the images drawn so far, canvas float [B,H,W,C] on the device (reading it is a
    host transfer: a caller does it only when it needs it). on_round(): called between the steps of a
    shape's search (after its random candidates and after each climbing round, and within a round
    every PART_ROWS row slots; with the CUDA kernels after each launch of climbing rounds), for
    interrupt checks: an exception it raises stops the
    search there and reaches the caller.
    An image stops early when no candidate lowers its error any more.

    On the torch path the host reads the device once per shape (`_Schedule`): a shape runs as a
    fixed sequence of operations whose sizes were chosen on the host before it (row slots, climbing
    rounds). Where CuPy kernels run (`cupy_usable`), search_kernels.approximate does the search.
    """
    target = _checked_target(target)
    background = _checked_background(background, target)
    for name, value, least in (("shapes", shapes, 0), ("candidates", candidates, 1), ("mutations", mutations, 1)):
        if not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {short(value)}")
    if cupy_usable(target.device):
        from . import search_kernels

        return search_kernels.approximate(target, shapes, kinds, alpha, candidates, mutations, background, generator,
                                          on_shape, on_round)
    with _one_cpu_thread(target.device):
        return _approximate(target, shapes, kinds, alpha, candidates, mutations, background, generator, on_shape,
                            on_round or (lambda: None))


def _checked_target(target) -> torch.Tensor:
    """The search's target as float32 [B,H,W,C], C 3 or 4, detached (any float dtype converted once on
    its device), or a ValueError that names it."""
    if not isinstance(target, torch.Tensor) or target.dim() != 4 or not target.is_floating_point():
        got = f"{tuple(target.shape)} {target.dtype}" if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"target: expected a float tensor [B,H,W,C], got {got}")
    if target.shape[-1] not in (3, 4) or 0 in target.shape:
        raise ValueError(f"target: expected 3 (RGB) or 4 (premultiplied RGBA) channels and no empty dimension, "
                         f"got shape {tuple(target.shape)}")
    return target.detach().to(torch.float32)


# Bytes per row slot of the torch path's scoring (the slots' geometry, crossings, gathered prefix sums
# and running sums), measured by peak RSS at 192 px: one family of convex polygons or ellipses ~190, of
# 4-gons ~510, of stroked Beziers ~2,000; several families in one pass ~790, ~2,100 with Beziers.
_SLOT_BYTES = {_CONVEX: 240, _ELLIPTIC: 240, _POLY4: 600, _STROKE: 2400}
_MIXED_SLOT_BYTES = (1000, 2600)  # without, with Beziers


def search_memory(batch: int, height: int, width: int, channels: int, kinds, alpha: int, candidates: int,
                  mutations: int, device) -> int:
    """Estimated peak bytes of `approximate` on target [B,H,W,C]: the images and their prefix sums, and
    on the torch path the row slots of the first shape, which has no shape before it to size them by
    (every row of every candidate, of every mutation of its climbs; numba's loops and the CUDA
    kernels score convex polygons and ellipses without slots, the kernels everything)."""
    terms = (2 * channels + 3) if alpha == 0 else channels + 2
    images = batch * height * width * (4 * channels * 4 + terms * 16)
    if cupy_usable(device):
        return images
    families = _families(kinds)
    share = {family: min(1.0, 2 * sum(_FAMILY[k] == family for k in kinds) / len(kinds)) for family in families}
    climb = batch * min(PARENTS, candidates) * mutations * height
    if len(families) > 1 and not numba_usable(device):  # one pass for every family: regions of one slot array
        rows = max(sum(share.values()) * batch * candidates * height, climb)
        return int(images + rows * _MIXED_SLOT_BYTES[_STROKE in families])
    # each family's slots (the climbs' shared out as the random kinds are: which family wins is the image's)
    slotted = [f for f in families if not (numba_usable(device) and f in (_CONVEX, _ELLIPTIC))]
    return int(images + sum(share[f] * max(batch * candidates * height, climb) * _SLOT_BYTES[f] for f in slotted))


def _checked_background(background, target) -> torch.Tensor | None:
    """The search's background as float32 [B,C] on the target's device (C and B the target's; any float
    dtype, detached), None for the default, or a ValueError that names it."""
    if background is None:
        return None
    batch, channels = target.shape[0], target.shape[-1]
    if not isinstance(background, torch.Tensor) or not background.is_floating_point() or \
            tuple(background.shape) != (batch, channels):
        raise ValueError(f"background: expected a float tensor [{batch},{channels}] (the target's images and "
                         f"channels), got {_described(background)}")
    return background.detach().to(target.device, torch.float32)


def _described(value) -> str:
    return f"{list(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else short(value)


def check_int32(name: str, value: int, least: int = 0) -> int:
    """value as a CUDA kernel's int (or grid size) takes it: least .. 2**31 - 1, else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= INT32_MAX:
        raise ValueError(f"{name}: expected an integer in {least}..{INT32_MAX}, got {short(value)}")
    return value


def _checked_result(result, height, width, scale, frame_every) -> Approximation:
    """`render`'s inputs checked, before anything is allocated: the result's tensors as float32 and
    int64 (any float or integer dtype, converted once on their device), detached and contiguous; the
    canvas sizes, scale and frame_every in range. A ValueError naming the input otherwise."""
    if not isinstance(result, Approximation):
        raise ValueError(f"result: expected an Approximation (from approximate), got {type(result).__name__}")
    check_int32("height", height, 1)
    check_int32("width", width, 1)
    check_int32("frame_every", frame_every)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ValueError(f"scale: expected a finite number > 0, got {short(scale)}")
    kind = result.kind
    if not isinstance(kind, torch.Tensor) or kind.dim() != 2 or kind.is_floating_point() or kind.is_complex() or \
            kind.dtype == torch.bool:
        raise ValueError(f"result.kind: expected an integer tensor [B,N], got {_described(kind)}")
    batch, total = kind.shape
    fields = {"kind": kind.detach().to(torch.int64).contiguous()}
    for name, shape in (("params", [batch, total, N_PARAMS]), ("color", [batch, total, 3]), ("alpha", [batch, total]),
                        ("background", [batch, "3 or 4"])):
        value = getattr(result, name)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() != len(shape) or \
                list(value.shape[:-1]) != shape[:-1] or value.shape[-1] not in ((3, 4) if name == "background"
                                                                                 else (shape[-1],)):
            what = "3 (RGB) or 4 (premultiplied RGBA) channels" if name == "background" else "float tensor"
            raise ValueError(f"result.{name}: expected a {what} {shape}, got {_described(value)}")
        if value.device != kind.device:
            raise ValueError(f"result.{name}: expected on {kind.device} (as result.kind), got {value.device}")
        fields[name] = value.detach().to(torch.float32).contiguous()
    if batch * total > INT32_MAX:
        raise ValueError(f"result: expected at most {INT32_MAX} shapes in all, got {batch} x {total}")
    return Approximation(**fields, count=result.count, error=result.error, height=result.height, width=result.width)


class _Schedule:
    """What the host decides for a shape: the row slots of each scoring stage and family, and the
    climbing rounds. It reads the device once per shape, after the shape's random candidates are
    scored and its parents chosen: the status of the shape before (`status`) and how many of this
    shape's parents are of each family (`set_parents`). All families climb in the same rounds, each
    family's rows in its own slots sized by its parents: a family without parents gets one slot
    (measured on combo shapes: half the families, and most of the work, were idle when every family
    climbed every parent's mutations).

    The random candidates get the slots the shape before the last needed, to the next level up. The
    climbs run the rounds the last shape's took and two more (half as many again when they were
    cut), and each round of a family gets the slots per parent that the same round of the last
    shape needed (to the next level up), times its parents now: climbs stop one after another, and
    later rounds score fewer rows. A round gets at least two parents' share of the family's first
    round, so that a climb that outlasts the last shape's goes on. A family without parents in the
    last shape gets twice the rows its random candidates spanned on average, per mutation. Rows past
    the slots are not scored (`score`): a shape much larger than the last one passes over some moves
    (as failed ones); the slots follow in the next.

    The first shape has no shape before it: its random candidates get every row, shared out among
    the kinds' families, its climbs every row of their mutations."""

    MIN_ROUNDS = 4
    FIRST_ROUNDS = 32
    SLOT_LEVELS = 4          # slot capacities are 256 * 2**(level / SLOT_LEVELS)
    LEVEL_BITS = 6

    def __init__(self, kinds, batch: int, candidates: int, parents: int, mutations: int, height: int):
        self.kinds, self.candidates, self.mutations, self.height = kinds, candidates, mutations, height
        self.families = _families(kinds)
        # every row of every candidate, shared out among the families (twice each family's share of
        # the kinds: random kinds are drawn evenly)
        share = {family: min(1.0, 2 * sum(_FAMILY[k] == family for k in kinds) / len(kinds))
                 for family in self.families}
        self.slots = {("random", family): math.ceil(batch * candidates * height * share[family]) for family in share}
        self.rounds = min(MAX_ROUNDS, self.FIRST_ROUNDS)
        self.per_parent = None  # per family, the slots of each round per parent (after the first shape)
        self.parents = {family: batch * parents if len(self.families) == 1 else 0 for family in self.families}

    def family_counts(self, parent_kind):
        """How many parents [B*P] (their kinds) are of each family, int64 [F], on the device."""
        return (_family_of(parent_kind)[:, None] == _constant(tuple(self.families), parent_kind.device)).sum(0)

    def set_parents(self, counts: list[int]) -> None:
        self.parents = dict(zip(self.families, counts))

    def capacity(self, stage: str, round: int = 0) -> dict:
        """Row slots per family of a scoring stage: "random", or "climb" at a round (for the parents
        `set_parents` gave)."""
        if stage == "random":
            return {family: self.slots[("random", family)] for family in self.families}
        every_row = self.mutations * self.height
        if self.per_parent is None:
            return {family: max(1, count * every_row) for family, count in self.parents.items()}
        slots = {}
        for family, count in self.parents.items():
            per_round = self.per_parent[family]
            least = min(count, 2) * per_round[0]
            slots[family] = max(1, math.ceil(max(least, count * per_round[min(round, len(per_round) - 1)])))
        return slots

    def _level(self, rows):
        """The level of the slots `rows` (int64 tensor) need: ceil(SLOT_LEVELS * log2(rows / 256))."""
        level = torch.ceil(self.SLOT_LEVELS * torch.log2(rows.float().clamp_min(1) / 256) + 1e-3)
        return level.clamp(0, 2 ** self.LEVEL_BITS - 1).long()

    def _slots(self, level: int) -> int:
        return math.ceil(256 * 2 ** (level / self.SLOT_LEVELS))

    def status(self, active, cut, climbed, needed: dict):
        """The device's report of a shape, int64 [1 + F*R] (read with the next shape's parents): a word
        with bit 0 an image is still active, bit 1 a climb was cut by the last round, bits 2-11 the
        rounds until every climb had ended, then LEVEL_BITS per family: the level of the slots its
        random candidates needed; then per family the level of the slots each climbing round needed
        (0 for a family without parents)."""
        word = active.any().long() + 2 * cut.long() + 4 * climbed.clamp_max(1023)
        for i, family in enumerate(self.families):
            word = word + (self._level(needed[("random", family)]) << (12 + self.LEVEL_BITS * i))
        zeros = torch.zeros(self.rounds, dtype=torch.int64, device=word.device)
        return torch.cat([word.view(1)] + [self._level(needed[("climb", family)]) if ("climb", family) in needed
                                           else zeros for family in self.families])

    def update(self, status: list[int]) -> bool:
        """Set the slots and rounds of the next shape from the last shape's `status` (before
        `set_parents` gives the next shape's parents); returns whether an image is still active."""
        word, climb_levels = status[0], status[1:]
        random_rows = {}
        for i, family in enumerate(self.families):
            random_rows[family] = self._slots(((word >> (12 + self.LEVEL_BITS * i)) & (2 ** self.LEVEL_BITS - 1)) + 1)
            self.slots[("random", family)] = random_rows[family]
        rounds = len(climb_levels) // len(self.families)
        per_parent = {}
        for i, family in enumerate(self.families):
            count = self.parents[family]
            if count > 0:
                levels = climb_levels[i * rounds:(i + 1) * rounds]
                per_parent[family] = [self._slots(level + 1) / count for level in levels]
            else:  # twice a random candidate's rows of the family (on average) per mutation
                kinds = sum(_FAMILY[k] == family for k in self.kinds)
                per_parent[family] = [2 * random_rows[family] * self.mutations * len(self.kinds)
                                      / (self.candidates * kinds)]
        self.per_parent = per_parent
        climbed = (word >> 2) & 1023
        cut = bool(word & 2)
        self.rounds = min(MAX_ROUNDS, self.rounds + self.rounds // 2 if cut else max(self.MIN_ROUNDS, climbed + 2))
        return bool(word & 1)


class _Record:
    """What both search paths (this torch path and search_kernels.Search) start from and fill in: the
    working target and canvas float [B,H,W,C] (the quantised background), the generator, whether the
    opacity is searched and its start, and the shapes so far as `Approximation` holds them (kind,
    params, color, alpha [B,N..]; error [B,N+1], error[:, 0] the background's)."""

    def __init__(self, target, shapes: int, alpha: int, background, generator):
        batch, height, width, _ = target.shape
        device = target.device
        self.target = target.float().clamp(0, 1).contiguous()
        self.generator = generator if generator is not None else torch.Generator(device=device).manual_seed(0)
        self.background = _quantised(self.target.mean((1, 2)) if background is None
                                     else background.to(device, torch.float32))
        self.current = self.background[:, None, None, :].expand_as(self.target).contiguous()
        self.searched = alpha == 0
        self.start_alpha = (128 if self.searched else alpha) / 255
        self.kind = torch.zeros(batch, shapes, dtype=torch.int64, device=device)
        self.params = torch.zeros(batch, shapes, N_PARAMS, device=device)
        self.color = torch.zeros(batch, shapes, 3, device=device)
        self.alpha = torch.zeros(batch, shapes, device=device)
        self.error = torch.zeros(batch, shapes + 1, device=device)
        self.error[:, 0] = ((self.target - self.current) ** 2).sum((1, 2, 3))

    def stopped_after(self, index: int) -> None:
        """No image improves after shape `index`: the later errors stay its."""
        self.error[:, index + 2:] = self.error[:, index + 1:index + 2]

    def result(self) -> Approximation:
        height, width = self.target.shape[1:3]
        count = (self.alpha > 0).sum(1)
        return Approximation(self.kind, self.params, self.color, self.alpha, count, self.error, self.background,
                             height, width)


def _approximate(target, shapes, kinds, alpha, candidates, mutations, background, generator, on_shape, on_round):
    record = _Record(target, shapes, alpha, background, generator)
    batch, height, width, _ = target.shape
    device = target.device
    tables = _role_tables(height, width, device)
    parents = min(PARENTS, candidates)
    schedule = _Schedule(kinds, batch, candidates, parents, mutations, height)
    current, active = record.current, torch.ones(batch, dtype=torch.bool, device=device)
    status = None  # the last shape's report, read with the next shape's parents
    for index in range(shapes):
        shape = _next_shape(record.target, current, active, kinds, record.start_alpha, record.searched, candidates,
                            parents, mutations, tables, record.generator, schedule, status, on_round)
        if shape is None:  # the last shape improved no image
            record.stopped_after(index - 1)
            break
        current, active = shape["current"], shape["active"]
        record.kind[:, index], record.params[:, index], record.color[:, index] = \
            shape["kind"], shape["params"], shape["color"]
        record.alpha[:, index] = torch.where(active, shape["alpha"], 0)
        record.error[:, index + 1] = record.error[:, index] + torch.where(active, shape["change"], 0)
        if on_shape is not None:
            on_shape(index + 1, shapes, current)
        status = schedule.status(shape["active"], *shape["report"])
    return record.result()


def _quantised(background):
    """Background [B,C] with its straight colour and alpha in 8 bits, as the SVG states them."""
    if background.shape[1] == 3:
        return (background * 255).round() / 255
    alpha = (background[:, 3:] * 255).round() / 255
    straight = (background[:, :3] / background[:, 3:].clamp_min(1e-6) * 255).round().clamp(0, 255) / 255
    return torch.cat([straight * alpha, alpha], 1)


def _next_shape(target, current, active, kinds, start_alpha, search_alpha, candidates, parents, mutations, tables,
                generator, schedule, status, on_round):
    """One shape per image, searched and committed on the device with sizes fixed by `schedule`,
    which reads the last shape's `status` and this shape's parents' families (one host read, none for
    the first shape of one family): returns the new current images and the shape, and its report
    (see `_Schedule`); None where the last shape improved no image."""
    batch, height, width, _ = target.shape
    device = target.device
    terms = _terms(target, current, None if search_alpha else start_alpha)
    # random candidates of every image at once; the best `parents` of each image are climbed
    kind, params = random_shapes(kinds, batch * candidates, height, width, generator, device)
    shape_alpha = torch.full((batch * candidates,), start_alpha, device=device)
    image = torch.arange(batch * candidates, device=device) // candidates
    change, needed = _score_in_parts(terms, image, kind, params, shape_alpha, kinds, schedule.capacity("random"),
                                     None, on_round)
    on_round()
    best = torch.topk(-change.view(batch, candidates), parents, dim=1).indices
    chosen = (best + torch.arange(batch, device=device)[:, None] * candidates).reshape(-1)
    kind, params, shape_alpha, change = kind[chosen], params[chosen], shape_alpha[chosen], change[chosen]
    several = len(schedule.families) > 1
    if status is not None or several:
        report = [status] if status is not None else []
        read = torch.cat(report + ([schedule.family_counts(kind)] if several else [])).tolist()
        if status is not None and not schedule.update(read[:len(status)]):
            return None
        if several:
            schedule.set_parents(read[len(read) - len(schedule.families):])
    kind, params, shape_alpha, change, cut, climbed, climb_needed = _climb_families(
        terms, kind, params, shape_alpha, change, chosen // candidates, search_alpha, mutations, tables, generator,
        kinds, schedule, batch, on_round)
    needed = {**{("random", f): n for f, n in needed.items()}, **{("climb", f): n for f, n in climb_needed.items()}}
    # the best climb of each image becomes its next shape, coloured in 8 bits
    shape_alpha = (shape_alpha * 255).round() / 255
    sums, _, _ = _coverage_sums(terms, torch.arange(batch, device=device), kind, params, kinds)
    opacity_sums = _opacity_sums(terms, sums, shape_alpha)
    color = (optimal_colors(opacity_sums, shape_alpha) * 255).round() / 255
    change = _error_change(opacity_sums, color, shape_alpha)
    # float rounding must not pass for an improvement (a flat image gets no shapes)
    improves = active & (change < -1e-6 * (1 + sums[:, -1] / terms.scale)) & _valid(kind, params, kinds)
    mask = _commit_mask(kind, params, batch, height, width, kinds) & improves[:, None, None]
    a = shape_alpha[:, None, None, None]
    paint = _paint(color, terms.channels)
    current = torch.where(mask[..., None], current * (1 - a) + paint[:, None, None, :] * a, current)
    return dict(current=current, active=improves, kind=kind, params=params, color=color, alpha=shape_alpha,
                change=change, report=(cut, climbed, needed))


def _climb_families(terms, kind, params, alpha, change, image, search_alpha, mutations, tables, generator, kinds,
                    schedule, batch: int, on_round):
    """Hill-climb the parents of every image (kind [B*P] among `kinds`, params [B*P,8], alpha, change
    [B*P], image [B*P] int64) side by side, every family in the same rounds (`_hill_climb`; each
    family's rows in its own slots), and pick each image's best climb: kind [B], params [B,8], alpha
    [B], change [B]; whether a climb was cut by the last round (), the rounds until every climb had
    stopped (), and the row slots each family with parents needed each round {family: int64 [R]}."""
    count, device = kind.shape[0], kind.device
    capacities = [schedule.capacity("climb", r) for r in range(schedule.rounds)]
    kind, params, alpha, change, cut, climbed, needed = _hill_climb(
        terms, kind, params, alpha, change, image, search_alpha, mutations, tables, generator, kinds, capacities,
        on_round)
    needed = {family: rows for family, rows in needed.items() if schedule.parents[family] > 0}
    winner = change.view(batch, -1).argmin(1) + torch.arange(batch, device=device) * (count // batch)
    return kind[winner], params[winner], alpha[winner], change[winner], cut, climbed, needed


def _hill_climb(terms, kind, params, alpha, change, image, search_alpha, mutations, tables, generator, kinds,
                capacities: list, on_round):
    """Hill-climb parents side by side (kind [K], params [K,8], alpha, change [K], image [K] int64).
    Each round, every parent still climbing makes `mutations` mutations and takes the best one if it
    lowers the error; a parent stops after a round in which none did. That is primitive's rule (stop
    when `mutations` moves from the same state fail in a row), with the moves tried side by side and
    the best success kept, not the first. There is a round per entry of `capacities` (the row slots
    of each family that round, or None: every row), each of a size fixed on the host (stopped
    parents' moves cost no rows and are ignored): no host reads. on_round() after each round.

    Returns each climb's end (kind, params, alpha, change), whether a climb was cut by the last round
    (), the rounds until every climb had stopped (), and the row slots each family needed each round
    {family: int64 [R]}."""
    count, device = kind.shape[0], kind.device
    parent = torch.arange(count, device=device).repeat_interleave(mutations, output_size=count * mutations)
    mutant_kind = kind[parent] if len(kinds) > 1 else kind[:1].expand(count * mutations)
    mutant_image = image[parent]
    first_move = torch.arange(count, device=device) * mutations
    climbing = torch.ones(count, dtype=torch.bool, device=device)
    climbed = torch.zeros((), dtype=torch.int64, device=device)
    needed = {}
    for capacity in capacities:
        moved, moved_alpha = mutate(mutant_kind, params[parent], alpha[parent], search_alpha, tables, generator, kinds)
        moved_change, rows = _score_in_parts(terms, mutant_image, mutant_kind, moved, moved_alpha, kinds, capacity,
                                             climbing[parent], on_round)
        best_change, best_move = moved_change.view(count, mutations).min(1)
        climbing = climbing & (best_change < change)
        pick = first_move + best_move
        params = torch.where(climbing[:, None], moved[pick], params)
        alpha = torch.where(climbing, moved_alpha[pick], alpha)
        change = torch.where(climbing, best_change, change)
        climbed = climbed + climbing.any()
        on_round()
        for family, total in rows.items():
            needed.setdefault(family, []).append(total)
    return (kind, params, alpha, change, climbing.any(), climbed,
            {family: torch.stack(totals) for family, totals in needed.items()})


def _score_in_parts(terms, image, kind, params, alpha, kinds, capacity: dict | None, live, on_round):
    """`score`'s change [K] and rows needed {family: ()} of K shapes (a round's mutants, a shape's random
    candidates; live [K] or None as `score` takes it), in parts of at most
    ~PART_ROWS row slots (each part a share of `capacity` as large as its share of the mutants; None:
    every row), with on_round() after each part but the last: a round at 2048 px and 10,000
    mutations scores ~1e8 rows, tens of seconds between interrupt checks in one piece."""
    count = kind.shape[0]
    slots = sum(capacity.values()) if capacity is not None else count * terms.height
    parts = min(count, math.ceil(slots / PART_ROWS))
    if parts <= 1:
        change, _, rows = score(terms, image, kind, params, alpha, kinds, capacity, live)
        return change, rows
    size = math.ceil(count / parts)
    share = None if capacity is None else {f: max(1, math.ceil(c * size / count)) for f, c in capacity.items()}
    change, rows = torch.empty(count, device=kind.device), {}
    for start in range(0, count, size):
        part = slice(start, start + size)
        change[part], _, needed = score(terms, image[part], kind[part], params[part], alpha[part], kinds, share,
                                        None if live is None else live[part])
        rows = {f: rows.get(f, 0) + n for f, n in needed.items()}
        if start + size < count:
            on_round()
    return change, rows


# -- anti-aliased rendering --------------------------------------------------------------------------

def scale_params(kind, params, factor: float):
    """Shape parameters [..,8] in coordinates `factor` times larger (angles unchanged)."""
    keep_angle = ((kind == ROTATED_RECTANGLE) | (kind == ROTATED_ELLIPSE))[..., None] & \
        (torch.arange(N_PARAMS, device=params.device) == 4)
    return torch.where(keep_angle, params, params * factor)


def render_curve_steps(height: int, width: int) -> int:
    """Segments on each side of a stroked Bezier's outline when rendering at height x width: more for
    larger canvases, so that the chords stay within a fraction of a pixel of the curve."""
    return max(16, 8 * int(math.sqrt(max(height, width) / 64)))


class _Outlines(NamedTuple):
    """S shapes (the B*N of a result, image after image) at the output scale, in the forms whose
    crossings with the sample rows `render` needs: 4-gon vertices [S,4,2] (triangles with their last
    vertex repeated, rectangles, 4-gons), stroke outlines [S,2*(steps+1),2], ellipse forms [S,5]
    (cx, cy, A, B, C), the family [S], and the sample rows (SUBROWS per pixel row) whose y lies in
    the shape's y extent: the first int64 [S] and the count int64 [S] (0 for shapes not drawn)."""

    polygon: torch.Tensor
    outline: torch.Tensor
    ellipse: torch.Tensor
    family: torch.Tensor
    first: torch.Tensor
    count: torch.Tensor


def _outlines(kind, params, alpha, height: int, width: int) -> _Outlines:
    """`_Outlines` of shapes kind [S], params [S,8] (output pixels) and opacities alpha [S], on a
    height x width canvas: every form of every shape, made on the device (no host read)."""
    polygon = _polygon4(kind, params, tuple(_VERTICES))
    outline = _stroke_outline(params, render_curve_steps(height, width))
    cx, cy, a, b, c, half = _ellipse_form(kind, params)
    family = _family_of(kind.clamp(0, len(KINDS) - 1))  # codes out of range are refused after the read
    stroke, elliptic = family == _STROKE, family == _ELLIPTIC
    top = torch.where(elliptic, cy - half, torch.where(stroke, outline[..., 1].amin(1), polygon[..., 1].amin(1)))
    bottom = torch.where(elliptic, cy + half, torch.where(stroke, outline[..., 1].amax(1), polygon[..., 1].amax(1)))
    samples = height * SUBROWS
    first = torch.ceil(top * SUBROWS - 0.5).clamp(0, samples).long()
    last = torch.floor(bottom * SUBROWS - 0.5).clamp(-1, samples - 1).long()
    count = (last - first + 1).clamp_min(0) * (alpha > 0)
    return _Outlines(polygon, outline, torch.stack([cx, cy, a, b, c], 1), family, first, count)


def _row_crossings(shapes: _Outlines, owner, y, families: set):
    """Crossings of sample rows y [Q] with their shapes (owner [Q]: an index into `shapes`, whose
    families among `families`): x [Q,V] and the change of inside-ness s int8 [Q,V] at each, 0 for
    padding. Polygons (4-gons, stroke outlines) by nonzero winding over their sorted crossings (a
    convex polygon's row: +1 at its leftmost crossing, -1 at its rightmost), then an ellipse's two
    roots, +1 and -1 where the row meets it."""
    xs, ss = [], []
    if families - {_ELLIPTIC}:
        if _STROKE not in families:
            vertices = shapes.polygon
        elif families <= {_STROKE, _ELLIPTIC}:
            vertices = shapes.outline
        else:  # 4-gons padded to the outline's length by repeating their last vertex: null edges
            padded = torch.cat([shapes.polygon, shapes.polygon[:, 3:].expand(-1, shapes.outline.shape[1] - 4, 2)], 1)
            vertices = torch.where((shapes.family == _STROKE)[:, None, None], shapes.outline, padded)
        if _ELLIPTIC in families:  # an ellipse's edges cross no row
            vertices = vertices.masked_fill((shapes.family == _ELLIPTIC)[:, None, None], float("nan"))
        x, s = _polygon_crossings(vertices.index_select(0, owner), y)
        xs.append(x)
        ss.append(s)
    if _ELLIPTIC in families:
        x, s = _ellipse_crossings(shapes.ellipse.index_select(0, owner).unbind(1), y)
        xs.append(x)
        ss.append(s if families == {_ELLIPTIC} else s * (shapes.family.index_select(0, owner) == _ELLIPTIC)[:, None])
    return (xs[0], ss[0]) if len(xs) == 1 else (torch.cat(xs, 1), torch.cat(ss, 1))


def _layer_coverage(shapes: _Outlines, layer, start, count, samples: int, families: set, layers: int,
                    band: tuple[int, int], width: int):
    """Anti-aliased coverage float32 [L,R,W] of shapes on `layers` layers (layer [S]: each shape's, -1
    for none) in the pixel rows band = (first, R), from the sample rows start .. start+count-1 [S] of
    each shape (within the band; `samples` of them in all, a host figure: no sync), its families among
    `families`. Per sample row, each crossing x adds its transition s as a ramp over the pixel it falls
    in (exact box-filter coverage along x), averaged over the SUBROWS sample rows of a pixel row and
    clamped to 0..1."""
    first, rows = band
    owner, rank = expand_counts(count * (layer >= 0), samples)
    sample = start.index_select(0, owner) + rank
    x, s = _row_crossings(shapes, owner, (sample.float() + 0.5) / SUBROWS, families)
    x = x.clamp(-1, width + 1)
    column = x.floor()
    fraction = x - column
    base = ((layer.index_select(0, owner) * rows + sample // SUBROWS - first) * (width + 2))[:, None]
    column = column.long()
    weight = s.float() / SUBROWS
    edges = torch.zeros(layers * rows * (width + 2), device=x.device)
    edges.index_put_(((base + (column + 1).clamp(0, width + 1)).view(-1),), (weight * (1 - fraction)).view(-1),
                     accumulate=True)
    edges.index_put_(((base + (column + 2).clamp(0, width + 1)).view(-1),), (weight * fraction).view(-1),
                     accumulate=True)
    # pixel j gets the ramps of crossings in pixels < j fully and of pixel j by the covered part
    return torch.cumsum(edges.view(layers, rows, width + 2), 2)[..., 1:width + 1].clamp(0, 1)


# Bytes `render` holds per layer pixel (coverage with its ramps, opacities, transmittances: float32,
# three at once), per pixel of a group between frames (its paint and transmittance: 4 (C + 1)) and per
# crossing of a sample row (its x, transition, sort order, indices and weights). Measured by peak RSS
# (tests/test_primitive_memory.py): 12 bytes per layer pixel at 512 and 768 px.
_LAYER_PIXEL_BYTES = 12
_CROSSING_BYTES = 64


def _render_outputs(batch: int, shapes: int, height: int, width: int, channels: int, frame_every: int) -> int:
    """Bytes of `render`'s outputs: the image, its clamped copy and the frames."""
    frames = -(-shapes // frame_every) if frame_every else 0
    return batch * height * width * channels * 4 * (frames + 2)


def render_memory(batch: int, shapes: int, height: int, width: int, channels: int, frame_every: int,
                  budget: float) -> int:
    """Estimated peak bytes of `render` of `shapes` shapes per image (B of them) on a height x width
    canvas of `channels` with frames every `frame_every`, where `budget` bytes may be used: its outputs,
    and its chunks' work (every shape over the whole canvas, its sample rows crossing a 4-gon and an
    ellipse), which `render` cuts into chunks of what the budget leaves (one shape's row at least)."""
    outputs = _render_outputs(batch, shapes, height, width, channels, frame_every)
    groups = -(-shapes // frame_every) if frame_every else 1
    pixels = batch * height * width
    work = (shapes * pixels * _LAYER_PIXEL_BYTES + groups * pixels * 4 * (channels + 1) +
            batch * shapes * height * SUBROWS * 6 * _CROSSING_BYTES)
    least = batch * width * (_LAYER_PIXEL_BYTES + 4 * (channels + 1)) + batch * SUBROWS * 6 * _CROSSING_BYTES
    return int(outputs + min(work, max(budget - outputs, least)))


class _Chunk(NamedTuple):
    """Shapes start..stop-1 of every image composited at once: `groups` groups of `per_group` layers
    (the shapes between two build-up frames, or all of them), the first frame they end (None: none),
    the pixel row blocks drawn [(first row, rows, sample rows crossed)] and the families present."""

    start: int
    stop: int
    per_group: int
    groups: int
    frame: int | None
    blocks: list
    families: set


def _render_plan(first: list, count: list, family: list, batch: int, total: int, height: int, width: int,
                 channels: int, frame_every: int, outline: int, budget: float) -> list[_Chunk]:
    """`render`'s chunks, planned on the host from each shape's sample rows (first, count) and family
    (lists [B*N], image after image): as many shapes at once as `budget` bytes hold, whole groups of
    frame_every shapes where they fit, and pixel row blocks where one shape's layers do not."""
    rows, top, bottom = [0] * total, [height] * total, [0] * total
    families = [set() for _ in range(total)]
    for i, (start, samples, code) in enumerate(zip(first, count, family)):
        if samples:
            n = i % total
            rows[n] += samples
            top[n] = min(top[n], start // SUBROWS)
            bottom[n] = max(bottom[n], (start + samples - 1) // SUBROWS + 1)
            families[n].add(code)

    def cost(layers: int, groups: int, band: int, samples: int, kinds: set) -> int:
        crossings = (outline if _STROKE in kinds else 4) + (2 if _ELLIPTIC in kinds else 0)
        pixels = batch * band * width
        return (layers * pixels * _LAYER_PIXEL_BYTES + groups * pixels * 4 * (channels + 1) +
                samples * crossings * _CROSSING_BYTES)

    chunks, start = [], 0
    while start < total:
        stop, low, high, samples, kinds = start, height, 0, 0, set()
        while stop < total:  # grow the chunk while it fits (one shape at least)
            grown = (min(low, top[stop]), max(high, bottom[stop]), samples + rows[stop], kinds | families[stop])
            size = stop + 1 - start
            groups = -(-size // frame_every) if frame_every else 1
            if stop > start and cost(size, groups, max(0, grown[1] - grown[0]), grown[2], grown[3]) > budget:
                break
            low, high, samples, kinds = grown
            stop += 1
        if frame_every:  # whole groups of frames, or a part of one group
            boundary = (start // frame_every + 1) * frame_every
            if start % frame_every or stop < boundary:
                stop = min(stop, boundary)
            elif stop < total:
                stop -= stop % frame_every
        size = stop - start
        if frame_every and start % frame_every == 0 and (stop % frame_every == 0 or stop == total):
            per_group, groups, frame = frame_every, -(-size // frame_every), start // frame_every
        else:
            per_group, groups = size, 1
            frame = (stop - 1) // frame_every if frame_every and (stop % frame_every == 0 or stop == total) else None
        low = min(top[start:stop])
        band = max(0, max(bottom[start:stop]) - low)
        kinds = set().union(*families[start:stop])
        samples = sum(rows[start:stop])
        blocks = []
        if band:
            full = cost(batch * groups * per_group, groups, band, samples, kinds)
            step = band if full <= budget else max(1, int(band * budget / full))
            for row in range(low, low + band, step):
                block = min(step, low + band - row)
                if block == band:
                    crossed = samples
                else:  # the sample rows of the chunk's shapes within the block
                    lo, hi = row * SUBROWS, (row + block) * SUBROWS
                    crossed = sum(max(0, min(first[i] + count[i], hi) - max(first[i], lo))
                                  for b in range(batch) for i in range(b * total + start, b * total + stop))
                blocks.append((row, block, crossed))
        chunks.append(_Chunk(start, stop, per_group, groups, frame, blocks, kinds))
        start = stop
    return chunks


def render(result: Approximation, height: int, width: int, scale: float, frame_every: int = 0, on_chunk=None):
    """Draw the shapes anti-aliased on a height x width canvas, coordinates times `scale`.

    Returns image float [B,H,W,C] (C as the background: RGB, or premultiplied RGBA) and, with
    frame_every > 0, the build-up frames float [B,F,H,W,C] after every `frame_every` shapes
    (F = ceil(N / frame_every); the last frame is the image). on_chunk(done, total) after each chunk.

    The shapes' rows are read on the host once; then chunks of shapes (as many as free memory holds)
    are composited source-over, each over the rows its shapes touch: within a group of the shapes
    between two frames, each layer's paint is weighted by the transmittance of the layers above it
    (a cumulative product), and the groups' (transmittance, paint) pairs are chained by a parallel
    scan, which gives every frame of the chunk at once. Where CuPy kernels run, one kernel does it
    all (render_kernel.py).
    """
    result = _checked_result(result, height, width, scale, frame_every)
    if cupy_usable(result.params.device):
        from . import render_kernel

        image, frames = render_kernel.render_cuda(result, height, width, scale, frame_every)
        if on_chunk is not None:
            on_chunk(result.kind.shape[1], result.kind.shape[1])
        return image, frames
    batch, total = result.kind.shape
    device = result.params.device
    channels = result.background.shape[1]
    image = result.background[:, None, None, :].expand(batch, height, width, channels).clone()
    paint = _paint(result.color, channels)
    frames = (torch.empty(batch, math.ceil(total / frame_every), height, width, channels, device=device)
              if frame_every else None)
    params = scale_params(result.kind, result.params, scale)
    kind = result.kind.reshape(-1)
    shapes = _outlines(kind, params.reshape(-1, N_PARAMS), result.alpha.reshape(-1), height, width)
    first, count, family, kind = torch.stack([shapes.first, shapes.count, shapes.family, kind]).tolist()  # one read
    if kind and not 0 <= min(kind) <= max(kind) < len(KINDS):
        raise ValueError(f"result.kind: expected kind codes 0..{len(KINDS) - 1}, got {min(kind)}..{max(kind)}")
    plan = _render_plan(first, count, family, batch, total, height, width, channels, frame_every,
                        shapes.outline.shape[1], free_memory_bytes(device) * MEMORY_FRACTION -
                        _render_outputs(batch, total, height, width, channels, frame_every))
    index = torch.arange(batch * total, device=device)
    image_of, shape_of = index // max(1, total), index % max(1, total)
    for chunk in plan:
        groups, per_group, size = chunk.groups, chunk.per_group, chunk.stop - chunk.start
        # each shape's layer: within a group the last drawn first, so that cumulative products run
        # from the top layer down; -1 for shapes of other chunks
        k = shape_of - chunk.start
        layer = torch.where((k >= 0) & (k < size),
                            (image_of * groups + k // per_group) * per_group + per_group - 1 - k % per_group, -1)
        padding = groups * per_group - size
        opacity = torch.nn.functional.pad(result.alpha[:, chunk.start:chunk.stop], (0, padding))
        opacity = opacity.view(batch * groups, per_group).flip(1)
        colour = torch.nn.functional.pad(paint[:, chunk.start:chunk.stop], (0, 0, 0, padding))
        colour = colour.view(batch * groups, per_group, channels).flip(1)
        framed = slice(chunk.frame, chunk.frame + groups) if chunk.frame is not None else None
        if framed is not None and sum(block[1] for block in chunk.blocks) < height:
            frames[:, framed] = image[:, None]  # the rows that the chunk leaves as they are
        for row, rows, samples in chunk.blocks:
            start, count = shapes.first, shapes.count
            if len(chunk.blocks) > 1:  # the sample rows within the block
                start = start.clamp_min(row * SUBROWS)
                count = ((shapes.first + count).clamp_max((row + rows) * SUBROWS) - start).clamp_min(0)
            coverage = _layer_coverage(shapes, layer, start, count, samples, chunk.families,
                                       batch * groups * per_group, (row, rows), width)
            a = coverage.view(batch * groups, per_group, rows, width).mul_(opacity[..., None, None])
            clear = torch.cumprod(1 - a, 1)  # transmittance of each layer and those above it in its group
            a[:, 1:] *= clear[:, :-1]  # each layer's paint shows through the layers above it
            add = torch.bmm(a.view(batch * groups, per_group, rows * width).transpose(1, 2), colour)
            add = add.view(batch, groups, rows, width, channels)
            keep = clear[:, -1].view(batch, groups, rows, width)
            step = 1
            while step < groups:  # a group after the others: inclusive scan of x -> keep * x + add
                add[:, step:] += add[:, :-step] * keep[:, step:, ..., None]
                keep[:, step:] = keep[:, step:] * keep[:, :-step]
                step *= 2
            painted = add.addcmul_(image[:, None, row:row + rows], keep[..., None])
            if framed is not None:
                frames[:, framed, row:row + rows] = painted
            image[:, row:row + rows] = painted[:, -1]
        if on_chunk is not None:
            on_chunk(chunk.stop, total)
    return image.clamp(0, 1), (frames.clamp_(0, 1) if frames is not None else None)


def svg(result: Approximation, index: int, height: int, width: int, scale: float) -> str:
    """SVG text of image `index`: viewBox in output pixels, a background rect (with its opacity where
    the fit is RGBA), one element per placed shape with its fill (stroke for Beziers) and opacity."""
    hex_color = lambda rgb: "#%02x%02x%02x" % tuple(int(round(v * 255)) for v in rgb)  # noqa: E731
    number = lambda v: f"{v:.3f}".rstrip("0").rstrip(".")  # noqa: E731
    background = result.background[index].tolist()
    if len(background) == 4:  # premultiplied: the straight colour and its opacity
        opacity = background[3]
        fill = f'fill="{hex_color([v / opacity if opacity > 0 else 0.0 for v in background[:3]])}" ' \
               f'fill-opacity="{number(opacity)}"'
    else:
        fill = f'fill="{hex_color(background)}"'
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">',
             f'<rect x="0" y="0" width="{width}" height="{height}" {fill}/>']
    kinds = result.kind[index].tolist()
    params = scale_params(result.kind[index], result.params[index], scale).tolist()
    for kind, p, rgb, alpha in zip(kinds, params, result.color[index].tolist(), result.alpha[index].tolist()):
        if alpha <= 0:
            continue
        paint = f'fill="{hex_color(rgb)}" fill-opacity="{number(alpha)}"'
        n = [number(v) for v in p]
        if kind in (TRIANGLE, POLYGON):
            points = " ".join(f"{n[i]},{n[i + 1]}" for i in range(0, 6 if kind == TRIANGLE else 8, 2))
            lines.append(f'<polygon points="{points}" {paint}/>')
        elif kind == RECTANGLE:
            x0, x1, y0, y1 = min(p[0], p[2]), max(p[0], p[2]), min(p[1], p[3]), max(p[1], p[3])
            lines.append(f'<rect x="{number(x0)}" y="{number(y0)}" width="{number(x1 - x0)}" '
                         f'height="{number(y1 - y0)}" {paint}/>')
        elif kind == ROTATED_RECTANGLE:
            lines.append(f'<rect x="{number(p[0] - p[2] / 2)}" y="{number(p[1] - p[3] / 2)}" width="{n[2]}" '
                         f'height="{n[3]}" transform="rotate({n[4]} {n[0]} {n[1]})" {paint}/>')
        elif kind == ELLIPSE:
            lines.append(f'<ellipse cx="{n[0]}" cy="{n[1]}" rx="{n[2]}" ry="{n[3]}" {paint}/>')
        elif kind == ROTATED_ELLIPSE:
            lines.append(f'<ellipse cx="{n[0]}" cy="{n[1]}" rx="{n[2]}" ry="{n[3]}" '
                         f'transform="rotate({n[4]} {n[0]} {n[1]})" {paint}/>')
        elif kind == CIRCLE:
            lines.append(f'<circle cx="{n[0]}" cy="{n[1]}" r="{n[2]}" {paint}/>')
        else:  # QUADRATIC
            stroke = paint.replace("fill", "stroke")
            lines.append(f'<path d="M {n[0]} {n[1]} Q {n[2]} {n[3]} {n[4]} {n[5]}" fill="none" {stroke} '
                         f'stroke-width="{n[6]}" stroke-linecap="butt"/>')
    lines.append("</svg>")
    return "\n".join(lines)
