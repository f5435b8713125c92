"""The primitive-approximation engine: coverage from row crossings, closed-form colours, the search, AA render."""
import math

import pytest
import torch

from rasterkit.utils import color_optimizer as co


def scene(height=40, width=56, seed=0):
    """A smooth generated picture with a few blobs, float [1,H,W,3]."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(height, dtype=torch.float32)[:, None]
    x = torch.arange(width, dtype=torch.float32)[None, :]
    image = torch.stack([0.3 + 0.4 * x / width + 0 * y, 0.2 + 0.5 * y / height + 0 * x, 0.5 + 0 * x + 0 * y], -1)
    for _ in range(4):
        cx, cy, r = torch.rand(3, generator=g) * torch.tensor([width, height, 12.0]) + torch.tensor([0, 0, 4.0])
        colour = torch.rand(3, generator=g)
        blob = (((x - cx) ** 2 + (y - cy) ** 2) < r ** 2).float()[..., None]
        image = image * (1 - blob) + colour * blob
    return image[None]


def one_of_each():
    """One shape of every kind, kind [8] and params [8,8], inside a 40 x 56 frame."""
    params = torch.tensor([
        [5.2, 4.1, 30.7, 9.3, 12.4, 33.8, 0, 0],            # triangle
        [40.3, 3.6, 52.2, 17.9, 0, 0, 0, 0],                # rectangle
        [20.5, 20.2, 22.0, 9.5, 33.0, 0, 0, 0],             # rotated rectangle
        [44.1, 29.7, 8.3, 6.2, 0, 0, 0, 0],                 # ellipse
        [15.3, 27.9, 11.7, 4.4, -25.0, 0, 0, 0],            # rotated ellipse
        [30.2, 30.6, 7.3, 0, 0, 0, 0, 0],                   # circle
        [3.0, 36.0, 28.0, 14.0, 53.0, 37.0, 3.5, 0],         # quadratic
        [8.0, 8.0, 48.0, 12.0, 20.0, 20.0, 44.0, 34.0],     # polygon (concave)
    ])
    return torch.arange(8), params


def inside_at_centres(kind, p, height, width):
    """Reference point-sampled coverage [H,W] of one shape, by a direct test at each pixel centre."""
    y, x = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
    x, y = x.double(), y.double()
    p = p.double()
    if kind in (co.ELLIPSE, co.ROTATED_ELLIPSE, co.CIRCLE):
        rx = p[2]
        ry = p[2] if kind == co.CIRCLE else p[3]
        angle = math.radians(float(p[4])) if kind == co.ROTATED_ELLIPSE else 0.0
        dx, dy = x - p[0], y - p[1]
        u = dx * math.cos(angle) + dy * math.sin(angle)
        v = -dx * math.sin(angle) + dy * math.cos(angle)
        return (u / rx) ** 2 + (v / ry) ** 2 <= 1
    if kind == co.QUADRATIC:
        vertices = co._stroke_outline(p[None].float())[0].double()
    else:
        vertices = co._polygon4(torch.tensor([kind]), p[None].float(), (kind,))[0].double()
    winding = torch.zeros(height, width, dtype=torch.long)
    for (x0, y0), (x1, y1) in zip(vertices.tolist(), vertices.roll(-1, 0).tolist()):
        crosses = (y0 <= y) != (y1 <= y)
        at = x0 + (y - y0) * (x1 - x0) / (y1 - y0 if y1 != y0 else 1)
        winding += (crosses & (at > x)).long() * (1 if y1 > y0 else -1)
    return winding != 0


def test_crossings_match_direct_inside_test_for_every_kind():
    height, width = 40, 56
    kind, params = one_of_each()
    mask = co._commit_mask(kind, params, 8, height, width, tuple(range(8)))
    for k in range(8):
        reference = inside_at_centres(k, params[k], height, width)
        assert reference.sum() > 10, co.KINDS[k]
        # the direct test and the crossings may disagree only on pixel centres exactly on an edge
        assert (mask[k] != reference).sum() <= 1, co.KINDS[k]


def test_coverage_sums_equal_sums_over_the_mask():
    target, current = scene(), scene(seed=3) * 0.7
    kind, params = one_of_each()
    prefix = co._prefix_table(target, current)
    sums = co._coverage_sums(prefix, torch.zeros(8, dtype=torch.long), kind, params, tuple(range(8)))
    mask = co._commit_mask(kind, params, 8, 40, 56, tuple(range(8))).double()
    d, c = (target - current)[0].double(), current[0].double()
    terms = torch.cat([d, c, (d * c).sum(-1, keepdim=True), (c * c).sum(-1, keepdim=True), torch.ones_like(d[..., :1])], -1)
    expected = torch.einsum("khw,hwt->kt", mask, terms)
    assert torch.allclose(sums, expected, atol=1e-3)


def test_closed_form_colour_equals_brute_force_search():
    target, current = scene(), scene(seed=5) * 0.5 + 0.25
    kind, params = torch.tensor([co.TRIANGLE, co.ROTATED_ELLIPSE]), one_of_each()[1][[0, 4]]
    prefix = co._prefix_table(target, current)
    mask = co._commit_mask(kind, params, 2, 40, 56, (co.TRIANGLE, co.ROTATED_ELLIPSE))
    for alpha in (0.25, 0.5, 0.9):
        alphas = torch.full((2,), alpha)
        change, colour = co.score(prefix, torch.zeros(2, dtype=torch.long), kind, params, alphas,
                                  (co.TRIANGLE, co.ROTATED_ELLIPSE))
        levels = torch.arange(256, dtype=torch.float64) / 255
        for k in range(2):
            t, cur = target[0][mask[k]].double(), current[0][mask[k]].double()  # [n,3]
            # every colour level per channel (the error is separable over channels)
            drawn = cur[None] * (1 - alpha) + levels[:, None, None] * alpha  # [256,n,3]
            errors = ((t[None] - drawn) ** 2).sum(1)  # [256,3]
            best = levels[errors.argmin(0)]
            assert torch.allclose(colour[k], best, atol=0.5 / 255 + 1e-9), (alpha, k)
            # and the predicted error change is the real one
            real = ((t - (cur * (1 - alpha) + colour[k] * alpha)) ** 2).sum() - ((t - cur) ** 2).sum()
            assert float(change[k]) == pytest.approx(float(real), abs=1e-3)


def test_error_decreases_with_every_shape():
    target = scene()
    for kinds, alpha in (((co.TRIANGLE,), 128), (co.kind_codes("combo"), 0)):
        result = co.approximate(target, 25, kinds, alpha=alpha, candidates=200, mutations=40,
                                generator=torch.Generator().manual_seed(1))
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
    run = lambda seed: co.approximate(target, 10, co.kind_codes("combo"), candidates=150, mutations=30,  # noqa: E731
                                      generator=torch.Generator().manual_seed(seed))
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
    coverage = co._coverage(kind, params, 40, 56)
    factor = 8  # reference: point samples on an 8x finer grid, averaged
    fine = co._commit_mask(kind, co.scale_params(kind, params, factor), 8, 40 * factor, 56 * factor,
                           tuple(range(8))).float()
    reference = fine.view(8, 40, factor, 56, factor).mean((2, 4))
    assert float((coverage - reference).abs().mean()) < 0.01
    assert float((coverage - reference).abs().max()) < 0.2
    assert float(coverage.min()) >= 0 and float(coverage.max()) <= 1


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
