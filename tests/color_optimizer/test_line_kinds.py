"""PrimitiveMesh's line and polyline kinds (geometrize's kinds, as straight strokes with butt caps):
their coverage against a direct float64 inside test, their anti-aliased render against a 16x16
supersampled reference, the search and the SVG."""

import math

import pytest
import torch

from primitive_scenes import coverage, scene
from rasterkit.utils import color_optimizer as co
from rasterkit.utils.color_optimizer import search as co_search
from rasterkit.utils.color_optimizer import shapes as co_shapes

STROKES = torch.tensor(
    [  # inside a 40 x 56 frame
        [co.LINE, 4.3, 6.2, 50.1, 31.7, 3.4, 0, 0, 0],  # long and steep
        [co.LINE, 8.0, 30.0, 44.0, 30.0, 2.0, 0, 0, 0],  # level, edges on pixel edges
        [co.LINE, 30.2, 3.1, 30.2, 36.9, 1.3, 0, 0, 0],  # upright, thin
        [co.POLYLINE, 5.5, 34.0, 27.0, 8.5, 51.2, 30.3, 4.2, 0],  # a sharp turn (mitred)
        [co.POLYLINE, 3.0, 10.0, 25.0, 15.0, 50.0, 12.0, 2.5, 0],  # a gentle turn
        [co.POLYLINE, 6.0, 20.0, 20.0, 20.0, 52.0, 20.0, 3.4, 0],  # straight on
    ]
)


def strokes():
    return STROKES[:, 0].long(), STROKES[:, 1:].float()


def _convex_inside(x, y, polygon):
    """Whether points (x, y) [H,W] float64 lie inside the convex polygon [(x, y), ...] (either winding)."""
    signs = []
    for (x0, y0), (x1, y1) in zip(polygon, polygon[1:] + polygon[:1], strict=False):
        signs.append((x1 - x0) * (y - y0) - (y1 - y0) * (x - x0))
    signs = torch.stack(signs)
    return (signs >= 0).all(0) | (signs <= 0).all(0)


def _segment(x, y, a, b, half):
    """Inside the rectangle of a straight stroke from a to b, half wide on each side (butt caps)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy)
    ux, uy = dx / length, dy / length
    along = (x - a[0]) * ux + (y - a[1]) * uy
    across = -(x - a[0]) * uy + (y - a[1]) * ux
    return (along >= 0) & (along <= length) & (across.abs() <= half)


def inside(kind, p, height, width, factor=1):
    """Reference point-sampled coverage [H*factor, W*factor] of one stroke at `factor` samples per pixel
    side, in float64 from the parameters alone: a line's rectangle; a polyline's two rectangles and,
    on the outer side of its turn, the miter (the quadrilateral of the middle vertex, the two offset
    corners there and the miter point where the outer edges meet)."""
    n = height * factor, width * factor
    y, x = torch.meshgrid(
        (torch.arange(n[0], dtype=torch.float64) + 0.5) / factor,
        (torch.arange(n[1], dtype=torch.float64) + 0.5) / factor,
        indexing="ij",
    )
    p = [float(v) for v in p]
    if kind == co.LINE:
        return _segment(x, y, p[0:2], p[2:4], p[4] / 2)
    a, b, c, half = p[0:2], p[2:4], p[4:6], p[6] / 2
    covered = _segment(x, y, a, b, half) | _segment(x, y, b, c, half)

    def normal(s, e):
        length = math.hypot(e[0] - s[0], e[1] - s[1])
        return (-(e[1] - s[1]) / length, (e[0] - s[0]) / length)

    n1, n2 = normal(a, b), normal(b, c)
    turn = (b[0] - a[0]) * (c[1] - b[1]) - (b[1] - a[1]) * (c[0] - b[0])
    if abs(turn) < 1e-9:
        return covered
    side = -1.0 if turn > 0 else 1.0  # the outer side of the turn
    o1 = (b[0] + side * half * n1[0], b[1] + side * half * n1[1])
    o2 = (b[0] + side * half * n2[0], b[1] + side * half * n2[1])
    # where the outer edges (through o1 along a->b, through o2 along b->c) meet
    d1, d2 = (b[0] - a[0], b[1] - a[1]), (c[0] - b[0], c[1] - b[1])
    t = ((o2[0] - o1[0]) * d2[1] - (o2[1] - o1[1]) * d2[0]) / (d1[0] * d2[1] - d1[1] * d2[0])
    miter = (o1[0] + t * d1[0], o1[1] + t * d1[1])
    return covered | _convex_inside(x, y, [tuple(b), o1, miter, o2])


@pytest.mark.parametrize("numba", ["", "1"])
def test_search_coverage_is_the_strokes_inside_test(numba, monkeypatch):
    """The search's point-sampled mask, alone and among other kinds (the mixed pass), against the
    float64 inside test: at most a pixel centre on an edge apart."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", numba)
    kind, params = strokes()
    for kinds in ((co.LINE, co.POLYLINE), tuple(range(len(co.KINDS)))):
        mask = co_search._commit_mask(kind, params, kind.shape[0], 40, 56, kinds)
        for k in range(kind.shape[0]):
            reference = inside(int(kind[k]), params[k], 40, 56)
            assert reference.sum() > 20, k
            assert (mask[k] != reference).sum() <= 1, (kinds, k)


def test_antialiased_coverage_within_0_01_of_a_16x16_supersampled_reference():
    kind, params = strokes()
    covered = coverage(kind, params, 40, 56)
    for k in range(kind.shape[0]):
        fine = inside(int(kind[k]), params[k], 40, 56, factor=16).float()
        reference = fine.view(40, 16, 56, 16).mean((1, 3))
        error = (covered[k] - reference).abs()
        assert float(error.mean()) < 0.01 and float(error.max()) < 0.2, k


@pytest.mark.parametrize("kinds", ["line", "polyline", "line, polyline, quadratic, triangle"])
def test_a_search_of_strokes_places_those_kinds_and_lowers_the_error(kinds):
    codes = co.kind_codes(kinds)
    result = co.approximate(
        scene(), 12, codes, alpha=0, candidates=150, mutations=30, generator=torch.Generator().manual_seed(1)
    )
    assert set(result.kind[0].tolist()) <= set(codes)
    error = result.error[0]
    assert bool((error[1:] <= error[:-1]).all()) and float(error[-1]) < 0.9 * float(error[0])
    # every placed polyline turns by at most 120 degrees (no hairpins), its width within the bounds
    p = result.params[0]
    polyline = result.kind[0] == co.POLYLINE
    legs = (p[:, 2:4] - p[:, 0:2]).norm(dim=1), (p[:, 4:6] - p[:, 2:4]).norm(dim=1)
    chord = (p[:, 4:6] - p[:, 0:2]).norm(dim=1)
    assert bool(((chord > legs[0]) & (chord > legs[1]))[polyline].all())
    width = torch.where(result.kind[0] == co.LINE, p[:, 4], p[:, 6])
    assert bool((width[result.kind[0] >= co.LINE] >= 1).all())


def test_the_search_scores_strokes_as_a_float64_sum_over_their_masks():
    """Every candidate's error change, stroke kinds among others, against float64 sums over its mask."""
    target, current = scene(), scene(seed=3) * 0.7
    terms = co_shapes._terms(target, current, None)
    kinds = tuple(range(len(co.KINDS)))
    kind, params = co_search.random_shapes(kinds, 400, 40, 56, torch.Generator().manual_seed(0), "cpu")
    params = co.scale_params(kind, params, 2.0)
    alpha = torch.full((400,), 0.5)
    change, _, _ = co_search.score(terms, torch.zeros(400, dtype=torch.long), kind, params, alpha, kinds)
    mask = co_search._commit_mask(kind, params, 400, 40, 56, kinds).double()
    d, c = (target - current)[0].double(), current[0].double()
    colour_sum = torch.einsum("khw,hwc->kc", mask, d + 0.5 * c)
    count = mask.sum((1, 2))
    colour = (colour_sum / (0.5 * count.clamp_min(1))[:, None]).clamp(0, 1)
    drawn = c[None] * 0.5 + colour[:, None, None, :] * 0.5
    expected = (mask[..., None] * ((target[0].double()[None] - drawn) ** 2 - (d**2)[None])).sum((1, 2, 3))
    valid = co_search._valid(kind, params, kinds)
    assert torch.equal(torch.isfinite(change), valid)
    strokes = valid & (kind >= co.LINE)
    assert int(strokes.sum()) > 50
    assert torch.allclose(change[valid].double(), expected[valid], atol=1e-3)


def test_svg_draws_lines_and_polylines_as_strokes():
    kind, params = strokes()
    result = co.Approximation(
        kind=kind[None],
        params=params[None],
        color=torch.full((1, 6, 3), 0.5),
        alpha=torch.full((1, 6), 0.5),
        count=torch.tensor([6]),
        error=torch.zeros(1, 7),
        background=torch.zeros(1, 3),
        height=40,
        width=56,
    )
    text = co.svg(result, 0, 80, 112, 2.0)
    assert '<line x1="8.6" y1="12.4" x2="100.2" y2="63.4" stroke="#808080" stroke-opacity="0.5" ' in text
    assert 'stroke-width="6.8" stroke-linecap="butt"/>' in text
    assert '<polyline points="11,68 54,17 102.4,60.6" fill="none" stroke="#808080"' in text
    assert 'stroke-linejoin="miter"' in text


def test_combo_is_fogleman_primitives_eight_kinds():
    assert co.kind_codes("combo") == co.COMBO == tuple(range(8))
    assert co.kind_codes("combo, line") == (*range(8), co.LINE)
    assert co.kind_codes("polyline line") == (co.LINE, co.POLYLINE)
