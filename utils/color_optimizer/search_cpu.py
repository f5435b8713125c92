"""The candidates' coverage sums of PrimitiveMesh's search on the CPU, compiled by numba: each shape's
pixel rows walked one by one, its span in each row found with the torch path's float32 arithmetic
(the same columns, so the same exact integer sums, the same shapes chosen), and the row prefix sums
read at the span's ends. The torch path lays all rows of all candidates out in slots and gathers; on
the CPU those temporaries cost more than the sums. Convex shapes (triangles, rectangles) and
ellipses; the other families keep the torch path. Candidates run in parallel on as many threads as
torch uses. Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..core.numba import balanced, falls_back, torch_threads
from ..core.numba import jit as _jit


@_jit(inline="always")
def _pixel_index(x, width):
    """clamp(ceil(clamp(x, -1, W + 1) - 0.5), 0, W), as color_optimizer._pixel_index."""
    x = min(max(x, np.float32(-1.0)), np.float32(width + 1))
    return min(max(np.int64(np.ceil(x - np.float32(0.5))), 0), width)


@_jit(inline="always")
def _add_row(prefix, sums, k, base, left, right):
    for i in range(sums.shape[1]):
        sums[k, i] += np.int64(prefix[base + right, i] - prefix[base + left, i])


@_jit(parallel=True)
def _polygon_sums(prefix, image, edges, first, rows, height, width, sums):
    """Convex polygons, edges [K,V,4]: each row's span between the crossings of the edges its centre
    line meets."""
    for k in numba.prange(first.shape[0]):
        sums[k, :] = 0
        for row in range(first[k], first[k] + rows[k]):
            y = np.float32(row + 0.5)
            low, high = np.float32(np.inf), np.float32(-np.inf)
            for e in range(edges.shape[1]):
                y0, y1 = edges[k, e, 0], edges[k, e, 1]
                if (y0 <= y) == (y1 <= y):
                    continue
                x = (y - y0) * edges[k, e, 3] + edges[k, e, 2]
                low, high = min(low, x), max(high, x)
            left = _pixel_index(low, width)
            right = max(_pixel_index(high, width), left)
            _add_row(prefix, sums, k, (image[k] * height + min(max(row, 0), height - 1)) * (width + 1), left, right)


@_jit(parallel=True)
def _ellipse_sums(prefix, image, form, first, rows, height, width, sums):
    """Ellipses, form [K,5] (cx, cy, A, B, C): each row's span between the roots of the quadratic."""
    for k in numba.prange(first.shape[0]):
        sums[k, :] = 0
        cx, cy, a, b, c = form[k, 0], form[k, 1], form[k, 2], form[k, 3], form[k, 4]
        for row in range(first[k], first[k] + rows[k]):
            dy = np.float32(row + 0.5) - cy
            bd = b * dy
            discriminant = bd * bd - (np.float32(4.0) * a) * ((c * dy) * dy - np.float32(1.0))
            root = np.sqrt(max(discriminant, np.float32(0.0)))  # a miss gives root 0: an empty span
            left = _pixel_index(cx + ((-b) * dy - root) / (np.float32(2.0) * a), width)
            right = _pixel_index(cx + ((-b) * dy + root) / (np.float32(2.0) * a), width)
            _add_row(prefix, sums, k, (image[k] * height + min(max(row, 0), height - 1)) * (width + 1), left, right)


@falls_back
def coverage_sums(
    prefix: torch.Tensor,
    image: torch.Tensor,
    geometry: torch.Tensor,
    first: torch.Tensor,
    rows: torch.Tensor,
    elliptic: bool,
    height: int,
    width: int,
):
    """Sums int64 [K,T+1] of the prefix terms (color_optimizer.Terms.prefix, int32 [B*H*(W+1),T+1]) over
    the pixels each of K shapes covers: image int64 [K], geometry float32 [K,V,4] polygon edges or
    [K,5] ellipse forms (color_optimizer._shape_rows), first and rows int64 [K] its pixel rows. None
    where numba failed (core.numba.falls_back)."""
    torch_threads()
    sums = torch.empty(first.shape[0], prefix.shape[1], dtype=torch.int64)
    loop = _ellipse_sums if elliptic else _polygon_sums
    with balanced(first.shape[0]):
        loop(
            prefix.numpy(),
            image.contiguous().numpy(),
            geometry.float().contiguous().numpy(),
            first.contiguous().numpy(),
            rows.contiguous().numpy(),
            height,
            width,
            sums.numpy(),
        )
    return sums
