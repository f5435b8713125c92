"""The rasterizer of raster.py on the CPU, compiled by numba: the triangles' set-up, depth test and
resolve with the torch path's float32 arithmetic (the same values bit for bit, so the same winners),
read through the face indices from one screen-space copy of the vertices, so that no per-triangle
copy of the corners exists: the per-triangle state is the first and last candidate row of each
triangle (8 bytes), the per-vertex state its screen x, y, depth and clip w (16 bytes). Each triangle's
candidate pixels are walked one by one and the nearest key kept in the z-buffer; then each pixel's
winner gives its face index and perspective-correct barycentrics, its triangle set up again. Bands of
rows run in parallel on as many threads as torch uses (ComfyUI's and the user's setting; never more);
each band takes every triangle's rows in it, so no two threads write one pixel. Compiled on first use
and cached beside this file.
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

# float32 constants of the torch path's arithmetic (raster._screen, raster._triangles)
_HALF = np.float32(0.5)
_DEPTH_SCALE = np.float32(0.49999)
_ONE = np.float32(1.0)
_MARGIN = np.float32(1 + 2**-20)  # the superset test's bound over |S(a, b, c)|
_FIXED = np.float32(FIXED)
_UNFIXED = np.float32(1.0 / FIXED)
_STEPS = np.float32(DEPTH_STEPS)
_SATURATED = np.float32(2.0**31)


@_jit(parallel=True, error_model="numpy")
def _screen(V, screen, width, height):
    """raster._screen of V float32 [B*N,4] into screen float32 [B*N,4]: x_s, y_s, depth z_s and clip w,
    w NaN where a component of the vertex is not finite (so that no triangle of it is drawn)."""
    scale_x, scale_y = np.float32(width - 1), np.float32(height - 1)
    for i in numba.prange(V.shape[0]):
        x, y, z, w = V[i, 0], V[i, 1], V[i, 2], V[i, 3]
        screen[i, 0] = ((x / w) * _HALF + _HALF) * scale_x + _HALF
        screen[i, 1] = ((y / w) * _HALF + _HALF) * scale_y + _HALF
        screen[i, 2] = (z / w) * _DEPTH_SCALE + _HALF
        finite = np.isfinite(x) and np.isfinite(y) and np.isfinite(z) and np.isfinite(w)
        screen[i, 3] = w if finite else np.float32(np.nan)


@_jit(inline="always")
def _corners(faces, t, face_count, vertex_count):
    """Rows of the screen array of triangle t's corners a, b, c (t = view * face_count + face)."""
    view = t // face_count
    face = t - view * face_count
    base = view * vertex_count
    return base + faces[face, 0], base + faces[face, 1], base + faces[face, 2]


@_jit(inline="always", error_model="numpy")
def _edges(screen, a, b, c):
    """raster._triangles' a_x, a_y, c - a, b - a (times the sign of S(a, b, c)), S(a, b, c) and
    |1 / S(a, b, c)| of the triangle of screen rows a, b, c."""
    ax, ay = screen[a, 0], screen[a, 1]
    acx, acy = screen[c, 0] - ax, screen[c, 1] - ay
    abx, aby = screen[b, 0] - ax, screen[b, 1] - ay
    area = acx * aby - abx * acy
    inverse = abs(_ONE / area)
    if area < 0:
        acx, acy, abx, aby = -acx, -acy, -abx, -aby
    return ax, ay, acx, acy, abx, aby, area, inverse


@_jit(inline="always")
def _span(u, v, t, size):
    """raster._triangles' first and last candidate (float32) along one axis, of the corners' u, v, t
    there and the image's size along it."""
    low, high = min(u, v, t), max(u, v, t)
    first = min(max(np.float32(np.trunc(low)), np.float32(0.0)), np.float32(size))
    last = min(np.float32(np.ceil(high + _ONE)) - _ONE, np.float32(size - 1))
    return first, last


@_jit(parallel=True, error_model="numpy")
def _rows(screen, faces, face_count, vertex_count, width, height, cull_back_faces, rows):
    """raster._triangles' choice of the triangles drawn, into rows int32 [K,2]: each drawn triangle's
    first and last candidate row, (1, 0) for the others (a corner at w <= 0 or not finite, zero or
    non-finite area, no pixel, or culled)."""
    for t in numba.prange(rows.shape[0]):
        rows[t, 0], rows[t, 1] = 1, 0
        a, b, c = _corners(faces, t, face_count, vertex_count)
        if not (screen[a, 3] > 0 and screen[b, 3] > 0 and screen[c, 3] > 0):
            continue
        area, inverse = _edges(screen, a, b, c)[6:]
        if not (inverse < np.inf and inverse > 0) or (cull_back_faces and not area < 0):
            continue
        first_x, last_x = _span(screen[a, 0], screen[b, 0], screen[c, 0], width)
        first_y, last_y = _span(screen[a, 1], screen[b, 1], screen[c, 1], height)
        if last_x - first_x + _ONE > 0 and last_y - first_y + _ONE > 0:
            rows[t, 0], rows[t, 1] = np.int32(first_y), np.int32(last_y)


@_jit(parallel=True, error_model="numpy")
def _depth_test(zbuffer, screen, faces, rows, prior, has_prior, face_count, vertex_count, width, height, bands):
    """The drawn triangles' fragments (see raster._depth_test) into zbuffer, `bands` bands of
    rows in parallel, each triangle set up by the bands it meets."""
    pixels = height * width
    for band in numba.prange(bands):
        band_first, band_last = band * height // bands, (band + 1) * height // bands - 1
        for t in range(rows.shape[0]):
            first_y, last_y = max(rows[t, 0], band_first), min(rows[t, 1], band_last)
            if first_y > last_y:
                continue
            a, b, c = _corners(faces, t, face_count, vertex_count)
            ax, ay, acx, acy, abx, aby, _, inverse = _edges(screen, a, b, c)
            bound = (_ONE / inverse) * _MARGIN
            z0, z1, z2 = screen[a, 2], screen[b, 2], screen[c, 2]
            first_x, last_x = _span(screen[a, 0], screen[b, 0], screen[c, 0], width)
            first_x, last_x = np.int64(first_x), np.int64(last_x)
            base = t // face_count * pixels
            for y in range(first_y, last_y + 1):
                dy = (np.float32(y) + _HALF) - ay
                row_c, row_b = acx * dy, abx * dy
                for x in range(first_x, last_x + 1):
                    dx = (np.float32(x) + _HALF) - ax
                    beta_area = row_c - dx * acy
                    gamma_area = dx * aby - row_b
                    # the torch path's superset test, then its exact inside test, depth and key
                    if not (min(beta_area, gamma_area) >= 0 and beta_area + gamma_area <= bound):
                        continue
                    beta, gamma = beta_area * inverse, gamma_area * inverse
                    fixed = np.int64(beta * _FIXED) + np.int64(gamma * _FIXED)
                    alpha = np.float32(FIXED - fixed) * _UNFIXED
                    depth = (alpha * z0 + beta * z1) + gamma * z2
                    scaled = depth * _STEPS
                    pixel = base + y * width + x
                    if has_prior:
                        visible = alpha >= 0 and depth >= prior[pixel] and scaled > -1
                    else:
                        visible = alpha >= 0 and depth >= 0
                    if visible:
                        key = np.int64(min(scaled, _SATURATED)) * ID_BASE + t
                        if key < zbuffer[pixel]:
                            zbuffer[pixel] = key


@_jit(parallel=True, error_model="numpy")
def _resolve(zbuffer, screen, faces, face_count, vertex_count, width, height, findices, barycentric):
    """Each pixel's winner to its face index + 1 and barycentrics (see raster._resolve), its triangle
    set up again (once for a run of pixels of one triangle in a row)."""
    for row in numba.prange(zbuffer.shape[0] // width):
        y = row % height
        last = -1
        ax = ay = acx = acy = abx = aby = inverse = w0 = w1 = w2 = np.float32(0.0)
        for x in range(width):
            pixel = row * width + x
            if zbuffer[pixel] == EMPTY:
                findices[pixel] = 0
                barycentric[pixel, 0] = barycentric[pixel, 1] = barycentric[pixel, 2] = 0.0
                continue
            t = zbuffer[pixel] % ID_BASE
            if t != last:
                last = t
                a, b, c = _corners(faces, t, face_count, vertex_count)
                ax, ay, acx, acy, abx, aby, _, inverse = _edges(screen, a, b, c)
                w0, w1, w2 = screen[a, 3], screen[b, 3], screen[c, 3]
            dx = (np.float32(x) + _HALF) - ax
            dy = (np.float32(y) + _HALF) - ay
            beta = (acx * dy - dx * acy) * inverse
            gamma = (dx * aby - abx * dy) * inverse
            fixed = np.int64(beta * _FIXED) + np.int64(gamma * _FIXED)
            alpha = np.float32(FIXED - fixed) * _UNFIXED
            u0, u1, u2 = alpha / w0, beta / w1, gamma / w2
            scale = _ONE / ((u0 + u1) + u2)
            barycentric[pixel, 0], barycentric[pixel, 1], barycentric[pixel, 2] = u0 * scale, u1 * scale, u2 * scale
            findices[pixel] = t % face_count + 1


@_jit(parallel=True)
def _behind(V, faces, behind):
    """raster._triangles' behind: bool [B,M] of V float32 [B,N,4], faces [M,3]: the finite triangles
    with a corner at w <= 0."""
    views, face_count = behind.shape
    for k in numba.prange(views * face_count):
        view, face = k // face_count, k % face_count
        finite = True
        nearest = np.float32(np.inf)
        for corner in range(3):
            v = faces[face, corner]
            for j in range(4):
                finite = finite and np.isfinite(V[view, v, j])
            nearest = min(nearest, V[view, v, 3])
        behind[view, face] = finite and nearest <= 0


@falls_back
def triangles_behind(V: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """raster._triangles' behind on the CPU: bool [B,M] of V float32 [B,N,4] and faces int32 or int64
    [M,3] (indices checked); None where numba failed."""
    torch_threads()
    behind = torch.empty(V.shape[0], faces.shape[0], dtype=torch.bool)
    _behind(V.numpy(), faces.numpy(), behind.numpy())
    return behind


@falls_back
def rasterize(
    V: torch.Tensor,
    faces: torch.Tensor,
    prior: torch.Tensor | None,
    width: int,
    height: int,
    cull_back_faces: bool,
):
    """raster.rasterize_views' depth test and resolve on the CPU: V float32 [B,N,4] (contiguous), faces
    int32 or int64 [M,3] (contiguous, indices checked), prior float32 [B*H*W] or None. Returns findices
    int32 [B*H*W] and barycentric float32 [B*H*W,3]; None where numba failed (see core.numba.falls_back).
    Beyond its outputs it holds the z-buffer (8 bytes a pixel), 16 bytes a vertex and 8 a triangle."""
    views, vertex_count = V.shape[:2]
    screen = torch.empty(views * vertex_count, 4, dtype=torch.float32)
    _screen(V.view(-1, 4).numpy(), screen.numpy(), width, height)
    zbuffer = on_huge_pages(torch.empty(views * height * width, dtype=torch.long)).fill_(EMPTY)
    depth_test(zbuffer, screen, faces, prior, vertex_count, width, height, cull_back_faces)
    return resolve(zbuffer, screen, faces, vertex_count, width, height)


def depth_test(
    zbuffer: torch.Tensor,
    screen: torch.Tensor,
    faces: torch.Tensor,
    prior: torch.Tensor | None,
    vertex_count: int,
    width: int,
    height: int,
    cull_back_faces: bool,
) -> None:
    """raster._depth_test's result into zbuffer int64 [B*H*W] (CPU, filled with EMPTY), from the vertices
    on the screen (screen float32 [B*N,4], of _screen) and faces [M,3]; prior float32 [B*H*W] or None."""
    threads = torch_threads()
    face_count = faces.shape[0]
    views = screen.shape[0] // vertex_count
    faces = faces.numpy()
    rows = np.empty((views * face_count, 2), np.int32)
    _rows(screen.numpy(), faces, face_count, vertex_count, width, height, cull_back_faces, rows)
    bands = max(1, min(height, threads * BANDS_PER_THREAD if threads > 1 else 1))
    _depth_test(
        zbuffer.numpy(),
        screen.numpy(),
        faces,
        rows,
        prior.numpy() if prior is not None else np.zeros(1, np.float32),
        prior is not None,
        face_count,
        vertex_count,
        width,
        height,
        bands,
    )


def resolve(zbuffer: torch.Tensor, screen: torch.Tensor, faces: torch.Tensor, vertex_count: int, width, height):
    """raster._resolve on the CPU: findices int32 [B*H*W], barycentric float32 [B*H*W,3]."""
    torch_threads()
    findices = on_huge_pages(torch.empty(zbuffer.shape[0], dtype=torch.int32))
    barycentric = on_huge_pages(torch.empty(zbuffer.shape[0], 3))
    _resolve(
        zbuffer.numpy(),
        screen.numpy(),
        faces.numpy(),
        faces.shape[0],
        vertex_count,
        width,
        height,
        findices.numpy(),
        barycentric.numpy(),
    )
    return findices, barycentric
