"""The design card's curve flattening: links as quadratic Beziers or cubic S-curves, or as spirals and waves
(ys-vision-tools' spiral, elastic and Fourier families), for all edges of all frames, flattened into
polylines in one batch. Used by nodes/links.py (RasterKit_LineLinkRenderer's curves)."""

from __future__ import annotations

import math

import torch

TOLERANCE = 0.05  # largest distance in pixels between a curve and its flattened polyline
MAX_SEGMENTS = 128  # a 400 px cubic S-curve at curvature 0.4 needs 78
CURVES = ("straight", "bezier", "cubic", "spiral", "elastic", "fourier")
SPIRAL_TURNS = 2.5  # a spiral's turns per unit of curvature: 0.5 at the default 0.2 (ys-vision-tools' default)
FOURIER_HARMONICS = 5
# the waves' shapes f(u) across the chord, u in 0..1: their peaks max |f|, and bounds on the first and second
# derivatives of f / max |f| (found numerically, rounded up): elastic, a damped wave of two
# swings, sin(4 pi u)(1 - u); fourier, the first five terms of a sawtooth's series, sum sin(2 pi n u) / n
WAVE_PEAK = {"elastic": 0.87859163, "fourier": 1.5828524}
WAVE_SLOPE = {"elastic": 14.31, "fourier": 19.86}
WAVE_BEND = {"elastic": 163.0, "fourier": 329.3}


def bezier_polylines(
    start: torch.Tensor,
    end: torch.Tensor,
    curvature: float,
    sign: torch.Tensor | None = None,
    cubic: bool = False,
    max_length: float | None = None,
):
    """Beziers from start to end (float [E,2] each), as padded polylines. Quadratic: bent along the left
    normal by curvature x length (times sign [E] of +1/-1, default +1). Cubic: an S-curve, its control
    points a third and two thirds along the link, bent that much to the left and to the right.

    Each curve gets the fewest segments that keep it within TOLERANCE of the true curve: a Bezier of
    degree d deviates from n equal-parameter chords by at most d (d - 1) / 8 max |second difference of
    its control points| / n^2.
    max_length: a host bound on the links' lengths |end - start| (max_distance): the padding follows
    from it with no host sync (a longer link gets the bound's segments); None: from the curves
    themselves (one host sync).
    Returns points float [E, S+1, 2] and lengths int64 [E] (points used per curve).
    """
    delta = end - start
    normal = torch.stack([-delta[:, 1], delta[:, 0]], -1)  # length-scaled left normal
    bend = normal * (curvature * (sign[:, None] if sign is not None else 1.0))
    # In the power basis the controls (start, mid + bend, end) and (start, start + delta/3 + bend,
    # start + 2 delta/3 - bend, end) give B(t) = start + t (delta + 2 bend) - 2 bend t^2 and
    # start + t (delta + 3 bend) + bend t^2 (6 t - 9); their second differences are 2 |bend| and 3 |bend|
    degree = 3 if cubic else 2
    if delta.numel() == 0:
        return _no_curves(start.device)
    per_unit = degree * (degree - 1) / 8 / TOLERANCE  # chords^2 per unit of second difference
    # the largest second difference is degree x |curvature| x length
    bound = None if max_length is None else per_unit * degree * abs(curvature) * max(max_length, 0.0)
    segments, width = _chord_counts(bend.norm(dim=-1) * (degree * per_unit), bound)
    step = torch.arange(width + 1, device=start.device)[None]
    t = (step / segments[:, None]).clamp(max=1.0)[..., None]  # padding repeats the end point
    # Horner's rule, a fused multiply-add a term
    first = torch.add(delta, bend, alpha=degree)[:, None]
    if cubic:
        rest = torch.addcmul(first, bend[:, None], t * (t * 6 - 9))
    else:
        rest = torch.addcmul(first, bend[:, None], t, value=-2)
    return torch.addcmul(start[:, None], t, rest), segments + 1


def _no_curves(device):
    return torch.zeros(0, 2, 2, device=device), torch.zeros(0, dtype=torch.long, device=device)


def _chord_counts(squared: torch.Tensor, bound: float | None) -> tuple[torch.Tensor, int]:
    """Chords per curve int64 [E], ceil(sqrt(squared [E])) (what keeps each within TOLERANCE), at least 1
    and at most MAX_SEGMENTS, and the padded width: from bound, a host bound on squared (no host sync;
    one more chord for rounding), else the most chords of a curve (one host sync)."""
    segments = torch.ceil(torch.sqrt(squared))
    if bound is None:
        segments = segments.clamp(1, MAX_SEGMENTS).long()
        return segments, int(segments.max())
    width = min(MAX_SEGMENTS, math.ceil(math.sqrt(bound)) + 1)
    return segments.clamp(1, width).long(), width


def wave_polylines(
    start: torch.Tensor,
    end: torch.Tensor,
    curve: str,
    curvature: float,
    sign: torch.Tensor | None = None,
    max_length: float | None = None,
):
    """Links from start to end (float [E,2] each) as spirals or waves, as padded polylines (the shapes of
    ys-vision-tools' curve families, drawn end to end on the link). curve "spiral": an Archimedean spiral
    out of the start, SPIRAL_TURNS x curvature turns (times sign [E] of +1/-1, default +1: the way it
    winds), its radius growing evenly to the link's length at the end; "elastic": a damped wave of two
    swings across the link, fading to its end; "fourier": five harmonics of a sawtooth across the link. A
    wave's largest swing is curvature x the link's length, along the left normal (times sign).

    Each link gets the fewest equal-parameter chords that keep it within TOLERANCE of its curve (a
    curve p(u) deviates from n chords by at most max |p''| / (8 n^2)), at most MAX_SEGMENTS. max_length:
    a host bound on the links' lengths, which sizes the padding with no host sync (None: the links' own,
    one sync). Returns points float [E, S+1, 2] and lengths int64 [E] (points used per curve).
    """
    if curve not in ("spiral", *WAVE_PEAK):
        raise ValueError(f"curve: expected spiral, elastic or fourier, got {curve!r}")
    delta = end - start
    length = delta.norm(dim=-1)
    if curve == "spiral":  # p(u) = start + u R(w (u - 1)) delta: |p''| <= L |w| sqrt(4 + w^2)
        turn = 2 * math.pi * SPIRAL_TURNS * abs(curvature)
        bend = turn * math.sqrt(4 + turn * turn)
    else:
        bend = abs(curvature) * WAVE_BEND[curve]
    if length.numel() == 0:
        return _no_curves(start.device)
    bound = None if max_length is None else max(max_length, 0.0) * bend / (8 * TOLERANCE)
    segments, width = _chord_counts(length * (bend / (8 * TOLERANCE)), bound)
    u = (torch.arange(width + 1, device=start.device)[None] / segments[:, None]).clamp(max=1.0)  # [E,S+1]
    sign = sign[:, None] if sign is not None else 1.0
    if curve == "spiral":
        angle = (u - 1) * (2 * math.pi * SPIRAL_TURNS * curvature) * sign
        cos, sin = torch.cos(angle), torch.sin(angle)
        dx, dy = delta[:, None, 0], delta[:, None, 1]
        turned = torch.stack([cos * dx - sin * dy, sin * dx + cos * dy], -1)
        return start[:, None] + u[..., None] * turned, segments + 1
    if curve == "elastic":
        across = torch.sin((4 * math.pi) * u) * (1 - u)
    else:
        harmonic = torch.arange(1, FOURIER_HARMONICS + 1, device=start.device)
        across = (torch.sin((2 * math.pi) * u[..., None] * harmonic) / harmonic).sum(-1)
    across = across * ((curvature / WAVE_PEAK[curve]) * sign)
    normal = torch.stack([-delta[:, 1], delta[:, 0]], -1)  # length-scaled left normal
    return start[:, None] + u[..., None] * delta[:, None] + across[..., None] * normal[:, None], segments + 1


def curve_polylines(
    start: torch.Tensor,
    end: torch.Tensor,
    curve: str,
    curvature: float,
    sign: torch.Tensor | None = None,
    max_length: float | None = None,
):
    """Links of any curved family of CURVES (all but straight) as padded polylines: bezier_polylines'
    Beziers or wave_polylines' spirals and waves, with their shapes and arguments."""
    if curve in ("bezier", "cubic"):
        return bezier_polylines(start, end, curvature, sign, cubic=curve == "cubic", max_length=max_length)
    return wave_polylines(start, end, curve, curvature, sign, max_length)


def arc_length_ratio(curve: str, curvature: float) -> float:
    """A bound on a link's arc length over its chord: a Bezier's control polygon; a wave's
    1 + max |slope across the chord|; a spiral's integral of sqrt(1 + w^2 u^2) over 0..1, <= 1 + |w| / 2."""
    if curve == "bezier":
        return 2 * math.hypot(0.5, curvature)
    if curve == "cubic":
        return 2 * math.hypot(1 / 3, curvature) + math.hypot(1 / 3, 2 * curvature)
    if curve == "spiral":
        return 1 + math.pi * SPIRAL_TURNS * abs(curvature)
    if curve in WAVE_SLOPE:
        return 1 + abs(curvature) * WAVE_SLOPE[curve]
    return 1.0


def alternating_sign(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """+1 or -1 per edge from its end points, stable from frame to frame."""
    return torch.pow(-1.0, i + j)  # float32 (a Python float base); (-1)^n is exact for whole n
