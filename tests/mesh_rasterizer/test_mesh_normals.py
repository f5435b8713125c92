"""mesh_rasterizer.normals: corner normals welded by position with hard edges past an angle, by vertex,
flat and the file's."""

import math

import pytest
import torch

from rasterkit.utils.mesh_rasterizer.normals import corner_normals, interpolate_corners


def box(split: bool):
    """A cube [-1, 1]^3 (12 triangles, outward): 8 shared vertices, or split into 4 per side (24)."""
    import trimesh

    cube = trimesh.creation.box(extents=(2, 2, 2))
    vertices, faces = torch.tensor(cube.vertices, dtype=torch.float32), torch.tensor(cube.faces)
    if split:
        vertices, faces = vertices[faces].reshape(-1, 3), torch.arange(3 * len(faces)).view(-1, 3)
    return vertices, faces


def face_normals(vertices, faces):
    corners = vertices[faces]
    return torch.nn.functional.normalize(
        torch.linalg.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), dim=-1
    )


def degrees(a, b):
    """Angles in degrees between unit vectors (float32 acos: about 0.02 degrees apart at 1)."""
    return torch.rad2deg(torch.acos((a * b).sum(-1).clamp(-1, 1)))


@pytest.mark.parametrize("split", [True, False], ids=["split", "shared"])
@pytest.mark.parametrize("smoothing", ["auto", "by_position", "flat"])
def test_a_cube_keeps_its_hard_edges(split, smoothing):
    vertices, faces = box(split)
    normals = corner_normals(vertices, faces, smoothing)
    assert normals.shape == (12, 3, 3)
    assert degrees(normals, face_normals(vertices, faces)[:, None]).max() < 0.05


def test_past_the_angle_every_edge_is_smooth_and_triangulation_does_not_tilt_a_corner():
    """At 180 degrees each cube corner averages its three sides equally (corner angles weigh the faces:
    a side's two triangles meet a corner at one or two of them), by position as by vertex."""
    for split, smoothing in ((True, "by_position"), (False, "by_position"), (False, "by_vertex")):
        vertices, faces = box(split)
        normals = corner_normals(vertices, faces, smoothing, angle=180.0)
        diagonal = torch.nn.functional.normalize(vertices[faces].sign(), dim=-1)
        assert degrees(normals, diagonal).max() < 0.05, (split, smoothing)


def test_by_vertex_keeps_the_meshs_own_splits_as_hard_edges():
    vertices, faces = box(split=True)
    normals = corner_normals(vertices, faces, "by_vertex", angle=180.0)
    assert degrees(normals, face_normals(vertices, faces)[:, None]).max() < 0.05


def test_the_angle_decides_which_edges_stay_hard():
    """A roof of two quads meeting at 40 degrees: smooth along the ridge under a 60 degree threshold,
    hard under 30."""
    slope = math.tan(math.radians(20))
    vertices = torch.tensor(
        [[-1, 0, 1], [0, slope, 1], [1, 0, 1], [-1, 0, -1], [0, slope, -1], [1, 0, -1]], dtype=torch.float32
    )
    faces = torch.tensor([[0, 1, 4], [0, 4, 3], [1, 2, 5], [1, 5, 4]])
    ridge = (faces == 1) | (faces == 4)
    smooth = corner_normals(vertices, faces, "by_position", angle=60.0)
    assert degrees(smooth[ridge], torch.tensor([0.0, 1, 0])).max() < 0.05
    hard = corner_normals(vertices, faces, "by_position", angle=30.0)
    assert degrees(hard, face_normals(vertices, faces)[:, None]).max() < 0.05


def test_flat_gives_face_normals_and_from_file_the_files():
    import trimesh

    ball = trimesh.creation.icosphere(subdivisions=1)
    vertices, faces = torch.tensor(ball.vertices, dtype=torch.float32), torch.tensor(ball.faces)
    flat = corner_normals(vertices, faces, "flat")
    assert degrees(flat, face_normals(vertices, faces)[:, None]).max() < 0.05
    given = torch.nn.functional.normalize(torch.randn(len(vertices), 3, generator=torch.Generator().manual_seed(0)))
    for smoothing in ("from_file", "auto"):
        assert torch.allclose(corner_normals(vertices, faces, smoothing, normals=given), given[faces])
    # without the file's, auto welds by position: a sphere's normals point outwards
    assert degrees(corner_normals(vertices, faces), torch.nn.functional.normalize(vertices[faces], dim=-1)).max() < 10


def test_degenerate_faces_take_their_positions_normal():
    """A zero-area face (a point and a sliver) joins no smoothing group: its corners take the normal of
    their position's faces, never NaN."""
    vertices, faces = box(split=True)
    vertices = torch.cat([vertices, torch.tensor([[1.0, 1, 1], [1, 1, 1], [-1, 1, 1]])])
    faces = torch.cat([faces, torch.tensor([[36, 37, 37], [36, 37, 38]])])
    normals = corner_normals(vertices, faces)
    assert torch.isfinite(normals).all() and torch.allclose(normals.norm(dim=-1), torch.ones(14, 3))


def test_interpolate_corners():
    values = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)
    findices = torch.tensor([[0, 1, 2]])
    barycentric = torch.tensor([[[1.0, 0, 0], [0.5, 0.5, 0], [0, 0, 1]]])
    assert interpolate_corners(values, findices, barycentric).tolist() == [[[0, 0], [1, 2], [10, 11]]]


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(smoothing="smooth"), "^normal_smoothing: expected one of auto, by_position, by_vertex, flat, from_file"),
        (dict(smoothing="from_file"), "^normal_smoothing: from_file needs a mesh with normals"),
        (dict(angle=200.0), r"^smoothing_angle: expected degrees from 0 to 180, got 200\.0"),
        (dict(angle=float("nan")), "^smoothing_angle: expected degrees from 0 to 180"),
    ],
)
def test_bad_settings_are_named(kw, message):
    vertices, faces = box(split=False)
    with pytest.raises(ValueError, match=message):
        corner_normals(vertices, faces, **kw)
