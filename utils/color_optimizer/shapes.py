"""PrimitiveMesh's shapes and the constants every backend of its engine shares: the kinds, their
parameters and families, the search's sizes, the tables a mutation reads, the shapes' geometry on the
torch path, and the checks of inputs and results. The CUDA sources (shapes_cuda.py, search_cuda.py,
render_cuda.py) have their #defines written from these constants.

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
    line               x1 y1 x2 y2 width           (straight stroke, butt caps: a thin rotated rectangle)
    polyline           x1 y1 x2 y2 x3 y3 width     (two straight strokes, butt caps, mitred at x2 y2)
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..inputs.text import short

KINDS = (
    "triangle",
    "rectangle",
    "rotated_rectangle",
    "ellipse",
    "rotated_ellipse",
    "circle",
    "quadratic",
    "polygon",
    "line",
    "polyline",
)
TRIANGLE, RECTANGLE, ROTATED_RECTANGLE, ELLIPSE, ROTATED_ELLIPSE, CIRCLE, QUADRATIC, POLYGON, LINE, POLYLINE = range(10)
# "combo": fogleman/primitive's eight kinds (its modes 1-8), as before lines and polylines came (geometrize's
# kinds): a combo search draws what it drew.
COMBO = tuple(range(8))
STROKES = (QUADRATIC, POLYLINE)  # the kinds whose outline is a stroke's two sides (`_stroke_sides`)
N_PARAMS = 8
# Hill climbs per image and shape, each from one of the best random candidates (the CUDA kernels' too).
# 16 rather than 8, measured at 256 px, 100 shapes: combo RMSE 26.8 against 27.6 on astronaut (three
# seeds; fogleman/primitive 27.1), triangles 26.7 against 27.3, for a third more time.
PARENTS = 16
MAX_ROUNDS = 1000
MAX_KINDS_TEXT = 256  # every kind named once, with room for spaces, repeats and "combo"
INT32_MAX = 2**31 - 1  # the CUDA kernels' int (sizes, indices) and grid x limit
SUBROWS = 8  # anti-aliasing samples per pixel along y in `render`
CURVE_STEPS = 8  # segments of a stroked Bezier's outline on each side while searching (render: more)
# Random shapes, in pixels of a 256 px image (scaled with it): a triangle's vertices within RANDOM_TRIANGLE
# of its first, a chain's (Bezier, 4-gon) each within RANDOM_CHAIN of the one before, sizes 1 + up to
# RANDOM_SIZE, Bezier widths 1 + up to RANDOM_STROKE. Shared with the CUDA kernels (search_cuda.py).
RANDOM_TRIANGLE, RANDOM_CHAIN, RANDOM_SIZE, RANDOM_STROKE = 15, 20, 31, 2

# The ways a shape meets a row: a convex polygon (one span), any 4-vertex polygon, a stroke outline
# polygon (sorted crossings, nonzero winding), an ellipse (the two roots of its equation).
_CONVEX, _POLY4, _STROKE, _ELLIPTIC = range(4)
_FAMILY = (_CONVEX, _CONVEX, _CONVEX, _ELLIPTIC, _ELLIPTIC, _ELLIPTIC, _STROKE, _POLY4, _CONVEX, _STROKE)

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
    (_VX, _VY, _VX, _VY, _WIDTH, _UNUSED, _UNUSED, _UNUSED),
    (_VX, _VY, _VX, _VY, _VX, _VY, _WIDTH, _UNUSED),
)
PARAM_COUNTS = tuple(sum(role != _UNUSED for role in roles) for roles in _ROLES)  # each kind's own parameters
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
    ((0, 1), (2, 3), (4,)),
    ((0, 1), (2, 3), (4, 5), (6,)),
)


def kind_codes(shape_type: str, name: str = "shape_type") -> tuple[int, ...]:
    """The kind codes a search draws from, ascending: one kind, fogleman/primitive's eight (COMBO) for
    "combo" (with any other kinds named beside it), or any subset written as kind names separated by
    commas or spaces (e.g. "triangle, ellipse"), at most MAX_KINDS_TEXT characters. A ValueError that
    starts with `name` (the input it came from) for anything else."""
    if not isinstance(shape_type, str) or len(shape_type) > MAX_KINDS_TEXT:
        got = f"{len(shape_type)} characters" if isinstance(shape_type, str) else short(shape_type)
        raise ValueError(
            f"{name}: expected kind names separated by commas, at most {MAX_KINDS_TEXT} characters, got {got}"
        )
    names = [part for part in re.split(r"[\s,]+", str(shape_type).strip().lower()) if part]
    unknown = [part for part in names if part not in KINDS + ("combo",)]
    if not names or unknown:
        raise ValueError(
            f"{name}: expected one of {', '.join(KINDS + ('combo',))}, or several separated by commas, "
            f"got {short(shape_type)}"
        )
    if "combo" in names:  # fogleman's eight, with any others named
        return tuple(sorted(set(COMBO) | {KINDS.index(part) for part in names if part != "combo"}))
    return tuple(sorted({KINDS.index(part) for part in names}))


def parse_passes(text: str, shapes: int, alpha: int, name: str = "passes") -> list[tuple[tuple[int, ...], int, int]]:
    """Passes of a search, fogleman/primitive's repeated `-m`, `-n` and `-a`: entries separated by commas,
    semicolons or new lines, each `kind[:count[:alpha]]` (e.g. "triangle:100:128, ellipse:50:64"), the
    kind one name, "combo", or several joined by "+" ("triangle+ellipse"); count 1..5000 (default
    `shapes`), alpha 0..255 (0 searches it per shape; default `alpha`). Returns [(kind codes, count,
    alpha)] (at most ~50: the text is at most MAX_KINDS_TEXT characters); empty text: none. A ValueError
    that starts with `name` otherwise."""
    if not isinstance(text, str) or len(text) > MAX_KINDS_TEXT:
        got = f"{len(text)} characters" if isinstance(text, str) else short(text)
        raise ValueError(f"{name}: expected text of at most {MAX_KINDS_TEXT} characters, got {got}")
    entries = [entry.strip() for entry in re.split(r"[,;\n]", text) if entry.strip()]
    passes = []
    for entry in entries:
        parts = [part.strip() for part in entry.split(":")]
        numbers = parts[1:]
        if len(parts) > 3 or not all(re.fullmatch(r"\d{1,6}", n) for n in numbers):
            raise ValueError(
                f"{name}: expected passes like 'triangle:100:128, ellipse:50:64' (kind:count:alpha, count and "
                f"alpha optional), got {short(entry)}"
            )
        kinds = kind_codes(parts[0].replace("+", " "), name)
        count = int(numbers[0]) if numbers else shapes
        opacity = int(numbers[1]) if len(numbers) > 1 else alpha
        if not 1 <= count <= 5000 or not 0 <= opacity <= 255:
            raise ValueError(f"{name}: expected a count 1..5000 and an alpha 0..255, got {short(entry)}")
        passes.append((kinds, count, opacity))
    return passes


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
                             the first, each as the search predicted it from its sums); with an
                             edge_weight, of the edge-weighted error (`edge_weights`)
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
    device fills: a tensor made from host data is an upload that waits for the stream on a GPU.
    Small non-negative integers go several to a fill (bit fields of an int64, then split apart)."""
    small = all(0 <= v < 2**31 and float(v).is_integer() for v in values)
    per_word = 63 // max(1, int(max(values)).bit_length()) if small else 1
    if -(-len(values) // per_word) + 5 >= len(values):
        return torch.stack([torch.full((), v, dtype=dtype, device=device) for v in values])  # one fill a value
    bits = 63 // per_word
    words = [
        sum(int(v) << (bits * i) for i, v in enumerate(values[at : at + per_word]))
        for at in range(0, len(values), per_word)
    ]
    words = torch.stack([torch.full((), w, dtype=torch.int64, device=device) for w in words])
    shifts = torch.arange(per_word, device=device) * bits
    return ((words[:, None] >> shifts) & (2**bits - 1)).view(-1)[: len(values)].to(dtype)


def _family_of(kind):
    """The family code [K] of each kind [K] (int64)."""
    return _constant(_FAMILY, kind.device).index_select(0, kind)


# -- geometry: where shapes cross rows ---------------------------------------------------------------


def _rotation(angle_degrees):
    """cos and sin [K,2] of angles [K] in degrees."""
    radians = angle_degrees * (math.pi / 180)
    return torch.stack([torch.cos(radians), torch.sin(radians)], 1)


def _turn(p, kinds):
    """`_rotation` of the angles p[:, 4] where `kinds` has a rotated kind (rectangle or ellipse: both
    forms take it from one pass), else None."""
    return _rotation(p[:, 4]) if {ROTATED_RECTANGLE, ROTATED_ELLIPSE} & set(kinds) else None


def _rotated_rectangle(p, turn):
    """Corners [K,4,2] of rectangles p (cx cy width height) turned by turn [K,2] (`_rotation`): each
    corner offset (x, y) goes to (cx + x cos - y sin, cy + x sin + y cos), both coordinates at once."""
    corner = _constant((-0.5, -0.5, 0.5, -0.5, 0.5, 0.5, -0.5, 0.5), p.device, torch.float32).view(4, 2)
    corner = corner * p[:, None, 2:4]
    across = turn.flip(1) * _constant((-1.0, 1.0), p.device, torch.float32)  # -sin, cos (a - b = a + -b exactly)
    return (p[:, None, 0:2] + corner[..., :1] * turn[:, None]) + corner[..., 1:] * across[:, None]


def _unit_normal(start, end):
    """Unit normals [K,2] of segments start -> end [K,2] (x right, y down: (-dy, dx) / length, 0 for a
    segment of no length), with the float operations written out one by one (shapes_cuda repeats them)."""
    d = end - start
    length = torch.sqrt(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]).clamp_min(1e-6)
    return torch.stack([-d[:, 1] / length, d[:, 0] / length], 1)


def _line_corners(p):
    """Corners [K,4,2] of straight strokes p (x1 y1 x2 y2 width), butt caps: start and end offset by
    half the width along the normal, then back on the other side."""
    normal = _unit_normal(p[:, 0:2], p[:, 2:4]) * (p[:, 4:5] / 2)
    return torch.stack([p[:, 0:2] + normal, p[:, 2:4] + normal, p[:, 2:4] - normal, p[:, 0:2] - normal], 1)


_VERTICES = {
    TRIANGLE: lambda p, turn: torch.cat([p[:, :6], p[:, 4:6]], 1).view(-1, 4, 2),  # last vertex repeated: a null edge
    RECTANGLE: lambda p, turn: torch.stack(
        [p[:, 0], p[:, 1], p[:, 2], p[:, 1], p[:, 2], p[:, 3], p[:, 0], p[:, 3]], 1
    ).view(-1, 4, 2),
    ROTATED_RECTANGLE: _rotated_rectangle,
    POLYGON: lambda p, turn: p.reshape(-1, 4, 2),
    LINE: lambda p, turn: _line_corners(p),
}


def _polygon4(kind, p, kinds, turn):
    """Vertices [K,4,2] of triangles, rectangles and 4-gons; only the forms of `kinds` are computed.
    turn: `_turn` of p and kinds (rotated rectangles take it)."""
    present = [k for k in _VERTICES if k in kinds]
    vertices = _VERTICES[present[0]](p, turn)
    for code in present[1:]:
        vertices = torch.where((kind == code)[:, None, None], _VERTICES[code](p, turn), vertices)
    return vertices


@functools.lru_cache(maxsize=32)
def _curve_weights(steps: int, device: torch.device):
    """A quadratic Bezier's weights at t = torch.linspace(0, 1, steps + 1), made once per process and
    device: (1-t)^2, 2(1-t)t and t^2 of its points [1,steps+1,3,1], 1-t and t of its tangent's legs
    [1,steps+1,2,1]."""
    t = torch.linspace(0, 1, steps + 1, device=device)[None, :, None]
    return torch.stack([(1 - t) ** 2, 2 * (1 - t) * t, t**2], 2), torch.stack([1 - t, t], 2)


def _stroke_sides(p, steps: int = CURVE_STEPS, kind=None, kinds=(QUADRATIC,)):
    """The sides [K,2,steps+1,2] of strokes p[:,6] wide: the points along the stroke plus, then minus,
    half the width along its normal. Quadratic Beziers, and where `kinds` has polylines (kind [K]
    says which shapes are: `_polyline_sides`) their mitred sides."""
    if POLYLINE not in kinds:
        return _bezier_sides(p, steps)
    polyline = _polyline_sides(p, steps)
    if QUADRATIC not in kinds:
        return polyline
    return torch.where((kind == POLYLINE)[:, None, None, None], polyline, _bezier_sides(p, steps))


def _polyline_sides(p, steps: int):
    """The sides [K,2,steps+1,2] of polylines p (x1 y1 x2 y2 x3 y3 width): each side's three vertices,
    the middle one mitred (offset by the sum of the two segments' unit normals over 1 + their dot
    product, at least 1/4: a miter at most 2.8 half widths long; placed shapes turn by at most 120
    degrees, `_valid`, a miter of at most 2), the last one repeated to steps + 1 points (null edges)."""
    first, second = _unit_normal(p[:, 0:2], p[:, 2:4]), _unit_normal(p[:, 2:4], p[:, 4:6])
    half = p[:, 6:7] / 2
    dot = first[:, 0] * second[:, 0] + first[:, 1] * second[:, 1]
    miter = (first + second) * (half / (1 + dot[:, None]).clamp_min(0.25))
    offsets = torch.stack([first * half, miter, second * half], 1)  # [K,3,2]
    points = p[:, None, 0:6].reshape(-1, 3, 2)
    sides = torch.stack([points + offsets, points - offsets], 1)  # [K,2,3,2]
    return torch.cat([sides, sides[:, :, 2:].expand(-1, 2, steps - 2, 2)], 2)


def _bezier_sides(p, steps: int):
    """The sides [K,2,steps+1,2] of quadratic Beziers stroked p[:,6] wide (`_stroke_sides`)."""
    point_weights, leg_weights = _curve_weights(steps, p.device)
    # the same products and sums as one at a time: w_a a + w_c c + w_b b and s (c - a) + t (b - c)
    terms = point_weights * p[:, None, 0:6].view(-1, 1, 3, 2)
    point = terms[:, :, 0] + terms[:, :, 1] + terms[:, :, 2]
    legs = leg_weights * (p[:, 2:6] - p[:, 0:4]).view(-1, 1, 2, 2)
    tangent = legs[:, :, 0] + legs[:, :, 1]
    # a degenerate tangent (control point on an end point) falls back to the chord's direction
    chord = p[:, None, 4:6] - p[:, None, 0:2]
    tangent = torch.where(tangent.norm(dim=-1, keepdim=True) > 1e-6, tangent, chord.expand_as(tangent))
    normal = tangent.flip(-1) * _constant((-1.0, 1.0), p.device, torch.float32)  # (-ty, tx)
    normal = normal / normal.norm(dim=-1, keepdim=True).clamp_min(1e-6) * (p[:, None, 6:7] / 2)
    # point + normal, point - normal (a - b is a + -b exactly)
    return point[:, None] + normal[:, None] * _constant((1.0, -1.0), p.device, torch.float32).view(2, 1, 1)


def _stroke_outline(p, steps: int = CURVE_STEPS, kind=None, kinds=(QUADRATIC,)):
    """Outline polygon [K, 2*(steps+1), 2] of strokes p[:,6] wide (`_stroke_sides`: Beziers, and
    polylines where `kinds` has them), butt caps: one side along the stroke, the other back."""
    sides = _stroke_sides(p, steps, kind, kinds)
    return torch.cat([sides[:, 0], sides[:, 1].flip(1)], 1)


def _ellipse_form(kind, p, turn):
    """Centre and quadratic form of ellipses: cx, cy, A, B, C [K] with
    A dx^2 + B dx dy + C dy^2 <= 1 inside, and the half height [K]. turn: `_rotation` of p[:, 4]
    (only rotated ellipses take it), or None where no ellipse is rotated."""
    radius = p[:, 2:4].clamp_min(1e-3)
    radius = torch.where((kind == CIRCLE)[:, None], radius[:, :1], radius)  # rx, ry (a circle's rx twice)
    upright = _constant((0.0, 1.0), p.device, torch.float32)  # sin, cos of 0
    if turn is None:
        turn = upright.expand(p.shape[0], 2)
    else:
        turn = torch.where((kind == ROTATED_ELLIPSE)[:, None], turn.flip(1), upright)
    # the same products and sums as written out one by one, two or four at a time:
    # A = cos^2 ix + sin^2 iy, C = sin^2 ix + cos^2 iy, half height^2 = (rx sin)^2 + (ry cos)^2
    inverse = 1 / radius**2  # ix, iy
    products = ((turn**2)[:, :, None] * inverse[:, None, :]).view(-1, 4)  # sin^2 ix, sin^2 iy, cos^2 ix, cos^2 iy
    forms = products + products.flip(1)  # C, A
    b = 2 * turn[:, 1] * turn[:, 0] * (inverse[:, 0] - inverse[:, 1])
    extent = (radius * turn) ** 2
    return p[:, 0], p[:, 1], forms[:, 1], b, forms[:, 0], torch.sqrt(extent[:, 0] + extent[:, 1])


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


# -- scoring terms and paint -------------------------------------------------------------------------


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


# Edge weighting (`edge_weights`): a pixel's Sobel magnitude counts in full from this quantile of the
# image's magnitudes up (the strongest 10% of pixels: the edges), in proportion below it; and from
# EDGE_FLOOR up at least (a step of 5 levels of 255 between two pixels: an image with few edges does not
# weigh its noise as edges).
EDGE_QUANTILE = 0.9
EDGE_FLOOR = 4 * 5 / 255


def edge_weights(target, strength: float) -> torch.Tensor:
    """Per-pixel weights [B,H,W] of the search's squared error that sharpen detail where edges are:
    1 + strength * e, e in 0..1 the Sobel gradient magnitude of each image's luma (Rec. 601 over its
    colour channels; edges replicated), divided by its EDGE_QUANTILE quantile (EDGE_FLOOR at least) and
    clamped to 1. target [B,H,W,C] float32."""
    luma = (target[..., :3] * _constant((0.299, 0.587, 0.114), target.device, torch.float32)).sum(-1)
    padded = torch.nn.functional.pad(luma[:, None], (1, 1, 1, 1), mode="replicate")
    smooth = _constant((1.0, 2.0, 1.0), target.device, torch.float32)
    slope = _constant((-1.0, 0.0, 1.0), target.device, torch.float32)
    kernels = torch.stack([smooth[:, None] * slope[None, :], slope[:, None] * smooth[None, :]])[:, None]
    gradient = torch.nn.functional.conv2d(padded, kernels)  # [B,2,H,W]: d/dx, d/dy
    magnitude = torch.sqrt(gradient[:, 0] ** 2 + gradient[:, 1] ** 2)
    # the quantile of a sample of the pixels (torch.quantile takes at most 2**24 values)
    flat = magnitude.flatten(1)
    sample = flat[:, :: max(1, flat.shape[1] // 2**16)]
    level = torch.quantile(sample, EDGE_QUANTILE, dim=1).clamp_min(EDGE_FLOOR)
    return 1 + strength * (magnitude / level[:, None, None]).clamp(max=1)


def _terms(target, current, alpha: float | None, weight=None, bound: float = 1.0) -> Terms:
    """`Terms` of images target and current [B,H,W,C] (0..1), for a fixed opacity alpha or a searched one
    (None); with weight [B,H,W] (at most `bound`: `edge_weights`) every term times its pixel's weight,
    so that the sums are of the weighted error (and the pixel count the weights' sum)."""
    batch, height, width, channels = target.shape
    d = target - current
    one = torch.ones_like(d[..., :1])
    if alpha is None:
        terms = [d, current, (d * current).sum(-1, keepdim=True), (current * current).sum(-1, keepdim=True), one]
    else:
        u = d + alpha * current
        terms = [u, ((u * u) - (d * d)).sum(-1, keepdim=True), one]
    # the largest power of two that keeps a row's sum of terms within int32
    scale = float(2 ** math.floor(math.log2((2**31 - 1) / ((channels * (width + 1) + 1) * bound))))
    values = torch.cat(terms, -1)
    if weight is not None:
        values = values * weight[..., None]
    fixed = torch.round(values * scale).to(torch.int32)
    prefix = torch.nn.functional.pad(torch.cumsum(fixed, 2, dtype=torch.int32), (0, 0, 1, 0))
    return Terms(prefix.view(batch * height * (width + 1), -1), scale, height, width, alpha, channels)


def _families(kinds) -> list[int]:
    return sorted({_FAMILY[k] for k in kinds})


def _paint(color, channels: int):
    """What a shape of colour [..,3] adds at full opacity, over `channels`: RGB, or premultiplied RGBA (alpha 1)."""
    return color if channels == 3 else torch.cat([color, torch.ones_like(color[..., :1])], -1)


# -- mutation bounds, input and result checks, the search's record ------------------------------------


def _role_tables(height: int, width: int, device):
    """Per kind: lower and upper bounds of its parameters [8,2,8]; per kind and group (kind * 4 +
    group) the mutation sigma of the parameters the group moves, 0 for the others [32,8]."""
    scale = max(height, width) / 256
    margin = 16 * scale
    lo = {_VX: -margin, _VY: -margin, _CX: 0.0, _CY: 0.0, _SIZE: 1.0, _ANGLE: -math.inf, _WIDTH: 1.0}
    hi = {
        _VX: width + margin,
        _VY: height + margin,
        _CX: float(width),
        _CY: float(height),
        _SIZE: float(max(height, width)),
        _ANGLE: math.inf,
        _WIDTH: max(1.0, 16 * scale),
    }
    sigma = {
        _VX: 16 * scale,
        _VY: 16 * scale,
        _CX: 16 * scale,
        _CY: 16 * scale,
        _SIZE: 16 * scale,
        _ANGLE: 32.0,
        _WIDTH: max(0.5, scale),
    }
    device = torch.device(device)
    # per-role values looked up by the role tables, all made on the device (no upload)
    value = lambda table: _constant(  # noqa: E731
        tuple(table.get(r, 0.0) for r in range(len(_ROLES))),
        device,  # noqa: E731
        torch.float32,
    )
    roles = _constant(sum(_ROLES, ()), device)
    bounds = torch.stack([value(lo).index_select(0, roles), value(hi).index_select(0, roles)]).view(2, -1, N_PARAMS)
    member = _constant(
        tuple(
            int(i in members)
            for groups in _GROUPS
            for members in groups + ((),) * (4 - len(groups))
            for i in range(N_PARAMS)
        ),
        device,
        torch.float32,
    ).view(-1, 4, N_PARAMS)
    steps = value(sigma).index_select(0, roles).view(-1, 1, N_PARAMS) * member
    return bounds.transpose(0, 1).contiguous(), steps.view(-1, N_PARAMS)


def _checked_target(target) -> torch.Tensor:
    """The search's target as float32 [B,H,W,C], C 3 or 4, detached (any float dtype converted once on
    its device), or a ValueError that names it."""
    if not isinstance(target, torch.Tensor) or target.dim() != 4 or not target.is_floating_point():
        got = f"{tuple(target.shape)} {target.dtype}" if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"target: expected a float tensor [B,H,W,C], got {got}")
    if target.shape[-1] not in (3, 4) or 0 in target.shape:
        raise ValueError(
            f"target: expected 3 (RGB) or 4 (premultiplied RGBA) channels and no empty dimension, "
            f"got shape {tuple(target.shape)}"
        )
    return target.detach().to(torch.float32)


def _checked_background(background, target) -> torch.Tensor | None:
    """The search's background as float32 [B,C] on the target's device (C and B the target's; any float
    dtype, detached), None for the default, or a ValueError that names it."""
    if background is None:
        return None
    batch, channels = target.shape[0], target.shape[-1]
    if (
        not isinstance(background, torch.Tensor)
        or not background.is_floating_point()
        or tuple(background.shape) != (batch, channels)
    ):
        raise ValueError(
            f"background: expected a float tensor [{batch},{channels}] (the target's images and "
            f"channels), got {_described(background)}"
        )
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
    if (
        not isinstance(kind, torch.Tensor)
        or kind.dim() != 2
        or kind.is_floating_point()
        or kind.is_complex()
        or kind.dtype == torch.bool
    ):
        raise ValueError(f"result.kind: expected an integer tensor [B,N], got {_described(kind)}")
    batch, total = kind.shape
    fields = {"kind": kind.detach().to(torch.int64).contiguous()}
    for name, shape in (
        ("params", [batch, total, N_PARAMS]),
        ("color", [batch, total, 3]),
        ("alpha", [batch, total]),
        ("background", [batch, "3 or 4"]),
    ):
        value = getattr(result, name)
        if (
            not isinstance(value, torch.Tensor)
            or not value.is_floating_point()
            or value.dim() != len(shape)
            or list(value.shape[:-1]) != shape[:-1]
            or value.shape[-1] not in ((3, 4) if name == "background" else (shape[-1],))
        ):
            what = "3 (RGB) or 4 (premultiplied RGBA) channels" if name == "background" else "float tensor"
            raise ValueError(f"result.{name}: expected a {what} {shape}, got {_described(value)}")
        if value.device != kind.device:
            raise ValueError(f"result.{name}: expected on {kind.device} (as result.kind), got {value.device}")
        fields[name] = value.detach().to(torch.float32).contiguous()
    if batch * total > INT32_MAX:
        raise ValueError(f"result: expected at most {INT32_MAX} shapes in all, got {batch} x {total}")
    return Approximation(**fields, count=result.count, error=result.error, height=result.height, width=result.width)


class _Record:
    """What both search paths (search.py's torch path and search_cuda.Search) start from and fill in: the
    working target and canvas float [B,H,W,C] (the quantised background, or `canvas`: the images drawn
    so far by an earlier pass), the generator, whether the opacity is searched and its start, and the
    shapes so far as `Approximation` holds them (kind, params, color, alpha [B,N..]; error [B,N+1],
    error[:, 0] the starting canvas's)."""

    def __init__(self, target, shapes: int, alpha: int, background, generator, canvas=None, edge_weight=0.0):
        batch, height, width, _ = target.shape
        device = target.device
        self.target = target.float().clamp(0, 1).contiguous()
        self.generator = generator if generator is not None else torch.Generator(device=device).manual_seed(0)
        self.background = _quantised(
            self.target.mean((1, 2)) if background is None else background.to(device, torch.float32)
        )
        if canvas is None:
            self.current = self.background[:, None, None, :].expand_as(self.target).contiguous()
        else:
            self.current = canvas.to(device, torch.float32, copy=True).contiguous()  # the kernels paint it
        self.searched = alpha == 0
        self.start_alpha = (128 if self.searched else alpha) / 255
        self.kind = torch.zeros(batch, shapes, dtype=torch.int64, device=device)
        self.params = torch.zeros(batch, shapes, N_PARAMS, device=device)
        self.color = torch.zeros(batch, shapes, 3, device=device)
        self.alpha = torch.zeros(batch, shapes, device=device)
        self.error = torch.zeros(batch, shapes + 1, device=device)
        # the arguments `_terms` takes past the images: none, or edge weights [B,H,W] and their bound
        self.weighting = ()
        squares = (self.target - self.current) ** 2
        if edge_weight > 0:
            self.weighting = (edge_weights(self.target, edge_weight), 1.0 + edge_weight)
            squares = squares * self.weighting[0][..., None]
        self.error[:, 0] = squares.sum((1, 2, 3))

    def stopped_after(self, index: int) -> None:
        """No image improves after shape `index`: the later errors stay its."""
        self.error[:, index + 2 :] = self.error[:, index + 1 : index + 2]

    def result(self) -> Approximation:
        height, width = self.target.shape[1:3]
        count = (self.alpha > 0).sum(1)
        return Approximation(
            self.kind, self.params, self.color, self.alpha, count, self.error, self.background, height, width
        )


def _quantised(background):
    """Background [B,C] with its straight colour and alpha in 8 bits, as the SVG states them."""
    if background.shape[1] == 3:
        return (background * 255).round() / 255
    alpha = (background[:, 3:] * 255).round() / 255
    straight = (background[:, :3] / background[:, 3:].clamp_min(1e-6) * 255).round().clamp(0, 255) / 255
    return torch.cat([straight * alpha, alpha], 1)


def render_curve_steps(height: int, width: int) -> int:
    """Segments on each side of a stroked Bezier's outline when rendering at height x width: more for
    larger canvases, so that the chords stay within a fraction of a pixel of the curve."""
    return max(16, 8 * int(math.sqrt(max(height, width) / 64)))
