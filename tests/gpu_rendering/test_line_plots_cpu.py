"""The CPU's aliased lines (utils/gpu_rendering/line_plots_cpu.py, numba's loop, else OpenCV; chosen by
line_plots._draw_cpu) against the torch path of render_polylines and the brute-force Bresenham of
test_line_plots: the same pixels, so the CPU may take any of them."""

import numpy as np
import pytest
import torch
from test_line_plots import reference_mask

from rasterkit.utils.gpu_rendering import line_plots as R
from rasterkit.utils.gpu_rendering import line_plots_cpu


def torch_path(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(R, "_draw_cpu", lambda *a, **k: False)
        return R.render_polylines(*args, **kwargs)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16])
@pytest.mark.parametrize("loop", ["numba", "opencv"])
def test_the_cpu_paths_draw_the_torch_paths_pixels(monkeypatch, dtype, loop):
    if loop == "opencv":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    g = torch.Generator().manual_seed(3)
    # gentle to steep walks, a flat series, a spike, two points, a single point, ragged lengths
    values = torch.cumsum(torch.randn(40, 60, generator=g) * (1 + 8 * torch.rand(40, 1, generator=g)), 1)
    values[1] = 2.0
    values[2, 30] = 1e3
    lengths = torch.randint(2, 61, (40,), generator=g)
    lengths[3], lengths[4] = 2, 1
    used = []
    draw = R._draw_cpu
    monkeypatch.setattr(R, "_draw_cpu", lambda *a, **k: used.append(draw(*a, **k)) or used[-1])
    ours = R.render_polylines(values, 37, 53, lengths=lengths, dtype=dtype, color=(1, 1, 1, 0.8))
    assert used == [True], "the CPU path was not taken"
    expected = torch_path(monkeypatch, values, 37, 53, lengths=lengths, dtype=dtype, color=(1, 1, 1, 0.8))
    assert torch.equal(ours, expected)
    assert not ours[4].any()  # one point: blank
    points = R.series_points(values, lengths, *R.value_range(values, lengths, "per_image"), 37, 53)
    for image, pts, length in zip(ours.numpy(), points.numpy(), lengths.tolist(), strict=False):
        assert np.array_equal(image > 0, reference_mask(pts[:length], 37, 53))


@pytest.mark.parametrize("loop", ["numba", "opencv"])
def test_gaps_and_points_outside(monkeypatch, loop):
    """numba's loop leaves the torch path's gaps at points not finite; OpenCV cannot, nor can either
    clip a segment as the torch path does: those return False, drawing nothing."""
    if loop == "opencv":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    values = torch.randn(3, 20)
    values[0, 5] = float("nan")
    values[1, 0] = float("inf")
    values[2, 19] = -float("inf")
    points = R.series_points(
        values, torch.full((3,), 20), *R.value_range(values, torch.full((3,), 20), "per_image"), 16, 16
    )
    out = torch.full((3, 16, 16), 7.0)
    assert R._draw_cpu(out, points, torch.full((3,), 20), 1.0) == (loop == "numba")
    if loop == "numba":
        assert torch.equal(out, torch_path(monkeypatch, values, 16, 16))
    else:
        assert bool((out == 7).all())  # untouched
    xy = torch.tensor([[[2.0, 3.0], [20.0, 5.0]]])
    assert not R._draw_cpu(torch.zeros(1, 16, 16), xy, torch.tensor([2]), 1.0)
    assert R._draw_cpu(torch.zeros(1, 16, 16), xy, torch.tensor([1]), 1.0)  # the point past the length
    assert not R._draw_cpu(torch.zeros(1, 16, 16, dtype=torch.bfloat16), xy[:, :1], torch.tensor([1]), 1.0)
    assert torch.equal(R.render_polylines(values, 16, 16), torch_path(monkeypatch, values, 16, 16))


def test_output_is_overwritten_not_assumed_blank():
    out = torch.full((2, 8, 8), 9, dtype=torch.uint8)
    points = torch.tensor([[0.5, 0.5], [7.5, 0.5]]).expand(2, 2, 2)
    assert R._draw_cpu(out, points, torch.tensor([2, 1]), 255)
    assert bool((out[0, 0] == 255).all()) and not out[0, 1:].any() and not out[1].any()


@pytest.mark.parametrize("shape", [(3, 16384), (16384, 3)])
def test_segments_of_the_longest_extent(monkeypatch, shape):
    """The loop's reciprocal division is exact up to MAX_EXTENT pixels; larger frames take the torch path."""
    height, width = shape
    across = torch.tensor([[[width - 0.5, height - 0.5], [0.5, 0.5]], [[0.5, height - 0.5], [width - 0.5, 1.7]]])
    ours = torch.empty(2, height, width, dtype=torch.uint8)
    assert R._draw_cpu(ours, across, torch.tensor([2, 2]), 255)
    expected = torch_path(monkeypatch, across, height, width, dtype=torch.uint8)
    assert torch.equal(ours, expected)
    assert line_plots_cpu.MAX_EXTENT == 16384
    assert not R._draw_cpu(torch.empty(1, 1, 16385, dtype=torch.uint8), across[:1] * 0, torch.tensor([2]), 255)


@pytest.mark.parametrize("scale", ["per_image", "shared"])
def test_series_points_from_the_loops_equal_the_torch_ops(scale):
    g = torch.Generator().manual_seed(5)
    values = torch.cumsum(torch.randn(64, 3000, generator=g), 1) * torch.logspace(-30, 30, 64)[:, None]
    values[0] = 3.0  # flat
    values[1, ::7] = float("nan")
    values[2, 5], values[2, 9] = float("inf"), -float("inf")
    values[3] = float("nan")  # nothing finite
    values[4, :2] = torch.tensor([-3e38, 3e38])  # the span overflows
    lengths = torch.randint(0, 3001, (64,), generator=g)
    lengths[5], lengths[6] = 0, 1
    for height, width in ((224, 224), (17, 9001), (1, 1)):
        expected = R.series_points(values, lengths, *R.value_range(values, lengths, scale), height, width)
        ours = R._series_points_cpu(values, lengths, scale, height, width)
        assert torch.equal(ours.isnan(), expected.isnan())
        assert torch.equal(ours.nan_to_num(), expected.nan_to_num())


def test_progress_and_interrupts_between_chunks():
    seen = []
    out = torch.zeros(5, 8, 8, dtype=torch.uint8)
    points = torch.tensor([[0.5, 0.5], [7.5, 7.5]]).expand(5, 2, 2)
    assert R._draw_cpu(
        out, points, torch.full((5,), 2), 255, on_progress=lambda done, total: seen.append(done), chunk=2
    )
    assert seen == [2, 4, 5] and bool((out.diagonal(dim1=1, dim2=2) == 255).all())


def test_packed_lines_are_the_pixels_packed(monkeypatch):
    """render_polylines_packed: numba's loop sets the bits np.packbits makes of render_polylines'
    pixels (widths not a multiple of 8, gaps, ragged lengths, both scales); without numba, and for xy
    points, the torch path's pixels packed."""
    g = torch.Generator().manual_seed(4)
    values = torch.cumsum(torch.randn(30, 50, generator=g) * (1 + 8 * torch.rand(30, 1, generator=g)), 1)
    values[1] = 2.0
    values[2, 10] = float("nan")
    lengths = torch.randint(2, 51, (30,), generator=g)
    lengths[3], lengths[4] = 1, 0
    loop = line_plots_cpu.polylines_packed
    used = []
    monkeypatch.setattr(line_plots_cpu, "polylines_packed", lambda *a, **k: used.append(loop(*a, **k)) or used[-1])

    def packed(*args, **kwargs):
        return np.packbits(R.render_polylines(*args, **kwargs, dtype=torch.uint8).numpy(), axis=-1)

    for width in (37, 48, 1):
        for scale in ("per_image", "shared"):
            ours = R.render_polylines_packed(values, 29, width, lengths, scale=scale)
            assert ours.dtype == torch.uint8 and np.array_equal(
                ours.numpy(), packed(values, 29, width, lengths, scale=scale)
            )
    assert used == [True] * 6, "numba's loop did not draw"
    assert not R.render_polylines_packed(values, 29, 37, lengths)[3:5].any()  # fewer than 2 points: blank
    xy = torch.tensor([[[2.0, 3.0], [20.0, 5.0], [4.0, 15.5]]])  # leaves the frame: clipped by the torch path
    assert np.array_equal(R.render_polylines_packed(xy, 16, 16).numpy(), packed(xy, 16, 16))
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    assert np.array_equal(R.render_polylines_packed(values, 29, 37, lengths).numpy(), packed(values, 29, 37, lengths))
    assert len(used) == 7  # not called without numba
