"""A compile-free triangle rasterizer in plain torch, call-compatible with Hunyuan3D-2's
custom_rasterizer, plus attribute interpolation and cameras.

Conventions of that API, kept here: V is clip space [N,4]; a vertex lands on the screen at
x_s = (x/w * 0.5 + 0.5) * (width - 1) + 0.5 and y_s = (y/w * 0.5 + 0.5) * (height - 1) + 0.5 (row index
grows with y, no flip), depth z_s = z/w * 0.49999 + 0.5; pixel (px, py) samples (px + 0.5, py + 0.5);
the nearest fragment wins, depth quantised to 2^-18, ties to the lower face index; findices holds
face index + 1 (0: background); barycentrics are perspective-correct.

Inside tests use fixed-point screen coordinates (1/256 px) and exact integer edge functions with a
top-left style tie rule, so a pixel centre on an edge shared by two triangles belongs to exactly one
and closed meshes have no cracks. Triangles are grouped by the size of their pixel bounding boxes
(1, 2, 3, 4, 6, 8, 12, ... rows and columns) and each group's candidate pixels are tested as one dense
batch, never a Python loop over triangles; the depth test is a scatter_reduce "amin" of packed
(depth, face) integers.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import cuda
from .batching import expand_counts, size_class
from .device import cupy_usable, run_chunked

SUBPIXEL = 256  # fixed-point steps per pixel
MAXINT = 2147483647
DEPTH_STEPS = 1 << 18
CUDA_BLOCK = 8  # rasterize_blocks: pixels per side of the bounding-box block one CUDA thread tests


def _screen(vertices: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Clip-space [..., N, 4] -> screen x, y, depth [..., N, 3] as the custom_rasterizer maps them."""
    w = vertices[..., 3:4]
    ndc = vertices[..., :3] / w
    return torch.cat([(ndc[..., 0:1] * 0.5 + 0.5) * (width - 1) + 0.5, (ndc[..., 1:2] * 0.5 + 0.5) * (height - 1) + 0.5,
                      ndc[..., 2:3] * 0.49999 + 0.5], -1)


def _check(vertices: torch.Tensor, faces: torch.Tensor):
    if vertices.ndim == 3 and vertices.shape[0] == 1:
        vertices = vertices[0]
    if vertices.ndim != 2 or vertices.shape[-1] != 4:
        raise ValueError(f"V: expected clip-space vertices [N,4] (or [1,N,4]), got shape {tuple(vertices.shape)}")
    return vertices, _check_faces(faces, vertices.shape[0])


def _check_faces(faces: torch.Tensor, vertex_count: int) -> torch.Tensor:
    if faces.ndim != 2 or faces.shape[-1] != 3:
        raise ValueError(f"F: expected triangles [M,3], got shape {tuple(faces.shape)}")
    faces = faces.long()
    if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= vertex_count):
        raise ValueError(f"F: face indices must lie in 0..{vertex_count - 1}, got {int(faces.min())}..{int(faces.max())}")
    return faces


def rasterize(V: torch.Tensor, F: torch.Tensor, width: int, height: int, D: torch.Tensor | None = None,
              occlusion_truncation: float = 1e-6, use_depth_prior: int = 0):
    """Hunyuan3D-2 custom_rasterizer.rasterize: V float [N,4] (or [1,N,4]) clip space, F int [M,3].

    D float [H,W] (NDC depth prior, used when use_depth_prior): fragments nearer than
    D * 0.49999 + 0.5 + occlusion_truncation are discarded.
    Returns findices int32 [H,W] (face index + 1, 0 = background) and barycentric float32 [H,W,3].
    """
    V, F = _check(V, F)
    prior = D[None] if (use_depth_prior and D is not None) else None
    findices, barycentric = rasterize_views(V[None], F, width, height, prior, occlusion_truncation)
    return findices[0], barycentric[0]


def rasterize_views(V: torch.Tensor, F: torch.Tensor, width: int, height: int, D: torch.Tensor | None = None,
                    occlusion_truncation: float = 1e-6, cull_back_faces: bool = False):
    """rasterize for B views at once: V float [B,N,4], F int [M,3], D float [B,H,W] or None.

    cull_back_faces drops triangles wound clockwise on screen (counter-clockwise in NDC with y up).
    Returns findices int32 [B,H,W] and barycentric float32 [B,H,W,3] on V's device.
    """
    if V.ndim != 3 or V.shape[-1] != 4:
        raise ValueError(f"V: expected clip-space vertices [B,N,4], got shape {tuple(V.shape)}")
    F = _check_faces(F, V.shape[1])
    if not bool(torch.isfinite(V).all()):
        raise ValueError("V: vertices contain NaN or infinite values")
    views, device = V.shape[0], V.device
    screen = _screen(V.float(), width, height)  # [B,N,3]
    corners = screen[:, F]  # [B,M,3,3]
    fixed = torch.round(corners[..., :2].double() * SUBPIXEL).long()  # [B,M,3,2]
    low, high = corners[..., :2].amin(2), corners[..., :2].amax(2)
    x0, y0 = low[..., 0].floor().clamp(0, width), low[..., 1].floor().clamp(0, height)
    x1, y1 = high[..., 0].floor().clamp(-1, width - 1), high[..., 1].floor().clamp(-1, height - 1)
    a, b, c = fixed.unbind(2)
    area = (b[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (b[..., 1] - a[..., 1]) * (c[..., 0] - a[..., 0])
    keep = (area != 0) & (V[:, F, 3] > 0).all(-1) & (x1 >= x0) & (y1 >= y0)  # degenerate, behind, off screen
    if cull_back_faces:
        keep &= area > 0
    view, face = keep.nonzero(as_tuple=True)
    table = _triangle_table(fixed[view, face], area[view, face])
    x0, y0 = x0[view, face].long(), y0[view, face].long()
    span_x, span_y = x1[view, face].long() - x0 + 1, y1[view, face].long() - y0 + 1
    base = view * (height * width)
    depth_over_area = corners[view, face, :, 2] / area[view, face].abs()[:, None].float()
    init = MAXINT * MAXINT + (MAXINT - 1)
    zbuffer = torch.full((views * height * width,), init, dtype=torch.long, device=device)
    prior = None
    if D is not None:
        prior = (D.float().reshape(-1) * 0.49999 + 0.5 + occlusion_truncation).to(device)

    def fragments(members, rows, columns):
        """Depth-test the pixels of the triangles `members` [K], whose bounding boxes fit in
        rows x columns: edge functions as [K, rows, columns] sums of a per-column and a per-row part."""
        x = x0[members, None] + torch.arange(columns, device=device)  # [K, columns]
        y = y0[members, None] + torch.arange(rows, device=device)  # [K, rows]
        sx, sy = x * SUBPIXEL + SUBPIXEL // 2, y * SUBPIXEL + SUBPIXEL // 2
        a, b, c = a_coef[members], b_coef[members], c_shifted[members]
        edges = [(a[:, i, None] * sx)[:, None, :] + (b[:, i, None] * sy + c[:, i, None])[:, :, None] for i in range(3)]
        inside = torch.minimum(torch.minimum(edges[0], edges[1]), edges[2]) >= 0
        inside &= (x < x0[members, None] + span_x[members, None])[:, None, :]
        inside &= (y < y0[members, None] + span_y[members, None])[:, :, None]
        flat = inside.view(-1).nonzero().squeeze(1)
        triangle = members[flat // (rows * columns)]
        e = torch.stack([edge.view(-1)[flat] for edge in edges], 1) + 1 - table[triangle, 9:12]
        pixel = base[triangle] + (y0[triangle] + flat // columns % rows) * width + x0[triangle] + flat % columns
        # summed in a fixed order, as the CUDA kernel sums them: equal depths, equal winners
        terms = e.float() * depth_over_area[triangle]
        depth = (terms[:, 0] + terms[:, 1]) + terms[:, 2]
        face_id = triangle + 1  # kept triangles are in (view, face) order: ties still go to the lower face
        if prior is not None:
            visible = depth >= prior[pixel]
            pixel, depth, face_id = pixel[visible], depth[visible], face_id[visible]
        zbuffer.scatter_reduce_(0, pixel, torch.trunc(depth * DEPTH_STEPS).long() * MAXINT + face_id, "amin")

    use_kernels = cupy_usable(device)
    if use_kernels:
        rasterize_triangles_cuda(zbuffer, table, x0, y0, span_x, span_y, base, depth_over_area, prior, width,
                                         SUBPIXEL, DEPTH_STEPS, MAXINT)
    else:
        # inside iff every e_i >= owns_i ? 0 : 1: folded into C, so the test is one comparison with 0
        a_coef, b_coef = table[:, 0:9:3], table[:, 1:9:3]
        c_shifted = table[:, 2:9:3] + table[:, 9:12] - 1
        # triangles grouped by bounding-box size class (a few classes, not triangles)
        rows_class, columns_class = size_class(span_y), size_class(span_x)
        # one key per (rows, columns) pair; columns can pass the width (classes round up), hence the base
        base_key = int(columns_class.max()) + 1 if columns_class.numel() else 1
        shape_key = rows_class * base_key + columns_class
        for key in torch.unique(shape_key).tolist():
            rows, columns = divmod(key, base_key)
            members = (shape_key == key).nonzero().squeeze(1)
            # ~60 bytes per candidate pixel in the temporaries; passes of about 2M candidates
            run_chunked(lambda lo, hi, dev: fragments(members[lo:hi], rows, columns), members.numel(),
                        rows * columns * 60, device, limit=max(1, (2 << 20) // (rows * columns)))
    corner_w = V[view[:, None], F[face], 3]  # [K,3]: perspective correction of the barycentrics
    if use_kernels:
        findices, barycentric = resolve_pixels_cuda(zbuffer, init, table, corner_w, face, width, height,
                                                            SUBPIXEL, MAXINT)
    else:
        findices = torch.zeros(views * height * width, dtype=torch.int32, device=device)
        barycentric = torch.zeros(views * height * width, 3, device=device)
        pixel = (zbuffer != init).nonzero().squeeze(1)
        if pixel.numel():
            triangle = zbuffer[pixel] % MAXINT - 1
            findices[pixel] = (face[triangle] + 1).int()
            edges, _ = _coverage(table[triangle], pixel % width, pixel // width % height)
            weights = edges.double() / corner_w[triangle].double()
            barycentric[pixel] = (weights / weights.sum(-1, keepdim=True)).float()
    findices = findices.view(views, height, width)
    return findices, barycentric.view(views, height, width, 3)


def _triangle_table(corners: torch.Tensor, area: torch.Tensor) -> torch.Tensor:
    """Edge functions of K triangles as e_i(x, y) = A_i x + B_i y + C_i in fixed point, oriented so
    that the inside is e >= 0, with each edge's ownership of the points exactly on it.
    corners int64 [K,3,2] (1/SUBPIXEL px), area int64 [K] (signed, twice the area) ->
    int64 [K,12]: A0 B0 C0 A1 B1 C1 A2 B2 C2 and owns0 owns1 owns2 (0/1).

    Edge i is opposite corner i (so e_i / sum(e) is the screen-space barycentric of corner i). On an
    edge (e == 0) the point belongs to the triangle only if the oriented edge points down, or
    right-to-left when level; the neighbour sharing the edge walks it the other way and fails that
    test, so a shared edge has exactly one owner."""
    sign = torch.sign(area)[:, None]
    start = corners.roll(-1, 1)  # corners 1, 2, 0
    delta = (corners.roll(1, 1) - start) * sign[..., None]  # to corners 2, 0, 1: oriented edges [K,3,2]
    a = -delta[..., 1]
    b = delta[..., 0]
    c = -(a * start[..., 0] + b * start[..., 1])
    owns = (delta[..., 1] > 0) | ((delta[..., 1] == 0) & (delta[..., 0] < 0))
    return torch.cat([torch.stack([a, b, c], -1).reshape(-1, 9), owns.long()], 1)


def _coverage(table: torch.Tensor, px: torch.Tensor, py: torch.Tensor):
    """Edge functions e int64 [K,3] at pixel centres px, py [K] and whether the pixel is inside [K]."""
    x = (px * SUBPIXEL + SUBPIXEL // 2)[:, None]
    y = (py * SUBPIXEL + SUBPIXEL // 2)[:, None]
    edges = table[:, 0:9:3] * x + table[:, 1:9:3] * y + table[:, 2:9:3]
    inside = ((edges > 0) | ((edges == 0) & (table[:, 9:12] > 0))).all(1)
    return edges, inside


def interpolate(attributes: torch.Tensor, findices: torch.Tensor, barycentric: torch.Tensor,
                faces: torch.Tensor) -> torch.Tensor:
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


# -- cameras ---------------------------------------------------------------------------------------------

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
    return torch.tensor([[f / aspect, 0, 0, 0], [0, f, 0, 0],
                         [0, 0, (far + near) / (near - far), 2 * far * near / (near - far)], [0, 0, -1, 0]])


def orthographic(half_height: float, aspect: float, near: float, far: float) -> torch.Tensor:
    """OpenGL orthographic projection [4,4] of a view half_height tall (in world units)."""
    return torch.tensor([[1 / (half_height * aspect), 0, 0, 0], [0, 1 / half_height, 0, 0],
                         [0, 0, -2 / (far - near), -(far + near) / (far - near)], [0, 0, 0, 1]])


def orbit_cameras(azimuths, elevations, distance: float) -> torch.Tensor:
    """View matrices [B,4,4] of cameras on a sphere around the origin looking at it; azimuth 0 looks
    from +z, 90 from +x; elevation 90 from above (+y)."""
    azimuth = torch.tensor(azimuths, dtype=torch.float32).deg2rad()
    elevation = torch.tensor(elevations, dtype=torch.float32).deg2rad()
    eye = torch.stack([torch.cos(elevation) * torch.sin(azimuth), torch.sin(elevation),
                       torch.cos(elevation) * torch.cos(azimuth)], -1) * distance
    # looking straight up or down, "up" is the -z/+z axis instead of +y
    up = torch.where((elevation.abs() > math.radians(89.9))[:, None], torch.tensor([0.0, 0.0, -1.0]) *
                     torch.sign(elevation)[:, None], torch.tensor([0.0, 1.0, 0.0]))
    return look_at(eye, torch.zeros_like(eye), up)


# The depth test of utils/mesh_rasterizer.py: one thread per (triangle, 8x8 block of its bounding
# box); packed (depth, face) values meet in the z-buffer through a 64-bit atomicMin.
_RASTERIZE_SOURCE = r"""
extern "C" __global__ void rasterize_blocks(
        const long long* pair_triangle, const long long* pair_rank, long long n_pairs,
        const long long* table, const long long* x0, const long long* y0, const long long* span_x,
        const long long* span_y, const long long* base, const float* depth_over_area, const float* prior,
        int has_prior, long long* zbuffer, int width, int subpixel, int block, int depth_steps,
        long long id_base) {
    long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n_pairs) return;
    long long k = pair_triangle[q], rank = pair_rank[q];
    long long blocks_x = (span_x[k] + block - 1) / block;
    long long bx = x0[k] + (rank % blocks_x) * block, by = y0[k] + (rank / blocks_x) * block;
    long long x_end = min(bx + block, x0[k] + span_x[k]), y_end = min(by + block, y0[k] + span_y[k]);
    const long long* e = table + k * 12;  // A0 B0 C0 A1 B1 C1 A2 B2 C2 owns0 owns1 owns2
    float d0 = depth_over_area[k * 3], d1 = depth_over_area[k * 3 + 1], d2 = depth_over_area[k * 3 + 2];
    long long id = k + 1;  // triangles are in (view, face) order, so ties still go to the lower face
    for (long long y = by; y < y_end; ++y) {
        long long sy = y * subpixel + subpixel / 2;
        for (long long x = bx; x < x_end; ++x) {
            long long sx = x * subpixel + subpixel / 2;
            long long e0 = e[0] * sx + e[1] * sy + e[2];
            long long e1 = e[3] * sx + e[4] * sy + e[5];
            long long e2 = e[6] * sx + e[7] * sy + e[8];
            // on an edge (e == 0) only the edge's owner draws the pixel
            if (e0 < 1 - e[9] || e1 < 1 - e[10] || e2 < 1 - e[11]) continue;
            float depth = ((float)e0 * d0 + (float)e1 * d1) + (float)e2 * d2;
            long long pixel = base[k] + y * width + x;
            if (has_prior && !(depth >= prior[pixel])) continue;
            long long packed = (long long)truncf(depth * (float)depth_steps) * id_base + id;
            atomicMin(zbuffer + pixel, packed);
        }
    }
}

// findices and perspective-correct barycentrics of every pixel from the z-buffer's winners
extern "C" __global__ void resolve_pixels(
        const long long* zbuffer, long long n, long long empty, const long long* table, const float* corner_w,
        const long long* face, int width, int height, int subpixel, long long id_base, int* findices,
        float* barycentric) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long z = zbuffer[i];
    if (z == empty) {
        findices[i] = 0;
        barycentric[i * 3] = 0.0f; barycentric[i * 3 + 1] = 0.0f; barycentric[i * 3 + 2] = 0.0f;
        return;
    }
    long long k = (z % id_base + id_base) % id_base - 1;  // floor modulo, as torch's %, for negative depths
    findices[i] = (int)(face[k] + 1);
    long long sx = (i % width) * subpixel + subpixel / 2, sy = (i / width % height) * subpixel + subpixel / 2;
    const long long* e = table + k * 12;
    double w0 = (double)(e[0] * sx + e[1] * sy + e[2]) / (double)corner_w[k * 3];
    double w1 = (double)(e[3] * sx + e[4] * sy + e[5]) / (double)corner_w[k * 3 + 1];
    double w2 = (double)(e[6] * sx + e[7] * sy + e[8]) / (double)corner_w[k * 3 + 2];
    double total = (w0 + w1) + w2;
    barycentric[i * 3] = (float)(w0 / total);
    barycentric[i * 3 + 1] = (float)(w1 / total);
    barycentric[i * 3 + 2] = (float)(w2 / total);
}
"""


def rasterize_triangles_cuda(zbuffer: torch.Tensor, table: torch.Tensor, x0: torch.Tensor, y0: torch.Tensor,
                        span_x: torch.Tensor, span_y: torch.Tensor, base: torch.Tensor,
                        depth_over_area: torch.Tensor, prior: torch.Tensor | None, width: int, subpixel: int,
                        depth_steps: int, id_base: int) -> None:
    """Depth-test K triangles into zbuffer int64 [B*H*W] (contiguous), in place, with the packed
    trunc(depth * depth_steps) * id_base + triangle + 1 rule of mesh_rasterizer: table int64 [K,12]
    (edge functions and ownership), bounding boxes x0, y0, span_x, span_y int64 [K], base int64 [K]
    (view * H * W), depth_over_area float [K,3], prior float [B*H*W] or None."""
    blocks = ((span_x + CUDA_BLOCK - 1) // CUDA_BLOCK) * ((span_y + CUDA_BLOCK - 1) // CUDA_BLOCK)
    pair_triangle, pair_rank = expand_counts(blocks)
    n_pairs = pair_triangle.numel()
    if n_pairs == 0:
        return
    has_prior = prior is not None
    prior = prior.float() if has_prior else torch.zeros(1, device=zbuffer.device)
    args = cuda.arrays(pair_triangle, pair_rank) + [np.int64(n_pairs)]
    args += cuda.arrays(table, x0, y0, span_x, span_y, base, depth_over_area.float(), prior)
    if not zbuffer.is_contiguous():
        raise ValueError("zbuffer must be contiguous: the kernel writes it in place")
    args += [np.int32(has_prior), *cuda.arrays(zbuffer), np.int32(width), np.int32(subpixel), np.int32(CUDA_BLOCK),
             np.int32(depth_steps), np.int64(id_base)]
    threads = 128
    with cuda.stream():
        cuda.kernel(_RASTERIZE_SOURCE, "rasterize_blocks")(((n_pairs + threads - 1) // threads,), (threads,), tuple(args))


def resolve_pixels_cuda(zbuffer: torch.Tensor, empty: int, table: torch.Tensor, corner_w: torch.Tensor,
                   face: torch.Tensor, width: int, height: int, subpixel: int, id_base: int):
    """findices int32 [B*H*W] (face + 1, 0 where zbuffer holds `empty`) and barycentric float
    [B*H*W,3] from the z-buffer of rasterize_triangles; corner_w float [K,3] (clip w of each
    triangle's corners), face int64 [K] (the face of each kept triangle)."""
    n = zbuffer.numel()
    findices = torch.empty(n, dtype=torch.int32, device=zbuffer.device)
    barycentric = torch.empty(n, 3, dtype=torch.float32, device=zbuffer.device)
    args = cuda.arrays(zbuffer) + [np.int64(n), np.int64(empty)] + cuda.arrays(table, corner_w.float(), face)
    args += [np.int32(width), np.int32(height), np.int32(subpixel), np.int64(id_base), *cuda.arrays(findices, barycentric)]
    threads = 256
    with cuda.stream():
        cuda.kernel(_RASTERIZE_SOURCE, "resolve_pixels")(((n + threads - 1) // threads,), (threads,), tuple(args))
    return findices, barycentric
