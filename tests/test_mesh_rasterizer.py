"""The mesh rasterizer against a brute-force reference, watertightness, depth prior, bad input."""
import numpy as np
import pytest
import torch

from rasterkit.utils import mesh_rasterizer as M

SUB = 256


def reference(V, F, width, height, prior=None, truncation=1e-6):
    """Per triangle, per pixel, in numpy: the same screen mapping, fixed-point snapping and tie rules."""
    V, F = V.double().numpy(), F.numpy()
    w = V[:, 3:4]
    ndc = V[:, :3] / w
    sx = np.round(((ndc[:, 0] * 0.5 + 0.5) * (width - 1) + 0.5) * SUB) / SUB
    sy = np.round(((ndc[:, 1] * 0.5 + 0.5) * (height - 1) + 0.5) * SUB) / SUB
    sz = (ndc[:, 2] * 0.49999 + 0.5).astype(np.float32)
    best = np.full((height, width), np.inf)
    face_of = np.zeros((height, width), np.int64)
    X, Y = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    for f, (i, j, k) in enumerate(F):
        if (w[[i, j, k]] <= 0).any():
            continue
        pts = [(sx[i], sy[i]), (sx[j], sy[j]), (sx[k], sy[k])]
        area = (pts[1][0] - pts[0][0]) * (pts[2][1] - pts[0][1]) - (pts[1][1] - pts[0][1]) * (pts[2][0] - pts[0][0])
        if area == 0:
            continue
        s = np.sign(area)
        inside = np.ones_like(X, bool)
        e = []
        for (ax, ay), (bx, by) in ((pts[1], pts[2]), (pts[2], pts[0]), (pts[0], pts[1])):
            edge = s * ((bx - ax) * (Y - ay) - (by - ay) * (X - ax))
            dx, dy = s * (bx - ax), s * (by - ay)
            owns = dy > 0 or (dy == 0 and dx < 0)
            inside &= (edge > 0) | ((edge == 0) & owns)
            e.append(edge)
        weights = np.stack(e, -1) / np.abs(area)
        depth = (weights.astype(np.float32) * sz[[i, j, k]]).sum(-1)
        if prior is not None:
            inside &= depth >= prior * 0.49999 + 0.5 + truncation
        key = np.trunc(depth * 2 ** 18) + f * 1e-9  # nearest first, then the lower face
        better = inside & (key < best)
        best[better] = key[better]
        face_of[better] = f + 1
    return face_of


def random_mesh(seed, vertices=40, faces=60):
    generator = torch.Generator().manual_seed(seed)
    V = torch.rand(vertices, 4, generator=generator) * 2 - 1
    V[:, 2] = V[:, 2] * 0.9
    V[:, 3] = 0.5 + torch.rand(vertices, generator=generator)  # perspective: w varies
    V[:, :3] *= V[:, 3:4]
    F = torch.randint(0, vertices, (faces, 3), generator=generator).int()
    return V, F


@pytest.mark.parametrize("seed,width,height", [(0, 48, 40), (1, 48, 40), (2, 48, 40), (3, 48, 40),
                                               ("wide", 130, 97)])
def test_faces_and_barycentrics_equal_the_reference(seed, width, height):
    if seed == "wide":  # triangles about as wide as the frame: their size class (192) passes the width
        V = torch.tensor([[-1.0, -0.9, 0.1, 1], [0.999, -0.8, 0.2, 1], [0.0, 0.95, 0.3, 1], [-0.98, 0.9, 0.0, 1]])
        F = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    else:
        V, F = random_mesh(seed)
    findices, barycentric = M.rasterize(V, F, width, height)
    expected = reference(V, F, width, height)
    assert findices.dtype == torch.int32 and barycentric.dtype == torch.float32
    assert np.array_equal(findices.numpy(), expected)
    covered = findices > 0
    faces = F.long()[findices[covered].long() - 1]
    w = V[:, 3][faces]
    screen = M._screen(V, width, height)[:, :2]
    py, px = covered.nonzero(as_tuple=True)
    corners = screen[faces]
    # perspective-correct weights are b_i ~ s_i / w_i: the screen-space ones s_i ~ b_i w_i must
    # reproduce the pixel centre from the triangle's screen corners
    s = barycentric[covered] * w
    s = s / s.sum(-1, keepdim=True)
    point = (s[..., None] * corners).sum(1)
    assert torch.allclose(point, torch.stack([px, py], -1).float() + 0.5, atol=2e-2)
    assert torch.allclose(barycentric[covered].sum(-1), torch.ones(int(covered.sum())), atol=1e-5)
    assert barycentric[~covered].abs().sum() == 0


def test_a_grid_of_triangles_covers_every_pixel_exactly_once():
    """Vertices on pixel centres put many samples exactly on shared edges: each belongs to one triangle."""
    n, size = 8, 33
    ticks = torch.linspace(-1, 1, n + 1)
    gy, gx = torch.meshgrid(ticks, ticks, indexing="ij")
    V = torch.stack([gx.reshape(-1), gy.reshape(-1), torch.zeros((n + 1) ** 2), torch.ones((n + 1) ** 2)], 1)
    quads = [(r * (n + 1) + c, r * (n + 1) + c + 1, (r + 1) * (n + 1) + c, (r + 1) * (n + 1) + c + 1)
             for r in range(n) for c in range(n)]
    F = torch.tensor([t for a, b, c, d in quads for t in ((a, b, d), (a, d, c))]).int()
    count = torch.zeros(size, size, dtype=torch.long)
    for face in F:  # each triangle alone: how many claim each pixel
        count += (M.rasterize(V, face[None], size, size)[0] > 0).long()
    # the square spans pixel centres 0.5 .. size-0.5: every pixel is inside or on its border
    inner = count[1:-1, 1:-1]
    assert inner.min() == 1 and inner.max() == 1
    assert count.max() == 1


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
    expected = reference(clip, F, 48, 48, prior=ndc_depth.numpy())
    assert np.array_equal(back.numpy(), expected)


def test_views_batch_and_back_face_culling():
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=2)
    vertices = torch.tensor(sphere.vertices, dtype=torch.float32)
    F = torch.tensor(sphere.faces)
    views = M.orbit_cameras([a for a, _ in M.STANDARD_VIEWS], [e for _, e in M.STANDARD_VIEWS], 3.0)
    clip = torch.einsum("bij,nj->bni", M.perspective(50, 1, 0.1, 10) @ views,
                        torch.cat([vertices, torch.ones(len(vertices), 1)], 1))
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


@pytest.mark.parametrize("V,F,message", [
    (torch.rand(5, 3), torch.zeros(1, 3, dtype=torch.int32), "V: expected clip-space vertices"),
    (torch.rand(5, 4), torch.tensor([[0, 1, 7]], dtype=torch.int32), r"F: face indices must lie in 0..4"),
    (torch.rand(5, 4), torch.tensor([[0, 1, -1]], dtype=torch.int32), "F: face indices"),
    (torch.rand(5, 4), torch.tensor([[0, 1, 2, 3]], dtype=torch.int32), r"F: expected triangles \[M,3\]"),
    (torch.full((3, 4), float("nan")), torch.tensor([[0, 1, 2]], dtype=torch.int32), "V: vertices contain NaN"),
])
def test_bad_input(V, F, message):
    with pytest.raises(ValueError, match=message):
        M.rasterize(V, F, 8, 8)


def test_empty_mesh_is_background():
    findices, bary = M.rasterize(torch.zeros(0, 4), torch.zeros(0, 3, dtype=torch.int32), 8, 6)
    assert findices.shape == (6, 8) and findices.sum() == 0 and bary.sum() == 0
