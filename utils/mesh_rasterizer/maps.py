"""The Mesh Rasterizer node's maps of a mesh seen from B views: normal, depth, position, mask and face-id
maps, the rasterizer's findices and barycentrics, and a render (Lambert, flat, matcap, vertex colours or
texture; anti-aliased at silhouettes on request), all in one pass per chunk of views.
"""

from __future__ import annotations

import torch

from .normals import interpolate_corners
from .raster import interpolate, rasterize_views
from .shading import antialias, lambert, matcap, screen_corners, textured

AMBIENT = 0.2  # Lambert shading's light where the surface faces away from the light
GOLDEN_RATIO_16 = 40503  # 0.6180339887 * 65536


def render_maps(
    clip,
    view,
    vertices,
    faces,
    normals,
    width,
    height,
    cull_back_faces,
    normal_space,
    depth_mode,
    shade,
    light,
    partners,
):
    """The maps of B views on clip's device: normal, depth, position [B,H,W,3], mask [B,H,W], face colours
    [B,H,W,3], findices int32 [B,H,W], barycentric [B,H,W,3], render [B,H,W,3], render alpha [B,H,W]. clip
    float [B,V,4] (clip-space vertices per view), view float [B,4,4], vertices float [V,3], faces int64
    [M,3], normals float [M,3,3] (at each face's corners: normals.corner_normals), normal_space "view" or
    "world", depth_mode "normalized" or "distance", shade: the tensors of utils/inputs/mesh.shading_inputs
    (empty: lambert or none, by whether light is used), light float [3] (view space), partners int64 [M,3]
    (shading.edge_partners) or None for no antialiasing."""
    findices, barycentric = rasterize_views(clip, faces, width, height, cull_back_faces=cull_back_faces)
    # the rasterizer's rows follow NDC y upwards (its API's convention): flip so that up is up
    findices, barycentric = findices.flip(1), barycentric.flip(1)
    covered = (findices > 0)[..., None]
    world_normals = interpolate_corners(normals, findices, barycentric)
    view_normals = torch.nn.functional.normalize(torch.einsum("bij,bhwj->bhwi", view[:, :3, :3], world_normals), dim=-1)
    normals = view_normals if normal_space == "view" else torch.nn.functional.normalize(world_normals, dim=-1)
    normal_map = torch.where(covered, normals * 0.5 + 0.5, torch.tensor([0.5, 0.5, 1.0], device=clip.device))
    position = interpolate(vertices, findices, barycentric, faces)
    low, high = vertices.amin(0), vertices.amax(0)
    position_map = torch.where(covered, (position - low) / (high - low).clamp_min(1e-12), 0.0)
    view_depth = -torch.einsum("bj,bhwj->bhw", view[:, 2, :3], position) - view[:, 2, 3][:, None, None]
    mask = covered[..., 0]
    if depth_mode == "distance":
        depth = torch.where(mask, view_depth, 0.0)
    else:
        near_depth = torch.where(mask, view_depth, torch.inf).flatten(1).amin(1)[:, None, None]
        far_depth = torch.where(mask, view_depth, -torch.inf).flatten(1).amax(1)[:, None, None]
        depth = torch.where(mask, 1 - (view_depth - near_depth) / (far_depth - near_depth).clamp_min(1e-12), 0.0)
    colour = _shade(shade, light, view_normals, covered, findices, barycentric, faces)
    rgba = torch.cat([colour, covered.float()], -1)
    if partners is not None:
        rgba = antialias(rgba, findices, screen_corners(clip, faces, width, height), partners)
    return (
        normal_map,
        depth[..., None].expand(-1, -1, -1, 3).contiguous(),
        position_map,
        mask.float(),
        face_colours(findices),
        findices,
        barycentric,
        rgba[..., :3].contiguous(),
        rgba[..., 3].contiguous(),
    )


def _shade(shade, light, view_normals, covered, findices, barycentric, faces):
    """The render's colours [B,H,W,3] (0 on background): texture, vertex colours or matcap where shade
    holds them, else Lambert (light float [3], view space) or flat white (light None)."""
    if "texture" in shade:
        return textured(shade["texture"], shade["uvs"], findices, barycentric, faces)
    if "colors" in shade:
        return interpolate(shade["colors"], findices, barycentric, faces)
    if "matcap" in shade:
        return matcap(view_normals, shade["matcap"], covered[..., 0])
    if light is None:
        return covered.float().expand(-1, -1, -1, 3)
    intensity = lambert(view_normals, light.expand(len(view_normals), 3), AMBIENT)
    return (intensity * covered).expand(-1, -1, -1, 3)


def face_colours(findices: torch.Tensor) -> torch.Tensor:
    """A distinct colour per face id (golden-ratio hues, in 16-bit fixed point: no float64, and exact
    for any face count), black background: [..,H,W,3]."""
    hue = (findices.long() * GOLDEN_RATIO_16 % 65536).float() / 65536
    rgb = (torch.stack([hue, hue + 2 / 3, hue + 1 / 3], -1) % 1.0 * 6 - 3).abs().sub(1).clamp(0, 1)
    return rgb * 0.8 * (findices > 0)[..., None] + 0.2 * (findices > 0)[..., None]
