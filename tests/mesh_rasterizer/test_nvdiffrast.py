"""utils/nvdiffrast (the nvdiffrast.torch stand-in) against nvdiffrast's documented conventions, with
independent references: a numpy float64 brute force over pixel centres (coverage, triangle ids,
perspective-correct barycentrics, z/w, their image-space derivatives), numpy bilinear filtering, and
torch.autograd.gradcheck."""

import sys

import numpy as np
import pytest
import torch

from rasterkit.utils.mesh_rasterizer import nvdiffrast as dr

CTX = dr.RasterizeCudaContext()


def scene(seed=0, views=2, triangles=5):
    """Random perspective triangles in clip space [views,V,4] (w in 1..3, inside the frustum), tri [M,3]."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(1, 3, (views, 3 * triangles, 1))
    ndc = np.concatenate(
        [rng.uniform(-0.9, 0.9, (views, 3 * triangles, 2)), rng.uniform(-0.9, 0.9, (views, 3 * triangles, 1))], -1
    )
    pos = np.concatenate([ndc * w, w], -1).astype(np.float32)
    return torch.from_numpy(pos), torch.arange(3 * triangles, dtype=torch.int32).view(-1, 3)


def brute_force(pos, tri, height, width):
    """(u, v, z/w, id + 1) [B,H,W,4], derivatives [B,H,W,4] and a margin [B,H,W] (how far each pixel is
    from a coverage or depth decision) in float64, pixel by pixel: b solves sum b_i (x_i - X w_i) = 0,
    sum b_i (y_i - Y w_i) = 0, sum b_i = 1 at NDC (X, Y) = ((px + 0.5) / W * 2 - 1, (py + 0.5) / H * 2 - 1)."""
    pos, tri = pos.double().numpy(), tri.long().numpy()
    out = np.zeros((pos.shape[0], height, width, 4))
    db = np.zeros_like(out)
    margin = np.full((pos.shape[0], height, width), np.inf)

    def solve(c, x, y):
        m = np.stack([c[:, 0] - x * c[:, 3], c[:, 1] - y * c[:, 3], np.ones(3)])
        return np.linalg.solve(m, [0.0, 0.0, 1.0])

    for view in range(pos.shape[0]):
        for py in range(height):
            for px in range(width):
                x, y = (px + 0.5) / width * 2 - 1, (py + 0.5) / height * 2 - 1
                best, depths = None, []
                for face, corners in enumerate(tri):
                    c = pos[view, corners]
                    b = solve(c, x, y)
                    margin[view, py, px] = min(margin[view, py, px], np.abs(b).min())
                    if b.min() < 0:
                        continue
                    depth = (b @ c[:, 2]) / (b @ c[:, 3])
                    depths.append(depth)
                    if best is None or depth < best[0]:
                        best = (depth, face, b, c)
                if best is None:
                    continue
                depths.sort()
                if len(depths) > 1:
                    margin[view, py, px] = min(margin[view, py, px], depths[1] - depths[0])
                depth, face, b, c = best
                out[view, py, px] = b[0], b[1], depth, face + 1
                step = 1e-4
                bx = (solve(c, x + step, y) - solve(c, x - step, y)) / (2 * step) * (2 / width)
                by = (solve(c, x, y + step) - solve(c, x, y - step)) / (2 * step) * (2 / height)
                db[view, py, px] = bx[0], by[0], bx[1], by[1]
    return out, db, margin


def test_rasterize_matches_a_brute_force_over_pixel_centres():
    pos, tri = scene()
    rast, rast_db = dr.rasterize(CTX, pos, tri, (24, 32))
    assert rast.shape == rast_db.shape == (2, 24, 32, 4) and rast.dtype == torch.float32
    expected, expected_db, margin = brute_force(pos, tri, 24, 32)
    clear = margin > 1e-3  # pixels not on an edge or a depth tie
    assert clear.mean() > 0.9 and (expected[..., 3] > 0).sum() > 200
    assert np.array_equal(rast[..., 3].numpy()[clear], expected[..., 3][clear])
    covered = clear & (expected[..., 3] > 0)
    assert np.abs(rast[..., :3].numpy()[covered] - expected[..., :3][covered]).max() < 1e-4
    assert np.abs(rast_db.numpy()[covered] - expected_db[covered]).max() < 1e-3
    assert (rast[..., :3].numpy()[expected[..., 3] == 0] == 0).all()  # background: 0 in every channel


def test_row_zero_is_ndc_y_minus_one_and_pixel_centres_at_half():
    # a triangle covering NDC y < 0 only: the first half of the rows (nvdiffrast's bottom-up order)
    pos = torch.tensor([[[-1.0, -1.0, 0, 1], [1.0, -1.0, 0, 1], [-1.0, 0.0, 0, 1]]])
    rast, _ = dr.rasterize(CTX, pos, torch.tensor([[0, 1, 2]]), (8, 8))
    covered = rast[0, ..., 3] > 0
    assert covered[:4].any() and not covered[4:].any()
    # pixel (0, 0) samples NDC (-7/8, -7/8): u = weight of corner 0 there
    x, y = -7 / 8, -7 / 8
    v = (x + 1) / 2
    t = y + 1
    assert rast[0, 0, 0, 1].item() == pytest.approx(v, abs=1e-6)
    assert rast[0, 0, 0, 0].item() == pytest.approx(1 - v - t, abs=1e-6)


def test_range_mode_draws_each_range_with_global_triangle_ids():
    pos, tri = scene(views=1, triangles=6)
    ranges = torch.tensor([[0, 3], [3, 3], [2, 0]], dtype=torch.int32)
    rast, _ = dr.rasterize(CTX, pos[0], tri, (20, 20), ranges=ranges)
    for index, (start, count) in enumerate(ranges.tolist()):
        alone, _ = dr.rasterize(CTX, pos, tri[start : start + count], (20, 20))
        expected = torch.where(alone[0, ..., 3] > 0, alone[0, ..., 3] + start, 0)
        assert torch.equal(rast[index, ..., 3], expected)
        assert torch.allclose(rast[index, ..., :3], alone[0, ..., :3], atol=1e-6)


def test_far_plane_and_near_plane_clip():
    far = torch.tensor([[[-1.0, -1.0, 1.5, 1], [1.0, -1.0, 1.5, 1], [0.0, 1.0, 1.5, 1]]])
    rast, _ = dr.rasterize(CTX, far, torch.tensor([[0, 1, 2]]), (8, 8))
    assert not (rast[..., 3] > 0).any()
    # one corner behind the eye (w < 0): the part in front of the near plane z = -w is drawn
    crossing = torch.tensor([[[-1.0, -1.0, 0.5, 1], [1.0, -1.0, 0.5, 1], [0.0, 2.0, -3.0, -1.0]]])
    rast, _ = dr.rasterize(CTX, crossing, torch.tensor([[0, 1, 2]]), (16, 16))
    drawn = rast[0, ..., 2][rast[0, ..., 3] > 0]
    assert drawn.numel() > 20 and drawn.min() >= -1 and drawn.max() <= 1


def test_interpolate_and_its_derivatives():
    pos, tri = scene(seed=1)
    rast, rast_db = dr.rasterize(CTX, pos, tri, (16, 20))
    attr = torch.rand(1, pos.shape[1], 3)
    out, out_da = dr.interpolate(attr, rast, tri, rast_db, diff_attrs=[0, 2])
    assert out.shape == (2, 16, 20, 3) and out_da.shape == (2, 16, 20, 4)
    u, v, ids = rast[..., 0:1], rast[..., 1:2], rast[..., 3].long()
    corners = attr[0][tri.long()[(ids - 1).clamp_min(0)]]  # [B,H,W,3,A]
    expected = u * corners[..., 0, :] + v * corners[..., 1, :] + (1 - u - v) * corners[..., 2, :]
    expected = torch.where((ids > 0)[..., None], expected, 0.0)
    assert torch.allclose(out, expected, atol=1e-6)
    e0, e1 = corners[..., 0, :] - corners[..., 2, :], corners[..., 1, :] - corners[..., 2, :]
    da_dx = rast_db[..., 0:1] * e0 + rast_db[..., 2:3] * e1
    assert torch.allclose(out_da[..., 0], da_dx[..., 0] * (ids > 0), atol=1e-6)
    assert torch.allclose(out_da[..., 2], da_dx[..., 2] * (ids > 0), atol=1e-6)
    none, empty = dr.interpolate(attr[0], rast, tri)
    assert torch.allclose(none, out) and empty.shape == (2, 16, 20, 0)


def numpy_bilinear(tex, uv, boundary):
    """Bilinear lookup in float64, texel (r, c) centred at ((c + 0.5) / W, (r + 0.5) / H)."""
    height, width = tex.shape[:2]
    out = np.zeros(uv.shape[:-1] + (tex.shape[-1],))
    for index in np.ndindex(uv.shape[:-1]):
        x, y = uv[index][0] * width - 0.5, uv[index][1] * height - 0.5
        if boundary == "clamp":
            x, y = min(max(x, 0), width - 1), min(max(y, 0), height - 1)
        x0, y0 = int(np.floor(x)), int(np.floor(y))
        for dy in (0, 1):
            for dx in (0, 1):
                weight = (x - x0 if dx else 1 - (x - x0)) * (y - y0 if dy else 1 - (y - y0))
                column, row = x0 + dx, y0 + dy
                if boundary == "wrap":
                    column, row = column % width, row % height
                elif boundary == "clamp":
                    column, row = min(max(column, 0), width - 1), min(max(row, 0), height - 1)
                elif not (0 <= column < width and 0 <= row < height):
                    continue
                out[index] += weight * tex[row, column]
    return out


@pytest.mark.parametrize("boundary", ["wrap", "clamp", "zero"])
def test_texture_linear_and_nearest_match_numpy(boundary):
    rng = np.random.default_rng(2)
    tex = rng.random((1, 5, 7, 3)).astype(np.float32)
    uv = rng.uniform(-0.3, 1.3, (2, 4, 6, 2)).astype(np.float32)
    out = dr.texture(torch.from_numpy(tex), torch.from_numpy(uv), filter_mode="linear", boundary_mode=boundary)
    assert np.abs(out.numpy() - numpy_bilinear(tex[0], uv, boundary)).max() < 1e-5
    nearest = dr.texture(
        torch.from_numpy(tex), torch.from_numpy(uv), filter_mode="nearest", boundary_mode=boundary
    ).numpy()
    column, row = np.floor(uv[..., 0] * 7).astype(int), np.floor(uv[..., 1] * 5).astype(int)
    if boundary == "wrap":
        expected = tex[0][row % 5, column % 7]
    else:
        expected = tex[0][row.clip(0, 4), column.clip(0, 6)]
        if boundary == "zero":
            expected = expected * ((row >= 0) & (row < 5) & (column >= 0) & (column < 7))[..., None]
    assert np.array_equal(nearest, expected)
    # the mipmap modes sample the base level (documented)
    mip = dr.texture(torch.from_numpy(tex), torch.from_numpy(uv), uv_da=torch.zeros(2, 4, 6, 4), boundary_mode=boundary)
    assert torch.equal(mip, out)


def test_gradients_of_interpolate_and_texture():
    pos, tri = scene(seed=3, views=1, triangles=2)
    rast, rast_db = dr.rasterize(CTX, pos, tri, (6, 6))
    attr = torch.rand(pos.shape[1], 2, dtype=torch.float64, requires_grad=True)
    bary = rast.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, r: dr.interpolate(a, r, tri)[0], (attr, bary))
    tex = torch.rand(1, 4, 5, 2, dtype=torch.float64, requires_grad=True)
    uv = torch.rand(1, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    for boundary in ("wrap", "clamp", "zero"):
        assert torch.autograd.gradcheck(
            lambda t, c: dr.texture(t, c, filter_mode="linear", boundary_mode=boundary),  # noqa: B023
            (tex, uv),  # noqa: B023
        )


def test_rasterize_barycentrics_carry_gradients_to_pos():
    pos, tri = scene(seed=4, views=1, triangles=1)
    pos.requires_grad_()
    rast, _ = dr.rasterize(CTX, pos, tri, (12, 12))
    pixel = (rast[0, ..., 3] > 0).nonzero()[0]
    rast[0, pixel[0], pixel[1], 0].backward()
    step, moved = 1e-3, pos.detach().clone()
    numeric = torch.zeros_like(moved)
    for index in np.ndindex(moved.shape):
        for sign in (1, -1):
            shifted = moved.clone()
            shifted[index] += sign * step
            numeric[index] += sign * dr.rasterize(CTX, shifted, tri, (12, 12))[0][0, pixel[0], pixel[1], 0] / (2 * step)
    assert torch.allclose(pos.grad, numeric, atol=2e-2)


def edge_scene(edge_x):
    """A big triangle left of the vertical line x = edge_x (in pixels of a 16 x 16 frame), colour 1."""
    ndc = edge_x / 16 * 2 - 1
    pos = torch.tensor([[[-3.0, -3.0, 0, 1], [ndc, -3.0, 0, 1], [ndc, 3.0, 0, 1]]], requires_grad=True)
    return pos, torch.tensor([[0, 1, 2]])


@pytest.mark.parametrize("edge_x", [8.3, 8.7])
def test_antialias_blends_silhouettes_by_coverage(edge_x):
    pos, tri = edge_scene(edge_x)
    rast, _ = dr.rasterize(CTX, pos, tri, (16, 16))
    colour = (rast[..., 3:4] > 0).float()
    out = dr.antialias(colour, rast, pos, tri)
    # pixel 8 spans [8, 9]: the triangle covers edge_x - 8 of it
    assert torch.allclose(out[0, 4:12, 8, 0], torch.full((8,), edge_x - 8), atol=1e-5)
    assert torch.equal(out[0, :, :8], colour[0, :, :8]) and torch.equal(out[0, :, 9:], colour[0, :, 9:])
    out[0, 4:12, 8, 0].sum().backward()
    assert pos.grad[0, 1, 0] > 0  # moving the edge right covers more of pixel 8


def test_antialias_leaves_edges_inside_a_surface_alone():
    pos = torch.tensor([[[-1.0, -1.0, 0, 1], [1.0, -1.0, 0, 1], [1.0, 1.0, 0, 1], [-1.0, 1.0, 0, 1]]])
    tri = torch.tensor([[0, 1, 2], [0, 2, 3]])
    rast, _ = dr.rasterize(CTX, pos, tri, (10, 10))
    colour = rast[..., 3:4].clone()  # a colour per triangle: a blend across the diagonal would show
    assert torch.equal(dr.antialias(colour, rast, pos, tri), colour)
    hash_ = dr.antialias_construct_topology_hash(tri)
    assert hash_.tolist() == [[-1, 1, -1], [-1, -1, 0]]


def test_bad_inputs_are_named():
    pos, tri = scene(views=1, triangles=1)
    with pytest.raises(ValueError, match="pos"):
        dr.rasterize(CTX, pos[..., :3], tri, (4, 4))
    with pytest.raises(ValueError, match="ranges"):
        dr.rasterize(CTX, pos[0], tri, (4, 4))
    with pytest.raises(ValueError, match="resolution"):
        dr.rasterize(CTX, pos, tri, (0, 4))
    with pytest.raises(ValueError, match="boundary_mode"):
        dr.texture(torch.rand(1, 2, 2, 3), torch.rand(1, 2, 2, 2), boundary_mode="cube")
    with pytest.raises(ValueError, match="filter_mode"):
        dr.texture(torch.rand(1, 2, 2, 3), torch.rand(1, 2, 2, 2), filter_mode="cubic")
    with pytest.raises(ValueError, match="diff_attrs"):
        rast, db = dr.rasterize(CTX, pos, tri, (4, 4))
        dr.interpolate(torch.rand(3, 2), rast, tri, db, diff_attrs=[5])


def test_registered_as_nvdiffrast_torch_when_missing(monkeypatch):
    from rasterkit.nodes import _comfy

    for name in ("nvdiffrast", "nvdiffrast.torch"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: the import fails
    monkeypatch.setenv("RASTERKIT_NO_CUSTOM_RASTERIZER", "1")
    monkeypatch.setenv("RASTERKIT_NO_MESH_INPAINT", "1")
    monkeypatch.setenv("RASTERKIT_NO_NVDIFFRAST", "1")
    _comfy.register_standins()
    assert sys.modules["nvdiffrast.torch"] is None
    monkeypatch.delenv("RASTERKIT_NO_NVDIFFRAST")
    _comfy.register_standins()
    import nvdiffrast.torch as served

    assert served is dr
