"""utils/mesh_rasterizer/raster_cpu (numba's depth test and resolve, what the CPU runs) against the torch path
(what MPS, ROCm and CUDA without CuPy run): the same face indices and barycentrics, bit for bit. Both
meet the brute-force reference of test_mesh_rasterizer.py, which runs on the CPU: there, through
numba's loops."""

import sys

import pytest
import torch

from rasterkit.utils.mesh_rasterizer import raster as M
from rasterkit.utils.mesh_rasterizer import raster_cpu as mesh_rasterizer_cpu
from test_raster_cuda import random_views


@pytest.fixture
def loops_used(monkeypatch):
    used, depth_test = [], mesh_rasterizer_cpu.depth_test
    monkeypatch.setattr(mesh_rasterizer_cpu, "depth_test", lambda *a, **k: used.append(1) or depth_test(*a, **k))
    return used


def assert_same(expected, got):
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("threads", [1, 2])
def test_the_loops_equal_the_torch_path(torch_path, loops_used, seed, threads, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    V, F = random_views("cpu", seed)
    assert_same(torch_path(M.rasterize_views, V, F, 130, 97), M.rasterize_views(V, F, 130, 97))
    culled = M.rasterize_views(V, F, 130, 97, cull_back_faces=True)
    assert_same(torch_path(M.rasterize_views, V, F, 130, 97, cull_back_faces=True), culled)
    assert len(loops_used) == 2


def test_the_loops_with_a_depth_prior(torch_path):
    V, F = random_views("cpu", 7, views=2)
    prior = torch.rand(2, 64, 64) * 0.5
    got = M.rasterize_views(V, F, 64, 64, prior)
    assert_same(torch_path(M.rasterize_views, V, F, 64, 64, prior), got)
    assert not torch.equal(M.rasterize_views(V, F, 64, 64)[0], got[0])


def test_the_loops_near_the_eye_and_far_behind(torch_path):
    V, F = random_views("cpu", 11, views=2, vertices=60, faces=150)
    V[:, :20, 3] = 1e-6  # corners at the eye plane, NDC z ~ -1e6
    V[:, 20:30, 2] = 3e4 * V[:, 20:30, 3]  # past the depth where keys saturate
    got = M.rasterize_views(V, F, 96, 64)
    assert_same(torch_path(M.rasterize_views, V, F, 96, 64), got)
    assert got[0].unique().numel() > 20


def test_the_loops_on_large_triangles_and_edges(torch_path):
    V = torch.tensor([[[-1.0, -1, 0, 1], [1, -1, 0, 1], [1, 1, 0, 1], [-1, 1, 0.5, 1]]])
    F = torch.tensor([[0, 1, 2], [0, 2, 3]])
    got = M.rasterize_views(V, F, 517, 389)
    assert_same(torch_path(M.rasterize_views, V, F, 517, 389), got)
    assert bool((got[0][0, :-1, :-1] > 0).all())


def test_custom_rasterizer_calls_take_the_loops(loops_used):
    from rasterkit.utils.mesh_rasterizer import custom_rasterizer

    V, F = random_views("cpu", 3, views=1)
    findices, barycentric = custom_rasterizer.rasterize(V, F.int(), (48, 40))
    assert loops_used and findices.shape == (48, 40) and barycentric.shape == (48, 40, 3)


def _grid_sphere(rows: int, columns: int):
    """A unit sphere of rows x columns quads (2 triangles each), seen from 2.6 away: clip-space vertices
    float32 [N,4] and faces int64 [2 * rows * columns,3]."""
    from rasterkit.utils import mesh_rasterizer as R

    theta = torch.linspace(0, torch.pi, rows + 1)[:, None]
    phi = torch.arange(columns) * (2 * torch.pi / columns)
    vertices = torch.stack([theta.sin() * phi.cos(), theta.cos().expand(-1, columns), theta.sin() * phi.sin()], -1)
    homogeneous = torch.cat([vertices.view(-1, 3), torch.ones((rows + 1) * columns, 1)], 1)
    clip = homogeneous @ (R.perspective(50, 1.0, 0.1, 10) @ R.orbit_cameras([30.0], [20.0], 2.6)[0]).T
    row, column = torch.arange(rows)[:, None], torch.arange(columns)
    v00, v01 = row * columns + column, row * columns + (column + 1) % columns
    v10, v11 = v00 + columns, v01 + columns
    faces = torch.cat([torch.stack([v00, v10, v01], -1).view(-1, 3), torch.stack([v01, v10, v11], -1).view(-1, 3)])
    return clip, faces


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_the_loops_memory_at_200k_triangles(torch_path):
    """Issue 33: the loops read the corners through the face indices (no per-triangle copies in torch),
    so that beyond the z-buffer and the outputs (24 B a pixel: 25 MB at 1024^2) a 200,000-triangle mesh
    adds 16 B a vertex and 8 B a triangle: measured 28.4 MB for both calls, under the bound of 37 MB
    (with the torch set-up before them: 70-89 MB). The same bits as the torch path."""
    from memory_peak import peak_bytes
    from rasterkit.utils.mesh_rasterizer import custom_rasterizer

    clip, faces = _grid_sphere(316, 316)
    tri = faces.int()
    assert 199_000 < faces.shape[0] < 201_000
    custom_rasterizer.rasterize(clip[None], tri, (64, 64))  # loads the loops first
    pixels = 1024 * 1024
    for call in (
        lambda: custom_rasterizer.rasterize(clip[None], tri, (1024, 1024)),
        lambda: M.rasterize_views(clip[None], faces, 1024, 1024),
    ):
        assert peak_bytes(call) < 24 * pixels + 12_000_000
    findices, barycentric = custom_rasterizer.rasterize(clip[None], tri, (1024, 1024))
    assert (findices > 0).sum() > pixels // 4
    assert_same(torch_path(custom_rasterizer.rasterize, clip[None], tri, (1024, 1024)), (findices, barycentric))
