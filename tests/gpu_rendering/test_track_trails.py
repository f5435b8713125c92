"""Track trails (utils/gpu_rendering/track_trails.py) against brute-force supersampled references."""

import math

import numpy as np
import pytest
import torch

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.gpu_rendering.track_trails import ARROW_ANGLE, trail_layers
from sdf_reference import H, W, assert_close, pixel_mean, samples

# one track over 6 frames, turning; a second one hidden in frame 3 (its trail is cut there)
PATH = [(6.3, 30.2), (12.1, 24.7), (19.4, 21.3), (27.0, 22.8), (33.6, 16.1), (38.2, 8.4)]
OTHER = [(5.0, 8.0), (9.0, 9.5), (13.0, 10.0), (-1.0, -1.0), (21.0, 12.0), (25.0, 12.5)]


def tracks():
    xy = torch.tensor([PATH, OTHER], dtype=torch.float32).transpose(0, 1).contiguous()  # [T,N,2]
    return xy, (xy >= 0).all(-1)


def capsule(X, Y, a, b, half):
    d = np.subtract(b, a)
    t = np.clip(((X - a[0]) * d[0] + (Y - a[1]) * d[1]) / max(d @ d, 1e-12), 0, 1)
    return np.hypot(X - a[0] - t * d[0], Y - a[1] - t * d[1]) <= half


def polyline(X, Y, points, half):
    inside = np.zeros(X.shape, bool)
    for a, b in zip(points[:-1], points[1:], strict=False):
        inside |= capsule(X, Y, a, b, half)
    return inside


def over(*layers):
    """Source-over of (opacity, coverage) layers, bottom first: the alpha they leave."""
    alpha = 0.0
    for opacity, coverage in layers:
        alpha = alpha + opacity * coverage * (1 - alpha)
    return alpha


def alpha_of(prims, frames):
    return R.draw(torch.zeros(frames, H, W, 3), prims)[1].numpy()


@pytest.mark.parametrize("head", ["none", "dot", "arrow"])
def test_trails_and_heads_match_the_supersampled_reference(head):
    """Without fading a trail is one shape (its joints drawn once): the union of its segments' capsules
    at the opacity; the heads lie over it. Every frame of the batch against its own reference."""
    X, Y = samples()
    xy, visible = tracks()
    width, size, opacity, length = 2.5, 7.0, 0.7, 3
    rgb = torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]])
    alpha = alpha_of(trail_layers(xy, visible, rgb, length, 0, width, opacity, 0.0, head, size), len(PATH))
    for t in range(len(PATH)):
        trails, heads = [], []
        for path in (PATH, OTHER):
            if min(path[t]) < 0:
                continue
            start = t
            while start > max(0, t - length) and min(path[start - 1]) >= 0:
                start -= 1
            if t > start:
                trails.append((opacity, pixel_mean(polyline(X, Y, path[start : t + 1], width / 2))))
            if head == "dot":
                heads.append((opacity, pixel_mean(np.hypot(X - path[t][0], Y - path[t][1]) <= size / 2)))
            elif head == "arrow":
                before = t - 1 if t > 0 and min(path[t - 1]) >= 0 else None
                after = t + 1 if t + 1 < len(path) and min(path[t + 1]) >= 0 else None
                if before is None and after is None:
                    heads.append((opacity, pixel_mean(np.hypot(X - path[t][0], Y - path[t][1]) <= width)))
                    continue
                a, b = (path[before], path[t]) if before is not None else (path[t], path[after])
                d = np.subtract(b, a) / np.hypot(*np.subtract(b, a))
                tip = np.add(path[t], d * size / 2)
                wings = []
                for s in (math.sin(ARROW_ANGLE), -math.sin(ARROW_ANGLE)):
                    c = math.cos(ARROW_ANGLE)
                    wings.append(tip - size * np.array([c * d[0] - s * d[1], s * d[0] + c * d[1]]))
                strokes = capsule(X, Y, tip, wings[0], width / 2) | capsule(X, Y, tip, wings[1], width / 2)
                heads.append((opacity, pixel_mean(strokes)))
        assert_close(alpha[t], over(*trails, *heads))


def test_fading_follows_age_along_the_trail():
    """fade 1: opacity falls from the head's to nothing trail_length frames back; a trail that is younger
    than trail_length ends at its age's opacity (here 2 of 4 frames: half)."""
    xy = torch.tensor([[[4.0 + 12 * t, 20.0]] for t in range(4)])
    visible = torch.ones(4, 1, dtype=torch.bool)
    rgb = torch.ones(1, 3)
    alpha = alpha_of(trail_layers(xy, visible, rgb, 4, 0, 6.0, 1.0, 1.0, "none"), 4)
    row = alpha[3, 20]  # frame 3: a trail over 40..4 px, ages 0..3 of 4: opacity 1 to 0.25
    x = np.arange(W) + 0.5
    inside = (x > 8) & (x < 36)
    expected = 1 - (40 - x) / 12 / 4
    assert np.abs(row[inside] - expected[inside]).max() < 0.1  # colour steps of a few pixels
    assert np.all(np.diff(row[inside]) >= -0.02)  # never darker towards the head (but at the steps' seams)
    young = alpha[2, 20]  # frame 2: ages 0..2 of 4, down to 0.5 at the tail
    assert young[5] == pytest.approx(0.5 + 1.5 / 48, abs=0.06)


def test_future_trails_and_hidden_points():
    """future_length draws the path ahead; a hidden point has no head and no trail, and no trail runs
    across a hidden frame."""
    xy, visible = tracks()
    rgb = torch.ones(2, 3)
    past = alpha_of(trail_layers(xy, visible, rgb, 5, 0, 2.0, 1.0, 0.0, "none"), 6)
    future = alpha_of(trail_layers(xy, visible, rgb, 0, 5, 2.0, 1.0, 0.0, "none"), 6)
    assert past[0].sum() == 0 and future[5].sum() == 0  # nothing behind the first frame, ahead of the last
    assert future[0][30, 6] > 0.9 and future[0][9, 38] > 0.5  # frame 0's future reaches the path's end
    assert past[3][9, 7] == 0 and past[3][10, 13] == 0  # OTHER is hidden in frame 3: no trail there
    assert past[4][11, 19] == 0  # frame 4: one point since the gap, no trail yet
    assert past[5][12, 23] > 0.5 and past[5][10, 13] == 0  # frame 5: the trail starts after the gap


def test_no_tracks_and_bad_head():
    rgb = torch.zeros(0, 3)
    prims = trail_layers(torch.zeros(3, 0, 2), torch.zeros(3, 0, dtype=torch.bool), rgb, 5, 5)
    assert len(prims) == 0
    with pytest.raises(ValueError, match="head: expected one of arrow, dot, none, got 'star'"):
        trail_layers(torch.zeros(3, 0, 2), torch.zeros(3, 0, dtype=torch.bool), rgb, 5, head="star")


def test_one_set_of_primitives_for_every_frame():
    """No loop over frames or tracks: the primitive count follows T * N * (trail points), made in a fixed
    number of batched calls, and the device is never waited on."""
    from opcount import OpCount

    xy = torch.rand(40, 30, 2) * 30
    visible = torch.rand(40, 30) > 0.1
    few, few_visible, few_rgb, rgb = xy[:, :3].clone(), visible[:, :3].clone(), torch.ones(3, 3), torch.ones(30, 3)
    with OpCount() as small:
        trail_layers(few, few_visible, few_rgb, 8, 4)
    with OpCount() as large:
        trail_layers(xy, visible, rgb, 8, 4)
    assert large.launches == small.launches and large.syncs == small.syncs == 0 and large.float64 == 0
