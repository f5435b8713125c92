"""PrimitiveMesh's passes (fogleman/primitive's repeated -n/-m/-a): parse_passes and approximate_passes."""

import pytest
import torch

from primitive_scenes import scene, transparent
from rasterkit.utils import color_optimizer as co


def test_passes_parse_kind_count_and_alpha_with_defaults():
    assert co.parse_passes("", 100, 128) == []
    assert co.parse_passes("triangle:100:128, ellipse:50:64", 7, 9) == [
        ((co.TRIANGLE,), 100, 128),
        ((co.ELLIPSE,), 50, 64),
    ]
    assert co.parse_passes(" line ; triangle+circle:20\ncombo:5:0 ", 30, 200) == [
        ((co.LINE,), 30, 200),
        ((co.TRIANGLE, co.CIRCLE), 20, 200),
        (co.COMBO, 5, 0),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("hexagon:10", r"^passes: expected one of .*'hexagon'"),
        ("triangle:ten", r"^passes: expected passes like 'triangle:100:128.*'triangle:ten'"),
        ("triangle:10:128:5", r"^passes: expected passes like .*'triangle:10:128:5'"),
        ("triangle:0", r"^passes: expected a count 1\.\.5000 and an alpha 0\.\.255, got 'triangle:0'"),
        ("triangle:10:256", r"^passes: expected a count .*'triangle:10:256'"),
        ("triangle:-1", r"^passes: expected passes like"),
        (":10", r"^passes: expected one of"),
        ("t" * 300, r"^passes: expected text of at most 256 characters, got 300 characters"),
        (None, r"^passes: expected text of at most 256 characters, got None"),
    ],
)
def test_bad_passes_name_the_input(text, message):
    with pytest.raises(ValueError, match=message):
        co.parse_passes(text, 10, 128)


def run(target, passes, seed=3, **options):
    return co.approximate_passes(
        target, passes, candidates=120, mutations=24, generator=torch.Generator().manual_seed(seed), **options
    )


def test_passes_draw_over_each_other_in_order():
    """The first pass is the plain search (the same generator, the same shapes); the second draws its own
    kinds at its own opacity over the first's canvas, and the error goes on falling."""
    target = scene()
    passes = [((co.TRIANGLE,), 8, 128), ((co.ELLIPSE, co.CIRCLE), 6, 0)]
    reported = []
    result = run(target, passes, on_shape=lambda done, total, canvas: reported.append((done, total, canvas)))
    first = co.approximate(target, 8, (co.TRIANGLE,), 128, 120, 24, generator=torch.Generator().manual_seed(3))
    assert result.kind.shape == (1, 14) and result.error.shape == (1, 15)
    assert torch.equal(result.params[:, :8], first.params) and torch.equal(result.error[:, :9], first.error)
    assert set(result.kind[0, 8:].tolist()) <= {co.ELLIPSE, co.CIRCLE}
    assert torch.allclose(result.alpha[0, :8], torch.full((8,), 128 / 255))
    assert len(set(result.alpha[0, 8:].tolist())) > 1  # searched in the second pass
    error = result.error[0]
    assert bool((error[1:] <= error[:-1]).all()) and float(error[-1]) < float(error[8])
    assert int(result.count[0]) == 14
    assert [(done, total) for done, total, _ in reported] == [(i, 14) for i in range(1, 15)]
    # what the search saw is what the render draws: the error recorded is the canvas's
    assert float(((target - reported[-1][2]) ** 2).sum()) == pytest.approx(float(error[-1]), rel=1e-4)


def test_passes_of_a_transparent_fit_keep_the_first_background():
    target = transparent(scene())
    background = torch.zeros(1, 4)
    result = run(target, [((co.TRIANGLE,), 4, 200), ((co.LINE,), 4, 100)], background=background)
    assert torch.equal(result.background, background)
    image, _ = co.render(result, 40, 56, 1.0)
    assert float(((image - target) ** 2).mean()) < float((target**2).mean())


def test_a_canvas_of_another_shape_is_named():
    with pytest.raises(ValueError, match=r"^canvas: expected a tensor of the target's shape \(1, 40, 56, 3\)"):
        co.approximate(scene(), 1, (co.TRIANGLE,), canvas=torch.zeros(1, 40, 56, 4))


def test_a_kernel_search_draws_over_the_canvas_it_is_given(kernel_device):
    """The CUDA kernels (emulated on the CPU) start from a pass's canvas as the torch path does: its
    error first, then lower."""
    from rasterkit.utils.color_optimizer import search_cuda

    target = scene().to(kernel_device)
    canvas = (target * 0.5 + 0.2).clamp(0, 1)
    result = search_cuda.approximate(
        target,
        3,
        (co.TRIANGLE, co.LINE),
        128,
        60,
        12,
        None,
        torch.Generator(kernel_device).manual_seed(0),
        None,
        canvas=canvas,
    )
    assert float(result.error[0, 0]) == pytest.approx(float(((target - canvas) ** 2).sum()), rel=1e-5)
    assert float(result.error[0, -1]) < float(result.error[0, 0])


def test_coarse_to_fine_searches_the_first_shapes_at_half_size():
    """coarse 0.5: the first half of each pass's shapes are the search of the half-size target, scaled
    up; the rest are searched at full size over them, drawn; the picture is about as close as the
    search at full size."""
    from rasterkit.utils.color_optimizer.search import _shrunk

    target = scene(64, 96, seed=4)
    passes = [((co.TRIANGLE,), 8, 128), ((co.ELLIPSE,), 4, 0)]
    result = run(target, passes, coarse=0.5)
    assert result.kind.shape == (1, 12) and (result.height, result.width) == (64, 96)
    half = co.approximate(
        _shrunk(target, 32, 48), 4, (co.TRIANGLE,), 128, 120, 24, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(result.params[:, :4], co.scale_params(half.kind, half.params, 2.0))
    assert result.kind[0, :8].eq(co.TRIANGLE).all() and result.kind[0, 8:].eq(co.ELLIPSE).all()
    # the error falls within each step (half-size: its search's estimate; full size: the drawn canvas's)
    error = result.error[0]
    for first, last in ((0, 4), (5, 8), (9, 10), (11, 12)):  # (each step's first entry: its first shape)
        assert bool((error[first + 1 : last + 1] <= error[first:last]).all()), (first, error)
    image, _ = co.render(result, 64, 96, 1.0)
    full, _ = co.render(run(target, passes), 64, 96, 1.0)
    start = float(((target - target.mean((1, 2), keepdim=True)) ** 2).mean())
    coarse_error, full_error = float(((image - target) ** 2).mean()), float(((full - target) ** 2).mean())
    assert coarse_error < 0.5 * start and coarse_error < 1.3 * full_error


def test_coarse_0_or_a_small_image_is_the_search_at_full_size():
    passes = [((co.TRIANGLE,), 5, 128)]
    plain = run(scene(64, 96), passes)
    assert torch.equal(run(scene(64, 96), passes, coarse=0.0).params, plain.params)
    assert torch.equal(run(scene(), passes, coarse=0.6).params, run(scene(), passes).params)  # 56 px: too small
    for bad in (-0.1, 1.5, float("nan"), "half"):
        with pytest.raises(ValueError, match="^coarse: expected a number in 0..1"):
            run(scene(), passes, coarse=bad)
