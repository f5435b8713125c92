"""The depth test and resolve of raster.py on the CPU, compiled by numba: each triangle's
candidate pixels walked one by one with the torch path's float32 arithmetic (the same values bit for
bit, so the same winners), the nearest key kept in the z-buffer; then each pixel's winner gives its
face index and perspective-correct barycentrics, again as the torch path computes them, with no
frame-sized temporaries. Bands of rows run in parallel on as many threads as torch uses (ComfyUI's
and the user's setting; never more); each band takes every triangle's rows in it, so no two threads
write one pixel. Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..core.device import on_huge_pages
from ..core.numba import falls_back, torch_threads
from ..core.numba import jit as _jit
from .constants import DEPTH_STEPS, EMPTY, FIXED, ID_BASE

BANDS_PER_THREAD = 4  # bands of rows per thread: evens out meshes that fill part of the frame


@_jit(parallel=True)
def _depth_test(zbuffer, triangles, box, drawn, prior, has_prior, face_count, width, height, bands):
    """The drawn triangles' fragments (see raster._depth_test) into zbuffer, `bands` bands of
    rows in parallel."""
    pixels = height * width
    for band in numba.prange(bands):
        band_first, band_last = band * height // bands, (band + 1) * height // bands - 1
        for k in range(drawn.shape[0]):
            t = drawn[k]
            first_y, last_y = max(box[1, t], band_first), min(box[3, t], band_last)
            if first_y > last_y:
                continue
            ax, ay, acx, acy, abx, aby, bound = (
                triangles[0, t],
                triangles[1, t],
                triangles[2, t],
                triangles[3, t],
                triangles[4, t],
                triangles[5, t],
                triangles[6, t],
            )
            inverse, z0, z1, z2 = triangles[7, t], triangles[8, t], triangles[9, t], triangles[10, t]
            base = t // face_count * pixels
            for y in range(first_y, last_y + 1):
                dy = np.float32(y + 0.5) - ay
                row_c, row_b = acx * dy, abx * dy
                for x in range(box[0, t], box[2, t] + 1):
                    dx = np.float32(x + 0.5) - ax
                    beta_area = row_c - dx * acy
                    gamma_area = dx * aby - row_b
                    # the torch path's superset test, then its exact inside test, depth and key
                    if not (min(beta_area, gamma_area) >= 0 and beta_area + gamma_area <= bound):
                        continue
                    beta, gamma = beta_area * inverse, gamma_area * inverse
                    fixed = np.int64(beta * np.float32(FIXED)) + np.int64(gamma * np.float32(FIXED))
                    alpha = np.float32(FIXED - fixed) * np.float32(1.0 / FIXED)
                    depth = (alpha * z0 + beta * z1) + gamma * z2
                    scaled = depth * np.float32(DEPTH_STEPS)
                    pixel = base + y * width + x
                    if has_prior:
                        visible = alpha >= 0 and depth >= prior[pixel] and scaled > -1
                    else:
                        visible = alpha >= 0 and depth >= 0
                    if visible:
                        key = np.int64(min(scaled, np.float32(2.0**31))) * ID_BASE + t
                        if key < zbuffer[pixel]:
                            zbuffer[pixel] = key


@_jit(parallel=True)
def _resolve(zbuffer, triangles, face_count, width, height, findices, barycentric):
    """Each pixel's winner to its face index + 1 and barycentrics (see raster._resolve)."""
    for row in numba.prange(zbuffer.shape[0] // width):
        y = row % height
        for x in range(width):
            pixel = row * width + x
            if zbuffer[pixel] == EMPTY:
                findices[pixel] = 0
                barycentric[pixel, 0] = barycentric[pixel, 1] = barycentric[pixel, 2] = 0.0
                continue
            t = zbuffer[pixel] % ID_BASE
            dx = np.float32(x + 0.5) - triangles[0, t]
            dy = np.float32(y + 0.5) - triangles[1, t]
            beta = (triangles[2, t] * dy - dx * triangles[3, t]) * triangles[7, t]
            gamma = (dx * triangles[5, t] - triangles[4, t] * dy) * triangles[7, t]
            fixed = np.int64(beta * np.float32(FIXED)) + np.int64(gamma * np.float32(FIXED))
            alpha = np.float32(FIXED - fixed) * np.float32(1.0 / FIXED)
            w0, w1, w2 = alpha / triangles[11, t], beta / triangles[12, t], gamma / triangles[13, t]
            scale = np.float32(1.0) / ((w0 + w1) + w2)
            barycentric[pixel, 0], barycentric[pixel, 1], barycentric[pixel, 2] = w0 * scale, w1 * scale, w2 * scale
            findices[pixel] = t % face_count + 1


@falls_back
def rasterize(
    zbuffer: torch.Tensor,
    triangles: torch.Tensor,
    box: torch.Tensor,
    counts: torch.Tensor,
    prior: torch.Tensor | None,
    face_count: int,
    width: int,
    height: int,
):
    """raster's depth test into zbuffer int64 [B*H*W] (CPU, filled with EMPTY), from the
    triangles' set-up float32 [14,K], box int64 [4,K] and counts [K] (0: not drawn), prior float32
    [B*H*W] or None; then its resolve: findices int32 [B*H*W], barycentric float32 [B*H*W,3]. None
    where numba failed (see core.numba.falls_back)."""
    depth_test(zbuffer, triangles, box, counts, prior, face_count, width, height)
    return resolve(zbuffer, triangles, face_count, width, height)


def resolve(zbuffer: torch.Tensor, triangles: torch.Tensor, face_count: int, width: int, height: int):
    """raster._resolve on the CPU: findices int32 [B*H*W], barycentric float32 [B*H*W,3]."""
    torch_threads()
    findices = on_huge_pages(torch.empty(zbuffer.shape[0], dtype=torch.int32))
    barycentric = on_huge_pages(torch.empty(zbuffer.shape[0], 3))
    _resolve(
        zbuffer.numpy(),
        triangles.contiguous().numpy(),
        face_count,
        width,
        height,
        findices.numpy(),
        barycentric.numpy(),
    )
    return findices, barycentric


def depth_test(
    zbuffer: torch.Tensor,
    triangles: torch.Tensor,
    box: torch.Tensor,
    counts: torch.Tensor,
    prior: torch.Tensor | None,
    face_count: int,
    width: int,
    height: int,
) -> None:
    """raster._depth_test's result into zbuffer int64 [B*H*W] (CPU), from the triangles'
    set-up float32 [14,K], box int64 [4,K] and counts [K] (0: not drawn); prior float32 [B*H*W] or None."""
    threads = torch_threads()
    drawn = torch.nonzero(counts).squeeze(1).numpy()
    bands = max(1, min(height, threads * BANDS_PER_THREAD if threads > 1 else 1))
    _depth_test(
        zbuffer.numpy(),
        triangles.contiguous().numpy(),
        box.contiguous().numpy(),
        drawn,
        prior.numpy() if prior is not None else np.zeros(1, np.float32),
        prior is not None,
        face_count,
        width,
        height,
        bands,
    )
