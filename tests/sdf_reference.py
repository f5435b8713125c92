"""Brute-force supersampled references of the SDF renderer's shapes (16x16 samples per pixel), shared by
tests/gpu_rendering/test_compositor.py and tests/test_boxes.py."""

import numpy as np

H, W, S = 37, 45, 16  # not multiples of the tile size: partial tiles are exercised too


def samples():
    ys = (np.arange(H * S) + 0.5) / S
    xs = (np.arange(W * S) + 0.5) / S
    return np.meshgrid(xs, ys)


def pixel_mean(inside):
    return inside.reshape(H, S, W, S).mean(axis=(1, 3))


def rounded_box_distance(X, Y, box, r):
    x0, y0, x1, y1 = box
    cx, cy, hx, hy = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    qx, qy = np.abs(X - cx) - (hx - r), np.abs(Y - cy) - (hy - r)
    return np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(np.maximum(qx, qy), 0) - r


def assert_close(alpha, reference):
    error = np.abs(alpha - reference)
    assert error.mean() < 0.01, error.mean()
    assert error.max() < 0.1, error.max()


def turned(X, Y, centre, degrees):
    """Sample coordinates in the frame of a shape centred on `centre` and turned `degrees` clockwise on
    screen (x right, y down)."""
    t = np.radians(degrees)
    dx, dy = X - centre[0], Y - centre[1]
    return centre[0] + dx * np.cos(t) + dy * np.sin(t), centre[1] - dx * np.sin(t) + dy * np.cos(t)


def ellipse_inside(X, Y, centre, radii, degrees, reach):
    """Samples inside the ellipse, and (by a dense polygon of its curve) their distance to it, up to
    `reach` (inf farther). Only samples between the ellipse scaled by 1 -+ reach / (smaller radius) can be
    that near: the ellipse holds the disc of radius reach around each point of the smaller one, and
    the larger one around each point of the ellipse."""
    from scipy.spatial import cKDTree

    U, V = turned(X, Y, centre, degrees)
    level = lambda scale: ((U - centre[0]) / radii[0]) ** 2 + ((V - centre[1]) / radii[1]) ** 2 <= scale**2  # noqa: E731
    margin = reach / min(radii)
    near = level(1 + margin) & ~level(1 - margin) if margin < 1 else level(1 + margin)
    t = np.linspace(0, 2 * np.pi, 8000, endpoint=False)
    curve = np.stack([centre[0] + radii[0] * np.cos(t), centre[1] + radii[1] * np.sin(t)], 1)
    distance = np.full(X.shape, np.inf)
    distance[near] = cKDTree(curve).query(np.stack([U[near], V[near]], 1), distance_upper_bound=reach)[0]
    return level(1), distance
