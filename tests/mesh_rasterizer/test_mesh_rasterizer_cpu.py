"""utils/mesh_rasterizer/raster_cpu (numba's depth test and resolve, what the CPU runs) against the torch path
(what MPS, ROCm and CUDA without CuPy run): the same face indices and barycentrics, bit for bit. Both
meet the brute-force reference of test_mesh_rasterizer.py, which runs on the CPU: there, through
numba's loops."""

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
