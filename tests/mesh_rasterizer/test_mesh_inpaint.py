"""utils/mesh_inpaint (Hunyuan3D-2.1's mesh_inpaint_processor stand-in) against a plain-Python
transcription of that extension's documented behaviour (one vertex at a time), on the inputs its
MeshRender.uv_inpaint passes (float32 texture [H,W,3] in 0..1, uint8 mask 0/255, float32 positions and
UVs, int32 index arrays with UV seams); its registration; and Bake Texture's inpaint option on a cube
that one view sees one face of."""

import importlib
import sys

import numpy as np
import pytest
import torch
import trimesh

from rasterkit.utils.mesh_rasterizer import inpaint as MI


def reference(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx, method):
    """Colours, states (1 seen, 2 filled) and the output texture and mask, vertex by vertex."""
    height, width, channels = texture.shape
    count = len(vtx_pos)
    colour, state, listed = np.zeros((count, channels), np.float32), np.zeros(count, int), []
    texel = {}
    for face in range(len(pos_idx)):
        for k in range(3):
            u, v = vtx_uv[uv_idx[face, k]]
            row, column = int(np.floor((1 - v) * (height - 1) + 0.5)), int(np.floor(u * (width - 1) + 0.5))
            texel[face, k] = row, column
            vertex = pos_idx[face, k]
            if mask[row, column] > 0:
                state[vertex], colour[vertex] = 1, texture[row, column]
            else:
                listed.append(vertex)
    graph = [[] for _ in range(count)]
    for face in pos_idx:
        for k in range(3):
            graph[face[k]].append(face[(k + 1) % 3])

    def weight(a, b):
        return np.float32(1 / max(np.linalg.norm(vtx_pos[a].astype(np.float64) - vtx_pos[b]), 1e-4)) ** 2

    if method == "smooth":
        budget, last = 2, 0
        while budget > 0:
            left = 0
            for vertex in listed:
                near = [(weight(vertex, n), n) for n in graph[vertex] if state[n] > 0]
                if near:
                    total = sum(w for w, _ in near)
                    colour[vertex] = sum(w * colour[n] for w, n in near) / total
                    state[vertex] = 2
                else:
                    left += 1
            budget += -1 if left == last else 1
            last = left
    else:
        active = [v for v in range(count) if state[v] == 1]
        while active:
            sums, totals = {}, {}
            for vertex in active:
                for n in graph[vertex]:
                    if state[n] == 0:
                        w = weight(vertex, n)
                        sums[n] = sums.get(n, 0) + w * colour[vertex]
                        totals[n] = totals.get(n, 0) + w
            for n in sums:
                colour[n], state[n] = sums[n] / totals[n], 2
            active = list(sums)
    out, out_mask = texture.copy(), mask.copy()
    for (face, k), (row, column) in texel.items():
        if state[pos_idx[face, k]] > 0:
            out[row, column], out_mask[row, column] = colour[pos_idx[face, k]], 255
    return colour, state, out, out_mask


def hunyuan_inputs(size=64, seed=0):
    """A UV sphere (seam: pos_idx differs from uv_idx) textured by its UVs, with the texture known on
    the left 55% of columns, as MeshRender.uv_inpaint hands them over."""
    sphere = trimesh.creation.uv_sphere(radius=0.5, count=[10, 12])
    vtx_pos = sphere.vertices.astype(np.float32)
    pos_idx = sphere.faces.astype(np.int32)
    theta = np.arctan2(vtx_pos[:, 1], vtx_pos[:, 0]) / (2 * np.pi) + 0.5
    vtx_uv = np.stack([theta, vtx_pos[:, 2] + 0.5], 1).astype(np.float32)
    # split the seam: faces that wrap around get UV copies shifted by 1 - 0.999 = clamped
    uv_idx = pos_idx.copy()
    wraps = np.ptp(vtx_uv[pos_idx][..., 0], axis=1) > 0.5
    extra = []
    for face in np.nonzero(wraps)[0]:
        for k in range(3):
            if vtx_uv[pos_idx[face, k], 0] < 0.5:
                extra.append(vtx_uv[pos_idx[face, k]] + [1, 0])
                uv_idx[face, k] = len(vtx_uv) + len(extra) - 1
    vtx_uv = np.concatenate([vtx_uv, np.array(extra, np.float32).reshape(-1, 2)]).clip(0, 1).astype(np.float32)
    rows, columns = np.mgrid[0:size, 0:size]
    rng = np.random.default_rng(seed)
    texture = np.stack([columns / size, rows / size, rng.random((size, size))], -1).astype(np.float32)
    mask = ((columns < 0.55 * size) * 255).astype(np.uint8)
    return texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx


@pytest.mark.parametrize("method", ["smooth", "forward"])
def test_mesh_vertice_inpaint_matches_the_extensions_rule(method):
    inputs = hunyuan_inputs()
    texture, mask = MI.meshVerticeInpaint(*inputs, method=method)
    colour, state, expected, expected_mask = reference(*inputs, method)
    assert texture.dtype == np.float32 and mask.dtype == np.uint8 and texture.shape == (64, 64, 3)
    assert (state == 2).sum() > 20 and np.array_equal(mask, expected_mask)
    assert np.abs(texture - expected).max() < 1e-5
    assert not np.shares_memory(texture, inputs[0]) and inputs[1].max() == 255  # inputs untouched


def test_mesh_vertice_color_and_the_all_at_once_rule():
    inputs = hunyuan_inputs(seed=1)
    colour, state = MI.meshVerticeColor(*inputs)
    expected_colour, expected_state, _, _ = reference(*inputs, "smooth")
    assert np.array_equal(state, expected_state) and np.abs(colour - expected_colour).max() < 1e-5
    # vertex_colors' default (Jacobi, any device): the same vertices coloured, by means of the same colours
    texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx = (torch.as_tensor(a) for a in inputs)
    texel = MI.corner_texels(vtx_uv, uv_idx.long(), 64, 64)
    jacobi, jacobi_state = MI.vertex_colors(texture, mask > 0, texel, vtx_pos, pos_idx.long())
    assert np.array_equal(jacobi_state.numpy(), expected_state)
    assert jacobi.min() >= texture.min() and jacobi.max() <= texture.max()


def test_bad_inputs_are_named():
    texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx = hunyuan_inputs()
    with pytest.raises(ValueError, match="mask"):
        MI.meshVerticeInpaint(texture, mask[:10], vtx_pos, vtx_uv, pos_idx, uv_idx)
    with pytest.raises(ValueError, match="uv_idx"):
        MI.meshVerticeInpaint(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx + 10_000)
    with pytest.raises(ValueError, match="method"):
        MI.meshVerticeInpaint(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx, method="NS")


def test_served_as_any_packages_mesh_inpaint_processor(tmp_path, monkeypatch):
    from rasterkit.nodes import _comfy

    (tmp_path / "paintpkg").mkdir()
    (tmp_path / "paintpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    # every stand-in finder out, also one a second import of the pack (pytest's of the root folder) added
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if type(f).__name__ != "_StandInFinder"])
    monkeypatch.setenv("RASTERKIT_NO_CUSTOM_RASTERIZER", "1")
    monkeypatch.setenv("RASTERKIT_NO_NVDIFFRAST", "1")
    _comfy.register_standins()
    for name in ("paintpkg.mesh_inpaint_processor", "mesh_inpaint_processor"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        module = importlib.import_module(name)
        assert module.meshVerticeInpaint is MI.meshVerticeInpaint and module.meshVerticeColor is MI.meshVerticeColor
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("RASTERKIT_NO_MESH_INPAINT", "1")
    with pytest.raises(ImportError):
        importlib.import_module("paintpkg.mesh_inpaint_processor")


def _cube_mesh():
    """A cube [-0.5, 0.5]^3 with a UV island per side (a 3 x 2 atlas), 24 vertices, 12 triangles."""
    from rasterkit.nodes.mesh import make_mesh

    vertices, uvs, faces = [], [], []
    for side, (axis, sign) in enumerate([(0, 1), (0, -1), (1, 1), (1, -1), (2, 1), (2, -1)]):
        a, b = [d for d in range(3) if d != axis]
        if sign < 0:
            a, b = b, a  # keep the winding counter-clockwise seen from outside
        cell = np.array([side % 3, side // 3]) / np.array([3, 2])
        for s, t in [(0, 0), (1, 0), (1, 1), (0, 1)]:
            p = np.zeros(3)
            p[axis], p[a], p[b] = 0.5 * sign, s - 0.5, t - 0.5
            vertices.append(p)
            uvs.append(cell + (0.05 + 0.9 * np.array([s, t])) / np.array([3, 2]))
        base = 4 * side
        faces += [[base, base + 1, base + 2], [base, base + 2, base + 3]]
    vertices = torch.tensor(np.array(vertices), dtype=torch.float32)
    uvs = torch.tensor(np.array(uvs), dtype=torch.float32)
    return make_mesh(vertices[None], torch.tensor(faces)[None], uvs=uvs[None], colors=(vertices + 0.5)[None])


def test_bake_texture_inpaints_unseen_sides_over_the_mesh():
    from rasterkit.nodes.bake import BakeTexture, UVMaps
    from rasterkit.nodes.mesh import MeshRasterizer

    mesh = _cube_mesh()
    outputs = MeshRasterizer.run(
        mesh=mesh, width=96, height=96, views="list", view_list="0,0", shading="vertex_color", cull_back_faces=False
    )
    render, raster = outputs[6], outputs[5]
    _, _, islands = UVMaps.run(mesh=mesh, texture_size=48, dilation=0)
    islands = islands[0] > 0
    plain, seen, _ = BakeTexture.run(
        mesh=mesh, images=render, raster=raster, texture_size=48, dilation=0, inpaint="none"
    )
    seen = seen[0] > 0
    assert 0.1 < (seen & islands).sum() / islands.sum() < 0.3  # one side of six seen
    assert (plain[0][islands & ~seen] == 0).all()
    texture, mask, _ = BakeTexture.run(
        mesh=mesh, images=render, raster=raster, texture_size=48, dilation=0, inpaint="mesh"
    )
    texture = texture[0]
    assert torch.equal(mask[0] > 0, seen) and torch.isfinite(texture).all()
    unseen = islands & ~seen
    assert (texture[unseen].amax(-1) > 0.05).all()  # no black texel inside the islands
    low, high = texture[seen].amin(0), texture[seen].amax(0)
    assert (texture[unseen] >= low - 1e-4).all() and (texture[unseen] <= high + 1e-4).all()
    assert torch.equal(texture[seen], plain[0][seen])
    # the four sides next to the seen one continue its edge colours: each side's texels along the
    # shared edge are close to the seen texels nearest them in 3D (the seen side's own colours there)
    from rasterkit.nodes.bake import _uv_mesh, _uv_surface

    vertices, faces, fields = _uv_mesh(mesh)
    _, _, (position, _, _) = _uv_surface(vertices, faces, fields, 48, torch.device("cpu"), None)
    seen_position, seen_colour = position[seen], texture[seen]
    near_edge = unseen & (torch.cdist(position.view(-1, 3), seen_position).amin(1).view(48, 48) < 0.12)
    nearest = torch.cdist(position[near_edge], seen_position).argmin(1)
    assert near_edge.sum() > 30
    assert (texture[near_edge] - seen_colour[nearest]).abs().mean() < 0.1
