"""Shading of rasterized meshes: per-pixel attributes, textures through UVs (mipmapped), Lambert and
matcap shading, and an antialias pass over silhouette edges. Plain torch, batched over views.

Conventions: images are [B,H,W,C] with row 0 at the top (the MeshRasterizer node's maps, i.e. the
rasterizer's rows flipped); findices int [B,H,W] is face + 1 (0 = background). UVs are OpenGL's
(v up): a texture's row 0 is at v = 1, and lookups repeat past [0, 1] (glTF's default wrap).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..inputs.mesh import unit_float
from .raster import interpolate


def light_direction(azimuth: float, elevation: float) -> torch.Tensor:
    """A unit direction [3] towards the light, with the orbit cameras' angles: azimuth 0 is +z, 90 is +x,
    elevation 90 is +y. In view space (x right, y up, z towards the camera) 0, 0 is a headlight."""
    azimuth, elevation = math.radians(azimuth), math.radians(elevation)
    return torch.tensor(
        [math.cos(elevation) * math.sin(azimuth), math.sin(elevation), math.cos(elevation) * math.cos(azimuth)]
    )


def lambert(normals: torch.Tensor, light: torch.Tensor, ambient: float) -> torch.Tensor:
    """Diffuse intensity [B,H,W,1] = ambient + (1 - ambient) * max(0, n . l): normals float [B,H,W,3]
    (unit), light float [B,3] (unit, towards the light, in the normals' space)."""
    cosine = torch.einsum("bhwc,bc->bhw", normals, light).clamp_min(0)[..., None]
    return ambient + (1 - ambient) * cosine


def mip_pyramid(texture: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mip levels of texture float [Ht,Wt,C] (each half the size of the one before, rounded down, to
    1x1; box-filtered by area) packed into texels float [T,C], and levels int64 [L,3]: each level's
    first texel, width and height."""
    channels = texture.shape[-1]
    image, height, width = texture.permute(2, 0, 1)[None], texture.shape[0], texture.shape[1]
    pixels, sizes = [texture.reshape(-1, channels)], [(width, height)]
    while width > 1 or height > 1:
        width, height = max(1, width // 2), max(1, height // 2)
        image = F.interpolate(image, size=(height, width), mode="area")
        pixels.append(image[0].permute(1, 2, 0).reshape(-1, channels))
        sizes.append((width, height))
    first = [0]
    for w, h in sizes[:-1]:
        first.append(first[-1] + w * h)
    table = torch.tensor(
        [[o, w, h] for o, (w, h) in zip(first, sizes, strict=False)], dtype=torch.long, device=texture.device
    )
    return torch.cat(pixels), table


def uv_level_of_detail(uv: torch.Tensor, covered: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The mip level [B,H,W] (float, >= 0) of each pixel: log2 of the longer of the UV footprints along x
    and y, in texels of a texture size = (width, height). Derivatives are differences with the
    neighbouring pixel on the side where the shorter one lies (both pixels covered), so that
    silhouettes and UV seams, where one side jumps, do not blur: uv float [B,H,W,2], covered bool
    [B,H,W]."""
    texels = uv * uv.new_tensor(size)

    def footprint(dim: int) -> torch.Tensor:
        count = covered.shape[dim]
        both = covered.narrow(dim, 0, count - 1) & covered.narrow(dim, 1, count - 1)
        length = torch.where(both, texels.diff(dim=dim).norm(dim=-1), torch.inf)  # pixel i to i + 1
        beyond = torch.full_like(length.narrow(dim, 0, 1), torch.inf)
        shorter = torch.minimum(torch.cat([length, beyond], dim), torch.cat([beyond, length], dim))
        return torch.where(shorter < torch.inf, shorter, 0.0)

    rho = torch.maximum(footprint(2), footprint(1))
    return rho.clamp_min(1.0).log2()


def sample_texture(texels: torch.Tensor, levels: torch.Tensor, uv: torch.Tensor, lod: torch.Tensor) -> torch.Tensor:
    """Trilinear lookup: bilinear in the two mip levels around lod, blended by its fraction (lod 0 is
    plain bilinear). texels float [T,C] and levels int64 [L,3] from mip_pyramid, uv float [B,H,W,2],
    lod float [B,H,W] -> float [B,H,W,C]."""
    lod = lod.clamp(0, levels.shape[0] - 1)
    below = lod.floor().long()
    level = torch.stack([below, (below + 1).clamp_max(levels.shape[0] - 1)])  # [2,B,H,W]
    offset, width, height = levels[level].unbind(-1)
    x = uv[..., 0] * width - 0.5
    y = (1 - uv[..., 1]) * height - 0.5  # v up, rows down
    x0, y0 = x.floor(), y.floor()
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    x0, y0 = x0.long(), y0.long()
    columns = torch.stack([x0 % width, (x0 + 1) % width], -1)  # [2,B,H,W,2]
    rows = torch.stack([y0 % height, (y0 + 1) % height], -1)
    index = offset[..., None, None] + rows[..., :, None] * width[..., None, None] + columns[..., None, :]
    corners = texels[index]  # [2,B,H,W,2,2,C]: rows, columns
    top = corners[..., 0, 0, :] * (1 - fx) + corners[..., 0, 1, :] * fx
    bottom = corners[..., 1, 0, :] * (1 - fx) + corners[..., 1, 1, :] * fx
    bilinear = top * (1 - fy) + bottom * fy
    fraction = (lod - below)[..., None]
    return bilinear[0] * (1 - fraction) + bilinear[1] * fraction


def textured(
    texture: torch.Tensor, uvs: torch.Tensor, findices: torch.Tensor, barycentric: torch.Tensor, faces: torch.Tensor
) -> torch.Tensor:
    """Texture colours [B,H,W,C] (0 on background) of texture float [Ht,Wt,C] through per-vertex uvs
    float [V,2], mipmapped where the texture is minified; findices int [B,H,W], barycentric
    [B,H,W,3], faces int [M,3]."""
    uv = interpolate(uvs, findices, barycentric, faces)
    covered = findices > 0
    texels, levels = mip_pyramid(texture)
    lod = uv_level_of_detail(uv, covered, (texture.shape[1], texture.shape[0]))
    return sample_texture(texels, levels, uv, lod) * covered[..., None]


def matcap(view_normals: torch.Tensor, image: torch.Tensor, covered: torch.Tensor) -> torch.Tensor:
    """Matcap colours [B,H,W,C]: image [Hm,Wm,C] (any dtype: unit_float) looked up (bilinear) at
    n.xy * 0.5 + 0.5 of view_normals float [B,H,W,3] (x right, y up: the image's top is up); 0 where
    covered [B,H,W] is False."""
    image = unit_float(image, "matcap")
    if image.ndim != 3 or 0 in image.shape:
        raise ValueError(f"matcap: expected an image [H,W,C], got shape {tuple(image.shape)}")
    height, width = image.shape[:2]
    levels = torch.tensor([[0, width, height]], device=image.device)
    # within the outer texels' centres: no wrap to the opposite border
    inset = view_normals.new_tensor([0.5 / width, 0.5 / height])
    uv = torch.minimum(torch.maximum(view_normals[..., :2] * 0.5 + 0.5, inset), 1 - inset)
    texels = image.reshape(-1, image.shape[-1])
    return sample_texture(texels, levels, uv, torch.zeros_like(uv[..., 0])) * covered[..., None]


def screen_corners(clip: torch.Tensor, faces: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Each face's corners in image pixels, rows down (the rasterizer's screen mapping, flipped), with
    NDC depth: clip float [B,V,4], faces int [M,3] -> float [B,M,3,3] (x, y, z/w)."""
    ndc = clip[..., :3] / clip[..., 3:4]
    x = (ndc[..., 0] * 0.5 + 0.5) * (width - 1) + 0.5
    y = height - ((ndc[..., 1] * 0.5 + 0.5) * (height - 1) + 0.5)
    return torch.stack([x, y, ndc[..., 2]], -1)[:, faces.long()]


def _barycentric_at(corners: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Screen-space (affine) barycentrics [...,3] of points x, y [...] in triangles corners [...,3,>=2]."""
    (ax, ay), (bx, by), (cx, cy) = (corners[..., i, :2].unbind(-1) for i in range(3))
    area = (bx - ax) * (cy - ay) - (cx - ax) * (by - ay)
    beta = ((x - ax) * (cy - ay) - (cx - ax) * (y - ay)) / area
    gamma = ((bx - ax) * (y - ay) - (x - ax) * (by - ay)) / area
    return torch.stack([1 - beta - gamma, beta, gamma], -1)


def weld(vertices: torch.Tensor) -> torch.Tensor:
    """One id per distinct position: vertices float [V,3] -> int64 [V] (equal ids for equal positions),
    from a lexicographic order (stable sorts by z, y, then x) instead of unique, which syncs."""
    order = torch.arange(len(vertices), device=vertices.device)
    for axis in (2, 1, 0):
        order = order[vertices[order, axis].argsort(stable=True)]
    ordered = vertices[order]
    first = torch.cat([torch.ones(1, dtype=torch.bool, device=vertices.device), (ordered[1:] != ordered[:-1]).any(-1)])
    return torch.empty_like(order).scatter_(0, order, first.long().cumsum(0) - 1)


def edge_partners(faces: torch.Tensor, vertices: torch.Tensor, welded: torch.Tensor | None = None) -> torch.Tensor:
    """The face across each edge: faces int [M,3], vertices float [V,3] -> int64 [M,3] (edge i joins
    corners i + 1 and i + 2, where barycentric i is 0; -1 at open edges). Edges are matched by their
    ends' positions, so that vertices split at UV seams or hard edges still join their faces; welded
    int64 [M,3], weld(vertices)[faces], where the caller has it already."""
    corner = weld(vertices)[faces.long()] if welded is None else welded
    start, end = corner.roll(-1, 1), corner.roll(-2, 1)
    key = (torch.minimum(start, end) * len(vertices) + torch.maximum(start, end)).view(-1)
    order = key.argsort()
    ordered = key[order]
    same_next = torch.cat([ordered[1:] == ordered[:-1], ordered.new_zeros(1, dtype=torch.bool)])
    same_previous = torch.cat([ordered.new_zeros(1, dtype=torch.bool), ordered[1:] == ordered[:-1]])
    position = torch.arange(len(order), device=key.device)
    partner = torch.where(same_next, position + 1, torch.where(same_previous, position - 1, -1))
    face_of = torch.where(partner >= 0, order[partner.clamp_min(0)] // 3, -1)
    return torch.empty_like(face_of).scatter_(0, order, face_of).view(-1, 3)


def silhouette_edges(corners: torch.Tensor, partners: torch.Tensor) -> torch.Tensor:
    """bool [B,M,3]: the edges of each view that are silhouettes (open, or between a triangle facing the
    camera and one facing away); corners float [B,M,3,3] from screen_corners, partners int64 [M,3]."""
    a, b, c = corners[..., :2].unbind(2)
    area = (b[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (c[..., 0] - a[..., 0]) * (b[..., 1] - a[..., 1])
    front = area < 0  # counter-clockwise in NDC is clockwise with rows down
    across = front[:, partners.clamp_min(0)]  # [B,M,3]
    return (partners < 0) | (across != front[..., None])


def antialias(
    colour: torch.Tensor,
    findices: torch.Tensor,
    corners: torch.Tensor,
    partners: torch.Tensor,
    depth_margin: float = 1e-4,
) -> torch.Tensor:
    """nvdiffrast-style antialiasing of silhouette edges: colour float [B,H,W,C], findices int [B,H,W],
    corners float [B,M,3,3] from screen_corners, partners int64 [M,3] from edge_partners -> float
    [B,H,W,C].

    For each pair of neighbouring pixels p, q of different faces, the first silhouette edge that the
    segment from p's centre to q's crosses, of p's triangle T or of the triangle across the edge of T
    that the segment leaves by (thin triangles at a silhouette often cover no pixel centre), at a
    fraction t from p; where that triangle, extended to q, lies in front of q's surface (NDC depth,
    by depth_margin) or q is background, the pixel on the far side of the crossing takes the other's
    colour by |t - 1/2|, the part of its width that the surface covers (or leaves). Pairs across
    rows for edges nearer horizontal, across columns for the others, so that each edge blends along
    one axis. Where colour carries the coverage as a channel (1 covered, 0 background), that channel
    comes out as the anti-aliased coverage."""
    batch, height, width = findices.shape
    view = torch.arange(batch, device=corners.device)[:, None, None]
    face = (findices.long() - 1).clamp_min(0)
    own = corners[view, face]  # [B,H,W,3,3]
    silhouette = silhouette_edges(corners, partners)
    rows = torch.arange(height, device=colour.device, dtype=colour.dtype)[:, None] + 0.5
    columns = torch.arange(width, device=colour.device, dtype=colour.dtype) + 0.5
    centre_x, centre_y = columns.expand(height, width), rows.expand(height, width)
    own_depth = (_barycentric_at(own, centre_x, centre_y) * own[..., 2]).sum(-1)
    result = colour.clone()
    for dim, (dx, dy) in ((2, (1.0, 0.0)), (1, (0.0, 1.0))):
        for step in (1, -1):  # q to the right / below (step 1) or left / above (-1) of p
            q_x, q_y = centre_x + dx * step, centre_y + dy * step
            across = partners[face, _barycentric_at(own, q_x, q_y).argmin(-1)]  # [B,H,W]
            pair = torch.stack([face, across.clamp_min(0)], -1)  # T and the triangle across: [B,H,W,2]
            triangles = corners[view[..., None], pair]  # [B,H,W,2,3,3]
            at_p = _barycentric_at(triangles, centre_x[..., None], centre_y[..., None])  # [B,H,W,2,3]
            at_q = _barycentric_at(triangles, q_x[..., None], q_y[..., None])
            crossing = silhouette[view[..., None], pair] & (at_p >= 0) & (at_q < 0)
            crossing[..., 1, :] &= (across >= 0)[..., None]
            t, first = torch.where(crossing, at_p / (at_p - at_q), torch.inf).flatten(-2).min(-1)
            which = first // 3  # 0: T, 1: the triangle across
            triangle = triangles.gather(-3, which[..., None, None, None].expand(-1, -1, -1, 1, 3, 3))[..., 0, :, :]
            depth_at_q = (
                at_q.gather(-2, which[..., None, None].expand(-1, -1, -1, 1, 3))[..., 0, :] * triangle[..., 2]
            ).sum(-1)
            q_face, q_colour = findices.roll(-step, dim), colour.roll(-step, dim)
            in_front = (q_face == 0) | (depth_at_q < own_depth.roll(-step, dim) - depth_margin)
            # the crossing edge's direction decides the axis: across columns for steep edges
            edge = (first % 3)[..., None, None]
            start = triangle.gather(-2, ((edge + 1) % 3).expand(-1, -1, -1, 1, 3))[..., 0, :2]
            end = triangle.gather(-2, ((edge + 2) % 3).expand(-1, -1, -1, 1, 3))[..., 0, :2]
            direction = (end - start).abs()
            steep = direction[..., 1] >= direction[..., 0]
            along = steep if dim == 2 else ~steep
            edge_pair = (findices > 0) & (q_face != findices) & (t < torch.inf) & in_front & along
            # the pair's last index wraps around with roll: never a pair
            last = torch.arange(findices.shape[dim], device=findices.device) == (
                findices.shape[dim] - 1 if step == 1 else 0
            )
            edge_pair &= ~(last[:, None] if dim == 1 else last)
            weight_p = torch.where(edge_pair, (0.5 - t).clamp_min(0), 0.0)[..., None]
            weight_q = torch.where(edge_pair, (t - 0.5).clamp_min(0), 0.0)[..., None]
            result = result + weight_p * (q_colour - colour)
            result = result + (weight_q * (colour - q_colour)).roll(step, dim)
    return result
