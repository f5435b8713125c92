"""Mesh renders against independent references: rays cast with trimesh and float64 numpy barycentrics
(vertex colours, Lambert, matcap, depth, world normals), bilinear and box-filtered texture lookups in
numpy (textures, mipmaps), a 4x supersampled render (antialiasing); and the cameras and views."""

import math

import numpy as np
import pytest
import torch

from rasterkit.nodes.mesh import MeshRasterizer, make_mesh
from rasterkit.utils import mesh_rasterizer as M
from rasterkit.utils.mesh_rasterizer import shading as S
from rasterkit.utils.mesh_rasterizer.maps import AMBIENT


def mesh_of(trimesh_object, **fields):
    return make_mesh(
        torch.tensor(trimesh_object.vertices, dtype=torch.float32)[None],
        torch.tensor(trimesh_object.faces)[None],
        **fields,
    )


def cast_rays(trimesh_object, width, height, azimuth, elevation, distance, fov):
    """The face and float64 barycentrics hit by each pixel's ray (perspective camera on the orbit, image
    rows down; pixel centres where the rasterizer samples them): faces int [H,W] (-1: nothing), bary
    [H,W,3] and the eye [3]; numpy float64 throughout."""
    import trimesh

    a, e = math.radians(azimuth), math.radians(elevation)
    eye = np.array([math.cos(e) * math.sin(a), math.sin(e), math.cos(e) * math.cos(a)]) * distance
    forward = -eye / np.linalg.norm(eye)
    right = np.cross(forward, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    # the rasterizer's screen mapping: pixel centre c + 0.5 lands on NDC 2c / (W - 1) - 1; rows flipped
    ndc_x = 2 * np.arange(width) / (width - 1) - 1
    ndc_y = 1 - 2 * np.arange(height) / (height - 1)
    tangent = math.tan(math.radians(fov) / 2)
    x, y = np.meshgrid(ndc_x * tangent * width / height, ndc_y * tangent)
    directions = forward + x[..., None] * right + y[..., None] * up
    directions = unit(directions)
    origins = np.broadcast_to(eye, directions.shape).reshape(-1, 3)
    hit_faces, hit_rays, locations = trimesh_object.ray.intersects_id(
        origins, directions.reshape(-1, 3), multiple_hits=False, return_locations=True
    )
    faces = np.full(width * height, -1)
    faces[hit_rays] = hit_faces
    bary = np.zeros((width * height, 3))
    bary[hit_rays] = trimesh.triangles.points_to_barycentric(trimesh_object.triangles[hit_faces], locations)
    return faces.reshape(height, width), bary.reshape(height, width, 3), eye


def unit(vectors):
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-300)


def interior(faces):
    """Pixels whose ray and the 4 neighbours' hit the mesh (silhouette pixels are left out: a ray
    grazing an edge may land either side in float32)."""
    hit = faces >= 0
    inner = hit.copy()
    inner[1:] &= hit[:-1]
    inner[:-1] &= hit[1:]
    inner[:, 1:] &= hit[:, :-1]
    inner[:, :-1] &= hit[:, 1:]
    return inner


VIEW = dict(width=48, height=40, azimuth=30.0, elevation=20.0, distance=3.0, fov=40.0)


def render(mesh, **kw):
    outputs = MeshRasterizer.run(**{**VIEW, "antialias": False, "mesh": mesh, **kw})
    return dict(zip([o.name for o in MeshRasterizer.OUTPUTS], outputs, strict=False))


def test_vertex_colours_against_ray_casting():
    import trimesh

    cube = trimesh.creation.box(extents=(1.4, 1.2, 1.0))
    colours = np.random.default_rng(3).random((8, 3))
    faces, bary, _ = cast_rays(cube, **VIEW)
    expected = (bary[..., None] * colours[cube.faces[faces]]).sum(-2)
    # a MESH holds linear colours, as core stores them: the render shows them in sRGB
    linear = torch.tensor(colours**2.2, dtype=torch.float32)[None]
    out = render(mesh_of(cube, colors=linear), shading="vertex_color")
    inner = interior(faces)
    assert inner.sum() > 400
    error = np.abs(out["render"][0].numpy() - expected)[inner]
    assert error.max() < 0.02 and error.mean() < 2e-3  # the shared diagonal may swap triangles: both interpolate
    assert torch.equal(out["render_alpha"][0] > 0, out["mask"][0] > 0)
    assert out["render"][0][out["mask"][0] == 0].abs().max() == 0  # black background


def sphere(subdivisions=4):
    import trimesh

    return trimesh.creation.icosphere(subdivisions=subdivisions)


@pytest.mark.parametrize("light", [(30.0, 30.0), (-60.0, 10.0), (0.0, 0.0)])
def test_lambert_against_ray_casting(light):
    ball = sphere()
    faces, bary, _ = cast_rays(ball, **VIEW)
    normals = (bary[..., None] * ball.vertex_normals[ball.faces[faces]]).sum(-2)
    normals = unit(normals)
    a, e = map(math.radians, light)
    light_view = np.array([math.cos(e) * math.sin(a), math.sin(e), math.cos(e) * math.cos(a)])
    view = M.orbit_cameras([VIEW["azimuth"]], [VIEW["elevation"]], VIEW["distance"])[0, :3, :3].double().numpy()
    expected = AMBIENT + (1 - AMBIENT) * np.clip((normals @ view.T) @ light_view, 0, None)
    out = render(mesh_of(ball), light_azimuth=light[0], light_elevation=light[1])
    inner = interior(faces)
    error = np.abs(out["render"][0, ..., 0].numpy() - expected)[inner]
    assert error.max() < 0.03 and error.mean() < 3e-3  # our normals: area-weighted; trimesh's: angle-weighted
    assert torch.equal(out["render"][0, ..., 0], out["render"][0, ..., 2])


def test_matcap_against_ray_casting():
    ball = sphere()
    faces, bary, _ = cast_rays(ball, **VIEW)
    normals = (bary[..., None] * ball.vertex_normals[ball.faces[faces]]).sum(-2)
    view = M.orbit_cameras([VIEW["azimuth"]], [VIEW["elevation"]], VIEW["distance"])[0, :3, :3].double().numpy()
    view_normals = normals @ view.T
    view_normals = unit(view_normals)
    size = 16
    yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    matcap = np.stack([xx, 1 - yy, xx * (1 - yy)], -1)  # smooth: the lookup's error is the normals'
    # bilinear lookup at u = n.x / 2 + 1/2, v = n.y / 2 + 1/2, image row 0 at v = 1
    u = (view_normals[..., 0] * 0.5 + 0.5) * size - 0.5
    v = (1 - (view_normals[..., 1] * 0.5 + 0.5)) * size - 0.5
    expected = np.stack(
        [
            np.clip(u + 0.5, 0.5, size - 0.5) / (size - 1) - 0.5 / (size - 1),
            1 - (np.clip(v + 0.5, 0.5, size - 0.5) / (size - 1) - 0.5 / (size - 1)),
        ],
        -1,
    )
    expected = np.concatenate([expected, expected[..., :1] * expected[..., 1:]], -1)
    out = render(mesh_of(ball), shading="matcap", matcap=torch.tensor(matcap, dtype=torch.float32)[None])
    inner = interior(faces)
    error = np.abs(out["render"][0].numpy() - expected)[inner]
    assert error[..., :2].max() < 0.03 and error[..., :2].mean() < 5e-3
    assert error[..., 2].mean() < 5e-3


def bilinear_repeat(texture, u, v):
    """float64 bilinear lookup with repeat of texture [h,w,c] at u, v (v up)."""
    h, w = texture.shape[:2]
    x, y = u * w - 0.5, (1 - v) * h - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]

    def at(yi, xi):
        return texture[yi % h, xi % w]

    return (at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx) * (1 - fy) + (
        at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx
    ) * fy


def textured_quad(texture, extent=1.2):
    """A quad facing +z over [-extent, extent]^2 with UVs 0..1 across it."""
    vertices = torch.tensor([[-extent, -extent, 0], [extent, -extent, 0], [extent, extent, 0], [-extent, extent, 0]])
    uvs = torch.tensor([[0.0, 0], [1, 0], [1, 1], [0, 1]])
    return make_mesh(
        vertices[None],
        torch.tensor([[[0, 1, 2], [0, 2, 3]]]),
        uvs=uvs[None],
        texture=torch.as_tensor(texture, dtype=torch.float32)[None],
    )


def ortho_pixel_positions(size):
    """World x, y of each pixel centre of an orthographic front view with ortho_scale 2 (NDC = world)."""
    coordinates = 2 * np.arange(size) / (size - 1) - 1
    x, y = np.meshgrid(coordinates, coordinates[::-1])
    return x, y


def test_texture_against_numpy_bilinear():
    """Magnified: mip level 0, plain bilinear with repeat, through the UVs of a quad."""
    texture = np.random.default_rng(5).random((8, 6, 3))
    size = 40
    out = render(
        textured_quad(texture),
        width=size,
        height=size,
        azimuth=0.0,
        elevation=0.0,
        projection="orthographic",
        ortho_scale=2.0,
        shading="texture",
    )
    x, y = ortho_pixel_positions(size)
    expected = bilinear_repeat(texture, (x + 1.2) / 2.4, (y + 1.2) / 2.4)
    assert np.abs(out["render"][0].numpy() - expected).max() < 1e-4


def test_minified_textures_are_mipmapped():
    """A checkerboard of single texels shown 4 texels to a pixel: each pixel is the box average of its
    footprint (1/2 of each colour), where plain bilinear lookups alias to 0s and 1s."""
    checks = (np.indices((64, 64)).sum(0) % 2).astype(np.float64)[..., None].repeat(3, -1)
    size = 16
    out = render(
        textured_quad(checks, extent=1.0 + 1 / (size - 1)),
        width=size,
        height=size,
        azimuth=0.0,
        elevation=0.0,
        projection="orthographic",
        ortho_scale=2.0,
        shading="texture",
    )
    x, y = ortho_pixel_positions(size)
    footprint = np.zeros((size, size))  # box average of the texels under each pixel, in float64
    for r in range(size):
        for c in range(size):
            footprint[r, c] = checks[4 * r : 4 * r + 4, 4 * c : 4 * c + 4, 0].mean()
    assert np.abs(out["render"][0, 1:-1, 1:-1, 0].numpy() - footprint[1:-1, 1:-1]).max() < 0.02
    bilinear = bilinear_repeat(checks, (x + 1) / 2, (y + 1) / 2)[..., 0]
    assert np.abs(bilinear - 0.5).max() > 0.4  # what no mipmaps would show


def test_mip_pyramid_levels():
    texture = torch.rand(6, 10, 3)
    texels, levels = S.mip_pyramid(texture)
    assert levels.tolist() == [[0, 10, 6], [60, 5, 3], [75, 2, 1], [77, 1, 1]]
    assert texels.shape == (78, 3)
    assert torch.allclose(texels[77], texels[75:77].mean(0)) and torch.allclose(texels[:60], texture.reshape(-1, 3))


def supersampled_clip(clip, size, factor):
    """clip [B,V,4] moved so that a render factor times as large lands each low-resolution pixel on a
    factor x factor block (the screen mapping's (size - 1) scale is not a multiple of the size)."""
    ndc = clip[..., :2] / clip[..., 3:]
    u = (factor * (size - 1) * (ndc * 0.5 + 0.5) + (factor - 1) / 2) / (factor * size - 1)
    return torch.cat([(2 * u - 1) * clip[..., 3:], clip[..., 2:]], -1)


def lit_rgba(trimesh_object, size, antialias, factor=1):
    vertices = torch.tensor(trimesh_object.vertices, dtype=torch.float32)
    faces = torch.tensor(trimesh_object.faces)
    view = M.orbit_cameras([30.0], [20.0], 3.0)
    clip = torch.einsum(
        "bij,nj->bni", M.perspective(40, 1, 0.03, 13) @ view, torch.cat([vertices, torch.ones(len(vertices), 1)], 1)
    )
    clip, size = supersampled_clip(clip, size, factor), size * factor
    findices, barycentric = M.rasterize_views(clip, faces, size, size, cull_back_faces=True)
    findices, barycentric = findices.flip(1), barycentric.flip(1)
    normals = torch.nn.functional.normalize(M.interpolate(vertices, findices, barycentric, faces), dim=-1)
    rgba = torch.cat(
        [
            S.lambert(normals, S.light_direction(30, 20)[None], 0.2).expand(-1, -1, -1, 3) * (findices > 0)[..., None],
            (findices > 0)[..., None].float(),
        ],
        -1,
    )
    if antialias:
        rgba = S.antialias(rgba, findices, S.screen_corners(clip, faces, size, size), S.edge_partners(faces, vertices))
    return rgba


@pytest.mark.parametrize("shape,ratio", [("box", 0.2), ("icosphere1", 0.3), ("icosphere3", 0.75)])
def test_antialiasing_against_a_supersampled_render(shape, ratio):
    """Edge pixels (partly covered in a 4x render box-filtered down) come closer to it: much closer
    for large triangles; for a fine sphere less, where the silhouette's triangles are thinner than a
    pixel and cover no pixel centre (nvdiffrast's pass has the same limit)."""
    import trimesh

    solid = trimesh.creation.box() if shape == "box" else trimesh.creation.icosphere(subdivisions=int(shape[-1]))
    reference = torch.nn.functional.avg_pool2d(lit_rgba(solid, 64, False, 4).permute(0, 3, 1, 2), 4)
    reference = reference.permute(0, 2, 3, 1)
    edge = (reference[..., 3] > 0.02) & (reference[..., 3] < 0.98)
    aliased = (lit_rgba(solid, 64, False) - reference).abs()[edge].mean()
    smoothed = (lit_rgba(solid, 64, True) - reference).abs()[edge].mean()
    assert edge.sum() > 100 and smoothed < ratio * aliased


def test_antialiasing_leaves_interior_edges_and_seams_alone():
    """Edges between triangles both facing the camera are not blended, where the vertices are split
    too (hard edges and UV seams: the same edge by other vertex indices)."""
    import trimesh

    box = trimesh.creation.box()
    split = trimesh.Trimesh(box.triangles.reshape(-1, 3), np.arange(36).reshape(12, 3), process=False)
    for solid in (box, split):
        rgba = lit_rgba(solid, 64, True)
        plain = lit_rgba(solid, 64, False)
        changed = (rgba - plain).abs().amax(-1) > 0
        inner = torch.from_numpy(interior(np.where(plain[0, ..., 3].numpy() > 0, 0, -1)))
        assert not changed[0][inner].any()


def test_edge_partners():
    import trimesh

    box = trimesh.creation.box()
    faces = torch.tensor(box.faces)
    partners = S.edge_partners(faces, torch.tensor(box.vertices, dtype=torch.float32))
    assert (partners >= 0).all()
    for face, edge in ((0, 0), (5, 2), (11, 1)):
        across = int(partners[face, edge])
        ends = {int(faces[face, (edge + 1) % 3]), int(faces[face, (edge + 2) % 3])}
        assert ends <= set(faces[across].tolist()) and across != face
    assert S.edge_partners(torch.tensor([[0, 1, 2]]), torch.eye(3)).tolist() == [[-1, -1, -1]]


def test_depth_as_distance_and_normals_in_world_space_against_ray_casting():
    ball = sphere()
    faces, bary, eye = cast_rays(ball, **VIEW)
    points = (bary[..., None] * ball.vertices[ball.faces[faces]]).sum(-2)
    axis = -eye / np.linalg.norm(eye)
    expected_depth = (points - eye) @ axis
    normals = (bary[..., None] * ball.vertex_normals[ball.faces[faces]]).sum(-2)
    normals = unit(normals)
    out = render(mesh_of(ball), depth_mode="distance", normal_space="world")
    inner = interior(faces)
    assert np.abs(out["depth"][0, ..., 0].numpy() - expected_depth)[inner].max() < 2e-3
    assert np.abs(out["normal"][0].numpy() * 2 - 1 - normals)[inner].max() < 0.03
    assert out["depth"][0][out["mask"][0] == 0].abs().max() == 0


def test_view_list_cameras_and_weights():
    ball = mesh_of(sphere(2))
    listed = render(ball, views="list", view_list="0,0; 90, 10, 2.5\n180,-30,0", width=16, height=16)
    raster = listed["raster"]
    assert torch.equal(raster["view"], M.orbit_cameras([0.0, 90.0, 180.0], [0.0, 10.0, -30.0], 3.0))
    assert raster["view_weights"].tolist() == [1.0, 2.5, 0.0] and listed["normal"].shape[0] == 3
    single = render(ball, azimuth=90.0, elevation=10.0, width=16, height=16)
    assert torch.equal(single["raster"]["findices"][0], raster["findices"][1])
    for text in ("", "0", "a,b", "0,100", "0,0,-1", "0,0,1,2"):
        with pytest.raises(ValueError, match="view_list: "):
            render(ball, views="list", view_list=text)


def test_load3d_camera_info():
    """core Load3D's camera_info: the camera at position looking at target; zoom narrows the view; the
    orthographic height is ortho_scale where camera_info sends no frustum. (Its framing against three.js'
    own: test_load3d.py.)"""
    ball = mesh_of(sphere(2))
    orbit = render(ball, azimuth=0.0, elevation=0.0, distance=3.0)
    info = {
        "position": {"x": 0, "y": 0, "z": 3},
        "target": {"x": 0, "y": 0, "z": 0},
        "zoom": 1,
        "cameraType": "perspective",
    }
    load3d = render(ball, camera_info=info, views="six")
    assert torch.allclose(load3d["raster"]["view"], orbit["raster"]["view"], atol=1e-6)
    far = {**info, "position": {"x": 0, "y": 2.5, "z": 20}, "target": {"x": 0, "y": 2.5, "z": 0}}
    zoomed, unzoomed = render(ball, camera_info={**far, "zoom": 2}), render(ball, camera_info=far)
    assert 3.5 * unzoomed["mask"].sum() < zoomed["mask"].sum() < 4.5 * unzoomed["mask"].sum()
    ortho = render(ball, camera_info={**far, "cameraType": "orthographic"}, ortho_scale=8.0)
    assert ortho["raster"]["projection"][1, 1] == pytest.approx(40 / 39 / 4.0)  # a view 8 tall
    above = render(ball, camera_info={**info, "position": {"x": 0, "y": 12, "z": 0}})
    assert above["mask"].sum() > 0
    for bad in ({}, {**info, "position": info["target"]}, {**info, "zoom": -1}, "camera"):
        with pytest.raises(ValueError, match="camera_info: "):
            render(ball, camera_info=bad)


def test_ortho_scale_sets_the_height_shown():
    ball = mesh_of(sphere(2))
    out = render(ball, projection="orthographic", ortho_scale=4.0, width=41, height=41, azimuth=0.0, elevation=0.0)
    rows = out["mask"][0].any(1).sum()
    assert abs(int(rows) - 20) <= 1  # a sphere of diameter 2 in a view 4 tall


def test_renders_need_what_they_draw():
    ball = mesh_of(sphere(1))
    with pytest.raises(ValueError, match="shading: texture needs a mesh with UVs"):
        render(ball, shading="texture")
    with pytest.raises(ValueError, match="shading: vertex_color needs a mesh with vertex colours"):
        render(ball, shading="vertex_color")
    with pytest.raises(ValueError, match="matcap: connect a matcap image"):
        render(ball, shading="matcap")
    flat = render(ball, shading="none")
    assert torch.equal(flat["render"][0, ..., 0], flat["mask"][0])


def test_the_render_path_op_budget(monkeypatch):
    """A textured, anti-aliased render at 1024 x 1024: the maps' ops (324 before renders) plus the
    render's, a fixed number whatever the size; no host syncs beyond the maps' 5 (input checks and the
    rasterizer's) and the normals' 3 (a convergence check per pass of the smoothing groups, on the mesh's
    CPU tensors before the views), no float64 (counted on the CPU, on the torch path a GPU takes)."""
    from opcount import OpCount

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")

    ball = sphere(3)
    mesh = mesh_of(ball, uvs=torch.rand(1, len(ball.vertices), 2), texture=torch.rand(1, 256, 256, 3))
    with OpCount() as count:
        MeshRasterizer.run(width=1024, height=1024, mesh=mesh, shading="texture")
    summary = count.summary()
    assert count.float64 == 0 and count.syncs == 5 + 3 and count.launches <= 1150, summary


def test_a_matcap_or_colours_of_any_dtype_are_read_as_0_to_1():
    """uint8 (0..255) and uint16 images render as their float (0..1) equivalents, converted once; a
    uint8 matcap used to render values up to 238."""
    ball = mesh_of(sphere(2))
    levels = torch.randint(0, 256, (1, 16, 16, 3), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    reference = render(ball, shading="matcap", matcap=levels.float() / 255)["render"]
    assert torch.allclose(render(ball, shading="matcap", matcap=levels)["render"], reference, atol=1e-6)
    wide = levels.to(torch.int32) * 257  # the same levels in 16 bits
    assert torch.allclose(render(ball, shading="matcap", matcap=wide.to(torch.uint16))["render"], reference, atol=1e-6)
    covered = render(ball, shading="none")["mask"] > 0
    assert torch.allclose(
        S.matcap(torch.zeros(1, 4, 4, 3), levels[0], torch.ones(1, 4, 4, dtype=torch.bool)),
        S.matcap(torch.zeros(1, 4, 4, 3), levels[0].float() / 255, torch.ones(1, 4, 4, dtype=torch.bool)),
    )
    colours = torch.randint(0, 256, (1, len(sphere(2).vertices), 3), dtype=torch.uint8)
    as_bytes = render(mesh_of(sphere(2), colors=colours), shading="vertex_color")["render"]
    as_floats = render(mesh_of(sphere(2), colors=colours.float() / 255), shading="vertex_color")["render"]
    assert covered.any() and torch.allclose(as_bytes, as_floats, atol=1e-6)


@pytest.mark.parametrize(
    "matcap,message,image,engine_message",
    [
        (
            torch.zeros(0, 16, 16, 3),
            r"^matcap: expected an IMAGE \[B,H,W,3\] \(its first image is used\), got shape "
            r"\(0, 16, 16, 3\)",
            torch.zeros(0, 16, 3),
            r"^matcap: expected an image \[H,W,C\]",
        ),
        (
            "matcap.png",
            r"^matcap: expected an IMAGE \[B,H,W,3\], got 'matcap.png'",
            "matcap.png",
            "^matcap: expected a tensor of colours, got str",
        ),
        (
            torch.zeros(1, 16, 16, 3, dtype=torch.complex64),
            "^matcap: expected real colour values",
            torch.zeros(16, 16, 3, dtype=torch.complex64),
            "^matcap: expected real colour values",
        ),
    ],
)
def test_bad_matcaps_are_named_by_the_node_and_the_engine(matcap, message, image, engine_message):
    with pytest.raises(ValueError, match=message):
        MeshRasterizer.execute(mesh=mesh_of(sphere(1)), width=16, height=16, shading="matcap", matcap=matcap)
    with pytest.raises(ValueError, match=engine_message):
        S.matcap(torch.zeros(1, 4, 4, 3), image, torch.ones(1, 4, 4, dtype=torch.bool))
