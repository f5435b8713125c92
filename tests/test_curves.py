"""Bezier links: flattened within tolerance, drawn like the analytic curve."""
import numpy as np
import torch
from scipy.spatial import cKDTree

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.gpu_curves import TOLERANCE, alternating_sign, bezier_polylines


def bezier(p0, p1, p2, t):
    t = t[:, None]
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t ** 2 * p2


def test_flattening_stays_within_tolerance():
    start = torch.tensor([[5.0, 5.0], [0.0, 0.0], [10.0, 40.0]])
    end = torch.tensor([[200.0, 40.0], [3.0, 0.0], [10.0, -300.0]])
    points, lengths = bezier_polylines(start, end, 0.4)
    for e in range(3):
        p0, p2 = start[e].numpy(), end[e].numpy()
        normal = np.array([-(p2 - p0)[1], (p2 - p0)[0]])
        dense = bezier(p0, (p0 + p2) / 2 + 0.4 * normal, p2, np.linspace(0, 1, 4000))
        chord = points[e, :lengths[e]].numpy()
        # distance of every dense curve point to the polyline
        a, b = chord[:-1], chord[1:]
        d = b - a
        t = np.clip((((dense[:, None] - a) * d).sum(-1)) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
        gap = np.linalg.norm(dense[:, None] - (a + t[..., None] * d), axis=-1).min(1)
        assert gap.max() <= TOLERANCE * 1.01
    assert bezier_polylines(start, end, 0.0)[1].tolist() == [2, 2, 2]  # straight links stay one segment


def test_curve_rendering_matches_a_supersampled_reference():
    height, width, samples = 40, 56, 16
    start, end = torch.tensor([[6.0, 30.0]]), torch.tensor([[50.0, 24.0]])
    points, lengths = bezier_polylines(start, end, 0.3, alternating_sign(torch.tensor([1]), torch.tensor([2])))
    _, alpha, _ = R.draw(torch.zeros(1, height, width, 3), R.polylines(0, points, lengths, 2.0, (1, 1, 1, 1)))
    p0, p2 = start[0].numpy(), end[0].numpy()
    normal = np.array([-(p2 - p0)[1], (p2 - p0)[0]])
    dense = bezier(p0, (p0 + p2) / 2 - 0.3 * normal, p2, np.linspace(0, 1, 20000))  # sign -1 for (1, 2)
    ys = (np.arange(height * samples) + 0.5) / samples
    xs = (np.arange(width * samples) + 0.5) / samples
    X, Y = np.meshgrid(xs, ys)
    near = cKDTree(dense).query(np.stack([X.ravel(), Y.ravel()], 1), distance_upper_bound=2.0)[0].reshape(X.shape)
    reference = (near <= 1.0).reshape(height, samples, width, samples).mean(axis=(1, 3))
    error = np.abs(alpha[0].numpy() - reference)
    assert error.mean() < 0.01 and error.max() < 0.1, (error.mean(), error.max())


def test_signs_alternate_by_end_points():
    assert alternating_sign(torch.tensor([0, 1]), torch.tensor([2, 2])).tolist() == [1.0, -1.0]
    empty, lengths = bezier_polylines(torch.zeros(0, 2), torch.zeros(0, 2), 0.2)
    assert empty.shape[0] == 0 and lengths.numel() == 0
