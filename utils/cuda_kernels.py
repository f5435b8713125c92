"""CuPy RawKernels for the hot loops on NVIDIA GPUs: compositing binned primitives in their tiles,
and the depth test and pixel resolve of the triangle rasterizer.

They are compiled at first use by NVRTC (shipped inside the cupy-cuda* wheels: no compiler to
install) and read torch tensors in place through DLPack, on torch's current stream. Each mirrors its
torch path operation for operation, with fused multiply-adds off (--fmad=false) so that rounding
matches too; tests/test_cuda_kernels.py compares the two (on a GPU, and in CI on the CPU through
tests/cuda_emulator.py). Callers check `device.cupy_usable` first.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from .batching import expand_counts

_BLOCK = 8  # rasterize_blocks: pixels per side of the bounding-box block one thread tests

# Coverage per kind and source-over compositing, as utils/gpu_rendering.py computes them: one
# block per tile (one thread per pixel); each thread walks its tile's pairs in drawing order.
_COMPOSITE_SOURCE = r"""
#define SEGMENT 0
#define BOX_FILL 1
#define BOX_STROKE 2
#define DISC 3
#define SPRITE 4

__device__ __forceinline__ float from_distance(float d) { return fminf(fmaxf(0.5f - d, 0.0f), 1.0f); }

// coverage of a rounded box at |offset from centre| ax, ay (see _box_fill)
__device__ float box_fill(float ax, float ay, float hx, float hy, float r, bool near_corner) {
    if (near_corner && r >= 1.0f) {
        float qx = ax - (hx - r), qy = ay - (hy - r);
        float cx = fmaxf(qx, 0.0f), cy = fmaxf(qy, 0.0f);
        return from_distance(sqrtf(cx * cx + cy * cy) + fminf(fmaxf(qx, qy), 0.0f) - r);
    }
    return from_distance(ax - hx) * from_distance(ay - hy);
}

__device__ float coverage(long long kind, const float* p, float ox, float oy, float gx, float gy, float tile_last,
                          const float* atlas, int atlas_h, int atlas_w) {
    if (kind == SEGMENT) {
        float half = fmaxf(p[4], 0.5f), weight = fminf(fmaxf(2.0f * p[4], 0.0f), 1.0f);
        float dx = p[2] - p[0], dy = p[3] - p[1];
        float length = fmaxf(sqrtf(dx * dx + dy * dy), 1e-12f);
        float ux = dx / length, uy = dy / length;
        float px = (ox - p[0]) + gx, py = (oy - p[1]) + gy;
        float along = px * ux + py * uy;
        float across = fabsf(px * uy - py * ux);
        float beyond = fmaxf(-along, along - length);
        float value;
        if (p[5] > 0.0f) {
            value = from_distance(across - half) * from_distance(beyond);
        } else {
            float b = fmaxf(beyond, 0.0f);
            value = from_distance(sqrtf(b * b + across * across) - half);
        }
        return value * weight;
    }
    if (kind == BOX_FILL || kind == BOX_STROKE) {
        float ax = fabsf((ox - p[0]) + gx), ay = fabsf((oy - p[1]) + gy);
        float hx = p[2], hy = p[3], r = p[4];
        // the torch path decides "near a rounded corner" once per tile, from the tile's extreme offsets
        float far_x = fmaxf(fabsf(ox - p[0]), fabsf((ox - p[0]) + tile_last));
        float far_y = fmaxf(fabsf(oy - p[1]), fabsf((oy - p[1]) + tile_last));
        bool near_corner = (far_x >= hx - r - 1.0f) && (far_y >= hy - r - 1.0f);
        if (kind == BOX_FILL) return box_fill(ax, ay, hx, hy, r, near_corner);
        float half = fmaxf(p[5], 0.5f), weight = fminf(fmaxf(2.0f * p[5], 0.0f), 1.0f);
        float inner = box_fill(ax, ay, hx - half, hy - half, fmaxf(r - half, 0.0f), near_corner);
        if (!(hx > half && hy > half)) inner = 0.0f;
        float outline = fmaxf(box_fill(ax, ay, hx + half, hy + half, r + half, near_corner) - inner, 0.0f) * weight;
        float corner = p[6];
        if (corner > 0.0f) {
            float keep_x = fminf(fmaxf((ax - (hx - corner)) + 0.5f, 0.0f), 1.0f);
            float keep_y = fminf(fmaxf((ay - (hy - corner)) + 0.5f, 0.0f), 1.0f);
            outline = outline * (keep_x * keep_y);
        }
        return outline;
    }
    if (kind == DISC) {
        float dx = (ox - p[0]) + gx, dy = (oy - p[1]) + gy;
        float distance = sqrtf(dx * dx + dy * dy) - p[2];
        if (p[3] > 0.0f) {
            float half = fmaxf(p[3], 0.5f), weight = fminf(fmaxf(2.0f * p[3], 0.0f), 1.0f);
            return from_distance(fabsf(distance) - half) * weight;
        }
        return from_distance(distance);
    }
    if (kind == SPRITE) {
        long long u = (long long)rintf(((ox - 0.5f) - p[0]) + gx);
        long long v = (long long)rintf(((oy - 0.5f) - p[1]) + gy);
        if (u < 0 || v < 0 || u >= (long long)p[2] || v >= (long long)p[3]) return 0.0f;
        long long x = min(max((long long)p[4] + u, 0LL), (long long)atlas_w - 1);
        long long y = min(max((long long)p[5] + v, 0LL), (long long)atlas_h - 1);
        return atlas[y * atlas_w + x];
    }
    return 0.0f;
}

extern "C" __global__ void composite_tiles(
        const long long* tile_id, const long long* tile_start, const long long* tile_count, long long n_tiles,
        const long long* primitive, const long long* kind, const float* params, const float* color,
        const long long* group, const float* atlas, int atlas_h, int atlas_w,
        float* image, float* layer, int height, int width, int channels, int tiles_y, int tiles_x, int tile) {
    long long t = blockIdx.x;
    if (t >= n_tiles) return;
    int gx = threadIdx.x % tile, gy = threadIdx.x / tile;
    long long id = tile_id[t];
    long long frame = id / ((long long)tiles_y * tiles_x);
    int rest = (int)(id % ((long long)tiles_y * tiles_x));
    int row = rest / tiles_x, column = rest % tiles_x;
    int x = column * tile + gx, y = row * tile + gy;
    if (x >= width || y >= height) return;
    float ox = (float)(column * tile) + 0.5f, oy = (float)(row * tile) + 0.5f;
    float tile_last = (float)(tile - 1);

    // premultiplied layer, built bottom to top; a group's pairs merge by maximum coverage first
    float lr = 0.0f, lg = 0.0f, lb = 0.0f, la = 0.0f;
    long long current = -1;
    float merged = 0.0f, cr = 0.0f, cg = 0.0f, cb = 0.0f, ca = 0.0f;
    long long start = tile_start[t], count = tile_count[t];
    for (long long k = 0; k <= count; ++k) {
        long long g = -2;
        float value = 0.0f;
        long long p = 0;
        if (k < count) {
            p = primitive[start + k];
            g = group[p];
            value = coverage(kind[p], params + p * 10, ox, oy, (float)gx, (float)gy, tile_last, atlas, atlas_h, atlas_w);
        }
        if (k < count && g == current) {
            merged = fmaxf(merged, value);
            continue;
        }
        if (k > 0) {  // the shape below is complete: source-over
            float a = merged * ca, keep = 1.0f - a;
            lr = a * cr + keep * lr; lg = a * cg + keep * lg; lb = a * cb + keep * lb; la = a + keep * la;
        }
        if (k < count) {
            current = g;
            merged = value;
            cr = color[p * 4]; cg = color[p * 4 + 1]; cb = color[p * 4 + 2]; ca = color[p * 4 + 3];
        }
    }
    long long pixel = (frame * height + y) * (long long)width + x;
    float* out = layer + pixel * 4;
    out[0] = lr; out[1] = lg; out[2] = lb; out[3] = la;
    float* base = image + pixel * channels;
    float keep = 1.0f - la;
    base[0] = lr + base[0] * keep; base[1] = lg + base[1] * keep; base[2] = lb + base[2] * keep;
    if (channels == 4) base[3] = base[3] * keep + la;
}
"""

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


@functools.cache
def _kernel(source: str, name: str):
    import cupy

    return cupy.RawKernel(source, name, options=("--fmad=false", "--std=c++14"))


def _stream():
    """torch's current stream as a CuPy stream, so that kernels queue behind torch's work."""
    import cupy

    stream = torch.cuda.current_stream()
    if hasattr(cupy.cuda.Stream, "from_external") and hasattr(stream, "__cuda_stream__"):  # CuPy 14 on
        return cupy.cuda.Stream.from_external(stream)
    return cupy.cuda.ExternalStream(stream.cuda_stream)


def _arrays(*tensors: torch.Tensor):
    """Zero-copy CuPy views of contiguous torch tensors."""
    import cupy

    return [cupy.from_dlpack(t.contiguous()) for t in tensors]


def composite_tiles(image: torch.Tensor, layer: torch.Tensor, tile_id: torch.Tensor, primitive: torch.Tensor,
                    kind: torch.Tensor, params: torch.Tensor, color: torch.Tensor, group: torch.Tensor,
                    atlas: torch.Tensor | None, tile: int) -> None:
    """Composite sorted (tile, primitive) pairs into image float [B,H,W,C] and layer float [B,H,W,4]
    (both contiguous, on one CUDA device), in place. tile_id, primitive int64 [Q] as bin_tiles
    returns them; kind int64 [P], params float [P,10], color float [P,4], group int64 [P]."""
    batch, height, width, channels = image.shape
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)
    unique, counts = torch.unique_consecutive(tile_id, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    if atlas is None:
        atlas = torch.zeros(1, 1, device=image.device)
    atlas = atlas.float().contiguous()
    args = _arrays(unique, starts, counts)
    args.append(np.int64(unique.numel()))
    args += _arrays(primitive, kind.long(), params.float(), color.float(), group.long(), atlas)
    args += [np.int32(atlas.shape[0]), np.int32(atlas.shape[1])]
    if not (image.is_contiguous() and layer.is_contiguous()):
        raise ValueError("image and layer must be contiguous: the kernel writes them in place")
    args += _arrays(image, layer)
    args += [np.int32(v) for v in (height, width, channels, tiles_y, tiles_x, tile)]
    with _stream():
        _kernel(_COMPOSITE_SOURCE, "composite_tiles")((unique.numel(),), (tile * tile,), tuple(args))


def rasterize_triangles(zbuffer: torch.Tensor, table: torch.Tensor, x0: torch.Tensor, y0: torch.Tensor,
                        span_x: torch.Tensor, span_y: torch.Tensor, base: torch.Tensor,
                        depth_over_area: torch.Tensor, prior: torch.Tensor | None, width: int, subpixel: int,
                        depth_steps: int, id_base: int) -> None:
    """Depth-test K triangles into zbuffer int64 [B*H*W] (contiguous), in place, with the packed
    trunc(depth * depth_steps) * id_base + triangle + 1 rule of mesh_rasterizer: table int64 [K,12]
    (edge functions and ownership), bounding boxes x0, y0, span_x, span_y int64 [K], base int64 [K]
    (view * H * W), depth_over_area float [K,3], prior float [B*H*W] or None."""
    blocks = ((span_x + _BLOCK - 1) // _BLOCK) * ((span_y + _BLOCK - 1) // _BLOCK)
    pair_triangle, pair_rank = expand_counts(blocks)
    n_pairs = pair_triangle.numel()
    if n_pairs == 0:
        return
    has_prior = prior is not None
    prior = prior.float() if has_prior else torch.zeros(1, device=zbuffer.device)
    args = _arrays(pair_triangle, pair_rank) + [np.int64(n_pairs)]
    args += _arrays(table, x0, y0, span_x, span_y, base, depth_over_area.float(), prior)
    if not zbuffer.is_contiguous():
        raise ValueError("zbuffer must be contiguous: the kernel writes it in place")
    args += [np.int32(has_prior), *_arrays(zbuffer), np.int32(width), np.int32(subpixel), np.int32(_BLOCK),
             np.int32(depth_steps), np.int64(id_base)]
    threads = 128
    with _stream():
        _kernel(_RASTERIZE_SOURCE, "rasterize_blocks")(((n_pairs + threads - 1) // threads,), (threads,), tuple(args))


def resolve_pixels(zbuffer: torch.Tensor, empty: int, table: torch.Tensor, corner_w: torch.Tensor,
                   face: torch.Tensor, width: int, height: int, subpixel: int, id_base: int):
    """findices int32 [B*H*W] (face + 1, 0 where zbuffer holds `empty`) and barycentric float
    [B*H*W,3] from the z-buffer of rasterize_triangles; corner_w float [K,3] (clip w of each
    triangle's corners), face int64 [K] (the face of each kept triangle)."""
    n = zbuffer.numel()
    findices = torch.empty(n, dtype=torch.int32, device=zbuffer.device)
    barycentric = torch.empty(n, 3, dtype=torch.float32, device=zbuffer.device)
    args = _arrays(zbuffer) + [np.int64(n), np.int64(empty)] + _arrays(table, corner_w.float(), face)
    args += [np.int32(width), np.int32(height), np.int32(subpixel), np.int64(id_base), *_arrays(findices, barycentric)]
    threads = 256
    with _stream():
        _kernel(_RASTERIZE_SOURCE, "resolve_pixels")(((n + threads - 1) // threads,), (threads,), tuple(args))
    return findices, barycentric
