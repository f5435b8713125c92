"""The mesh nodes' memory estimates against the peak they reach (the process's peak RSS, reset before
each call; glibc set to hand freed blocks back at once, and its free heap pages returned before each
call, so that RSS follows what is allocated), at three sizes each: within 2x either way."""

import ctypes
import gc
import sys

import pytest
import torch

from rasterkit.nodes import bake as bake_nodes
from rasterkit.nodes import mesh as mesh_nodes
from rasterkit.nodes.bake import BakeTexture, UVMaps
from rasterkit.nodes.mesh import LoadMesh, MeshRasterizer, make_mesh
from rasterkit.utils.inputs import mesh_files

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(key))


@pytest.fixture(scope="module")
def peak_rss():
    """peak(fn, warm_up) -> (bytes the peak RSS rose by while fn ran, fn's result); warm_up runs first."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        pytest.skip("needs Linux's resettable peak RSS (/proc/self/clear_refs)")
    libc = ctypes.CDLL(None)
    libc.mallopt(M_MMAP_THRESHOLD, 1 << 16)  # fixed: large blocks are mapped, and unmapped when freed
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 16)

    def peak(fn, warm_up=None):
        if warm_up is not None:
            warm_up()  # first calls import modules and build caches, which no estimate counts
        gc.collect()
        libc.malloc_trim(0)  # free pages of earlier tests' heap, which reuse would not count
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        before = _status("VmRSS:")
        result = fn()
        return _status("VmHWM:") - before, result

    yield peak
    libc.mallopt(M_MMAP_THRESHOLD, 128 << 10)
    libc.mallopt(M_TRIM_THRESHOLD, 128 << 10)


def _sphere(subdivisions: int, uvs: bool = False):
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=subdivisions)
    vertices = torch.tensor(sphere.vertices, dtype=torch.float32)
    fields = {}
    if uvs:
        direction = torch.nn.functional.normalize(vertices, dim=-1)
        fields["uvs"] = torch.stack(
            [
                torch.atan2(direction[:, 0], direction[:, 2]) / (2 * torch.pi) + 0.5,
                torch.asin(direction[:, 1].clamp(-1, 1)) / torch.pi + 0.5,
            ],
            -1,
        )[None]
    return make_mesh(vertices[None], torch.tensor(sphere.faces)[None], **fields)


def _within_twice(estimate: int, measured: int, label: str):
    assert measured / 2 <= estimate <= measured * 2, (
        f"{label}: estimated {estimate / 1e6:.1f} MB, measured {measured / 1e6:.1f} MB"
    )


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS through /proc")
@pytest.mark.parametrize(
    "size",
    [
        dict(width=384, height=384, views=4, subdivisions=3),  # pixels
        dict(width=16, height=16, views=8, subdivisions=6),  # views x faces
        dict(width=768, height=512, views=2, subdivisions=5),  # both
    ],
)
def test_mesh_rasterizer_estimate(peak_rss, size):
    mesh = _sphere(size["subdivisions"])
    view_list = "; ".join(f"{7 * i},{i % 60}" for i in range(size["views"]))
    width, height = size["width"], size["height"]
    measured, outputs = peak_rss(
        lambda: MeshRasterizer.run(width=width, height=height, views="list", view_list=view_list, mesh=mesh)
    )
    del outputs
    vertices, faces = mesh.vertices.shape[1], mesh.faces.shape[1]
    per_chunk = max(1, mesh_nodes.CHUNK_WORK // (width * height + vertices + faces))
    outputs, per_view, mesh_bytes = mesh_nodes.render_bytes(width, height, size["views"], vertices, faces, False)
    _within_twice(outputs + per_view * min(size["views"], per_chunk) + mesh_bytes, measured, str(size))


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS through /proc")
@pytest.mark.parametrize("texture_size,subdivisions", [(512, 6), (1024, 4), (1536, 3)])
def test_uv_maps_estimate(peak_rss, texture_size, subdivisions):
    mesh = _sphere(subdivisions, uvs=True)
    measured, outputs = peak_rss(
        lambda: UVMaps.run(mesh=mesh, texture_size=texture_size, dilation=2),
        warm_up=lambda: UVMaps.run(mesh=_sphere(1, uvs=True), texture_size=32, dilation=2),
    )
    del outputs
    _within_twice(bake_nodes.maps_bytes(texture_size, mesh.faces.shape[1]), measured, f"{texture_size}")


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS through /proc")
@pytest.mark.parametrize("texture_size,views,side", [(256, 6, 512), (768, 4, 256), (512, 12, 256)])
def test_bake_estimate(peak_rss, texture_size, views, side):
    from rasterkit.utils import mesh_rasterizer as M

    mesh = _sphere(4, uvs=True)
    raster = {
        "view": M.orbit_cameras(
            [360 * i / views for i in range(views)], [(i % 5) * 15 - 30 for i in range(views)], 3.0
        ),
        "projection": M.perspective(40.0, 1.0, 0.1, 13.0),
    }
    images = torch.rand(views, side, side, 3)
    measured, outputs = peak_rss(
        lambda: BakeTexture.run(mesh=mesh, images=images, raster=raster, texture_size=texture_size, dilation=2),
        warm_up=lambda: BakeTexture.run(mesh=mesh, images=images[:, :32, :32], raster=raster, texture_size=32),
    )
    del outputs
    estimate = bake_nodes.bake_bytes(texture_size, views, side, side, mesh.faces.shape[1])
    _within_twice(estimate, measured, f"{texture_size} x {views} views of {side}")


@pytest.fixture
def input_folder(tmp_path, monkeypatch):
    folder = tmp_path / "input"
    folder.mkdir()
    monkeypatch.setattr(mesh_nodes, "input_directory", lambda: str(folder))
    return folder


def _textured_box_glb(side: int, subdivisions: int = 1) -> bytes:
    import numpy as np
    import trimesh
    from PIL import Image

    mesh = trimesh.creation.icosphere(subdivisions=subdivisions)
    image = Image.fromarray(np.full((side, side, 3), 90, np.uint8))
    mesh.visual = trimesh.visual.TextureVisuals(
        uv=np.random.default_rng(1).random((len(mesh.vertices), 2)), image=image
    )
    return mesh.export(file_type="glb")


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS through /proc")
@pytest.mark.parametrize("name,side,subdivisions", [("a.glb", 1024, 1), ("b.glb", 2048, 1), ("c.glb", 64, 7)])
def test_load_mesh_estimate(peak_rss, input_folder, name, side, subdivisions):
    from rasterkit.utils.inputs.mesh_files import declared

    (input_folder / name).write_bytes(_textured_box_glb(side, subdivisions))
    measured, outputs = peak_rss(lambda: LoadMesh.run(name))
    del outputs
    counts = declared(str(input_folder / name))
    assert counts.textures == [(side, side)]
    estimate = (
        mesh_files.LOAD_BYTES_PER_VERTEX * counts.vertices
        + mesh_files.LOAD_BYTES_PER_FACE * counts.faces
        + mesh_files.LOAD_BYTES_PER_TEXEL * side * side
    )
    _within_twice(estimate, measured, name)
