"""The overlay compositor's CUDA kernel (compiled by core/cuda.py) and its launcher: coverage per kind and
source-over compositing of the binned (tile, primitive) pairs, as the torch path (compositor.py)
computes them. The kernel's #defines are every integer constant of constants.py (kinds, parameter
columns, N_PARAMS, ELLIPSE_STEPS, ...), so the two never disagree.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import cuda
from . import constants

# Coverage per kind and source-over compositing, as the torch path computes them: one block per tile
# (one thread per pixel); each thread walks its tile's pairs in drawing order.
_COMPOSITE_SOURCE = (
    "".join(
        f"#define {name} {value}\n" for name, value in vars(constants).items() if name.isupper() and type(value) is int
    )
    + r"""

__device__ __forceinline__ float from_distance(float d) { return fminf(fmaxf(0.5f - d, 0.0f), 1.0f); }

// coverage of a rounded box at |offset from centre| ax, ay along its axes: from its signed distance near
// a rounded corner (anywhere on a turned box), else the product of its sides' coverages (see
// _box_coverage, _turned_box_coverage)
__device__ float box_fill(float ax, float ay, float hx, float hy, float r, bool near_corner, bool turned) {
    if ((turned || near_corner) && r >= 1.0f) {
        float qx = ax - (hx - r), qy = ay - (hy - r);
        float cx = fmaxf(qx, 0.0f), cy = fmaxf(qy, 0.0f);
        return from_distance(sqrtf(cx * cx + cy * cy) + fminf(fmaxf(qx, qy), 0.0f) - r);
    }
    return from_distance(ax - hx) * from_distance(ay - hy);
}

// signed distance to an ellipse of semi-axes a, b from |offset from centre| ax, ay along its axes (see
// _ellipse_distance)
__device__ float ellipse_distance(float ax, float ay, float a, float b) {
    float px = fmaxf(ax, 1e-3f), py = fmaxf(ay, 1e-3f);
    float tx = 0.70710677f, ty = 0.70710677f;
    float ab = a * a - b * b;
    for (int step = 0; step < ELLIPSE_STEPS; ++step) {
        float ex = ab * (tx * tx * tx) / a, ey = -ab * (ty * ty * ty) / b;
        float rx = a * tx - ex, ry = b * ty - ey;
        float qx = px - ex, qy = py - ey;
        float ratio = sqrtf(rx * rx + ry * ry) / fmaxf(sqrtf(qx * qx + qy * qy), 1e-6f);
        tx = fminf(fmaxf((qx * ratio + ex) / a, 0.0f), 1.0f);
        ty = fminf(fmaxf((qy * ratio + ey) / b, 0.0f), 1.0f);
        float norm = fmaxf(sqrtf(tx * tx + ty * ty), 1e-6f);
        tx = tx / norm;
        ty = ty / norm;
    }
    float dx = px - a * tx, dy = py - b * ty;
    float distance = sqrtf(dx * dx + dy * dy);
    return (px / a) * (px / a) + (py / b) * (py / b) <= 1.0f ? -distance : distance;
}

__device__ float coverage(long long kind, const float* p, float ox, float oy, float gx, float gy, float tile_last,
                          const float* atlas, int atlas_h, int atlas_w) {
    if (kind == SEGMENT) {
        float half = fmaxf(p[SEGMENT_HALF_WIDTH], 0.5f);
        float weight = fminf(fmaxf(2.0f * p[SEGMENT_HALF_WIDTH], 0.0f), 1.0f);
        float dx = p[SEGMENT_BX] - p[SEGMENT_AX], dy = p[SEGMENT_BY] - p[SEGMENT_AY];
        float length = fmaxf(sqrtf(dx * dx + dy * dy), 1e-12f);
        float ux = dx / length, uy = dy / length;
        float px = (ox - p[SEGMENT_AX]) + gx, py = (oy - p[SEGMENT_AY]) + gy;
        // from the far end: see _segment_coverage
        float qx = (ox - p[SEGMENT_BX]) + gx, qy = (oy - p[SEGMENT_BY]) + gy;
        float along = px * ux + py * uy;
        float across = fabsf(px * uy - py * ux);
        float beyond = fmaxf(-along, qx * ux + qy * uy);
        float value;
        if (p[SEGMENT_BUTT] > 0.0f) {
            value = from_distance(across - half) * from_distance(beyond);
        } else {
            float b = fmaxf(beyond, 0.0f);
            value = from_distance(sqrtf(b * b + across * across) - half);
        }
        return value * weight;
    }
    if (kind == BOX_FILL || kind == BOX_STROKE) {
        float x = (ox - p[BOX_CX]) + gx, y = (oy - p[BOX_CY]) + gy;
        float cosine = p[BOX_COS], sine = p[BOX_SIN];
        bool turned = sine != 0.0f;
        float ax = fabsf(turned ? cosine * x + sine * y : x), ay = fabsf(turned ? cosine * y - sine * x : y);
        float hx = p[BOX_HALF_X], hy = p[BOX_HALF_Y], r = p[BOX_RADIUS];
        // near a rounded corner: decided once per tile, from the tile's centre, as binning does (turned
        // boxes are measured from their distance everywhere)
        float middle = 0.5f * tile_last;
        bool near_corner = (fabsf((ox - p[BOX_CX]) + middle) + (middle + 1.0f) >= hx - r)
                           && (fabsf((oy - p[BOX_CY]) + middle) + (middle + 1.0f) >= hy - r);
        if (kind == BOX_FILL) return box_fill(ax, ay, hx, hy, r, near_corner, turned);
        float half = fmaxf(p[BOX_HALF_STROKE], 0.5f), weight = fminf(fmaxf(2.0f * p[BOX_HALF_STROKE], 0.0f), 1.0f);
        float inner = box_fill(ax, ay, hx - half, hy - half, fmaxf(r - half, 0.0f), near_corner, turned);
        if (!(hx > half && hy > half)) inner = 0.0f;
        float outer = box_fill(ax, ay, hx + half, hy + half, r + half, near_corner, turned);
        float outline = fmaxf(outer - inner, 0.0f) * weight;
        float corner = p[BOX_CORNER_LENGTH];
        if (corner > 0.0f) {
            float keep_x = fminf(fmaxf((ax - (hx - corner)) + 0.5f, 0.0f), 1.0f);
            float keep_y = fminf(fmaxf((ay - (hy - corner)) + 0.5f, 0.0f), 1.0f);
            outline = outline * (keep_x * keep_y);
        }
        return outline;
    }
    if (kind == DISC) {
        float dx = (ox - p[DISC_CX]) + gx, dy = (oy - p[DISC_CY]) + gy;
        float distance = sqrtf(dx * dx + dy * dy) - p[DISC_RADIUS];
        if (p[DISC_RING_HALF] > 0.0f) {
            float half = fmaxf(p[DISC_RING_HALF], 0.5f), weight = fminf(fmaxf(2.0f * p[DISC_RING_HALF], 0.0f), 1.0f);
            return from_distance(fabsf(distance) - half) * weight;
        }
        return from_distance(distance);
    }
    if (kind == ELLIPSE) {
        float x = (ox - p[ELLIPSE_CX]) + gx, y = (oy - p[ELLIPSE_CY]) + gy;
        float cosine = p[ELLIPSE_COS], sine = p[ELLIPSE_SIN];
        float distance = ellipse_distance(fabsf(cosine * x + sine * y), fabsf(cosine * y - sine * x),
                                          p[ELLIPSE_RADIUS_X], p[ELLIPSE_RADIUS_Y]);
        if (p[ELLIPSE_RING_HALF] > 0.0f) {
            float half = fmaxf(p[ELLIPSE_RING_HALF], 0.5f);
            float weight = fminf(fmaxf(2.0f * p[ELLIPSE_RING_HALF], 0.0f), 1.0f);
            return from_distance(fabsf(distance) - half) * weight;
        }
        return from_distance(distance);
    }
    if (kind == HALO) {  // see _halo_coverage
        float x = (ox - p[HALO_CX]) + gx, y = (oy - p[HALO_CY]) + gy;
        float cosine = p[HALO_COS], sine = p[HALO_SIN];
        float ax = fabsf(cosine * x + sine * y), ay = fabsf(cosine * y - sine * x);
        float hx = p[HALO_HALF_X], hy = p[HALO_HALF_Y], r = p[HALO_RADIUS];
        float qx = ax - (hx - r), qy = ay - (hy - r);
        float cx = fmaxf(qx, 0.0f), cy = fmaxf(qy, 0.0f);
        float distance = sqrtf(cx * cx + cy * cy) + fminf(fmaxf(qx, qy), 0.0f) - r;
        float t = fminf(fmaxf(distance / p[HALO_WIDTH], 0.0f), 1.0f);
        return (1.0f - box_fill(ax, ay, hx, hy, r, true, true)) * ((1.0f - t) * (1.0f - t) * (1.0f + 2.0f * t));
    }
    if (kind == TRIANGLE) {  // see _triangle_coverage: the product of the three edges' half-plane coverages
        const int corner[4] = {TRIANGLE_AX, TRIANGLE_BX, TRIANGLE_CX, TRIANGLE_AX};
        float value = 1.0f;
        for (int edge = 0; edge < 3; ++edge) {
            int first = corner[edge], second = corner[edge + 1];
            float ex = p[second] - p[first], ey = p[second + 1] - p[first + 1];
            float length = fmaxf(sqrtf(ex * ex + ey * ey), 1e-12f);
            float x = (ox - p[first]) + gx, y = (oy - p[first + 1]) + gy;
            value = value * from_distance((ey * x - ex * y) / length);
        }
        return value;
    }
    if (kind == SPRITE) {
        long long u = (long long)rintf(((ox - 0.5f) - p[SPRITE_X0]) + gx);
        long long v = (long long)rintf(((oy - 0.5f) - p[SPRITE_Y0]) + gy);
        if (u < 0 || v < 0 || u >= (long long)p[SPRITE_WIDTH] || v >= (long long)p[SPRITE_HEIGHT]) return 0.0f;
        long long x = min(max((long long)p[SPRITE_ATLAS_X] + u, 0LL), (long long)atlas_w - 1);
        long long y = min(max((long long)p[SPRITE_ATLAS_Y] + v, 0LL), (long long)atlas_h - 1);
        return atlas[y * atlas_w + x];
    }
    return 0.0f;
}

extern "C" __global__ void composite_tiles(
        const long long* tile_start, long long n_tiles, long long tile_offset, long long pair_begin,
        long long pair_end, const long long* primitive, const long long* kind, const float* params,
        const float* color, const long long* group, const float* atlas, int atlas_h, int atlas_w,
        const float* source, float* image, float* alpha, float* layer, int height, int width, int channels,
        int tiles_y, int tiles_x, int tile) {
    long long t = tile_offset + blockIdx.x;
    if (t >= n_tiles) return;
    // this launch draws the tile's pairs in [pair_begin, pair_end); the launch that holds the tile's last
    // pair finishes it (the first launch, for a tile without pairs)
    long long first = tile_start[t], last = tile_start[t + 1];
    long long start = max(first, pair_begin), stop = min(last, pair_end);
    bool finishes = last <= pair_end && (last > pair_begin || pair_begin == 0);
    if (start >= stop && !finishes) return;
    int gx = threadIdx.x % tile, gy = threadIdx.x / tile;
    long long frame = t / ((long long)tiles_y * tiles_x);
    int rest = (int)(t % ((long long)tiles_y * tiles_x));
    int row = rest / tiles_x, column = rest % tiles_x;
    int x = column * tile + gx, y = row * tile + gy;
    if (x >= width || y >= height) return;
    float ox = (float)(column * tile) + 0.5f, oy = (float)(row * tile) + 0.5f;
    float tile_last = (float)(tile - 1);
    long long pixel = (frame * height + y) * (long long)width + x;

    // premultiplied layer, built bottom to top; a group's pairs merge by maximum coverage first
    float lr = 0.0f, lg = 0.0f, lb = 0.0f, la = 0.0f;
    long long current = -1;
    bool pending = false;  // a shape is open: current, merged and its colour
    float merged = 0.0f, cr = 0.0f, cg = 0.0f, cb = 0.0f, ca = 0.0f;
    if (first < start) {  // the tile goes on from the launch before: its layer so far, and an open shape's coverage
        const float* so_far = layer + pixel * 4;
        lr = so_far[0]; lg = so_far[1]; lb = so_far[2]; la = so_far[3];
        long long p = primitive[start - 1];
        if (group[primitive[start]] == group[p]) {
            current = group[p];
            pending = true;
            merged = alpha[pixel];
            cr = color[p * 4]; cg = color[p * 4 + 1]; cb = color[p * 4 + 2]; ca = color[p * 4 + 3];
        }
    }
    for (long long k = start; k <= stop; ++k) {
        long long g = -2;
        float value = 0.0f;
        long long p = 0;
        if (k < stop) {
            p = primitive[k];
            g = group[p];
            value = coverage(kind[p], params + p * N_PARAMS, ox, oy, (float)gx, (float)gy, tile_last, atlas, atlas_h,
                             atlas_w);
        }
        if (k < stop && pending && g == current) {
            merged = fmaxf(merged, value);
            continue;
        }
        if (k == stop && pending && stop < last && group[primitive[stop]] == current) {
            alpha[pixel] = merged;  // the shape goes on in the next launch: its coverage so far waits in alpha
            break;
        }
        if (pending) {  // the shape below is complete: source-over
            float a = merged * ca, keep = 1.0f - a;
            lr = a * cr + keep * lr; lg = a * cg + keep * lg; lb = a * cb + keep * lb; la = a + keep * la;
        }
        if (k < stop) {
            current = g;
            pending = true;
            merged = value;
            cr = color[p * 4]; cg = color[p * 4 + 1]; cb = color[p * 4 + 2]; ca = color[p * 4 + 3];
        }
    }
    float* out = layer + pixel * 4;
    out[0] = lr; out[1] = lg; out[2] = lb; out[3] = la;
    if (!finishes) return;
    // every pixel of the frames is written: the layer, its alpha, and the layer over the source
    alpha[pixel] = la;
    const float* below = source + pixel * channels;
    float* composite = image + pixel * channels;
    float keep = 1.0f - la;
    composite[0] = lr + below[0] * keep; composite[1] = lg + below[1] * keep; composite[2] = lb + below[2] * keep;
    if (channels == 4) composite[3] = la + below[3] * keep;
}
"""
)


# Pairs per launch of composite_tiles: a block walks its tile's pairs one after another, so a launch's time
# follows the most pairs of one tile in it; 2**17 pairs of the costliest kind (ellipses, ~700 cycles a pair
# in one thread) take ~60 ms at 1.5 GHz, under a desktop GPU's watchdog (~2 s) with a wide margin.
PAIRS_PER_LAUNCH = 1 << 17
_GRID_LIMIT = (1 << 31) - 1  # CUDA's gridDim.x; also the kernel's int32 indices (pixel columns, tile of a frame)


def _check_launch(frames, image, alpha, layer, pairs, tile: int) -> None:
    """What composite_tiles reads and writes, checked on the host before a launch: float32 [b,H,W,C] frames
    and image (C = 3 or 4), alpha [b,H,W] and layer [b,H,W,4], all contiguous on one device (the kernel
    writes the outputs in place: a copy would hide its writes), and sizes within its grid and int32 indices."""
    batch, height, width, channels = frames.shape
    expected = {
        "frames": (frames, frames.shape),
        "image": (image, frames.shape),
        "alpha": (alpha, frames.shape[:3]),
        "layer": (layer, (batch, height, width, 4)),
    }
    for name, (tensor, shape) in expected.items():
        if (
            tensor.dtype != torch.float32
            or tuple(tensor.shape) != tuple(shape)
            or not tensor.is_contiguous()
            or tensor.device != frames.device
        ):
            raise ValueError(
                f"composite_tiles: {name} must be a contiguous float32 tensor {tuple(shape)} on "
                f"{frames.device}, got {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}"
                f"{'' if tensor.is_contiguous() else ', not contiguous'}"
            )
    if channels not in (3, 4):
        raise ValueError(f"composite_tiles: frames must have 3 or 4 channels, got {channels}")
    if not 1 <= tile <= 32:
        raise ValueError(
            f"composite_tiles: tile must be 1 to 32 pixels (one thread per pixel, 1024 a block), got {tile}"
        )
    if pairs.n_tiles >= _GRID_LIMIT or max(height, width, pairs.tiles_y * pairs.tiles_x * tile) >= _GRID_LIMIT:
        raise ValueError(
            f"composite_tiles: {pairs.n_tiles} tiles of {height}x{width} frames exceed the kernel's "
            f"limits ({_GRID_LIMIT} blocks, int32 indices): draw fewer frames at once"
        )


def composite_tiles_cuda(
    frames: torch.Tensor,
    image: torch.Tensor,
    alpha: torch.Tensor,
    layer: torch.Tensor,
    pairs,
    prims,
    atlas: torch.Tensor | None,
    tile: int,
) -> None:
    """Composite the sorted pairs over frames float32 [b,H,W,C] (C = 3 or 4) into image float32 [b,H,W,C],
    alpha float32 [b,H,W] and layer float32 [b,H,W,4] (contiguous, on frames' CUDA device; anything else is
    refused, see _check_launch), every pixel once: one block per tile, one thread per pixel, in launches of
    at most PAIRS_PER_LAUNCH pairs (a tile with more goes on in the next launch from the layer it left).
    pairs: the binned pairs of these frames (compositor._Pairs), prims: the Primitives they index, atlas
    float [Ha,Wa] for sprites (None: no sprite)."""
    _check_launch(frames, image, alpha, layer, pairs, tile)
    _, height, width, channels = frames.shape
    tile_start = torch.searchsorted(pairs.tile, torch.arange(pairs.n_tiles + 1, device=frames.device))
    if atlas is None:
        atlas = torch.zeros(1, 1, device=frames.device)
    total = pairs.tile.numel()
    launches = [(0, total, 0, pairs.n_tiles)]  # pair range, first tile and tile count of each launch
    if total > PAIRS_PER_LAUNCH:  # the tiles that each range of pairs falls in: one read of the device
        begins = torch.arange(0, total, PAIRS_PER_LAUNCH, device=frames.device)
        found = torch.cat([tile_start[-1:], torch.searchsorted(tile_start, begins, right=True) - 1]).tolist()
        kept, first_tiles = found[0], [0] + found[2:]
        launches = [
            (
                begin,
                total if begin + PAIRS_PER_LAUNCH >= kept else begin + PAIRS_PER_LAUNCH,
                first,
                (pairs.n_tiles if begin + PAIRS_PER_LAUNCH >= kept else first_tiles[i + 1] + 1) - first,
            )
            for i, (begin, first) in enumerate(zip(range(0, kept, PAIRS_PER_LAUNCH), first_tiles, strict=False))
        ] or launches
    # the tensors the kernel reads, detached (DLPack refuses tensors that require grad) and in its types
    reads = cuda.arrays(
        *(
            t.detach()
            for t in (
                tile_start,
                pairs.primitive,
                prims.kind.long(),
                prims.params.float(),
                prims.color.float(),
                prims.group.long(),
                atlas.float(),
            )
        )
    )
    pixels = cuda.arrays(frames.detach(), image, alpha, layer)
    with cuda.stream(frames.device):
        for begin, end, first, count in launches:
            args = [
                reads[0],
                np.int64(pairs.n_tiles),
                np.int64(first),
                np.int64(begin),
                np.int64(end),
                *reads[1:],
                np.int32(atlas.shape[0]),
                np.int32(atlas.shape[1]),
                *pixels,
            ]
            args += [np.int32(v) for v in (height, width, channels, pairs.tiles_y, pairs.tiles_x, tile)]
            cuda.kernel(_COMPOSITE_SOURCE, "composite_tiles")((count,), (tile * tile,), tuple(args))
