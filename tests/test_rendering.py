"""The SDF renderer against brute-force supersampled references (16x16 samples per pixel)."""
import numpy as np
import pytest
import torch

from rasterkit.utils import gpu_rendering as R

H, W, S = 37, 45, 16  # not multiples of the tile size: partial tiles are exercised too


def samples():
    ys = (np.arange(H * S) + 0.5) / S
    xs = (np.arange(W * S) + 0.5) / S
    return np.meshgrid(xs, ys)


def pixel_mean(inside):
    return inside.reshape(H, S, W, S).mean(axis=(1, 3))


def capsule(X, Y, a, b, half):
    d = np.subtract(b, a)
    t = np.clip(((X - a[0]) * d[0] + (Y - a[1]) * d[1]) / (d @ d), 0, 1)
    return np.hypot(X - a[0] - t * d[0], Y - a[1] - t * d[1]) <= half


def butt_segment(X, Y, a, b, half):
    d = np.subtract(b, a)
    length = np.hypot(*d)
    u = d / length
    along = (X - a[0]) * u[0] + (Y - a[1]) * u[1]
    across = np.abs((X - a[0]) * u[1] - (Y - a[1]) * u[0])
    return (along >= 0) & (along <= length) & (across <= half)


def rounded_box_distance(X, Y, box, r):
    x0, y0, x1, y1 = box
    cx, cy, hx, hy = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    qx, qy = np.abs(X - cx) - (hx - r), np.abs(Y - cy) - (hy - r)
    return np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(np.maximum(qx, qy), 0) - r


def alpha_of(prims):
    _, alpha, _ = R.draw(torch.zeros(1, H, W, 3), prims)
    return alpha[0].numpy()


def assert_close(alpha, reference):
    error = np.abs(alpha - reference)
    assert error.mean() < 0.01, error.mean()
    assert error.max() < 0.1, error.max()


@pytest.mark.parametrize("a,b,width", [((3.2, 30.7), (41.9, 5.1), 2.0), ((5, 5), (40, 5.5), 3.0),
                                       ((20.3, 2.2), (21.1, 34.8), 6.5), ((10, 10), (30, 28), 1.0)])
@pytest.mark.parametrize("caps", ["round", "butt"])
def test_segment_coverage(a, b, width, caps):
    X, Y = samples()
    prims = R.segments(0, torch.tensor([a], dtype=torch.float32), torch.tensor([b], dtype=torch.float32), width,
                       (1, 1, 1, 1), caps=caps)
    shape = capsule if caps == "round" else butt_segment
    assert_close(alpha_of(prims), pixel_mean(shape(X, Y, a, b, width / 2)))


@pytest.mark.parametrize("box,radius,stroke", [((5.3, 6.7, 40.2, 30.1), 6.0, 3.0), ((2.5, 2.5, 20.5, 33.25), 0.0, 2.0),
                                               ((10, 8, 30, 20), 50.0, 1.5), ((-10, -5, 60, 50), 12.0, 4.0)])
def test_rounded_box_fill_and_stroke(box, radius, stroke):
    X, Y = samples()
    r = min(radius, (box[2] - box[0]) / 2, (box[3] - box[1]) / 2)
    d = rounded_box_distance(X, Y, box, r)
    fill = R.rounded_boxes(0, torch.tensor([box]), 0.0, radius, (0, 0, 0, 0), (1, 1, 1, 1))
    assert_close(alpha_of(fill), pixel_mean(d <= 0))
    outline = R.rounded_boxes(0, torch.tensor([box]), stroke, radius, (1, 1, 1, 1), (0, 0, 0, 0))
    assert_close(alpha_of(outline), pixel_mean(np.abs(d) <= stroke / 2))


def test_corner_only_outline():
    X, Y = samples()
    box, length, stroke = (6.5, 5.5, 38.5, 31.5), 8.0, 2.0
    d = rounded_box_distance(X, Y, box, 0.0)
    cx, cy, hx, hy = 22.5, 18.5, 16.0, 13.0
    near_corner = (np.abs(X - cx) >= hx - length) & (np.abs(Y - cy) >= hy - length)
    prims = R.rounded_boxes(0, torch.tensor([box]), stroke, 0.0, (1, 1, 1, 1), (0, 0, 0, 0), corner_length=length)
    assert_close(alpha_of(prims), pixel_mean((np.abs(d) <= stroke / 2) & near_corner))


@pytest.mark.parametrize("ring", [0.0, 2.5])
def test_disc_and_ring(ring):
    X, Y = samples()
    c, r = (21.3, 17.8), 11.2
    distance = np.hypot(X - c[0], Y - c[1]) - r
    inside = np.abs(distance) <= ring / 2 if ring else distance <= 0
    assert_close(alpha_of(R.discs(0, torch.tensor([c]), r, (1, 1, 1, 1), ring_width=ring)), pixel_mean(inside))


def test_polyline_draws_each_joint_once():
    """A translucent polyline must equal the union of its capsules: joints are not darker."""
    X, Y = samples()
    points = [(4.0, 30.0), (14.5, 8.2), (24.0, 26.0), (33.7, 6.0), (41.0, 20.0)]
    union = np.zeros_like(X, dtype=bool)
    for a, b in zip(points[:-1], points[1:]):
        union |= capsule(X, Y, a, b, 2.0)
    prims = R.polylines(0, torch.tensor([points]), torch.tensor([5]), 4.0, (1, 1, 1, 0.5))
    alpha = alpha_of(prims)
    assert alpha.max() <= 0.5 + 1e-6  # a pixel drawn twice would reach 0.75
    error = np.abs(alpha - 0.5 * pixel_mean(union))
    # merged by nearest distance, the pixel inside a sharp turn's concave corner is a little light
    assert error.mean() < 0.005 and error.max() < 0.16


def test_polyline_nan_point_makes_a_gap():
    points = torch.tensor([[[2.0, 5.0], [20.0, 5.0], [float("nan"), 0.0], [25.0, 30.0], [40.0, 30.0]]])
    prims = R.polylines(0, points, torch.tensor([5]), 2.0, (1, 1, 1, 1))
    assert len(prims) == 2
    alpha = alpha_of(prims)
    assert alpha[5, 10] > 0.9 and alpha[30, 30] > 0.9 and alpha[17, 22] == 0


def test_translucent_layers_build_up_source_over():
    fills = R.concat(R.rounded_boxes(0, torch.tensor([[0.0, 0.0, 30.0, 30.0]]), 0, 0, (0, 0, 0, 0), (1, 0, 0, 0.5)),
                     R.rounded_boxes(0, torch.tensor([[10.0, 10.0, 40.0, 36.0]]), 0, 0, (0, 0, 0, 0), (0, 0, 1, 0.5)))
    background = torch.full((1, H, W, 3), 0.2)
    image, alpha, layer = R.draw(background, fills)
    assert alpha[0, 20, 20].item() == pytest.approx(0.75, abs=1e-5)
    assert layer[0, 20, 20].tolist() == pytest.approx([0.25, 0.0, 0.5, 0.75], abs=1e-5)
    assert image[0, 20, 20].tolist() == pytest.approx([0.25 + 0.05, 0.05, 0.5 + 0.05], abs=1e-5)
    assert torch.allclose(image, R.composite(background, layer), atol=1e-6)


def test_inputs_are_not_modified_and_alpha_channel_is_composited():
    images = torch.rand(2, H, W, 4)
    before = images.clone()
    prims = R.discs(torch.tensor([1]), torch.tensor([[20.0, 20.0]]), 8.0, (1, 1, 1, 0.5))
    image, alpha, layer = R.draw(images, prims)
    assert torch.equal(images, before)
    assert torch.equal(image[0], images[0]) and alpha[0].sum() == 0  # frame 0 has no primitive
    expected = images[1, 20, 20, 3] * 0.5 + 0.5
    assert image[1, 20, 20, 3].item() == pytest.approx(expected.item(), abs=1e-5)


def test_opaque_primitives_cover_fully():
    prims = R.concat(*(R.rounded_boxes(0, torch.tensor([[4.0, 4.0, 30.0, 30.0]]), 0, 0, (0, 0, 0, 0), (1, 1, 1, 1))
                       for _ in range(5)))
    _, alpha, _ = R.draw(torch.zeros(1, H, W, 3), prims)
    assert alpha[0, 10, 10].item() == pytest.approx(1.0, abs=1e-6)


def test_sprites_copy_the_atlas():
    atlas = torch.zeros(8, 8)
    atlas[2:5, 1:7] = 1.0
    prims = R.sprites(0, torch.tensor([[10.0, 12.0]]), torch.tensor([[0, 0, 8, 8]]), (1, 1, 1, 1))
    _, alpha, _ = R.draw(torch.zeros(1, H, W, 3), prims, atlas=atlas)
    assert torch.equal(alpha[0, 12:20, 10:18], atlas)
    assert alpha.sum() == atlas.sum()


def test_binning_follows_covered_area():
    big = R.rounded_boxes(0, torch.tensor([[0.5, 0.5, 1000.0, 1000.0]]), 2.0, 0.0, (1, 1, 1, 1), (0, 0, 0, 0))
    tile_id, _, _ = R.bin_tiles(big, 1, 1024, 1024)
    assert tile_id.numel() <= 8 * 1000 / R.TILE + 16  # one or two tile rows along each side, none inside
    outside = R.discs(0, torch.tensor([[-50.0, -50.0], [2000.0, 10.0]]), 5.0, (1, 1, 1, 1))
    assert R.bin_tiles(outside, 1, 64, 64)[0].numel() == 0
    wrong_frame = R.discs(torch.tensor([3]), torch.tensor([[10.0, 10.0]]), 5.0, (1, 1, 1, 1))
    assert R.bin_tiles(wrong_frame, 2, 64, 64)[0].numel() == 0


def test_batch_primitives_stay_on_their_frame():
    frames = torch.tensor([0, 2, 2])
    prims = R.discs(frames, torch.tensor([[10.0, 10.0], [20.0, 20.0], [30.0, 10.0]]), 4.0, (1, 1, 1, 1))
    _, alpha, _ = R.draw(torch.zeros(3, H, W, 3), prims)
    assert alpha[1].sum() == 0
    assert alpha[0, 10, 10] > 0.99 and alpha[2, 20, 20] > 0.99 and alpha[2, 10, 30] > 0.99


def test_empty_primitives_return_a_copy():
    images = torch.rand(1, H, W, 3)
    image, alpha, layer = R.draw(images, R.empty())
    assert torch.equal(image, images) and image.data_ptr() != images.data_ptr()
    assert alpha.sum() == 0 and layer.shape == (1, H, W, 4)


def test_deep_overlap_in_one_tile_matches_sequential_compositing():
    torch.manual_seed(0)
    n = 37  # a depth that needs padding in its group
    centers = torch.rand(n, 2) * 10 + 4
    colours = torch.rand(n, 4) * torch.tensor([1, 1, 1, 0.6])
    prims = R.discs(0, centers, torch.rand(n) * 6 + 1, colours)
    _, _, layer = R.draw(torch.zeros(1, 16, 16, 3), prims)
    expected = torch.zeros(16, 16, 4)
    for i in range(n):  # the reference composites one primitive at a time
        _, a, _ = R.draw(torch.zeros(1, 16, 16, 3), prims.select(torch.tensor([i])))
        a = a[0, ..., None]
        expected = expected * (1 - a) + torch.cat([colours[i, :3] * a, a], -1)
    assert torch.allclose(layer[0], expected, atol=1e-5)


@pytest.mark.gpu
def test_cuda_path_equals_cpu_path():
    torch.manual_seed(1)
    images = torch.rand(3, 72, 96, 3)
    prims = R.concat(
        R.rounded_boxes(torch.tensor([0, 1, 2]), torch.tensor([[5.0, 6.0, 60.0, 50.0]] * 3), 3.0, 8.0, (1, 0, 0, 1),
                        (0, 1, 0, 0.3)),
        R.polylines(1, torch.rand(2, 9, 2) * 90, torch.tensor([9, 6]), 2.5, (0, 0, 1, 0.7)),
        R.discs(2, torch.tensor([[40.0, 30.0]]), 9.0, (1, 1, 0, 0.5), ring_width=2.0))
    on_cpu = R.draw(images, prims)
    on_gpu = R.draw(images, prims, device="cuda")
    for a, b in zip(on_cpu, on_gpu):
        assert b.device == images.device
        assert torch.allclose(a, b, atol=1e-5)
    resident = R.draw(images.cuda(), prims.to("cuda"))
    assert all(torch.allclose(a, b.cpu(), atol=1e-5) for a, b in zip(on_cpu, resident))


def counted(monkeypatch, fn):
    """OpCount of fn() (tests/opcount.py: what a GPU would launch, measured on the CPU, with the engine's
    .tolist() reads of device values counted as the host syncs they are) and its host syncs."""
    from opcount import OpCount

    with OpCount() as count:
        fn()
    return count, count.syncs


def test_draw_of_100_boxes_on_a_4k_frame_keeps_its_gpu_budget(monkeypatch):
    """The call that ../shared/tools/budget.py measures: <= 200 device ops, <= 2 host syncs, no float64."""
    torch.manual_seed(0)
    height, width, n = 2160, 3840, 100
    images = torch.rand(1, height, width, 3)
    xy = torch.rand(n, 2) * torch.tensor([width - 300.0, height - 300.0])
    xyxy = torch.cat([xy, xy + 50 + torch.rand(n, 2) * 250], 1)
    colour = torch.tensor([[1, 0, 0, 1.0]]).expand(n, 4)
    count, syncs = counted(monkeypatch, lambda: R.draw(images, R.rounded_boxes(
        torch.zeros(n, dtype=torch.long), xyxy, 3.0, 12.0, colour, colour * 0.25, 0.0)))
    assert count.launches <= 200 and syncs <= 2 and count.float64 == 0, (count.summary(), syncs)


def test_no_float64_for_any_kind(monkeypatch):
    g = torch.Generator().manual_seed(4)
    frames = torch.tensor([0, 1, 1])
    xy = torch.rand(3, 2, generator=g) * 30
    prims = R.concat(
        R.rounded_boxes(frames, torch.cat([xy, xy + 12], 1), 2.0, 4.0, (1, 0, 0, 1), (0, 1, 0, 0.5), corner_length=3.0),
        R.segments(frames, xy, xy.flip(1), 2.0, (1, 1, 1, 0.7), caps="butt"),
        R.polylines(1, torch.rand(2, 6, 2, generator=g) * 40, torch.tensor([6, 4]), 3.0, (0, 0, 1, 0.6)),
        R.discs(frames, xy, 5.0, (1, 1, 0, 0.5), ring_width=1.5),
        R.sprites(frames[:1], xy[:1], torch.tensor([[0, 0, 4, 4]]), (1, 1, 1, 1)))
    count, _ = counted(monkeypatch, lambda: R.draw(torch.rand(2, H, W, 4), prims, atlas=torch.rand(4, 4)))
    assert count.float64 == 0, count.f64_ops
