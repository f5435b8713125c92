"""utils/mesh_bake against independent references: a numpy float64 barycentric brute force for the UV
maps, a round trip (views of a textured quad rendered by ray casting in numpy, baked back) and the
properties of seam padding."""

import math

import numpy as np
import pytest
import torch

from rasterkit.utils import mesh_rasterizer as M
from rasterkit.utils.mesh_rasterizer import bake as B


def _quad():
    """Two triangles over [-0.8,0.8]^2 at z = 0 facing +z, UVs covering [0.1,0.9]^2 (v up with y)."""
    vertices = torch.tensor([[-0.8, -0.8, 0.0], [0.8, -0.8, 0.0], [0.8, 0.8, 0.0], [-0.8, 0.8, 0.0]])
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    uvs = (vertices[:, :2] / 0.8 + 1) / 2 * 0.8 + 0.1
    return vertices, faces, uvs, torch.tensor([[0.0, 0.0, 1.0]]).expand(4, 3)


def _reference_maps(vertices, uvs, faces, size):
    """Position float64 [S,S,3] and mask by testing every texel centre against every UV triangle."""
    v, u, f = vertices.double().numpy(), uvs.double().numpy(), faces.numpy()
    rows, columns = np.mgrid[0:size, 0:size]
    p = np.stack([(columns + 0.5) / size, 1 - (rows + 0.5) / size], -1)
    position, mask = np.zeros((size, size, 3)), np.zeros((size, size), bool)
    for face in f[::-1]:  # the lower face index wins
        a, b, c = u[face]
        area = (b[0] - a[0]) * (c[1] - a[1]) - (c[0] - a[0]) * (b[1] - a[1])
        beta = ((p[..., 0] - a[0]) * (c[1] - a[1]) - (c[0] - a[0]) * (p[..., 1] - a[1])) / area
        gamma = ((b[0] - a[0]) * (p[..., 1] - a[1]) - (p[..., 0] - a[0]) * (b[1] - a[1])) / area
        alpha = 1 - beta - gamma
        hit = (alpha >= 0) & (beta >= 0) & (gamma >= 0)
        point = alpha[..., None] * v[face[0]] + beta[..., None] * v[face[1]] + gamma[..., None] * v[face[2]]
        position[hit], mask[hit] = point[hit], True
    return position, mask


def test_uv_maps_match_brute_force():
    vertices, faces, uvs, normals = _quad()
    # a non-planar surface: lift one corner
    vertices = vertices.clone()
    vertices[2, 2] = 0.5
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 37)
    reference, reference_mask = _reference_maps(vertices, uvs, faces, 37)
    assert position.dtype == torch.float32 and position.shape == (37, 37, 3) and mask.shape == (37, 37)
    # texel centres exactly on an edge may go either way in float32
    agree = mask.numpy() == reference_mask
    assert agree.mean() > 0.97
    both = mask.numpy() & reference_mask
    assert both.sum() > 500
    np.testing.assert_allclose(position.numpy()[both], reference[both], atol=2e-5)
    assert torch.allclose(normal[mask], torch.tensor([0.0, 0.0, 1.0]))
    assert not position[~mask].any() and not normal[~mask].any()


def test_uv_maps_of_a_cube_cover_its_islands():
    # a cube with six separate UV islands in a 3x2 grid: the mask covers each island's interior
    corners = torch.tensor([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)])
    quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
    vertices, uvs, faces = [], [], []
    for island, quad in enumerate(quads):
        column, row = island % 3, island // 3
        base = len(vertices)
        for k, corner in enumerate(quad):
            vertices.append(corners[corner])
            du, dv = ((0, 0), (1, 0), (1, 1), (0, 1))[k]
            uvs.append([(column + 0.1 + 0.8 * du) / 3, (row + 0.1 + 0.8 * dv) / 2])
        faces += [[base, base + 1, base + 2], [base, base + 2, base + 3]]
    vertices, uvs, faces = torch.stack(vertices), torch.tensor(uvs), torch.tensor(faces)
    normals = torch.nn.functional.normalize(vertices, dim=-1)
    position, _, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 60)
    reference, reference_mask = _reference_maps(vertices, uvs, faces, 60)
    assert (mask.numpy() == reference_mask).mean() > 0.98
    both = mask.numpy() & reference_mask
    np.testing.assert_allclose(position.numpy()[both], reference[both], atol=2e-5)
    # every texel lies on the cube's surface
    assert torch.allclose(position[mask].abs().amax(-1), torch.ones(int(mask.sum())), atol=1e-5)


def _colour(u, v):
    """The quad's smooth test texture, three channels, as a function of float64 UVs."""
    return np.stack([0.5 + 0.4 * np.sin(2 * math.pi * u), 0.5 + 0.4 * np.cos(2 * math.pi * v), 0.3 + 0.5 * u * v], -1)


def _render_quad(view, projection, size):
    """Upright views [N,H,W,3] of the quad (z = 0, |x|, |y| <= 0.8) by casting each pixel centre's ray in
    float64 and colouring the hit by _colour; 0 where the ray misses."""
    images = []
    for matrix in (projection.double() @ view.double()).numpy():
        inverse = np.linalg.inv(matrix)
        rows, columns = np.mgrid[0:size, 0:size]
        ndc_x = 2 * columns / (size - 1) - 1
        ndc_y = 2 * (size - 1 - rows) / (size - 1) - 1  # upright rows
        ends = []
        for ndc_z in (-1.0, 1.0):
            point = (
                np.stack([ndc_x, ndc_y, np.full_like(ndc_x, ndc_z, dtype=float), np.ones_like(ndc_x, dtype=float)], -1)
                @ inverse.T
            )
            ends.append(point[..., :3] / point[..., 3:])
        direction = ends[1] - ends[0]
        t = -ends[0][..., 2] / direction[..., 2]
        hit = ends[0] + t[..., None] * direction
        inside = (np.abs(hit[..., 0]) <= 0.8) & (np.abs(hit[..., 1]) <= 0.8)
        u, v = (hit[..., 0] / 0.8 + 1) / 2 * 0.8 + 0.1, (hit[..., 1] / 0.8 + 1) / 2 * 0.8 + 0.1
        images.append(np.where(inside[..., None], _colour(u, v), 0.0))
    return torch.tensor(np.stack(images), dtype=torch.float32)


def test_bake_round_trip_of_a_textured_quad():
    vertices, faces, uvs, normals = _quad()
    view = M.orbit_cameras([0.0, 35.0], [0.0, 20.0], 3.0)
    projection = torch.stack([M.orthographic(1.0, 1.0, 0.1, 10.0), M.perspective(45.0, 1.0, 0.1, 10.0)])
    images = _render_quad(view, projection, 160)
    size = 64
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, size)
    texture, weight = B.bake(
        images, view, projection, vertices, faces, position, normal, mask, torch.tensor([1.0, 0.5])
    )
    rows, columns = np.mgrid[0:size, 0:size]
    expected = _colour((columns + 0.5) / size, 1 - (rows + 0.5) / size)
    # inner texels (away from the quad's outline, where views' bilinear samples mix in the background)
    inner = mask.numpy() & (np.abs(position[..., :2].numpy()) < 0.75).all(-1)
    assert inner.sum() > 1500 and (weight.numpy()[inner] > 0).all()
    np.testing.assert_allclose(texture.numpy()[inner], expected[inner], atol=0.02)
    assert not weight[~mask].any() and not texture[~mask].any()
    # the front view's weight is 1 (cos 0 = 1) plus the oblique view's 0.5 * cos^4
    # (row 2 of a view matrix is the direction to the camera; at the quad's centre it is the eye's)
    cosine = view[1, 2, 2].item()
    assert abs(weight[size // 2, size // 2].item() - (1 + 0.5 * cosine**4)) < 2e-3  # half a texel off


def test_bake_in_row_chunks_equals_one_pass():
    vertices, faces, uvs, normals = _quad()
    view = M.orbit_cameras([0.0, 35.0], [0.0, 20.0], 3.0)
    projection = M.perspective(45.0, 1.0, 0.1, 10.0)
    images = _render_quad(view, projection.expand(2, 4, 4), 96)
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 40)
    whole = B.bake(images, view, projection, vertices, faces, position, normal, mask)
    done = []
    # 2 views x 40 texels a row: 7 rows a chunk, the last one shorter
    chunked = B.bake(
        images,
        view,
        projection,
        vertices,
        faces,
        position,
        normal,
        mask,
        chunk_texel_views=2 * 40 * 7,
        on_chunk=lambda rows, total: done.append((rows, total)),
    )
    # the two views' depth buffers (one chunk), then six chunks of rows
    assert done == [(2, 8), (3, 8), (4, 8), (5, 8), (6, 8), (7, 8), (8, 8)]
    for a, b in zip(whole, chunked, strict=False):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_bake_skips_occluded_and_back_facing_texels():
    vertices, faces, uvs, normals = _quad()
    # a small occluder quad in front of the left half (no UVs needed: it only blocks)
    occluder = torch.tensor([[-0.8, -0.8, 1.0], [0.0, -0.8, 1.0], [0.0, 0.8, 1.0], [-0.8, 0.8, 1.0]])
    all_vertices = torch.cat([vertices, occluder])
    all_faces = torch.cat([faces, faces + 4])
    view = M.orbit_cameras([0.0, 180.0], [0.0, 0.0], 3.0)  # the front, and the back (facing away)
    projection = M.orthographic(1.0, 1.0, 0.1, 10.0)
    images = torch.ones(2, 96, 96, 3)
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 48)
    texture, weight = B.bake(images, view, projection, all_vertices, all_faces, position, normal, mask)
    x = position[..., 0]
    assert not weight[mask & (x < -0.05)].any()
    assert (weight[mask & (x > 0.05)] > 0.99).all() and (weight[mask & (x > 0.05)] < 1.01).all()


def test_dilate_keeps_inside_and_fills_near_texels():
    generator = torch.Generator().manual_seed(3)
    maps = torch.rand(40, 40, 3, generator=generator)
    mask = torch.zeros(40, 40, dtype=torch.bool)
    mask[10:18, 12:20] = True
    mask[25:30, 5:9] = True
    padded, grown = B.dilate(maps, mask, 4)
    assert torch.equal(padded[mask], maps[mask])
    rows, columns = torch.meshgrid(torch.arange(40), torch.arange(40), indexing="ij")
    inside = torch.stack([rows[mask], columns[mask]], -1)
    # Chebyshev distance of every texel to the mask
    distance = (torch.stack([rows, columns], -1)[:, :, None] - inside).abs().amax(-1).amin(-1)
    assert torch.equal(grown, distance <= 4)
    assert not padded[~grown].any()
    # filled values are means of inside values: within their range, channel by channel
    low, high = maps[mask].amin(0), maps[mask].amax(0)
    assert ((padded[grown] >= low - 1e-6) & (padded[grown] <= high + 1e-6)).all()
    # a texel next to exactly one inside texel copies it
    single = torch.zeros(9, 9, dtype=torch.bool)
    single[4, 4] = True
    padded, _ = B.dilate(maps[:9, :9], single, 2)
    assert torch.allclose(padded[2:7, 2:7], maps[4, 4].expand(5, 5, 3))


def test_bake_opcount_has_no_float64():
    from opcount import OpCount

    vertices, faces, uvs, normals = _quad()
    view = M.orbit_cameras([0.0, 35.0], [0.0, 20.0], 3.0)
    projection = M.perspective(45.0, 1.0, 0.1, 10.0)
    images = torch.rand(2, 64, 64, 3)
    with OpCount() as count:
        position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 64)
        B.bake(images, view, projection, vertices, faces, position, normal, mask)
        B.dilate(position, mask, 4)
    assert count.float64 == 0


def _textured_quad_mesh(size=64):
    from rasterkit.nodes.mesh import make_mesh

    vertices, faces, uvs, normals = _quad()
    rows, columns = np.mgrid[0:size, 0:size]
    texture = torch.tensor(_colour((columns + 0.5) / size, 1 - (rows + 0.5) / size), dtype=torch.float32)
    return make_mesh(vertices[None], faces[None], uvs=uvs[None], texture=texture[None], normals=normals[None]), texture


def test_bake_node_round_trip_through_mesh_rasterizer():
    from rasterkit.nodes.bake import BakeTexture, UVMaps
    from rasterkit.nodes.mesh import MeshRasterizer

    mesh, original = _textured_quad_mesh()
    outputs = MeshRasterizer.run(
        mesh=mesh,
        width=128,
        height=96,
        views="list",
        view_list="0,0; 30,15,0.5",
        shading="texture",
        cull_back_faces=False,
    )
    render, raster = outputs[6], outputs[5]
    texture, mask, baked = BakeTexture.run(mesh=mesh, images=render, raster=raster, texture_size=64, dilation=2)
    assert texture.shape == (1, 64, 64, 3) and mask.shape == (1, 64, 64)
    _, _, uv_mask = UVMaps.run(mesh=mesh, texture_size=64, dilation=0)
    # texels seen, away from the islands' outline (bilinear samples there mix in the background)
    seen = mask[0] > 0
    inner = seen & (torch.nn.functional.avg_pool2d(uv_mask[None], 5, 1, 2)[0, 0] > 0.999)
    assert inner.sum() > 1500
    assert (texture[0][inner] - original[inner]).abs().max() < 0.03
    assert torch.equal(baked.texture[0], texture[0]) and torch.equal(baked.uvs, mesh.uvs)


def test_uv_maps_node_pads_and_scales():
    from rasterkit.nodes.bake import UVMaps

    mesh, _ = _textured_quad_mesh()
    position, normal, mask = UVMaps.run(mesh=mesh, texture_size=32, dilation=3)
    inside = mask[0] > 0
    assert position.shape == normal.shape == (1, 32, 32, 3)
    assert position[0][inside].min() >= 0 and position[0][inside].max() <= 1
    assert torch.allclose(normal[0][inside], torch.tensor([0.5, 0.5, 1.0]))
    # the quad's island spans texels 3..28: three texels of padding fill the texture, the corner from the
    # island's corner texel
    assert (position[0].sum(-1) > 0).all() and inside[3:29, 3:29].all() and not inside[:3].any()
    assert torch.allclose(position[0, 0, 0], position[0, 3, 3]) and torch.allclose(normal[0, 0, 0], normal[0, 3, 3])


def test_bake_node_names_bad_inputs():
    import pytest

    from rasterkit.nodes.bake import BakeTexture, UVMaps
    from rasterkit.nodes.mesh import MeshRasterizer, make_mesh

    mesh, _ = _textured_quad_mesh()
    raster = MeshRasterizer.run(mesh=mesh, width=32, height=32, views="six")[5]
    with pytest.raises(ValueError, match="images: 2 images, but raster has 6 views"):
        BakeTexture.run(mesh=mesh, images=torch.rand(2, 32, 32, 3), raster=raster, texture_size=16)
    with pytest.raises(ValueError, match="images: 64x32 has another aspect ratio"):
        BakeTexture.run(mesh=mesh, images=torch.rand(6, 32, 64, 3), raster=raster, texture_size=16)
    with pytest.raises(ValueError, match="raster: expected MeshRasterizer's raster"):
        BakeTexture.run(mesh=mesh, images=torch.rand(6, 32, 32, 3), raster={}, texture_size=16)
    bare = make_mesh(mesh.vertices, mesh.faces)
    with pytest.raises(ValueError, match="mesh: has no UVs"):
        UVMaps.run(mesh=bare, texture_size=16)
    with pytest.raises(ValueError, match="mesh: has no UVs"):
        BakeTexture.run(mesh=bare, images=torch.rand(6, 32, 32, 3), raster=raster, texture_size=16)


# -- issue 29: bounded, stoppable, no raw exceptions, nothing dropped silently ------------------------------


class Interrupted(Exception):
    pass


def _interrupt(done, total):
    raise Interrupted


def test_dilate_in_bands_equals_one_pass(monkeypatch):
    maps, mask = torch.rand(37, 29, 4), torch.rand(37, 29) > 0.93
    whole = B.dilate(maps, mask, 5)
    monkeypatch.setattr(B, "BAND_TEXELS", 29 * 4)  # four rows a band, the last one shorter
    calls = []
    banded = B.dilate(maps, mask, 5, on_band=lambda done, total: calls.append((done, total)))
    assert torch.equal(whole[0], banded[0]) and torch.equal(whole[1], banded[1])
    assert calls == [(i, 50) for i in range(1, 51)]


def test_uv_maps_in_bands_equal_one_pass(monkeypatch):
    vertices, faces, uvs, normals = _quad()
    whole = B.uv_maps(vertices, normals, uvs, faces, faces, 40)
    monkeypatch.setattr(B, "BAND_TEXELS", 40 * 7)
    calls = []
    banded = B.uv_maps(vertices, normals, uvs, faces, faces, 40, on_band=lambda *a: calls.append(a))
    assert all(torch.equal(a, b) for a, b in zip(whole, banded, strict=False))
    assert calls == [(7, 40), (14, 40), (21, 40), (28, 40), (35, 40), (40, 40)]


def test_long_padding_stops_at_the_first_band():
    """A 2048^2 padding of 256 steps (minutes of work) stops within its first band."""
    import time

    start = time.perf_counter()
    with pytest.raises(Interrupted):
        B.dilate(torch.rand(2048, 2048, 3), torch.zeros(2048, 2048, dtype=torch.bool), 256, on_band=_interrupt)
    assert time.perf_counter() - start < 2.0


def test_uv_maps_node_and_bake_node_stop_soon_after_an_interrupt(monkeypatch):
    import time

    from rasterkit.nodes import _comfy
    from rasterkit.nodes.bake import BakeTexture, UVMaps

    mesh, _ = _textured_quad_mesh()
    raster = {
        "view": M.orbit_cameras([0.0, 90, 180, 270, 0, 180], [0.0, 0, 0, 0, 90, -90], 3.0),
        "projection": M.perspective(40.0, 1.0, 0.1, 10.0),
    }

    def interrupt():
        raise Interrupted

    monkeypatch.setattr(_comfy, "check_interrupt", interrupt)
    for run in (
        lambda: UVMaps.run(mesh=mesh, texture_size=4096, dilation=256),
        lambda: BakeTexture.run(
            mesh=mesh, images=torch.rand(6, 512, 512, 3), raster=raster, texture_size=2048, dilation=256
        ),
    ):
        start = time.perf_counter()
        with pytest.raises(Interrupted):
            run()
        assert time.perf_counter() - start < 5.0


def test_bake_stops_within_a_chunk():
    """Six views of 512^2 into a 1024^2 texture was one chunk of ~7 s: now chunks of ~0.5 s."""
    import time

    vertices, faces, uvs, normals = _quad()
    view = M.orbit_cameras([0.0, 90, 180, 270, 0, 180], [0.0, 0, 0, 0, 90, -90], 3.0)
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 1024)
    calls = []

    def stop_at_the_blend(done, total):
        calls.append(time.perf_counter())
        if done > len(view):  # the first chunk of texels, after the views' depth buffers
            raise Interrupted

    start = time.perf_counter()
    with pytest.raises(Interrupted):
        B.bake(
            torch.rand(6, 512, 512, 3),
            view,
            M.perspective(40.0, 1.0, 0.1, 10.0),
            vertices,
            faces,
            position,
            normal,
            mask,
            on_chunk=stop_at_the_blend,
        )
    assert calls[-1] - calls[-2] < 2.0 and time.perf_counter() - start < 5.0


@pytest.mark.parametrize(
    "weights,shown",
    [
        ([float("nan"), 1.0], "view 0 has weight nan"),
        ([1.0, -1.0], "view 1 has weight -1.0"),
        ([1.0], "expected one weight per view \\(2\\), got 1"),
    ],
)
def test_nan_or_negative_view_weights_are_refused(weights, shown):
    from rasterkit.nodes.bake import BakeTexture
    from rasterkit.nodes.mesh import MeshRasterizer

    mesh, _ = _textured_quad_mesh()
    raster = MeshRasterizer.run(mesh=mesh, width=32, height=32, views="list", view_list="0,0; 30,15")[5]
    with pytest.raises(ValueError, match=f"^raster: view_weights: {shown}"):
        BakeTexture.execute(
            mesh=mesh,
            images=torch.rand(2, 32, 32, 3),
            raster={**raster, "view_weights": torch.tensor(weights)},
            texture_size=16,
        )
    vertices, faces, uvs, normals = _quad()
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 16)
    with pytest.raises(ValueError, match=f"^view_weights: {shown}"):
        B.bake(
            torch.rand(2, 32, 32, 3),
            raster["view"],
            raster["projection"],
            vertices,
            faces,
            position,
            normal,
            mask,
            torch.tensor(weights),
        )


def test_bad_raster_cameras_are_named_by_the_node_and_the_engine():
    from rasterkit.nodes.bake import BakeTexture
    from rasterkit.nodes.mesh import MeshRasterizer

    mesh, _ = _textured_quad_mesh()
    raster = MeshRasterizer.run(mesh=mesh, width=32, height=32, views="list", view_list="0,0; 30,15")[5]
    nan_view = raster["view"].clone()
    nan_view[1, 0, 0] = float("nan")
    cases = [
        ({"view": nan_view}, "view: the camera matrices contain NaN or infinite values"),
        ({"projection": "perspective"}, "projection: expected a tensor, got 'perspective'"),
        (
            {"view": raster["view"][:, :3]},
            r"view: expected camera matrices \[N,4,4\], got torch.float32 "
            r"\(2, 3, 4\)",
        ),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=f"^raster: {message}"):
            BakeTexture.execute(
                mesh=mesh, images=torch.rand(2, 32, 32, 3), raster={**raster, **change}, texture_size=16
            )
    vertices, faces, uvs, normals = _quad()
    position, normal, mask = B.uv_maps(vertices, normals, uvs, faces, faces, 16)
    images = torch.rand(2, 32, 32, 3)
    with pytest.raises(ValueError, match="^view: the camera matrices contain NaN"):
        B.bake(images, nan_view, raster["projection"], vertices, faces, position, normal, mask)
    with pytest.raises(ValueError, match="^projection: expected a tensor, got 'perspective'"):
        B.bake(images, raster["view"], "perspective", vertices, faces, position, normal, mask)
    with pytest.raises(ValueError, match="^mask: expected a tensor, got 'mask'"):
        B.bake(images, raster["view"], raster["projection"], vertices, faces, position, normal, "mask")
    with pytest.raises(ValueError, match="^mask: expected a tensor, got 'mask'"):
        B.dilate(position, "mask", 2)
    with pytest.raises(ValueError, match=r"^faces: expected integer vertex indices \[F,3\], got torch.float32"):
        B.uv_maps(vertices, normals, uvs, faces.float() + 0.5, faces, 16)
    with pytest.raises(ValueError, match="^size: a texture needs at least 2 x 2 texels"):
        B.uv_maps(vertices, normals, uvs, faces, faces, "16")
