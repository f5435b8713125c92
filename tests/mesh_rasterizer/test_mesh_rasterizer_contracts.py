"""The input contracts of mesh_rasterizer.rasterize_views on each of its paths, all on the CPU: the torch
path, numba's loops and the CUDA kernels (emulated by tests/cuda_emulator.py): dtypes, contiguity,
requires_grad, the depth prior's size, non-finite vertices, zero sizes, the key's index limit and
launches bounded in size."""

import pytest
import torch

import cuda_emulator
from rasterkit.utils.core import cuda
from rasterkit.utils.mesh_rasterizer import raster as M
from rasterkit.utils.mesh_rasterizer import raster_cuda
from test_raster_cuda import random_views


@pytest.fixture(params=["torch", "numba", "kernel"])
def path(request, monkeypatch):
    """The path rasterize_views takes on the CPU: the torch path (what a GPU without CuPy runs), numba's
    loops (the CPU's default) or the CUDA kernels, emulated."""
    monkeypatch.delenv("RASTERKIT_DISABLE_NUMBA", raising=False)
    monkeypatch.delenv("RASTERKIT_DISABLE_CUPY", raising=False)
    if request.param == "torch":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    elif request.param == "kernel":
        cuda_emulator.install(monkeypatch)
    return request.param


def assert_same(expected, got):
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_any_float_dtype_of_positions(path, dtype):
    V, F = random_views("cpu", 1, views=2, vertices=60, faces=100)
    V = V.to(dtype)
    assert_same(M.rasterize_views(V.float(), F, 40, 32), M.rasterize_views(V, F, 40, 32))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_any_integer_dtype_of_faces(path, dtype):
    V, F = random_views("cpu", 2, views=2, vertices=60, faces=100)
    assert_same(M.rasterize_views(V, F, 40, 32), M.rasterize_views(V, F.to(dtype), 40, 32))


@pytest.mark.parametrize(
    "F,message",
    [
        (torch.tensor([[0.0, 1.0, 2.0]]), "F: face indices must be integers"),
        (torch.tensor([[True, False, True]]), "F: face indices must be integers"),
    ],
)
def test_faces_that_are_not_integers_are_refused(path, F, message):
    with pytest.raises(ValueError, match=message):
        M.rasterize_views(torch.rand(1, 3, 4), F, 8, 8)


def test_positions_that_are_not_floats_are_refused(path):
    with pytest.raises(ValueError, match="V: expected float clip-space vertices, got torch.int64"):
        M.rasterize_views(torch.ones(1, 3, 4, dtype=torch.long), torch.tensor([[0, 1, 2]]), 8, 8)


def test_strided_inputs(path):
    V, F = random_views("cpu", 3, views=2, vertices=60, faces=100)
    strided_V = torch.cat([V, torch.rand_like(V)], 2)[..., :4].transpose(0, 1).contiguous().transpose(0, 1)
    strided_F = F.T.contiguous().T
    assert not strided_V.is_contiguous() and not strided_F.is_contiguous()
    assert_same(M.rasterize_views(V, F, 40, 32), M.rasterize_views(strided_V, strided_F, 40, 32))


def test_positions_that_require_grad(path):
    V, F = random_views("cpu", 4, views=2, vertices=60, faces=100)
    expected = M.rasterize_views(V, F, 40, 32)
    leaf = V.clone().requires_grad_()
    got = M.rasterize_views(leaf * 1, F, 40, 32, torch.zeros(2, 32, 40, requires_grad=True) - 1)
    assert_same(expected, got)
    assert not got[1].requires_grad and leaf.grad is None


@pytest.mark.parametrize("shape", [(1, 32, 40), (2, 32, 39), (2, 31, 40), (0,), (2, 32, 40, 1, 2)])
def test_a_depth_prior_of_the_wrong_size_is_refused(path, shape):
    """The kernel and numba's loop read the prior at every pixel of every view: a smaller one was read
    past its end (and the torch path raised IndexError)."""
    V, F = random_views("cpu", 5, views=2, vertices=60, faces=100)
    prior = torch.zeros(shape)
    with pytest.raises(ValueError, match=r"D: the depth prior must hold views x height x width = 2 x 32 x 40"):
        M.rasterize_views(V, F, 40, 32, prior)


def test_a_depth_prior_of_the_right_size_in_any_float_dtype(path):
    V, F = random_views("cpu", 6, views=2, vertices=60, faces=100)
    prior = torch.rand(2, 32, 40) * 0.5
    assert_same(M.rasterize_views(V, F, 40, 32, prior), M.rasterize_views(V, F, 40, 32, prior.double()))
    with pytest.raises(ValueError, match="D: the depth prior must be float"):
        M.rasterize_views(V, F, 40, 32, torch.zeros(2, 32, 40, dtype=torch.long))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("component", [0, 2, 3])
def test_non_finite_vertices_skip_only_their_faces(path, value, component):
    """As Hunyuan3D-2's kernel does: a face with a non-finite corner is not drawn, every other face is;
    a non-finite vertex that no face uses changes nothing."""
    V, F = random_views("cpu", 7, views=2, vertices=60, faces=100)
    expected = M.rasterize_views(V, F, 40, 32)
    unused = torch.cat([V, torch.full((2, 1, 4), value)], 1)
    assert_same(expected, M.rasterize_views(unused, F, 40, 32))
    bad = V.clone()
    bad[1, 5, component] = value  # in view 1 only
    touching = (F == 5).any(1)
    got = M.rasterize_views(bad, F, 40, 32)
    kept = torch.nonzero(~touching).squeeze(1)
    without = M.rasterize_views(V[1:], F[kept], 40, 32)
    face_ids = torch.cat([torch.zeros(1, dtype=torch.int32), kept.int() + 1])[without[0].long()]
    assert torch.equal(got[0][0], expected[0][0]) and torch.equal(got[0][1], face_ids[0])
    assert torch.equal(got[1][1], without[1][0])
    assert int(touching.sum()) > 0 and not bool(torch.isin(got[0][1], torch.nonzero(touching) + 1).any())


@pytest.mark.parametrize(
    "views,vertices,faces,width,height",
    [(0, 5, 4, 8, 6), (2, 5, 0, 8, 6), (2, 0, 0, 8, 6), (2, 5, 4, 0, 6), (2, 5, 4, 8, 0)],
)
def test_zero_sizes(path, views, vertices, faces, width, height):
    V = torch.rand(views, vertices, 4) + torch.tensor([0.0, 0, 0, 1])
    F = torch.randint(0, max(vertices, 1), (faces, 3))
    findices, barycentric = M.rasterize_views(V, F, width, height)
    assert findices.shape == (views, height, width) and findices.dtype == torch.int32
    assert barycentric.shape == (views, height, width, 3) and barycentric.dtype == torch.float32
    assert findices.sum() == 0 and barycentric.sum() == 0


def test_faces_without_vertices_and_negative_sizes_are_refused(path):
    with pytest.raises(ValueError, match="F: 1 triangles, but V has no vertices"):
        M.rasterize_views(torch.zeros(1, 0, 4), torch.zeros(1, 3, dtype=torch.long), 8, 8)
    with pytest.raises(ValueError, match="width: expected an integer >= 0, got -1"):
        M.rasterize_views(torch.rand(1, 3, 4), torch.tensor([[0, 1, 2]]), -1, 8)


def test_views_times_faces_past_the_keys_triangle_field_is_refused(path):
    """z-buffer keys hold view * M + face in 31 bits: more triangles over all views cannot be told apart.
    Refused before anything of that size is allocated (the inputs here are expanded views)."""
    V = torch.tensor([[-1.0, -1, 0, 1], [1, -1, 0, 1], [0, 1, 0, 1]]).expand(1 << 16, 3, 4)
    F = torch.tensor([[0, 1, 2]]).expand(1 << 15, 3)
    with pytest.raises(ValueError, match=r"F: 32768 triangles x 65536 views = 2147483648 exceeds 2147483647"):
        M.rasterize_views(V, F, 8, 8)


def test_kernel_launches_are_bounded(kernel, torch_path, monkeypatch):
    """Every launch covers at most LAUNCH_BLOCKS blocks of the depth test or LAUNCH_PIXELS pixels of the
    resolve, whatever the input: many small launches give what one large one gives."""
    V = torch.tensor([[[-1.0, -1, 0, 1], [1, -1, 0, 1], [1, 1, 0, 1], [-1, 1, 0.5, 1]]]).expand(2, 4, 4)
    F = torch.tensor([[0, 1, 2], [0, 2, 3], [1, 2, 3]])
    expected = torch_path(M.rasterize_views, V, F, 100, 70)
    grids, launch = [], cuda.kernel

    def counted(source, name):
        run = launch(source, name)
        return lambda grid, block, args: grids.append((name, grid[0] * block[0])) or run(grid, block, args)

    monkeypatch.setattr(cuda, "kernel", counted)
    monkeypatch.setattr(raster_cuda, "LAUNCH_BLOCKS", 128)
    monkeypatch.setattr(raster_cuda, "LAUNCH_PIXELS", 1000)
    assert_same(expected, M.rasterize_views(V, F, 100, 70))
    threads = {name: [count for launched, count in grids if launched == name] for name, _ in grids}
    assert len(threads["rasterize_triangles"]) > 3 and max(threads["rasterize_triangles"]) <= 128
    assert len(threads["resolve_pixels"]) == 14 and max(threads["resolve_pixels"]) <= 1024
