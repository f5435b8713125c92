"""The primitive search as three CUDA kernels per shape, for NVIDIA GPUs with CuPy: the torch path's
method (random candidates, hill climbs from the best of them, closed-form colours; see search.py's
docstring) with every step on the device and no host wait inside a shape.

Per shape:
  random_candidates  one thread per candidate: draws a random shape and scores it.
  climb              one block per climb (PARENTS per image): it starts from the climb's rank among
                     the candidates, then each round every thread tries moves from the climb's state,
                     a block reduction keeps the best, and the climb stops after a round without gain.
                     Launched for a group of climbs and of rounds at a time (LAUNCH_ROWS): a climb's
                     state and random streams carry over from one launch to the next.
  commit_rows        one thread per image row: the best climb of the image, if it improves it, is
                     painted into the row and the row's prefix sums are rebuilt (rows it misses return
                     at once).

Scoring reads the torch path's fixed-point row prefix sums (`Terms`), so a shape's sums are exact and
equal the torch path's. Random numbers come from a counter-based generator (splitmix64) keyed by a
seed drawn from the caller's torch.Generator, the shape, and the thread: runs are deterministic, but
differ from the torch path's draws. The host reads the device every STATUS_EVERY shapes (has an image
stopped improving?), not once per shape.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core import cuda
from .shapes import (
    _GROUPS,
    CURVE_STEPS,
    INT32_MAX,
    MAX_ROUNDS,
    N_PARAMS,
    PARENTS,
    RANDOM_CHAIN,
    RANDOM_SIZE,
    RANDOM_STROKE,
    RANDOM_TRIANGLE,
    Approximation,
    _checked_background,
    _checked_target,
    _Record,
    _role_tables,
    _terms,
    check_int32,
)
from .shapes_cuda import SHAPES_SOURCE

STATUS_EVERY = 8  # shapes between host reads of whether an image is still improving
MAX_THREADS = 256  # moves tried side by side per climb and round (more mutations: several per thread)
# Work per climb launch (a display GPU's launch is reset after ~2 s: Windows TDR), in row evaluations (a
# shape's span in one pixel row: its crossings and two gathers of the terms): ~100 ms on a mid-range GPU
# (~1e10 a second). A move is counted at the image's full height, the most it can span.
LAUNCH_ROWS = 10**9
# Climbs per image: the torch path's PARENTS. Measured with the emulated kernels (bench photos, 100
# combo shapes, 256 px): RMSE 26.6, 13.0 and 14.6 with 16 climbs, against 27.6, 13.4 and 15.4 with 8
# (fogleman/primitive: 27.1, 13.5, 15.8).

SOURCE = (
    SHAPES_SOURCE
    + f"""
#define CURVE_STEPS {CURVE_STEPS}
#define MAX_THREADS {MAX_THREADS}
#define RANDOM_TRIANGLE {RANDOM_TRIANGLE:.1f}f
#define RANDOM_CHAIN {RANDOM_CHAIN:.1f}f
#define RANDOM_SIZE {RANDOM_SIZE:.1f}f
#define RANDOM_STROKE {RANDOM_STROKE:.1f}f
"""
    + r"""
typedef long long i64;
typedef unsigned long long u64;

#define MAX_EDGES (2 * (CURVE_STEPS + 1))
#define MAX_TERMS 11                 /* 2 C + 3 with C = 4 */
#define INF __int_as_float(0x7f800000)

/* settings: scale of the fixed-point sums, start opacity */
#define SCALE(s) ((s)[0])
#define START_ALPHA(s) ((s)[1])

__device__ inline u64 splitmix(u64* state) {
    u64 z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ inline u64 stream(i64 seed, i64 a, i64 b, i64 c) {
    u64 state = (u64)seed;
    state = splitmix(&state) ^ (u64)a;
    state = splitmix(&state) ^ (u64)b;
    state = splitmix(&state) ^ (u64)c;
    return state;
}

__device__ inline float uniform(u64* state) { return (float)(splitmix(state) >> 40) * (1.0f / 16777216.0f); }

__device__ inline float gaussian(u64* state) {
    float u = 1.0f - uniform(state);  /* (0, 1]: a finite logarithm */
    return sqrtf(-2.0f * logf(u)) * cospif(2.0f * uniform(state));
}

/* A shape as scoring and painting see it: polygon edges (y0, y1, x0, dx/dy) or an ellipse's form
   (cx, cy, A, B, C with A dx^2 + B dx dy + C dy^2 <= 1 inside), and the pixel rows it spans. */
struct Geometry {
    int family, edges, first, count;
    float edge[MAX_EDGES][4];
    float form[5];
};

__device__ inline void rows_spanned(Geometry& g, float y_min, float y_max, int height) {
    float first = fminf(fmaxf(ceilf(y_min - 0.5f), 0.0f), (float)height);
    float last = fminf(fmaxf(floorf(y_max - 0.5f), -1.0f), (float)(height - 1));
    g.first = (int)first;
    g.count = (first == first && last == last) ? max((int)last - (int)first + 1, 0) : 0;
}

/* The shape's edges or ellipse form (shapes_cuda's shape_outline) and the rows it spans. */
__device__ void geometry(Geometry& g, int kind, const float* p, const float* curve_t, int height) {
    float v[2 * MAX_EDGES], bounds[4];
    int n = shape_outline(kind, p, curve_t, CURVE_STEPS, v, bounds);
    g.family = FAMILY_OF[kind];
    g.edges = n;
    for (int i = 0; i < 5 && n == 0; ++i) g.form[i] = v[i];
    for (int i = 0; i < n; ++i) {
        int j = (i + 1) % n;
        float dy = v[2 * j + 1] - v[2 * i + 1];
        g.edge[i][0] = v[2 * i + 1];
        g.edge[i][1] = v[2 * j + 1];
        g.edge[i][2] = v[2 * i];
        g.edge[i][3] = (v[2 * j] - v[2 * i]) / (dy == 0.0f ? 1.0f : dy);
    }
    rows_spanned(g, bounds[1], bounds[3], height);
}

/* Pixels of a row whose centre lies left of x (the torch path's _pixel_index). */
__device__ inline int pixel_index(float x, int width) {
    float column = ceilf(fminf(fmaxf(x, -1.0f), (float)(width + 1)) - 0.5f);
    return min(max((int)column, 0), width);
}

/* Where pixel row `row` (centre row + 0.5) enters and leaves the shape: columns and the change of
   inside-ness at each (nonzero winding), in ascending order; returns how many. */
__device__ int row_crossings(const Geometry& g, int row, int width, int* column, int* change) {
    float y = row + 0.5f;
    if (g.family == ELLIPTIC) {
        float dy = y - g.form[1], a = g.form[2], b = g.form[3], c = g.form[4];
        float discriminant = (b * dy) * (b * dy) - 4.0f * a * (c * dy * dy - 1.0f);
        float root = sqrtf(fmaxf(discriminant, 0.0f));
        column[0] = pixel_index(g.form[0] + (-b * dy - root) / (2.0f * a), width);
        column[1] = pixel_index(g.form[0] + (-b * dy + root) / (2.0f * a), width);
        change[0] = 1;
        change[1] = -1;
        return 2;
    }
    if (g.family == CONVEX) {
        float left = INF, right = -INF;
        for (int i = 0; i < g.edges; ++i) {
            if ((g.edge[i][0] <= y) == (g.edge[i][1] <= y)) continue;
            float x = g.edge[i][2] + (y - g.edge[i][0]) * g.edge[i][3];
            left = fminf(left, x);
            right = fmaxf(right, x);
        }
        column[0] = pixel_index(left, width);
        column[1] = max(pixel_index(right, width), column[0]);
        change[0] = 1;
        change[1] = -1;
        return 2;
    }
    float xs[MAX_EDGES];
    int direction[MAX_EDGES], n = 0;
    for (int i = 0; i < g.edges; ++i) {
        if ((g.edge[i][0] <= y) == (g.edge[i][1] <= y)) continue;
        float x = g.edge[i][2] + (y - g.edge[i][0]) * g.edge[i][3];
        int d = g.edge[i][1] > g.edge[i][0] ? 1 : -1, j = n++;
        for (; j > 0 && xs[j - 1] > x; --j) { xs[j] = xs[j - 1]; direction[j] = direction[j - 1]; }
        xs[j] = x;
        direction[j] = d;
    }
    int winding = 0, inside = 0, m = 0;
    for (int i = 0; i < n; ++i) {
        winding += direction[i];
        int now = winding != 0;
        if (now != inside) { column[m] = pixel_index(xs[i], width); change[m++] = now - inside; inside = now; }
    }
    return m;
}

/* Exact sums of the terms (units of 1/scale) over the pixels of image `image` the shape covers. */
__device__ void coverage_sums(const int* prefix, const Geometry& g, int image, int height, int width, int terms,
                              i64* sums) {
    int column[MAX_EDGES], change[MAX_EDGES];
    for (int t = 0; t < terms; ++t) sums[t] = 0;
    for (int r = 0; r < g.count; ++r) {
        int row = g.first + r;
        int n = row_crossings(g, row, width, column, change);
        i64 base = ((i64)image * height + row) * (width + 1);
        for (int i = 0; i < n; ++i) {
            const int* at = prefix + (base + column[i]) * terms;
            for (int t = 0; t < terms; ++t) sums[t] -= (i64)change[i] * at[t];
        }
    }
}

/* The torch path's _opacity_sums, optimal_colors and _error_change: the error change of painting the
   closed-form colour (quantised to 8 bits when `quantise`) at opacity alpha; its colour in color. */
__device__ float error_change(const i64* sums, float scale, float alpha, int channels, bool searched, bool quantise,
                              float* color, float* count_out) {
    int c = channels;
    float sum_u[4], sum_q, count;
    if (searched) {
        for (int i = 0; i < c; ++i) sum_u[i] = (float)sums[i] / scale + alpha * ((float)sums[c + i] / scale);
        sum_q = 2.0f * alpha * ((float)sums[2 * c] / scale) + alpha * alpha * ((float)sums[2 * c + 1] / scale);
        count = (float)sums[2 * c + 2] / scale;
    } else {
        for (int i = 0; i < c; ++i) sum_u[i] = (float)sums[i] / scale;
        sum_q = (float)sums[c] / scale;
        count = (float)sums[c + 1] / scale;
    }
    float paint[4] = {0.0f, 0.0f, 0.0f, 1.0f};
    for (int i = 0; i < 3; ++i) {
        paint[i] = fminf(fmaxf(sum_u[i] / (alpha * fmaxf(count, 1.0f)), 0.0f), 1.0f);
        if (quantise) paint[i] = rintf(paint[i] * 255.0f) / 255.0f;
        color[i] = paint[i];
    }
    float dot_u = 0.0f, dot_p = 0.0f;
    for (int i = 0; i < c; ++i) { dot_u += paint[i] * sum_u[i]; dot_p += paint[i] * paint[i]; }
    *count_out = count;
    return sum_q - 2.0f * alpha * dot_u + alpha * alpha * count * dot_p;
}

__device__ float score(const int* prefix, const float* settings, const float* curve_t, int image, int kind,
                       const float* p, float alpha, int height, int width, int channels, bool searched, i64* sums) {
    Geometry g;
    geometry(g, kind, p, curve_t, height);
    int terms = searched ? 2 * channels + 3 : channels + 2;
    coverage_sums(prefix, g, image, height, width, terms, sums);
    float color[3], count;
    float change = error_change(sums, SCALE(settings), alpha, channels, searched, false, color, &count);
    return valid(kind, p) ? change : INF;
}

/* torch path's random_shapes: small shapes anywhere, sizes scaled with the image. */
__device__ void random_shape(u64* rng, const int* kind_list, int n_kinds, int height, int width, int* kind, float* p) {
    float scale = (float)max(height, width) / 256.0f;
    *kind = kind_list[min((int)(uniform(rng) * n_kinds), n_kinds - 1)];
    float u[N_PARAMS];
    for (int i = 0; i < N_PARAMS; ++i) u[i] = uniform(rng);
    float ax = u[0] * width, ay = u[1] * height;
#define SPREAD(i, reach) ((u[i] * 2.0f - 1.0f) * (reach) * scale)
#define SIZE(i) (1.0f + u[i] * RANDOM_SIZE * scale)
    for (int i = 0; i < N_PARAMS; ++i) p[i] = 0.0f;
    p[0] = ax;
    p[1] = ay;
    switch (*kind) {
    case TRIANGLE:
        p[2] = ax + SPREAD(2, RANDOM_TRIANGLE); p[3] = ay + SPREAD(3, RANDOM_TRIANGLE);
        p[4] = ax + SPREAD(4, RANDOM_TRIANGLE); p[5] = ay + SPREAD(5, RANDOM_TRIANGLE);
        break;
    case RECTANGLE:
        p[2] = fminf(ax + SIZE(2), (float)width); p[3] = fminf(ay + SIZE(3), (float)height);
        break;
    case ROTATED_RECTANGLE: case ROTATED_ELLIPSE:
        p[2] = SIZE(2); p[3] = SIZE(3); p[4] = u[4] * 360.0f;
        break;
    case ELLIPSE:
        p[2] = SIZE(2); p[3] = SIZE(3);
        break;
    case CIRCLE:
        p[2] = SIZE(2);
        break;
    case QUADRATIC: case POLYLINE:  /* a polyline's width within its bounds: 1 px at least */
        p[2] = ax + SPREAD(2, RANDOM_CHAIN); p[3] = ay + SPREAD(3, RANDOM_CHAIN);
        p[4] = p[2] + SPREAD(4, RANDOM_CHAIN); p[5] = p[3] + SPREAD(5, RANDOM_CHAIN);
        p[6] = (1.0f + u[6] * RANDOM_STROKE) * scale;
        if (*kind == POLYLINE) p[6] = fmaxf(p[6], 1.0f);
        break;
    case LINE:
        p[2] = ax + SPREAD(2, RANDOM_CHAIN); p[3] = ay + SPREAD(3, RANDOM_CHAIN);
        p[4] = fmaxf((1.0f + u[6] * RANDOM_STROKE) * scale, 1.0f);
        break;
    default:  /* POLYGON */
        for (int i = 2; i < 8; i += 2) {
            p[i] = ax + SPREAD(i, RANDOM_CHAIN);
            p[i + 1] = ay + SPREAD(i + 1, RANDOM_CHAIN);
        }
    }
#undef SPREAD
#undef SIZE
}

/* torch path's mutate: a Gaussian step of one parameter group, clamped; the opacity by -10..10 / 255. */
__device__ void mutate(u64* rng, int kind, const float* from, float from_alpha, bool searched, const float* bounds,
                       const float* steps, const int* n_groups, float* p, float* alpha) {
    int group = kind * 4 + min((int)(uniform(rng) * n_groups[kind]), n_groups[kind] - 1);
    const float* low = bounds + kind * 2 * N_PARAMS;
    const float* high = low + N_PARAMS;
    for (int i = 0; i < N_PARAMS; ++i) {
        float sigma = steps[group * N_PARAMS + i];
        p[i] = sigma == 0.0f ? from[i] : fminf(fmaxf(from[i] + gaussian(rng) * sigma, low[i]), high[i]);
    }
    *alpha = from_alpha;
    if (searched) *alpha = fminf(fmaxf(from_alpha + (float)(min((int)(uniform(rng) * 21.0f), 20) - 10) / 255.0f,
                                       1.0f / 255.0f), 1.0f);
}

extern "C" __global__ void random_candidates(
        const int* prefix, const float* settings, const float* curve_t, const int* kind_list, const long long* seed,
        int* out_kind, float* out_params, float* out_alpha, float* out_change,
        int batch, int height, int width, int channels, int searched, int candidates, int n_kinds, int shape) {
    i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (i64)batch * candidates) return;
    u64 rng = stream(seed[0], shape, 0, id);
    int kind;
    float p[N_PARAMS];
    i64 sums[MAX_TERMS];
    random_shape(&rng, kind_list, n_kinds, height, width, &kind, p);
    float alpha = START_ALPHA(settings);
    out_kind[id] = kind;
    for (int i = 0; i < N_PARAMS; ++i) out_params[id * N_PARAMS + i] = p[i];
    out_alpha[id] = alpha;
    out_change[id] = score(prefix, settings, curve_t, (int)(id / candidates), kind, p, alpha, height, width,
                           channels, searched != 0, sums);
}

/* Block-wide argmin of (value, key) pairs, lowest key on ties; every thread gets the winner's key. */
__device__ int block_argmin(float value, int key, float* shared_value, int* shared_key) {
    int t = threadIdx.x;
    shared_value[t] = value;
    shared_key[t] = key;
    __syncthreads();
    for (int stride = MAX_THREADS / 2; stride > 0; stride >>= 1) {
        if (t < stride && t + stride < (int)blockDim.x) {
            float v = shared_value[t + stride];
            int k = shared_key[t + stride];
            if (v < shared_value[t] || (v == shared_value[t] && k < shared_key[t])) {
                shared_value[t] = v;
                shared_key[t] = k;
            }
        }
        __syncthreads();
    }
    int winner = shared_key[0];
    __syncthreads();  /* everyone has read it before the arrays are reused */
    return winner;
}

extern "C" __global__ void climb(
        const int* prefix, const float* settings, const float* curve_t, const float* bounds, const float* steps,
        const int* n_groups, const long long* seed, const int* cand_kind, const float* cand_params,
        const float* cand_alpha, const float* cand_change,
        int* out_kind, float* out_params, float* out_alpha, float* out_color, float* out_change,
        float* out_quantised_change, float* out_count, float* climb_state, int* climb_going, long long* climb_rng,
        int batch, int height, int width, int channels, int searched, int candidates, int parents, int mutations,
        int first_climb, int first_round, int rounds, int shape) {
    __shared__ float shared_value[MAX_THREADS];
    __shared__ int shared_key[MAX_THREADS];
    __shared__ float state[N_PARAMS + 2];       /* params, alpha, change */
    __shared__ int gained;                      /* the last round lowered the error */
    int climber = first_climb + blockIdx.x, image = climber / parents, rank = climber % parents, t = threadIdx.x;
    int terms = searched ? 2 * channels + 3 : channels + 2;
    const float* change_of = cand_change + (i64)image * candidates;
    i64 thread = (i64)climber * blockDim.x + t;
    u64 rng;
    int kind;
    if (first_round > 0) {  /* a later launch of the climb: its state, if it goes on, as the last one left it */
        if (!climb_going[climber]) return;  /* the whole block returns: no barrier is left waiting */
        kind = out_kind[climber];
        if (t == 0) for (int i = 0; i < N_PARAMS + 2; ++i) state[i] = climb_state[climber * (N_PARAMS + 2) + i];
        rng = (u64)climb_rng[thread];
    } else {
        /* the start: the candidate of this rank (by change, then index) */
        float last_value = -INF;
        int last_key = -1, start = 0;
        for (int r = 0; r <= rank; ++r) {
            float best = INF;
            int best_key = 0x7fffffff;
            for (int i = t; i < candidates; i += blockDim.x) {
                float v = change_of[i];
                bool after = v > last_value || (v == last_value && i > last_key);
                if (after && (v < best || (v == best && i < best_key))) { best = v; best_key = i; }
            }
            start = min(block_argmin(best, best_key, shared_value, shared_key), candidates - 1);  /* NaN scores: none */
            last_value = change_of[start];
            last_key = start;
        }
        i64 source = (i64)image * candidates + start;
        kind = cand_kind[source];
        if (t == 0) {
            for (int i = 0; i < N_PARAMS; ++i) state[i] = cand_params[source * N_PARAMS + i];
            state[N_PARAMS] = cand_alpha[source];
            state[N_PARAMS + 1] = cand_change[source];
        }
        rng = stream(seed[0], shape, 1 + climber, t);
    }
    __syncthreads();

    float params[N_PARAMS], alpha = 0.0f, moved[N_PARAMS], moved_alpha;
    i64 sums[MAX_TERMS];
    for (int round = first_round; round < first_round + rounds; ++round) {
        float best = INF;
        for (int move = t; move < mutations; move += blockDim.x) {
            mutate(&rng, kind, state, state[N_PARAMS], searched != 0, bounds, steps, n_groups, moved, &moved_alpha);
            float change = score(prefix, settings, curve_t, image, kind, moved, moved_alpha, height, width, channels,
                                 searched != 0, sums);
            if (change < best) {
                best = change;
                alpha = moved_alpha;
                for (int i = 0; i < N_PARAMS; ++i) params[i] = moved[i];
            }
        }
        int winner = block_argmin(best, t, shared_value, shared_key);
        if (t == winner) {
            gained = best < state[N_PARAMS + 1];
            if (gained) {
                for (int i = 0; i < N_PARAMS; ++i) state[i] = params[i];
                state[N_PARAMS] = alpha;
                state[N_PARAMS + 1] = best;
            }
        }
        __syncthreads();
        /* the next write of `gained` and `state` comes after block_argmin's barriers: no race */
        if (!gained) break;
    }
    climb_rng[thread] = (long long)rng;  /* where the next launch of this climb goes on */
    if (t != 0) return;
    for (int i = 0; i < N_PARAMS + 2; ++i) climb_state[climber * (N_PARAMS + 2) + i] = state[i];
    climb_going[climber] = gained;
    /* the climb's result, its opacity and colour in 8 bits as the torch path commits them */
    float q_alpha = rintf(state[N_PARAMS] * 255.0f) / 255.0f;
    Geometry g;
    geometry(g, kind, state, curve_t, height);
    coverage_sums(prefix, g, image, height, width, terms, sums);
    float color[3], count;
    float change = error_change(sums, SCALE(settings), q_alpha, channels, searched != 0, true, color, &count);
    out_kind[climber] = kind;
    for (int i = 0; i < N_PARAMS; ++i) out_params[climber * N_PARAMS + i] = state[i];
    out_alpha[climber] = q_alpha;
    for (int i = 0; i < 3; ++i) out_color[climber * 3 + i] = color[i];
    out_change[climber] = state[N_PARAMS + 1];
    out_quantised_change[climber] = valid(kind, state) ? change : INF;
    out_count[climber] = count;
}
/* The terms of the torch path's _terms at one pixel (target and current [C]): T values. */
__device__ int pixel_terms(const float* target, const float* current, int channels, bool searched, float alpha,
                           float* v) {
    float dot = 0.0f, square = 0.0f, u_minus_d = 0.0f;
    int c = channels;
    for (int i = 0; i < c; ++i) {
        float d = target[i] - current[i];
        if (searched) {
            v[i] = d;
            v[c + i] = current[i];
            dot += d * current[i];
            square += current[i] * current[i];
        } else {
            float u = d + alpha * current[i];
            v[i] = u;
            u_minus_d += u * u - d * d;
        }
    }
    if (searched) { v[2 * c] = dot; v[2 * c + 1] = square; v[2 * c + 2] = 1.0f; return 2 * c + 3; }
    v[c] = u_minus_d;
    v[c + 1] = 1.0f;
    return c + 2;
}

extern "C" __global__ void commit_rows(
        const float* target, const float* weight, float* current, int* prefix, const float* settings,
        const float* curve_t,
        const int* climb_kind, const float* climb_params, const float* climb_alpha, const float* climb_color,
        const float* climb_change, const float* climb_quantised_change, const float* climb_count,
        const int* active_in, int* active_out,
        long long* out_kind, float* out_params, float* out_color, float* out_alpha, float* error,
        int batch, int height, int width, int channels, int searched, int parents, int shapes, int shape) {
    i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (i64)batch * height) return;
    int image = (int)(id / height), row = (int)(id % height);
    int best = image * parents;  /* the image's best climb (first of equals), as the torch path's argmin */
    for (int c = best + 1; c < (image + 1) * parents; ++c)
        if (climb_change[c] < climb_change[best]) best = c;
    float change = climb_quantised_change[best], alpha = climb_alpha[best];
    /* float rounding must not pass for an improvement (a flat image gets no shapes) */
    bool improves = active_in[image] != 0 && change < -1e-6f * (1.0f + climb_count[best]);
    const float* p = climb_params + best * N_PARAMS;
    if (row == 0) {
        i64 at = (i64)image * shapes + shape;
        out_kind[at] = climb_kind[best];
        for (int i = 0; i < N_PARAMS; ++i) out_params[at * N_PARAMS + i] = p[i];
        for (int i = 0; i < 3; ++i) out_color[at * 3 + i] = climb_color[best * 3 + i];
        out_alpha[at] = improves ? alpha : 0.0f;
        i64 e = (i64)image * (shapes + 1) + shape;
        error[e + 1] = error[e] + (improves ? change : 0.0f);
        active_out[image] = improves;
    }
    if (!improves) return;
    Geometry g;
    geometry(g, climb_kind[best], p, curve_t, height);
    if (row < g.first || row >= g.first + g.count) return;
    int column[MAX_EDGES], change_at[MAX_EDGES];
    int n = row_crossings(g, row, width, column, change_at);
    float paint[4] = {climb_color[best * 3], climb_color[best * 3 + 1], climb_color[best * 3 + 2], 1.0f};
    i64 pixel = ((i64)image * height + row) * width;
    int inside = 0, k = 0, c = channels;
    for (int j = 0; j < width; ++j) {
        while (k < n && column[k] <= j) inside += change_at[k++];
        if (inside <= 0) continue;
        float* v = current + (pixel + j) * c;
        for (int i = 0; i < c; ++i) v[i] = v[i] * (1.0f - alpha) + paint[i] * alpha;
    }
    /* the row's prefix sums, rebuilt from its new pixels */
    float values[MAX_TERMS];
    int running[MAX_TERMS];
    int terms = searched ? 2 * c + 3 : c + 2;
    int* out = prefix + ((i64)image * height + row) * (width + 1) * terms;
    for (int t = 0; t < terms; ++t) running[t] = 0;
    for (int j = 0; j < width; ++j) {
        pixel_terms(target + (pixel + j) * c, current + (pixel + j) * c, c, searched != 0, START_ALPHA(settings),
                    values);
        float w = weight[pixel + j];  /* the error's weight at the pixel (edge_weights; 1 unweighted) */
        for (int t = 0; t < terms; ++t) {
            running[t] += (int)rintf((values[t] * w) * SCALE(settings));
            out[(j + 1) * terms + t] = running[t];
        }
    }
}
"""
)


def _launch(name: str, threads: int, blocks: int, *args) -> None:
    """One kernel launch on the first tensor's device and torch's current stream there: tensors as
    zero-copy arrays (contiguous: a copy would lose what the kernel writes), ints as int32 (a
    ValueError naming the kernel where one, or the grid, is out of range)."""
    check_int32(f"{name}: blocks", blocks, 1)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and not a.is_contiguous():
            raise ValueError(
                f"{name}: argument {i} must be contiguous (the kernel writes through it), got strides {a.stride()}"
            )
        if not isinstance(a, torch.Tensor) and not -INT32_MAX - 1 <= a <= INT32_MAX:
            raise ValueError(f"{name}: argument {i} must fit the kernel's int32, got {a}")
    values = [cuda.arrays(a)[0] if isinstance(a, torch.Tensor) else np.int32(a) for a in args]
    with cuda.stream(args[0].device):
        cuda.kernel(SOURCE, name)((blocks,), (threads,), tuple(values))


class Search(_Record):
    """The device state of a kernel search (the record of `_Record`, and buffers allocated once,
    filled by the kernels in turn) and its three steps; `approximate` runs them shape after shape."""

    def __init__(
        self,
        target,
        shapes: int,
        kinds: tuple[int, ...],
        alpha: int,
        candidates: int,
        mutations: int,
        background,
        generator,
        canvas=None,
        edge_weight=0.0,
    ):
        super().__init__(target, shapes, alpha, background, generator, canvas, edge_weight)
        batch, height, width, channels = target.shape
        device = target.device
        self.seed = torch.randint(-(2**62), 2**62, (1,), generator=self.generator, device=device)
        self.terms = _terms(self.target, self.current, None if self.searched else self.start_alpha, *self.weighting)
        # each pixel's weight of the error, as the prefix sums were made with (1: unweighted, exactly)
        self.weight = self.weighting[0] if self.weighting else torch.ones(batch, height, width, device=device)
        self.prefix = self.terms.prefix.contiguous()
        self.settings = torch.tensor([self.terms.scale, self.start_alpha], dtype=torch.float32, device=device)
        self.curve_t = torch.linspace(0, 1, CURVE_STEPS + 1, device=device)
        self.bounds, self.steps = (t.contiguous() for t in _role_tables(height, width, device))
        self.n_groups = torch.tensor([len(g) for g in _GROUPS], dtype=torch.int32, device=device)
        self.kinds = kinds
        self.kind_list = torch.tensor(kinds, dtype=torch.int32, device=device)
        self.shapes, self.candidates, self.mutations = shapes, candidates, mutations
        self.parents = min(PARENTS, candidates)
        self.size = (batch, height, width, channels, int(self.searched))

        count, climbs = batch * candidates, batch * self.parents
        self.cand_kind = torch.empty(count, dtype=torch.int32, device=device)
        self.cand_params = torch.empty(count, N_PARAMS, device=device)
        self.cand_alpha, self.cand_change = torch.empty(2, count, device=device)
        self.climb_kind = torch.empty(climbs, dtype=torch.int32, device=device)
        self.climb_params = torch.empty(climbs, N_PARAMS, device=device)
        self.climb_color = torch.empty(climbs, 3, device=device)
        self.climb_alpha, self.climb_change, self.climb_quantised, self.climb_count = torch.empty(
            4, climbs, device=device
        )
        self.threads = min(MAX_THREADS, mutations)
        self.climb_state = torch.empty(climbs, N_PARAMS + 2, device=device)  # params, alpha, change
        self.climb_going = torch.empty(climbs, dtype=torch.int32, device=device)
        self.climb_rng = torch.empty(climbs * self.threads, dtype=torch.int64, device=device)
        # climbs and rounds per launch, from the most rows a round of one climb can score
        per_round = mutations * height
        self.launch_climbs = max(1, min(climbs, LAUNCH_ROWS // per_round))
        self.launch_rounds = max(1, min(MAX_ROUNDS, LAUNCH_ROWS // (per_round * self.launch_climbs)))
        self.active = torch.ones(2, batch, dtype=torch.int32, device=device)  # before and after a shape, in turn

    def random(self, index: int) -> None:
        """Draw and score the random candidates of shape `index` (cand_*)."""
        count = self.cand_kind.shape[0]
        _launch(
            "random_candidates",
            128,
            math.ceil(count / 128),
            self.prefix,
            self.settings,
            self.curve_t,
            self.kind_list,
            self.seed,
            self.cand_kind,
            self.cand_params,
            self.cand_alpha,
            self.cand_change,
            *self.size,
            self.candidates,
            len(self.kinds),
            index,
        )

    def climb(self, index: int, on_round=None) -> None:
        """Hill-climb from the best candidates (climb_*), launch_climbs climbs and launch_rounds rounds
        a launch; on_round() after each group of rounds."""
        climbs = self.climb_kind.shape[0]
        for first_round in range(0, MAX_ROUNDS, self.launch_rounds):
            for first_climb in range(0, climbs, self.launch_climbs):
                _launch(
                    "climb",
                    self.threads,
                    min(self.launch_climbs, climbs - first_climb),
                    self.prefix,
                    self.settings,
                    self.curve_t,
                    self.bounds,
                    self.steps,
                    self.n_groups,
                    self.seed,
                    self.cand_kind,
                    self.cand_params,
                    self.cand_alpha,
                    self.cand_change,
                    self.climb_kind,
                    self.climb_params,
                    self.climb_alpha,
                    self.climb_color,
                    self.climb_change,
                    self.climb_quantised,
                    self.climb_count,
                    self.climb_state,
                    self.climb_going,
                    self.climb_rng,
                    *self.size,
                    self.candidates,
                    self.parents,
                    self.mutations,
                    first_climb,
                    first_round,
                    min(self.launch_rounds, MAX_ROUNDS - first_round),
                    index,
                )
            if on_round is not None:
                on_round()

    def commit(self, index: int) -> torch.Tensor:
        """Paint each image's best climb where it improves the image, record it as shape `index`;
        returns whether each image is still improving, int32 [B] (on the device)."""
        before, after = self.active[index % 2], self.active[1 - index % 2]
        batch, height = self.size[:2]
        _launch(
            "commit_rows",
            128,
            math.ceil(batch * height / 128),
            self.target,
            self.weight,
            self.current,
            self.prefix,
            self.settings,
            self.curve_t,
            self.climb_kind,
            self.climb_params,
            self.climb_alpha,
            self.climb_color,
            self.climb_change,
            self.climb_quantised,
            self.climb_count,
            before,
            after,
            self.kind,
            self.params,
            self.color,
            self.alpha,
            self.error,
            *self.size,
            self.parents,
            self.shapes,
            index,
        )
        return after


def approximate(
    target,
    shapes: int,
    kinds: tuple[int, ...],
    alpha: int,
    candidates: int,
    mutations: int,
    background,
    generator,
    on_shape,
    on_round=None,
    canvas=None,
    edge_weight=0.0,
) -> Approximation:
    """The package's `approximate` (same arguments and result) with the search as CUDA kernels: three
    launches per shape, and a host read every STATUS_EVERY shapes."""
    target = _checked_target(target)
    background = _checked_background(background, target)
    for name, value, least in (("shapes", shapes, 0), ("candidates", candidates, 1), ("mutations", mutations, 1)):
        check_int32(name, value, least)  # the kernels' ints (their products are 64-bit there)
    search = Search(target, shapes, kinds, alpha, candidates, mutations, background, generator, canvas, edge_weight)
    for index in range(shapes):
        search.random(index)
        search.climb(index, on_round)
        active = search.commit(index)
        if on_shape is not None:
            on_shape(index + 1, shapes, search.current)
        if (index + 1) % STATUS_EVERY == 0 and index + 1 < shapes and not bool(active.any()):
            search.stopped_after(index)
            break
    return search.result()
