"""Texture baking in plain torch: a mesh's surface rasterized in UV space (position and normal maps in
the texture's layout), views projected back onto it, and seam padding.

Conventions: UVs are OpenGL's (v up), so the texture's row 0 is v = 1 and texel (row r, column c) has
its centre at u = (c + 0.5) / S, v = 1 - (r + 0.5) / S. The UV layout is rasterized with
mesh_rasterizer.rasterize, whose pixel centres sit at x/w * 0.5 + 0.5 = px / (S - 1): the UV vertices
go to clip x = 2 (u S - 0.5) / (S - 1) - 1, y = 2 ((1 - v) S - 0.5) / (S - 1) - 1, so that every pixel
the rasterizer samples is a texel centre and its rows are the texture's rows. Views are images with
rows down (upright, as MeshRasterizer returns them) of cameras given by view and projection matrices
(mesh_rasterizer.orbit_cameras, perspective, orthographic; MeshRasterizer's raster output holds them).
"""
from __future__ import annotations

import torch

from . import mesh_rasterizer as M
from .mesh_inpaint import propagate


def uv_clip(uvs: torch.Tensor, size: int) -> torch.Tensor:
    """Clip-space positions [V',4] of UV vertices uvs float [V',2] that put texel centres of a size x size
    texture on the rasterizer's pixel centres (module docstring)."""
    scale = size / (size - 1)
    x = (uvs[:, 0] * scale - 0.5 / (size - 1)) * 2 - 1
    y = ((1 - uvs[:, 1]) * scale - 0.5 / (size - 1)) * 2 - 1
    return torch.stack([x, y, torch.zeros_like(x), torch.ones_like(x)], -1)


def uv_maps(vertices: torch.Tensor, normals: torch.Tensor, uvs: torch.Tensor, faces: torch.Tensor,
            uv_faces: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The surface in the texture's layout: vertices float [V,3], normals float [V,3] (world space), uvs
    float [V',2], faces int [F,3] (into vertices), uv_faces int [F,3] (into uvs; the same as faces where
    UVs are per vertex), size >= 2 -> position float [S,S,3], normal float [S,S,3] (unit length) and mask
    bool [S,S] (texels some triangle covers; position and normal are 0 elsewhere). Where UV triangles
    overlap, the lower face index wins."""
    if size < 2:
        raise ValueError(f"size: a texture needs at least 2 x 2 texels, got {size}")
    findices, barycentric = M.rasterize(uv_clip(uvs.float(), size), uv_faces, size, size)
    position = M.interpolate(vertices.float(), findices, barycentric, faces)
    normal = torch.nn.functional.normalize(M.interpolate(normals.float(), findices, barycentric, faces), dim=-1)
    return position, normal, findices > 0


def dilate(maps: torch.Tensor, mask: torch.Tensor, pixels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seam padding: maps float [S,S,C], mask bool [S,S] -> maps with texels outside the mask filled, and
    the grown mask. Each of `pixels` steps fills the empty texels next to filled ones (3x3) with the mean
    of those neighbours, so a texel within `pixels` steps of the mask takes the values of its nearest
    inside texels and bilinear lookups at island edges do not mix in the background. Texels inside the
    mask keep their values."""
    filled = mask.float()[None, None]
    values = (maps.permute(2, 0, 1) * filled[0])[None]
    for _ in range(pixels):
        neighbours = torch.nn.functional.avg_pool2d(filled, 3, 1, 1, count_include_pad=False)
        sums = torch.nn.functional.avg_pool2d(values, 3, 1, 1, count_include_pad=False)
        grows = (neighbours > 0) & (filled == 0)
        values = torch.where(grows, sums / neighbours.clamp_min(1e-12), values)
        filled = torch.where(grows, 1.0, filled)
    return values[0].permute(1, 2, 0), filled[0, 0] > 0


def inpaint_mesh(texture: torch.Tensor, seen: torch.Tensor, vertices: torch.Tensor, uvs: torch.Tensor,
                 faces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unseen texels inside the UV islands filled by colour propagation over the mesh (Hunyuan3D-2.1's
    mesh inpainting, utils/mesh_inpaint.py's "smooth" rule: in its order on the CPU with numba, all
    vertices at once elsewhere, which colours the same texels a little differently): texture float
    [S,S,C], seen bool [S,S], vertices float [V,3], uvs float [V,2] (per vertex), faces int [F,3] ->
    texture and the filled mask bool [S,S]. Vertices are welded by exact position (across UV seams); a
    vertex's colour is that of the seen texel of its triangles nearest to it (the largest barycentric
    weight; a UV corner's own texel often lies outside its island), the others take the
    distance-weighted mean of their coloured neighbours, sweep after sweep; the UV triangles then
    interpolate the vertex colours into the unseen texels they cover (over their coloured corners).
    Texels of parts no view sees at all (no seen vertex in reach) stay as they are."""
    size, channels = texture.shape[0], texture.shape[-1]
    positions, welded = torch.unique(vertices, dim=0, return_inverse=True)
    faces = faces.long()
    pos_idx = welded[faces]
    findices, barycentric = M.rasterize(uv_clip(uvs.float(), size), faces, size, size)
    texel = (seen & (findices > 0)).view(-1).nonzero().squeeze(1)
    corner = pos_idx[findices.view(-1).index_select(0, texel).long() - 1].view(-1)  # [T*3]
    share = barycentric.view(-1, 3).index_select(0, texel).view(-1)
    # each vertex takes the seen texel of its triangles nearest to it: the largest barycentric weight
    best = torch.full((len(positions),), -1.0, device=texture.device).scatter_reduce(0, corner, share, "amax")
    order = torch.arange(len(share), device=texture.device)
    pick = torch.full((len(positions),), -1, dtype=torch.long, device=texture.device).scatter_reduce(
        0, corner, torch.where(share == best.index_select(0, corner), order, -1), "amax")
    known = pick >= 0
    colours = texture.reshape(-1, channels).index_select(0, texel.index_select(0, pick.clamp_min(0) // 3))
    colours, state = propagate(colours, known, ~known.index_select(0, pos_idx.view(-1)), positions, pos_idx,
                               sequential=True)
    coloured = (state > 0).float().index_select(0, welded)[:, None]
    values = M.interpolate(torch.cat([colours.index_select(0, welded) * coloured, coloured], -1), findices,
                           barycentric, faces)
    fill = (findices > 0) & ~seen & (values[..., -1] > 1e-6)
    filled = values[..., :channels] / values[..., -1:].clamp_min(1e-6)
    return torch.where(fill[..., None], filled, texture), seen | fill


def view_depths(vertices: torch.Tensor, faces: torch.Tensor, view: torch.Tensor, projection: torch.Tensor,
                width: int, height: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The depth buffers of N views: vertices float [V,3], faces int [F,3], view float [N,4,4], projection
    float [N,4,4] (or [4,4]) -> distance along each camera's axis float [N,H,W] of the nearest surface
    and covered bool [N,H,W], in the rasterizer's rows (NDC y up). Back faces are kept, so that the
    depth test sees every occluder."""
    homogeneous = torch.cat([vertices, torch.ones_like(vertices[:, :1])], 1)
    camera = torch.einsum("bij,nj->bni", view, homogeneous)
    clip = torch.einsum("bij,bnj->bni", projection.expand(len(view), 4, 4), camera)
    findices, barycentric = M.rasterize_views(clip, faces, width, height)
    depth = M.interpolate(-camera[..., 2:3], findices, barycentric, faces)[..., 0]
    return depth, findices > 0


# Texel-view pairs a bake works on at once: its temporaries take ~110 B per pair (projected positions,
# screen coordinates, samples, weights), so a chunk peaks near 1 GB whatever the texture size
BAKE_CHUNK_TEXEL_VIEWS = 1 << 23


def bake(images: torch.Tensor, view: torch.Tensor, projection: torch.Tensor, vertices: torch.Tensor,
         faces: torch.Tensor, position: torch.Tensor, normal: torch.Tensor, mask: torch.Tensor,
         weights: torch.Tensor | None = None, exponent: float = 4.0, depth_tolerance: float = 0.01,
         chunk_texel_views: int = BAKE_CHUNK_TEXEL_VIEWS, on_chunk=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Views blended into a texture: images float [N,H,W,C] (rows down), view float [N,4,4], projection
    float [N,4,4] (or [4,4]), vertices float [V,3], faces int [F,3] (the occluders), position, normal
    float [S,S,3] and mask bool [S,S] (uv_maps), weights float [N] (None: 1 each) -> texture float
    [S,S,C] and weight float [S,S] (the blend's total; 0 where no view sees the texel, and the texture 0
    there: dilate pads it).

    A texel is seen by a view where its surface point projects inside the image onto a covered pixel
    whose depth (nearest pixel of the view's depth buffer) lies within depth_tolerance times the mesh's
    bounding-box diagonal of the point's own, and its normal faces the camera; its weight there is the
    view's weight times cos(normal, direction to the camera) ** exponent (Hunyuan3D-2's bake), and its
    colour the image's bilinear sample at the point. The texture's rows are blended in chunks of about
    chunk_texel_views texel-view pairs (bounded memory); on_chunk(done_rows, rows) follows each."""
    count, height, width, _ = images.shape
    size = position.shape[0]
    weights = torch.ones(count, device=images.device) if weights is None else weights.to(images.device, torch.float32)
    depth, covered = view_depths(vertices, faces, view, projection, width, height)
    low, high = vertices.amin(0), vertices.amax(0)
    tolerance = depth_tolerance * (high - low).norm()
    projection = projection.expand(count, 4, 4)
    rows = max(1, chunk_texel_views // (count * position.shape[1]))
    textures, totals = [], []
    for start in range(0, size, rows):
        stop = min(size, start + rows)
        texture, total = blend_views(images, view, projection, depth, covered,
                                     position[start:stop], normal[start:stop], mask[start:stop], weights,
                                     exponent, tolerance)
        textures.append(texture)
        totals.append(total)
        if on_chunk is not None:
            on_chunk(stop, size)
    return torch.cat(textures), torch.cat(totals)


def blend_views(images: torch.Tensor, view: torch.Tensor, projection: torch.Tensor, depth: torch.Tensor,
                covered: torch.Tensor, position: torch.Tensor, normal: torch.Tensor, mask: torch.Tensor,
                weights: torch.Tensor, exponent: float, tolerance: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """bake() on texels position, normal float [R,S,3] and mask bool [R,S] (any rows of the texture), with
    projection float [N,4,4], depth float [N,H,W] and covered bool [N,H,W] (view_depths), weights float [N]
    and tolerance (scene units) -> texture float [R,S,C] and weight float [R,S]."""
    count, height, width, _ = images.shape
    device = images.device
    homogeneous = torch.cat([position, torch.ones_like(position[..., :1])], -1)
    camera = torch.einsum("bij,hwj->bhwi", view, homogeneous)  # [N,R,S,4]
    clip = torch.einsum("bij,bhwj->bhwi", projection, camera)
    w = clip[..., 3]
    ndc = clip[..., :2] / torch.where(w > 0, w, 1.0)[..., None]
    # the rasterizer's screen mapping (pixel px spans [px, px + 1])
    screen_x = (ndc[..., 0] * 0.5 + 0.5) * (width - 1) + 0.5
    screen_y = (ndc[..., 1] * 0.5 + 0.5) * (height - 1) + 0.5
    column, row = screen_x.floor().long(), screen_y.floor().long()
    inside = (w > 0) & (column >= 0) & (column < width) & (row >= 0) & (row < height) & mask
    pixel = (torch.arange(count, device=device).view(-1, 1, 1) * height + row.clamp(0, height - 1)) * width \
        + column.clamp(0, width - 1)
    near = (depth.reshape(-1)[pixel] - (-camera[..., 2])).abs() <= tolerance
    # the direction to the camera in view space: towards the eye (perspective: w depends on the point)
    # or along +z (orthographic)
    orthographic = (projection[:, 3, :3].abs().sum(-1) == 0).view(-1, 1, 1, 1)
    towards = torch.where(orthographic, torch.tensor([0.0, 0.0, 1.0], device=device),
                          torch.nn.functional.normalize(-camera[..., :3], dim=-1))
    view_normal = torch.einsum("bij,hwj->bhwi", view[:, :3, :3], normal)
    cosine = (view_normal * towards).sum(-1).clamp_min(0)
    seen = inside & near & covered.reshape(-1)[pixel]
    weight = torch.where(seen, weights.view(-1, 1, 1) * cosine ** exponent, 0.0)  # [N,R,S]
    # grid_sample's coordinates: -1 and 1 are the images' outer edges; images' rows run down
    grid = torch.stack([screen_x / width * 2 - 1, 1 - screen_y / height * 2], -1)
    samples = torch.nn.functional.grid_sample(images.permute(0, 3, 1, 2), grid, mode="bilinear",
                                              padding_mode="border", align_corners=False)  # [N,C,R,S]
    total = weight.sum(0)
    texture = torch.einsum("bhw,bchw->hwc", weight, samples) / total.clamp_min(1e-12)[..., None]
    return texture, total
