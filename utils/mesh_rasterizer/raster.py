"""The triangle rasterizer's torch path and its choice of backend: rasterize, rasterize_views and
interpolate, with the arithmetic of Hunyuan3D-2's custom_rasterizer kernel. The CUDA kernels are in
raster_cuda.py, numba's loops in raster_cpu.py, the constants all three share in constants.py; the
call-compatible module is custom_rasterizer.py (that extension's exact signature); `rasterize` here is
the engine's own form of the same call.

The conventions and arithmetic of that rasterizer's kernel, kept here: V is clip space [N,4]; a vertex
lands on the screen at x_s = (x/w * 0.5 + 0.5) * (width - 1) + 0.5 and y_s = (y/w * 0.5 + 0.5) *
(height - 1) + 0.5 (row index grows with y, no flip), depth z_s = z/w * 0.49999 + 0.5, all in float32;
pixel (px, py) samples p = (px + 0.5, py + 0.5). With corners a, b, c and S(u, v, t) = (t_x - u_x)(v_y -
u_y) - (v_x - u_x)(t_y - u_y), the screen barycentrics are beta = S(a, p, c) / S(a, b, c), gamma =
S(a, b, p) / S(a, b, c) (float32, the reciprocal of the area times each) and alpha = 1 - beta - gamma
rounded once to float32; p is inside when all three lie in [0, 1] (closed: a pixel centre on an edge
shared by two triangles belongs to both, and the depth test picks one). The candidates of a triangle
are the pixels from trunc(min x_s) while px < max x_s + 1 (the same for rows). depth = alpha z_a + beta
z_b + gamma z_c is quantised to trunc(depth * 2^18). Fragments of depth < 0 (in front of the near
plane) are dropped: the kernel's threshold without a prior, and with one its unsigned key of a
negative quantised depth never wins; depths from 8192 on (far behind the far plane) saturate, as the
kernel's float-to-int conversion does on a GPU. The nearest fragment wins, ties to the lower face
index; findices holds face index + 1 (0: background); barycentrics are perspective-correct:
b_i = (s_i / w_i) / sum_j (s_j / w_j), each step in float32 as the kernel takes it. Triangles with a
corner at w <= 0 (behind the eye), or of zero or non-finite area, or with a NaN or infinite corner,
are not drawn (the kernel skips the last kind too, and draws the first kind mirrored through the eye).
(This is the arithmetic of the kernel's source, bit for bit
equal to its x86-64 CPU build: bench/verify_custom_rasterizer.py; its nvcc build, or a g++ build that
fuses multiply-adds, moves the last bits.)

The torch path splits each triangle's candidate pixels into tiles of TILE_ROWS x TILE_COLUMNS pixels
and tests all tiles of all triangles as one dense batch: the products of the edge functions that
depend only on the row or only on the column are computed once per tile row or column, in the
kernel's order, so every value is bit-identical to the per-pixel arithmetic. A cheap superset test
on the signs of the edge functions picks the fragments (one compaction); the exact inside test, the
depth and the keys run on those only, and meet in a scatter_reduce "amin" of (depth, triangle) keys.
The CUDA path does the same work in two kernels: the triangle set-up fused with the depth test, one
thread per (triangle, 8x8 block), and the resolve, each in launches of bounded size (LAUNCH_BLOCKS,
LAUNCH_PIXELS). Grids are 1-D (gridDim.y and z stay 1); every index is int64 but the keys' triangle
field, which bounds views x faces below 2^31 (checked).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.device import cupy_usable, numba_usable, on_huge_pages, run_chunked
from .constants import CUDA_BLOCK, DEPTH_STEPS, EMPTY, FIXED, ID_BASE, TILE_CANDIDATES, TILE_COLUMNS, TILE_ROWS
from .raster_cuda import rasterize_triangles_cuda, resolve_pixels_cuda


def _pair(x: int, y: int, like: torch.Tensor) -> torch.Tensor:
    """float32 [2] = (x, y) on like's device, made by device ops: a tensor of host values would be an
    upload (a host wait on CUDA). Exact for integers below 2^24."""
    return torch.arange(2, device=like.device, dtype=torch.float32) * float(y - x) + float(x)


def _screen(vertices: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Clip-space float32 [..., N, 4] -> screen x, y, depth [..., N, 3], in the kernel's float32 order."""
    ndc = vertices[..., :3] / vertices[..., 3:4]
    xy = (ndc[..., :2] * 0.5 + 0.5) * _pair(width - 1, height - 1, ndc) + 0.5
    return torch.cat([xy, ndc[..., 2:] * 0.49999 + 0.5], -1)


def _alpha(beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """1 - beta - gamma rounded once to float32, as the kernel's double arithmetic rounds it, for
    beta, gamma in [0, 1] or a little above (exact where each is 0 or at least 2^-29, where double is
    exact too); its sign decides the kernel's alpha >= 0."""
    fixed = (beta * float(FIXED)).long() + (gamma * float(FIXED)).long()
    return (FIXED - fixed).float() * (1.0 / FIXED)


def rasterize(
    V: torch.Tensor,
    F: torch.Tensor,
    width: int,
    height: int,
    D: torch.Tensor | None = None,
    occlusion_truncation: float = 1e-6,
    use_depth_prior: int = 0,
):
    """Hunyuan3D-2's custom_rasterizer.rasterize with its kernel's behaviour (custom_rasterizer.py has
    its exact signature): V float [N,4] clip space, or [B,N,4] of which V[0] is drawn (as its wrapper
    takes pos[0]); F int [M,3]; D float [H,W] (NDC depth prior, used when use_depth_prior): fragments
    nearer than D * 0.49999 + 0.5 + occlusion_truncation are discarded. No near-plane clipping: a
    triangle with a corner at w <= 0 is not drawn.
    Returns findices int32 [H,W] (face index + 1, 0 = background) and barycentric float32 [H,W,3].
    """
    if isinstance(V, torch.Tensor) and V.ndim == 3 and V.shape[0] >= 1:
        V = V[0]
    if not isinstance(V, torch.Tensor) or V.ndim != 2 or V.shape[-1] != 4:
        raise ValueError(f"V: expected clip-space vertices [N,4] (or [B,N,4]), got {_shape(V)}")
    prior = D if use_depth_prior else None
    findices, barycentric = rasterize_views(V[None], F, width, height, prior, occlusion_truncation, clip_near=False)
    return findices[0], barycentric[0]


def _shape(value) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def _size(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}: expected an integer >= 0, got {value!r}")
    return int(value)


def _checked(V: torch.Tensor, F: torch.Tensor, width: int, height: int, D: torch.Tensor | None):
    """rasterize_views' input contract: V float32 [B,N,4], faces int32 or int64 [M,3] (those two kept as
    they are, other integers made int64), prior float32 [B*H*W] (or None), all contiguous and detached on
    V's device, each converted once; a ValueError naming the input for anything else."""
    if not isinstance(V, torch.Tensor) or V.ndim != 3 or V.shape[-1] != 4:
        raise ValueError(f"V: expected clip-space vertices [B,N,4], got {_shape(V)}")
    if not V.is_floating_point():
        raise ValueError(f"V: expected float clip-space vertices, got {V.dtype}")
    if not isinstance(F, torch.Tensor) or F.ndim != 2 or F.shape[-1] != 3:
        raise ValueError(f"F: expected triangles [M,3], got {_shape(F)}")
    if F.is_floating_point() or F.is_complex() or F.dtype == torch.bool:
        raise ValueError(f"F: face indices must be integers (any integer dtype), got {F.dtype}")
    width, height = _size(width, "width"), _size(height, "height")
    views, vertex_count, face_count = V.shape
    face_count = F.shape[0]
    if face_count and not vertex_count:
        raise ValueError(f"F: {face_count} triangles, but V has no vertices for their indices")
    if views * face_count >= ID_BASE:  # the keys' triangle field; findices (int32) holds less than that too
        raise ValueError(
            f"F: {face_count} triangles x {views} views = {views * face_count} exceeds "
            f"{ID_BASE - 1}, the most one call draws: pass fewer views at once"
        )
    prior = None
    if D is not None:
        if not isinstance(D, torch.Tensor) or D.numel() != views * height * width:
            raise ValueError(
                f"D: the depth prior must hold views x height x width = {views} x {height} x {width} "
                f"values ([B,H,W]), got {_shape(D)}"
            )
        if not D.is_floating_point():
            raise ValueError(f"D: the depth prior must be float, got {D.dtype}")
        prior = D.detach().to(V.device, torch.float32).reshape(-1).contiguous()
    V = V.detach().to(torch.float32).contiguous()
    dtype = F.dtype if F.dtype in (torch.int32, torch.long) else torch.long
    return V, F.detach().to(V.device, dtype).contiguous(), prior, width, height


def rasterize_views(
    V: torch.Tensor,
    F: torch.Tensor,
    width: int,
    height: int,
    D: torch.Tensor | None = None,
    occlusion_truncation: float = 1e-6,
    cull_back_faces: bool = False,
    clip_near: bool = True,
):
    """rasterize for B views at once: V float [B,N,4] (any float dtype), F int [M,3] (any integer
    dtype), D float [B,H,W] or None.

    A face with a NaN or infinite corner is not drawn (the others are), as in Hunyuan3D-2's kernel.
    cull_back_faces drops triangles wound clockwise on screen (counter-clockwise in NDC with y up).
    clip_near clips the triangles with a corner at w <= 0 (behind the eye) against the near plane z = -w
    of an OpenGL projection, and draws the pieces in front of it under their face's id, with its
    barycentrics (where a piece ties in depth with another face, the other face wins); without it (the
    kernel's behaviour) such triangles are not drawn. Triangles in front of the eye need no clipping:
    their fragments nearer than the near plane are dropped one by one.
    Returns findices int32 [B,H,W] and barycentric float32 [B,H,W,3] on V's device. One host sync
    (input checks and the work's size at once); the torch path adds one per pass of up to
    TILE_CANDIDATES candidate pixels (its compaction); triangles to clip add two.
    """
    V, faces, prior, width, height = _checked(V, F, width, height, D)
    views, vertex_count, face_count, device = V.shape[0], V.shape[1], faces.shape[0], V.device
    if prior is not None:
        prior = prior * 0.49999 + 0.5 + occlusion_truncation
    if not (views and face_count and width and height):  # nothing to draw (faces unchecked, as they index nothing)
        return (
            torch.zeros(views, height, width, dtype=torch.int32, device=device),
            torch.zeros(views, height, width, 3, device=device),
        )
    use_kernels = cupy_usable(device)
    if not use_kernels and numba_usable(device):  # the CPU: numba's loops, through the face indices
        rasterized = _rasterize_cpu(V, faces, prior, width, height, cull_back_faces, clip_near)
        if rasterized is not None:
            findices, barycentric = rasterized
            return findices.view(views, height, width), barycentric.view(views, height, width, 3)
    faces = faces.long()  # numba failed, perhaps partway, or a GPU: the torch path or the kernels start afresh
    tile = CUDA_BLOCK if use_kernels else TILE_ROWS
    # gathers with clamped indices, so that bad faces are reported after the one sync, not crash before it
    triangles, box, counts, behind = _triangles(
        V, faces.clamp(0, vertex_count - 1), width, height, tile, cull_back_faces, clip_near
    )
    block_end = counts.cumsum(0)
    checks = [faces.min(), faces.max(), block_end[-1]] + ([behind.sum(1).max()] if clip_near else [])
    low, high, total, *to_clip = torch.stack(checks).tolist()
    if not (0 <= low and high < vertex_count):
        raise ValueError(f"F: face indices must lie in 0..{vertex_count - 1}, got {low}..{high}")
    pieces = None
    if to_clip and to_clip[0]:
        V, faces, pieces = _clip_near(V, faces, behind, to_clip[0])
        if views * faces.shape[0] >= ID_BASE:
            raise ValueError(
                f"F: {face_count} triangles and their pieces clipped at the near plane x {views} views "
                f"exceed {ID_BASE - 1} triangles, the most one call draws: pass fewer views at once"
            )
        triangles, box, counts, _ = _triangles(V, faces, width, height, tile, cull_back_faces, False)
        block_end = counts.cumsum(0)
        total = int(block_end[-1])
    if not total:
        return (
            torch.zeros(views, height, width, dtype=torch.int32, device=device),
            torch.zeros(views, height, width, 3, device=device),
        )
    zbuffer = on_huge_pages(torch.empty(views * height * width, dtype=torch.long, device=device)).fill_(EMPTY)
    drawn_faces = faces.shape[0]
    if use_kernels:
        rasterize_triangles_cuda(zbuffer, V, faces, box, block_end, total, prior, width, height)
        findices, barycentric = resolve_pixels_cuda(zbuffer, V, faces, width, height)
    else:
        _depth_test(zbuffer, triangles, box, counts, block_end, total, prior, drawn_faces, width, height)
        findices, barycentric = _resolve(zbuffer, triangles, drawn_faces, width, height)
    if pieces is not None:
        _pieces_to_faces(findices, barycentric, face_count, height * width, *pieces)
    return findices.view(views, height, width), barycentric.view(views, height, width, 3)


def _rasterize_cpu(
    V: torch.Tensor,
    faces: torch.Tensor,
    prior: torch.Tensor | None,
    width: int,
    height: int,
    cull_back_faces: bool,
    clip_near: bool,
):
    """rasterize_views on the CPU through numba's loops (raster_cpu), which read the corners through the
    face indices: no per-triangle copy of them, no int64 copy of faces int32 [M,3]. findices int32
    [B*H*W] and barycentric float32 [B*H*W,3], or None where numba failed (the torch path then draws)."""
    cpu = _mesh_rasterizer_cpu()
    views, vertex_count, face_count = V.shape[0], V.shape[1], faces.shape[0]
    low, high = torch.aminmax(faces)
    low, high = int(low), int(high)
    if not (0 <= low and high < vertex_count):
        raise ValueError(f"F: face indices must lie in 0..{vertex_count - 1}, got {low}..{high}")
    pieces = None
    if clip_near and bool((V[..., 3] <= 0).any()):  # only then can a triangle lie partly behind the eye
        behind = cpu.triangles_behind(V, faces)
        if behind is None:
            return None
        count = int(behind.sum(1).max())
        if count:
            V, faces, pieces = _clip_near(V, faces.long(), behind, count)
            if views * faces.shape[0] >= ID_BASE:
                raise ValueError(
                    f"F: {face_count} triangles and their pieces clipped at the near plane x {views} views "
                    f"exceed {ID_BASE - 1} triangles, the most one call draws: pass fewer views at once"
                )
    rasterized = cpu.rasterize(V.contiguous(), faces, prior, width, height, cull_back_faces)
    if rasterized is not None and pieces is not None:
        _pieces_to_faces(*rasterized, face_count, height * width, *pieces)
    return rasterized


def _clip_near(V: torch.Tensor, faces: torch.Tensor, behind: torch.Tensor, count: int):
    """The triangles marked in behind bool [B,M] (finite, a corner at w <= 0) clipped to z + w >= 0 (the
    near plane; for an OpenGL perspective projection there w = near > 0), by Sutherland-Hodgman on the
    one plane: a polygon of up to 4 corners, fanned into 2 pieces. count: the most marked triangles of
    one view (C). The pieces become faces M .. M + 2C - 1 with corners of their own, appended to V
    float32 [B,N,4] and faces int64 [M,3] (absent pieces get NaN corners: not drawn).
    Returns V [B,N+6C,4], faces [M+2C,3] and (origin int64 [B,2C]: the face of each piece; weights
    float32 [B,2C,3,3]: each piece corner's barycentric weights over its face's corners)."""
    views, vertex_count = V.shape[:2]
    face = behind.int().argsort(dim=1, descending=True, stable=True)[:, :count]  # [B,C]: the marked ones first
    marked = behind.gather(1, face)
    corners = V[torch.arange(views, device=V.device)[:, None, None], faces[face]]  # [B,C,3,4]
    distance = corners[..., 2] + corners[..., 3]  # [B,C,3]: >= 0 in front of the near plane
    following = distance.roll(-1, -1)  # the other end of edge i -> i + 1
    inside = distance >= 0
    unit = torch.eye(3, device=V.device)
    along = (distance / (distance - following))[..., None]
    crossing = (1 - along) * unit + along * unit.roll(-1, 0)  # [B,C,3,3]: where edge i meets the plane
    # the polygon's candidate corners in order: corner 0, edge 0's crossing, corner 1, ...; the first 4 that exist
    candidates = torch.stack([unit.expand_as(crossing), crossing], 3).view(views, count, 6, 3)
    exists = torch.stack([inside, inside != inside.roll(-1, -1)], 3).view(views, count, 6)
    order = exists.int().argsort(dim=-1, descending=True, stable=True)[..., :4]
    polygon = candidates.gather(2, order[..., None].expand(-1, -1, -1, 3))  # [B,C,4,3]
    size = exists.sum(-1)
    weights = torch.stack([polygon[:, :, :3], torch.cat([polygon[:, :, :1], polygon[:, :, 2:]], 2)], 2)
    weights = weights.view(views, 2 * count, 3, 3)
    drawn = torch.stack([marked & (size >= 3), marked & (size == 4)], 2).view(views, 2 * count)
    piece_corners = weights @ corners.repeat_interleave(2, 1)  # [B,2C,3,4]
    piece_corners = torch.where(drawn[..., None, None], piece_corners, torch.nan)
    V = torch.cat([V, piece_corners.view(views, 6 * count, 4)], 1)
    new_faces = torch.arange(6 * count, device=V.device).view(2 * count, 3) + vertex_count
    return V, torch.cat([faces, new_faces]), (face.repeat_interleave(2, 1), weights)


def _pieces_to_faces(
    findices: torch.Tensor,
    barycentric: torch.Tensor,
    face_count: int,
    pixels: int,
    origin: torch.Tensor,
    weights: torch.Tensor,
) -> None:
    """In place on findices int32 [B*H*W] and barycentric float32 [B*H*W,3]: pixels won by a piece of
    _clip_near (face index >= face_count) get its face's id and barycentrics over that face's corners
    (b_face = sum_j b_j weights_j: the piece's corners are those combinations of the face's)."""
    findices, barycentric = findices.view(-1), barycentric.view(-1, 3)
    at = (findices > face_count).nonzero().squeeze(1)
    piece = at // pixels * origin.shape[1] + (findices.index_select(0, at).long() - 1 - face_count)
    findices.index_copy_(0, at, (origin.view(-1).index_select(0, piece) + 1).int())
    mapped = (barycentric.index_select(0, at)[:, :, None] * weights.view(-1, 3, 3).index_select(0, piece)).sum(1)
    barycentric.index_copy_(0, at, mapped)


def _triangles(
    V: torch.Tensor, faces: torch.Tensor, width: int, height: int, tile: int, cull_back_faces: bool, find_behind: bool
):
    """The set-up of the K = B * M triangles (view-major) of V float32 [B,N,4], faces int64 [M,3]:
    triangles float32 [14,K]: a_x, a_y, c_x - a_x, c_y - a_y, b_x - a_x, b_y - a_y (times the sign of
    S(a, b, c), which orients the edge functions so that the inside is where both are >= 0: negation is
    exact, so beta = S(a, p, c) / S(a, b, c) comes out the same), a bound a little above |S(a, b, c)|,
    |1 / S(a, b, c)|, the corners' depths z_s and clip w; box int64 [4,K]: first and last candidate
    column and row; counts int64 [K]: tiles (tile x tile pixels) over each box, 0 for triangles not
    drawn (a corner at w <= 0 or not finite, zero or non-finite area, no pixel, or culled); behind bool
    [B,M] (finite triangles with a corner at w <= 0) where find_behind, else None."""
    corners = _screen(V, width, height)[:, faces]  # [B,M,3,3]
    w = V[:, faces, 3]  # [B,M,3]
    finite = torch.isfinite(V).all(-1)[:, faces].all(-1)  # [B,M]
    a, b, c = corners.unbind(2)
    ac, ab = c[..., :2] - a[..., :2], b[..., :2] - a[..., :2]
    area = ac[..., 0] * ab[..., 1] - ab[..., 0] * ac[..., 1]
    inverse = (1 / area).abs()
    orientation = area.sign()[..., None]
    ac, ab = ac * orientation, ab * orientation
    low, high = corners[..., :2].amin(2), corners[..., :2].amax(2)
    size = _pair(width, height, low)
    first = low.trunc().clamp(min=0).minimum(size)
    last = ((high + 1).ceil() - 1).minimum(size - 1)
    span = last - first + 1
    keep = finite & (inverse < torch.inf) & (inverse > 0) & (torch.cat([w, span], -1).amin(-1) > 0)
    if cull_back_faces:
        keep &= area < 0
    tiles = torch.ceil(span / tile).prod(-1)
    counts = torch.where(keep, tiles, 0).long().view(-1)  # where, not a product: span is NaN where w = 0
    # the bound leaves a margin of 2^-20 (16 float32 roundings) above the area
    triangles = torch.stack(
        [
            a[..., 0],
            a[..., 1],
            *ac.unbind(-1),
            *ab.unbind(-1),
            (1 + 2**-20) / inverse,
            inverse,
            *corners[..., 2].unbind(-1),
            *w.unbind(-1),
        ]
    ).view(14, -1)
    box = torch.stack([*first.unbind(-1), *last.unbind(-1)]).long().view(4, -1)
    return triangles, box, counts, finite & (w.amin(-1) <= 0) if find_behind else None


def _depth_test(
    zbuffer: torch.Tensor,
    triangles: torch.Tensor,
    box: torch.Tensor,
    counts: torch.Tensor,
    block_end: torch.Tensor,
    total: int,
    prior: torch.Tensor | None,
    face_count: int,
    width: int,
    height: int,
) -> None:
    """Depth-test the candidate pixels of all triangles into zbuffer int64 [B*H*W], in place: `total`
    tiles (counts [K] per triangle, block_end [K] their running total) tested as dense [TILE_ROWS,
    TILE_COLUMNS, tiles] batches (tiles innermost, so that every elementwise operation runs over
    contiguous memory); each batch finds its tiles' triangles by a binary search, so that no temporary
    grows with the whole work."""
    device = zbuffer.device
    block_start = block_end - counts
    rows = torch.arange(TILE_ROWS, device=device)[:, None]
    columns = torch.arange(TILE_COLUMNS, device=device)[:, None]
    cell_offset = (rows * width + columns.T).view(-1)  # pixel offsets of a tile's cells, row-major

    def tiles(start, stop, device):
        tile_index = torch.arange(start, stop, device=device)
        owner = torch.searchsorted(block_end, tile_index, right=True)
        rank = tile_index - block_start.index_select(0, owner)
        ax, ay, acx, acy, abx, aby, bound = triangles[:7].index_select(1, owner)
        first_x, first_y, last_x, last_y = box.index_select(1, owner)
        tiles_x = (last_x - first_x) // TILE_COLUMNS + 1
        x0, y0 = first_x + rank % tiles_x * TILE_COLUMNS, first_y + rank // tiles_x * TILE_ROWS
        x, y = x0 + columns, y0 + rows  # [C,P], [R,P]
        dx, dy = (x + 0.5) - ax, (y + 0.5) - ay
        # S(a, p, c) = acx * dy - dx * acy and S(a, b, p) = dx * aby - abx * dy: each product depends on
        # the row or the column only; NaN past the box's last row and column makes those pixels outside
        row_c = (acx * dy).masked_fill_(y > last_y, torch.nan)
        column_c = (dx * acy).masked_fill_(x > last_x, torch.nan)
        beta_area = row_c[:, None] - column_c  # [R,C,P]
        gamma_area = dx * aby - (abx * dy)[:, None]
        # a superset of the inside: the signs are exact, the sum is bounded with a margin for rounding
        maybe = (torch.minimum(beta_area, gamma_area) >= 0) & (beta_area + gamma_area <= bound)
        fragment = maybe.view(-1).nonzero().squeeze(1)
        cell, tile = fragment // owner.numel(), fragment % owner.numel()
        triangle = owner.index_select(0, tile)
        inverse, z0, z1, z2 = triangles[7:11].index_select(1, triangle)
        beta = beta_area.view(-1).index_select(0, fragment) * inverse
        gamma = gamma_area.view(-1).index_select(0, fragment) * inverse
        alpha = _alpha(beta, gamma)
        depth = (alpha * z0 + beta * z1) + gamma * z2
        corner = owner // face_count * (height * width) + y0 * width + x0
        pixel = corner.index_select(0, tile) + cell_offset.index_select(0, cell)
        scaled = depth * DEPTH_STEPS
        if prior is None:
            visible = (alpha >= 0) & (depth >= 0)
        else:  # a negative quantised depth is never drawn
            visible = (alpha >= 0) & (depth >= prior.index_select(0, pixel)) & (scaled > -1)
        # triangles are in (view, face) order: equal depths go to the lower face
        key = scaled.clamp_max(2.0**31).long() * ID_BASE + triangle
        zbuffer.scatter_reduce_(0, pixel, torch.where(visible, key, EMPTY), "amin")

    per_tile = TILE_ROWS * TILE_COLUMNS
    run_chunked(tiles, total, per_tile * 40, device, limit=max(1, TILE_CANDIDATES // per_tile))


def _mesh_rasterizer_cpu():
    """raster_cpu (numba's set-up, depth test and resolve), imported on first use: numba is slow to import."""
    from . import raster_cpu

    return raster_cpu


def _resolve(zbuffer: torch.Tensor, triangles: torch.Tensor, face_count: int, width: int, height: int):
    """findices int32 [B*H*W] (face + 1, 0 where nothing landed) and perspective-correct barycentric
    float32 [B*H*W,3] from the winners in zbuffer, recomputed with the depth test's arithmetic."""
    empty = zbuffer == EMPTY
    triangle = zbuffer % ID_BASE
    ax, ay, acx, acy, abx, aby, _, inverse_area = triangles[:8].index_select(1, triangle).view(8, -1, height, width)
    dx = torch.arange(width, device=zbuffer.device) + 0.5 - ax
    dy = torch.arange(height, device=zbuffer.device)[:, None] + 0.5 - ay
    beta = ((acx * dy - dx * acy) * inverse_area).view(-1)
    gamma = ((dx * aby - abx * dy) * inverse_area).view(-1)
    weights = torch.stack([_alpha(beta, gamma), beta, gamma]) / triangles[11:14].index_select(1, triangle)
    barycentric = torch.where(empty, 0.0, weights * (1 / ((weights[0] + weights[1]) + weights[2])))
    findices = torch.where(empty, 0, triangle % face_count + 1).int()
    return findices, barycentric.T.contiguous()


def interpolate(
    attributes: torch.Tensor, findices: torch.Tensor, barycentric: torch.Tensor, faces: torch.Tensor
) -> torch.Tensor:
    """Per-pixel attributes: attributes float [N,C] or [B,N,C] per vertex, findices int [..,H,W]
    (0 = background), barycentric [..,H,W,3], faces int [M,3] -> float [..,H,W,C] (0 on background)."""
    faces = faces.long()
    face = (findices.long() - 1).clamp_min(0)
    if attributes.ndim == 2:
        corner_values = attributes[faces[face]]  # [..,H,W,3,C]
    else:
        batch = torch.arange(attributes.shape[0], device=attributes.device).view(-1, *([1] * (findices.ndim - 1)))
        corner_values = attributes[batch[..., None], faces[face]]
    values = (barycentric[..., None] * corner_values).sum(-2)
    return values * (findices > 0)[..., None]
