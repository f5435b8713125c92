"""PrimitiveMesh's anti-aliased render (`render`) as CUDA kernels: one thread per shape computes
its geometry at the output scale, then one thread per output pixel walks its image's shapes in
drawing order, computes each one's coverage of the pixel from the shape's row crossings and
composites it source-over, writing the build-up frames on the way. A launch for the geometry and
one per band of rows (LAUNCH_ITERATIONS), two small torch ops per call, no host sync.

The geometry is the torch path's, operation for operation in float32: `scale_params`, the 4-gons
of `_polygon4`, `_stroke_outline` (at its `t` from torch.linspace) and `_ellipse_form`. The coverage
is `_layer_coverage`'s, pixel by pixel: per sample row (SUBROWS per pixel row, as `_outlines` picks them),
each crossing x with transition s adds s * clamp(j + 1 - x, 0, 1) to pixel j, and the average over
the sample rows is clamped to 0..1. Crossings follow `_row_crossings`: convex polygons enter at the
leftmost and leave at the rightmost, 4-gons and stroke outlines by nonzero winding, ellipses at the
two roots where the discriminant is positive. On CUDA, torch's sqrt, cos and sin are the same CUDA
maths as the kernel's; on the CPU (tests/cuda_emulator.py) torch's vector code may round them an
ulp apart, which moves a crossing by an ulp of its coordinate.

A pixel's cost: a bounds test per shape of its image, and for the shapes that reach it, their
edges times SUBROWS (a stroke outline's edges once more for each crossing inside the pixel).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import cuda
from .shapes import KINDS, SUBROWS, Approximation, _checked_result, render_curve_steps
from .shapes_cuda import SHAPES_SOURCE

# Per shape, float32 [4 + 4*(steps+1)]: bounds x_min, y_min, x_max, y_max (y exact, as `_outlines` takes
# them; x may reach past the shape: a pixel tests them with a pixel's margin), then from FORM_AT the
# family's form: the 4-gon's vertices [4,2], the ellipse's cx, cy, A, B, C, or the stroke outline
# [2*(steps+1),2] (shapes_cuda.shape_outline).
_FORM_AT = 4
# Pixel x shape iterations per render launch (a display GPU's launch is reset after ~2 s: Windows TDR):
# ~20 instructions where the bounds test rejects the shape, ~300 where it covers the pixel (8 sample rows
# of its edges), so 2e9 take 6 to 95 ms on a mid-range GPU (~6e12 instructions a second). At the node's
# maxima (5000 shapes, 8192 px) a band is 48 rows, 171 launches an image.
LAUNCH_ITERATIONS = 2 * 10**9
_RENDER_SOURCE = (
    SHAPES_SOURCE
    + f"""
#define FORM_AT {_FORM_AT}
#define KIND_COUNT {len(KINDS)}
"""
    + r"""
// One thread per shape: its parameters times `scale` (angles kept), then its bounds and form.
// along [steps+1]: the curve parameters of the stroke outline's vertices (t in _stroke_outline).
extern "C" __global__ void shape_geometry(
        const long long* kind, const float* params, long long count, const float* scale, const float* along, int steps,
        int stride, float* geometry) {
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    int code = (int)kind[k];
    bool keep_angle = code == ROTATED_RECTANGLE || code == ROTATED_ELLIPSE;
    float p[N_PARAMS];
    for (int i = 0; i < N_PARAMS; ++i) {
        float value = params[k * N_PARAMS + i];
        p[i] = keep_angle && i == 4 ? value : value * scale[0];
    }
    float* bounds = geometry + k * stride;
    shape_outline(code, p, along, steps, bounds + FORM_AT, bounds);
}

// what a crossing at x adds to the pixel whose right edge is at `right`: the covered part of its width
__device__ __forceinline__ float ramp(float x, float right) { return fminf(fmaxf(right - x, 0.0f), 1.0f); }

// whether the row at y crosses edge k of the closed polygon v [n,2] (half-open in y, as _edge_crossings),
// where (x) and in which direction (+1 downward)
__device__ __forceinline__ bool crossing(const float* v, int n, int k, float y, float* x, int* direction) {
    int next = k + 1 == n ? 0 : k + 1;
    float x0 = v[2 * k], y0 = v[2 * k + 1], x1 = v[2 * next], y1 = v[2 * next + 1];
    if ((y0 <= y) == (y1 <= y)) return false;
    float t = (y - y0) / (y1 - y0);
    *x = x0 + t * (x1 - x0);
    *direction = y1 > y0 ? 1 : -1;
    return true;
}

// a convex polygon's row: entered at the leftmost crossing, left at the rightmost
__device__ float convex_row(const float* v, float y, float right) {
    bool hit = false;
    float enter = 0.0f, leave = 0.0f;
    for (int k = 0; k < 4; ++k) {
        float x;
        int direction;
        if (!crossing(v, 4, k, y, &x, &direction)) continue;
        enter = hit ? fminf(enter, x) : x;
        leave = hit ? fmaxf(leave, x) : x;
        hit = true;
    }
    return hit ? ramp(enter, right) - ramp(leave, right) : 0.0f;
}

// a polygon's row by nonzero winding. The crossings left of the pixel add their transitions in full:
// together, whether the winding there is nonzero. One inside the pixel adds its transition (the
// change of inside-ness across it, the crossings in sorted order, ties by index) times its ramp;
// pixels hold few crossings, so each counts the winding before it over all the edges again.
__device__ float winding_row(const float* v, int n, float y, float left, float right) {
    int winding_left = 0;
    float within = 0.0f;
    for (int k = 0; k < n; ++k) {
        float x;
        int direction;
        if (!crossing(v, n, k, y, &x, &direction)) continue;
        if (x <= left) {
            winding_left += direction;
        } else if (x < right) {
            int before = 0;
            for (int m = 0; m < n; ++m) {
                float other;
                int turn;
                if (m != k && crossing(v, n, m, y, &other, &turn) && (other < x || (other == x && m < k))) {
                    before += turn;
                }
            }
            within += (float)((before + direction != 0) - (before != 0)) * ramp(x, right);
        }
    }
    return (float)(winding_left != 0) + within;
}

// an ellipse's row (e: cx, cy, A, B, C): between the roots of A dx^2 + B dx dy + C dy^2 = 1, as _ellipse_crossings
__device__ float ellipse_row(const float* e, float y, float right) {
    float dy = y - e[1];
    float b_dy = e[3] * dy;
    float discriminant = b_dy * b_dy - (4.0f * e[2]) * ((e[4] * dy) * dy - 1.0f);
    if (!(discriminant > 0.0f)) return 0.0f;
    float root = sqrtf(discriminant);
    float enter = e[0] + (-b_dy - root) / (2.0f * e[2]);
    float leave = e[0] + (-b_dy + root) / (2.0f * e[2]);
    return ramp(enter, right) - ramp(leave, right);
}

// coverage of pixel (row, column) by one shape (g: its geometry), 0..1
__device__ float coverage(long long kind, const float* g, int outline_vertices, int row, int column, int subrows) {
    float left = (float)column, right = (float)(column + 1);
    if (g[2] < left - 1.0f || g[0] > right + 1.0f) return 0.0f;
    // the sample rows the shape spans, as _outlines: ceil(y_min * subrows - 0.5) .. floor(y_max * subrows - 0.5)
    float first = ceilf(g[1] * (float)subrows - 0.5f), last = floorf(g[3] * (float)subrows - 0.5f);
    float first_here = (float)(row * subrows), last_here = (float)(row * subrows + subrows - 1);
    if (last < first_here || first > last_here) return 0.0f;
    const float* form = g + FORM_AT;
    int family = FAMILY_OF[kind];
    float total = 0.0f;
    for (int i = 0; i < subrows; ++i) {
        float sample = (float)(row * subrows + i);
        if (sample < first || sample > last) continue;
        float y = (sample + 0.5f) / (float)subrows;
        if (family == ELLIPTIC) total += ellipse_row(form, y, right);
        else if (family == CONVEX) total += convex_row(form, y, right);
        else total += winding_row(form, family == STROKE ? outline_vertices : 4, y, left, right);
    }
    return fminf(fmaxf(total / (float)subrows, 0.0f), 1.0f);
}
// One thread per pixel of image [B,H,W,C], `pixels` of them from first_pixel on (a band of rows): the
// background, then each shape of its image source-over (premultiplied; with 4 channels a shape paints
// alpha 1), a frame [B,F,H,W,C] after every frame_every shapes and the last (frame_every 0: none); what
// is written is clamped to 0..1.
extern "C" __global__ void render_shapes(
        const long long* kind, const float* alpha, const float* color, const float* geometry, int stride,
        int outline_vertices, const float* background, long long batch, int shapes, int height, int width,
        int channels, int subrows, int frame_every, long long first_pixel, long long pixels, float* image,
        float* frames) {
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= pixels) return;
    long long pixel = first_pixel + id;
    long long per_image = (long long)height * width;
    long long b = pixel / per_image, at = pixel % per_image;
    int row = (int)(at / width), column = (int)(at % width);
    float out[4];
    for (int c = 0; c < channels; ++c) out[c] = background[b * channels + c];
    int frame_count = frame_every > 0 ? (shapes + frame_every - 1) / frame_every : 0;
    int frame = 0;
    for (int n = 0; n < shapes; ++n) {
        long long s = b * shapes + n;
        float a = alpha[s];
        if (a > 0.0f && kind[s] >= 0 && kind[s] < KIND_COUNT) {  // padding shapes have opacity 0; no unknown kind
            a *= coverage(kind[s], geometry + s * stride, outline_vertices, row, column, subrows);
            if (a > 0.0f) {
                float keep = 1.0f - a;
                for (int c = 0; c < channels; ++c) out[c] = out[c] * keep + a * (c < 3 ? color[s * 3 + c] : 1.0f);
            }
        }
        if (frame_count > 0 && ((n + 1) % frame_every == 0 || n + 1 == shapes)) {
            float* target = frames + (((b * frame_count + frame) * per_image) + at) * channels;
            for (int c = 0; c < channels; ++c) target[c] = fminf(fmaxf(out[c], 0.0f), 1.0f);
            ++frame;
        }
    }
    for (int c = 0; c < channels; ++c) image[pixel * channels + c] = fminf(fmaxf(out[c], 0.0f), 1.0f);
}
"""
)


def render_cuda(result: Approximation, height: int, width: int, scale: float, frame_every: int = 0):
    """`render` in CUDA kernel launches (no host sync): the shapes drawn anti-aliased on a
    height x width canvas, coordinates times `scale`, on result's CUDA device (callers check
    `device.cupy_usable` first). The inputs are checked as `render` checks them (ValueErrors naming
    them; any float dtype, detached, contiguous); shapes of unknown kind codes are not drawn (the torch
    path refuses them after its host read, which this path does without).

    Returns image float32 [B,H,W,C] (C as the background: RGB, or premultiplied RGBA) and, with
    frame_every > 0, the build-up frames float32 [B,F,H,W,C] after every `frame_every` shapes
    (F = ceil(N / frame_every); the last frame is the image), else None.
    """
    result = _checked_result(result, height, width, scale, frame_every)
    batch, total = result.kind.shape
    device = result.params.device
    channels = result.background.shape[1]
    count, pixels = batch * total, batch * height * width
    steps = render_curve_steps(height, width)
    geometry = torch.empty(count, _FORM_AT + 4 * (steps + 1), dtype=torch.float32, device=device)
    image = torch.empty(batch, height, width, channels, dtype=torch.float32, device=device)
    frame_count = -(-total // frame_every) if frame_every else 0
    frames = (
        torch.empty(batch, frame_count, height, width, channels, dtype=torch.float32, device=device)
        if frame_every
        else None
    )
    kind = result.kind
    with cuda.stream(device):
        if count:
            args = cuda.arrays(kind, result.params) + [np.int64(count)]
            args += cuda.arrays(
                torch.full((1,), scale, dtype=torch.float32, device=device),
                torch.linspace(0, 1, steps + 1, dtype=torch.float32, device=device),
            )
            args += [np.int32(steps), np.int32(geometry.shape[1]), *cuda.arrays(geometry)]
            cuda.kernel(_RENDER_SOURCE, "shape_geometry")(((count + 127) // 128,), (128,), tuple(args))
        if pixels:
            args = cuda.arrays(kind, result.alpha, result.color, geometry)
            args += [
                np.int32(geometry.shape[1]),
                np.int32(2 * (steps + 1)),
                *cuda.arrays(result.background),
                np.int64(batch),
            ]
            args += [np.int32(v) for v in (total, height, width, channels, SUBROWS, frame_every)]
            outputs = cuda.arrays(image, image if frames is None else frames)  # without frames, none is written
            # bands of whole rows, each at most LAUNCH_ITERATIONS pixel x shape iterations
            band = max(1, LAUNCH_ITERATIONS // max(1, total * width)) * width
            for first in range(0, pixels, band):
                count = min(band, pixels - first)
                cuda.kernel(_RENDER_SOURCE, "render_shapes")(
                    ((count + 255) // 256,), (256,), tuple(args + [np.int64(first), np.int64(count)] + outputs)
                )
    return image, frames
