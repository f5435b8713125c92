"""The shapes' geometry as CUDA device code, shared by the search kernels (search_cuda.py) and the
render kernels (render_cuda.py), with the torch path's constants written in: kind and family codes,
N_PARAMS. Its functions repeat the torch path's float32 operations in the same order, so that a shape
crosses the same rows at the same places on both paths."""

from __future__ import annotations

from .shapes import _CONVEX, _ELLIPTIC, _FAMILY, _POLY4, _STROKE, KINDS, N_PARAMS

_FAMILIES = {"CONVEX": _CONVEX, "POLY4": _POLY4, "STROKE": _STROKE, "ELLIPTIC": _ELLIPTIC}

SHAPES_SOURCE = (
    "".join(f"#define {name.upper()} {code}\n" for code, name in enumerate(KINDS))
    + "".join(f"#define {name} {code}\n" for name, code in _FAMILIES.items())
    + f"""
#define N_PARAMS {N_PARAMS}
__device__ const int FAMILY_OF[{len(_FAMILY)}] = {{{", ".join(str(f) for f in _FAMILY)}}};
"""
    + r"""
__device__ __forceinline__ void set_bounds(float* bounds, const float* v, int n) {
    bounds[0] = bounds[2] = v[0];
    bounds[1] = bounds[3] = v[1];
    for (int i = 1; i < n; ++i) {
        bounds[0] = fminf(bounds[0], v[2 * i]); bounds[2] = fmaxf(bounds[2], v[2 * i]);
        bounds[1] = fminf(bounds[1], v[2 * i + 1]); bounds[3] = fmaxf(bounds[3], v[2 * i + 1]);
    }
}

/* A segment's unit normal (-dy, dx) / length as the torch path's _unit_normal (0 for no length). */
__device__ __forceinline__ void unit_normal(const float* start, const float* end, float* normal) {
    float dx = end[0] - start[0], dy = end[1] - start[1];
    float length = fmaxf(sqrtf(dx * dx + dy * dy), (float)1e-6);
    normal[0] = -dy / length;
    normal[1] = dx / length;
}

/* A shape of `kind` with parameters p [N_PARAMS] as the torch path's _polygon4, _stroke_outline (at
   `along`, its steps + 1 curve parameters) and _ellipse_form describe it. Polygons: vertices v [n,2]
   (triangles, rectangles, lines and 4-gons n = 4, a triangle's last vertex repeated: a null edge; a
   Bezier's or a polyline's stroke outline n = 2 (steps + 1), a polyline's last vertex repeated),
   returns n. Ellipses: the form cx, cy, A, B, C in v[0..4] (A dx^2 +
   B dx dy + C dy^2 <= 1 inside), returns 0. bounds: x_min, y_min, x_max, y_max (y exact; an ellipse's
   x reaches max(rx, ry) from its centre). */
__device__ int shape_outline(int kind, const float* p, const float* along, int steps, float* v, float* bounds) {
    if (kind == ELLIPSE || kind == ROTATED_ELLIPSE || kind == CIRCLE) {
        float rx = fmaxf(p[2], (float)1e-3);
        float ry = kind == CIRCLE ? rx : fmaxf(p[3], (float)1e-3);
        /* sincospif: sinf/cosf bring a float64 slow path for huge arguments into the code */
        float cosine, sine;
        sincospif((kind == ROTATED_ELLIPSE ? p[4] : 0.0f) / 180.0f, &sine, &cosine);
        float ix = 1.0f / (rx * rx), iy = 1.0f / (ry * ry);
        v[0] = p[0]; v[1] = p[1];
        v[2] = (cosine * cosine) * ix + (sine * sine) * iy;
        v[3] = ((2.0f * cosine) * sine) * (ix - iy);
        v[4] = (sine * sine) * ix + (cosine * cosine) * iy;
        float half_height = sqrtf((rx * sine) * (rx * sine) + (ry * cosine) * (ry * cosine));
        float reach = fmaxf(rx, ry);
        bounds[0] = p[0] - reach; bounds[1] = p[1] - half_height;
        bounds[2] = p[0] + reach; bounds[3] = p[1] + half_height;
        return 0;
    }
    if (kind == QUADRATIC) {  /* the curve offset both ways along its normal, butt caps */
        int n = 2 * (steps + 1);
        float half_width = p[6] / 2.0f;
        for (int i = 0; i <= steps; ++i) {
            float u = 1.0f - along[i];
            float x = ((u * u) * p[0] + ((2.0f * u) * along[i]) * p[2]) + (along[i] * along[i]) * p[4];
            float y = ((u * u) * p[1] + ((2.0f * u) * along[i]) * p[3]) + (along[i] * along[i]) * p[5];
            float tx = u * (p[2] - p[0]) + along[i] * (p[4] - p[2]);
            float ty = u * (p[3] - p[1]) + along[i] * (p[5] - p[3]);
            /* lengths as torch's vector norm sums the squares (the second fused onto the first); a
               degenerate tangent (control point on an end) falls back to the chord's direction */
            if (!(sqrtf(fmaf(ty, ty, tx * tx)) > (float)1e-6)) { tx = p[4] - p[0]; ty = p[5] - p[1]; }
            float length = fmaxf(sqrtf(fmaf(tx, tx, ty * ty)), (float)1e-6);
            float nx = (-ty / length) * half_width, ny = (tx / length) * half_width;
            v[2 * i] = x + nx; v[2 * i + 1] = y + ny;
            v[2 * (n - 1 - i)] = x - nx; v[2 * (n - 1 - i) + 1] = y - ny;
        }
        set_bounds(bounds, v, n);
        return n;
    }
    if (kind == POLYLINE) {  /* _polyline_sides: three vertices a side, the middle one mitred */
        int n = 2 * (steps + 1);
        float first[2], second[2], offset[3][2];
        unit_normal(p, p + 2, first);
        unit_normal(p + 2, p + 4, second);
        float half = p[6] / 2.0f;
        float dot = first[0] * second[0] + first[1] * second[1];
        float reach = half / fmaxf(1.0f + dot, 0.25f);
        for (int c = 0; c < 2; ++c) {
            offset[0][c] = first[c] * half;
            offset[1][c] = (first[c] + second[c]) * reach;
            offset[2][c] = second[c] * half;
        }
        for (int i = 0; i <= steps; ++i) {
            int at = min(i, 2);
            for (int c = 0; c < 2; ++c) {
                v[2 * i + c] = p[2 * at + c] + offset[at][c];
                v[2 * (n - 1 - i) + c] = p[2 * at + c] - offset[at][c];
            }
        }
        set_bounds(bounds, v, n);
        return n;
    }
    if (kind == LINE) {  /* _line_corners: both ends offset along the normal, then back on the other side */
        float normal[2];
        unit_normal(p, p + 2, normal);
        float half = p[4] / 2.0f;
        for (int c = 0; c < 2; ++c) {
            float offset = normal[c] * half;
            v[c] = p[c] + offset; v[2 + c] = p[2 + c] + offset;
            v[4 + c] = p[2 + c] - offset; v[6 + c] = p[c] - offset;
        }
    } else if (kind == TRIANGLE) {
        for (int i = 0; i < 6; ++i) v[i] = p[i];
        v[6] = p[4]; v[7] = p[5];
    } else if (kind == RECTANGLE) {
        v[0] = p[0]; v[1] = p[1]; v[2] = p[2]; v[3] = p[1];
        v[4] = p[2]; v[5] = p[3]; v[6] = p[0]; v[7] = p[3];
    } else if (kind == ROTATED_RECTANGLE) {
        float cosine, sine;
        sincospif(p[4] / 180.0f, &sine, &cosine);
        const float corner_x[4] = {-0.5f, 0.5f, 0.5f, -0.5f}, corner_y[4] = {-0.5f, -0.5f, 0.5f, 0.5f};
        for (int i = 0; i < 4; ++i) {
            float dx = corner_x[i] * p[2], dy = corner_y[i] * p[3];
            v[2 * i] = (p[0] + dx * cosine) - dy * sine;
            v[2 * i + 1] = (p[1] + dx * sine) + dy * cosine;
        }
    } else {
        for (int i = 0; i < 8; ++i) v[i] = p[i];
    }
    set_bounds(bounds, v, 4);
    return 4;
}

/* primitive's rule for Beziers, and polylines alike (the torch path's _valid): the chord longer than
   either control leg. */
__device__ inline bool valid(int kind, const float* p) {
    if (kind != QUADRATIC && kind != POLYLINE) return true;
    float chord = (p[0] - p[4]) * (p[0] - p[4]) + (p[1] - p[5]) * (p[1] - p[5]);
    float leg1 = (p[0] - p[2]) * (p[0] - p[2]) + (p[1] - p[3]) * (p[1] - p[3]);
    float leg2 = (p[2] - p[4]) * (p[2] - p[4]) + (p[3] - p[5]) * (p[3] - p[5]);
    return chord > leg1 && chord > leg2;
}
"""
)
