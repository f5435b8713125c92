"""The primitive-approximation engine: coverage from row crossings, closed-form colours, the search, AA render."""

import importlib
import math

import pytest
import torch

from primitive_scenes import coverage, scene, transparent
from rasterkit.utils import color_optimizer as co
from rasterkit.utils.color_optimizer import search as co_search
from rasterkit.utils.color_optimizer import shapes as co_shapes

co_render = importlib.import_module("rasterkit.utils.color_optimizer.render")  # the package's `render` is the function


def one_of_each():
    """One shape of every kind, kind [8] and params [8,8], inside a 40 x 56 frame."""
    params = torch.tensor(
        [
            [5.2, 4.1, 30.7, 9.3, 12.4, 33.8, 0, 0],  # triangle
            [40.3, 3.6, 52.2, 17.9, 0, 0, 0, 0],  # rectangle
            [20.5, 20.2, 22.0, 9.5, 33.0, 0, 0, 0],  # rotated rectangle
            [44.1, 29.7, 8.3, 6.2, 0, 0, 0, 0],  # ellipse
            [15.3, 27.9, 11.7, 4.4, -25.0, 0, 0, 0],  # rotated ellipse
            [30.2, 30.6, 7.3, 0, 0, 0, 0, 0],  # circle
            [3.0, 36.0, 28.0, 14.0, 53.0, 37.0, 3.5, 0],  # quadratic
            [8.0, 8.0, 48.0, 12.0, 20.0, 20.0, 44.0, 34.0],  # polygon (concave)
        ]
    )
    return torch.arange(8), params


def inside_at_centres(kind, p, height, width):
    """Reference point-sampled coverage [H,W] of one shape, by a direct test at each pixel centre, from
    the parameters as the module docstring describes them (angles clockwise on screen: x right, y down).
    The Bezier stroke is the engine's outline polygon (_stroke_outline)."""
    y, x = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
    x, y = x.double(), y.double()
    p = p.double()
    angle = math.radians(float(p[4])) if kind in (co.ROTATED_ELLIPSE, co.ROTATED_RECTANGLE) else 0.0
    # the offset from the centre in the shape's own axes: rotated back by the angle
    dx, dy = x - p[0], y - p[1]
    u = dx * math.cos(angle) + dy * math.sin(angle)
    v = -dx * math.sin(angle) + dy * math.cos(angle)
    if kind in (co.ELLIPSE, co.ROTATED_ELLIPSE, co.CIRCLE):
        rx = p[2]
        ry = p[2] if kind == co.CIRCLE else p[3]
        return (u / rx) ** 2 + (v / ry) ** 2 <= 1
    if kind == co.ROTATED_RECTANGLE:
        return (u.abs() <= p[2] / 2) & (v.abs() <= p[3] / 2)
    if kind == co.RECTANGLE:
        return ((x - p[0]) * (x - p[2]) <= 0) & ((y - p[1]) * (y - p[3]) <= 0)
    if kind == co.QUADRATIC:
        vertices = co_shapes._stroke_outline(p[None].float())[0].double()
    else:
        vertices = p[:6].view(3, 2) if kind == co.TRIANGLE else p.view(4, 2)
    winding = torch.zeros(height, width, dtype=torch.long)
    for (x0, y0), (x1, y1) in zip(vertices.tolist(), vertices.roll(-1, 0).tolist(), strict=False):
        crosses = (y0 <= y) != (y1 <= y)
        at = x0 + (y - y0) * (x1 - x0) / (y1 - y0 if y1 != y0 else 1)
        winding += (crosses & (at > x)).long() * (1 if y1 > y0 else -1)
    return winding != 0


def test_crossings_match_direct_inside_test_for_every_kind():
    height, width = 40, 56
    kind, params = one_of_each()
    mask = co_search._commit_mask(kind, params, 8, height, width, tuple(range(8)))
    for k in range(8):
        reference = inside_at_centres(k, params[k], height, width)
        assert reference.sum() > 10, co.KINDS[k]
        # the direct test and the crossings may disagree only on pixel centres exactly on an edge
        assert (mask[k] != reference).sum() <= 1, co.KINDS[k]


def reference_terms(target, current, alpha):
    """Per-pixel terms of `co_shapes.Terms` and the count, float64 [H,W,T+1], computed directly."""
    d, c = (target - current)[0].double(), current[0].double()
    one = torch.ones_like(d[..., :1])
    if alpha is None:
        return torch.cat([d, c, (d * c).sum(-1, keepdim=True), (c * c).sum(-1, keepdim=True), one], -1)
    u = d + alpha * c
    return torch.cat([u, (u * u - d * d).sum(-1, keepdim=True), one], -1)


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("alpha", [None, 0.5])
def test_coverage_sums_equal_sums_over_the_mask(alpha, channels):
    target, current = scene(), scene(seed=3) * 0.7
    if channels == 4:
        target, current = transparent(target), transparent(current, seed=2)
    kind, params = one_of_each()
    terms = co_shapes._terms(target, current, alpha)
    sums, fits, needed = co_search._coverage_sums(
        terms, torch.zeros(8, dtype=torch.long), kind, params, tuple(range(8))
    )
    assert sums.dtype == torch.int64 and bool(fits.all())
    mask = co_search._commit_mask(kind, params, 8, 40, 56, tuple(range(8))).double()
    expected = torch.einsum("khw,hwt->kt", mask, reference_terms(target, current, alpha))
    assert torch.allclose(sums.double() / terms.scale, expected, atol=1e-3)
    assert torch.equal(sums[:, -1], mask.sum((1, 2)).long() * int(terms.scale))  # the pixel count, exactly
    # every family said how many row slots it needed: the rows each shape spans, at most
    assert sum(int(n) for n in needed.values()) >= int(mask.amax(2).sum())


def test_shapes_whose_rows_do_not_fit_the_slots_are_reported():
    target, current = scene(), scene(seed=3) * 0.7
    kind, params = one_of_each()
    terms = co_shapes._terms(target, current, None)
    image = torch.zeros(8, dtype=torch.long)
    enough, fits, needed = co_search._coverage_sums(terms, image, kind, params, tuple(range(8)))
    exact = {family: int(n) for family, n in needed.items()}
    again, fits, _ = co_search._coverage_sums(terms, image, kind, params, tuple(range(8)), exact)
    assert torch.equal(again, enough) and bool(fits.all())
    short = {family: n - 1 for family, n in exact.items()}
    partial, fits, _ = co_search._coverage_sums(terms, image, kind, params, tuple(range(8)), short)
    assert int(fits.sum()) == 8 - len(short)  # the last shape of each family lost its last row
    assert torch.equal(partial[fits], enough[fits]) and not torch.equal(partial, enough)
    change, _, _ = co_search.score(terms, image, kind, params, torch.full((8,), 0.5), tuple(range(8)), short)
    assert torch.equal(torch.isinf(change), ~fits)  # not scored: a search passes them over


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("fixed", [False, True])
def test_closed_form_colour_equals_brute_force_search(fixed, channels):
    """With RGBA (premultiplied), a shape paints its colour and alpha 1: the colour is the same search
    over the colour channels, the alpha channel adds to the error change."""
    target, current = scene(), scene(seed=5) * 0.5 + 0.25
    if channels == 4:
        target, current = transparent(target), transparent(current, seed=2)
    kind, params = torch.tensor([co.TRIANGLE, co.ROTATED_ELLIPSE]), one_of_each()[1][[0, 4]]
    mask = co_search._commit_mask(kind, params, 2, 40, 56, (co.TRIANGLE, co.ROTATED_ELLIPSE))
    for alpha in (0.25, 0.5, 0.9):
        terms = co_shapes._terms(target, current, alpha if fixed else None)
        alphas = torch.full((2,), alpha)
        change, colour, _ = co_search.score(
            terms, torch.zeros(2, dtype=torch.long), kind, params, alphas, (co.TRIANGLE, co.ROTATED_ELLIPSE)
        )
        assert change.dtype == torch.float32
        levels = torch.arange(256, dtype=torch.float64) / 255
        for k in range(2):
            t, cur = target[0][mask[k]].double(), current[0][mask[k]].double()  # [n,C]
            # every colour level per channel (the error is separable over channels)
            drawn = cur[None, :, :3] * (1 - alpha) + levels[:, None, None] * alpha  # [256,n,3]
            errors = ((t[None, :, :3] - drawn) ** 2).sum(1)  # [256,3]
            best = levels[errors.argmin(0)]
            assert torch.allclose(colour[k].double(), best, atol=0.5 / 255 + 1e-6), (alpha, k)
            # and the predicted error change is the real one
            paint = torch.cat([colour[k].double(), torch.ones(1, dtype=torch.float64)])[:channels]
            real = ((t - (cur * (1 - alpha) + paint * alpha)) ** 2).sum() - ((t - cur) ** 2).sum()
            assert float(change[k]) == pytest.approx(float(real), abs=1e-3)


def float64_score(seen):
    """A float64 reference of `co_search.score`: coverage masks, then the sums over them in float64 (seen
    holds the target and current images of the shape being searched)."""

    def score(terms, image, kind, params, alpha, kinds, capacity=None, live=None, layout=None):
        height, width = terms.height, terms.width
        masks = co_search._commit_mask(kind, params, kind.shape[0], height, width, kinds).double()
        per_pixel = reference_terms(seen["target"], seen["current"], None)  # [H,W,2C+3]
        sums = torch.einsum("khw,hwt->kt", masks, per_pixel)
        a, c = alpha.double(), seen["target"].shape[-1]
        sum_u = sums[:, 0:c] + a[:, None] * sums[:, c : 2 * c]
        sum_q = 2 * a * sums[:, 2 * c] + a * a * sums[:, 2 * c + 1]
        count = sums[:, 2 * c + 2]
        colour = (sum_u[:, :3] / (a * count.clamp_min(1))[:, None]).clamp(0, 1)
        paint = torch.cat([colour, torch.ones_like(colour[:, :1])], 1)[:, :c]  # RGBA paints alpha 1
        change = sum_q - 2 * a * (paint * sum_u).sum(1) + a * a * count * (paint * paint).sum(1)
        change = torch.where(co_search._valid(kind, params, kinds), change, float("inf"))
        if live is not None:
            change = torch.where(live, change, float("inf"))
        return (
            change,
            colour.float(),
            {family: torch.zeros((), dtype=torch.long) for family in co_shapes._families(kinds)},
        )

    return score


def recording_terms(monkeypatch, seen):
    """Route co_search._terms through a recorder of the images each shape is searched on, and give every
    scoring all the row slots it may need (so that no candidate is passed over)."""
    monkeypatch.setattr(co_search._Schedule, "capacity", lambda self, stage, round=0: None)
    terms = co_shapes._terms

    def record(target, current, alpha):
        seen.update(target=target, current=current)
        return terms(target, current, alpha)

    monkeypatch.setattr(co_search, "_terms", record)


@pytest.mark.parametrize("kinds", [(co.TRIANGLE,), co.kind_codes("combo")])
def test_search_picks_the_shapes_a_float64_scoring_picks(monkeypatch, kinds):
    target = scene(height=24, width=32)

    def run():
        return co.approximate(
            target, 6, kinds, alpha=128, candidates=60, mutations=12, generator=torch.Generator().manual_seed(2)
        )

    seen = {}
    recording_terms(monkeypatch, seen)
    ours = run()
    monkeypatch.setattr(co_search, "score", float64_score(seen))
    reference = run()
    assert torch.equal(ours.kind, reference.kind)
    assert torch.allclose(ours.params, reference.params, atol=1e-4)
    assert torch.equal(ours.color, reference.color) and torch.equal(ours.alpha, reference.alpha)


@pytest.mark.parametrize(
    "kinds, alpha, channels",
    [((co.TRIANGLE,), 128, 3), (co.kind_codes("combo"), 0, 3), (co.kind_codes("triangle, ellipse"), 0, 4)],
)
def test_every_score_of_a_search_equals_a_float64_scoring(monkeypatch, kinds, alpha, channels):
    """Float tolerance: the error change of a shape is a difference of sums of ~3 per pixel, so
    float32 rounding leaves about 1e-6 per covered pixel. (With a searched opacity, the sums are
    combined after summing: candidates closer than that may be ranked differently, and a search
    then goes another way.)"""
    seen, score = {}, co_search.score
    recording_terms(monkeypatch, seen)
    checked = []

    def checking_score(terms, image, kind, params, alpha, kinds, capacity=None, live=None, layout=None):
        ours = score(terms, image, kind, params, alpha, kinds, capacity, live, layout)
        expected, _, _ = float64_score(seen)(terms, image, kind, params, alpha, kinds, capacity, live)
        pixels = co_search._commit_mask(kind, params, kind.shape[0], terms.height, terms.width, kinds).sum((1, 2))
        finite = torch.isfinite(expected)
        assert torch.equal(torch.isfinite(ours[0]), finite)
        error = (ours[0].double() - expected)[finite].abs()
        assert bool((error <= 1e-6 * pixels[finite] + 1e-5).all()), float(error.max())
        checked.append(int(finite.sum()))
        return ours

    monkeypatch.setattr(co_search, "score", checking_score)
    target = scene(height=24, width=32)
    co.approximate(
        target if channels == 3 else transparent(target),
        6,
        kinds,
        alpha=alpha,
        candidates=60,
        mutations=12,
        generator=torch.Generator().manual_seed(2),
    )
    assert sum(checked) > 1000


def test_error_decreases_with_every_shape():
    target = scene()
    for kinds, alpha in (((co.TRIANGLE,), 128), (co.kind_codes("combo"), 0)):
        result = co.approximate(
            target, 25, kinds, alpha=alpha, candidates=200, mutations=40, generator=torch.Generator().manual_seed(1)
        )
        error = result.error[0]
        assert bool((error[1:] <= error[:-1]).all())
        assert float(error[-1]) < 0.5 * float(error[0])
        assert int(result.count[0]) == 25


def test_searched_alpha_varies_and_fixed_alpha_does_not():
    target = scene()
    fixed = co.approximate(target, 8, (co.CIRCLE,), alpha=200, candidates=100, mutations=20)
    assert torch.allclose(fixed.alpha[0], torch.full((8,), 200 / 255))
    searched = co.approximate(target, 8, (co.CIRCLE,), alpha=0, candidates=100, mutations=20)
    assert len(set(searched.alpha[0].tolist())) > 1


def test_seeded_search_is_deterministic():
    target = scene()

    def run(seed):
        return co.approximate(
            target,
            10,
            co.kind_codes("combo"),
            candidates=150,
            mutations=30,
            generator=torch.Generator().manual_seed(seed),
        )

    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a.params, b.params) and torch.equal(a.color, b.color) and torch.equal(a.kind, b.kind)
    assert not torch.equal(a.params, c.params)


def test_batch_images_are_searched_independently_of_each_other():
    images = torch.cat([scene(), scene(seed=9)])
    both = co.approximate(images, 6, (co.TRIANGLE,), candidates=100, mutations=20)
    assert both.params.shape == (2, 6, 8)
    assert bool((both.error[:, -1] < both.error[:, 0]).all())


def test_flat_image_stops_early_without_placing_useless_shapes():
    flat = torch.full((1, 24, 24, 3), 0.4)
    result = co.approximate(flat, 10, (co.TRIANGLE,), candidates=50, mutations=10)
    assert int(result.count[0]) == 0
    assert float(result.error[0, -1]) == pytest.approx(0.0, abs=1e-6)


def test_antialiased_coverage_matches_supersampled_reference():
    kind, params = one_of_each()
    covered = coverage(kind, params, 40, 56)
    factor = 8  # reference: point samples on an 8x finer grid, averaged
    fine = co_search._commit_mask(
        kind, co.scale_params(kind, params, factor), 8, 40 * factor, 56 * factor, tuple(range(8))
    ).float()
    reference = fine.view(8, 40, factor, 56, factor).mean((2, 4))
    assert float((covered - reference).abs().mean()) < 0.01
    assert float((covered - reference).abs().max()) < 0.2
    assert float(covered.min()) >= 0 and float(covered.max()) <= 1


def test_render_at_working_size_matches_the_searched_image():
    target = scene()
    result = co.approximate(target, 15, (co.ROTATED_ELLIPSE,), candidates=150, mutations=30)
    image, frames = co.render(result, 40, 56, 1.0, frame_every=4)
    assert frames.shape == (1, 4, 40, 56, 3)
    assert torch.equal(frames[0, -1], image[0])
    rmse_rendered = float(((image - target) ** 2).mean().sqrt())
    rmse_searched = math.sqrt(float(result.error[0, -1]) / (40 * 56 * 3))
    assert rmse_rendered == pytest.approx(rmse_searched, rel=0.15)


def test_unknown_shape_type_names_the_input():
    with pytest.raises(ValueError, match="shape_type: .*'hexagon'"):
        co.kind_codes("hexagon")
    for text in ("triangle, hexagon", "", " , "):
        with pytest.raises(ValueError, match=f"^shape_kinds: .*{text!r}"):
            co.kind_codes(text, "shape_kinds")


def test_kind_names_have_a_length_limit():
    with pytest.raises(ValueError, match=r"^shape_kinds: .*at most 256 characters, got 300 characters"):
        co.kind_codes("circle, " * 37 + "ring", "shape_kinds")
    with pytest.raises(ValueError, match=r"^shape_type: .*got None"):
        co.kind_codes(None)


def test_kinds_are_one_all_or_any_subset():
    assert co.kind_codes("circle") == (co.CIRCLE,)
    assert co.kind_codes("combo") == tuple(range(8))
    assert co.kind_codes("ellipse,triangle") == co.kind_codes(" Triangle ,  ellipse ") == (co.TRIANGLE, co.ELLIPSE)
    assert co.kind_codes("quadratic rectangle quadratic") == (co.RECTANGLE, co.QUADRATIC)
    assert co.kind_codes("triangle, combo") == tuple(range(8))


@pytest.mark.parametrize("names", ["triangle, ellipse", "rectangle, quadratic, circle", "polygon, rotated_ellipse"])
def test_a_subset_of_kinds_places_those_kinds_and_no_others(names):
    kinds = co.kind_codes(names)
    result = co.approximate(
        scene(), 24, kinds, alpha=0, candidates=200, mutations=30, generator=torch.Generator().manual_seed(5)
    )  # a seed that mixes the kinds
    assert set(result.kind[0].tolist()) <= set(kinds)
    assert len(set(result.kind[0].tolist())) > 1  # a mix, not one kind that happened to win
    error = result.error[0]
    assert int(result.count[0]) == 24 and bool((error[1:] <= error[:-1]).all())
    assert float(error[-1]) < 0.5 * float(error[0])


def test_each_shape_reports_the_canvas_drawn_so_far():
    """on_shape(done, total, canvas): the canvas is the searched image after `done` shapes, whose error
    is the one the result records (as the search predicted it from its sums)."""
    target = scene()
    canvases = []
    result = co.approximate(
        target,
        6,
        (co.TRIANGLE,),
        candidates=100,
        mutations=20,
        on_shape=lambda done, total, canvas: canvases.append((done, total, canvas)),
    )
    assert [(done, total) for done, total, _ in canvases] == [(i, 6) for i in range(1, 7)]
    for done, _, canvas in canvases:
        assert canvas.shape == target.shape
        assert float(((target - canvas) ** 2).sum()) == pytest.approx(float(result.error[0, done]), rel=1e-4)
    rendered, _ = co.render(result, 40, 56, 1.0)
    assert float((rendered - canvases[-1][2]).abs().mean()) < 0.02  # anti-aliased edges apart


@pytest.mark.parametrize(
    "kinds, alpha, size, shapes, channels",
    [
        ((co.TRIANGLE,), 128, 128, 10, 3),
        (co.kind_codes("combo"), 0, 48, 5, 3),
        (co.kind_codes("triangle, ellipse"), 128, 48, 5, 4),
    ],
)
def test_search_reads_the_device_once_per_shape_without_float64(kinds, alpha, size, shapes, channels, monkeypatch):
    """The torch path a GPU takes (on the CPU numba's loop sums coverage instead: tests/test_search_cpu.py)."""
    from opcount import OpCount

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    target = torch.rand(1, size, size, channels, generator=torch.Generator().manual_seed(0))
    with OpCount() as count:
        result = co.approximate(
            target, shapes, kinds, alpha=alpha, candidates=200, mutations=32, generator=torch.Generator().manual_seed(1)
        )
    assert int(result.count[0]) == shapes
    assert count.syncs <= shapes, count.summary()
    assert count.float64 == 0, count.summary()


@pytest.mark.parametrize("shape_type", ["triangle", "combo"])
def test_search_per_shape_budget_on_the_torch_path(shape_type, monkeypatch):
    """Issue 28's budget per shape, measured as ../shared/tools/budget.py does (128 px, 10 shapes, 200
    candidates, 32 mutations): <= 2,000 device ops, <= 1 host sync in each shape (one read: the
    status of the shape before with the kinds of this shape's parents; the first shape's a few
    climbing rounds in), no upload of host data, no float64. Was ~3,850 ops per shape with combo
    (~10.5 scoring passes of ~300 ops, the first shape's 32 climbing rounds a third of them, and
    ~450 to commit a shape) and ~1,700 with triangles; now ~1,890 and ~1,150."""
    from opcount import OpCount

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    target = torch.rand(1, 128, 128, 3, generator=torch.Generator().manual_seed(0))
    syncs = []  # host syncs so far at the end of each shape
    with OpCount() as count:
        co.approximate(
            target,
            10,
            co.kind_codes(shape_type),
            candidates=200,
            mutations=32,
            generator=torch.Generator().manual_seed(1),
            on_shape=lambda *_: syncs.append(count.syncs),
        )
    per_shape = [after - before for before, after in zip([0, *syncs], syncs, strict=False)]
    assert len(per_shape) == 10 and max(per_shape) <= 1, (per_shape, count.summary())
    assert count.uploads == 0 and count.float64 == 0, count.summary()
    assert count.launches <= 10 * 2000, count.summary()


def random_result(kinds, batch, shapes, size, channels=3, seed=0):
    """An `co.Approximation` of `shapes` random shapes of `kinds` per image (some past the edges, the
    last two of each image padding of opacity 0) in a size x size frame."""
    g = torch.Generator().manual_seed(seed)
    kind, params = co_search.random_shapes(kinds, batch * shapes, size, size, g, "cpu")
    params = co.scale_params(kind, params, 3.0) - torch.rand(batch * shapes, 1, generator=g) * size / 2
    alpha = torch.randint(1, 256, (batch, shapes), generator=g) / 255
    alpha[:, -2:] = 0
    background = torch.rand(batch, channels, generator=g)
    return co.Approximation(
        kind=kind.view(batch, shapes),
        params=params.view(batch, shapes, 8),
        color=torch.randint(0, 256, (batch, shapes, 3), generator=g) / 255,
        alpha=alpha,
        count=torch.full((batch,), shapes - 2),
        error=torch.zeros(batch, shapes + 1),
        background=background,
        height=size,
        width=size,
    )


@pytest.mark.parametrize("frame_every", [0, 2, 10])
@pytest.mark.parametrize("shape_type", ["triangle", "combo"])
def test_render_budget_on_the_torch_path(shape_type, frame_every, monkeypatch):
    """Issue 28's budget for the render of 100 shapes with up to 60 frames (every 2nd shape: 50):
    <= 300 device ops, <= 2 host syncs, <= 1 upload, no float64 (was ~10,100 ops and 301 syncs: a
    chunk per shape, each reading the device three times)."""
    from opcount import OpCount

    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    result = random_result(co.kind_codes(shape_type), 1, 100, 32)
    with OpCount() as count:
        co.render(result, 128, 128, 4.0, frame_every=frame_every)
    assert count.launches <= 300 and count.syncs <= 2 and count.uploads <= 1, count.summary()
    assert count.float64 == 0, count.summary()


def composited_one_at_a_time(result, height, width, frame_every):
    """Reference of `co.render`: each shape's coverage alone, composited source-over one shape after
    the other: image [B,H,W,C] and frames [B,F,H,W,C]."""
    batch, total = result.kind.shape
    covered = coverage(result.kind.reshape(-1), result.params.reshape(-1, 8), height, width).view(
        batch, total, height, width
    )
    paint = co_shapes._paint(result.color, result.background.shape[1])
    image = result.background[:, None, None, :].expand(batch, height, width, -1)
    frames = []
    for n in range(total):
        a = (covered[:, n] * result.alpha[:, n, None, None])[..., None]
        image = image * (1 - a) + a * paint[:, n, None, None, :]
        if frame_every and ((n + 1) % frame_every == 0 or n + 1 == total):
            frames.append(image.clamp(0, 1))
    return image.clamp(0, 1), torch.stack(frames, 1) if frames else None


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("frame_every", [0, 1, 3])
@pytest.mark.parametrize("memory", [None, 3e5])
def test_render_equals_compositing_one_shape_at_a_time(channels, frame_every, memory, monkeypatch):
    """The render composites chunks of shapes at once (products of transmittances, frames by a scan):
    within float rounding (1e-6) of one shape at a time, and so when little memory splits the work
    into chunks of a few shapes and blocks of rows."""
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    if memory is not None:
        monkeypatch.setattr(co_render, "free_memory_bytes", lambda device: memory)
    result = random_result(tuple(range(8)), 2, 13, 24, channels)
    chunks = []
    image, frames = co.render(result, 48, 40, 2.0, frame_every, on_chunk=lambda done, total: chunks.append(done))
    expected_image, expected_frames = composited_one_at_a_time(
        co.Approximation(**{**result.__dict__, "params": co.scale_params(result.kind, result.params, 2.0)}),
        48,
        40,
        frame_every,
    )
    assert float((image - expected_image).abs().max()) <= 1e-6
    if frame_every:
        assert frames.shape == expected_frames.shape == (2, math.ceil(13 / frame_every), 48, 40, channels)
        assert float((frames - expected_frames).abs().max()) <= 1e-6
        assert torch.equal(frames[:, -1], image)
    else:
        assert frames is None
    assert chunks[-1] == 13 and (len(chunks) > 3) == (memory is not None)


def test_render_plan_splits_rows_where_one_shape_does_not_fit():
    """Shapes whose layers alone exceed the memory budget are drawn in blocks of rows, each block with
    the exact count of its shapes' sample rows (the output size of the rows' expansion: no host read)."""
    result = random_result((co.TRIANGLE, co.ELLIPSE), 2, 6, 24)
    shapes = co_render._outlines(
        result.kind.reshape(-1), result.params.reshape(-1, 8), result.alpha.reshape(-1), 48, 48
    )
    first, count, family = torch.stack([shapes.first, shapes.count, shapes.family]).tolist()
    plan = co_render._render_plan(first, count, family, 2, 6, 48, 48, 3, 4, shapes.outline.shape[1], 1e4)
    # one drawn shape per chunk (the padding of opacity 0 costs nothing), some in several blocks
    assert [(c.start, c.stop) for c in plan] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6)]
    assert any(len(c.blocks) > 1 for c in plan)
    for chunk in plan:
        for row, rows, samples in chunk.blocks:
            lo, hi = row * co_shapes.SUBROWS, (row + rows) * co_shapes.SUBROWS
            expected = sum(
                max(0, min(first[i] + count[i], hi) - max(first[i], lo))
                for b in range(2)
                for i in range(b * 6 + chunk.start, b * 6 + chunk.stop)
            )
            assert samples == expected


def with_fields(result, **fields):
    return co.Approximation(**{**result.__dict__, **fields})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_render_takes_any_float_dtype_grad_and_strides(dtype, monkeypatch):
    """Issue 28: the result's tensors of any float dtype (converted once), requiring grad (detached),
    or strided, render as their float32 values do."""
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    result = random_result(tuple(range(8)), 2, 6, 24, channels=4)
    odd = {name: getattr(result, name).to(dtype) for name in ("params", "color", "alpha", "background")}
    odd["params"] = odd["params"].transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    odd["kind"] = result.kind.to(torch.int32)
    expected = co.render(
        with_fields(result, **{k: v.detach().float() for k, v in odd.items() if k != "kind"}), 30, 30, 1.5, 2
    )
    got = co.render(with_fields(result, **odd), 30, 30, 1.5, 2)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert not got[0].requires_grad


def refusals(result):
    """(arguments of render, the input its ValueError must name) for bad inputs."""
    batch, shapes = result.kind.shape
    return [
        ((with_fields(result, background=torch.zeros(batch, 2)), 8, 8, 1.0), "result.background"),
        ((with_fields(result, params=torch.zeros(batch, shapes, 7)), 8, 8, 1.0), "result.params"),
        ((with_fields(result, color=torch.zeros(batch, shapes, 3, dtype=torch.uint8)), 8, 8, 1.0), "result.color"),
        ((with_fields(result, alpha=torch.zeros(batch + 1, shapes)), 8, 8, 1.0), "result.alpha"),
        ((with_fields(result, kind=result.kind.float()), 8, 8, 1.0), "result.kind"),
        ((object(), 8, 8, 1.0), "result"),
        ((result, 0, 8, 1.0), "height"),
        ((result, 8, 2**31, 1.0), "width"),
        ((result, 8, 8, float("nan")), "scale"),
        ((result, 8, 8, 1.0, -1), "frame_every"),
    ]


def test_render_refuses_bad_inputs_naming_them(monkeypatch):
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    result = random_result((co.TRIANGLE,), 1, 3, 16)
    unknown = with_fields(result, kind=result.kind + len(co.KINDS))
    for args, name in refusals(result) + [((unknown, 8, 8, 1.0), "result.kind")]:
        with pytest.raises(ValueError, match=f"^{name}: "):
            co.render(*args)


def test_render_of_no_shapes_or_no_images(monkeypatch):
    """Zero sizes: no shapes give the background (and no frames), no images empty outputs."""
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    result = random_result((co.TRIANGLE,), 2, 3, 16)
    empty = with_fields(result, **{name: getattr(result, name)[:, :0] for name in ("kind", "params", "color", "alpha")})
    image, frames = co.render(empty, 8, 6, 1.0, 2)
    assert torch.equal(image, result.background[:, None, None].expand(2, 8, 6, 3)) and frames.shape == (2, 0, 8, 6, 3)
    nothing = with_fields(
        result, **{name: getattr(result, name)[:0] for name in ("kind", "params", "color", "alpha", "background")}
    )
    image, frames = co.render(nothing, 8, 6, 1.0, 2)
    assert image.shape == (0, 8, 6, 3) and frames.shape == (0, 2, 8, 6, 3)


def test_a_background_of_another_shape_is_named():
    with pytest.raises(ValueError, match=r"^background: expected a float tensor \[1,3\]"):
        co.approximate(scene(), 1, (co.TRIANGLE,), background=torch.zeros(1, 4))


@pytest.mark.parametrize("numba", ["", "1"])
def test_a_large_round_checks_interrupts_between_parts(numba, monkeypatch):
    """Issue 29: a climbing round at 2048 px and 10,000 mutations took up to 27 s in one piece. Rounds
    past PART_ROWS row slots are scored in parts, on_round() between them (here forced by a small
    PART_ROWS); the first shape, whose slots hold every row, finds the same shape either way; what
    on_round raises stops the search within the round."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", numba)
    run = lambda on_round: co.approximate(  # noqa: E731
        scene(),
        1,
        co.kind_codes("triangle, ellipse"),
        candidates=50,  # noqa
        mutations=40,
        generator=torch.Generator().manual_seed(3),
        on_round=on_round,
    )
    whole_calls, part_calls = [], []
    whole = run(lambda: whole_calls.append(1))
    monkeypatch.setattr(co_search, "PART_ROWS", 2000)  # 16 parents x 40 mutations x 40 rows: 13 parts a round
    parts = run(lambda: part_calls.append(1))
    assert torch.equal(parts.params, whole.params) and torch.equal(parts.color, whole.color)
    # at least 12 more checks in every round after the first (the random candidates' pass may add one)
    assert len(part_calls) >= len(whole_calls) + 12 * (len(whole_calls) - 1)
    calls = []

    def stop():
        calls.append(1)
        if len(calls) == 3:
            raise InterruptedError

    with pytest.raises(InterruptedError):
        run(stop)


@pytest.mark.parametrize("shape_type", ["triangle", "combo"])
def test_a_raising_round_callback_stops_the_search_within_a_round(shape_type):
    """Issue 29: one shape at mutations 10000 took minutes between interrupt checks. on_round is called
    after the random candidates and after every climbing round; what it raises stops the search there."""
    import time

    calls = []

    def stop():
        calls.append(time.perf_counter())
        if len(calls) == 3:
            raise InterruptedError

    start = time.perf_counter()
    with pytest.raises(InterruptedError):
        co.approximate(
            scene(),
            3,
            co.kind_codes(shape_type),
            candidates=200,
            mutations=10000,
            on_round=stop,
            generator=torch.Generator().manual_seed(0),
        )
    assert len(calls) == 3
    assert time.perf_counter() - start < 30  # two climbing rounds of 16 x 10,000 moves at 56 px (~1 s each)


def test_any_float_target_is_searched_as_float32_and_bad_targets_are_named():
    target = scene(16, 20)

    def run(t):
        return co.approximate(
            t, 3, (co.TRIANGLE,), candidates=30, mutations=6, generator=torch.Generator().manual_seed(2)
        )

    reference = run(target)
    for variant in (target.double(), target.clone().requires_grad_(True)):
        assert torch.equal(run(variant).params, reference.params)
    assert run(target.half()).params.dtype == torch.float32
    for bad in (target[..., :2], target[:0], (target * 255).to(torch.uint8), target[0], "image"):
        with pytest.raises(ValueError, match="^target: expected"):
            run(bad)
    with pytest.raises(ValueError, match="^mutations: expected an integer >= 1, got 0"):
        co.approximate(target, 3, (co.TRIANGLE,), mutations=0)


def test_a_search_with_few_row_slots_still_improves_every_shape(monkeypatch):
    target = scene()
    start = co_search._Schedule.__init__

    def cramped(self, *args):
        start(self, *args)
        self.slots = {group: 64 for group in self.slots}  # far too few for the first shape

    monkeypatch.setattr(co_search._Schedule, "__init__", cramped)
    run = lambda: co.approximate(  # noqa: E731
        target,
        8,
        co.kind_codes("combo"),
        alpha=0,
        candidates=80,
        mutations=16,  # noqa: E731
        generator=torch.Generator().manual_seed(4),
    )
    first, second = run(), run()
    assert torch.equal(first.params, second.params)
    assert int(first.count[0]) == 8 and bool((first.error[0, 1:] < first.error[0, :-1]).all())


ROTATED = torch.tensor(
    [  # cx cy width height angle: wide and tall, turned both ways and past 90 degrees
        [20.5, 20.2, 22.0, 9.5, 33.0],
        [30.1, 18.7, 6.5, 26.0, -70.0],
        [27.3, 21.9, 30.0, 4.5, 121.0],
        [25.0, 19.0, 17.0, 11.0, 200.0],
    ]
)


def test_rotated_rectangles_are_the_polygons_their_parameters_describe():
    """Centre, width along the shape's x axis, height, turned clockwise on screen (x right, y down) about
    the centre: the search's mask and the anti-aliased render against a direct inside test."""
    params = torch.cat([ROTATED, torch.zeros(4, 3)], 1)
    kind = torch.full((4,), co.ROTATED_RECTANGLE)
    mask = co_search._commit_mask(kind, params, 4, 40, 56, (co.ROTATED_RECTANGLE,))
    covered = coverage(kind, params, 40, 56)
    factor = 8
    fine = torch.stack(
        [
            inside_at_centres(
                co.ROTATED_RECTANGLE, co.scale_params(kind[k], params[k], factor), 40 * factor, 56 * factor
            )
            for k in range(4)
        ]
    ).float()
    supersampled = fine.view(4, 40, factor, 56, factor).mean((2, 4))
    for k in range(4):
        assert (mask[k] != inside_at_centres(co.ROTATED_RECTANGLE, params[k], 40, 56)).sum() <= 1, k
        error = (covered[k] - supersampled[k]).abs()
        assert float(error.mean()) < 0.01 and float(error.max()) < 0.2, k
    # clockwise on screen: 33 degrees turns the long side's right end downwards
    cx, cy, half = 20.5, 20.2, 9.0
    assert bool(mask[0, int(cy + half * math.sin(math.radians(33))), int(cx + half * math.cos(math.radians(33)))])
    assert not bool(mask[0, int(cy - half * math.sin(math.radians(33))), int(cx + half * math.cos(math.radians(33)))])


def test_rgba_search_fits_the_transparency_and_renders_what_it_searched():
    """A transparent background (premultiplied RGBA, alpha 0): shapes build up colour and coverage where
    the target has them; the anti-aliased render at working size is the searched image."""
    target = transparent(scene())
    result = co.approximate(
        target,
        25,
        co.kind_codes("triangle, rotated_ellipse"),
        alpha=0,
        candidates=200,
        mutations=30,
        background=torch.zeros(1, 4),
        generator=torch.Generator().manual_seed(1),
    )
    assert result.background.shape == (1, 4) and result.color.shape == (1, 25, 3)
    error = result.error[0]
    assert bool((error[1:] <= error[:-1]).all()) and float(error[-1]) < 0.3 * float(error[0])
    image, frames = co.render(result, 40, 56, 1.0, frame_every=5)
    assert image.shape == (1, 40, 56, 4) and frames.shape == (1, 5, 40, 56, 4)
    assert bool((image[..., :3] <= image[..., 3:] + 1e-6).all())  # premultiplied
    rmse_rendered = float(((image - target) ** 2).mean().sqrt())
    assert rmse_rendered == pytest.approx(math.sqrt(float(error[-1]) / (40 * 56 * 4)), rel=0.15)
    assert float((image[..., 3] - target[..., 3]).abs().mean()) < 0.3 * float(target[..., 3].mean())  # from clear
    assert 'fill-opacity="0"/>' in co.svg(result, 0, 40, 56, 1.0).splitlines()[1]
