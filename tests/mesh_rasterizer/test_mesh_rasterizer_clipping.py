"""Near-plane clipping in mesh_rasterizer.rasterize_views against a brute-force ray cast written here in
float64 numpy (no clip space: rays from the eye through each pixel centre, nearest hit at least `near`
in front of the eye), on the torch path, numba's loops and the emulated CUDA kernels."""

import math

import numpy as np
import pytest
import torch

import cuda_emulator
from rasterkit.utils import mesh_rasterizer as M

NEAR, FOV = 0.1, 70.0


@pytest.fixture(params=["torch", "numba", "kernel"])
def path(request, monkeypatch):
    monkeypatch.delenv("RASTERKIT_DISABLE_NUMBA", raising=False)
    monkeypatch.delenv("RASTERKIT_DISABLE_CUPY", raising=False)
    if request.param == "torch":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    elif request.param == "kernel":
        cuda_emulator.install(monkeypatch)
    return request.param


def ray_cast(vertices, faces, eye, target, width, height):
    """Face index + 1 (0: nothing) [H,W] and barycentric weights of the face's corners [H,W,3] of the
    nearest hit at distance >= NEAR along the view axis, for the pixel centres of the rasterizer's screen
    mapping: pixel (px, py) looks through NDC (px / (W - 1) * 2 - 1, py / (H - 1) * 2 - 1), y up."""
    vertices, eye = np.asarray(vertices, np.float64), np.asarray(eye, np.float64)
    forward = np.asarray(target, np.float64) - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    half = math.tan(math.radians(FOV) / 2)
    x = (np.arange(width) / (width - 1) * 2 - 1) * half * width / height
    y = (np.arange(height) / (height - 1) * 2 - 1) * half
    rays = forward + x[None, :, None] * right + y[:, None, None] * up  # [H,W,3], unit length along forward
    a, b, c = (vertices[faces[:, i]] for i in range(3))  # Moller-Trumbore, every ray against every face
    ab, ac = b - a, c - a
    p = np.cross(rays[:, :, None], ac)  # [H,W,M,3]
    det = np.einsum("hwmk,mk->hwm", p, ab)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = eye - a
        u = np.einsum("hwmk,mk->hwm", p, s) / det
        q = np.cross(s, ab)
        v = np.einsum("hwk,mk->hwm", rays, q) / det
        t = np.einsum("mk,mk->m", ac, q) / det  # the hit's distance along the view axis
    hit = (u >= 0) & (v >= 0) & (u + v <= 1) & (t >= NEAR) & np.isfinite(t)
    t = np.where(hit, t, np.inf)
    face = t.argmin(-1)
    found = np.isfinite(t.min(-1))
    pick = lambda values: np.take_along_axis(values, face[..., None], -1)[..., 0]  # noqa: E731
    barycentric = np.stack([1 - pick(u) - pick(v), pick(u), pick(v)], -1)
    return np.where(found, face + 1, 0), np.where(found[..., None], barycentric, 0)


def clip_space(vertices, eye, target, width, height):
    view = M.look_at(
        torch.tensor([eye], dtype=torch.float32),
        torch.tensor([target], dtype=torch.float32),
        torch.tensor([[0.0, 1.0, 0.0]]),
    )
    projection = M.perspective(FOV, width / height, NEAR, 100.0)
    homogeneous = torch.cat([torch.tensor(vertices, dtype=torch.float32), torch.ones(len(vertices), 1)], 1)
    return torch.einsum("bij,nj->bni", projection @ view, homogeneous)


def compare(vertices, faces, eye, target, width, height):
    clip = clip_space(vertices, eye, target, width, height)
    findices, barycentric = M.rasterize_views(clip, torch.tensor(faces), width, height)
    expected, expected_barycentric = ray_cast(vertices, faces, eye, target, width, height)
    got, got_barycentric = findices[0].numpy(), barycentric[0].numpy()
    same = got == expected
    covered = (got > 0) | (expected > 0)
    both = same & (got > 0)
    return clip, got, expected, same, covered, np.abs(got_barycentric - expected_barycentric)[both]


def test_a_floor_reaching_behind_the_camera(path):
    """Two triangles from far ahead to far behind the eye: each has a corner behind it (w < 0), so
    without clipping nothing is drawn; clipped, the floor fills the lower half of the view."""
    vertices = [[-20.0, -1, -20], [20, -1, -20], [20, -1, 20], [-20, -1, 20]]
    faces = np.array([[0, 2, 1], [0, 3, 2]])
    clip, got, expected, same, covered, error = compare(vertices, faces, (0.0, 0, 0), (0.0, -0.2, -1), 96, 64)
    assert bool((clip[0, :, 3] < 0).any()) and bool((clip[0, :, 3] > 0).any())
    assert int((M.rasterize_views(clip, torch.tensor(faces), 96, 64, clip_near=False)[0] > 0).sum()) == 0
    assert covered.sum() > 0.4 * 96 * 64
    assert same[covered].mean() >= 0.995  # the diagonal between the two triangles: either side (measured: 1.0)
    assert error.max() <= 1e-4 and error.mean() <= 1e-5  # measured: 3.4e-7 and 2.6e-8


def test_the_camera_inside_a_box(path):
    """Every wall of a closed box around the eye has triangles reaching behind it: every pixel sees a wall."""
    import trimesh

    box = trimesh.creation.box(extents=(4.0, 3.0, 5.0))
    vertices, faces = np.asarray(box.vertices), np.asarray(box.faces)
    clip, got, expected, same, covered, error = compare(vertices, faces, (0.4, 0.3, -0.2), (1.5, -0.2, 1.0), 80, 64)
    assert bool((clip[0, :, 3] < 0).any())
    assert (expected > 0).all() and (got > 0).all()
    assert same.mean() >= 0.99  # edges between triangles: either side
    assert error.max() <= 1e-4 and error.mean() <= 1e-5  # measured: 2.3e-6 and 1.0e-7


def test_clipping_leaves_meshes_in_front_of_the_eye_bit_for_bit(path):
    from test_raster_cuda import random_views

    V, F = random_views("cpu", 9, views=2)
    expected = M.rasterize_views(V, F, 64, 48, clip_near=False)
    got = M.rasterize_views(V, F, 64, 48)
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])
