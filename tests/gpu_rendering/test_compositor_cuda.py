"""The overlay compositor's CUDA kernel (utils/gpu_rendering/compositor_cuda.py) against its torch path: on a
real GPU (-m gpu; skipped without CUDA and CuPy) and on the CPU through tests/cuda_emulator.py, so that
CI checks the kernels' logic too. The emulated runs fail, never skip, without a C++ compiler: a CI that
silently stopped checking the kernels would look green."""

import pytest
import torch

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.core import cuda
from rasterkit.utils.gpu_rendering import compositor_cuda
from rasterkit.utils.gpu_rendering.compositor import _bin, _Pairs
from rasterkit.utils.gpu_rendering.compositor_cuda import composite_tiles_cuda
from rasterkit.utils.gpu_rendering.constants import PAIR_MISSED

# The kernels (built with --fmad=false; the emulator with -ffp-contract=off) and the torch path round
# differently, on values <= 1 (ulp 1.2e-7): the torch path composites by products of transmittances, the
# kernel one shape at a time (~2 ulp a shape, <= ~10 shapes a pixel here: ~2.4e-6); torch's CPU sqrt is
# not correctly rounded (1 ulp off: segment lengths, cap distances of a few px: ~1e-6); on a GPU torch's
# own kernels contract a*b+c into FMAs (addcmul, lerp: 1 ulp each). About 4e-6 in all: 2.9e-6 measured on
# every_kind's scenes (1.38e-5 before segment ends were measured from the nearer end), so 1e-5 both ways.
TOLERANCE = {"cuda": 1e-5, "emulated": 1e-5}


@pytest.fixture
def device(kernel_device):
    return kernel_device


def every_kind(batch, height, width, count, seed):
    """A scene with every primitive kind and option (turned boxes, ellipses and halos too; triangles), spread over
    the frames and past their edges."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731
    frames = torch.randint(0, batch, (count,), generator=g)
    size = torch.tensor([width, height], dtype=torch.float32)
    corner = rand(count, 2) * size * 1.2 - 0.1 * size
    xyxy = torch.cat([corner, corner + rand(count, 2) * 60 + 1], 1)
    colours = torch.cat([rand(count, 3), rand(count, 1) * 0.9 + 0.1], 1)
    a, b = rand(count, 2) * size, rand(count, 2) * size
    return R.concat(
        R.rounded_boxes(
            frames, xyxy, rand(count) * 5, rand(count) * 15, colours, colours * torch.tensor([1, 1, 1, 0.4])
        ),
        R.rounded_boxes(frames, xyxy.flip(1), 2.0, 4.0, colours, (0, 0, 0, 0), corner_length=rand(count) * 12),
        R.segments(frames, a, b, rand(count) * 4, colours),
        R.segments(frames, b, a, 0.4, colours, caps="butt"),
        R.polylines(frames[:8], rand(8, 12, 2) * size, torch.randint(2, 13, (8,), generator=g), 3.0, colours[:8]),
        R.discs(frames, a, rand(count) * 20, colours, ring_width=torch.where(rand(count) > 0.5, 2.5, 0.0)),
        R.sprites(frames[:6], rand(6, 2) * size, torch.tensor([[0, 0, 16, 10], [3, 2, 9, 9]] * 3), colours[:6]),
        # turned boxes (some at angle 0 among them) with corner brackets on some, and turned ellipses
        R.rounded_boxes(
            frames,
            xyxy,
            rand(count) * 5,
            rand(count) * 15,
            colours,
            colours * torch.tensor([1, 1, 1, 0.4]),
            corner_length=torch.where(rand(count) > 0.6, rand(count) * 12, 0.0),
            angle=torch.where(rand(count) > 0.2, rand(count) * 20 - 10, 0.0),
        ),
        R.ellipses(
            frames,
            b,
            rand(count, 2) * 30,
            torch.where(rand(count) > 0.3, rand(count) * 5, 0.0),
            colours,
            angle=rand(count) * 7,
            fill_color=colours * torch.tensor([1, 1, 1, 0.5]),
        ),
        # halos, some turned, some with rounded corners, some of no width
        R.halos(
            frames,
            xyxy,
            torch.where(rand(count) > 0.1, rand(count) * 20, 0.0),
            rand(count) * 15,
            colours * torch.tensor([1, 1, 1, 0.6]),
            angle=torch.where(rand(count) > 0.5, rand(count) * 7, 0.0),
        ),
        # triangles of every turn and size, sharp corners among them, and some of no area
        R.triangles(
            frames,
            a,
            torch.where(rand(count, 1) > 0.1, b, a),
            a + (rand(count, 2) - 0.5) * 80,
            colours * torch.tensor([1, 1, 1, 0.7]),
        ),
    )


@pytest.mark.parametrize("channels", [3, 4])
def test_composite_kernel_equals_the_torch_path(kernel, device, torch_path, channels):
    torch.manual_seed(0)
    images = torch.rand(3, 77, 141, channels, device=device)  # partial tiles on both axes
    atlas = torch.rand(20, 24, device=device)
    prims = every_kind(3, 77, 141, 40, seed=channels).to(device)
    expected = torch_path(R.draw, images, prims, atlas=atlas)
    got = R.draw(images, prims, atlas=atlas)
    for name, e, g in zip(("image", "alpha", "layer"), expected, got, strict=False):
        assert (e - g).abs().max() <= TOLERANCE[kernel], name
    assert got[1].sum() > 100  # the scene draws something


def test_composite_kernel_on_a_dense_4k_frame(kernel, device, torch_path):
    images = torch.rand(1, 2160, 3840, 3, device=device)
    g = torch.Generator().manual_seed(3)
    corner = torch.rand(1000, 2, generator=g) * torch.tensor([3600.0, 1900.0])
    xyxy = torch.cat([corner, corner + torch.rand(1000, 2, generator=g) * 260 + 40], 1).to(device)
    prims = R.rounded_boxes(0, xyxy, 3.0, 12.0, (1, 0, 0, 1), (0, 1, 0, 0.25))
    expected = torch_path(R.draw, images, prims)
    got = R.draw(images, prims)
    assert all((e - g).abs().max() <= TOLERANCE[kernel] for e, g in zip(expected, got, strict=False))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_composite_kernel_takes_any_float_dtype(kernel, device, torch_path, dtype):
    """Rendered in float32 (one conversion on the device), returned in the images' dtype: the kernel never sees
    another dtype (a float16 image was written past its end on the GPU)."""
    images = torch.rand(2, 21, 30, 3, device=device).to(dtype)
    prims = every_kind(2, 21, 30, 12, seed=5).to(device)
    atlas = torch.rand(20, 24, device=device)
    expected = torch_path(R.draw, images.float(), prims, atlas=atlas)
    got = R.draw(images, prims, atlas=atlas)
    assert got[0].dtype == dtype and got[1].dtype == got[2].dtype == torch.float32
    # within the kernel's tolerance, rounded to the dtype (one unit in its last place)
    assert (got[0].float() - expected[0]).abs().max() <= TOLERANCE[kernel] + torch.finfo(dtype).eps
    assert all((e - g).abs().max() <= TOLERANCE[kernel] for e, g in zip(expected[1:], got[1:], strict=False))


def test_composite_kernel_reads_tensors_that_require_grad(kernel, device, torch_path):
    images = torch.rand(1, 16, 24, 4, device=device).requires_grad_()
    prims = every_kind(1, 16, 24, 8, seed=6).to(device)
    prims.params.requires_grad_()
    atlas = torch.rand(20, 24, device=device, requires_grad=True)
    expected = torch_path(R.draw, images.detach(), prims, atlas=atlas.detach())
    got = R.draw(images, prims, atlas=atlas)
    assert all((e - g).abs().max() <= TOLERANCE[kernel] for e, g in zip(expected, got, strict=False))


@pytest.mark.parametrize("shape", [(0, 16, 24, 3), (1, 0, 24, 3), (2, 16, 0, 4)])
def test_composite_kernel_on_empty_images(kernel, device, shape):
    prims = every_kind(1, 16, 24, 8, seed=7).to(device)
    image, alpha, layer = R.draw(torch.rand(*shape, device=device), prims)
    assert image.shape == shape and alpha.shape == shape[:3] and layer.shape == (*shape[:3], 4)
    assert R.coverage(prims, *shape[:3], device=device).shape == shape[:3]


def test_composite_kernel_refuses_what_it_cannot_write(kernel, device):
    """The launcher passes the kernel only contiguous float32 buffers of the sizes it assumes, within its grid."""
    frames = torch.rand(1, 16, 24, 3, device=device)
    prims = every_kind(1, 16, 24, 8, seed=8).to(device)
    pairs = _bin(prims, 0, 1, 16, 24, R.TILE)
    outputs = torch.empty_like(frames), torch.empty(1, 16, 24, device=device), torch.empty(1, 16, 24, 4, device=device)
    bad = {
        "image": (torch.empty(1, 24, 16, 3, device=device).transpose(1, 2), *outputs[1:]),  # not contiguous
        "layer": (outputs[0], outputs[1], torch.empty(1, 16, 24, 4, device=device, dtype=torch.float16)),
    }
    for name, (image, alpha, layer) in bad.items():
        with pytest.raises(ValueError, match=name):
            composite_tiles_cuda(frames, image, alpha, layer, pairs, prims, None, R.TILE)
    with pytest.raises(ValueError, match="frames"):
        composite_tiles_cuda(frames.half(), *outputs, pairs, prims, None, R.TILE)
    with pytest.raises(ValueError, match="channels"):
        composite_tiles_cuda(
            frames[..., :2].contiguous(), outputs[0][..., :2].contiguous(), *outputs[1:], pairs, prims, None, R.TILE
        )
    with pytest.raises(ValueError, match="tile"):
        composite_tiles_cuda(frames, *outputs, pairs, prims, None, 64)
    huge = _Pairs(
        pairs.tile,
        pairs.primitive,
        pairs.pair_class,
        pairs.origin,
        pairs.per_kind,
        pairs.butt_caps,
        1 << 20,
        1 << 8,
        1 << 8,
    )
    with pytest.raises(ValueError, match="limits"):
        composite_tiles_cuda(frames, *outputs, huge, prims, None, R.TILE)


@pytest.mark.parametrize("per_launch", [1, 5, 64])
def test_composite_kernel_in_launches_of_few_pairs(kernel, device, monkeypatch, per_launch):
    """Launches of at most PAIRS_PER_LAUNCH pairs (a tile's pairs, and one shape's, cut between launches) give
    the pixels of one launch exactly."""
    torch.manual_seed(1)
    images = torch.rand(2, 19, 27, 4, device=device)
    zigzag = torch.stack([torch.arange(40.0) % 2 * 5 + 10, torch.arange(40.0) % 3 * 3 + 10], 1)[None]  # in one tile
    prims = R.concat(
        every_kind(2, 19, 27, 10, seed=9), R.polylines(1, zigzag, torch.tensor([40]), 2.5, (0.2, 0.9, 0.4, 0.6))
    ).to(device)
    atlas = torch.rand(20, 24, device=device)
    expected = R.draw(images, prims, atlas=atlas)
    launches = []
    launch = cuda.kernel
    monkeypatch.setattr(cuda, "kernel", lambda *a: lambda grid, *rest: launches.append(grid) or launch(*a)(grid, *rest))
    monkeypatch.setattr(compositor_cuda, "PAIRS_PER_LAUNCH", per_launch)
    got = R.draw(images, prims, atlas=atlas)
    pairs = _bin(prims, 0, 2, 19, 27, R.TILE)
    kept = int((pairs.pair_class != PAIR_MISSED).sum())
    assert len(launches) == -(-kept // per_launch) and sum(g[0] for g in launches) <= pairs.n_tiles + len(launches)
    assert all(torch.equal(e, g) for e, g in zip(expected, got, strict=False))
