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
ROCm, Apple MPS, CUDA without CuPy), with numba's coverage sums on the CPU (search_cpu.py). On NVIDIA
GPUs with CuPy the search is three CUDA kernels per shape (search_cuda.py), over the same prefix sums,
shape geometry and constants (shapes.py).

Images are RGB, or premultiplied RGBA to fit transparency (fogleman/primitive's error over four
channels): a shape paints its colour and an alpha channel of 1, at its opacity, source-over.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import NamedTuple

import torch

from ..core.device import cupy_usable, numba_usable
from ..inputs.text import short
from .render import render, scale_params
from .shapes import (
    _CONVEX,
    _ELLIPTIC,
    _FAMILY,
    _GROUPS,
    _POLY4,
    _STROKE,
    CIRCLE,
    CURVE_STEPS,
    ELLIPSE,
    LINE,
    MAX_ROUNDS,
    N_PARAMS,
    PARENTS,
    POLYGON,
    POLYLINE,
    QUADRATIC,
    RANDOM_CHAIN,
    RANDOM_SIZE,
    RANDOM_STROKE,
    RANDOM_TRIANGLE,
    RECTANGLE,
    ROTATED_ELLIPSE,
    ROTATED_RECTANGLE,
    STROKES,
    TRIANGLE,
    Approximation,
    Terms,
    _checked_background,
    _checked_target,
    _constant,
    _ellipse_form,
    _families,
    _family_of,
    _line_corners,
    _paint,
    _polygon4,
    _Record,
    _role_tables,
    _rotated_rectangle,
    _stroke_outline,
    _stroke_sides,
    _terms,
    _turn,
)

# Climbing rounds of the first shape after which it reads whether a climb goes on (`_hill_climb`): it
# has no shape before it to size its rounds by (_Schedule.FIRST_ROUNDS), and its climbs mostly end
# within a few rounds (the combo budget scene: 4 of 32).
FIRST_CHECK = 8
# Row slots scored at most between two interrupt checks (`_score_in_parts`): at 2048 px, measured on one
# core of a 2-core CPU shared with other jobs, up to ~0.2 s with numba's loops and ~0.6 s on the torch path.
PART_ROWS = 2**19


def _pixel_index(x, width: int):
    """Pixels of a row whose centre lies left of x: clamp(ceil(x - 0.5), 0, width)."""
    return x.clamp(-1, width + 1).sub_(0.5).ceil_().clamp_(0, width).long()


def _edges(vertices):
    """Edges of closed polygons vertices [K,V,2]: y0, y1, x0 and dx/dy [K,V,4] (0 for level edges)."""
    following = vertices.roll(-1, 1)
    step = following - vertices
    dx, dy = step[..., 0], step[..., 1]
    return torch.stack([vertices[..., 1], following[..., 1], vertices[..., 0], dx / dy.masked_fill(dy == 0, 1)], -1)


def _shape_rows(family: int, kind, params, kinds, height: int, live=None):
    """Geometry of K shapes as `family` describes them (polygon edges [K,V,4] as `_edges`, or the
    ellipse form [K,5]: cx, cy, A, B, C) and the pixel rows whose centres they span: first [K] and
    count [K] (0 for shapes of other families, and where live [K] is False)."""
    if family == _ELLIPTIC:
        cx, cy, a, b, c, half = _ellipse_form(kind, params, _turn(params, kinds))
        geometry = torch.stack([cx, cy, a, b, c], 1)
        y_min, y_max = cy - half, cy + half
    else:
        if family == _STROKE:
            vertices = _stroke_outline(params, CURVE_STEPS, kind, kinds)
        elif family == _CONVEX and not {RECTANGLE, ROTATED_RECTANGLE, LINE} & set(kinds):
            vertices = params[:, :6].reshape(-1, 3, 2)  # triangles alone: no null fourth edge
        else:
            vertices = _polygon4(kind, params, kinds, _turn(params, kinds))
        geometry = _edges(vertices)
        y_min, y_max = vertices[..., 1].amin(1), vertices[..., 1].amax(1)
    first = torch.ceil(y_min - 0.5).clamp(0, height).long()
    last = torch.floor(y_max - 0.5).clamp(-1, height - 1).long()
    count = (last - first + 1).clamp_min(0)
    if len(_families(kinds)) > 1:
        count = count * (_family_of(kind) == family)
    return geometry, first, count if live is None else count * live


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
    if family == _ELLIPTIC:  # a miss gives an empty span
        column = _pixel_index(_ellipse_roots(geometry.index_select(0, owner), row.float() + 0.5), width)
        return column * used[:, None], None
    edges = geometry.index_select(0, owner)
    y = torch.where(used, row + 0.5, float("nan"))[:, None]  # an unused slot's row crosses nothing
    if family != _CONVEX:
        return _winding_columns(edges, y, width)
    y0, _, x0, slope = edges.unbind(-1)
    below = edges[..., :2] <= y[..., None]  # each end of each edge
    misses = below[..., 0] == below[..., 1]
    x = (y - y0).mul_(slope).add_(x0)  # (in place where the temporaries allow: measured 25% faster)
    left = torch.where(misses, float("inf"), x).amin(1)
    span = torch.stack([left, x.masked_fill_(misses, -float("inf")).amax(1)], 1)
    column = _pixel_index(span, width)
    return torch.maximum(column, column[:, :1]), None  # a miss: right = left


def _winding_columns(edges, y, width: int | None):
    """Where rows y [C,1] cross polygon edges [C,V,4] (y0, y1, x0, slope: `_edges`; half-open in y, so
    a row through a vertex counts it once; NaN rows and edges cross nothing): pixel columns [C,V]
    sorted (`_pixel_index`; width None: the crossings x themselves) and the change of inside-ness at
    each, s [C,V] int32 (nonzero winding)."""
    y0, _, x0, slope = edges.unbind(-1)
    below = (edges[..., :2] <= y[..., None]).to(torch.int32)  # each end of each edge
    direction = below[..., 0] - below[..., 1]  # +1: the edge crosses the row going down
    x = (y - y0).mul_(slope).add_(x0).masked_fill_(direction == 0, float("inf"))
    x, order = torch.sort(x, 1)
    inside = (torch.cumsum(direction.gather(1, order), 1) != 0).to(torch.int32)
    before = torch.nn.functional.pad(inside[:, :-1], (1, 0))
    return x if width is None else _pixel_index(x, width), inside - before


def _ellipse_roots(form, y):
    """Where rows y [C] cross ellipses form [C,5] (cx, cy, A, B, C of each row's shape, `_ellipse_form`):
    x [C,2], left and right (both at the middle where the row misses)."""
    cx, cy, a, b, c = form.unbind(1)
    dy = y - cy
    b_dy = b * dy
    discriminant = b_dy**2 - 4 * a * (c * dy * dy - 1)
    root = torch.sqrt(discriminant.clamp_min(0))
    # cx + (-b dy -+ root) / 2A, both roots at once (-(b dy) is (-b) dy, and a - r is a + -r, exactly)
    sides = (-b_dy)[:, None] + root[:, None] * _constant((-1.0, 1.0), y.device, torch.float32)
    return sides / (2 * a)[:, None] + cx[:, None]


@functools.lru_cache(maxsize=4)
def _vertex_columns(outline: bool) -> tuple[int, ...]:
    """For each kind, the columns of `_mixed_geometry`'s sources (params [0:8], a rotated rectangle's or
    a line's corners [8:16], a NaN [16], and with strokes their two sides [17:], `_stroke_sides`) that make
    its polygon's vertices (a stroke's outline: one side along the curve, the other back), padded to
    the outline's length (or 4 vertices) by repeating the last one (null edges; an ellipse's are NaN:
    no row crosses them), flat [8*2V]: the same table whatever the kinds."""
    nan, length = 2 * N_PARAMS, 4 * (CURVE_STEPS + 1) if outline else 8
    along = tuple(range(nan + 1, nan + 1 + length // 2))
    back = sum((along[i : i + 2] for i in range(len(along) - 2, -1, -2)), ())
    forms = {
        TRIANGLE: (0, 1, 2, 3, 4, 5, 4, 5),
        RECTANGLE: (0, 1, 2, 1, 2, 3, 0, 3),
        ROTATED_RECTANGLE: tuple(range(N_PARAMS, 2 * N_PARAMS)),
        POLYGON: tuple(range(8)),
        QUADRATIC: along + tuple(c + length // 2 for c in back) if outline else (nan, nan),
        LINE: tuple(range(N_PARAMS, 2 * N_PARAMS)),
    }
    forms[POLYLINE] = forms[QUADRATIC]
    table = ()
    for code in range(len(_FAMILY)):
        columns = forms.get(code, (nan, nan))
        table += columns + columns[-2:] * ((length - len(columns)) // 2)
    return table


class _Layout(NamedTuple):
    """What the mixed pass (`_mixed_slots`) takes from K shapes' kinds and images alone, made once for
    all the rounds of a climb (`_mixed_layout`): order [K] (the shapes by family, stable) and in that
    order their kinds [K], family ranks [K] and memberships [K,F], the columns of their vertices
    [K,2V] (`_vertex_columns`), whether each is an ellipse [K] (None: no ellipses among the kinds),
    and its image's first row in the prefix sums [K] (image * height; None without images)."""

    order: torch.Tensor
    kind: torch.Tensor
    rank: torch.Tensor
    member: torch.Tensor
    columns: torch.Tensor
    elliptic: torch.Tensor | None
    image_row: torch.Tensor | None


def _mixed_layout(kind, image, kinds, height: int) -> _Layout:
    """The `_Layout` of shapes of kind [K] (among `kinds`, of several families) in images image [K] (or None)."""
    device = kind.device
    families = _families(kinds)
    rank_of = _constant(tuple(families.index(f) if f in families else 0 for f in _FAMILY), device)
    order = torch.argsort(rank_of.index_select(0, kind), stable=True)
    kind = kind.index_select(0, order)
    rank = rank_of.index_select(0, kind)
    elliptic = None
    if _ELLIPTIC in families:
        elliptic = _constant(tuple(int(f == _ELLIPTIC) for f in _FAMILY), device, torch.bool).index_select(0, kind)
    return _Layout(
        order,
        kind,
        rank,
        rank[:, None] == _constant(tuple(range(len(families))), device),
        _constant(_vertex_columns(bool(set(STROKES) & set(kinds))), device)
        .view(len(_FAMILY), -1)
        .index_select(0, kind),
        elliptic,
        None if image is None else image.index_select(0, order) * height,
    )


def _mixed_geometry(layout: _Layout, params, kinds):
    """Geometry of K shapes of several families in one form (their `_Layout`, params [K,8] in its
    order): polygon edges [K,V,4] as `_edges` (every polygon's vertices padded to the longest outline
    by repeating its last one: null edges; an ellipse's edges cross no row), where `kinds` have
    ellipses the ellipse form [K,5] (cx, cy, A, B, C) (else None), and the y extent of each shape's
    rows, y_min and y_max [K,2]."""
    kind, device = layout.kind, params.device
    turn = _turn(params, kinds)
    # every kind's vertex coordinates picked from one table of sources (one gather, no selection per
    # kind); a form no kind here has is stood in for by params (a view)
    corners = params
    if ROTATED_RECTANGLE in kinds:
        corners = _rotated_rectangle(params, turn).view(-1, 8)
    if LINE in kinds:
        lines = _line_corners(params).view(-1, 8)
        corners = torch.where((kind == LINE)[:, None], lines, corners) if ROTATED_RECTANGLE in kinds else lines
    sources = [params, corners, _constant((math.nan,), device, torch.float32).expand(kind.shape[0], 1)]
    if set(STROKES) & set(kinds):
        sources.append(_stroke_sides(params, CURVE_STEPS, kind, kinds).view(-1, 4 * (CURVE_STEPS + 1)))
    vertices = torch.cat(sources, 1).gather(1, layout.columns).view(kind.shape[0], -1, 2)
    extent = torch.stack(torch.aminmax(vertices[..., 1], dim=1), 1)
    if layout.elliptic is None:
        return _edges(vertices), None, extent
    cx, cy, a, b, c, half = _ellipse_form(kind, params, turn)
    ellipse_extent = cy[:, None] + half[:, None] * _constant((-1.0, 1.0), device, torch.float32)  # cy -+ half
    extent = torch.where(layout.elliptic[:, None], ellipse_extent, extent)
    return _edges(vertices), torch.stack([cx, cy, a, b, c], 1), extent


def _mixed_columns(edges, form, elliptic, owner, row, used, width: int):
    """`_slot_columns` for slots of shapes of several families (`_mixed_geometry`): columns [C,V+2]
    and transitions s int32 [C,V+2], the polygon crossings sorted with their nonzero-winding
    transitions, then where there are ellipses an ellipse's two roots (+1, -1; transitions 0 where
    the slot is not an ellipse's). used None: the slots past the last shape's rows may cross anything
    (scoring reads none of them)."""
    y = row + 0.5
    if used is not None:
        y = torch.where(used, y, float("nan"))  # an unused slot's row crosses nothing
    x, s = _winding_columns(edges.index_select(0, owner), y[:, None], None)
    if form is None:
        return _pixel_index(x, width), s
    hit = elliptic.index_select(0, owner)
    roots = _ellipse_roots(form.index_select(0, owner), y)
    if used is not None:  # (NaN rows: any column, with no change)
        hit = hit & used
        roots = roots.masked_fill(~hit[:, None], 0)
    column = _pixel_index(torch.cat([x, roots], 1), width)
    return column, torch.cat([s, _constant((1, -1), hit.device, torch.int32) * hit[:, None]], 1)


def _mixed_slots(layout: _Layout, params, kinds, regions: list[int], height: int, width: int, live=None, exact=True):
    """`_slots` and `_slot_columns` for K shapes of several families at once: the shapes in family
    order (`_Layout`; params [K,8] and live [K] as the shapes come), what fits decided per family as
    the family's own slots would (regions: slots per family), the rows of the shapes that fit laid
    out in one slot array (the regions' sum, at most every row of every shape), and the crossings of
    every family in one pass (`_mixed_columns`). Returns owner [C] (an index into the order), row [C]
    (clamped to the frame), start and end [K] of each ordered shape's slots (none where it does not
    fit), whether all its rows fit [K] (ordered), the rows each family needed int64 [F], and column,
    s [C,V+2]. exact False: the slots past the last shape's rows (read by no sum) get any crossings."""
    device, order = params.device, layout.order
    edges, form, extent = _mixed_geometry(layout, params.index_select(0, order), kinds)
    # the first row ceil(y_min - 0.5) and minus the last, -floor(y_max - 0.5) = ceil(0.5 - y_max), at once
    rows = (extent - 0.5) * _constant((1.0, -1.0), device, torch.float32)
    low, high = _constant((0, 1 - height, height, 1), device, torch.float32).view(2, 2)
    rows = torch.ceil(rows).clamp(low, high).long()
    first, count = rows[:, 0], (1 - rows.sum(1)).clamp_min(0)
    if live is not None:
        count = count * live.index_select(0, order)
    # what fits is what each family's own slots would hold: its shapes' running count of rows within
    # its region; the rows of the shapes that fit are laid out one after the other (at most the sum of
    # the regions), a shape that does not gets none (and its sums are not read)
    ends = torch.cumsum(layout.member * count[:, None], 0)
    limit = _constant(tuple(regions), device).index_select(0, layout.rank)
    fits = (ends.gather(1, layout.rank[:, None]).squeeze(1) <= limit) | (count == 0)
    count = count * fits
    end = torch.cumsum(count, 0)
    start = end - count
    slots = min(sum(regions), params.shape[0] * height)  # (every row of every shape at most)
    # a slot's owner is the last shape starting at or before it (the first starts at 0; shapes
    # without rows start where the next one does, so they are passed over)
    starts = torch.zeros(slots + 1, dtype=torch.int64, device=device)
    starts.index_put_((start,), _constant((1,), device), accumulate=True)
    owner = torch.cumsum(starts[:slots], 0) - 1
    slot = torch.arange(slots, device=device)
    used = slot < end.index_select(0, owner) if exact else None
    row = ((first - start).index_select(0, owner) + slot).clamp(0, height - 1)
    column, s = _mixed_columns(edges, form, layout.elliptic, owner, row, used, width)
    return owner, row, start, end, fits, ends[-1], column, s


def _mixed_sums(terms: Terms, image, kind, params, kinds, capacity: dict | None, live, layout: _Layout | None):
    """`_coverage_sums` of shapes of several families at once (`_mixed_slots`; layout: their
    `_Layout`, or None to make it)."""
    families = _families(kinds)
    regions = [kind.shape[0] * terms.height if capacity is None else capacity[f] for f in families]
    if layout is None:
        layout = _mixed_layout(kind, image, kinds, terms.height)
    owner, row, start, end, fits, needed, column, s = _mixed_slots(
        layout, params, kinds, regions, terms.height, terms.width, live, exact=False
    )
    at = (layout.image_row.index_select(0, owner) + row)[:, None] * (terms.width + 1) + column
    values = terms.prefix.index_select(0, at.view(-1)).view(*at.shape, -1)
    per_row = (values * s[..., None]).sum(1, dtype=torch.int64)  # minus the row's sums
    running = torch.nn.functional.pad(torch.cumsum(per_row.t(), 1, dtype=torch.int64), (1, 0))
    sums = (running.index_select(1, start) - running.index_select(1, end)).t()
    unsorted = lambda x: torch.empty_like(x).index_copy_(0, layout.order, x)  # noqa: E731
    return unsorted(sums), unsorted(fits), dict(zip(families, needed.unbind(), strict=False))


def _search_cpu():
    """color_optimizer/search_cpu (numba's coverage sums), imported on first use: numba is slow to import."""
    from . import search_cpu

    return search_cpu


def _mixed_pass(kinds, device) -> bool:
    """Whether shapes of `kinds` are scored in one pass for every family (`_mixed_sums`)."""
    return len(_families(kinds)) > 1 and not numba_usable(device)


def _coverage_sums(terms: Terms, image, kind, params, kinds, capacity: dict | None = None, live=None, layout=None):
    """Sums over the pixels each of K shapes covers (centre sampled) of the `Terms`: int64 [K,T+1]
    (units of 1/terms.scale; the last is the pixel count). image int64 [K] picks each shape's image;
    shapes where live [K] is False get no rows (sums 0).

    Each family of shapes among `kinds` lays its rows out in capacity[family] slots (default K*H,
    always enough). Also returns which shapes' rows all fit [K] (the sums of the others are not to
    be read) and the slots each family needed {family: () int64}. layout: the shapes' `_Layout`
    where the caller has it (`_mixed_pass`)."""
    if _mixed_pass(kinds, kind.device):
        return _mixed_sums(terms, image, kind, params, kinds, capacity, live, layout)
    needed = {}
    sums, fits = 0, True
    for family in _families(kinds):
        slots = kind.shape[0] * terms.height if capacity is None else capacity[family]
        geometry, first, rows = _shape_rows(family, kind, params, kinds, terms.height, live)
        if family in (_CONVEX, _ELLIPTIC) and numba_usable(kind.device):
            # the CPU: numba's loop over each shape's rows, no slots (what fits is decided alike)
            found = _search_cpu().coverage_sums(
                terms.prefix, image, geometry, first, rows, family == _ELLIPTIC, terms.height, terms.width
            )
            if found is not None:
                end = torch.cumsum(rows, 0)
                fits = fits & ((end <= slots) | (rows == 0))
                needed[family] = end[-1]
                sums = sums + found
                continue
        owner, row, used, start, end, fit, needed[family] = _slots(first, rows, slots)
        fits = fits & fit
        column, s = _slot_columns(family, geometry, owner, row, used, terms.width)
        at = ((image * terms.height).index_select(0, owner) + row.clamp(0, terms.height - 1))[:, None] * (
            terms.width + 1
        ) + column
        # per row minus its sums (the sign taken at the end, by the order of a difference)
        if s is None:  # one span [left, right) per row: the difference of two prefixes, exact in int32
            at = at.t().contiguous()
            per_row = terms.prefix.index_select(0, at[0]) - terms.prefix.index_select(0, at[1])
        else:  # the transitions weigh the prefixes (in int32: a product is a prefix or its negation)
            values = terms.prefix.index_select(0, at.view(-1)).view(*at.shape, -1)
            per_row = (values * s[..., None]).sum(1, dtype=torch.int64)
        # rows of a shape are consecutive slots: its sums are differences of an exact running sum
        # (taken along contiguous memory: terms first)
        running = torch.nn.functional.pad(torch.cumsum(per_row.t(), 1, dtype=torch.int64), (1, 0))
        sums = sums + (running.index_select(1, start) - running.index_select(1, end)).t()
    return sums, fits, needed


def _opacity_sums(terms: Terms, sums, alpha):
    """Sums of u = target - (1 - a) current [K,C] and of |u|^2 - |target - current|^2 [K] at opacity
    alpha [K], and the pixel count [K], float32, from `_coverage_sums`."""
    values, c = sums.float() / terms.scale, terms.channels
    if terms.alpha is not None:
        return values[:, 0:c], values[:, c], values[:, c + 1]
    return (
        values[:, 0:c] + alpha[:, None] * values[:, c : 2 * c],
        2 * alpha * values[:, 2 * c] + alpha * alpha * values[:, 2 * c + 1],
        values[:, 2 * c + 2],
    )


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


def score(terms: Terms, image, kind, params, alpha, kinds, capacity: dict | None = None, live=None, layout=None):
    """Error change [K] float32, optimal colour [K,3] of K candidates, and the row slots each family
    needed (see `_coverage_sums`). The change is inf for invalid shapes, where live [K] is False and
    for candidates whose rows did not fit the slots (not scored: a search passes them over).

    image int64 [K] picks each candidate's image; kind int64 [K] (codes among `kinds`); params
    float [K,8]; alpha float [K] in (0, 1] (terms.alpha where that is fixed); layout: their `_Layout`
    where the caller has it (`_mixed_pass`).
    """
    sums, fits, needed = _coverage_sums(terms, image, kind, params, kinds, capacity, live, layout)
    opacity_sums = _opacity_sums(terms, sums, alpha)
    color = optimal_colors(opacity_sums, alpha)
    keep = fits if live is None else fits & live
    if set(STROKES) & set(kinds):
        keep = keep & _valid(kind, params, kinds)
    change = torch.where(
        keep, _error_change(opacity_sums, color, alpha), _constant((math.inf,), kind.device, torch.float32)
    )
    return change, color, needed


def _valid(kind, p, kinds):
    """primitive's rule for Beziers, and polylines alike: the chord is longer than either control leg
    (no hairpins: a polyline turns by at most 120 degrees)."""
    strokes = [k for k in STROKES if k in kinds]
    if not strokes:
        return torch.ones_like(kind, dtype=torch.bool)
    points = p[:, :6].view(-1, 3, 2)  # start, control (middle vertex), end
    legs = (points.diff(dim=1) ** 2).sum(2)
    chord = ((points[:, 2] - points[:, 0]) ** 2).sum(1)
    other = kind != strokes[0]
    for code in strokes[1:]:
        other = other & (kind != code)
    return other | (chord[:, None] > legs).all(1)


# Each kind's random parameters as groups of `random_shapes`'s value columns: (group, how many of its columns).
_RANDOM_FORMS = {
    TRIANGLE: (("anchor", 2), ("triangle", 4)),
    RECTANGLE: (("anchor", 2), ("corner", 2)),
    ROTATED_RECTANGLE: (("anchor", 2), ("size", 2), ("angle", 1)),
    ELLIPSE: (("anchor", 2), ("size", 2)),
    ROTATED_ELLIPSE: (("anchor", 2), ("size", 2), ("angle", 1)),
    CIRCLE: (("anchor", 2), ("size", 1)),
    QUADRATIC: (("anchor", 2), ("chain", 2), ("bezier", 3)),
    POLYGON: (("anchor", 2), ("chain", 6)),
    LINE: (("anchor", 2), ("chain", 2), ("width", 1)),
    POLYLINE: (("anchor", 2), ("chain", 2), ("end", 2), ("width", 1)),
}


def random_shapes(kinds: tuple[int, ...], count: int, height: int, width: int, generator, device):
    """`count` random shapes drawn as primitive draws them (small, anywhere): kind [count], params [count,8]."""
    scale = max(height, width) / 256
    device = torch.device(device)
    choice = torch.randint(len(kinds), (count,), generator=generator, device=device)
    kind = _constant(tuple(kinds), device).index_select(0, choice)
    u = torch.rand(count, N_PARAMS, generator=generator, device=device)
    # the values the kinds take, each group for all its parameters at once (the same float operations
    # in the same order as one parameter at a time), then each shape's picked by its kind: a few
    # operations whatever the kinds
    frame = _constant((width, height), device, torch.float32)
    groups = {"anchor": u[:, :2] * frame}
    anchor = groups["anchor"][:, None]
    wanted = {group for k in kinds for group, _ in _RANDOM_FORMS[k]}
    if "triangle" in wanted:  # the other vertices within RANDOM_TRIANGLE of the first
        groups["triangle"] = ((u[:, 2:6] * 2 - 1) * RANDOM_TRIANGLE * scale).view(-1, 2, 2).add_(anchor).view(-1, 4)
    if "chain" in wanted:  # each vertex within RANDOM_CHAIN of the one before (a polygon's all of the first)
        chain = (u * 2 - 1) * RANDOM_CHAIN * scale
        groups["chain"] = (chain[:, 2:8].reshape(-1, 3, 2) + anchor).view(-1, 6)
        if "end" in wanted:  # a polyline's last vertex, as a Bezier's
            groups["end"] = groups["chain"][:, :2] + chain[:, 4:6]
        if "width" in wanted:  # a line's or polyline's width, as a Bezier's but within its bounds (1 px at least)
            groups["width"] = ((1 + u[:, 6:7] * RANDOM_STROKE) * scale).clamp_min(1)
        if "bezier" in wanted:
            groups["bezier"] = torch.cat(
                [groups["chain"][:, :2] + chain[:, 4:6], (1 + u[:, 6:7] * RANDOM_STROKE) * scale], 1
            )
    if wanted & {"size", "corner"}:
        groups["size"] = 1 + u[:, 2:4] * RANDOM_SIZE * scale
    if "corner" in wanted:
        groups["corner"] = torch.minimum(groups["anchor"] + groups["size"], frame)
    if "angle" in wanted:
        groups["angle"] = u[:, 4:5] * 360
    groups["zero"] = torch.zeros_like(u[:, :1])
    at, columns = {}, 0
    for group, values in groups.items():
        at[group], columns = columns, columns + values.shape[1]
    table = []
    for code in range(len(_RANDOM_FORMS)):
        index = [at[group] + i for group, n in _RANDOM_FORMS[code] for i in range(n)] if code in kinds else []
        table.append(tuple(index) + (at["zero"],) * (N_PARAMS - len(index)))
    values = torch.cat(list(groups.values()), 1)
    if len(kinds) == 1:
        return kind, values.index_select(1, _constant(table[kinds[0]], device))
    pick = _constant(sum(table, ()), device).view(len(table), N_PARAMS)
    return kind, values.gather(1, pick.index_select(0, kind))


def _moves(kind, tables, kinds):
    """What `mutate` looks up for shapes of kind [K] (among `kinds`), once for all of a climb's rounds:
    each shape's first row of the sigma table (kind * 4) and its number of parameter groups (float),
    [K] or numbers for one kind, its parameters' bounds low and high, [K,8] or [8], and the table."""
    bounds, steps = tables
    if len(kinds) == 1:  # one kind: its table rows, no per-shape lookups
        return (kinds[0] * 4, len(_GROUPS[kinds[0]]), *bounds[kinds[0]], steps)
    groups = _constant(tuple(float(len(g)) for g in _GROUPS), kind.device, torch.float32).index_select(0, kind)
    return (kind * 4, groups, *bounds.index_select(0, kind).unbind(1), steps)


def _draws(count: int, search_alpha: bool, generator, device):
    """The random numbers of `count` moves (`mutate`), in the order drawn: which parameter group
    [count], the Gaussian steps [count,8] and, with search_alpha, the opacity steps [count] (else None)."""
    pick = torch.rand(count, generator=generator, device=device)
    step = torch.randn(count, N_PARAMS, generator=generator, device=device)
    return pick, step, torch.randint(-10, 11, (count,), generator=generator, device=device) if search_alpha else None


def mutate(moves, params, alpha, search_alpha: bool, generator):
    """One random move per shape (params [K,8], alpha [K]; moves: `_moves` of their kinds): a Gaussian
    step of one parameter group (a vertex, the sizes, the angle), clamped to the frame's margins;
    with search_alpha, the opacity moves by -10..10 / 255."""
    first_group, groups, low, high, steps = moves
    pick, step, alpha_step = _draws(params.shape[0], search_alpha, generator, params.device)
    group = first_group + (pick * groups).long()
    moved = torch.minimum(torch.maximum(params + step * steps.index_select(0, group), low), high)
    if search_alpha:
        alpha = (alpha + alpha_step / 255).clamp(1 / 255, 1)
    return moved, alpha


# -- the search --------------------------------------------------------------------------------------


def _commit_rows(kind, params, batch: int, height: int, width: int, kinds):
    """Where the rows of one shape per image (kind [B], params [B,8]) change inside-ness: the image of
    each row slot [C], the prefix-sum index of each crossing (as `Terms.prefix`) at [C,V] and the
    change s int32 [C,V] (+1 in, -1 out, 0 none). Several families in one pass (`_mixed_slots`), as
    the torch path scores them."""
    families = _families(kinds)
    if len(families) > 1:
        layout = _mixed_layout(kind, None, kinds, height)
        owner, row, _, _, _, _, column, s = _mixed_slots(
            layout, params, kinds, [batch * height] * len(families), height, width
        )
        image = layout.order.index_select(0, owner)
    else:
        geometry, first, rows = _shape_rows(families[0], kind, params, kinds, height)
        image, row, used, _, _, _, _ = _slots(first, rows, batch * height)
        column, s = _slot_columns(families[0], geometry, image, row, used, width)
        if s is None:  # a span: +1 at its left column, -1 at its right (an empty one cancels)
            s = _constant((1, -1), column.device, torch.int32).expand_as(column)
    at = ((image * height + row.clamp(0, height - 1)) * (width + 1))[:, None] + column
    return image, at, s


def _row_coverage(at, s, batch: int, height: int, width: int):
    """Binary coverage [B,H,W] from `_commit_rows`'s crossings: the changes summed along each row."""
    edges = torch.zeros(batch * height * (width + 1), dtype=torch.int32, device=at.device)
    edges.index_put_((at.reshape(-1),), s.reshape(-1), accumulate=True)
    return torch.cumsum(edges.view(batch, height, width + 1), 2)[..., :width] > 0


def _commit_mask(kind, params, batch: int, height: int, width: int, kinds):
    """Binary coverage [B,H,W] (centre sampled) of one shape per image (kind [B], params [B,8])."""
    return _row_coverage(*_commit_rows(kind, params, batch, height, width, kinds)[1:], batch, height, width)


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


def approximate(
    target: torch.Tensor,
    shapes: int,
    kinds: tuple[int, ...],
    alpha: int = 128,
    candidates: int = 1000,
    mutations: int = 100,
    background: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    on_shape=None,
    on_round=None,
    canvas: torch.Tensor | None = None,
    edge_weight: float = 0.0,
) -> Approximation:
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
    search there and reaches the caller. canvas [B,H,W,C]: the images to draw over (an earlier pass's,
    `approximate_passes`; the background is still the one given, or the target's mean); default: the
    background. edge_weight >= 0: the error each pixel adds is weighted by 1 + edge_weight * its edge
    strength (`edge_weights`: Sobel magnitude, 0..1), so that shapes follow the edges; 0: unweighted.
    An image stops early when no candidate lowers its error any more.

    On the torch path the host reads the device once per shape (`_Schedule`): a shape runs as a
    fixed sequence of operations whose sizes were chosen on the host before it (row slots, climbing
    rounds). Where CuPy kernels run (`cupy_usable`), search_cuda.approximate does the search.
    """
    target = _checked_target(target)
    background = _checked_background(background, target)
    for name, value, least in (("shapes", shapes, 0), ("candidates", candidates, 1), ("mutations", mutations, 1)):
        if not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {short(value)}")
    if isinstance(edge_weight, bool) or not isinstance(edge_weight, (int, float)) or not 0 <= edge_weight <= 100:
        raise ValueError(f"edge_weight: expected a number in 0..100, got {short(edge_weight)}")
    if canvas is not None and (not isinstance(canvas, torch.Tensor) or canvas.shape != target.shape):
        got = tuple(canvas.shape) if isinstance(canvas, torch.Tensor) else short(canvas)
        raise ValueError(f"canvas: expected a tensor of the target's shape {tuple(target.shape)}, got {got}")
    if cupy_usable(target.device):
        from . import search_cuda

        return search_cuda.approximate(
            target,
            shapes,
            kinds,
            alpha,
            candidates,
            mutations,
            background,
            generator,
            on_shape,
            on_round,
            canvas,
            float(edge_weight),
        )
    with _one_cpu_thread(target.device):
        return _approximate(
            target,
            shapes,
            kinds,
            alpha,
            candidates,
            mutations,
            background,
            generator,
            on_shape,
            on_round or (lambda: None),
            canvas,
            float(edge_weight),
        )


def approximate_passes(
    target: torch.Tensor,
    passes: list[tuple[tuple[int, ...], int, int]],
    candidates: int = 1000,
    mutations: int = 100,
    background: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    on_shape=None,
    on_round=None,
    edge_weight: float = 0.0,
    coarse: float = 0.0,
) -> Approximation:
    """`approximate` in passes, each drawing over the last one's canvas (fogleman/primitive's repeated
    `-n`/`-m`/`-a`): passes [(kinds, shapes, alpha), ...] (`parse_passes`). One Approximation of all
    the shapes, pass after pass (the background the first pass's; a pass's images that stopped early
    are padded with shapes of zero opacity, as `approximate` pads them); error [B,N+1] the error
    after each shape. on_shape(done, total, canvas) counts the shapes of every pass; edge_weight: every
    pass's (`approximate`).

    coarse in 0..1: coarse to fine, the first round(coarse * shapes) shapes of each pass searched on
    the target at half its size (where its longer side is COARSE_LEAST pixels at least), their
    parameters then scaled up; the rest of the pass searched at full size over the shapes so far
    drawn anti-aliased (`render`). The half-size shapes' errors are their search's, times the ratio of
    the pixel counts (an estimate); the canvas handed to on_shape is then half-size."""
    if isinstance(coarse, bool) or not isinstance(coarse, (int, float)) or not 0 <= coarse <= 1:
        raise ValueError(f"coarse: expected a number in 0..1, got {short(coarse)}")
    total = sum(shapes for _, shapes, _ in passes)
    height, width = target.shape[1:3]
    small = (max(1, round(height / 2)), max(1, round(width / 2)))
    steps = []
    for kinds, shapes, alpha in passes:
        first = round(shapes * coarse) if max(height, width) >= COARSE_LEAST else 0
        parts = ((first, True), (shapes - first, False))
        steps += [(kinds, count, alpha, half) for count, half in parts if count or not half]
    results, done, canvas = [], 0, None
    for kinds, shapes, alpha, half in steps:
        seen = {"canvas": None if half else canvas}

        def report(count, _, drawn, before=done, seen=seen):
            seen["canvas"] = drawn
            if on_shape is not None:
                on_shape(before + count, total, drawn)

        result = approximate(
            _shrunk(target, *small) if half else target,
            shapes,
            kinds,
            alpha,
            candidates,
            mutations,
            background,
            generator,
            report,
            on_round,
            _shrunk(canvas, *small) if half and canvas is not None else canvas,
            edge_weight,
        )
        background = result.background  # the first pass's, quantised: the later passes draw on it
        canvas = seen["canvas"]  # None while no shape was drawn: the background
        if half:  # in working pixels, and the canvas they leave drawn at the working size
            factor = max(height, width) / max(small)
            result = Approximation(
                result.kind,
                scale_params(result.kind, result.params, factor),
                result.color,
                result.alpha,
                result.count,
                result.error * (height * width / (small[0] * small[1])),
                result.background,
                height,
                width,
            )
            canvas = render(_joined(results + [result]), height, width, 1.0)[0]
        results.append(result)
        done += shapes
    return _joined(results)


COARSE_LEAST = 64  # the least longer side of a working image searched coarse to fine (half: 32 pixels)


def _shrunk(images, height: int, width: int):
    """images [B,H,W,C] (any float dtype) resized to height x width, float32 (bilinear, anti-aliased)."""
    planar = _checked_target(images).permute(0, 3, 1, 2)
    resized = torch.nn.functional.interpolate(
        planar, size=(height, width), mode="bilinear", align_corners=False, antialias=True
    )
    return resized.permute(0, 2, 3, 1).clamp(0, 1).contiguous()


def _joined(results: list[Approximation]) -> Approximation:
    """Approximations of the same images one after the other as one (the first's background)."""
    first = results[0]
    join = lambda name: torch.cat([getattr(r, name) for r in results], 1)  # noqa: E731
    return Approximation(
        join("kind"),
        join("params"),
        join("color"),
        join("alpha"),
        sum(r.count for r in results),
        torch.cat([first.error[:, :1]] + [r.error[:, 1:] for r in results], 1),
        first.background,
        first.height,
        first.width,
    )


# Bytes per row slot of the torch path's scoring (the slots' geometry, crossings, gathered prefix sums
# and running sums), measured by peak RSS at 192 px: one family of convex polygons or ellipses ~190, of
# 4-gons ~510, of stroked Beziers ~2,000; several families in one pass ~790, ~2,100 with Beziers.
_SLOT_BYTES = {_CONVEX: 240, _ELLIPTIC: 240, _POLY4: 600, _STROKE: 2400}
_MIXED_SLOT_BYTES = (1000, 2600)  # without, with Beziers


def search_memory(
    batch: int, height: int, width: int, channels: int, kinds, alpha: int, candidates: int, mutations: int, device
) -> int:
    """Estimated peak bytes of `approximate` on target [B,H,W,C]: the images and their prefix sums, and
    on the torch path the row slots of the first shape, which has no shape before it to size them by
    (every row of every candidate, of every mutation of its climbs), scored PART_ROWS at a time
    (`_score_in_parts`); numba's loops and the CUDA kernels score convex polygons and ellipses without
    slots, the kernels everything."""
    terms = (2 * channels + 3) if alpha == 0 else channels + 2
    images = batch * height * width * (4 * channels * 4 + terms * 16)
    if cupy_usable(device):
        return images
    families = _families(kinds)
    share = {family: min(1.0, 2 * sum(_FAMILY[k] == family for k in kinds) / len(kinds)) for family in families}
    climb = batch * min(PARENTS, candidates) * mutations * height
    mixed = len(families) > 1 and not numba_usable(device)  # one pass for every family: regions of one slot array
    slotted = [f for f in families if not (numba_usable(device) and f in (_CONVEX, _ELLIPTIC))]

    def stage(slots: dict) -> float:  # the bytes of one part of a scoring stage's slots
        parts = max(1, math.ceil(sum(slots.values()) / PART_ROWS))
        if mixed:
            return sum(slots.values()) / parts * _MIXED_SLOT_BYTES[_STROKE in families]
        return sum(slots[f] / parts * _SLOT_BYTES[f] for f in slotted)

    random = stage({f: share[f] * batch * candidates * height for f in families})
    climbs = stage({f: climb * share[f] / sum(share.values()) for f in families})  # parents of each family: a guess
    return int(images + max(random, climbs))


class _Schedule:
    """What the host decides for a shape: the row slots of each scoring stage and family, and the
    climbing rounds. It reads the device once per shape, after the shape's random candidates are
    scored and its parents chosen: the status of the shape before (`status`) and how many of this
    shape's parents are of each kind (`set_parents`). All families climb in the same rounds, each
    family's rows in its own slots sized by its parents: a family without parents gets one slot
    (measured on combo shapes: half the families, and most of the work, were idle when every family
    climbed every parent's mutations), and the climbs and the commit compute the forms of the
    parents' kinds alone (`parent_kinds`).

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
    the kinds' families, its climbs every row of their mutations. Where they are scored in one pass
    (one family, or the torch path's mixed pass), it reads its parents' kinds with whether a climb
    goes on FIRST_CHECK rounds in, and scores no more rounds where none does."""

    MIN_ROUNDS = 4
    FIRST_ROUNDS = 32
    SLOT_LEVELS = 4  # slot capacities are 256 * 2**(level / SLOT_LEVELS)
    LEVEL_BITS = 6

    def __init__(self, kinds, batch: int, candidates: int, parents: int, mutations: int, height: int):
        self.kinds, self.candidates, self.mutations, self.height = kinds, candidates, mutations, height
        self.families = _families(kinds)
        # every row of every candidate, shared out among the families (twice each family's share of
        # the kinds: random kinds are drawn evenly)
        share = {
            family: min(1.0, 2 * sum(_FAMILY[k] == family for k in kinds) / len(kinds)) for family in self.families
        }
        self.slots = {("random", family): math.ceil(batch * candidates * height * share[family]) for family in share}
        self.rounds = min(MAX_ROUNDS, self.FIRST_ROUNDS)
        self.per_parent = None  # per family, the slots of each round per parent (after the first shape)
        self.parents = {family: batch * parents if len(self.families) == 1 else 0 for family in self.families}
        self.parent_kinds = kinds  # the kinds among the parents: the only ones a climb computes the forms of

    def kind_counts(self, parent_kind):
        """How many parents [B*P] (their kinds) are of each of the kinds, int64 [len(kinds)], on the device."""
        return (parent_kind[:, None] == _constant(tuple(self.kinds), parent_kind.device)).sum(0)

    def set_parents(self, counts: list[int]) -> None:
        """The parents of the next shape: how many are of each of the kinds (`kind_counts`)."""
        self.parents = {
            family: sum(n for k, n in zip(self.kinds, counts, strict=True) if _FAMILY[k] == family)
            for family in self.families
        }
        self.parent_kinds = tuple(k for k, n in zip(self.kinds, counts, strict=True) if n > 0)

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
        return level.clamp(0, 2**self.LEVEL_BITS - 1).long()

    def _slots(self, level: int) -> int:
        return math.ceil(256 * 2 ** (level / self.SLOT_LEVELS))

    def status(self, active, cut, climbed, needed: dict):
        """The device's report of a shape, int64 [1 + F*R] (read with the next shape's parents): a word
        with bit 0 an image is still active, bit 1 a climb was cut by the last round, bits 2-11 the
        rounds until every climb had ended, then LEVEL_BITS per family: the level of the slots its
        random candidates needed; then per family the level of the slots each climbing round needed
        (0 for a family without parents)."""
        word = active.any().long() + 2 * cut.long() + 4 * climbed.clamp_max(1023)
        zeros = torch.zeros(self.rounds, dtype=torch.int64, device=word.device)
        # every level in one pass: the random candidates' of each family, then each family's rounds
        rows = torch.cat(
            [torch.stack([needed[("random", family)] for family in self.families])]
            + [needed.get(("climb", family), zeros) for family in self.families]
        )
        levels = self._level(rows)
        count = len(self.families)
        shifts = _constant(tuple(12 + self.LEVEL_BITS * i for i in range(count)), word.device)
        word = word + (levels[:count] << shifts).sum()
        return torch.cat([word.view(1), levels[count:]])

    def update(self, status: list[int]) -> bool:
        """Set the slots and rounds of the next shape from the last shape's `status` (before
        `set_parents` gives the next shape's parents); returns whether an image is still active."""
        word, climb_levels = status[0], status[1:]
        random_rows = {}
        for i, family in enumerate(self.families):
            random_rows[family] = self._slots(((word >> (12 + self.LEVEL_BITS * i)) & (2**self.LEVEL_BITS - 1)) + 1)
            self.slots[("random", family)] = random_rows[family]
        rounds = len(climb_levels) // len(self.families)
        per_parent = {}
        for i, family in enumerate(self.families):
            count = self.parents[family]
            if count > 0:
                levels = climb_levels[i * rounds : (i + 1) * rounds]
                per_parent[family] = [self._slots(level + 1) / count for level in levels]
            else:  # twice a random candidate's rows of the family (on average) per mutation
                kinds = sum(_FAMILY[k] == family for k in self.kinds)
                per_parent[family] = [
                    2 * random_rows[family] * self.mutations * len(self.kinds) / (self.candidates * kinds)
                ]
        self.per_parent = per_parent
        climbed = (word >> 2) & 1023
        cut = bool(word & 2)
        self.rounds = min(MAX_ROUNDS, self.rounds + self.rounds // 2 if cut else max(self.MIN_ROUNDS, climbed + 2))
        return bool(word & 1)


def _approximate(
    target,
    shapes,
    kinds,
    alpha,
    candidates,
    mutations,
    background,
    generator,
    on_shape,
    on_round,
    canvas=None,
    edge_weight=0.0,
):
    record = _Record(target, shapes, alpha, background, generator, canvas, edge_weight)
    batch, height, width, _ = target.shape
    device = target.device
    tables = _role_tables(height, width, device)
    parents = min(PARENTS, candidates)
    schedule = _Schedule(kinds, batch, candidates, parents, mutations, height)
    current, active = record.current, torch.ones(batch, dtype=torch.bool, device=device)
    status = None  # the last shape's report, read with the next shape's parents
    for index in range(shapes):
        shape = _next_shape(
            record.target,
            current,
            active,
            kinds,
            record.start_alpha,
            record.searched,
            candidates,
            parents,
            mutations,
            tables,
            record.generator,
            schedule,
            status,
            on_round,
            record.weighting,
        )
        if shape is None:  # the last shape improved no image
            record.stopped_after(index - 1)
            break
        current, active = shape["current"], shape["active"]
        record.kind[:, index], record.params[:, index], record.color[:, index] = (
            shape["kind"],
            shape["params"],
            shape["color"],
        )
        record.alpha[:, index] = torch.where(active, shape["alpha"], 0)
        record.error[:, index + 1] = record.error[:, index] + torch.where(active, shape["change"], 0)
        if on_shape is not None:
            on_shape(index + 1, shapes, current)
        status = schedule.status(shape["active"], *shape["report"])
    return record.result()


def _next_shape(
    target,
    current,
    active,
    kinds,
    start_alpha,
    search_alpha,
    candidates,
    parents,
    mutations,
    tables,
    generator,
    schedule,
    status,
    on_round,
    weighting=(),
):
    """One shape per image, searched and committed on the device with sizes fixed by `schedule`,
    which reads the last shape's `status` and this shape's parents' kinds (one host read; the first
    shape's, where its climbs are scored in one pass, a few rounds into them: `_hill_climb`): returns
    the new current images and the shape, and its report (see `_Schedule`); None where the last
    shape improved no image."""
    batch, height, width, _ = target.shape
    device = target.device
    terms = _terms(target, current, None if search_alpha else start_alpha, *weighting)
    # random candidates of every image at once; the best `parents` of each image are climbed
    kind, params = random_shapes(kinds, batch * candidates, height, width, generator, device)
    shape_alpha = torch.full((batch * candidates,), start_alpha, device=device)
    image = torch.arange(batch * candidates, device=device) // candidates
    change, needed = _score_in_parts(
        terms, image, kind, params, shape_alpha, kinds, schedule.capacity("random"), None, on_round
    )
    on_round()
    best = torch.topk(-change.view(batch, candidates), parents, dim=1).indices
    chosen = (best + torch.arange(batch, device=device)[:, None] * candidates).reshape(-1)
    kind, params, shape_alpha, change = kind[chosen], params[chosen], shape_alpha[chosen], change[chosen]
    several = len(schedule.families) > 1
    check = None
    if status is None and (not several or _mixed_pass(kinds, device)):
        # the first shape has no status to read: it reads its parents' kinds with whether a climb
        # goes on, a few rounds in (`_hill_climb`), its climbs scoring every row of every kind
        parent_kind = kind

        def check(climbing) -> bool:
            read = torch.cat(
                [climbing.any().long().view(1)] + ([schedule.kind_counts(parent_kind)] if several else [])
            ).tolist()
            if several:
                schedule.set_parents(read[1:])
            return bool(read[0])

    elif status is not None or several:
        report = [status] if status is not None else []
        read = torch.cat(report + ([schedule.kind_counts(kind)] if several else [])).tolist()
        if status is not None and not schedule.update(read[: len(status)]):
            return None
        if several:
            schedule.set_parents(read[len(read) - len(kinds) :])
        kinds = schedule.parent_kinds  # from here on only the parents' kinds: forms of no other are computed
    kind, params, shape_alpha, change, cut, climbed, climb_needed = _climb_families(
        terms,
        kind,
        params,
        shape_alpha,
        change,
        chosen // candidates,
        search_alpha,
        mutations,
        tables,
        generator,
        kinds,
        schedule,
        batch,
        on_round,
        check,
    )
    kinds = schedule.parent_kinds
    needed = {**{("random", f): n for f, n in needed.items()}, **{("climb", f): n for f, n in climb_needed.items()}}
    # the best climb of each image becomes its next shape, coloured in 8 bits
    shape_alpha = (shape_alpha * 255).round() / 255
    # its sums and its coverage from one pass over its rows: the negated changes weigh the prefixes
    image, at, s = _commit_rows(kind, params, batch, height, width, kinds)
    per_row = (terms.prefix.index_select(0, at.view(-1)).view(*at.shape, -1) * s[..., None]).sum(1, dtype=torch.int64)
    sums = torch.zeros(batch, per_row.shape[1], dtype=torch.int64, device=device).index_add_(
        0, image, per_row, alpha=-1
    )
    opacity_sums = _opacity_sums(terms, sums, shape_alpha)
    color = (optimal_colors(opacity_sums, shape_alpha) * 255).round() / 255
    change = _error_change(opacity_sums, color, shape_alpha)
    # float rounding must not pass for an improvement (a flat image gets no shapes)
    improves = active & (change < -1e-6 * (1 + sums[:, -1] / terms.scale)) & _valid(kind, params, kinds)
    mask = _row_coverage(at, s, batch, height, width) & improves[:, None, None]
    a = shape_alpha[:, None, None, None]
    paint = _paint(color, terms.channels)
    current = torch.where(mask[..., None], current * (1 - a) + paint[:, None, None, :] * a, current)
    return dict(
        current=current,
        active=improves,
        kind=kind,
        params=params,
        color=color,
        alpha=shape_alpha,
        change=change,
        report=(cut, climbed, needed),
    )


def _climb_families(
    terms,
    kind,
    params,
    alpha,
    change,
    image,
    search_alpha,
    mutations,
    tables,
    generator,
    kinds,
    schedule,
    batch: int,
    on_round,
    check=None,
):
    """Hill-climb the parents of every image (kind [B*P] among `kinds`, params [B*P,8], alpha, change
    [B*P], image [B*P] int64) side by side, every family in the same rounds (`_hill_climb`; each
    family's rows in its own slots), and pick each image's best climb: kind [B], params [B,8], alpha
    [B], change [B]; whether a climb was cut by the last round (), the rounds until every climb had
    stopped (), and the row slots each family with parents needed each round {family: int64 [R]}.
    check: the first shape's (see `_hill_climb`), whose rounds score every row."""
    count, device = kind.shape[0], kind.device
    if check is None:
        capacities = [schedule.capacity("climb", r) for r in range(schedule.rounds)]
    else:
        capacities = [None] * schedule.rounds
    kind, params, alpha, change, cut, climbed, needed = _hill_climb(
        terms,
        kind,
        params,
        alpha,
        change,
        image,
        search_alpha,
        mutations,
        tables,
        generator,
        kinds,
        capacities,
        on_round,
        check,
    )
    needed = {family: rows for family, rows in needed.items() if schedule.parents[family] > 0}
    winner = change.view(batch, -1).argmin(1) + torch.arange(batch, device=device) * (count // batch)
    return kind[winner], params[winner], alpha[winner], change[winner], cut, climbed, needed


def _hill_climb(
    terms,
    kind,
    params,
    alpha,
    change,
    image,
    search_alpha,
    mutations,
    tables,
    generator,
    kinds,
    capacities: list,
    on_round,
    check=None,
):
    """Hill-climb parents side by side (kind [K], params [K,8], alpha, change [K], image [K] int64).
    Each round, every parent still climbing makes `mutations` mutations and takes the best one if it
    lowers the error; a parent stops after a round in which none did. That is primitive's rule (stop
    when `mutations` moves from the same state fail in a row), with the moves tried side by side and
    the best success kept, not the first. There is a round per entry of `capacities` (the row slots
    of each family that round, or None: every row), each of a size fixed on the host (stopped
    parents' moves cost no rows and are ignored). on_round() after each round.

    No host reads, but for check(climbing [K]), called after FIRST_CHECK rounds (or all, if fewer)
    where given: one read, which returns whether a climb goes on; where none does, the rounds left
    score nothing, and draw only the random numbers their moves would (so that what follows draws
    the same ones).

    Returns each climb's end (kind, params, alpha, change), whether a climb was cut by the last round
    (), the rounds until every climb had stopped (), and the row slots each family needed each round
    {family: int64 [R]}."""
    count, device = kind.shape[0], kind.device
    parent = torch.arange(count, device=device).repeat_interleave(mutations, output_size=count * mutations)
    mutant_kind = kind[parent] if len(kinds) > 1 else kind[:1].expand(count * mutations)
    mutant_image = image[parent]
    # what stays the same from round to round is taken once
    moves = _moves(mutant_kind, tables, kinds)
    layout = _mixed_layout(mutant_kind, mutant_image, kinds, terms.height) if _mixed_pass(kinds, device) else None
    mutant_alpha = alpha[parent]
    climbing = torch.ones(count, dtype=torch.bool, device=device)
    rounds = torch.zeros(count, dtype=torch.int64, device=device)  # rounds each parent climbed
    needed = {}
    for round, capacity in enumerate(capacities):
        if search_alpha:
            mutant_alpha = alpha[parent]
        moved, moved_alpha = mutate(moves, params[parent], mutant_alpha, search_alpha, generator)
        moved_change, rows = _score_in_parts(
            terms, mutant_image, mutant_kind, moved, moved_alpha, kinds, capacity, climbing[parent], on_round, layout
        )
        best_change, best_move = moved_change.view(count, mutations).min(1)
        # a stopped parent's moves score inf (not live): it goes on climbing only where a move improves
        climbing = best_change < change
        params = torch.where(
            climbing[:, None],
            moved.view(count, mutations, -1).gather(1, best_move.view(-1, 1, 1).expand(-1, 1, N_PARAMS))[:, 0],
            params,
        )
        if search_alpha:
            alpha = torch.where(climbing, moved_alpha.view(count, mutations).gather(1, best_move[:, None])[:, 0], alpha)
        change = torch.where(climbing, best_change, change)
        rounds = rounds + climbing
        on_round()
        for family, total in rows.items():
            needed.setdefault(family, []).append(total)
        if check is not None and round + 1 == min(FIRST_CHECK, len(capacities)) and not check(climbing):
            left = len(capacities) - round - 1
            for _ in range(left):
                _draws(count * mutations, search_alpha, generator, device)
                on_round()
            for totals in needed.values():
                totals += [torch.zeros_like(totals[0])] * left
            break
    return (
        kind,
        params,
        alpha,
        change,
        climbing.any(),
        rounds.max(),
        {family: torch.stack(totals) for family, totals in needed.items()},
    )


def _score_in_parts(terms, image, kind, params, alpha, kinds, capacity: dict | None, live, on_round, layout=None):
    """`score`'s change [K] and rows needed {family: ()} of K shapes (a round's mutants, a shape's random
    candidates; live [K] or None as `score` takes it), in parts of at most
    ~PART_ROWS row slots (each part a share of `capacity` as large as its share of the mutants; None:
    every row), with on_round() after each part but the last: a round at 2048 px and 10,000
    mutations scores ~1e8 rows, tens of seconds between interrupt checks in one piece. layout: the
    shapes' `_Layout` where the caller has it (used in one piece)."""
    count = kind.shape[0]
    slots = sum(capacity.values()) if capacity is not None else count * terms.height
    parts = min(count, math.ceil(slots / PART_ROWS))
    if parts <= 1:
        change, _, rows = score(terms, image, kind, params, alpha, kinds, capacity, live, layout)
        return change, rows
    size = math.ceil(count / parts)
    share = None if capacity is None else {f: max(1, math.ceil(c * size / count)) for f, c in capacity.items()}
    change, rows = torch.empty(count, device=kind.device), {}
    for start in range(0, count, size):
        part = slice(start, start + size)
        change[part], _, needed = score(
            terms,
            image[part],
            kind[part],
            params[part],
            alpha[part],
            kinds,
            share,
            None if live is None else live[part],
        )
        rows = {f: rows.get(f, 0) + n for f, n in needed.items()}
        if start + size < count:
            on_round()
    return change, rows
