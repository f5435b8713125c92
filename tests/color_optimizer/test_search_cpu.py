"""utils/color_optimizer/search_cpu (numba's coverage sums, what PrimitiveMesh's search runs on the CPU)
against the torch path's slots and gathers: the same exact integer sums, the same shapes that fit the
slots and the same slots needed, so a search picks the same shapes."""

import pytest
import torch

from rasterkit.utils import color_optimizer as co
from rasterkit.utils.color_optimizer import search as co_search
from rasterkit.utils.color_optimizer import search_cpu
from rasterkit.utils.color_optimizer import shapes as co_shapes


@pytest.mark.parametrize(
    "kinds",
    [
        co.kind_codes("combo"),
        co.kind_codes("triangle"),
        co.kind_codes("ellipse, rotated_rectangle, circle, rectangle, rotated_ellipse"),
    ],
)
@pytest.mark.parametrize("alpha, channels", [(0.5, 3), (None, 3), (0.5, 4)])
def test_the_loop_sums_what_the_slots_sum(torch_path, kinds, alpha, channels):
    g = torch.Generator().manual_seed(len(kinds) + channels)
    target, current = torch.rand(2, 37, 53, channels, generator=g), torch.rand(2, 37, 53, channels, generator=g)
    terms = co_shapes._terms(target, current, alpha)
    kind, params = co_search.random_shapes(kinds, 300, 37, 53, g, "cpu")
    params[:20, :2] *= 3  # some shapes off the frame
    image, live = torch.randint(0, 2, (300,), generator=g), torch.rand(300, generator=g) > 0.1
    capacity = {family: 300 for family in range(4)}  # too few slots for some: their sums are not used
    expected = torch_path(co_search._coverage_sums, terms, image, kind, params, kinds, capacity, live)
    got = co_search._coverage_sums(terms, image, kind, params, kinds, capacity, live)
    assert torch.equal(got[1], expected[1]) and not bool(got[1].all())
    assert {f: int(n) for f, n in got[2].items()} == {f: int(n) for f, n in expected[2].items()}
    assert torch.equal(got[0][got[1]], expected[0][expected[1]])
    assert got[0][got[1]][:, -1].sum() > 1000  # pixels were counted


def test_a_search_picks_the_same_shapes(torch_path):
    target = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(5))

    def run():
        return co.approximate(
            target,
            6,
            co.kind_codes("combo"),
            alpha=128,
            candidates=150,
            mutations=24,
            generator=torch.Generator().manual_seed(2),
        )

    got, expected = run(), torch_path(run)
    assert torch.equal(got.kind, expected.kind) and torch.equal(got.params, expected.params)


def test_the_loop_is_used_for_convex_shapes_and_ellipses(monkeypatch):
    used, sums = [], search_cpu.coverage_sums
    monkeypatch.setattr(search_cpu, "coverage_sums", lambda *a, **k: used.append(a[5]) or sums(*a, **k))
    target = torch.rand(1, 24, 24, 3, generator=torch.Generator().manual_seed(1))
    terms = co_shapes._terms(target, torch.zeros_like(target), 0.5)
    kind, params = co_search.random_shapes(co.kind_codes("combo"), 50, 24, 24, torch.Generator().manual_seed(3), "cpu")
    co_search.score(
        terms, torch.zeros(50, dtype=torch.long), kind, params, torch.full((50,), 0.5), co.kind_codes("combo")
    )
    assert sorted(used) == [False, True]  # convex, elliptic; the curves' strokes keep the torch path
