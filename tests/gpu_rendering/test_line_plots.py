"""render_polylines: aliased lines against classic Bresenham, anti-aliased lines against a
supersampled reference, ragged lengths, gaps, fills."""

import cv2
import numpy as np
import pytest
import torch

from rasterkit.utils.gpu_rendering import line_plots as R


def bresenham(x0, y0, x1, y1):
    """The classic integer algorithm, one segment, in plain Python."""
    points = []
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err = dx + dy
    while True:
        points.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return points
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += sx
        if e2 <= dx:
            err += dx
            y0 += sy


def reference_mask(points, height, width):
    """Each segment drawn from its end with the larger x (OpenCV's convention for the step halfway
    between two rows or columns)."""
    mask = np.zeros((height, width), bool)
    for (ax, ay), (bx, by) in zip(points[:-1], points[1:], strict=False):
        if not np.isfinite([ax, ay, bx, by]).all():
            continue
        a, b = (int(np.floor(ax)), int(np.floor(ay))), (int(np.floor(bx)), int(np.floor(by)))
        for x, y in bresenham(*(b + a if a[0] < b[0] else a + b)):
            if 0 <= x < width and 0 <= y < height:
                mask[y, x] = True
    return mask


def series_points(values, height, width, inset=0.5):
    lengths = torch.full((values.shape[0],), values.shape[1])
    return R.series_points(values, lengths, *R.value_range(values, lengths, "per_image"), height, width, inset)


@pytest.mark.parametrize("seed", range(4))
def test_aliased_lines_equal_bresenham(seed):
    torch.manual_seed(seed)
    values = torch.cumsum(torch.randn(6, 40) * (1 + 5 * torch.rand(6, 1)), 1)  # gentle to steep
    height, width = 48, 64
    out = R.render_polylines(values, height, width, mode="aliased")
    points = series_points(values, height, width).numpy()
    for image, pts in zip(out.numpy(), points, strict=False):
        assert np.array_equal(image > 0, reference_mask(pts, height, width))


def test_aliased_xy_lines_leaving_the_frame_equal_bresenham():
    xy = torch.tensor([[[-10.0, 5.0], [30.0, 20.0], [70.0, -8.0], [10.0, 47.5], [20.0, 30.0]]])
    out = R.render_polylines(xy, 40, 50, mode="aliased")
    assert np.array_equal(out[0].numpy() > 0, reference_mask(xy[0].numpy(), 40, 50))


def test_aliased_random_xy_with_clipping_and_degenerate_segments_equal_bresenham():
    torch.manual_seed(1)
    xy = torch.rand(3, 30, 2) * torch.tensor([90.0, 70.0]) - 20  # about a third of the ends outside
    xy[0, 5:8] = xy[0, 4]  # one-pixel segments
    xy[1, 10:14] = torch.tensor([[5.5, 5.5], [5.5, 30.2], [40.9, 30.2], [5.5, 65.0]])  # vertical, horizontal, steep
    xy[2, 20] = torch.tensor([-5e4, 3e4])  # far away: only the steps inside the frame are enumerated
    for image, pts in zip(R.render_polylines(xy, 40, 50).numpy(), xy.numpy(), strict=False):
        assert np.array_equal(image > 0, reference_mask(pts, 40, 50))


def test_aliased_large_frames_and_large_chunks_give_the_same_pixels():
    """Frames over 2**23 pixels take the float64 path; batches over 2**24 pixels add int64 offsets."""
    xy = torch.tensor([[[3.2, 2900.1], [2999.9, 11.0], [1500.0, 1501.0], [2.0, 2999.0]]])
    big = R.render_polylines(xy, 3000, 3000)[0].numpy() > 0
    assert np.array_equal(big, reference_mask(xy[0].numpy(), 3000, 3000))
    values = torch.cumsum(torch.randn(400, 50), 1)
    points = series_points(values, 224, 224)
    direct = torch.zeros(400 * 224 * 224)
    direct[R._bresenham(points, 224, 224)] = 1  # one chunk of 20 M pixels
    assert torch.equal(direct.view(400, 224, 224), R.render_polylines(values, 224, 224))


def test_aliased_polyline_is_one_8_connected_path():
    values = torch.cumsum(torch.randn(3, 100), 1)
    for image in R.render_polylines(values, 224, 224).numpy():
        count, _ = cv2.connectedComponents((image > 0).astype(np.uint8), connectivity=8)
        assert count == 2  # background and one line


def capsule_union(points, half, height, width, samples=16):
    ys = (np.arange(height * samples) + 0.5) / samples
    xs = (np.arange(width * samples) + 0.5) / samples
    X, Y = np.meshgrid(xs, ys)
    inside = np.zeros_like(X, bool)
    for a, b in zip(points[:-1], points[1:], strict=False):
        d = b - a
        t = np.clip(((X - a[0]) * d[0] + (Y - a[1]) * d[1]) / max(d @ d, 1e-12), 0, 1)
        inside |= np.hypot(X - a[0] - t * d[0], Y - a[1] - t * d[1]) <= half
    return inside.reshape(height, samples, width, samples).mean(axis=(1, 3))


def test_antialiased_lines_match_a_supersampled_reference():
    """Smooth series (no turn sharper than the line width) and a 2.5 px line."""
    t = torch.linspace(0, 2 * np.pi, 30)
    values = torch.stack([torch.sin(t), torch.cos(2 * t) + 0.3 * t])
    height, width = 40, 56
    out = R.render_polylines(values, height, width, mode="antialiased", line_width=2.5).numpy()
    points = series_points(values, height, width, inset=1.25).numpy()  # half the stroke: not cut off
    for image, pts in zip(out, points, strict=False):
        error = np.abs(image - capsule_union(pts, 1.25, height, width))
        assert error.mean() < 0.01 and error.max() < 0.1, (error.mean(), error.max())


def test_ragged_lengths_ignore_the_padding():
    values = torch.cumsum(torch.randn(2, 30), 1)
    lengths = torch.tensor([30, 17])
    together = R.render_polylines(values, 32, 48, lengths=lengths)
    alone = R.render_polylines(values[1:, :17], 32, 48)
    assert torch.equal(together[1], alone[0])


def test_ragged_object_uint8_and_opacity():
    from rasterkit.utils.core.batching import pack

    ragged = pack([[1.0, 3.0, 2.0], [4.0, 1.0, 0.0, 2.0, 5.0], []])
    float_images = R.render_polylines(ragged.values, 16, 24, lengths=ragged.lengths, color=(1, 1, 1, 0.6))
    assert torch.equal(R.render_polylines(ragged, 16, 24, color=(1, 1, 1, 0.6)), float_images)
    as_bytes = R.render_polylines(ragged, 16, 24, color=(1, 1, 1, 0.6), dtype=torch.uint8)
    assert as_bytes.dtype == torch.uint8 and torch.equal(as_bytes, (float_images * 255).round().to(torch.uint8))
    assert float_images.unique().tolist() == pytest.approx([0.0, 0.6]) and float_images[2].sum() == 0
    rgb = R.render_polylines(ragged, 16, 24, mode="antialiased", channels=3, dtype=torch.uint8, fill_color=(0, 1, 0, 1))
    assert rgb.dtype == torch.uint8 and rgb.shape == (3, 16, 24, 3) and rgb[0, 15, 12].tolist() == [0, 255, 0]


def test_nan_makes_a_gap_and_empty_series_are_blank():
    values = torch.tensor([[0.0, 1.0, 2.0, float("nan"), 4.0, 5.0, 6.0]])
    out = R.render_polylines(values, 30, 61, mode="aliased")[0]
    points = series_points(values, 30, 61)[0]
    gap_columns = slice(int(points[2, 0]) + 1, int(points[4, 0]))
    assert out[:, gap_columns].sum() == 0 and out[:, :5].sum() > 0 and out[:, -5:].sum() > 0
    assert R.render_polylines(torch.zeros(2, 1), 8, 8).sum() == 0
    assert R.render_polylines(torch.zeros(3, 5), 8, 8, lengths=torch.tensor([0, 1, 0])).sum() == 0


def test_flat_series_sits_in_the_middle_and_fill_covers_below():
    out = R.render_polylines(torch.ones(1, 10), 20, 30, fill_color=(1, 1, 1, 0.5))[0]
    rows = out.max(1).values
    assert rows[9:11].max() == 1.0  # the line, at the middle row
    assert torch.all(rows[12:] == 0.5) and torch.all(rows[:8] == 0)


# a square wave between its min and max: level runs at the extremes, 8 points each way (issue 32)
SQUARE = torch.tensor([[0.0] * 8 + [1.0] * 8] * 3).view(1, -1)


def assert_strokes_whole(out, line_width, height=40, width=96):
    """The square wave's runs at the top and bottom show the stroke's full width: rows 0 .. w-1 and
    H-w .. H-1 covered, the next one not (cut off by the frame's edge, they were w/2 + 0.5 rows); its
    first and last points inset by w/2, so that the round caps touch the sides."""
    top, bottom = out[0, :, width * 12 // 47], out[0, :, width * 20 // 47]  # mid-run columns (points 12, 20)
    assert top.sum().item() == pytest.approx(line_width, abs=0.05) and top[line_width - 1] > 0.99
    assert bottom.sum().item() == pytest.approx(line_width, abs=0.05) and bottom[height - line_width] > 0.99
    points = series_points(SQUARE, height, width, R.stroke_inset("antialiased", line_width))[0]
    assert points[0, 0] == line_width / 2 and points[-1, 0] == width - line_width / 2
    assert out[0, :, 0].max() > 0.5 and out[0, :, width - 1].max() > 0.5  # the caps reach the sides


@pytest.mark.parametrize("path", ["numba", "compositor torch", "dense"])
def test_strokes_at_the_extremes_are_inset_by_half_their_width(monkeypatch, path):
    if path != "numba":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
        monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    monkeypatch.setattr(R, "_dense_lines_run_on", lambda device: path == "dense")
    for line_width in (4, 3):
        assert_strokes_whole(R.render_polylines(SQUARE, 40, 96, mode="antialiased", line_width=line_width), line_width)
    aliased = R.render_polylines(SQUARE, 40, 96)[0]  # 1 px at the pixel centres: the top and bottom rows
    points = series_points(SQUARE, 40, 96)[0]
    top, bottom = aliased[:, int(points[12, 0])], aliased[:, int(points[20, 0])]
    assert top.tolist() == [1.0] + [0.0] * 39 and bottom.tolist() == [0.0] * 39 + [1.0]


def test_strokes_at_the_extremes_are_inset_by_half_their_width_on_the_kernel(kernel, kernel_device, monkeypatch):
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")  # the kernel, not numba's loop, on the CPU
    out = R.render_polylines(SQUARE.to(kernel_device), 40, 96, mode="antialiased", line_width=4)
    assert_strokes_whole(out.cpu(), 4)


def test_the_fill_under_an_inset_line_reaches_the_sides():
    """Beside the first and last points (inset by half the stroke) the area is held level to the frame's
    sides: no empty columns at the ends of an area chart."""
    points = series_points(torch.tensor([[0.0, 1.0, 0.5]]), 20, 30, inset=3.0)
    under = R.fill_coverage(points, torch.tensor([3]), 20, 30, True, inset=3.0)[0]
    assert (under.sum(0) > 0).all()
    assert torch.equal(under[:, 0], under[:, 2]) and torch.equal(under[:, -1], under[:, -3])
    plot = R.render_polylines(torch.tensor([[0.0, 1.0, 0.5]]), 20, 30, mode="antialiased", line_width=6)
    assert plot[0, :, 0].max() > 0.5 and plot[0, 0].max() > 0.9  # the stroke touches the left and top edges


def test_shared_scaling_and_colour_output():
    values = torch.tensor([[0.0, 1.0], [0.0, 2.0]])
    per_image = R.render_polylines(values, 21, 21, scale="per_image")
    shared = R.render_polylines(values, 21, 21, scale="shared")
    assert torch.equal(per_image[0], per_image[1]) and not torch.equal(shared[0], shared[1])
    rgb = R.render_polylines(values, 21, 21, channels=3, color=(1, 0, 0, 1), background=(0, 0, 0.5))
    assert rgb.shape == (2, 21, 21, 3)
    assert rgb[0, 0, 0].tolist() == [0, 0, 0.5] and rgb[0, 20, 0].tolist() == [1, 0, 0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        R.render_polylines(torch.zeros(1, 3), 8, 8, mode="fancy")
    with pytest.raises(ValueError, match="fill_color"):
        R.render_polylines(torch.zeros(1, 3, 2), 8, 8, fill_color=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="scale"):
        R.render_polylines(torch.zeros(1, 3), 8, 8, scale="log")
    with pytest.raises(ValueError, match=r"values: .*got shape \(1, 3, 3\)"):
        R.render_polylines(torch.zeros(1, 3, 3), 8, 8)
    with pytest.raises(ValueError, match="channels"):
        R.render_polylines(torch.zeros(1, 3), 8, 8, channels=4)
    with pytest.raises(ValueError, match="dtype"):
        R.render_polylines(torch.zeros(1, 3), 8, 8, dtype=torch.int32)


@pytest.mark.gpu
def test_cuda_path_equals_cpu_path():
    torch.manual_seed(2)
    values = torch.cumsum(torch.randn(300, 60), 1)  # more than one CPU chunk
    values[3, 10:13] = float("nan")
    xy = torch.rand(4, 20, 2) * 120 - 20
    for args in [
        dict(values=values),
        dict(values=values, dtype=torch.uint8),
        dict(values=xy),
        dict(values=values, fill_color=(1, 1, 1, 0.5), channels=3),
    ]:
        on_cpu = R.render_polylines(height=64, width=96, **args)
        assert torch.equal(R.render_polylines(height=64, width=96, device="cuda", **args), on_cpu)
        resident = dict(args, values=args["values"].cuda())
        assert torch.equal(R.render_polylines(height=64, width=96, **resident).cpu(), on_cpu)
    smooth = torch.sin(torch.linspace(0, 6, 40))[None].repeat(5, 1)
    on_cpu = R.render_polylines(smooth, 64, 96, mode="antialiased", line_width=2.5, fill_color=(1, 1, 1, 0.3))
    on_gpu = R.render_polylines(smooth.cuda(), 64, 96, mode="antialiased", line_width=2.5, fill_color=(1, 1, 1, 0.3))
    assert torch.allclose(on_gpu.cpu(), on_cpu, atol=1e-5)


def test_batch_of_200_plots_keeps_its_gpu_budget(monkeypatch):
    """The call that ../shared/tools/budget.py measures: <= 150 device ops, <= 2 host syncs (the engine's
    .tolist() reads of device values included: tests/opcount.py counts them), no upload of host data (was 2:
    the frame size and strides), no float64."""
    from opcount import OpCount

    values = torch.randn(200, 100).cumsum(1)
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")  # a GPU's path: the torch one
    monkeypatch.setattr(R, "_draw_cpu", lambda *a, **k: False)
    with OpCount() as count:
        R.render_polylines(values, 224, 224)
    assert count.launches <= 150 and count.syncs <= 2 and count.uploads == 0 and count.float64 == 0, count.summary()


def test_no_float64_in_any_mode():
    from opcount import OpCount

    values = torch.cumsum(torch.randn(3, 30), 1)
    xy = torch.tensor([[[-10.0, 5.0], [30.0, 20.0], [7e4, -8.0], [10.0, 47.5]]])
    with OpCount() as count:
        R.render_polylines(xy, 40, 50)
        R.render_polylines(values, 3000, 3000)
        R.render_polylines(values, 32, 48, mode="antialiased", fill_color=(0, 1, 0, 0.5), channels=3, dtype=torch.uint8)
    assert count.float64 == 0, count.f64_ops


def test_antialiased_plots_keep_their_gpu_budget(monkeypatch):
    """Issue 28's AA line plots, one chunk of 64 images on a GPU's torch path: no boolean masks in polylines()
    (was 6 host syncs), no tensors from host values (was 3 uploads), and the dense path instead of the
    compositor's binning (_dense_lines: 203 device ops and 2 host syncs -> 89 and none)."""
    from opcount import OpCount
    from rasterkit.utils.core import device

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    monkeypatch.setattr(R, "_dense_lines_run_on", lambda device: True)  # a GPU's choice, measured on the CPU
    monkeypatch.setattr(device, "free_memory_bytes", lambda *a: 8 << 30)  # one chunk, however busy the machine
    values = torch.randn(64, 100, generator=torch.Generator().manual_seed(0)).cumsum(1)
    with OpCount() as count:
        R.render_polylines(values, 224, 224, mode="antialiased", line_width=2.0, device="cpu")
    assert count.launches <= 150 and count.syncs <= 2 and count.uploads <= 1 and count.float64 == 0, count.summary()


@pytest.mark.parametrize("line_width", [0.4, 1.0, 2.5, 4.0, 9.0])
def test_the_dense_path_draws_the_compositors_pixels(monkeypatch, line_width):
    """_dense_lines (a GPU's torch path for y values) against the compositor's torch path: equal, with
    gaps, ragged lengths, steep and flat series, frames that end inside a tile, thin and wide lines."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    g = torch.Generator().manual_seed(5)
    values = torch.cumsum(torch.randn(9, 50, generator=g) * (1 + 20 * torch.rand(9, 1, generator=g)), 1)
    values[2, 10], values[3, 0], values[4] = float("nan"), float("inf"), 3.0
    lengths = torch.tensor([50, 2, 50, 30, 7, 1, 0, 49, 50])
    used = []
    dense = R._dense_lines
    monkeypatch.setattr(R, "_dense_lines", lambda *a: used.append(a[-1]) or dense(*a))
    for height, width in ((37, 90), (16, 200)):
        args = (values, height, width)
        options = dict(lengths=lengths, mode="antialiased", line_width=line_width, color=(1, 1, 1, 0.7))
        compositor = R.render_polylines(*args, **options)
        with monkeypatch.context() as patch:
            patch.setattr(R, "_dense_lines_run_on", lambda device: True)
            assert torch.equal(R.render_polylines(*args, **options), compositor)
    assert len(used) == 2 and all(0 < candidates <= R._DENSE_CANDIDATES for candidates in used)
