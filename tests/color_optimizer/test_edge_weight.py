"""PrimitiveMesh's edge-weighted error (issue 34): the weights, the weighted sums against float64, the
search on the torch path and on the CUDA kernels (emulated), and 0 as before."""

import pytest
import torch

from primitive_scenes import scene, transparent
from rasterkit.utils import color_optimizer as co
from rasterkit.utils.color_optimizer import search as co_search
from rasterkit.utils.color_optimizer import search_cuda as K
from rasterkit.utils.color_optimizer import shapes as co_shapes


def test_edge_weights_are_one_plus_strength_on_edges_and_one_on_flat_ground():
    image = torch.full((1, 32, 40, 3), 0.2)
    image[:, :, 20:] = 0.8  # one upright edge between columns 19 and 20
    weights = co_shapes.edge_weights(image, 2.0)
    assert weights.shape == (1, 32, 40)
    assert torch.equal(weights[0, :, 19:21], torch.full((32, 2), 3.0))
    # flat ground: 1 (to float rounding of the convolution)
    assert torch.allclose(weights[0, :, :18], torch.ones(32, 18)) and torch.allclose(
        weights[0, :, 22:], torch.ones(32, 18)
    )
    faint = image.clone()
    faint[:, :, 20:] = 0.2 + 2 / 255  # a step of 2 levels: below the floor, in proportion
    assert torch.allclose(co_shapes.edge_weights(faint, 2.0)[0, :, 19], torch.full((32,), 1 + 2 * 2 / 5))
    flat = co_shapes.edge_weights(torch.full((2, 8, 8, 4), 0.5), 1.5)  # no edges (RGBA: colour channels)
    assert torch.allclose(flat, torch.ones(2, 8, 8))


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("alpha", [None, 0.5])
def test_weighted_sums_equal_float64_sums_over_the_mask(alpha, channels):
    target, current = scene(), scene(seed=3) * 0.7
    if channels == 4:
        target, current = transparent(target), transparent(current, seed=2)
    weight = co_shapes.edge_weights(target, 3.0)
    terms = co_shapes._terms(target, current, alpha, weight, 4.0)
    kinds = tuple(range(len(co.KINDS)))
    kind, params = co_search.random_shapes(kinds, 300, 40, 56, torch.Generator().manual_seed(1), "cpu")
    params = co.scale_params(kind, params, 2.0)
    sums, fits, _ = co_search._coverage_sums(terms, torch.zeros(300, dtype=torch.long), kind, params, kinds)
    assert bool(fits.all())
    mask = co_search._commit_mask(kind, params, 300, 40, 56, kinds).double()
    d, c = (target - current)[0].double(), current[0].double()
    if alpha is None:
        per_pixel = [d, c, (d * c).sum(-1, keepdim=True), (c * c).sum(-1, keepdim=True)]
    else:
        u = d + alpha * c
        per_pixel = [u, (u * u - d * d).sum(-1, keepdim=True)]
    per_pixel = torch.cat(per_pixel + [torch.ones_like(d[..., :1])], -1) * weight[0].double()[..., None]
    expected = torch.einsum("khw,hwt->kt", mask, per_pixel)
    assert torch.allclose(sums.double() / terms.scale, expected, atol=2e-3)


def test_a_weighted_search_records_the_weighted_error_and_sharpens_the_edges():
    """The weighted search's record is the weighted error; over three seeds (a greedy random search
    on a small scene varies from seed to seed), its error on the edge pixels (the strongest 12%) is
    lower than the unweighted search's."""
    target = scene(48, 64, seed=2)
    weight = co_shapes.edge_weights(target, 3.0)[..., None]
    edge = (weight > 2.5).float()

    def edge_rmse(seed, edge_weight):
        result = co.approximate(
            target,
            20,
            (co.TRIANGLE,),
            candidates=200,
            mutations=40,
            generator=torch.Generator().manual_seed(seed),
            edge_weight=edge_weight,
        )
        if edge_weight:
            start = (((target - result.background[:, None, None]) ** 2) * weight).sum()
            assert float(result.error[0, 0]) == pytest.approx(float(start), rel=1e-5)
            assert bool((result.error[0, 1:] <= result.error[0, :-1]).all())
        image, _ = co.render(result, 48, 64, 1.0)
        return float((((image - target) ** 2) * edge).sum() / edge.sum()) ** 0.5

    assert 0.05 < float(edge.mean()) < 0.2
    plain = sum(edge_rmse(seed, 0.0) for seed in range(3))
    weighted = sum(edge_rmse(seed, 3.0) for seed in range(3))
    assert weighted < 0.97 * plain


def test_edge_weight_0_is_the_unweighted_search_and_bad_values_are_named():
    def run(**options):
        return co.approximate(
            scene(),
            4,
            (co.ELLIPSE,),
            candidates=60,
            mutations=12,
            generator=torch.Generator().manual_seed(0),
            **options,
        )

    plain = run()
    assert torch.equal(run(edge_weight=0.0).params, plain.params)
    assert not torch.equal(run(edge_weight=2.0).params, plain.params)
    for bad in (-1.0, float("nan"), 101, "2", True):
        with pytest.raises(ValueError, match="^edge_weight: expected a number in 0..100"):
            run(edge_weight=bad)


@pytest.mark.parametrize("channels, alpha", [(3, 128), (4, 0)])
def test_kernel_commit_rebuilds_the_weighted_prefix_sums(kernel_device, channels, alpha):
    """The CUDA kernels (emulated on the CPU) score and commit with the torch path's weighted terms."""
    device = kernel_device
    frames = [scene(24, 32, seed) for seed in range(2)]
    if channels == 4:
        frames = [transparent(frame, seed) for seed, frame in enumerate(frames)]
    target = torch.cat(frames).to(device)
    s = K.Search(
        target, 4, (co.TRIANGLE, co.LINE), alpha, 48, 12, None, torch.Generator(device).manual_seed(0), None, 2.5
    )
    weighting = (co_shapes.edge_weights(s.target, 2.5), 3.5)
    terms = co_shapes._terms(s.target, s.current, None if s.searched else s.start_alpha, *weighting)
    assert torch.equal(s.prefix, terms.prefix)
    s.random(0)
    image = torch.arange(s.cand_kind.shape[0], device=device) // s.candidates
    expected, _, _ = co_search.score(terms, image, s.cand_kind.long(), s.cand_params, s.cand_alpha, s.kinds)
    finite = torch.isfinite(expected)
    assert torch.allclose(s.cand_change[finite], expected[finite], rtol=1e-4, atol=1e-4)
    s.climb(0)
    s.commit(0)
    terms = co_shapes._terms(s.target, s.current, None if s.searched else s.start_alpha, *weighting)
    assert (s.prefix - terms.prefix).abs().max() <= 2
