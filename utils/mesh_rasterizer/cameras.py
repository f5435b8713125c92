"""Cameras for the rasterizer, as OpenGL matrices: world-to-view matrices [B,4,4] (look_at, orbit
cameras on a sphere around the origin, the six texture-baking views, a camera at a position looking at a
target) and projections [4,4] (perspective, orthographic), with the near and far planes the Mesh
Rasterizer node uses; and core Load3D's viewer (three.js): its model transform and fit, and its camera's
projection mapped onto the rasterizer's pixels.
"""

from __future__ import annotations

import math

import torch

STANDARD_VIEWS = ((0.0, 0.0), (90.0, 0.0), (180.0, 0.0), (270.0, 0.0), (0.0, 90.0), (180.0, -90.0))


def look_at(eye: torch.Tensor, target: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """World-to-view matrices [B,4,4] (OpenGL: the camera looks down -z, y up); eye, target, up [B,3]."""
    forward = torch.nn.functional.normalize(target - eye, dim=-1)
    right = torch.nn.functional.normalize(torch.cross(forward, up, dim=-1), dim=-1)
    true_up = torch.cross(right, forward, dim=-1)
    view = torch.zeros(eye.shape[0], 4, 4, dtype=eye.dtype, device=eye.device)
    view[:, 0, :3], view[:, 1, :3], view[:, 2, :3] = right, true_up, -forward
    view[:, :3, 3] = -torch.einsum("bij,bj->bi", view[:, :3, :3], eye)
    view[:, 3, 3] = 1
    return view


def perspective(fov_degrees: float, aspect: float, near: float, far: float) -> torch.Tensor:
    """OpenGL perspective projection [4,4]; fov is vertical."""
    f = 1.0 / math.tan(math.radians(fov_degrees) / 2)
    return torch.tensor(
        [
            [f / aspect, 0, 0, 0],
            [0, f, 0, 0],
            [0, 0, (far + near) / (near - far), 2 * far * near / (near - far)],
            [0, 0, -1, 0],
        ]
    )


def orthographic(half_height: float, aspect: float, near: float, far: float) -> torch.Tensor:
    """OpenGL orthographic projection [4,4] of a view half_height tall (in world units)."""
    return torch.tensor(
        [
            [1 / (half_height * aspect), 0, 0, 0],
            [0, 1 / half_height, 0, 0],
            [0, 0, -2 / (far - near), -(far + near) / (far - near)],
            [0, 0, 0, 1],
        ]
    )


def orbit_cameras(azimuths, elevations, distance: float) -> torch.Tensor:
    """View matrices [B,4,4] of cameras on a sphere around the origin looking at it; azimuth 0 looks
    from +z, 90 from +x; elevation 90 from above (+y)."""
    azimuth = torch.tensor(azimuths, dtype=torch.float32).deg2rad()
    elevation = torch.tensor(elevations, dtype=torch.float32).deg2rad()
    eye = (
        torch.stack(
            [
                torch.cos(elevation) * torch.sin(azimuth),
                torch.sin(elevation),
                torch.cos(elevation) * torch.cos(azimuth),
            ],
            -1,
        )
        * distance
    )
    # looking straight up or down, "up" is the -z/+z axis instead of +y
    up = torch.where(
        (elevation.abs() > math.radians(89.9))[:, None],
        torch.tensor([0.0, 0.0, -1.0]) * torch.sign(elevation)[:, None],
        torch.tensor([0.0, 1.0, 0.0]),
    )
    return look_at(eye, torch.zeros_like(eye), up)


def turned_rig(front: torch.Tensor, distance: float) -> torch.Tensor:
    """The six texture-baking views [6,4,4] of a model turned so that their front view is `front` [4,4]
    (an orbit camera at `distance`): each standard view after the front camera's rotation. The standard
    front camera's rotation is the identity, so azimuth 0 and elevation 0 give the standard views."""
    standard = orbit_cameras([a for a, _ in STANDARD_VIEWS], [e for _, e in STANDARD_VIEWS], distance)
    turn = torch.eye(4)
    turn[:3, :3] = front[:3, :3]
    return standard @ turn


def look_from(position: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The view [1,4,4] of a camera at position [3] looking at target [3] (distinct), y up (three.js's, as
    core Load3D's camera_info)."""
    forward = (target - position) / float((position - target).norm())
    # looking straight up or down, "up" is the -z/+z axis instead of +y (as orbit_cameras)
    up = (
        torch.tensor([0.0, 0.0, float(forward[1] > 0) * 2 - 1])
        if abs(float(forward[1])) > 0.9999
        else torch.tensor([0.0, 1.0, 0.0])
    )
    return look_at(position[None], target[None], up[None])


def projection_matrix(
    kind: str, fov: float, distance: float, aspect: float, zoom: float = 1.0, ortho_scale: float = 0.0
) -> torch.Tensor:
    """The projection [4,4] of a camera `distance` from the mesh centre: "perspective" with vertical fov
    (degrees) narrowed by zoom, else orthographic, ortho_scale tall (0: the height a perspective view of
    this fov shows at the centre) divided by zoom; near and far planes 10 units around the centre."""
    near, far = max(distance * 0.01, distance - 10.0), distance + 10.0
    if kind == "perspective":
        shown = fov if zoom == 1 else 2 * math.degrees(math.atan(math.tan(math.radians(fov) / 2) / zoom))
        return perspective(shown, aspect, near, far)
    half_height = ortho_scale / 2 if ortho_scale > 0 else distance * torch.tan(torch.tensor(fov).deg2rad() / 2).item()
    return orthographic(half_height / zoom, aspect, near, far)


# Load3D (ComfyUI's three.js viewer) scales a model to this largest extent when it fits it to the view,
# and its orthographic camera shows this height (at zoom 1) where camera_info does not say
LOAD3D_FIT_SIZE = 5.0
LOAD3D_FRUSTUM_HEIGHT = 10.0


def model_matrix(position, quaternion, scale) -> torch.Tensor:
    """three.js's Object3D matrix [4,4] (translation @ rotation @ scale) of a position (x, y, z), a
    rotation quaternion (x, y, z, w; normalised here) and a scale (x, y, z)."""
    x, y, z, w = (float(q) / math.sqrt(sum(float(c) ** 2 for c in quaternion)) for q in quaternion)
    rotation = torch.tensor(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    matrix = torch.eye(4)
    matrix[:3, :3] = rotation * torch.tensor([float(s) for s in scale])
    matrix[:3, 3] = torch.tensor([float(p) for p in position])
    return matrix


def load3d_fit(vertices: torch.Tensor) -> torch.Tensor:
    """The model matrix [4,4] with which Load3D fits a model of vertices [V,3] to its view: scaled to a
    largest extent of LOAD3D_FIT_SIZE, centred on x and z, standing on y = 0. A similarity maps to the
    same fit, so a mesh normalised beforehand lands where the viewer puts the file."""
    low, high = vertices.amin(0), vertices.amax(0)
    scale = LOAD3D_FIT_SIZE / max(float((high - low).max()), 1e-30)
    matrix = torch.eye(4) * scale
    matrix[3, 3] = 1
    centre = (low + high) / 2
    matrix[:3, 3] = -torch.stack([centre[0], low[1], centre[2]]) * scale
    return matrix


def moved(model: torch.Tensor, vertices: torch.Tensor, fields: dict) -> tuple[torch.Tensor, dict]:
    """vertices [V,3] and the optional fields (utils/inputs/mesh's) moved by model [4,4]: the normals by
    its inverse transpose (renormalised), the rest as they are; new tensors, the inputs untouched."""
    linear = model[:3, :3]
    fields = dict(fields)
    if fields.get("normals") is not None:
        fields["normals"] = torch.nn.functional.normalize(fields["normals"] @ torch.linalg.inv(linear), dim=-1)
    return vertices @ linear.T + model[:3, 3], fields


def depth_range(view: torch.Tensor, vertices: torch.Tensor) -> tuple[float, float]:
    """Near and far planes around the depths of vertices [V,3] seen by view [4,4]: the z-buffer's steps
    spread over the mesh (a viewer's fixed 0.01..10000 would leave it a handful); the near plane stays
    in front of the eye (at least far / 1000)."""
    depth = -(vertices @ view[2, :3] + view[2, 3])
    closest, farthest = float(depth.min()), float(depth.max())
    margin = 0.01 * (farthest - closest) + 1e-6 * max(abs(farthest), 1.0)
    far = farthest + margin if farthest > 0 else 1.0
    return max(closest - margin, far * 1e-3), far


def load3d_projection(
    camera_type: str,
    fov: float,
    half_height: float,
    zoom: float,
    width: int,
    height: int,
    near: float,
    far: float,
) -> torch.Tensor:
    """Load3D's (three.js's) projection [4,4] for a render of width x height pixels, mapped onto the
    rasterizer's pixels. perspective: vertical fov (degrees) narrowed by zoom (PerspectiveCamera); else
    orthographic, half_height above and below the view's centre divided by zoom (OrthographicCamera).
    three.js puts NDC +-1 on the image's outer edges, the rasterizer on its outer pixel centres: x and y
    are stretched by width / (width - 1) and height / (height - 1), so that every point lands on the
    same pixel position as in the viewer's own render."""
    aspect = width / height
    if camera_type == "perspective":
        shown = 2 * math.degrees(math.atan(math.tan(math.radians(fov) / 2) / zoom))
        projection = perspective(shown, aspect, near, far)
    else:
        projection = orthographic(half_height / zoom, aspect, near, far)
    edges = torch.diag(torch.tensor([width / max(width - 1, 1), height / max(height - 1, 1), 1.0, 1.0]))
    return edges @ projection
