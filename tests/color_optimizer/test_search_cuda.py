"""PrimitiveMesh's search kernels (utils/color_optimizer/search_cuda.py) against the torch path: on a
real GPU (-m gpu) and on the CPU through tests/cuda_emulator.py (fails, never skips, without a compiler).

The kernels draw their own random numbers, so they are checked step by step against what the torch
path computes for the same shapes: every score, colour and sum, the painted pixels and the rebuilt
prefix sums; and a whole search is checked for quality against the torch path's."""

import pytest
import torch

from primitive_scenes import scene, transparent
from rasterkit.utils import color_optimizer as co
from rasterkit.utils.color_optimizer import search as co_search
from rasterkit.utils.color_optimizer import search_cuda as K
from rasterkit.utils.color_optimizer import shapes as co_shapes

ALL = tuple(range(len(co.KINDS)))


@pytest.fixture
def device(kernel_device):
    return kernel_device


def images(channels, device, batch=2, height=24, width=32):
    """A batch of different small scenes, RGB or premultiplied RGBA."""
    frames = [scene(height, width, seed) for seed in range(batch)]
    if channels == 4:
        frames = [transparent(frame, seed) for seed, frame in enumerate(frames)]
    return torch.cat(frames).to(device)


def search(device, channels=3, alpha=128, kinds=ALL, candidates=48, mutations=12, shapes=4, seed=0):
    target = images(channels, device)
    generator = torch.Generator(device=device).manual_seed(seed)
    return K.Search(target, shapes, kinds, alpha, candidates, mutations, None, generator)


def torch_score(s, image, kind, params, alpha):
    """The torch path's error change [K] and colour [K,3] of shapes on the search's current terms."""
    terms = co_shapes._terms(s.target, s.current, None if s.searched else s.start_alpha)
    change, color, _ = co_search.score(terms, image, kind.long(), params, alpha, s.kinds)
    return change, color


@pytest.mark.parametrize("channels, alpha", [(3, 128), (3, 0), (4, 200), (4, 0)])
def test_random_candidates_score_as_the_torch_path_scores_them(device, channels, alpha):
    s = search(device, channels, alpha)
    s.random(0)
    assert set(s.cand_kind.tolist()) == set(ALL)  # every kind drawn
    image = torch.arange(s.cand_kind.shape[0], device=device) // s.candidates
    expected, _ = torch_score(s, image, s.cand_kind, s.cand_params, s.cand_alpha)
    finite = torch.isfinite(expected)
    assert torch.equal(finite, torch.isfinite(s.cand_change))  # the same invalid Beziers
    assert torch.allclose(s.cand_change[finite], expected[finite], rtol=1e-4, atol=1e-4)
    assert (s.cand_change[finite] < 0).any()  # some candidates improve the image


@pytest.mark.parametrize("channels, alpha", [(3, 128), (4, 0)])
def test_climbs_start_from_the_best_candidates_and_only_improve(device, channels, alpha):
    s = search(device, channels, alpha)
    s.random(0)
    s.climb(0)
    start = s.cand_change.view(2, -1).sort(1).values[:, : s.parents].reshape(-1)
    assert (s.climb_change <= start).all()
    assert (s.climb_change < start).any()  # the climbs go somewhere
    # each climb's change is the torch path's score of where it ended
    image = torch.arange(s.climb_kind.shape[0], device=device) // s.parents
    expected, _ = torch_score(s, image, s.climb_kind, s.climb_params, s.climb_alpha)
    assert torch.allclose(s.climb_change, expected, rtol=1e-4, atol=1e-4)
    low, high = s.bounds[s.climb_kind.long()].unbind(1)
    assert ((s.climb_params >= low - 1e-4) & (s.climb_params <= high + 1e-4)).all()


@pytest.mark.parametrize("channels, alpha", [(3, 128), (3, 0), (4, 0)])
def test_climbs_report_the_torch_paths_quantised_colour_and_change(device, channels, alpha):
    s = search(device, channels, alpha)
    s.random(0)
    s.climb(0)
    assert torch.equal(s.climb_alpha, (s.climb_alpha * 255).round() / 255)
    image = torch.arange(s.climb_kind.shape[0], device=device) // s.parents
    terms = co_shapes._terms(s.target, s.current, None if s.searched else s.start_alpha)
    sums, _, _ = co_search._coverage_sums(terms, image, s.climb_kind.long(), s.climb_params, s.kinds)
    opacity_sums = co_search._opacity_sums(terms, sums, s.climb_alpha)
    color = (co_search.optimal_colors(opacity_sums, s.climb_alpha) * 255).round() / 255
    change = co_search._error_change(opacity_sums, color, s.climb_alpha)
    assert torch.allclose(s.climb_color, color, atol=1 / 255 + 1e-6)
    assert (s.climb_color != color).float().mean() < 0.05  # 8-bit rounding ties at most
    assert torch.allclose(s.climb_quantised, change, rtol=1e-3, atol=1e-3)
    assert torch.allclose(s.climb_count, sums[:, -1].float() / terms.scale)


@pytest.mark.parametrize("channels, alpha", [(3, 128), (4, 0)])
def test_commit_paints_the_torch_paths_mask_and_rebuilds_the_prefix_sums(device, channels, alpha):
    s = search(device, channels, alpha)
    s.random(0)
    s.climb(0)
    before = s.current.clone()
    active = s.commit(0)
    best = s.climb_change.view(2, -1).argmin(1) + torch.arange(2, device=device) * s.parents
    mask = co_search._commit_mask(s.climb_kind[best].long(), s.climb_params[best], 2, *s.target.shape[1:3], s.kinds)
    improves = s.climb_quantised[best] < -1e-6 * (1 + s.climb_count[best])
    assert torch.equal(active.bool(), improves) and improves.all()
    a = s.climb_alpha[best][:, None, None, None]
    paint = co_shapes._paint(s.climb_color[best], channels)[:, None, None, :]
    expected = torch.where(mask[..., None], before * (1 - a) + paint * a, before)
    assert torch.allclose(s.current, expected, atol=1e-6)
    assert (s.current != before).any()
    # the rebuilt rows' sums equal the torch path's terms of the new images (to the unit of the last place)
    terms = co_shapes._terms(s.target, s.current, None if s.searched else s.start_alpha)
    assert (s.prefix - terms.prefix).abs().max() <= 2
    # the shape is recorded as the torch path records it
    assert torch.equal(s.kind[:, 0], s.climb_kind[best].long())
    assert torch.equal(s.alpha[:, 0], s.climb_alpha[best])
    assert torch.allclose(s.error[:, 1], s.error[:, 0] + s.climb_quantised[best])


@pytest.mark.parametrize("channels, alpha", [(3, 128), (4, 0)])
def test_climbs_split_over_launches_end_where_one_launch_ends(device, channels, alpha, monkeypatch):
    """Climbs 6 to a launch, or 3 rounds a launch (a small LAUNCH_ROWS), carry their state and random
    streams from launch to launch: the same climbs, bit for bit, as one launch."""
    whole = search(device, channels, alpha, candidates=16, mutations=6)
    climbs, per_round = whole.climb_kind.shape[0], 6 * 24  # rows of one climb's round: mutations x height
    assert climbs > 6  # more climbs than one split launch takes
    assert (whole.launch_climbs, whole.launch_rounds) == (climbs, co_shapes.MAX_ROUNDS)
    whole.random(0)
    whole.climb(0)
    for budget, groups in [(6 * per_round, (6, 1)), (climbs * per_round * 3, (climbs, 3))]:
        monkeypatch.setattr(K, "LAUNCH_ROWS", budget)
        split = search(device, channels, alpha, candidates=16, mutations=6)
        assert (split.launch_climbs, split.launch_rounds) == groups
        rounds = []
        split.random(0)
        split.climb(0, on_round=lambda: rounds.append(1))  # noqa: B023
        assert len(rounds) == -(-co_shapes.MAX_ROUNDS // groups[1])
        for name in (
            "climb_kind",
            "climb_params",
            "climb_alpha",
            "climb_color",
            "climb_change",
            "climb_quantised",
            "climb_count",
        ):
            assert torch.equal(getattr(split, name), getattr(whole, name)), (name, groups)


def test_a_raising_round_callback_stops_a_kernel_search(device):
    calls = []

    def stop():
        calls.append(1)
        raise InterruptedError

    with pytest.raises(InterruptedError):
        co.approximate(images(3, device), 5, ALL, candidates=16, mutations=4, on_round=stop)
    assert len(calls) == 1


def squared_error(result, target):
    image, _ = co.render(result, result.height, result.width, 1.0)
    return ((image - target) ** 2).mean().item()


@pytest.mark.parametrize("kinds, channels, alpha", [((co.TRIANGLE,), 3, 128), (ALL, 3, 0), ((co.ELLIPSE,), 4, 128)])
def test_a_kernel_search_fits_as_well_as_the_torch_path(device, kinds, channels, alpha):
    """As well over three seeds: single runs of 12 shapes differ by up to a third either way."""
    target = images(channels, device, batch=1, height=32, width=40)

    def run(seed):
        return co.approximate(
            target,
            12,
            kinds,
            alpha=alpha,
            candidates=64,
            mutations=16,
            generator=torch.Generator(device=device).manual_seed(seed),
        )

    results = [run(seed) for seed in (3, 4, 5)]
    result = results[0]
    assert torch.equal(result.params, run(3).params)  # seeded: deterministic
    errors = result.error[0]
    assert (errors[1:] <= errors[:-1]).all() and result.count[0] == 12
    assert set(result.kind[0].tolist()) <= set(kinds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RASTERKIT_DISABLE_CUPY", "1")
        references = [run(seed) for seed in (3, 4, 5)]
    assert sum(squared_error(r, target) for r in results) <= 1.25 * sum(squared_error(r, target) for r in references)
    # the error the search tracked is the error of what it painted
    assert (
        abs(errors[-1].item() - ((co.render(result, 32, 40, 1.0)[0] - target) ** 2).sum().item())
        < 0.25 * errors[-1].item()
    )


def test_a_flat_image_gets_no_shapes_and_stops(device, monkeypatch):
    target = torch.full((1, 16, 16, 3), 0.4, device=device)  # 102/255: the background is exact
    commits = []
    search_commit = K.Search.commit
    monkeypatch.setattr(K.Search, "commit", lambda self, index: commits.append(index) or search_commit(self, index))
    result = co.approximate(target, 20, ALL, candidates=16, mutations=4)
    assert result.count.tolist() == [0]
    assert (result.alpha == 0).all() and (result.error.abs() < 1e-6).all()
    assert len(commits) == K.STATUS_EVERY  # stopped at the first read of the device


def test_a_kernel_search_takes_any_float_dtype_and_grad(device):
    """Issue 28: a float16 target that requires grad (DLPack refused it) searches as its float32
    values do; a background of another shape is named."""
    target = images(3, device, batch=1, height=16, width=20)

    def run(image):
        return K.approximate(image, 2, ALL, 128, 16, 4, None, torch.Generator(device=device).manual_seed(0), None)

    half = target.half().requires_grad_()
    assert torch.equal(run(half).params, run(half.detach().float()).params)
    with pytest.raises(ValueError, match="^background: "):
        K.approximate(target, 2, ALL, 128, 16, 4, torch.zeros(1, 4, device=device), None, None)


def test_launches_refuse_strided_tensors_and_ints_past_int32(monkeypatch):
    """What a kernel writes through a strided tensor would land in a copy; an int past int32 would wrap."""
    launched = []
    monkeypatch.setattr(K.cuda, "kernel", lambda source, name: lambda grid, block, args: launched.append(name))
    buffer = torch.zeros(4, 6)
    with pytest.raises(ValueError, match="^climb: argument 1 must be contiguous"):
        K._launch("climb", 32, 1, buffer, buffer.t())
    with pytest.raises(ValueError, match="^climb: argument 1 must fit the kernel's int32"):
        K._launch("climb", 32, 1, buffer, 2**31)
    with pytest.raises(ValueError, match="^climb: blocks: "):
        K._launch("climb", 32, 2**31, buffer)
    assert launched == []


def test_the_node_runs_on_the_kernels(device, pack, monkeypatch):
    if device == "cpu":  # emulated: not the CUDA device the node picks where there is one (the emulator reads numpy)
        monkeypatch.setattr(pack.nodes.primitives, "render_device", lambda: torch.device("cpu"))
    image = images(3, "cpu", batch=2, height=30, width=40)
    picture, frames, svg, *_ = pack.nodes.primitives.PrimitiveMesh.run(
        image, shapes=6, shape_type="combo", candidates=32, mutations=8, working_size=40, output_size=80, frames=3
    )
    assert picture.shape == (2, 60, 80, 3) and frames.shape == (6, 60, 80, 3)
    assert svg.count("<svg") == 2 and svg.count("fill-opacity") >= 2 * 6
    assert (
        picture - torch.nn.functional.interpolate(image.permute(0, 3, 1, 2), size=(60, 80)).permute(0, 2, 3, 1)
    ).abs().mean() < 0.2
