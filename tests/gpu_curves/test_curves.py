"""Curved links (Beziers, spirals, waves): flattened within tolerance, drawn like the analytic curve."""

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.gpu_curves import (
    MAX_SEGMENTS,
    SPIRAL_TURNS,
    TOLERANCE,
    WAVE_SPACED,
    alternating_sign,
    arc_length_ratio,
    bezier_polylines,
    curve_polylines,
    spiral_chords,
    wave_polylines,
)


def bezier(p0, p1, p2, t):
    t = t[:, None]
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2


def link_curve(p0, p2, bend, cubic, t):
    """The link from p0 to p2 [2] as the node describes it, at t [N]: quadratic, its control point at the
    middle moved bend x the chord along the left normal; or a cubic S-curve, its control points at a
    third and two thirds of the chord moved that much left, then right."""
    normal = np.array([-(p2 - p0)[1], (p2 - p0)[0]]) * bend
    if not cubic:
        return bezier(p0, (p0 + p2) / 2 + normal, p2, t)
    c1, c2 = p0 + (p2 - p0) / 3 + normal, p0 + 2 * (p2 - p0) / 3 - normal
    t = t[:, None]
    return (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * c1 + 3 * (1 - t) * t**2 * c2 + t**3 * p2


def supersampled_line(dense, height, width, samples):
    """The coverage [H,W] of a 2 px wide line along the dense samples [N,2] of a curve: the share of each
    pixel's samples x samples points within 1 px of the curve (brute force)."""
    ys = (np.arange(height * samples) + 0.5) / samples
    xs = (np.arange(width * samples) + 0.5) / samples
    X, Y = np.meshgrid(xs, ys)
    near = cKDTree(dense).query(np.stack([X.ravel(), Y.ravel()], 1), distance_upper_bound=2.0)[0].reshape(X.shape)
    return (near <= 1.0).reshape(height, samples, width, samples).mean(axis=(1, 3))


@pytest.mark.parametrize("cubic", [False, True])
def test_flattening_stays_within_tolerance(cubic):
    start = torch.tensor([[5.0, 5.0], [0.0, 0.0], [10.0, 40.0]])
    end = torch.tensor([[200.0, 40.0], [3.0, 0.0], [10.0, -300.0]])
    points, lengths = bezier_polylines(start, end, 0.4, cubic=cubic)
    for e in range(3):
        dense = link_curve(start[e].numpy(), end[e].numpy(), 0.4, cubic, np.linspace(0, 1, 4000))
        chord = points[e, : lengths[e]].numpy()
        # distance of every dense curve point to the polyline
        a, b = chord[:-1], chord[1:]
        d = b - a
        t = np.clip((((dense[:, None] - a) * d).sum(-1)) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
        gap = np.linalg.norm(dense[:, None] - (a + t[..., None] * d), axis=-1).min(1)
        assert gap.max() <= TOLERANCE * 1.01
    # straight links stay one segment
    assert bezier_polylines(start, end, 0.0, cubic=cubic)[1].tolist() == [2, 2, 2]


@pytest.mark.parametrize("cubic", [False, True])
def test_curve_rendering_matches_a_supersampled_reference(cubic):
    height, width, samples = 40, 56, 16
    start, end = torch.tensor([[6.0, 30.0]]), torch.tensor([[50.0, 24.0]])
    points, lengths = bezier_polylines(
        start, end, 0.3, alternating_sign(torch.tensor([1]), torch.tensor([2])), cubic=cubic
    )
    _, alpha, _ = R.draw(torch.zeros(1, height, width, 3), R.polylines(0, points, lengths, 2.0, (1, 1, 1, 1)))
    dense = link_curve(start[0].numpy(), end[0].numpy(), -0.3, cubic, np.linspace(0, 1, 20000))  # sign -1: (1, 2)
    reference = supersampled_line(dense, height, width, samples)
    error = np.abs(alpha[0].numpy() - reference)
    assert error.mean() < 0.01 and error.max() < 0.1, (error.mean(), error.max())


def test_signs_alternate_by_end_points():
    assert alternating_sign(torch.tensor([0, 1]), torch.tensor([2, 2])).tolist() == [1.0, -1.0]
    empty, lengths = bezier_polylines(torch.zeros(0, 2), torch.zeros(0, 2), 0.2)
    assert empty.shape[0] == 0 and lengths.numel() == 0


@pytest.mark.parametrize("cubic", [False, True])
def test_a_host_bound_on_lengths_pads_without_a_sync(cubic):
    """max_length (max_distance) sizes the padding on the host: no host sync, the same curves."""
    from opcount import OpCount

    generator = torch.Generator().manual_seed(3)
    start = torch.rand(50, 2, generator=generator) * 200
    end = start + (torch.rand(50, 2, generator=generator) - 0.5) * 280  # links up to ~198 px
    sign = alternating_sign(torch.arange(50), torch.arange(1, 51))
    points, lengths = bezier_polylines(start, end, -0.4, sign, cubic=cubic)
    with OpCount() as count:
        bounded, bounded_lengths = bezier_polylines(start, end, -0.4, sign, cubic=cubic, max_length=198.0)
    assert count.syncs == 0 and count.uploads == 0, count.summary()
    assert torch.equal(bounded_lengths, lengths) and bounded.shape[1] >= points.shape[1]
    assert torch.equal(bounded[:, : points.shape[1]], points)
    assert torch.equal(bounded[:, points.shape[1] :], points[:, -1:].expand(-1, bounded.shape[1] - points.shape[1], -1))


# -- spirals and waves (ys-vision-tools' curve families) ---------------------------------------------


def wave_curve(p0, p2, curve, curvature, t):
    """The link from p0 to p2 [2] as the node describes it, at t [N], written out anew: a spiral winding
    out of p0 by 2.5 x curvature turns at a radius growing evenly to |p2 - p0|, ending on p2; or a wave
    across the chord, its largest swing curvature x the chord along the left normal."""
    d = p2 - p0
    if curve == "spiral":
        length, heading = np.hypot(*d), np.arctan2(d[1], d[0])
        angle = heading - 2 * np.pi * 2.5 * curvature * (1 - t)
        return p0 + (length * t)[:, None] * np.stack([np.cos(angle), np.sin(angle)], 1)
    shape = SHAPES[curve]
    across = shape(t) / np.abs(shape(np.linspace(0, 1, 200001))).max() * curvature
    return p0 + t[:, None] * d + across[:, None] * np.array([-d[1], d[0]])


SHAPES = {  # the waves across the chord, u in 0..1
    "elastic": lambda u: np.sin(4 * np.pi * u) * (1 - u),
    "fourier": lambda u: sum(np.sin(2 * np.pi * n * u) / n for n in range(1, 6)),
}


WAVES = ["spiral", "elastic", "fourier"]


@pytest.mark.parametrize("curve", WAVES)
def test_waves_flatten_within_tolerance(curve):
    start = torch.tensor([[5.0, 5.0], [0.0, 0.0], [10.0, 40.0]])
    end = torch.tensor([[90.0, 40.0], [3.0, 0.0], [10.0, -60.0]])
    points, lengths = wave_polylines(start, end, curve, 0.15)
    for e in range(3):
        dense = wave_curve(start[e].numpy(), end[e].numpy(), curve, 0.15, np.linspace(0, 1, 20000))
        chord = points[e, : lengths[e]].numpy()
        assert np.allclose(chord[0], dense[0], atol=1e-4) and np.allclose(chord[-1], dense[-1], atol=1e-4)
        a, b = chord[:-1], chord[1:]
        d = b - a
        t = np.clip((((dense[:, None] - a) * d).sum(-1)) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
        gap = np.linalg.norm(dense[:, None] - (a + t[..., None] * d), axis=-1).min(1)
        assert gap.max() <= TOLERANCE * 1.01
        # the arc length stays within arc_length_ratio's bound
        arc = np.hypot(*np.diff(dense, axis=0).T).sum()
        assert arc <= arc_length_ratio(curve, 0.15) * np.hypot(*(end[e] - start[e]).numpy()) + 1e-3
    # curvature 0: straight, one segment
    assert wave_polylines(start, end, curve, 0.0)[1].tolist() == [2, 2, 2]


def polyline_gap(dense, chord):
    """The largest distance from the points dense [N,2] to the polyline chord [M,2]."""
    a, b = chord[:-1], chord[1:]
    d = b - a
    t = np.clip((((dense[:, None] - a) * d).sum(-1)) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
    return np.linalg.norm(dense[:, None] - (a + t[..., None] * d), axis=-1).min(1).max()


def two_sided_gap(dense, chord):
    """The largest distance between the curve sampled densely, dense [N,2], and the polyline chord [M,2],
    both ways: from every curve point to the polyline, and from every point of the polyline (21 a
    chord) to the curve (to the dense samples' two segments beside the nearest one: an upper bound)."""
    t = np.linspace(0, 1, 21)[:, None, None]
    along = (chord[:-1] + t * (chord[1:] - chord[:-1])).reshape(-1, 2)
    nearest = np.clip(cKDTree(dense).query(along)[1], 1, len(dense) - 2)
    a = np.stack([dense[nearest - 1], dense[nearest]], 1)  # [K, 2 segments, 2]
    d = np.stack([dense[nearest], dense[nearest + 1]], 1) - a
    u = np.clip(((along[:, None] - a) * d).sum(-1) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
    back = np.linalg.norm(along[:, None] - (a + u[..., None] * d), axis=-1).min(1).max()
    return max(polyline_gap(dense, chord), back)


@pytest.mark.parametrize("curve", WAVES)
def test_chords_spaced_by_bend_stay_within_tolerance_with_fewer_chords(curve):
    """At several curvatures and lengths each link, straddling its curve, stays within TOLERANCE of the
    curve sampled densely both ways (end chords included: their end vertices stay on the tracked points),
    with far fewer chords than the fewest equal-parameter chords on the curve that would (max |p''| L^2 /
    (8 n^2), the largest second difference of the dense samples): a spiral 0.68 of them, a wave 0.55."""
    lengths = np.array([4.0, 30.0, 100.0, 180.0])
    start = torch.tensor([[7.0, 3.0]]).expand(len(lengths), 2)
    end = start + torch.from_numpy(lengths[:, None] * np.array([[0.6, -0.8]])).float()
    spaced = equal = 0
    t = np.linspace(0, 1, 20001)
    for curvature in (0.05, 0.1, -0.2, 0.3, 1.0):
        points, counts = wave_polylines(start, end, curve, curvature)
        for e in range(len(lengths)):
            dense = wave_curve(start[e].numpy(), end[e].numpy(), curve, curvature, t)
            chords = int(counts[e]) - 1
            assert chords < MAX_SEGMENTS or abs(curvature) == 1.0  # not cut short (but the steepest)
            if chords == MAX_SEGMENTS:
                continue
            polyline = points[e, : counts[e]].numpy()
            assert np.allclose(polyline[[0, -1]], dense[[0, -1]], atol=1e-4)
            assert two_sided_gap(dense, polyline) <= TOLERANCE * 1.01, (curvature, lengths[e])
            # a straddled polyline is longer than its curve, but within arc_length_ratio's bound
            drawn = np.hypot(*np.diff(polyline, axis=0).T).sum()
            assert drawn <= arc_length_ratio(curve, curvature) * lengths[e]
            bend = np.linalg.norm(np.diff(dense, 2, axis=0), axis=1).max() / (t[1] - t[0]) ** 2
            equal_chords = max(1, int(np.ceil(np.sqrt(bend / (8 * TOLERANCE)))))
            assert chords <= equal_chords
            spaced, equal = spaced + chords, equal + equal_chords
    assert spaced < (0.68 if curve == "spiral" else 0.55) * equal, (spaced, equal)


def largest_link(n, per_length, extra):
    """The longest link that gets n chords, sqrt(length x per_length) + extra of them (a hair under)."""
    return (n - extra) ** 2 / per_length * (1 - 1e-6)


@pytest.mark.parametrize("curve", ["elastic", "fourier"])
def test_straddled_waves_keep_their_bound(curve):
    """For every n up to MAX_SEGMENTS the longest wave that gets n chords (WAVE_SPACED's count), straddled,
    stays within TOLERANCE of its curve across the link, end chords included: a wave stays a graph over
    its link, so that bounds the distance both ways."""
    spread, ends = WAVE_SPACED[curve]
    shape = SHAPES[curve]
    peak = np.abs(shape(np.linspace(0, 1, 200001))).max()
    t = np.linspace(0, 1, 80)[None]
    for n in range(int(ends) + 1, MAX_SEGMENTS + 1):
        curvature = largest_link(n, spread / TOLERANCE, ends)  # a link of length 1 along x
        points, counts = wave_polylines(torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]), curve, curvature)
        if abs(curvature) <= TOLERANCE:  # strays from its link by TOLERANCE at most: one chord
            assert int(counts[0]) == 2
            continue
        assert int(counts[0]) == n + 1
        x, y = points[0, : n + 1].double().numpy().T
        assert x[0] == 0 and (np.diff(x) > 0).all()
        between = x[:-1, None] + (x[1:, None] - x[:-1, None]) * t
        polyline = y[:-1, None] + (y[1:, None] - y[:-1, None]) * t
        assert np.abs(shape(between) * (curvature / peak) - polyline).max() <= TOLERANCE * 1.005, n


@pytest.mark.parametrize("curvature", [0.01, 0.2, 2.0])
def test_straddled_spirals_keep_their_bound(curvature):
    """The longest spiral that gets n chords (spiral_chords' count), straddled, stays within TOLERANCE of
    its curve both ways, for n from 1 to MAX_SEGMENTS (every n to 24, then every 13th)."""
    per_length, extra = spiral_chords(2 * np.pi * SPIRAL_TURNS * curvature)
    t = np.linspace(0, 1, 40001)
    for n in [*range(1, 25), *range(25, MAX_SEGMENTS + 1, 13)]:
        if n <= extra:
            continue
        end = torch.tensor([[largest_link(n, per_length, extra), 0.0]])
        points, counts = wave_polylines(torch.zeros(1, 2), end, "spiral", curvature)
        if float(end[0, 0]) * abs(2 * np.pi * SPIRAL_TURNS * curvature) / 4 <= TOLERANCE:  # one chord will do
            assert int(counts[0]) == 2
            continue
        assert int(counts[0]) == n + 1
        dense = wave_curve(np.zeros(2), end[0].double().numpy(), "spiral", curvature, t)
        assert two_sided_gap(dense, points[0, : n + 1].double().numpy()) <= TOLERANCE * 1.01, n


@pytest.mark.parametrize("curve", WAVES)
def test_wave_rendering_matches_a_supersampled_reference(curve):
    height, width, samples = 40, 56, 16
    start, end = torch.tensor([[8.0, 22.0]]), torch.tensor([[47.0, 17.0]])
    sign = alternating_sign(torch.tensor([1]), torch.tensor([2]))  # -1
    points, lengths = curve_polylines(start, end, curve, 0.12, sign)
    _, alpha, _ = R.draw(torch.zeros(1, height, width, 3), R.polylines(0, points, lengths, 2.0, (1, 1, 1, 1)))
    dense = wave_curve(start[0].numpy(), end[0].numpy(), curve, -0.12, np.linspace(0, 1, 20000))
    reference = supersampled_line(dense, height, width, samples)
    error = np.abs(alpha[0].numpy() - reference)
    assert reference.sum() > 80 and error.mean() < 0.01 and error.max() < 0.1, (error.mean(), error.max())


@pytest.mark.parametrize("curve", WAVES)
def test_a_host_bound_on_lengths_pads_waves_without_a_sync(curve):
    from opcount import OpCount

    generator = torch.Generator().manual_seed(3)
    start = torch.rand(50, 2, generator=generator) * 200
    end = start + (torch.rand(50, 2, generator=generator) - 0.5) * 140  # links up to ~99 px
    sign = alternating_sign(torch.arange(50), torch.arange(1, 51))
    points, lengths = wave_polylines(start, end, curve, 0.1, sign)
    with OpCount() as count:
        bounded, bounded_lengths = wave_polylines(start, end, curve, 0.1, sign, max_length=99.0)
    assert count.syncs == 0 and count.uploads == 0 and count.float64 == 0, count.summary()
    assert torch.equal(bounded_lengths, lengths) and bounded.shape[1] >= points.shape[1]
    assert torch.equal(bounded[:, : points.shape[1]], points)


def test_bad_curve_is_named():
    with pytest.raises(ValueError, match="curve: expected spiral, elastic or fourier, got 'zigzag'"):
        wave_polylines(torch.zeros(1, 2), torch.ones(1, 2), "zigzag", 0.2)


@pytest.mark.parametrize("curve", WAVES)
def test_a_link_the_curve_hardly_leaves_is_one_chord(curve):
    """Where a curve strays from its link by TOLERANCE at most (short links, tiny curvatures), the link is
    one straight chord, not the few that the end chords' margin would add."""
    start = torch.tensor([[3.0, 4.0], [3.0, 4.0], [3.0, 4.0]])
    end = start + torch.tensor([[0.0, 0.0], [0.4, 0.3], [30.0, 40.0]])
    points, counts = wave_polylines(start, end, curve, 1e-4)
    assert counts.tolist() == [2, 2, 2]
    assert torch.allclose(points[:, 0], start) and torch.allclose(points[:, 1], end)
    points, counts = wave_polylines(start, end, curve, 0.3)
    assert counts[2] > 2
