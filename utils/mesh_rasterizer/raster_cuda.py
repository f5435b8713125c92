"""The CUDA path of raster.rasterize_views: the depth test and the resolve as CuPy kernels, and their
launchers. The kernels' `#define`s are generated from constants.py, which the torch path and numba's
loops read too.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import cuda
from .constants import CUDA_BLOCK, DEPTH_STEPS, EMPTY, FIXED, ID_BASE, LAUNCH_BLOCKS, LAUNCH_PIXELS

# The set-up of a triangle (screen corners, edge terms, reciprocal of the area) is recomputed from V and F
# by each thread that needs it, with the torch path's float32 arithmetic in the same order, so both paths
# give the same findices and barycentrics.
_DEFINES = "".join(
    f"#define {name} {value}LL\n"
    for name, value in (
        ("ID_BASE", ID_BASE),
        ("EMPTY", EMPTY),
        ("FIXED", FIXED),
        ("DEPTH_STEPS", DEPTH_STEPS),
        ("CUDA_BLOCK", CUDA_BLOCK),
    )
)
_RASTERIZE_SOURCE = (
    _DEFINES
    + r"""
struct Triangle { float ax, ay, acx, acy, abx, aby, inverse_area, z[3], w[3]; };

// triangle k = view * face_count + face of V float [B,N,4], faces int64 [M,3]
__device__ Triangle set_up(const float* V, const long long* faces, long long k, long long vertex_count,
                           long long face_count, int width, int height) {
    Triangle t;
    float x[3], y[3];
    long long view = k / face_count, face = k % face_count;
    for (int i = 0; i < 3; ++i) {
        const float* v = V + (view * vertex_count + faces[face * 3 + i]) * 4;
        x[i] = (v[0] / v[3] * 0.5f + 0.5f) * (float)(width - 1) + 0.5f;
        y[i] = (v[1] / v[3] * 0.5f + 0.5f) * (float)(height - 1) + 0.5f;
        t.z[i] = v[2] / v[3] * 0.49999f + 0.5f;
        t.w[i] = v[3];
    }
    t.ax = x[0]; t.ay = y[0];
    t.acx = x[2] - x[0]; t.acy = y[2] - y[0]; t.abx = x[1] - x[0]; t.aby = y[1] - y[0];
    t.inverse_area = 1.0f / (t.acx * t.aby - t.abx * t.acy);
    return t;
}

// 1 - beta - gamma rounded once, through an exact int64 fixed point (raster._alpha)
__device__ float alpha_of(float beta, float gamma) {
    long long fixed = (long long)(beta * (float)FIXED) + (long long)(gamma * (float)FIXED);
    return (float)(FIXED - fixed) / (float)FIXED;
}

// one thread per (triangle, CUDA_BLOCK x CUDA_BLOCK pixels of its box); packed (depth, triangle) keys meet in
// the z-buffer through a 64-bit atomicMin
extern "C" __global__ void rasterize_triangles(
        const float* V, const long long* faces, long long vertex_count, long long face_count,
        const long long* box, const long long* block_end, long long triangle_count, long long first_block,
        long long stop_block, const float* prior, int has_prior, long long* zbuffer, int width, int height) {
    long long q = first_block + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= stop_block) return;
    long long low = 0, high = triangle_count - 1;  // the triangle of block q: first k with block_end[k] > q
    while (low < high) {
        long long middle = (low + high) / 2;
        if (block_end[middle] > q) high = middle; else low = middle + 1;
    }
    long long k = low, rank = q - (k > 0 ? block_end[k - 1] : 0);
    Triangle t = set_up(V, faces, k, vertex_count, face_count, width, height);
    // box [4,K]: first column, first row, last column, last row
    long long first_x = box[k], first_y = box[triangle_count + k];
    long long last_x = box[2 * triangle_count + k], last_y = box[3 * triangle_count + k];
    long long blocks_x = (last_x - first_x) / CUDA_BLOCK + 1;
    long long x0 = first_x + rank % blocks_x * CUDA_BLOCK, y0 = first_y + rank / blocks_x * CUDA_BLOCK;
    long long x_end = min(x0 + CUDA_BLOCK - 1, last_x), y_end = min(y0 + CUDA_BLOCK - 1, last_y);
    long long view_base = k / face_count * height * width;
    for (long long y = y0; y <= y_end; ++y) {
        float dy = ((float)y + 0.5f) - t.ay;
        float row_c = t.acx * dy, row_b = t.abx * dy;
        for (long long x = x0; x <= x_end; ++x) {
            float dx = ((float)x + 0.5f) - t.ax;
            float beta = (row_c - dx * t.acy) * t.inverse_area;
            float gamma = (dx * t.aby - row_b) * t.inverse_area;
            if (!(beta >= 0.0f && gamma >= 0.0f && beta <= 1.0f && gamma <= 1.0f)) continue;
            float alpha = alpha_of(beta, gamma);
            if (!(alpha >= 0.0f)) continue;
            float depth = (alpha * t.z[0] + beta * t.z[1]) + gamma * t.z[2];
            float scaled = depth * (float)DEPTH_STEPS;
            long long pixel = view_base + y * width + x;
            if (has_prior ? !(depth >= prior[pixel] && scaled > -1.0f) : !(depth >= 0.0f)) continue;
            long long quantised = (long long)fminf(scaled, 2147483648.0f);
            atomicMin(zbuffer + pixel, quantised * ID_BASE + k);
        }
    }
}

// findices and perspective-correct barycentrics of every pixel from the z-buffer's winners
extern "C" __global__ void resolve_pixels(
        const long long* zbuffer, long long first_pixel, long long stop_pixel, const float* V,
        const long long* faces, long long vertex_count, long long face_count, int width, int height,
        int* findices, float* barycentric) {
    long long i = first_pixel + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= stop_pixel) return;
    long long z = zbuffer[i];
    if (z == EMPTY) {
        findices[i] = 0;
        barycentric[i * 3] = 0.0f; barycentric[i * 3 + 1] = 0.0f; barycentric[i * 3 + 2] = 0.0f;
        return;
    }
    long long k = z % ID_BASE;
    findices[i] = (int)(k % face_count + 1);
    Triangle t = set_up(V, faces, k, vertex_count, face_count, width, height);
    float dx = ((float)(i % width) + 0.5f) - t.ax, dy = ((float)(i / width % height) + 0.5f) - t.ay;
    float beta = (t.acx * dy - dx * t.acy) * t.inverse_area;
    float gamma = (dx * t.aby - t.abx * dy) * t.inverse_area;
    float w0 = alpha_of(beta, gamma) / t.w[0], w1 = beta / t.w[1], w2 = gamma / t.w[2];
    float inverse_total = 1.0f / ((w0 + w1) + w2);
    barycentric[i * 3] = w0 * inverse_total;
    barycentric[i * 3 + 1] = w1 * inverse_total;
    barycentric[i * 3 + 2] = w2 * inverse_total;
}
"""
)


def rasterize_triangles_cuda(
    zbuffer: torch.Tensor,
    V: torch.Tensor,
    faces: torch.Tensor,
    box: torch.Tensor,
    block_end: torch.Tensor,
    total: int,
    prior: torch.Tensor | None,
    width: int,
    height: int,
) -> None:
    """Depth-test the triangles of V float32 [B,N,4], faces int64 [M,3] into zbuffer int64 [B*H*W]
    (contiguous), in place, with the torch path's keys: box int64 [4,B*M] (first and last candidate
    column and row), block_end int64 [B*M] (running total of CUDA_BLOCK^2 blocks over the boxes,
    `total` at the end), prior float32 [B*H*W] (depth threshold) or None. All contiguous (the kernel
    reads them as flat arrays). Launches of at most LAUNCH_BLOCKS threads, one after another."""
    for name, tensor in (
        ("zbuffer", zbuffer),
        ("V", V),
        ("faces", faces),
        ("box", box),
        ("block_end", block_end),
        ("prior", prior),
    ):
        if tensor is not None and not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous: the kernel reads it as a flat array")
    has_prior = prior is not None
    prior = prior if has_prior else torch.zeros(1, device=zbuffer.device)
    head = cuda.arrays(V, faces) + [np.int64(V.shape[1]), np.int64(faces.shape[0])]
    head += cuda.arrays(box, block_end) + [np.int64(block_end.numel())]
    tail = cuda.arrays(prior) + [np.int32(has_prior), *cuda.arrays(zbuffer), np.int32(width), np.int32(height)]
    threads = 128
    launch = cuda.kernel(_RASTERIZE_SOURCE, "rasterize_triangles")
    with cuda.stream(zbuffer.device):
        for first in range(0, total, LAUNCH_BLOCKS):
            stop = min(total, first + LAUNCH_BLOCKS)
            launch(
                ((stop - first + threads - 1) // threads,),
                (threads,),
                tuple(head + [np.int64(first), np.int64(stop)] + tail),
            )


def resolve_pixels_cuda(zbuffer: torch.Tensor, V: torch.Tensor, faces: torch.Tensor, width: int, height: int):
    """findices int32 [B*H*W] (face + 1, 0 where zbuffer holds EMPTY) and barycentric float32
    [B*H*W,3] from the z-buffer of rasterize_triangles_cuda, for V float32 [B,N,4], faces int64 [M,3]
    (all contiguous). Launches of at most LAUNCH_PIXELS threads, one after another."""
    n = zbuffer.numel()
    findices = torch.empty(n, dtype=torch.int32, device=zbuffer.device)
    barycentric = torch.empty(n, 3, dtype=torch.float32, device=zbuffer.device)
    tail = [
        *cuda.arrays(V, faces),
        np.int64(V.shape[1]),
        np.int64(faces.shape[0]),
        np.int32(width),
        np.int32(height),
        *cuda.arrays(findices, barycentric),
    ]
    head = cuda.arrays(zbuffer)
    threads = 256
    launch = cuda.kernel(_RASTERIZE_SOURCE, "resolve_pixels")
    with cuda.stream(zbuffer.device):
        for first in range(0, n, LAUNCH_PIXELS):
            stop = min(n, first + LAUNCH_PIXELS)
            launch(
                ((stop - first + threads - 1) // threads,),
                (threads,),
                tuple(head + [np.int64(first), np.int64(stop)] + tail),
            )
    return findices, barycentric
