"""PrimitiveMesh's render kernel (utils/color_optimizer/render_cuda.py) against the torch path
(`render`): on a real GPU (-m gpu; skipped without CUDA and CuPy) and on the CPU through
tests/cuda_emulator.py. The emulated runs fail, never skip, without a C++ compiler."""

import contextlib

import pytest
import torch

from primitive_scenes import scene, transparent
from rasterkit.utils import color_optimizer as co
from rasterkit.utils.color_optimizer import render_cuda
from rasterkit.utils.color_optimizer import search as co_search

# the CPU torch path rounds a little differently from the emulated kernel (its vector sqrt, cos and sin
# may be an ulp off), so the emulator's tolerance is looser; on the GPU both use CUDA's maths
TOLERANCE = {"cuda": 1e-5, "emulated": 1e-4}


@pytest.fixture
def device(kernel_device):
    return kernel_device


def every_kind(height, width, channels, seed):
    """Two images of shapes of every kind in a height x width working frame: random ones (rotations,
    many past the frame's edges), and ones that test the crossing rules: self-crossing 4-gons, a
    Bezier whose stroke overlaps itself, edges and vertices on pixel edges and sample rows, a
    degenerate rectangle and a tiny ellipse. The second image's last shapes are padding (opacity 0)."""
    g = torch.Generator().manual_seed(seed)
    kind, params = co_search.random_shapes(tuple(range(len(co.KINDS))), 40, 256, 256, g, "cpu")
    frame = torch.tensor([width, height] * 4, dtype=torch.float32)
    params = co.scale_params(kind, params, max(height, width) / 256 * 2)
    params = torch.where(torch.rand(40, 1, generator=g) < 0.3, params - frame / 2, params)  # past the top left
    w, h = float(width), float(height)
    special = torch.tensor(
        [
            [co.POLYGON, 0.2 * w, 0.1 * h, 0.9 * w, 0.8 * h, 0.9 * w, 0.1 * h, 0.1 * w, 0.9 * h],  # bowtie
            # a self-crossing 4-gon whose two crossings meet on a sample row inside a pixel (equal x: a tie)
            [co.POLYGON, 0.25, 0.0625, 8.25, 8.0625, 8.25, 0.0625, 0.25, 8.0625],
            [co.QUADRATIC, 0.1 * w, 0.5 * h, 1.4 * w, 0.6 * h, 0.15 * w, 0.7 * h, 0.2 * h, 0],  # hairpin stroke
            [co.RECTANGLE, 3, 2, 11, 7.5, 0, 0, 0, 0],  # pixel edges
            [co.TRIANGLE, 4.5, 1.0625, 20, 9.5625, 2, 13.9375, 0, 0],  # vertices on sample rows
            [co.RECTANGLE, 5, 6, 30, 6, 0, 0, 0, 0],  # no height
            [co.ELLIPSE, 10.3, 12.7, 0.0001, 0.4, 0, 0, 0, 0],  # thinner than the 1e-3 floor
            [co.ROTATED_RECTANGLE, 0.5 * w, 0.5 * h, 1.5 * w, 0.2 * h, 90, 0, 0, 0],  # across the frame
            [co.ROTATED_ELLIPSE, 0.6 * w, 0.4 * h, 0.8 * w, 0.15 * h, -37.5, 0, 0, 0],
            [co.CIRCLE, w, h, 0.3 * h, 0, 0, 0, 0, 0],  # on the corner
            [co.LINE, 0.1 * w, 0.8 * h, 0.9 * w, 0.3 * h, 2.5, 0, 0, 0],
            [co.LINE, 3, 4, 3, 4, 2, 0, 0, 0],  # no length
            [co.POLYLINE, 0.1 * w, 0.9 * h, 0.5 * w, 0.1 * h, 0.9 * w, 0.8 * h, 3.5, 0],  # a sharp turn, mitred
            [co.POLYLINE, 0.2 * w, 0.2 * h, 0.8 * w, 0.5 * h, 0.1 * w, 0.3 * h, 2.0, 0],  # a hairpin (miter capped)
        ]
    )
    kind = torch.cat([special[:, 0].long(), kind]).expand(2, -1).clone()
    kind[1] = kind[1].flip(0)
    params = torch.cat([special[:, 1:], params]).expand(2, -1, -1).clone()
    params[1] = params[1].flip(0)
    shapes = kind.shape[1]
    alpha = torch.randint(1, 256, (2, shapes), generator=g) / 255
    alpha[0, 3] = 1.0
    alpha[1, -5:] = 0.0
    color = torch.randint(0, 256, (2, shapes, 3), generator=g) / 255
    background = torch.rand(2, channels, generator=g)
    if channels == 4:
        background[:, :3] *= background[:, 3:]
    return co.Approximation(
        kind=kind,
        params=params,
        color=color,
        alpha=alpha,
        count=torch.tensor([shapes, shapes - 5]),
        error=torch.zeros(2, shapes + 1),
        background=background,
        height=height,
        width=width,
    )


def assert_renders_alike(kernel, torch_path, result, height, width, scale, frame_every):
    expected = torch_path(co.render, result, height, width, scale, frame_every)
    got = render_cuda.render_cuda(result, height, width, scale, frame_every)
    assert got[0].shape == expected[0].shape
    assert (got[0] - expected[0]).abs().max() <= TOLERANCE[kernel]
    if frame_every:
        assert got[1].shape == expected[1].shape
        assert (got[1] - expected[1]).abs().max() <= TOLERANCE[kernel]
        assert torch.equal(got[1][:, -1], got[0])
    else:
        assert got[1] is None and expected[1] is None
    return got


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("frame_every", [0, 3])
@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_render_kernel_equals_the_torch_path_on_every_kind(kernel, device, torch_path, channels, frame_every, scale):
    height, width = 48, 64
    result = every_kind(round(height / scale), round(width / scale), channels, seed=channels + frame_every)
    result = co.Approximation(**{k: v.to(device) if torch.is_tensor(v) else v for k, v in vars(result).items()})
    image, _ = assert_renders_alike(kernel, torch_path, result, height, width, scale, frame_every)
    assert (image - result.background[:, None, None, :]).abs().amax((1, 2, 3)).min() > 0.1  # it draws


@pytest.mark.parametrize("channels", [3, 4])
def test_render_kernel_equals_the_torch_path_on_a_search_result(kernel, device, torch_path, channels):
    target = scene(24, 32, seed=channels)
    if channels == 4:
        target = transparent(target)
    generator = torch.Generator(device).manual_seed(0)
    result = torch_path(
        co.approximate,
        target.to(device),
        12,
        tuple(range(len(co.KINDS))),
        alpha=0,
        candidates=200,
        mutations=20,
        generator=generator,
    )
    assert_renders_alike(kernel, torch_path, result, 48, 64, 2.0, 5)


def test_render_in_row_bands_equals_one_launch(kernel, device, monkeypatch):
    """Bands of 3 rows (a small LAUNCH_ITERATIONS; the last band shorter, bands across the two images)
    draw what one launch draws, bit for bit, frames included."""
    result = every_kind(24, 32, 3, seed=1)
    result = co.Approximation(**{k: v.to(device) if torch.is_tensor(v) else v for k, v in vars(result).items()})
    whole = render_cuda.render_cuda(result, 25, 32, 1.0, 7)
    launches = []
    launch = render_cuda.cuda.kernel
    monkeypatch.setattr(render_cuda.cuda, "kernel", lambda source, name: launches.append(name) or launch(source, name))
    monkeypatch.setattr(render_cuda, "LAUNCH_ITERATIONS", 3 * 32 * result.kind.shape[1])
    banded = render_cuda.render_cuda(result, 25, 32, 1.0, 7)
    assert launches.count("render_shapes") == -(-2 * 25 // 3)
    assert torch.equal(banded[0], whole[0]) and torch.equal(banded[1], whole[1])


def test_render_kernel_op_budget(monkeypatch):
    """What the host does around the launches, counted on the CPU at 1024 px with 100 shapes of every
    kind and frames: two launches, two small torch ops (the scale and the outline's curve parameters),
    no host sync, no float64 (the torch path: ~4,300 ops and ~100 syncs)."""
    from opcount import OpCount
    from rasterkit.utils.core import cuda

    launches = []
    monkeypatch.setattr(cuda, "kernel", lambda source, name: lambda grid, block, args: launches.append(name))
    monkeypatch.setattr(cuda, "arrays", lambda *tensors: list(tensors))
    monkeypatch.setattr(cuda, "stream", contextlib.nullcontext)
    g = torch.Generator().manual_seed(0)
    kind, params = co_search.random_shapes(tuple(range(8)), 100, 256, 256, g, "cpu")
    result = co.Approximation(
        kind=kind[None],
        params=params[None],
        color=torch.rand(1, 100, 3, generator=g),
        alpha=torch.full((1, 100), 0.5),
        count=torch.tensor([100]),
        error=torch.zeros(1, 101),
        background=torch.rand(1, 3, generator=g),
        height=256,
        width=256,
    )
    with OpCount() as count:
        render_cuda.render_cuda(result, 1024, 1024, 4.0, frame_every=10)
    assert launches == ["shape_geometry", "render_shapes"]  # 1024 px x 100 shapes: one band
    assert count.launches <= 2 and count.syncs == 0 and count.float64 == 0, count.summary()


def test_render_kernel_takes_any_float_dtype_grad_and_strides(kernel, device):
    """Issue 28: a float16 or float64 result (written through float* before), one requiring grad
    (DLPack refused it) or strided, renders as its float32 values do; unknown kind codes are not
    drawn (their family was read past its table) and bad inputs are named as the torch path names them."""
    from test_search import refusals

    result = every_kind(24, 32, 4, seed=2)
    result = co.Approximation(**{k: v.to(device) if torch.is_tensor(v) else v for k, v in vars(result).items()})
    expected = render_cuda.render_cuda(result, 24, 32, 1.0, 5)
    for dtype in (torch.float16, torch.float64):
        odd = {name: getattr(result, name).to(dtype) for name in ("params", "color", "alpha", "background")}
        odd["params"] = odd["params"].transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
        got = render_cuda.render_cuda(co.Approximation(**{**vars(result), **odd}), 24, 32, 1.0, 5)
        plain = render_cuda.render_cuda(
            co.Approximation(**{**vars(result), **{k: v.detach().float() for k, v in odd.items()}}), 24, 32, 1.0, 5
        )
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1])
    unknown = result.kind.clone()
    unknown[:, 3] = 99
    alpha = result.alpha.clone()
    alpha[:, 3] = 0
    got = render_cuda.render_cuda(co.Approximation(**{**vars(result), "kind": unknown}), 24, 32, 1.0, 5)
    undrawn = render_cuda.render_cuda(co.Approximation(**{**vars(result), "alpha": alpha}), 24, 32, 1.0, 5)
    assert torch.equal(got[0], undrawn[0]) and not torch.equal(got[0], expected[0])
    for args, name in refusals(result):
        with pytest.raises(ValueError, match=f"^{name}: "):
            render_cuda.render_cuda(*args)
