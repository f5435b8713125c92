"""The mesh rasterizer against brute-force references (float64 geometry; float32 arithmetic of
Hunyuan3D-2's kernel), watertightness, depth prior, keys near the eye, op budget, bad input."""

import numpy as np
import pytest
import torch

from opcount import OpCount
from rasterkit.utils import mesh_rasterizer as M

f32 = np.float32


def screen(V, width, height):
    """The documented screen mapping, in float32 as the kernel computes it: x, y, depth [N] each."""
    V = V.float().numpy()
    ndc = V[:, :3] / V[:, 3:4]
    x = (ndc[:, 0] * f32(0.5) + f32(0.5)) * f32(width - 1) + f32(0.5)
    y = (ndc[:, 1] * f32(0.5) + f32(0.5)) * f32(height - 1) + f32(0.5)
    return x, y, ndc[:, 2] * f32(0.49999) + f32(0.5)


def reference(V, F, width, height, prior=None, truncation=1e-6, tolerance=1e-4):
    """Brute force over every triangle and pixel, in float64 from the float32 screen corners.

    Returns findices int [H,W], perspective-correct barycentric [H,W,3] and `unsure` bool [H,W]:
    pixels within `tolerance` pixels of the edge of a triangle, or where another
    fragment's depth comes within one quantisation step of the winner's, where float32 rounding decides.
    """
    x, y, z = (c.astype(np.float64) for c in screen(V, width, height))
    w = V[:, 3].double().numpy()
    F = F.long().numpy()
    px, py = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    threshold = None
    if prior is not None:
        threshold = (np.asarray(prior, np.float32) * f32(0.49999) + f32(0.5) + f32(truncation)).astype(np.float64)
    fragments = []
    unsure = np.zeros((height, width), bool)
    for i, j, k in F:
        if min(w[i], w[j], w[k]) <= 0:
            fragments.append(None)
            continue
        area = (x[j] - x[i]) * (y[k] - y[i]) - (y[j] - y[i]) * (x[k] - x[i])
        if area == 0:
            fragments.append(None)
            continue
        lb = ((px - x[i]) * (y[k] - y[i]) - (py - y[i]) * (x[k] - x[i])) / area
        lc = ((x[j] - x[i]) * (py - y[i]) - (y[j] - y[i]) * (px - x[i])) / area
        la = 1 - lb - lc
        least = np.minimum(np.minimum(la, lb), lc)
        # distances to the edges opposite each corner: |l| times the corner's height over that edge
        lengths = [
            np.hypot(x[k] - x[j], y[k] - y[j]),
            np.hypot(x[k] - x[i], y[k] - y[i]),
            np.hypot(x[j] - x[i], y[j] - y[i]),
        ]
        distance = np.minimum.reduce(
            [np.abs(l) * abs(area) / length for l, length in zip((la, lb, lc), lengths, strict=False)]  # noqa: E741
        )
        unsure |= (least > -1) & (distance < tolerance)
        depth = la * z[i] + lb * z[j] + lc * z[k]
        visible = (least >= 0) & (depth >= 0 if threshold is None else (depth >= threshold) & (depth * 2**18 > -1))
        if threshold is not None:
            unsure |= (least >= 0) & (np.abs(depth - threshold) < 1e-6)
        weights = np.stack([la / w[i], lb / w[j], lc / w[k]], -1)
        fragments.append((visible, depth * 2**18, weights / weights.sum(-1, keepdims=True)))
    best = np.full((height, width), np.inf)
    findices = np.zeros((height, width), np.int64)
    barycentric = np.zeros((height, width, 3))
    scaled_of_winner = np.zeros((height, width))
    for face, fragment in enumerate(fragments):
        if fragment is None:
            continue
        visible, scaled, weights = fragment
        key = np.minimum(np.trunc(scaled), 2**31) + face * 1e-9  # nearest first, then the lower face
        better = visible & (key < best)
        best[better], findices[better] = key[better], face + 1
        barycentric[better], scaled_of_winner[better] = weights[better], scaled[better]
    for face, fragment in enumerate(fragments):
        if fragment is not None:
            visible, scaled, _ = fragment
            unsure |= visible & (findices != face + 1) & (np.abs(scaled - scaled_of_winner) < 1)
    return findices, barycentric, unsure


def kernel_arithmetic(V, F, width, height):
    """findices as Hunyuan3D-2's kernel computes them: float32 edge functions S(a, p, c), S(a, b, p)
    times a float32 reciprocal of the area, alpha = 1 - beta - gamma in float64 rounded to float32,
    closed inside test, float32 depth quantised to 2^-18, nearest then lowest face (no prior)."""
    x, y, z = screen(V, width, height)
    columns, rows = np.meshgrid(np.arange(width), np.arange(height))
    px, py = columns.astype(f32) + f32(0.5), rows.astype(f32) + f32(0.5)
    best = np.full((height, width), np.iinfo(np.int64).max)
    for face, (i, j, k) in enumerate(F.long().numpy()):
        # the pixels it tries: from trunc(min) while below max + 1, on both axes
        tried = (
            (columns >= np.trunc(min(x[i], x[j], x[k])))
            & (columns < max(x[i], x[j], x[k]) + f32(1))
            & (rows >= np.trunc(min(y[i], y[j], y[k])))
            & (rows < max(y[i], y[j], y[k]) + f32(1))
        )
        area = (x[k] - x[i]) * (y[j] - y[i]) - (x[j] - x[i]) * (y[k] - y[i])
        if area == 0 or min(V[i, 3], V[j, 3], V[k, 3]) <= 0:
            continue
        inverse = f32(1.0 / np.float64(area))
        beta = ((x[k] - x[i]) * (py - y[i]) - (px - x[i]) * (y[k] - y[i])) * inverse
        gamma = ((px - x[i]) * (y[j] - y[i]) - (x[j] - x[i]) * (py - y[i])) * inverse
        alpha = ((1.0 - beta.astype(np.float64)) - gamma.astype(np.float64)).astype(f32)
        inside = (alpha >= 0) & (alpha <= 1) & (beta >= 0) & (beta <= 1) & (gamma >= 0) & (gamma <= 1)
        depth = (alpha * z[i] + beta * z[j]) + gamma * z[k]
        inside &= tried & (depth >= 0)
        key = np.trunc(np.minimum(depth * f32(2**18), f32(2**31))).astype(np.int64) * 2**31 + face + 1
        best = np.where(inside, np.minimum(best, key), best)
    return np.where(best == np.iinfo(np.int64).max, 0, best % 2**31)


def random_mesh(seed, vertices=40, faces=60):
    generator = torch.Generator().manual_seed(seed)
    V = torch.rand(vertices, 4, generator=generator) * 2 - 1
    V[:, 2] = V[:, 2] * 0.9
    V[:, 3] = 0.5 + torch.rand(vertices, generator=generator)  # perspective: w varies
    V[:, :3] *= V[:, 3:4]
    F = torch.randint(0, vertices, (faces, 3), generator=generator).int()
    return V, F


def check_against_reference(V, F, width, height, barycentric_tolerance=2e-5, unsure_share=0.02, tolerance=1e-4, **kw):
    findices, barycentric = M.rasterize(V, F, width, height, **kw)
    expected, expected_barycentric, unsure = reference(V, F, width, height, tolerance=tolerance, **kw)
    assert findices.dtype == torch.int32 and barycentric.dtype == torch.float32
    sure = ~unsure
    assert np.array_equal(findices.numpy()[sure], expected[sure])
    assert unsure.mean() <= unsure_share
    same = findices.numpy() == expected
    assert np.abs(barycentric.numpy()[same] - expected_barycentric[same]).max() <= barycentric_tolerance
    assert barycentric[findices == 0].abs().sum() == 0
    return findices, barycentric


@pytest.mark.parametrize("seed,width,height", [(0, 48, 40), (1, 48, 40), (2, 48, 40), (3, 48, 40), ("wide", 130, 97)])
def test_faces_and_barycentrics_equal_the_float64_reference(seed, width, height):
    if seed == "wide":  # triangles about as wide as the frame
        V = torch.tensor([[-1.0, -0.9, 0.1, 1], [0.999, -0.8, 0.2, 1], [0.0, 0.95, 0.3, 1], [-0.98, 0.9, 0.0, 1]])
        F = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    else:
        V, F = random_mesh(seed)
    findices, _ = check_against_reference(V, F, width, height)
    assert np.array_equal(findices.numpy(), kernel_arithmetic(V, F, width, height))


@pytest.mark.parametrize("size", [(64, 64), (48, 40), (33, 33)])
def test_a_full_frame_quad_covers_row_0_and_column_0(size):
    """Corners at NDC +-1 land on the first and last pixel centres: the closed inside test covers
    row 0 and column 0 (the edges x = 0.5, y = 0.5 are exact in float32). The far edges are where
    float32 rounding decides, pixel by pixel, exactly as the kernel's arithmetic does."""
    width, height = size
    V = torch.tensor([[-1.0, -1, 0, 1], [1, -1, 0, 1], [1, 1, 0, 1], [-1, 1, 0.5, 1]])
    F = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    findices, _ = check_against_reference(V, F, width, height, unsure_share=0.2)  # the border and diagonal
    assert bool((findices[0] > 0).all()) and bool((findices[:, 0] > 0).all())
    assert bool((findices[:-1, :-1] > 0).all())
    assert np.array_equal(findices.numpy(), kernel_arithmetic(V, F, width, height))


def test_sliver_barycentrics_are_float32_accurate():
    """Long thin triangles (a few hundredths of a pixel to one pixel wide): the old 1/256 px vertex
    snapping moved their edges by up to 0.18 in barycentric units; float edge functions stay near 1e-6."""
    g = torch.Generator().manual_seed(5)
    count = 40
    start = torch.rand(count, 2, generator=g) * 1.6 - 0.8
    direction = torch.nn.functional.normalize(torch.randn(count, 2, generator=g), dim=1)
    end = start + direction * (0.3 + torch.rand(count, 1, generator=g))
    width = (0.001 + 0.03 * torch.rand(count, 1, generator=g)) * direction.flip(1) * torch.tensor([1.0, -1.0])
    corners = torch.stack([start, end, (start + end) / 2 + width], 1).reshape(-1, 2)  # [3 * count, 2]
    w = 0.7 + torch.rand(len(corners), 1, generator=g)
    V = torch.cat([corners * w, torch.rand(len(corners), 1, generator=g) * w, w], 1)
    F = torch.arange(3 * count).view(count, 3).int()
    findices, _ = check_against_reference(V, F, 96, 96, barycentric_tolerance=1e-5)
    assert (findices > 0).sum() > 200


def test_a_grid_of_triangles_covers_every_pixel_once_and_shared_edges_go_to_the_lower_face():
    """Vertices on pixel centres put many samples exactly on shared edges, where the arithmetic is
    exact: every pixel of the square is covered, and each edge pixel goes to the lower face."""
    n, size = 8, 33
    ticks = torch.linspace(-1, 1, n + 1)
    gy, gx = torch.meshgrid(ticks, ticks, indexing="ij")
    V = torch.stack([gx.reshape(-1), gy.reshape(-1), torch.zeros((n + 1) ** 2), torch.ones((n + 1) ** 2)], 1)
    quads = [
        (r * (n + 1) + c, r * (n + 1) + c + 1, (r + 1) * (n + 1) + c, (r + 1) * (n + 1) + c + 1)
        for r in range(n)
        for c in range(n)
    ]
    F = torch.tensor([t for a, b, c, d in quads for t in ((a, b, d), (a, d, c))]).int()
    findices, _ = M.rasterize(V, F, size, size)
    expected, _, _ = reference(V, F, size, size)
    assert bool((findices > 0).all())
    assert np.array_equal(findices.numpy(), expected)
    count = torch.zeros(size, size, dtype=torch.long)
    for face in F:  # each triangle alone: its closed region, so shared edges are claimed twice
        count += (M.rasterize(V, face[None], size, size)[0] > 0).long()
    assert count.min() == 1 and count.max() > 1


def test_closed_mesh_has_no_holes():
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=3)
    vertices = torch.tensor(sphere.vertices, dtype=torch.float32)
    view = M.orbit_cameras([17.0], [23.0], 3.0)[0]
    clip = torch.cat([vertices, torch.ones(len(vertices), 1)], 1) @ (M.perspective(50, 1, 0.1, 10) @ view).T
    findices, _ = M.rasterize(clip, torch.tensor(sphere.faces).int(), 96, 96)
    mask = (findices > 0).numpy().astype(np.uint8)
    import cv2

    count, _ = cv2.connectedComponents(1 - mask, connectivity=4)
    assert count == 2  # only the background outside: no hole inside the silhouette


def test_depth_prior_peels_the_front_layer():
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=2)
    vertices = torch.tensor(sphere.vertices, dtype=torch.float32)
    F = torch.tensor(sphere.faces).int()
    view = M.orbit_cameras([0.0], [0.0], 3.0)[0]
    clip = torch.cat([vertices, torch.ones(len(vertices), 1)], 1) @ (M.perspective(50, 1, 0.1, 10) @ view).T
    front, bary = M.rasterize(clip, F, 48, 48)
    # NDC depth is affine in screen space: interpolate it with screen-space weights (b_i w_i, normalised)
    w = clip[:, 3][F.long()[(front.long() - 1).clamp_min(0)]]
    screen_weights = bary * w / (bary * w).sum(-1, keepdim=True).clamp_min(1e-12)
    ndc_depth = M.interpolate(clip[:, 2:3] / clip[:, 3:4], front, screen_weights, F)[..., 0]
    ndc_depth[front == 0] = -1.0
    back, _ = M.rasterize(clip, F, 48, 48, D=ndc_depth, use_depth_prior=1)
    both = (front > 0) & (back > 0)
    assert both.sum() > 0.9 * (front > 0).sum()
    assert not torch.any(front[both] == back[both])  # the front faces are peeled away
    assert torch.equal(M.rasterize(clip, F, 48, 48, D=ndc_depth, use_depth_prior=0)[0], front)
    expected, _, unsure = reference(clip, F, 48, 48, prior=ndc_depth.numpy())
    assert np.array_equal(back.numpy()[~unsure], expected[~unsure])


def test_keys_do_not_overflow_near_the_eye():
    """Corners just in front of the eye (w -> 0+) have NDC depth far below -1 and screen positions
    far off the frame: their fragments in front of the near plane are dropped (the kernel's key
    is unsigned there and never wins), those behind it are drawn, and no key wraps around."""
    eye = M.perspective(60, 1.0, 0.1, 10)
    world = torch.tensor(
        [
            [-3.0, -3.0, -0.1001],
            [-0.2, -3.0, -0.1001],
            [-1.0, 3.0, -50.0],  # from the near plane
            [0.0, 0.0, -1e-6],
            [2.0, -2.0, -3.0],
            [1.5, 1.5, -3.0],  # from almost the eye
            [-4.0, -4.0, -5.0],
            [4.0, -4.0, -5.0],
            [0.0, 4.0, -5.0],
        ]
    )  # a wall behind
    V = torch.cat([world, torch.ones(9, 1)], 1) @ eye.T
    F = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]], dtype=torch.int32)
    findices, _ = check_against_reference(V, F, 64, 64, unsure_share=0.05)  # an edge runs through pixel centres
    ndc_depth = V[:, 2] / V[:, 3]
    assert ndc_depth.min() < -1e5  # depth * 2^18 * 2^31 is far past int64
    assert set(findices.unique().tolist()) == {0, 1, 3}  # face 2: its pixels lie in front of the near plane
    assert np.array_equal(findices.numpy(), kernel_arithmetic(V, F, 64, 64))


def test_triangles_with_a_corner_at_or_behind_the_eye_are_not_drawn():
    V = torch.tensor([[0.0, 0, 0, 0], [1, 0, 0, 1], [0, 1, 0, 1], [1, 1, 0, 1], [0.5, 0.5, 0, -1]])
    F = torch.tensor([[0, 1, 2], [1, 2, 3], [1, 3, 4]], dtype=torch.int32)  # w = 0 (NaN on screen), w > 0, w < 0
    findices, barycentric = M.rasterize(V, F, 16, 16)
    assert set(findices.unique().tolist()) == {0, 2} and bool(torch.isfinite(barycentric).all())


def test_views_batch_and_back_face_culling():
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=2)
    vertices = torch.tensor(sphere.vertices, dtype=torch.float32)
    F = torch.tensor(sphere.faces)
    views = M.orbit_cameras([a for a, _ in M.STANDARD_VIEWS], [e for _, e in M.STANDARD_VIEWS], 3.0)
    clip = torch.einsum(
        "bij,nj->bni", M.perspective(50, 1, 0.1, 10) @ views, torch.cat([vertices, torch.ones(len(vertices), 1)], 1)
    )
    findices, _ = M.rasterize_views(clip, F, 32, 32)
    culled, _ = M.rasterize_views(clip, F, 32, 32, cull_back_faces=True)
    assert findices.shape == (6, 32, 32) and torch.equal(findices, culled)  # a sphere: front faces win anyway
    for b in range(6):
        assert torch.equal(findices[b], M.rasterize(clip[b], F.int(), 32, 32)[0])


def test_interpolate_and_cameras():
    V = torch.tensor([[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    F = torch.tensor([[0, 1, 2]]).int()
    findices, bary = M.rasterize(V, F, 16, 16)
    values = M.interpolate(V[:, :2], findices, bary, F)
    covered = findices > 0
    ys, xs = covered.nonzero(as_tuple=True)
    ndc = torch.stack([xs / 15 * 2 - 1, ys / 15 * 2 - 1], -1)  # pixel centres in NDC, as the API samples them
    assert torch.allclose(values[covered], ndc, atol=1e-5)
    assert values[~covered].abs().sum() == 0
    view = M.look_at(torch.tensor([[0.0, 0.0, 5.0]]), torch.zeros(1, 3), torch.tensor([[0.0, 1.0, 0.0]]))[0]
    assert torch.allclose(view @ torch.tensor([0.0, 0.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, -5.0, 1.0]))


def test_op_budget(monkeypatch):
    """The GPU issue's budget (<= 200 ops, <= 2 syncs, <= 1 upload), counted on the CPU: a 20,480-triangle
    icosphere at 1024 x 1024, on the torch path a GPU takes (on the CPU numba's loops rasterize instead:
    tests/mesh_rasterizer/test_mesh_rasterizer_cpu.py). Measured: 195 ops, 2 syncs, 0 uploads."""
    import trimesh

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")

    sphere = trimesh.creation.icosphere(subdivisions=5)
    V = torch.cat([torch.tensor(sphere.vertices, dtype=torch.float32) * 0.8, torch.ones(len(sphere.vertices), 1)], 1)
    F = torch.tensor(sphere.faces, dtype=torch.int32)
    with OpCount() as count:
        findices, barycentric = M.rasterize(V, F, 1024, 1024)
        M.interpolate(V[:, :3], findices, barycentric, F)
    assert (findices > 0).sum() > 500_000
    assert count.launches <= 200 + 20 and count.syncs <= 2 and count.float64 == 0, count.summary()
    with OpCount() as count:
        M.rasterize(V, F, 1024, 1024)
    assert count.launches <= 200 and count.syncs <= 2 and count.uploads <= 1, count.summary()
    assert count.float64 == 0, count.summary()
    with OpCount() as count:
        M.perspective(50, 1, 0.1, 10) @ M.orbit_cameras(
            [a for a, _ in M.STANDARD_VIEWS], [e for _, e in M.STANDARD_VIEWS], 3.0
        )
    assert count.syncs == 0 and count.float64 == 0, count.summary()


@pytest.mark.parametrize(
    "V,F,message",
    [
        (torch.rand(5, 3), torch.zeros(1, 3, dtype=torch.int32), "V: expected clip-space vertices"),
        (torch.rand(5, 4), torch.tensor([[0, 1, 7]], dtype=torch.int32), r"F: face indices must lie in 0..4"),
        (torch.rand(5, 4), torch.tensor([[0, 1, -1]], dtype=torch.int32), "F: face indices"),
        (torch.rand(5, 4), torch.tensor([[0, 1, 2, 3]], dtype=torch.int32), r"F: expected triangles \[M,3\]"),
        (torch.rand(5, 4), torch.tensor([[0.0, 1, 2]]), "F: face indices must be integers"),
    ],
)
def test_bad_input(V, F, message):
    with pytest.raises(ValueError, match=message):
        M.rasterize(V, F, 8, 8)


def test_empty_mesh_is_background():
    findices, bary = M.rasterize(torch.zeros(0, 4), torch.zeros(0, 3, dtype=torch.int32), 8, 6)
    assert findices.shape == (6, 8) and findices.sum() == 0 and bary.sum() == 0
