"""LoadMesh and MeshRasterizer: maps, layouts and bad input."""
from pathlib import Path

import pytest
import torch

from rasterkit.nodes.mesh import LoadMesh, Mesh, MeshRasterizer

ASSET = Path(__file__).resolve().parents[1] / "example_workflows" / "assets" / "rasterkit_torus.obj"


def sphere_mesh():
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=3)
    return Mesh(torch.tensor(sphere.vertices, dtype=torch.float32)[None], torch.tensor(sphere.faces)[None]), sphere


def test_load_mesh_normalises_into_the_unit_cube():
    mesh, loaded = LoadMesh.run(str(ASSET))
    assert mesh.vertices.shape[0] == 1 and mesh.faces.shape[-1] == 3
    assert mesh.vertices.abs().max() == pytest.approx(1.0, abs=1e-5)
    assert len(loaded.faces) == mesh.faces.shape[1]


def test_single_view_maps():
    mesh, _ = sphere_mesh()
    normal, depth, position, mask, face_id, raster = MeshRasterizer.run(width=64, height=48, azimuth=0, elevation=0,
                                                                        mesh=mesh)
    assert normal.shape == (1, 48, 64, 3) and mask.shape == (1, 48, 64)
    assert normal[0, 0, 0].tolist() == [0.5, 0.5, 1.0]  # background #8080FF
    centre = normal[0, 24, 32]
    assert torch.allclose(centre, torch.tensor([0.5, 0.5, 1.0]), atol=0.05)  # the sphere faces the camera
    assert normal[0, 24, 12:20, 0].max() < 0.5 < normal[0, 24, 44:52, 0].min()  # left side points left
    assert normal[0, 4:14, 32, 1].min() > 0.5  # top points up: images are upright
    assert depth[0, 24, 32, 0] > 0.95 and depth[0, 0, 0].sum() == 0  # nearest is white, background black
    assert mask.sum() > 0 and torch.equal(mask[0] > 0, raster["findices"][0] > 0)
    assert face_id[0, 0, 0].sum() == 0 and face_id[0, 24, 32].sum() > 0
    assert position.min() >= 0 and position.max() <= 1


def test_six_views_and_trimesh_input():
    _, sphere = sphere_mesh()
    outputs = MeshRasterizer.run(width=32, height=32, views="six", projection="orthographic", trimesh=sphere)
    assert outputs[0].shape == (6, 32, 32, 3) and outputs[5]["findices"].shape == (6, 32, 32)
    assert all(outputs[3][b].sum() > 100 for b in range(6))


@pytest.mark.parametrize("kw,message", [
    (dict(), "mesh: connect a MESH or a TRIMESH"),
    (dict(mesh=Mesh(torch.zeros(1, 0, 3), torch.zeros(1, 0, 3))), "mesh: vertices should be"),
    (dict(mesh=Mesh(torch.rand(1, 4, 3), torch.tensor([[[0, 1, 9]]]))), r"mesh: face indices must lie in 0..3"),
    (dict(mesh=Mesh(torch.full((1, 3, 3), float("nan")), torch.tensor([[[0, 1, 2]]]))), "mesh: vertices contain NaN"),
    (dict(mesh=Mesh(torch.rand(1, 4, 3), torch.tensor([[[0, 1, 2, 3]]]))), r"mesh: faces should be triangles"),
    (dict(mesh="cube"), "mesh: expected MESH"),
])
def test_bad_meshes(kw, message):
    with pytest.raises(ValueError, match=message):
        MeshRasterizer.run(width=16, height=16, **kw)


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="mesh_file: no file"):
        LoadMesh.run("missing.obj")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ValueError, match="mesh_file: .* is not one of"):
        LoadMesh.run(str(text))
    broken = tmp_path / "broken.obj"
    broken.write_text("v 0 0 0\n")
    with pytest.raises(ValueError, match="mesh_file: .*(no triangles|could not read)"):
        LoadMesh.run(str(broken))
