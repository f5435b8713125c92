"""Primitive image approximation: shapes added one at a time, each found by a batched search.

The method is fogleman/primitive's: for each new shape, many random candidates, hill climbing from
the best of them, and the shape's colour solved in closed form for its opacity. Here every step is
batched: thousands of candidates, of every image of a batch, are scored in one pass, and the best
`PARENTS` of each image are hill-climbed side by side, `mutations` proposals each per round.

Scoring cost follows the rows a candidate spans, not its area. A shape is described by where its
edges cross each pixel row (sorted crossings with nonzero-winding transitions: polygons, the
outline of a stroked Bezier, or the two roots of an ellipse's equation). The sums of the per-pixel
terms that the colour and the error change need are read from row prefix sums at those crossings,
so a candidate costs a few gathers per row it spans.

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
import math
from dataclasses import dataclass

import torch

from .batching import expand_counts
from .device import chunk_size

KINDS = ("triangle", "rectangle", "rotated_rectangle", "ellipse", "rotated_ellipse", "circle", "quadratic",
         "polygon")
TRIANGLE, RECTANGLE, ROTATED_RECTANGLE, ELLIPSE, ROTATED_ELLIPSE, CIRCLE, QUADRATIC, POLYGON = range(8)
N_PARAMS = 8
PARENTS = 8      # hill climbs per image and shape, each from one of the best random candidates
MAX_ROUNDS = 1000
SUBROWS = 8      # anti-aliasing samples per pixel along y in `render`
CURVE_STEPS = 8   # segments of a stroked Bezier's outline on each side while searching (render: more)

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


def kind_codes(shape_type: str) -> tuple[int, ...]:
    """The kind codes a search draws from: one kind, or all of them for "combo"."""
    if shape_type == "combo":
        return tuple(range(len(KINDS)))
    if shape_type not in KINDS:
        raise ValueError(f"shape_type: expected one of {', '.join(KINDS + ('combo',))}, got {shape_type!r}")
    return (KINDS.index(shape_type),)


@dataclass
class Approximation:
    """N shapes per image of a batch of B, in drawing order; images that stopped early (no shape
    improved them) are padded with shapes of zero opacity.

    kind   int64   [B,N]     index into KINDS
    params float32 [B,N,8]   working-size pixel coordinates (see the module docstring)
    color  float32 [B,N,3]   RGB in 0..1, quantised to 8 bits
    alpha  float32 [B,N]     opacity in 0..1 (a multiple of 1/255; 0 for padding)
    count  int64   [B]       shapes actually placed
    error  float64 [B,N+1]   sum of squared RGB error (0..1 units) over the working image, after
                             0..N shapes (point-sampled coverage, as searched)
    background float32 [B,3]
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


# -- geometry: where shapes cross rows ---------------------------------------------------------------

def _rotation(angle_degrees):
    radians = angle_degrees * (math.pi / 180)
    return torch.cos(radians), torch.sin(radians)


def _rotated_rectangle(p):
    cos, sin = _rotation(p[:, 4])
    corner_x = torch.tensor([-0.5, 0.5, 0.5, -0.5], device=p.device) * p[:, 2:3]
    corner_y = torch.tensor([-0.5, -0.5, 0.5, 0.5], device=p.device) * p[:, 3:4]
    return torch.stack([p[:, 0:1] + corner_x * cos[:, None] - corner_y * sin[:, None],
                        p[:, 1:2] + corner_x * sin[:, None] + corner_y * cos[:, None]], 2)


_VERTICES = {
    TRIANGLE: lambda p: p[:, [0, 1, 2, 3, 4, 5, 4, 5]].view(-1, 4, 2),  # last vertex repeated: a null edge
    RECTANGLE: lambda p: p[:, [0, 1, 2, 1, 2, 3, 0, 3]].view(-1, 4, 2),
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


def _rows(y_min, y_max, rows: int, sub: int):
    """Sample rows of each shape: those whose sample y (pixel row + (j + 0.5) / sub) lies in
    [y_min, y_max] of its shape. Returns shape index [Q], sample index [Q] (0 .. rows*sub-1) and
    sample y [Q]; rows of one shape are consecutive."""
    first = torch.ceil(y_min * sub - 0.5).clamp(0, rows * sub).long()
    last = torch.floor(y_max * sub - 0.5).clamp(-1, rows * sub - 1).long()
    counts = (last - first + 1).clamp_min(0)
    shape, rank = expand_counts(counts)
    sample = first[shape] + rank
    return shape, sample, (sample.to(y_min.dtype) + 0.5) / sub


def _edge_crossings(vertices, y):
    """Where rows y [Q] cross the edges of closed polygons vertices [Q,V,2] (half-open in y, so a
    row through a vertex counts it once): crosses bool [Q,V], x [Q,V], y1 > y0 [Q,V]."""
    x0, y0 = vertices[..., 0], vertices[..., 1]
    x1, y1 = x0.roll(-1, 1), y0.roll(-1, 1)
    y = y[:, None]
    crosses = (y0 <= y) != (y1 <= y)
    t = (y - y0) / torch.where(crosses, y1 - y0, torch.ones_like(y0))
    return crosses, x0 + t * (x1 - x0), y1 > y0


def _convex_crossings(vertices, y):
    """Rows y [Q] across convex polygons [Q,V,2] enter at the leftmost crossing and leave at the
    rightmost: x [Q,2], s [Q,2]."""
    crosses, x, _ = _edge_crossings(vertices, y)
    left = torch.where(crosses, x, float("inf")).amin(1)
    right = torch.where(crosses, x, -float("inf")).amax(1)
    hit = crosses.any(1).to(torch.int8)[:, None]
    return torch.stack([left, right], 1), torch.tensor([1, -1], dtype=torch.int8, device=y.device) * hit


def _polygon_crossings(vertices, y):
    """Crossings of rows y [Q] with closed polygons vertices [Q,V,2]: x [Q,V] sorted and the
    change of inside-ness (nonzero winding) at each, s [Q,V] in {-1, 0, 1}."""
    crosses, x, downward = _edge_crossings(vertices, y)
    direction = torch.where(crosses, torch.where(downward, 1, -1), 0)
    x, order = torch.sort(torch.where(crosses, x, float("inf")), 1)
    winding = torch.cumsum(direction.gather(1, order), 1)
    inside = (winding != 0).to(torch.int8)
    before = torch.cat([torch.zeros_like(inside[:, :1]), inside[:, :-1]], 1)
    return x, inside - before


def _ellipse_crossings(form, y):
    """Crossings of rows y [Q] with ellipses (form: cx, cy, A, B, C per row [Q]): x [Q,2], s [Q,2]."""
    cx, cy, a, b, c = form
    dy = y - cy
    discriminant = (b * dy) ** 2 - 4 * a * (c * dy * dy - 1)
    root = torch.sqrt(discriminant.clamp_min(0))
    x = torch.stack([cx + (-b * dy - root) / (2 * a), cx + (-b * dy + root) / (2 * a)], 1)
    hit = (discriminant > 0).to(torch.int8)[:, None]
    return x, torch.tensor([1, -1], dtype=torch.int8, device=y.device) * hit


def _family_crossings(family: int, kind, params, rows: int, sub: int, kinds, curve_steps: int):
    """Sample rows of shapes of one family and their crossings: shape index [Q], sample [Q], x [Q,C], s [Q,C]."""
    if family == _ELLIPTIC:
        cx, cy, a, b, c, half = _ellipse_form(kind, params)
        shape, sample, y = _rows(cy - half, cy + half, rows, sub)
        x, s = _ellipse_crossings((cx[shape], cy[shape], a[shape], b[shape], c[shape]), y)
        return shape, sample, x, s
    vertices = _stroke_outline(params, curve_steps) if family == _STROKE else _polygon4(kind, params, kinds)
    shape, sample, y = _rows(vertices[..., 1].amin(1), vertices[..., 1].amax(1), rows, sub)
    x, s = (_convex_crossings if family == _CONVEX else _polygon_crossings)(vertices[shape], y)
    return shape, sample, x, s


def _crossings(kind, params, rows: int, sub: int, kinds, curve_steps: int = CURVE_STEPS):
    """Per family of shapes among `kinds` (the kind codes that `kind` may hold), yield the family's
    members (a slice or indices), and for each sample row crossed: the shape's index among the
    members [Q] and among all [Q], the sample index [Q], crossings x [Q,C] and transitions s [Q,C]."""
    families = sorted({_FAMILY[k] for k in kinds})
    if len(families) == 1:  # no split needed: the common case
        shape, sample, x, s = _family_crossings(families[0], kind, params, rows, sub, kinds, curve_steps)
        yield slice(None), shape, shape, sample, x, s
        return
    family = torch.tensor(_FAMILY, device=kind.device)[kind]
    for code in families:  # at most four
        members = (family == code).nonzero().squeeze(1)
        shape, sample, x, s = _family_crossings(code, kind[members], params[members], rows, sub, kinds, curve_steps)
        yield members, shape, members[shape], sample, x, s


# -- scoring -----------------------------------------------------------------------------------------

def _prefix_table(target, current):
    """Row prefix sums [B,H,W+1,8] of the per-pixel terms: d = target - current (3), current (3),
    d.current, |current|^2. Entry [b,y,j] sums pixels 0..j-1 of row y."""
    d = target - current
    terms = torch.cat([d, current, (d * current).sum(-1, keepdim=True), (current * current).sum(-1, keepdim=True)],
                      -1)
    return torch.nn.functional.pad(torch.cumsum(terms, 2), (0, 0, 1, 0))


def _pixel_index(x, width: int):
    """Pixels of a row whose centre lies left of x: clamp(ceil(x - 0.5), 0, width)."""
    return torch.ceil(x.clamp(-1, width + 1) - 0.5).long().clamp(0, width)


def _coverage_sums(prefix, image, kind, params, kinds):
    """Sums over the pixels each shape covers (centre sampled) of the 8 per-pixel terms of
    `_prefix_table`, and the pixel count: [K,9] float64."""
    batch, height, width_1, n_terms = prefix.shape
    width = width_1 - 1
    flat = prefix.view(-1, n_terms)
    sums = torch.zeros(kind.shape[0], n_terms + 1, dtype=torch.float64, device=params.device)
    for members, shape, shape_all, row, x, s in _crossings(kind, params, height, 1, kinds):
        column = _pixel_index(x, width)
        at = (image[shape_all] * height + row)[:, None] * width_1 + column
        # a span [xa, xb) sums to prefix(xb) - prefix(xa): the negated transitions weigh the prefixes
        weight = -s.to(flat.dtype)
        per_row = torch.cat([torch.einsum("qc,qct->qt", weight, flat[at]), (weight * column).sum(1, keepdim=True)],
                            1).double()
        # rows of a shape are consecutive: per-shape totals are differences of a running sum (no
        # atomics, so the same on every run and device)
        running = torch.nn.functional.pad(torch.cumsum(per_row, 0), (0, 0, 1, 0))
        counts = torch.bincount(shape, minlength=kind[members].shape[0])
        ends = torch.cumsum(counts, 0)
        sums[members] = running[ends] - running[ends - counts]
    return sums


def _error_change(sums, color, alpha):
    """Change of the squared error over covered pixels when drawing `color` [K,3] at `alpha` [K]."""
    sum_d, sum_c, sum_dc, sum_cc, count = sums[:, 0:3], sums[:, 3:6], sums[:, 6], sums[:, 7], sums[:, 8]
    color, a = color.double(), alpha.double()
    return (-2 * a * ((color * sum_d).sum(1) - sum_dc)
            + a * a * (count * (color * color).sum(1) - 2 * (color * sum_c).sum(1) + sum_cc))


def optimal_colors(sums, alpha):
    """Closed-form colour [K,3] minimising the squared error over the covered pixels at opacity
    alpha [K]: the mean of (target - current * (1 - a)) / a, clamped to 0..1 (the error is a separable
    convex quadratic per channel, so clamping the mean gives the constrained optimum)."""
    count = sums[:, 8:9].clamp_min(1)
    a = alpha.double()[:, None]
    return (sums[:, 0:3] / (a * count) + sums[:, 3:6] / count).clamp(0, 1)


def score(prefix, image, kind, params, alpha, kinds):
    """Error change [K] float64 (inf for invalid shapes) and optimal colour [K,3] of K candidates.

    prefix: `_prefix_table` of the images [B,H,W+1,8]; image int64 [K] picks each candidate's image;
    kind int64 [K] (codes among `kinds`); params float [K,8]; alpha float [K] in (0, 1].
    """
    sums = _coverage_sums(prefix, image, kind, params, kinds)
    color = optimal_colors(sums, alpha)
    change = _error_change(sums, color, alpha)
    return torch.where(_valid(kind, params, kinds), change, float("inf")), color


def _valid(kind, p, kinds):
    """primitive's rule for Beziers: the chord is longer than either control leg (no hairpins)."""
    if QUADRATIC not in kinds:
        return torch.ones_like(kind, dtype=torch.bool)
    leg = lambda i, j: ((p[:, i:i + 2] - p[:, j:j + 2]) ** 2).sum(1)  # noqa: E731
    chord = leg(0, 4)
    return (kind != QUADRATIC) | ((chord > leg(0, 2)) & (chord > leg(2, 4)))


# -- random shapes and mutations ---------------------------------------------------------------------

def _role_tables(height: int, width: int, device):
    """Per kind and parameter: lower and upper bounds [8,8], mutation sigma [8,8]; per kind and
    group the parameters it moves [8,4,8], and the number of groups per kind [8]."""
    scale = max(height, width) / 256
    margin = 16 * scale
    lo = {_VX: -margin, _VY: -margin, _CX: 0.0, _CY: 0.0, _SIZE: 1.0, _ANGLE: -math.inf, _WIDTH: 1.0}
    hi = {_VX: width + margin, _VY: height + margin, _CX: float(width), _CY: float(height),
          _SIZE: float(max(height, width)), _ANGLE: math.inf, _WIDTH: max(1.0, 16 * scale)}
    sigma = {_VX: 16 * scale, _VY: 16 * scale, _CX: 16 * scale, _CY: 16 * scale, _SIZE: 16 * scale, _ANGLE: 32.0,
             _WIDTH: max(0.5, scale)}
    table = lambda values: torch.tensor([[values.get(r, 0.0) for r in row] for row in _ROLES],  # noqa: E731
                                        dtype=torch.float32, device=device)
    group_mask = torch.zeros(len(KINDS), 4, N_PARAMS, device=device)
    for k, groups in enumerate(_GROUPS):
        for g, members in enumerate(groups):
            group_mask[k, g, list(members)] = 1
    n_groups = torch.tensor([len(g) for g in _GROUPS], device=device)
    return table(lo), table(hi), table(sigma), group_mask, n_groups


def random_shapes(kinds: tuple[int, ...], count: int, height: int, width: int, generator, device):
    """`count` random shapes drawn as primitive draws them (small, anywhere): kind [count], params [count,8]."""
    scale = max(height, width) / 256
    choice = torch.randint(len(kinds), (count,), generator=generator, device=device)
    kind = torch.tensor(kinds, device=device)[choice]
    u = torch.rand(count, N_PARAMS, generator=generator, device=device)
    anchor_x, anchor_y = u[:, 0] * width, u[:, 1] * height
    spread = lambda i, reach: (u[:, i] * 2 - 1) * reach * scale  # noqa: E731
    size = lambda i: 1 + u[:, i] * 31 * scale  # noqa: E731
    zero = torch.zeros_like(anchor_x)
    chain_x2, chain_y2 = anchor_x + spread(2, 20), anchor_y + spread(3, 20)
    forms = {
        TRIANGLE: [anchor_x, anchor_y, anchor_x + spread(2, 15), anchor_y + spread(3, 15), anchor_x + spread(4, 15),
                   anchor_y + spread(5, 15), zero, zero],
        RECTANGLE: [anchor_x, anchor_y, (anchor_x + size(2)).clamp(max=width), (anchor_y + size(3)).clamp(max=height),
                    zero, zero, zero, zero],
        ROTATED_RECTANGLE: [anchor_x, anchor_y, size(2), size(3), u[:, 4] * 360, zero, zero, zero],
        ELLIPSE: [anchor_x, anchor_y, size(2), size(3), zero, zero, zero, zero],
        ROTATED_ELLIPSE: [anchor_x, anchor_y, size(2), size(3), u[:, 4] * 360, zero, zero, zero],
        CIRCLE: [anchor_x, anchor_y, size(2), zero, zero, zero, zero, zero],
        QUADRATIC: [anchor_x, anchor_y, chain_x2, chain_y2, chain_x2 + spread(4, 20), chain_y2 + spread(5, 20),
                    (1 + u[:, 6] * 2) * scale, zero],
        POLYGON: [anchor_x, anchor_y, anchor_x + spread(2, 20), anchor_y + spread(3, 20), anchor_x + spread(4, 20),
                  anchor_y + spread(5, 20), anchor_x + spread(6, 20), anchor_y + spread(7, 20)],
    }
    params = torch.zeros(count, N_PARAMS, device=device)
    for code in kinds:
        rows = kind == code
        params[rows] = torch.stack(forms[code], 1)[rows]
    return kind, params


def mutate(kind, params, alpha, search_alpha: bool, tables, generator):
    """One random move per shape: a Gaussian step of one parameter group (a vertex, the sizes, the
    angle), clamped to the frame's margins; with search_alpha, the opacity moves by -10..10 / 255."""
    lo, hi, sigma, group_mask, n_groups = tables
    count, device = kind.shape[0], kind.device
    group = (torch.rand(count, generator=generator, device=device) * n_groups[kind]).long()
    step = torch.randn(count, N_PARAMS, generator=generator, device=device) * sigma[kind] * group_mask[kind, group]
    moved = torch.minimum(torch.maximum(params + step, lo[kind]), hi[kind])
    if search_alpha:
        change = torch.randint(-10, 11, (count,), generator=generator, device=device) / 255
        alpha = (alpha + change).clamp(1 / 255, 1)
    return moved, alpha


# -- the search --------------------------------------------------------------------------------------

def _commit_mask(kind, params, batch: int, height: int, width: int, kinds):
    """Binary coverage [B,H,W] (centre sampled) of one shape per image (kind [B], params [B,8])."""
    edges = torch.zeros(batch * height * (width + 1), dtype=torch.int32, device=params.device)
    for _, _, shape, row, x, s in _crossings(kind, params, height, 1, kinds):
        at = (shape * height + row)[:, None] * (width + 1) + _pixel_index(x, width)
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
                generator: torch.Generator | None = None, on_shape=None) -> Approximation:
    """Approximate each image of target [B,H,W,3] (0..1) with `shapes` shapes of `kinds`.

    alpha: 1..255 fixed opacity, or 0 to search it per shape (starting at 128).
    candidates: random shapes per image and shape; the best PARENTS are hill-climbed, `mutations`
    proposals per round, until a round brings no improvement. background [B,3] (default: the mean
    colour of each image). generator: a torch.Generator on target's device (seeded: deterministic).
    on_shape(done, total): called after each shape (progress, interrupts).
    An image stops early when no candidate lowers its error any more.
    """
    with _one_cpu_thread(target.device):
        return _approximate(target, shapes, kinds, alpha, candidates, mutations, background, generator, on_shape)


def _approximate(target, shapes, kinds, alpha, candidates, mutations, background, generator, on_shape):
    batch, height, width, _ = target.shape
    device = target.device
    target = target[..., :3].float()
    generator = generator if generator is not None else torch.Generator(device=device).manual_seed(0)
    background = target.mean((1, 2)) if background is None else background.to(device, torch.float32)
    background = (background * 255).round() / 255  # 8 bits, as the SVG states it
    current = background[:, None, None, :].expand_as(target).clone()
    tables = _role_tables(height, width, device)
    parents = min(PARENTS, candidates)
    search_alpha = alpha == 0
    start_alpha = (128 if search_alpha else alpha) / 255

    kinds_out = torch.zeros(batch, shapes, dtype=torch.int64, device=device)
    params_out = torch.zeros(batch, shapes, N_PARAMS, device=device)
    color_out = torch.zeros(batch, shapes, 3, device=device)
    alpha_out = torch.zeros(batch, shapes, device=device)
    error = torch.zeros(batch, shapes + 1, dtype=torch.float64, device=device)
    error[:, 0] = ((target - current) ** 2).sum((1, 2, 3)).double()
    active = torch.ones(batch, dtype=torch.bool, device=device)
    image_of = lambda per_image: torch.arange(batch, device=device).repeat_interleave(per_image)  # noqa: E731

    for index in range(shapes):
        prefix = _prefix_table(target, current)
        # random candidates of every image at once; keep the best `parents` of each
        kind, params = random_shapes(kinds, batch * candidates, height, width, generator, device)
        shape_alpha = torch.full((batch * candidates,), start_alpha, device=device)
        change, _ = score(prefix, image_of(candidates), kind, params, shape_alpha, kinds)
        best = torch.topk(-change.view(batch, candidates), parents, dim=1).indices
        chosen = (best + torch.arange(batch, device=device)[:, None] * candidates).reshape(-1)
        kind, params, shape_alpha, change = kind[chosen], params[chosen], shape_alpha[chosen], change[chosen]
        kind, params, shape_alpha, change = _hill_climb(prefix, image_of(parents), kind, params, shape_alpha, change,
                                                        search_alpha, mutations, tables, generator, kinds)
        # the best climb of each image becomes its next shape, coloured in 8 bits
        winner = change.view(batch, parents).argmin(1) + torch.arange(batch, device=device) * parents
        kind, params, shape_alpha = kind[winner], params[winner], (shape_alpha[winner] * 255).round() / 255
        sums = _coverage_sums(prefix, torch.arange(batch, device=device), kind, params, kinds)
        color = (optimal_colors(sums, shape_alpha) * 255).round().float() / 255
        # float noise must not pass for an improvement (a flat image gets no shapes)
        improves = active & (_error_change(sums, color, shape_alpha) < -1e-6) & _valid(kind, params, kinds)
        mask = _commit_mask(kind, params, batch, height, width, kinds) & improves[:, None, None]
        a = shape_alpha[:, None, None, None]
        current = torch.where(mask[..., None], current * (1 - a) + color[:, None, None, :] * a, current)
        kinds_out[:, index], params_out[:, index], color_out[:, index] = kind, params, color
        alpha_out[:, index] = torch.where(improves, shape_alpha, torch.zeros_like(shape_alpha))
        error[:, index + 1] = ((target - current) ** 2).sum((1, 2, 3)).double()
        active = improves
        if on_shape is not None:
            on_shape(index + 1, shapes)
        if not bool(active.any()):
            error[:, index + 2:] = error[:, index + 1:index + 2]
            break
    count = (alpha_out > 0).sum(1)
    return Approximation(kinds_out, params_out, color_out, alpha_out, count, error, background, height, width)


def _hill_climb(prefix, image, kind, params, alpha, change, search_alpha, mutations, tables, generator, kinds):
    """Hill-climb all parents at once. Each round, every parent still climbing makes `mutations`
    mutations and takes the best one if it lowers the error; a parent stops after a round in
    which none did. That is primitive's rule (stop when `mutations` moves from the same state
    fail in a row), with the moves tried side by side and the best success kept, not the first."""
    climbing = torch.arange(kind.shape[0], device=kind.device)
    for _ in range(MAX_ROUNDS):
        parent = climbing.repeat_interleave(mutations)
        moved, moved_alpha = mutate(kind[parent], params[parent], alpha[parent], search_alpha, tables, generator)
        moved_change, _ = score(prefix, image[parent], kind[parent], moved, moved_alpha, kinds)
        best_change, best = moved_change.view(-1, mutations).min(1)
        better = best_change < change[climbing]
        pick = (torch.arange(climbing.numel(), device=kind.device) * mutations + best)[better]
        climbing = climbing[better]
        params[climbing], alpha[climbing], change[climbing] = moved[pick], moved_alpha[pick], best_change[better]
        if climbing.numel() == 0:
            break
    return kind, params, alpha, change


# -- anti-aliased rendering --------------------------------------------------------------------------

def scale_params(kind, params, factor: float):
    """Shape parameters [..,8] in coordinates `factor` times larger (angles unchanged)."""
    keep_angle = ((kind == ROTATED_RECTANGLE) | (kind == ROTATED_ELLIPSE))[..., None] & \
        (torch.arange(N_PARAMS, device=params.device) == 4)
    return torch.where(keep_angle, params, params * factor)


def _coverage(kind, params, height: int, width: int, sub: int = SUBROWS):
    """Anti-aliased coverage [K,H,W] of K shapes: per sample row, each crossing x adds its
    transition s as a ramp over the pixel it falls in (exact box-filter coverage along x);
    SUBROWS sample rows per pixel row are averaged."""
    count = kind.shape[0]
    edges = torch.zeros(count * height * (width + 2), device=params.device)
    steps = max(16, 8 * int(math.sqrt(max(height, width) / 64)))
    kinds = tuple(torch.unique(kind).tolist())
    for _, _, shape, sample, x, s in _crossings(kind, params, height, sub, kinds, steps):
        x = x.clamp(-1, width + 1)
        column = x.floor()
        fraction = x - column
        base = ((shape * height + sample // sub) * (width + 2))[:, None]
        left = base + (column.long() + 1).clamp(0, width + 1)
        right = base + (column.long() + 2).clamp(0, width + 1)
        weight = s.float() / sub
        edges.index_put_((left.reshape(-1),), (weight * (1 - fraction)).reshape(-1), accumulate=True)
        edges.index_put_((right.reshape(-1),), (weight * fraction).reshape(-1), accumulate=True)
    # pixel j gets the ramps of crossings in pixels < j fully and of pixel j by the covered part
    return torch.cumsum(edges.view(count, height, width + 2), 2)[..., 1:width + 1].clamp(0, 1)


def render(result: Approximation, height: int, width: int, scale: float, frame_every: int = 0, on_chunk=None):
    """Draw the shapes anti-aliased on a height x width canvas, coordinates times `scale`.

    Returns image float [B,H,W,3] and, with frame_every > 0, the build-up frames float [B,F,H,W,3]
    after every `frame_every` shapes (F = ceil(N / frame_every); the last frame is the image).
    Shapes are composited source-over in order, a chunk of them at a time: the chunk's layers are
    combined with a cumulative product of their transmittances.
    """
    batch, total = result.kind.shape
    device = result.params.device
    image = result.background[:, None, None, :].expand(batch, height, width, 3).clone()
    frames = []
    params = scale_params(result.kind, result.params, scale)
    per_chunk = chunk_size(total, batch * height * width * 4 * 8, device, limit=64)
    start = 0
    while start < total:
        stop = min(total, start + per_chunk)
        if frame_every:
            stop = min(stop, (start // frame_every + 1) * frame_every)
        chunk = slice(start, stop)
        depth = stop - start
        coverage = _coverage(result.kind[:, chunk].reshape(-1), params[:, chunk].reshape(-1, N_PARAMS), height, width)
        a = coverage.view(batch, depth, height, width) * result.alpha[:, chunk, None, None]
        clear = torch.cumprod((1 - a).flip(1), 1).flip(1)  # transmittance of each layer and those above
        above = torch.cat([clear[:, 1:], torch.ones_like(clear[:, :1])], 1)
        image = image * clear[:, 0, ..., None] + torch.einsum("bkhw,bkc->bhwc", a * above, result.color[:, chunk])
        if frame_every and (stop % frame_every == 0 or stop == total):
            frames.append(image.clone())
        if on_chunk is not None:
            on_chunk(stop, total)
        start = stop
    return image.clamp(0, 1), (torch.stack(frames, 1).clamp(0, 1) if frames else None)


def svg(result: Approximation, index: int, height: int, width: int, scale: float) -> str:
    """SVG text of image `index`: viewBox in output pixels, a background rect, one element per
    placed shape with its fill (stroke for Beziers) and opacity."""
    hex_color = lambda rgb: "#%02x%02x%02x" % tuple(int(round(v * 255)) for v in rgb)  # noqa: E731
    number = lambda v: f"{v:.3f}".rstrip("0").rstrip(".")  # noqa: E731
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="{hex_color(result.background[index].tolist())}"/>']
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
