"""Core Load3D's view and core's 3D conventions in the Mesh Rasterizer: its framing against a reference
re-implementation of three.js' cameras and of Load3D's model fit (numpy, float64), the default camera's
framing of normalised meshes in every standard view, core's linear vertex colours, and the MESH fields
the rasterizer does not draw named in the log.

The reference follows Load3D (ComfyUI_frontend src/extensions/core/load3d): a model is fitted to a
largest extent of 5, centred on x and z and standing on y = 0 (SceneModelManager.setupModel /
fitToViewer); the camera after loading stands at (2 max(sx, sz), 2 sy, 2 max(sx, sz)) looking at
(0, sy / 2, 0) with fov 35 (CameraManager.setupForModel, DEFAULT_PERSPECTIVE_CAMERA); the orthographic
camera's frustum is 10 tall (handleResize). three.js: Matrix4.lookAt with up +y, PerspectiveCamera and
OrthographicCamera.updateProjectionMatrix (zoom divides the view's half height), and WebGL's viewport
(NDC -1..1 onto the image's outer edges)."""

import logging
import math
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from rasterkit.nodes.mesh import MeshRasterizer, make_mesh

ASSETS = Path(__file__).resolve().parents[2] / "example_workflows" / "assets"
W, H = 96, 64


# -- the reference: three.js and Load3D in numpy -------------------------------------------------------


def three_look_at(eye, target):
    """three.js' view matrix (the inverse of camera.matrixWorld after camera.lookAt(target), up +y)."""
    z = np.subtract(eye, target, dtype=float)
    z /= np.linalg.norm(z)
    x = np.cross([0.0, 1.0, 0.0], z)
    x /= np.linalg.norm(x)
    world = np.eye(4)
    world[:3, 0], world[:3, 1], world[:3, 2], world[:3, 3] = x, np.cross(z, x), z, eye
    return np.linalg.inv(world)


def three_perspective(fov, aspect, zoom, near=0.01, far=10000.0):
    """PerspectiveCamera.updateProjectionMatrix: makePerspective(left, right, top, bottom, near, far)."""
    top = near * math.tan(math.radians(0.5 * fov)) / zoom
    height = 2 * top
    width = aspect * height
    left = -0.5 * width
    right, bottom = left + width, top - height
    return np.array(
        [
            [2 * near / (right - left), 0, (right + left) / (right - left), 0],
            [0, 2 * near / (top - bottom), (top + bottom) / (top - bottom), 0],
            [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
            [0, 0, -1, 0],
        ]
    )


def three_orthographic(left, right, top, bottom, zoom, near=0.01, far=10000.0):
    """OrthographicCamera.updateProjectionMatrix: the frustum shrunk about its centre by zoom."""
    dx, dy = (right - left) / (2 * zoom), (top - bottom) / (2 * zoom)
    cx, cy = (right + left) / 2, (top + bottom) / 2
    left, right, top, bottom = cx - dx, cx + dx, cy + dy, cy - dy
    w, h, p = 1 / (right - left), 1 / (top - bottom), 1 / (far - near)
    return np.array(
        [
            [2 * w, 0, 0, -(right + left) * w],
            [0, 2 * h, 0, -(top + bottom) * h],
            [0, 0, -2 * p, -(far + near) * p],
            [0, 0, 0, 1],
        ]
    )


def webgl_pixels(points, view, projection, width=W, height=H):
    """Image positions [N,2] (x right, y down, pixel edges at integers) of world points [N,3]."""
    clip = np.c_[points, np.ones(len(points))] @ (projection @ view).T
    ndc = clip[:, :2] / clip[:, 3:]
    return np.c_[(ndc[:, 0] + 1) / 2 * width, (1 - ndc[:, 1]) / 2 * height]


def rasterkit_pixels(points, raster, width=W, height=H):
    """The same positions through RasterKit's matrices and its rasterizer's screen mapping (raster.py:
    x_s = (ndc * 0.5 + 0.5) * (width - 1) + 0.5, rows flipped into an upright image)."""
    camera = (raster["projection"] @ raster["view"][0]).double().numpy()
    clip = np.c_[points, np.ones(len(points))] @ camera.T
    ndc = clip[:, :2] / clip[:, 3:]
    x = (ndc[:, 0] * 0.5 + 0.5) * (width - 1) + 0.5
    y = (ndc[:, 1] * 0.5 + 0.5) * (height - 1) + 0.5
    return np.c_[x, height - y]


def load3d_fit(vertices):
    """Load3D's fit of a model (scale to a largest extent of 5, centre x and z, stand on y = 0)."""
    low, high = vertices.min(0), vertices.max(0)
    scaled = vertices * (5 / (high - low).max())
    low, high = scaled.min(0), scaled.max(0)
    return scaled - np.array([(low[0] + high[0]) / 2, low[1], (low[2] + high[2]) / 2])


def load3d_default_camera(fitted):
    """CameraManager.setupForModel(size) of a fitted model: position and target."""
    sx, sy, sz = fitted.max(0) - fitted.min(0)
    return (2 * max(sx, sz), 2 * sy, 2 * max(sx, sz)), (0.0, sy / 2, 0.0)


def three_model(position, quaternion, scale):
    """Object3D.matrix = compose(position, quaternion, scale)."""
    x, y, z, w = np.asarray(quaternion, dtype=float) / np.linalg.norm(quaternion)
    rotation = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    matrix = np.eye(4)
    matrix[:3, :3], matrix[:3, 3] = rotation * np.asarray(scale), position
    return matrix


def xyz(values):
    return dict(zip("xyz", map(float, values), strict=True))


# -- the meshes: a long box off the origin (as a file may hold it) and the same box normalised ---------


def long_box():
    import trimesh

    box = trimesh.creation.box(extents=(3.0, 0.6, 1.2))
    box.apply_translation((10.0, -4.0, 2.0))
    return box


def normalised(vertices):
    """LoadMesh's normalize: centred, scaled to fit the cube [-1, 1]."""
    low, high = vertices.min(0), vertices.max(0)
    return (vertices - (low + high) / 2) * (2 / (high - low).max())


def core_mesh(vertices, faces, **fields):
    return make_mesh(torch.tensor(vertices, dtype=torch.float32)[None], torch.tensor(faces)[None], **fields)


def corners(vertices):
    low, high = vertices.min(0), vertices.max(0)
    return np.array([[(low, high)[i >> k & 1][k] for k in range(3)] for i in range(8)])


def render(mesh, **kw):
    outputs = MeshRasterizer.run(**{"width": W, "height": H, "mesh": mesh, **kw})
    return dict(zip([o.name for o in MeshRasterizer.OUTPUTS], outputs, strict=False))


# -- 1. Load3D's camera_info and model_3d_info -----------------------------------------------------------

BOX = long_box()
FITTED = load3d_fit(BOX.vertices)
DEFAULT_POSITION, DEFAULT_TARGET = load3d_default_camera(FITTED)
CAMERAS = {
    # Load3D's camera after loading, as 0.3.6x cores send it (no fov: the node's fov input, set to 35)
    "default, older camera_info": (
        {"position": xyz(DEFAULT_POSITION), "target": xyz(DEFAULT_TARGET), "zoom": 1, "cameraType": "perspective"},
        dict(fov=35.0),
    ),
    # newer cores send the fov: it wins over the input
    "default, with fov": (
        {"position": xyz(DEFAULT_POSITION), "target": xyz(DEFAULT_TARGET), "zoom": 1, "fov": 35},
        dict(fov=60.0),
    ),
    "orbited and zoomed": (
        {"position": xyz((-6.0, 3.5, 4.0)), "target": xyz((0.4, 1.2, -0.3)), "zoom": 1.7, "fov": 50},
        {},
    ),
}


def three_camera(info, width=W, height=H):
    view = three_look_at([info["position"][a] for a in "xyz"], [info["target"][a] for a in "xyz"])
    if info.get("cameraType") == "orthographic":
        half = (info["frustum"]["top"] - info["frustum"]["bottom"]) / 2 if "frustum" in info else 5.0
        aspect = width / height
        return view, three_orthographic(-half * aspect, half * aspect, half, -half, info["zoom"])
    return view, three_perspective(info.get("fov", 35.0), width / height, info["zoom"])


@pytest.mark.parametrize("camera", list(CAMERAS))
@pytest.mark.parametrize("normalize", [False, True])
def test_camera_info_frames_the_mesh_as_load3d_does(camera, normalize):
    """The fitted box's corners land where three.js puts them in Load3D's render (within 0.5 px), whether
    the mesh comes as the file has it or normalised by LoadMesh; and the render covers that box."""
    info, inputs = CAMERAS[camera]
    vertices = normalised(BOX.vertices) if normalize else BOX.vertices
    out = render(core_mesh(vertices, BOX.faces), camera_info=info, **inputs)
    view, projection = three_camera({**info, "fov": info.get("fov", 35.0)})
    expected = webgl_pixels(corners(FITTED), view, projection)
    ours = rasterkit_pixels(corners(out["raster"]["vertices"].double().numpy()), out["raster"])
    assert np.abs(ours - expected).max() < 0.5
    # the render's coverage spans the projected box: no smaller, no lower than in Load3D
    rows, columns = np.nonzero(out["mask"][0].numpy())
    low, high = np.clip(expected.min(0), 0, (W, H)), np.clip(expected.max(0), 0, (W, H))  # in the frame
    assert abs(columns.min() + 0.5 - low[0]) <= 1.5 and abs(columns.max() + 0.5 - high[0]) <= 1.5
    assert abs(rows.min() + 0.5 - low[1]) <= 1.5 and abs(rows.max() + 0.5 - high[1]) <= 1.5


@pytest.mark.parametrize("frustum", [None, {"left": -4.5, "right": 4.5, "top": 3.0, "bottom": -3.0}])
def test_orthographic_camera_info(frustum):
    """cameraType orthographic: Load3D's frustum (10 tall unless camera_info sends one) over zoom."""
    info = {"position": xyz((7.0, 5.0, 9.0)), "target": xyz((0.0, 1.0, 0.0)), "zoom": 1.3, "cameraType": "orthographic"}
    if frustum is not None:
        info["frustum"] = frustum
    out = render(core_mesh(BOX.vertices, BOX.faces), camera_info=info)
    expected = webgl_pixels(corners(FITTED), *three_camera(info))
    ours = rasterkit_pixels(corners(out["raster"]["vertices"].double().numpy()), out["raster"])
    assert np.abs(ours - expected).max() < 0.5


def test_model_3d_info_places_the_mesh_as_the_viewer_does():
    """model_3d_info (the viewer's model transform: position, quaternion, scale, as a list) is applied to
    the mesh as the file holds it, instead of Load3D's fit; the first transform of the list is used."""
    turn = (math.sin(0.3) * 0.6, math.sin(0.3) * 0.8, 0.0, math.cos(0.3))  # a unit quaternion
    scale = (1.5, 2.0, 1.5)
    # placed so that the box's centre lands at (0, 0.5, 0), where the camera looks
    centre = three_model((0, 0, 0), turn, scale)[:3, :3] @ BOX.bounding_box.centroid
    position = np.array([0.0, 0.5, 0.0]) - centre
    transform = {"position": xyz(position), "quaternion": dict(zip("xyzw", turn, strict=True)), "scale": xyz(scale)}
    info = {"position": xyz((6.0, 4.0, 8.0)), "target": xyz((0.0, 0.5, 0.0)), "zoom": 1.2, "fov": 45}
    out = render(core_mesh(BOX.vertices, BOX.faces), camera_info=info, model_3d_info=[transform, {}])
    model = three_model([transform["position"][a] for a in "xyz"], turn, [transform["scale"][a] for a in "xyz"])
    placed = np.c_[BOX.vertices, np.ones(len(BOX.vertices))] @ model.T
    expected = webgl_pixels(placed[:, :3], *three_camera(info))
    assert np.abs(rasterkit_pixels(out["raster"]["vertices"].double().numpy(), out["raster"]) - expected).max() < 0.5
    assert out["mask"].sum() > 100
    with pytest.raises(ValueError, match="model_3d_info: connect the camera_info"):
        render(core_mesh(BOX.vertices, BOX.faces), model_3d_info=[transform])


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"fov": 0}, "camera_info: fov is a vertical angle"),
        ({"frustum": {"left": -1, "right": 1, "top": -1, "bottom": 1}}, "camera_info: the frustum's top"),
        ({"frustum": "wide"}, "camera_info: expected Load3D's camera_info"),
    ],
)
def test_bad_camera_info_is_named(bad, message):
    info = {"position": xyz((0, 0, 3)), "target": xyz((0, 0, 0)), "zoom": 1, **bad}
    with pytest.raises(ValueError, match=message):
        render(core_mesh(BOX.vertices, BOX.faces), camera_info=info)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "model_3d_info: expected Load3D's model_3d_info"),
        ([{"position": xyz((0, 0, 0))}], "model_3d_info: expected Load3D's model_3d_info"),
        (
            {
                "position": xyz((0, 0, 0)),
                "quaternion": dict(zip("xyzw", (0, 0, 0, 0), strict=True)),
                "scale": xyz((1, 1, 1)),
            },
            "non-zero",
        ),
        (
            {
                "position": xyz((0, 0, 0)),
                "quaternion": dict(zip("xyzw", (0, 0, 0, 1), strict=True)),
                "scale": xyz((1, 0, 1)),
            },
            "non-zero",
        ),
        (
            {
                "position": xyz((math.nan, 0, 0)),
                "quaternion": dict(zip("xyzw", (0, 0, 0, 1), strict=True)),
                "scale": xyz((1, 1, 1)),
            },
            "finite",
        ),
    ],
)
def test_bad_model_3d_info_is_named(bad, message):
    info = {"position": xyz((0, 0, 3)), "target": xyz((0, 0, 0)), "zoom": 1}
    with pytest.raises(ValueError, match=message):
        render(core_mesh(BOX.vertices, BOX.faces), camera_info=info, model_3d_info=bad)


# -- 2. the default camera frames normalised meshes in every standard view -------------------------------


def bundled(name):
    import trimesh

    loaded = trimesh.load(ASSETS / name, force="mesh", process=False)
    return normalised(np.asarray(loaded.vertices)), np.asarray(loaded.faces)


def unit_cube():
    import trimesh

    cube = trimesh.creation.box(extents=(2.0, 2.0, 2.0))  # corners on the cube [-1, 1]: the worst case
    return np.asarray(cube.vertices), np.asarray(cube.faces)


MESHES = {
    "cube": unit_cube,
    "long box": lambda: (normalised(long_box().vertices), long_box().faces),
    "torus": lambda: bundled("rasterkit_torus.obj"),
    "spot": lambda: bundled("spot.glb"),
}
ORBITS = "; ".join(f"{a},{e}" for a in range(0, 360, 45) for e in (-60, -30, 0, 30, 60)) + "; 0,90; 0,-90"


@pytest.mark.parametrize("name", list(MESHES))
@pytest.mark.parametrize("projection", ["perspective", "orthographic"])
def test_the_default_camera_shows_all_of_a_normalised_mesh_in_every_view(name, projection):
    """Every vertex of a mesh normalised into the cube [-1, 1] lies inside the frame, at least 4% of the
    half frame from its edges, in the six views, the default single view and orbit views all round."""
    vertices, faces = MESHES[name]()
    mesh = core_mesh(vertices, faces)
    for views in ("six", "single", "list"):
        out = render(mesh, width=64, height=64, views=views, view_list=ORBITS, projection=projection)
        raster = out["raster"]
        camera = (raster["projection"] @ raster["view"]).double().numpy()
        clip = np.einsum("bij,nj->bni", camera, np.c_[vertices, np.ones(len(vertices))])
        ndc = clip[..., :2] / clip[..., 3:]
        assert np.abs(ndc).max() < 0.96, (views, np.abs(ndc).max())
        assert out["mask"].sum() > 0
        edges = out["mask"][:, [0, -1], :].sum() + out["mask"][:, :, [0, -1]].sum()
        assert edges == 0, views


# -- 3. core's linear vertex colours ---------------------------------------------------------------------


def facing_quad():
    vertices = np.array([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [-1.0, 1.0, 0.0]])
    return vertices, np.array([[0, 1, 2], [0, 2, 3]])


@pytest.mark.parametrize("field", ["vertex_colors", "colors"])
def test_core_vertex_colours_are_linear_and_shown_in_srgb(field):
    """Core's PaintMesh stores srgb ** 2.2 (in vertex_colors; older cores in colors) and its Render Mesh
    shows colours ** (1 / 2.2): the render shows the sRGB colour again."""
    vertices, faces = facing_quad()
    srgb = torch.tensor([0.2, 0.5, 0.8])
    mesh = types.SimpleNamespace(
        vertices=torch.tensor(vertices, dtype=torch.float32)[None],
        faces=torch.tensor(faces)[None],
        **{field: (srgb**2.2).expand(1, 4, 3)},
    )
    out = render(mesh, shading="vertex_color", azimuth=0.0, elevation=0.0)
    covered = out["mask"][0] > 0
    assert covered.sum() > 100
    assert torch.allclose(out["render"][0][covered], srgb.expand(int(covered.sum()), 3), atol=1e-5)


@pytest.fixture
def input_folder(tmp_path, monkeypatch):
    from rasterkit.nodes import mesh as mesh_nodes

    (tmp_path / "3d").mkdir()
    monkeypatch.setattr(mesh_nodes, "input_directory", lambda: str(tmp_path))
    return tmp_path


def test_load_mesh_colours_round_trip_and_trimesh_colours_stay_srgb(input_folder):
    """LoadMesh holds a file's colours linear in its MESH: the render shows the file's colours; a
    TRIMESH's colours are sRGB already and are shown as they are."""
    import trimesh

    from rasterkit.nodes.mesh import LoadMesh

    vertices, faces = facing_quad()
    quad = trimesh.Trimesh(vertices, faces, process=False)
    quad.visual.vertex_colors = np.array([[51, 128, 204, 255]] * 4, dtype=np.uint8)
    (input_folder / "3d" / "quad.ply").write_bytes(quad.export(file_type="ply"))
    mesh, loaded = LoadMesh.run("3d/quad.ply", normalize=False)
    expected = torch.tensor([51, 128, 204]) / 255
    for source in (dict(mesh=mesh), dict(trimesh=loaded)):
        out = render(
            source.get("mesh"), trimesh=source.get("trimesh"), shading="vertex_color", azimuth=0.0, elevation=0.0
        )
        covered = out["mask"][0] > 0
        assert torch.allclose(out["render"][0][covered], expected.expand(int(covered.sum()), 3), atol=1e-5)


# -- 4. MESH fields the rasterizer does not draw are named once in the log --------------------------------


def test_unread_mesh_fields_are_named_once_in_the_log(caplog):
    vertices, faces = facing_quad()
    geometry = dict(vertices=torch.tensor(vertices, dtype=torch.float32)[None], faces=torch.tensor(faces)[None])
    richer = types.SimpleNamespace(
        **geometry,
        uvs=None,
        vertex_colors=torch.rand(1, 4, 3),
        metallic_roughness=torch.rand(1, 8, 8, 3),
        normal_map=torch.rand(1, 8, 8, 3),
        tangents=torch.rand(1, 4, 4),
        material={"base_color_factor": [1, 1, 1, 1]},
        emissive=None,
        unlit=True,
        occlusion_in_mr=False,
        vertex_counts=None,
        face_counts=None,
    )
    with caplog.at_level(logging.INFO, logger="rasterkit"):
        render(richer, width=16, height=16)
    lines = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert lines == [
        "Mesh Rasterizer (RasterKit): the MESH's material, metallic_roughness, normal_map, tangents, "
        "unlit are not used (not drawn)"
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rasterkit"):
        render(types.SimpleNamespace(**geometry, vertex_colors=None, texture=None), width=16, height=16)
    assert not [r for r in caplog.records if "not used" in r.getMessage()]
