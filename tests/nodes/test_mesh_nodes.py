"""LoadMesh and MeshRasterizer: maps, layouts and bad input."""

from pathlib import Path

import pytest
import torch

from rasterkit.nodes import mesh as mesh_nodes
from rasterkit.nodes.mesh import LoadMesh, Mesh, MeshRasterizer
from rasterkit.utils.inputs import mesh_files
from rasterkit.utils.inputs.mesh import mesh_tensors

ASSET = Path(__file__).resolve().parents[2] / "example_workflows" / "assets" / "rasterkit_torus.obj"


def sphere_mesh():
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=3)
    return Mesh(torch.tensor(sphere.vertices, dtype=torch.float32)[None], torch.tensor(sphere.faces)[None]), sphere


def test_load_mesh_normalises_into_the_unit_cube():
    mesh, loaded = LoadMesh.run(ASSET.name)
    assert mesh.vertices.shape[0] == 1 and mesh.faces.shape[-1] == 3
    assert mesh.vertices.abs().max() == pytest.approx(1.0, abs=1e-5)
    assert len(loaded.faces) == mesh.faces.shape[1]


def test_load_mesh_reads_the_bundled_textured_glb():
    """spot.glb (the baking example's mesh): UVs per vertex and its base-colour texture come through."""
    mesh, _ = LoadMesh.run("spot.glb")
    vertices = mesh.vertices.shape[1]
    assert mesh.uvs.shape == (1, vertices, 2) and mesh.normals is None  # the file has none: the nodes make them
    assert mesh.texture.shape == (1, 1024, 1024, 3) and 0 <= mesh.texture.min() < mesh.texture.max() <= 1


def test_single_view_maps():
    mesh, _ = sphere_mesh()
    normal, depth, position, mask, face_id, raster, *_ = MeshRasterizer.run(
        width=64, height=48, azimuth=0, elevation=0, distance=3.0, mesh=mesh
    )
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


def test_six_views_are_the_standard_texture_baking_views_unless_turned():
    """Saved workflows (azimuth 30, elevation 20 by default) keep the standard six views; the rig turns
    only with turn_six_views, and at 0, 0 it is the standard rig."""
    mesh, _ = sphere_mesh()
    standard = mesh_nodes.M.orbit_cameras(
        [a for a, _ in mesh_nodes.M.STANDARD_VIEWS], [e for _, e in mesh_nodes.M.STANDARD_VIEWS], 5.5
    )
    for kw in (dict(), dict(azimuth=0.0, elevation=0.0, turn_six_views=True)):
        raster = MeshRasterizer.run(width=16, height=16, views="six", mesh=mesh, **kw)[5]
        assert torch.equal(raster["view"], standard)


def test_azimuth_and_elevation_turn_the_six_view_rig():
    """The turned rig's front view is the single view at the same angles, and the rig renders the model
    turned the other way as the standard rig does (face ids compared: a turn of a symmetric mesh shows)."""
    mesh, _ = sphere_mesh()
    turned = MeshRasterizer.run(
        width=48, height=48, views="six", azimuth=30.0, elevation=20.0, turn_six_views=True, mesh=mesh
    )
    single = MeshRasterizer.run(width=48, height=48, views="single", azimuth=30.0, elevation=20.0, mesh=mesh)
    assert torch.equal(turned[5]["findices"][0], single[5]["findices"][0])
    assert not torch.equal(
        turned[5]["findices"],
        MeshRasterizer.run(width=48, height=48, views="six", azimuth=0.0, elevation=0.0, mesh=mesh)[5]["findices"],
    )
    rotation = single[5]["view"][0, :3, :3]
    model_turned = Mesh(mesh.vertices @ rotation.T, mesh.faces)
    standard = MeshRasterizer.run(width=48, height=48, views="six", azimuth=0.0, elevation=0.0, mesh=model_turned)
    agree = (turned[5]["findices"] == standard[5]["findices"]).float().mean()
    assert agree > 0.995  # float32 rounding moves a few edge pixels


def test_elevation_minus_90_stands_a_z_up_mesh_upright_in_the_six_views():
    import trimesh

    tall = trimesh.creation.box(extents=(0.4, 0.4, 1.6))  # z-up: tallest along z
    mask = MeshRasterizer.run(
        width=64,
        height=64,
        views="six",
        azimuth=0.0,
        elevation=-90.0,
        turn_six_views=True,
        projection="orthographic",
        trimesh=tall,
    )[3]
    for front_right_back_left in mask[:4]:
        rows, columns = front_right_back_left.any(1).sum(), front_right_back_left.any(0).sum()
        assert rows > 2 * columns  # standing: taller than wide
    assert mask[4].any(1).sum() == mask[4].any(0).sum()  # from above: the square footprint


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(), "mesh: connect a MESH or a TRIMESH"),
        (dict(mesh=Mesh(torch.zeros(1, 0, 3), torch.zeros(1, 0, 3))), "mesh: vertices should be"),
        (dict(mesh=Mesh(torch.rand(1, 4, 3), torch.tensor([[[0, 1, 9]]]))), r"mesh: face indices must lie in 0..3"),
        (
            dict(mesh=Mesh(torch.full((1, 3, 3), float("nan")), torch.tensor([[[0, 1, 2]]]))),
            "mesh: vertices contain NaN",
        ),
        (dict(mesh=Mesh(torch.rand(1, 4, 3), torch.tensor([[[0, 1, 2, 3]]]))), r"mesh: faces should be triangles"),
        (dict(mesh="cube"), "mesh: expected a MESH"),
    ],
)
def test_bad_meshes(kw, message):
    with pytest.raises(ValueError, match=message):
        MeshRasterizer.run(width=16, height=16, **kw)


@pytest.fixture
def input_folder(tmp_path, monkeypatch):
    """A ComfyUI input folder (tmp_path/input) with a mesh, a subfolder and, beside it, a secret mesh."""
    folder = tmp_path / "input"
    (folder / "3d").mkdir(parents=True)
    (folder / "3d" / "cube.obj").write_bytes(ASSET.read_bytes())
    (tmp_path / "secret.obj").write_bytes(ASSET.read_bytes())
    monkeypatch.setattr(mesh_nodes, "input_directory", lambda: str(folder))
    return folder


def test_bad_files(input_folder):
    with pytest.raises(ValueError, match="mesh_file: no mesh file 'missing.obj' in ComfyUI's input folder"):
        LoadMesh.run("missing.obj")
    (input_folder / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="mesh_file: 'notes.txt' is not one of"):
        LoadMesh.run("notes.txt")
    (input_folder / "broken.obj").write_text("v 0 0 0\n")
    with pytest.raises(ValueError, match="mesh_file: .*(no triangles|could not read)"):
        LoadMesh.run("broken.obj")


def test_meshes_listed_from_the_input_folder_and_its_subfolders(input_folder):
    (input_folder / "notes.txt").write_text("hello")
    files = mesh_nodes.mesh_files()
    assert files[0] == "3d/cube.obj" and ASSET.name in files and "notes.txt" not in files
    assert "secret.obj" not in " ".join(files)
    assert LoadMesh.run("3d/cube.obj")[0].faces.shape[1] > 0
    assert {"required": ["mesh_file", "normalize"]} == {k: list(v) for k, v in LoadMesh.INPUT_TYPES().items()}
    assert "3d/cube.obj" in LoadMesh.INPUT_TYPES()["required"]["mesh_file"][0]


def test_nothing_outside_the_input_folder_is_read(input_folder, tmp_path):
    """Absolute paths, .. and symlinks out of the folder all give the error a missing file gives, which
    names the input only as typed: no way to tell an existing outside file from a missing one."""
    os_link = input_folder / "3d" / "link.obj"
    os_link.symlink_to(tmp_path / "secret.obj")
    (input_folder / "escape").symlink_to(tmp_path, target_is_directory=True)
    outside = [
        str(tmp_path / "secret.obj"),
        "../secret.obj",
        "3d/../../secret.obj",
        "3d/link.obj",
        "escape/secret.obj",
        str(tmp_path / "missing.obj"),
        "../missing.obj",
        "a\0b.obj",
    ]
    messages = set()
    for name in outside:
        with pytest.raises(ValueError, match="mesh_file: no mesh file") as error:
            LoadMesh.run(name)
        assert str(input_folder) not in str(error.value)
        messages.add(str(error.value).replace(repr(name), "NAME"))
    assert len(messages) == 1
    assert "3d/link.obj" not in mesh_nodes.mesh_files() and not any("escape" in f for f in mesh_nodes.mesh_files())


def test_gltf_buffers_outside_its_folder_are_not_read(input_folder, tmp_path):
    import json

    import trimesh

    files = trimesh.exchange.gltf.export_gltf(trimesh.Scene(trimesh.creation.box()))
    document = json.loads(files.pop("model.gltf"))
    for name, data in files.items():  # the buffers beside the file: it loads
        (input_folder / "3d" / name).write_bytes(data)
    (input_folder / "3d" / "box.gltf").write_text(json.dumps(document))
    assert LoadMesh.run("3d/box.gltf")[0].faces.shape[1] == 12
    for buffer in document["buffers"]:  # the buffers outside the input folder only: refused
        (input_folder / "3d" / buffer["uri"]).unlink()
        (tmp_path / buffer["uri"]).write_bytes(files[buffer["uri"]])
        buffer["uri"] = "../../" + buffer["uri"]
    (input_folder / "3d" / "thief.gltf").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="mesh_file: could not read '3d/thief.gltf'") as error:
        LoadMesh.run("3d/thief.gltf")
    assert str(tmp_path) not in str(error.value)


def test_an_edited_file_changes_the_fingerprint(input_folder):
    before = LoadMesh.fingerprint("3d/cube.obj")
    assert before and LoadMesh.IS_CHANGED("3d/cube.obj") == before
    with open(input_folder / "3d" / "cube.obj", "a") as file:
        file.write("\n# edited\n")
    assert LoadMesh.fingerprint("3d/cube.obj") != before
    assert LoadMesh.fingerprint("../secret.obj") == LoadMesh.fingerprint("missing.obj") == ""


def test_a_render_that_cannot_fit_is_refused_before_allocating(monkeypatch):
    from rasterkit.utils.core import device

    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 2 << 30)
    mesh, _ = sphere_mesh()
    with pytest.raises(
        ValueError,
        match=r"^width x height x views \(8192 x 8192 x 6\) with a mesh of 642 vertices "
        r"and 1,280 triangles needs ~\d+\.\d+ GB; this machine has 2.1 GB free",
    ):
        MeshRasterizer.run(width=8192, height=8192, views="six", mesh=mesh)


def test_views_render_in_chunks_with_an_interrupt_check_between_them(monkeypatch):
    from rasterkit.nodes import _comfy
    from rasterkit.nodes import mesh as mesh_module

    checks = []
    monkeypatch.setattr(_comfy, "check_interrupt", lambda: checks.append(1))
    monkeypatch.setattr(mesh_module, "CHUNK_WORK", 2 * (64 * 64 + 642 + 1280))  # two views a chunk
    mesh, _ = sphere_mesh()
    chunked = MeshRasterizer.run(width=64, height=64, views="six", mesh=mesh)
    monkeypatch.setattr(mesh_module, "CHUNK_WORK", 1 << 30)
    whole = MeshRasterizer.run(width=64, height=64, views="six", mesh=mesh)
    assert len(checks) == 3 + 1
    for a, b in zip(chunked[:5], whole[:5], strict=False):
        assert torch.equal(a, b)
    assert torch.equal(chunked[5]["findices"], whole[5]["findices"])


def test_comfyui_3d_packs_mesh_is_accepted():
    import types

    mesh, _ = sphere_mesh()
    three_d_pack = types.SimpleNamespace(v=mesh.vertices[0], f=mesh.faces[0].int())
    ours = MeshRasterizer.run(width=32, height=32, mesh=mesh)
    theirs = MeshRasterizer.run(width=32, height=32, mesh=three_d_pack)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[5]["findices"], theirs[5]["findices"])


def test_core_mesh_with_its_newer_optional_fields_is_accepted():
    """Core MESH objects that also carry uvs, texture, vertex colours and normals render their geometry
    (the extra fields are not drawn by these maps)."""
    import types

    mesh, _ = sphere_mesh()
    vertices = mesh.vertices
    richer = types.SimpleNamespace(
        vertices=vertices,
        faces=mesh.faces.int(),
        uvs=torch.rand(1, vertices.shape[1], 2),
        texture=torch.rand(1, 8, 8, 3),
        vertex_colors=torch.rand(1, vertices.shape[1], 3),
        normals=torch.nn.functional.normalize(vertices, dim=-1),
    )
    plain = MeshRasterizer.run(width=32, height=32, mesh=mesh)
    rich = MeshRasterizer.run(width=32, height=32, mesh=richer, normal_smoothing="by_position")
    assert torch.equal(plain[0], rich[0]) and torch.equal(plain[5]["findices"], rich[5]["findices"])
    # auto takes the mesh's own normals where it has them
    given = MeshRasterizer.run(width=32, height=32, mesh=richer, normal_smoothing="from_file")
    assert torch.equal(MeshRasterizer.run(width=32, height=32, mesh=richer)[0], given[0])
    assert not torch.equal(given[0], plain[0])


# -- the optional MESH fields: UVs, texture, vertex colours, normals ---------------------------------------

# a quad whose second triangle takes other UVs at the shared corners 1 and 3: a seam
SEAM_OBJ = """mtllib {mtl}
v -1 -1 0
v 1 -1 0
v 1 1 0
v -1 1 0
vt 0 0
vt 0.5 0
vt 0.5 1
vt 0 1
vt 1 0
vt 1 1
usemtl skin
f 1/1 2/2 3/3
f 1/5 3/6 4/4
"""
FILE_CORNERS = [
    [[-1, -1, 0, 0, 0], [1, -1, 0, 0.5, 0], [1, 1, 0, 0.5, 1]],
    [[-1, -1, 0, 1, 0], [1, 1, 0, 1, 1], [-1, 1, 0, 0, 1]],
]


def write_textured_obj(folder, name="quad", texture="skin.png"):
    import numpy as np
    from PIL import Image

    pixels = np.arange(4 * 4 * 3, dtype=np.uint8).reshape(4, 4, 3) * 5
    Image.fromarray(pixels).save(folder / "skin.png")
    (folder / f"{name}.mtl").write_text(f"newmtl skin\nKd 1 1 1\nmap_Kd {texture}\n")
    (folder / f"{name}.obj").write_text(SEAM_OBJ.format(mtl=f"{name}.mtl"))
    return torch.from_numpy(pixels).float() / 255


def test_a_textured_obj_keeps_its_uvs_texture_and_seams(input_folder):
    texture = write_textured_obj(input_folder / "3d")
    mesh, loaded = LoadMesh.run("3d/quad.obj", normalize=False)
    assert mesh.uvs.shape == (1, mesh.vertices.shape[1], 2) and mesh.vertices.shape[1] > 4  # split at the seam
    corners = torch.cat([mesh.vertices[0], mesh.uvs[0]], -1)[mesh.faces[0]]
    assert torch.equal(corners, torch.tensor(FILE_CORNERS))  # every face corner keeps its position and UV
    assert torch.equal(mesh.texture[0], texture) and mesh.colors is None
    assert mesh.normals is None  # the file has none (trimesh's own, made per split vertex, are not taken)
    normalized, loaded = LoadMesh.run("3d/quad.obj")
    assert torch.equal(normalized.uvs, mesh.uvs) and torch.equal(normalized.texture, mesh.texture)
    assert loaded.visual.kind == "texture"  # the TRIMESH output keeps them too


def test_a_textured_glb_and_a_ply_with_vertex_colours(input_folder):
    import trimesh

    texture = write_textured_obj(input_folder / "3d")
    obj = LoadMesh.run("3d/quad.obj", normalize=False)[0]
    glb = trimesh.load(input_folder / "3d" / "quad.obj", force="mesh", process=False).export(file_type="glb")
    (input_folder / "3d" / "quad.glb").write_bytes(glb)
    mesh = LoadMesh.run("3d/quad.glb", normalize=False)[0]
    corners = torch.cat([mesh.vertices[0], mesh.uvs[0]], -1)[mesh.faces[0]]
    assert torch.equal(corners, torch.cat([obj.vertices[0], obj.uvs[0]], -1)[obj.faces[0]])
    assert torch.equal(mesh.texture[0], texture)
    box = trimesh.creation.box()
    colours = torch.randint(0, 256, (8, 4), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    box.visual.vertex_colors = colours.numpy()
    (input_folder / "3d" / "box.ply").write_bytes(box.export(file_type="ply"))
    mesh = LoadMesh.run("3d/box.ply", normalize=False)[0]
    # the file's sRGB colours, held linear as core's MESH holds them (under both of core's names)
    assert torch.allclose(mesh.colors[0], (colours[:, :3].float() / 255) ** 2.2)
    assert mesh.vertex_colors is mesh.colors and mesh.uvs is None and mesh.texture is None


@pytest.mark.parametrize("texture", ["../../secret.png", "SECRET_ABSOLUTE", "link.png"])
def test_a_texture_outside_the_input_folder_is_not_read(input_folder, tmp_path, texture):
    """An MTL may name a texture outside the folder (relative, absolute or through a link): the mesh
    loads without it."""
    write_textured_obj(input_folder / "3d")
    (tmp_path / "secret.png").write_bytes((input_folder / "3d" / "skin.png").read_bytes())
    (input_folder / "3d" / "link.png").symlink_to(tmp_path / "secret.png")
    write_textured_obj(input_folder / "3d", "thief", texture.replace("SECRET_ABSOLUTE", str(tmp_path / "secret.png")))
    (input_folder / "3d" / "skin.png").unlink()  # the fallback to a name beside the mesh finds nothing either
    mesh = LoadMesh.run("3d/thief.obj")[0]
    assert mesh.texture is None and mesh.faces.shape[1] == 2


def test_mesh_fields_in_and_out():
    """make_mesh carries the fields; MeshRasterizer reads them from a batch cut to its counts, and
    refuses fields that do not fit the vertices."""
    mesh, _ = sphere_mesh()
    count = mesh.vertices.shape[1]
    padded = mesh_nodes.make_mesh(
        torch.cat([mesh.vertices, torch.zeros(1, 5, 3)], 1),
        torch.cat([mesh.faces, torch.zeros(1, 2, 3, dtype=torch.long)], 1),
        uvs=torch.rand(1, count + 5, 2),
        colors=torch.rand(1, count + 5, 4),
        vertex_counts=torch.tensor([count]),
        face_counts=torch.tensor([mesh.faces.shape[1]]),
    )
    vertices, faces, fields = mesh_tensors(padded, None)
    assert torch.equal(vertices, mesh.vertices[0]) and torch.equal(faces, mesh.faces[0])
    assert fields["uvs"].shape == (count, 2) and fields["colors"].shape == (count, 3)
    bad = mesh_nodes.make_mesh(mesh.vertices, mesh.faces, uvs=torch.rand(1, 3, 2))
    with pytest.raises(ValueError, match=rf"mesh: uvs should be \[{count},2\] \(one per vertex\), got shape \(3, 2\)"):
        MeshRasterizer.run(width=16, height=16, mesh=bad)


# -- issue 29: bad input named, nothing dropped silently, jobs bounded and stoppable -------------------------


@pytest.mark.parametrize("name", [123, None, True, {"__value__": ["a.obj"]}, ["rasterkit_torus.obj"]])
def test_a_mesh_file_that_is_not_text_is_named(name):
    with pytest.raises(ValueError, match="^mesh_file: expected a file name \\(text\\), got "):
        LoadMesh.execute(mesh_file=name)
    with pytest.raises(ValueError, match="^mesh_file: expected a file name"):
        mesh_nodes.resolve_mesh_file(name)
    assert LoadMesh.fingerprint(name) == ""


def test_only_regular_files_are_listed(input_folder):
    import os

    os.mkfifo(input_folder / "3d" / "pipe.obj")
    assert "3d/pipe.obj" not in mesh_nodes.mesh_files() and "3d/cube.obj" in mesh_nodes.mesh_files()
    with pytest.raises(ValueError, match="^mesh_file: no mesh file '3d/pipe.obj'"):
        LoadMesh.run("3d/pipe.obj")


@pytest.mark.parametrize(
    "name,data",
    [
        ("truncated.glb", b'glTF\x02\x00\x00\x00\xff\x00\x00\x00{"asset"'),
        ("notjson.gltf", b"{this is not json"),
        ("garbage.stl", b"solid x\nfacet normal 0 0 1\nouter loop\nvertex a b c\n"),
        (
            "badheader.ply",
            b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nend_header\n\x00",
        ),
        ("indices.off", b"OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n"),
    ],
)
def test_an_unreadable_file_is_named_with_the_reason_and_no_path(input_folder, name, data):
    (input_folder / name).write_bytes(data)
    with pytest.raises(
        ValueError, match=f"^mesh_file: (could not read '{name}': \\w+(Error|Exception)?\\b.|'{name}' has no triangles)"
    ) as error:
        LoadMesh.run(name)
    message = str(error.value)
    assert str(input_folder) not in message and "/tmp" not in message
    if "could not read" in message:  # the type and what it says, not the type alone
        assert len(message.split(": ", 2)[2]) > len(message.split(": ", 2)[2].split(":")[0])


def test_textures_and_meshes_are_checked_by_their_declared_sizes_before_decoding(input_folder, monkeypatch):
    import trimesh

    from rasterkit.utils.core import device

    write_textured_obj(input_folder / "3d")
    (input_folder / "3d" / "quad.glb").write_bytes(
        trimesh.load(input_folder / "3d" / "quad.obj", force="mesh", process=False).export(file_type="glb")
    )
    monkeypatch.setattr(trimesh, "load", lambda *a, **k: pytest.fail("decoded before the check"))
    monkeypatch.setattr(mesh_files, "MAX_TEXTURE_PIXELS", 15)
    for name in ("3d/quad.obj", "3d/quad.glb"):
        with pytest.raises(ValueError, match=f"^mesh_file: '{name}' has a 4x4 texture; textures of up to 15 texels"):
            LoadMesh.run(name)
    monkeypatch.setattr(mesh_files, "MAX_TEXTURE_PIXELS", 8192 * 8192)
    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 1000)
    with pytest.raises(
        ValueError,
        match=r"^mesh_file: '3d/quad.glb' \(\d+ vertices, 2 triangles, 1 textures\) "
        r"needs ~0\.0\d* GB",
    ):
        LoadMesh.run("3d/quad.glb")


def test_declared_counts_of_every_format(tmp_path):
    import trimesh

    from rasterkit.utils.inputs.mesh_files import declared

    box = trimesh.creation.box()
    for extension in ("obj", "glb", "ply", "stl", "off"):
        box.export(str(tmp_path / f"box.{extension}"))
        counts = declared(str(tmp_path / f"box.{extension}"))
        assert counts.faces == 12 and counts.vertices == (36 if extension == "stl" else 8), extension
    scene = trimesh.Scene()
    for offset in range(3):  # one mesh placed three times: three copies once loaded
        scene.add_geometry(
            box,
            node_name=f"n{offset}",
            geom_name="box",
            transform=trimesh.transformations.translation_matrix([offset, 0, 0]),
        )
    scene.export(str(tmp_path / "three.glb"))
    assert declared(str(tmp_path / "three.glb")).faces == 36


@pytest.mark.parametrize(
    "faces,message",
    [
        (torch.tensor([[[0.0, 1.5, 2.0]]]), r"^mesh: faces should be whole vertex indices, got 1.5 \(torch.float32\)"),
        (torch.tensor([[[0.0, float("nan"), 2.0]]]), r"^mesh: faces should be whole vertex indices, got nan"),
        (torch.tensor([[[True, False, True]]]), r"^mesh: faces should be whole vertex indices, got dtype torch.bool"),
    ],
)
def test_faces_that_are_not_whole_indices_are_named(faces, message):
    mesh = Mesh(torch.rand(1, 4, 3), faces)
    with pytest.raises(ValueError, match=message):
        MeshRasterizer.execute(width=16, height=16, mesh=mesh)


def test_whole_float_and_any_integer_face_indices_render_alike():
    mesh, _ = sphere_mesh()
    reference = MeshRasterizer.run(width=32, height=32, mesh=mesh)[5]["findices"]
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int16):
        findices = MeshRasterizer.run(width=32, height=32, mesh=Mesh(mesh.vertices, mesh.faces.to(dtype)))[5]
        assert torch.equal(findices["findices"], reference), dtype


def test_vertices_beyond_float32_safe_range_are_named_as_such():
    for largest in (3e38, 1e300):  # float32's range, and past it in float64
        far = Mesh(
            torch.tensor([[[0.0, 0, 0], [1, 0, 0], [largest, 1, 0]]], dtype=torch.float64), torch.tensor([[[0, 1, 2]]])
        )
        with pytest.raises(
            ValueError,
            match=rf"^mesh: vertices are finite but reach {largest:.0e}".replace("+", r"\+")
            + r", beyond what float32 rendering can take; coordinates up to 1e\+18 are accepted",
        ):
            MeshRasterizer.execute(width=16, height=16, mesh=far)
    nan = Mesh(torch.tensor([[[0.0, 0, 0], [1, 0, 0], [float("nan"), 1, 0]]]), torch.tensor([[[0, 1, 2]]]))
    with pytest.raises(ValueError, match="^mesh: vertices contain NaN or infinite values"):
        MeshRasterizer.execute(width=16, height=16, mesh=nan)


def test_a_camera_too_far_away_is_named():
    mesh, _ = sphere_mesh()
    info = {"position": {"x": 0, "y": 0, "z": 1e30}, "target": {"x": 0, "y": 0, "z": 0}}
    with pytest.raises(
        ValueError,
        match=r"^camera_info: the camera's position or target lies 1e\+30 from the "
        r"origin; up to 1000 \(the distance input's range\) is accepted",
    ):
        MeshRasterizer.execute(width=16, height=16, mesh=mesh, camera_info=info)


def test_view_list_has_a_length_limit():
    mesh, _ = sphere_mesh()
    with pytest.raises(ValueError, match=r"^view_list: more than 4,096 views; at most 4,096"):
        MeshRasterizer.execute(width=16, height=16, mesh=mesh, views="list", view_list="0,0;" * 1_000_000)


def test_many_faces_in_small_views_are_counted_in_the_estimate(monkeypatch):
    from rasterkit.utils.core import device

    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 200 << 20)
    many = Mesh(torch.rand(1, 3, 3), torch.tensor([0, 1, 2]).expand(1, 1_000_000, 3))
    with pytest.raises(
        ValueError,
        match=r"^width x height x views \(16 x 16 x 1\) with a mesh of 3 vertices and "
        r"1,000,000 triangles needs ~0\.\d+ GB; this machine has 0.2 GB free",
    ):
        MeshRasterizer.execute(width=16, height=16, mesh=many)


class Interrupted(Exception):
    pass


def test_many_small_views_stop_soon_after_an_interrupt(monkeypatch):
    """2,000 views of 16x16 of a 20K-triangle mesh (~100 s of work on a 2-core CPU) were one chunk: the
    first interrupt check now comes after a chunk of two views."""
    import time

    import trimesh

    from rasterkit.nodes import _comfy

    rendered = []
    maps = mesh_nodes.M.render_maps
    monkeypatch.setattr(
        mesh_nodes.M, "render_maps", lambda clip, *rest: rendered.append(len(clip)) or maps(clip, *rest)
    )

    def interrupt():
        raise Interrupted

    monkeypatch.setattr(_comfy, "check_interrupt", interrupt)
    sphere = trimesh.creation.icosphere(subdivisions=5)
    mesh = Mesh(torch.tensor(sphere.vertices, dtype=torch.float32)[None], torch.tensor(sphere.faces)[None])
    start = time.perf_counter()
    with pytest.raises(Interrupted):
        MeshRasterizer.run(
            width=16, height=16, views="list", view_list="; ".join(f"{i},0" for i in range(2000)), mesh=mesh
        )
    assert rendered == [2] and time.perf_counter() - start < 5.0


# -- issue 33: normals across seams ------------------------------------------------------------------------


def uv_split_sphere():
    """An icosphere cut open along a UV seam (longitude +-180 degrees): faces that wrap around take copies
    of their corners west of the seam (the same positions, other UVs, as a file's split vertices).
    vertices [V,3], faces [F,3], uvs [V,2] (the west copies beyond the east ones) and bool [F]: the
    faces that took copies (the seam runs between them and the others)."""
    import math

    import trimesh

    ball = trimesh.creation.icosphere(subdivisions=3)
    vertices, faces = torch.tensor(ball.vertices, dtype=torch.float32), torch.tensor(ball.faces)
    longitude = torch.atan2(vertices[:, 0], vertices[:, 2])
    corner = longitude[faces]
    wrapped = corner.amax(1) - corner.amin(1) > math.pi
    west = wrapped[:, None] & (corner < 0)
    copied = faces[west].unique()
    copy_of = torch.zeros(len(vertices), dtype=torch.long)
    copy_of[copied] = len(vertices) + torch.arange(len(copied))
    split = torch.where(west, copy_of[faces], faces)
    latitude = torch.asin(vertices[:, 1].clamp(-1, 1))
    uvs = torch.stack([(longitude + math.pi) / (4 * math.pi) + 0.25, latitude / math.pi + 0.5], -1)
    uvs = torch.cat([uvs, uvs[copied] + torch.tensor([0.5, 0.0])])
    return torch.cat([vertices, vertices[copied]]), split, uvs, wrapped


def steps_across(normal, findices, seam_faces, dim):
    """The angles in degrees between neighbouring pixels along dim (1 rows, 2 columns) of normal maps
    [1,H,W,3] well inside the mesh (facing the camera: n.z > 0.7), across the seam and elsewhere."""
    n = torch.nn.functional.normalize(normal[0] * 2 - 1, dim=-1)
    side = torch.cat([torch.tensor([False]), seam_faces])[findices[0].long()]
    count = n.shape[dim - 1]
    a, b = n.narrow(dim - 1, 0, count - 1), n.narrow(dim - 1, 1, count - 1)
    inside = (findices[0] > 0) & (n[..., 2] > 0.7)
    inside = inside.narrow(dim - 1, 0, count - 1) & inside.narrow(dim - 1, 1, count - 1)
    seam = inside & (side.narrow(dim - 1, 0, count - 1) != side.narrow(dim - 1, 1, count - 1))
    angle = torch.rad2deg(torch.acos((a * b).sum(-1).clamp(-1, 1)))
    return angle[seam], angle[inside & ~seam]


@pytest.mark.parametrize("azimuth, elevation", [(180, 0), (150, -30)])
def test_a_uv_split_sphere_shows_no_seam_in_its_normal_map(azimuth, elevation):
    """Vertices split at a UV seam are welded by position: the normal map's step between neighbouring
    pixels across the seam stays under a degree and no larger than elsewhere; by vertex shows the seam."""
    vertices, faces, uvs, seam_faces = uv_split_sphere()
    mesh = Mesh(vertices[None], faces[None], uvs=uvs[None])
    for smoothing in ("auto", "by_vertex"):
        normal, *_, raster, _, _ = MeshRasterizer.run(
            width=512,
            height=512,
            azimuth=azimuth,
            elevation=elevation,
            distance=3.0,  # the sphere filling the frame: the seam over many pixels
            mesh=mesh,
            normal_smoothing=smoothing,
        )
        for dim in (1, 2):
            across, elsewhere = steps_across(normal, raster["findices"], seam_faces, dim)
            assert len(across) > 100
            if smoothing == "auto":
                assert across.max() < 1.0 and across.max() <= elsewhere.max(), (dim, across.max(), elsewhere.max())
            else:
                assert across.max() > 5.0, (dim, across.max())


def test_a_split_cube_keeps_its_hard_edges_in_the_normal_map():
    """A cube whose sides have their own vertices: every pixel's normal is its side's, within a degree,
    under auto and flat alike."""
    import trimesh

    cube = trimesh.creation.box(extents=(1.6, 1.6, 1.6))
    vertices = torch.tensor(cube.vertices, dtype=torch.float32)[torch.tensor(cube.faces)].reshape(-1, 3)
    faces = torch.arange(len(vertices)).view(-1, 3)
    sides = torch.tensor(cube.face_normals, dtype=torch.float32)
    for smoothing in ("auto", "flat"):
        normal, *_, raster, _, _ = MeshRasterizer.run(
            width=128,
            height=128,
            mesh=Mesh(vertices[None], faces[None]),
            normal_space="world",
            normal_smoothing=smoothing,
        )
        findices = raster["findices"][0].long()
        covered = findices > 0
        n = torch.nn.functional.normalize(normal[0][covered] * 2 - 1, dim=-1)
        angle = torch.rad2deg(torch.acos((n * sides[findices[covered] - 1]).sum(-1).clamp(-1, 1)))
        assert covered.sum() > 1000 and angle.max() < 1.0, smoothing


def test_from_file_normals_are_the_meshs():
    mesh, _ = sphere_mesh()
    up = torch.tensor([0.0, 1.0, 0.0]).expand_as(mesh.vertices)
    mesh.normals = up
    for smoothing in ("auto", "from_file"):
        normal, _, _, mask, *_ = MeshRasterizer.run(
            width=32, height=32, mesh=mesh, normal_space="world", normal_smoothing=smoothing
        )
        assert torch.allclose(normal[0][mask[0] > 0], torch.tensor([0.5, 1.0, 0.5]))
    mesh.normals = None
    with pytest.raises(ValueError, match="^normal_smoothing: from_file needs a mesh with normals"):
        MeshRasterizer.run(width=32, height=32, mesh=mesh, normal_smoothing="from_file")


def test_uv_maps_normals_are_smooth_across_seams():
    """UV Maps' normal map of the split sphere: within a degree of the sphere's true normal everywhere
    (by_vertex leaves the seam's texels several degrees off)."""
    from rasterkit.nodes.bake import UVMaps

    vertices, faces, uvs, _ = uv_split_sphere()
    mesh = Mesh(vertices[None], faces[None], uvs=uvs[None])
    low, high = vertices.amin(0), vertices.amax(0)
    for smoothing, bound in (("auto", (0, 1)), ("by_vertex", (3, 180))):
        position, normal, mask = UVMaps.run(mesh, texture_size=128, dilation=0, normal_smoothing=smoothing)
        covered = mask[0] > 0
        true = torch.nn.functional.normalize((low + position[0] * (high - low))[covered], dim=-1)
        n = torch.nn.functional.normalize(normal[0][covered] * 2 - 1, dim=-1)
        worst = torch.rad2deg(torch.acos((n * true).sum(-1).clamp(-1, 1))).max()
        assert bound[0] < worst < bound[1], (smoothing, worst)


def test_a_files_normals_are_loaded_and_others_are_not_made_up(input_folder):
    (input_folder / "3d" / "tilted.obj").write_text(
        "v 0 0 0\nv 1 0 0\nv 0 1 0\nvn 1 0 0\nvn 0 1 0\nvn 0 0 1\nf 1//1 2//2 3//3\n"
    )
    for normalize in (False, True):
        mesh, loaded = LoadMesh.run("3d/tilted.obj", normalize=normalize)
        assert torch.equal(mesh.normals[0], torch.eye(3)) and loaded.vertex_normals.tolist() == torch.eye(3).tolist()
    assert LoadMesh.run("3d/cube.obj")[0].normals is None
