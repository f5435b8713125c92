"""utils/gpu_rendering/compositor_cpu (numba's loop, what draw() runs on the CPU) against the torch path (what
MPS, ROCm and CUDA without CuPy run). Both are checked against brute-force references by test_compositor.py,
test_boxes.py and the links tests, which run on the CPU: there, through this loop."""

import pytest
import torch
from test_compositor_cuda import every_kind

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.gpu_rendering import compositor, compositor_cpu

TOLERANCE = 1e-4  # the torch path composites by products of transmittances, the loop one shape at a time


@pytest.fixture
def loop_used(monkeypatch):
    """Records whether each draw went through the numba loop."""
    used, render = [], compositor_cpu.render
    monkeypatch.setattr(compositor_cpu, "render", lambda *a, **k: used.append(render(*a, **k)) or used[-1])
    return used


@pytest.fixture(params=[True, False], ids=["numba", "torch"])
def numba_loop(request, monkeypatch):
    """Runs a test with numba's loop and with it switched off (the torch path); True for the first."""
    if not request.param:
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    return request.param


def assert_same(expected, got):
    for name, e, g in zip(("image", "alpha", "layer"), expected, got, strict=False):
        assert e.shape == g.shape and e.dtype == g.dtype, name
        assert (e - g).abs().max() <= TOLERANCE, (name, float((e - g).abs().max()))


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("tile", [8, 5])
def test_the_loop_equals_the_torch_path(torch_path, loop_used, channels, tile):
    torch.manual_seed(channels)
    images = torch.rand(3, 77, 141, channels)  # partial tiles on both axes
    atlas = torch.rand(20, 24)
    prims = every_kind(3, 77, 141, 40, seed=channels + tile)
    expected = torch_path(R.draw, images, prims, atlas=atlas, tile=tile)
    got = R.draw(images, prims, atlas=atlas, tile=tile)
    assert loop_used == [True]
    assert_same(expected, got)
    assert got[1].sum() > 100


def test_the_loop_in_chunks_of_frames(torch_path, loop_used, monkeypatch):
    """Chunks of 2 of 5 frames: each chunk draws only its frames' primitives (sorted by frame: one chunk
    of every frame takes them in any order)."""
    monkeypatch.setattr(compositor, "chunk_size", lambda total, nbytes, device, limit=None: min(2, total))
    frames, render = [], compositor_cpu.render
    monkeypatch.setattr(
        compositor_cpu, "render", lambda *a: frames.append((a[4].frame - a[5]).unique().tolist()) or render(*a)
    )
    images = torch.rand(5, 40, 50, 3)
    prims = every_kind(5, 40, 50, 30, seed=7)
    prims = prims.select((-prims.frame).argsort(stable=True))  # the last frame's first, each frame's in order
    expected = torch_path(R.draw, images, prims, atlas=torch.ones(20, 24))
    got = R.draw(images, prims, atlas=torch.ones(20, 24))
    assert frames == [[0, 1], [0, 1], [0]]
    assert loop_used == [True] * 3
    assert_same(expected, got)


def test_dense_frames_come_in_chunks_sized_by_work(torch_path, monkeypatch):
    """Frames whose primitives reach far more tile pixels than the frames have pixels are drawn a few at a
    time (progress and interrupt checks between them: issue 29), each chunk given only its frames'
    primitives (primitives of the frames in any order), the same pixels as one chunk."""
    monkeypatch.setattr(compositor, "CPU_CHUNK_WORK", 40 * 50 * 2 + 40 * 50 * 30)  # ~2 frames of 30 boxes
    images = torch.rand(6, 40, 50, 3)
    g = torch.Generator().manual_seed(5)
    corner = torch.rand(180, 2, generator=g) * 30
    xyxy = torch.cat([corner, corner + 20], 1)
    frame = torch.randperm(180, generator=g) % 6  # frames interleaved in drawing order
    prims = R.rounded_boxes(frame, xyxy, 2.0, 4.0, (1, 0, 0, 0.8), (0, 1, 0, 0.3))
    done = []
    got = R.draw(images, prims, on_progress=lambda d, t: done.append(d))
    assert len(done) >= 3 and done[-1] == 6
    assert_same(torch_path(R.draw, images, prims), got)


def test_the_loop_on_a_dense_4k_frame(torch_path):
    images = torch.rand(1, 2160, 3840, 3)
    g = torch.Generator().manual_seed(3)
    corner = torch.rand(1000, 2, generator=g) * torch.tensor([3600.0, 1900.0])
    xyxy = torch.cat([corner, corner + torch.rand(1000, 2, generator=g) * 260 + 40], 1)
    prims = R.rounded_boxes(0, xyxy, 3.0, 12.0, (1, 0, 0, 1), (0, 1, 0, 0.25))
    assert_same(torch_path(R.draw, images, prims), R.draw(images, prims))


def test_groups_merge_once_per_tile(torch_path, loop_used):
    """A translucent polyline doubling back over itself: its segments are one shape (no darker joints)."""
    points = torch.tensor([[[5.0, 5.0], [40.0, 30.0], [6.0, 28.0], [38.0, 4.0], [20.0, 35.0]]])
    prims = R.polylines(0, points, torch.tensor([5]), 4.0, (1, 0.5, 0, 0.5))
    images = torch.zeros(1, 40, 48, 3)
    got = R.draw(images, prims)
    assert_same(torch_path(R.draw, images, prims), got)
    assert loop_used == [True] and float(got[1].max()) == pytest.approx(0.5)


def test_where_the_loop_does_not_apply(loop_used, monkeypatch):
    prims = R.rounded_boxes(0, torch.tensor([[2.0, 2.0, 20.0, 12.0]]), 2.0, 3.0, (1, 0, 0, 1))
    half = R.draw(torch.rand(1, 16, 24, 3, dtype=torch.float16), prims)  # converted to float32 once: the loop
    assert loop_used == [True] and half[0].dtype == torch.float16 and half[1].sum() > 10
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    R.draw(torch.rand(1, 16, 24, 3), prims)
    assert loop_used == [True]  # switched off: not called


def test_nothing_to_draw_copies_the_frames(loop_used):
    images = torch.rand(2, 19, 23, 4)
    nan = torch.full((3, 4), float("nan"))
    for prims in (
        R.empty(),
        R.rounded_boxes(0, nan, 2.0, 3.0, (1, 0, 0, 1)),
        R.rounded_boxes(1, torch.tensor([[-50.0, -50.0, -10.0, -10.0]]), 2.0, 3.0, (1, 0, 0, 1)),
    ):
        image, alpha, layer = R.draw(images, prims)
        assert torch.equal(image, images) and not alpha.any() and not layer.any()
    assert loop_used == [True] * 3


def test_sprites_need_their_atlas(loop_used):
    prims = R.sprites(torch.tensor([0]), torch.tensor([[3.0, 4.0]]), torch.tensor([[0, 0, 4, 4]]), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="atlas"):
        R.draw(torch.rand(1, 16, 16, 3), prims)
    far = R.sprites(torch.tensor([0]), torch.tensor([[300.0, 4.0]]), torch.tensor([[0, 0, 4, 4]]), (1, 1, 1, 1))
    R.draw(torch.rand(1, 16, 16, 3), far)  # none in the frame: nothing needs the atlas


def test_a_straight_alpha_layer_as_straight_alpha_gives_it(numba_loop):
    images, atlas = torch.rand(2, 30, 45, 4), torch.rand(20, 24)
    prims = every_kind(2, 30, 45, 20, seed=11)
    image, alpha, layer = R.draw(images, prims, atlas=atlas)
    straight = R.draw(images, prims, atlas=atlas, layer_alpha="straight")
    assert torch.equal(straight[0], image) and torch.equal(straight[1], alpha)
    assert (straight[2] - R.straight_alpha(layer)).abs().max() <= 1e-6
    with pytest.raises(ValueError, match="layer_alpha"):
        R.draw(images, prims, layer_alpha="straigth")


def test_the_image_only(numba_loop):
    images, atlas = torch.rand(3, 30, 45, 3), torch.rand(20, 24)
    prims = every_kind(3, 30, 45, 20, seed=12)
    image, alpha, layer = R.draw(images, prims, atlas=atlas, image_only=True)
    assert alpha is None and layer is None
    assert torch.equal(image, R.draw(images, prims, atlas=atlas)[0])


def test_coverage_is_draws_alpha(loop_used, numba_loop):
    """coverage() writes the alpha alone where numba's loop runs (draw over blank frames elsewhere)."""
    images, atlas = torch.rand(3, 30, 45, 3), torch.rand(20, 24)
    prims = every_kind(3, 30, 45, 20, seed=13)
    alpha = R.coverage(prims, 3, 30, 45, atlas=atlas)
    assert loop_used[:1] == ([True] if numba_loop else [])
    assert alpha.shape == (3, 30, 45) and alpha.sum() > 50
    assert torch.equal(alpha, R.draw(images, prims, atlas=atlas)[1])


def test_a_loop_numba_cannot_compile_leaves_the_drawing_to_the_torch_path(torch_path, monkeypatch, caplog):
    import numba

    from rasterkit.utils.core import numba as core_numba
    from rasterkit.utils.gpu_rendering import line_plots, line_plots_cpu
    from rasterkit.utils.mesh_rasterizer import raster as M
    from rasterkit.utils.mesh_rasterizer import raster_cpu as mesh_rasterizer_cpu
    from test_raster_cuda import random_views

    def broken(*args):
        raise numba.core.errors.TypingError("no implementation on this machine")

    monkeypatch.setattr(compositor_cpu, "_composite", broken)
    monkeypatch.setattr(core_numba, "_failed", [])
    images, prims = torch.rand(2, 30, 40, 3), every_kind(2, 30, 40, 15, seed=5)
    atlas = torch.ones(20, 24)
    assert_same(torch_path(R.draw, images, prims, atlas=atlas), R.draw(images, prims, atlas=atlas))
    assert "the torch path draws instead" in caplog.text  # logged once (rasterkit's logger)

    monkeypatch.setattr(line_plots_cpu, "_polylines", broken)
    values = torch.randn(4, 30)
    plots = R.render_polylines(values, 20, 30)
    with monkeypatch.context() as patch:
        patch.setattr(line_plots, "_draw_cpu", lambda *a, **k: False)
        assert torch.equal(plots, R.render_polylines(values, 20, 30))

    monkeypatch.setattr(mesh_rasterizer_cpu, "_depth_test", broken)
    V, F = random_views("cpu", 2, views=1)
    got = M.rasterize_views(V, F, 50, 40)
    expected = torch_path(M.rasterize_views, V, F, 50, 40)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_the_torch_path_draws_the_same_bits_every_time(monkeypatch):
    """A pixel's shapes are summed in one order: index_put_(accumulate=True) added them from several threads
    in any order on the CPU, so that two draws (image_only or not) differed in the last bit now and then."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    torch.manual_seed(0)
    images = torch.rand(2, 96, 128, 3)
    centre = torch.rand(400, 2) * torch.tensor([128.0, 96.0])
    prims = R.discs(torch.arange(400) % 2, centre, 9.0, torch.rand(400, 4) * 0.5 + 0.25)
    first = R.draw(images, prims)
    for _ in range(6):
        assert all(torch.equal(a, b) for a, b in zip(first, R.draw(images, prims), strict=False))
        assert torch.equal(first[0], R.draw(images, prims, image_only=True)[0])


@pytest.mark.parametrize("tile", [8, 5, 16])
def test_tile_spans_and_work_as_the_torch_paths(tile):
    """The loop's spans (its visibility and compositor._cpu_work's count with them) are primitives.tile_spans'
    to the tile: bounds across, past and on the frame's tile edges, NaN, infinite and huge."""
    import numpy as np

    from rasterkit.utils.gpu_rendering.primitives import tile_spans

    g = torch.Generator().manual_seed(tile)
    bounds = torch.rand(400, 4, generator=g) * 260 - 60
    bounds[:50] = torch.randint(-3, 40, (50, 4), generator=g).float() * tile  # on tile edges
    bounds[50:60, 1] = float("nan")
    bounds[60:70, 2], bounds[70:80, 0] = float("inf"), -float("inf")
    bounds[80:90, 3], bounds[90:100, 0] = 3e38, -3e38
    bounds[100:110, 2] = torch.nextafter(bounds[100:110, 2], torch.tensor(-1e9))
    frame = torch.randint(-1, 4, (400,), generator=g)
    opacity = torch.rand(400, generator=g) - 0.2
    span, visible, pixels = compositor_cpu._tile_spans(bounds.numpy(), frame.numpy(), opacity.numpy(), 3, 77, 141, tile)
    expected, sizes = tile_spans(bounds, 77, 141, tile)
    assert np.array_equal(span, expected.numpy())
    shown = (frame >= 0) & (frame < 3) & (opacity > 0) & (sizes > 0).all(1)
    assert np.array_equal(visible, shown.numpy()) and visible.any() and not visible.all()
    prims = R.Primitives(frame, frame, torch.zeros(400, 10), torch.zeros(400, 4), bounds, frame)
    assert compositor_cpu.tile_work(prims, 3, 77, 141, tile) == compositor._cpu_work(prims, 3, 77, 141, tile)


@pytest.mark.parametrize("caps", ["round", "butt"])
def test_short_segments_are_evaluated_wherever_they_cover(torch_path, loop_used, caps):
    """The loop evaluates a segment's pixels within its ends' box grown by half + 0.75 (not its bounds):
    short pieces of any direction and width (0.3 .. 6 px, thin ones weighted), at sub-pixel places near
    tile edges and far from the origin, cover what the torch path's dense evaluation covers."""
    g = torch.Generator().manual_seed(len(caps))
    n = 600
    a = torch.rand(n, 2, generator=g) * torch.tensor([133.0, 69.0]) + 2
    a[: n // 3] = torch.randint(1, 16, (n // 3, 2), generator=g).float() * 8 + torch.rand(n // 3, 2, generator=g) - 0.5
    b = a + (torch.rand(n, 2, generator=g) - 0.5) * 4
    width = torch.rand(n, generator=g) * 5.7 + 0.3
    prims = R.segments(torch.randint(0, 2, (n,), generator=g), a, b, width, torch.rand(n, 4, generator=g), caps)
    images = torch.zeros(2, 77, 141, 3)
    expected = torch_path(R.draw, images, prims)
    assert_same(expected, R.draw(images, prims))
    far = R.segments(
        torch.zeros(2, dtype=torch.long),
        torch.tensor([[-5e4, 30.3], [70.6, -8e4]]),
        torch.tensor([[5e4, 31.1], [71.2, 8e4]]),
        1.5,
        torch.ones(2, 4),
        caps,
    )
    assert_same(torch_path(R.draw, images[:1], far), R.draw(images[:1], far))
    assert loop_used == [True, True]
