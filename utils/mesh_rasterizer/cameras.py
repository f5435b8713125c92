"""Cameras for the rasterizer, as OpenGL matrices: world-to-view matrices [B,4,4] (look_at, orbit
cameras on a sphere around the origin, the six texture-baking views, a camera at a position looking at a
target) and projections [4,4] (perspective, orthographic), with the near and far planes the Mesh
Rasterizer node uses.
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
