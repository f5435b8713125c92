"""The mesh rasterizer's CUDA kernel (utils/mesh_rasterizer) against its torch path: on a real GPU (-m gpu;
skipped without CUDA and CuPy) and on the CPU through tests/cuda_emulator.py. (Moved out of
test_cuda_kernels.py with the compositor's kernel tests going to tests/gpu_rendering/; its place is
tests/mesh_rasterizer/.)"""

import pytest
import torch

from rasterkit.utils.mesh_rasterizer import raster as M


@pytest.fixture
def device(kernel_device):
    return kernel_device


def random_views(device, seed, views=3, vertices=300, faces=600):
    g = torch.Generator().manual_seed(seed)
    V = torch.rand(views, vertices, 4, generator=g) * 2 - 1
    V[..., 3] = 0.5 + torch.rand(views, vertices, generator=g)
    V[..., :3] *= V[..., 3:4]
    F = torch.randint(0, vertices, (faces, 3), generator=g)
    return V.to(device), F.to(device)


@pytest.mark.parametrize("seed", range(3))
def test_rasterize_kernel_equals_the_torch_path(kernel, device, torch_path, seed):
    V, F = random_views(device, seed)
    expected = torch_path(M.rasterize_views, V, F, 130, 97)
    got = M.rasterize_views(V, F, 130, 97)
    assert torch.equal(expected[0], got[0])
    assert torch.allclose(expected[1], got[1], atol=1e-6)
    culled = M.rasterize_views(V, F, 130, 97, cull_back_faces=True)
    assert torch.equal(torch_path(M.rasterize_views, V, F, 130, 97, cull_back_faces=True)[0], culled[0])


def test_rasterize_kernel_with_a_depth_prior(kernel, device, torch_path):
    V, F = random_views(device, 7, views=1)
    front, _ = M.rasterize_views(V, F, 64, 64)
    prior = torch.rand(1, 64, 64, device=device) * 0.5
    expected = torch_path(M.rasterize_views, V, F, 64, 64, prior)
    got = M.rasterize_views(V, F, 64, 64, prior)
    assert torch.equal(expected[0], got[0])
    assert not torch.equal(front, got[0])


def test_rasterize_kernel_keys_near_the_eye_and_far_behind(kernel, device, torch_path):
    """Corners with w -> 0+ (NDC depth far below -1: dropped fragments) and far past the far plane
    (quantised depth saturated): both paths build the same keys, none wraps around."""
    V, F = random_views(device, 11, views=2, vertices=60, faces=150)
    V[:, :20, 3] = 1e-6  # corners at the eye plane, NDC z ~ -1e6
    V[:, 20:30, 2] = 3e4 * V[:, 20:30, 3]  # NDC z = 3e4: depth ~ 15000, past the 8192 where keys saturate
    expected = torch_path(M.rasterize_views, V, F, 96, 64)
    got = M.rasterize_views(V, F, 96, 64)
    assert torch.equal(expected[0], got[0])
    assert torch.allclose(expected[1], got[1], atol=1e-6)
    assert got[0].unique().numel() > 20


def test_rasterize_kernel_on_large_triangles(kernel, device, torch_path):
    """Two triangles covering a 2048 x 2048 view: many 8x8 blocks per triangle."""
    V = torch.tensor([[[-1.0, -1, 0, 1], [1, -1, 0, 1], [1, 1, 0, 1], [-1, 1, 0.5, 1]]], device=device)
    F = torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)
    expected = torch_path(M.rasterize_views, V, F, 2048, 2048)
    got = M.rasterize_views(V, F, 2048, 2048)
    assert torch.equal(expected[0], got[0])
    assert torch.allclose(expected[1], got[1], atol=1e-6)
    # the first row and column lie on the quad's edges and are covered (the closed inside test); on
    # the last ones float32 rounding decides, pixel by pixel, as in the kernel's arithmetic
    assert bool((got[0][0, :-1, :-1] > 0).all())
