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
# the waves' shapes f(u) across the chord, u in 0..1: elastic, a damped wave of two swings,
# sin(4 pi u)(1 - u); fourier, the first five terms of a sawtooth's series, sum sin(2 pi n u) / n. Their
# peaks max |f|, and a bound on the slope max |f'| / max |f| (found numerically, rounded up)
WAVE_PEAK = {"elastic": 0.87859163, "fourier": 1.5828524}
WAVE_SLOPE = {"elastic": 14.31, "fourier": 19.86}
# Chords spaced by wave_spacing and straddled stay within WAVE_SPACED[0] / (n - WAVE_SPACED[1])^2 of
# f / max |f| (across the link) for n up to MAX_SEGMENTS chords (found numerically, rounded up; tested):
# a link of length L takes sqrt(L |curvature| WAVE_SPACED[0] / TOLERANCE) + WAVE_SPACED[1]. Chords on
# the curve, equally spaced, would need max |f''| / max |f| / 8 for the first: 20.4 (elastic), 41.2 (fourier)
WAVE_SPACED = {"elastic": (4.95, 1.5), "fourier": (7.2, 4.0)}
# spiral_chords' count for chords on the spiral, sqrt(L x per_length) + extra, straddled:
# sqrt(L x per_length x SPIRAL_SPACED[0]) + extra / 2 + SPIRAL_SPACED[1] (found numerically, the distance
# both ways against dense samples, at 0.0125 to 5 turns for n = 1 .. MAX_SEGMENTS, rounded up; tested)
SPIRAL_SPACED = (0.55, 0.5)
# A wave's spacing follows sqrt(max(|f''|, BEND_FLOOR x max |f''|)): near where it turns from one side to
# the other the straddle cannot help (the vertices there move little), so its chords stay shorter
BEND_FLOOR = 0.1
# Each inner vertex moves away from the line through its two neighbours by STRADDLE x its distance to it:
# on an arc that distance is 4x a chord's sag, so the polyline crosses the curve, straying half the sag
# to either side, and a chord may sag twice as far as one with its ends on the curve
STRADDLE = 1 / 8
# The end chords' share of the bend over an inner chord's: their end vertices (the tracked points) stay
# on the curve, so they straddle it only at one end
END_SHARE = 0.85
SPACING_KNOTS = 256  # the table wave_spacing inverts: the waves' bend at 257 points


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
    bound = None if max_length is None else math.sqrt(per_unit * degree * abs(curvature) * max(max_length, 0.0))
    segments, width = _chord_counts(torch.sqrt(bend.norm(dim=-1) * (degree * per_unit)), bound)
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


def _chord_counts(chords: torch.Tensor, bound: float | None) -> tuple[torch.Tensor, int]:
    """Chords per curve int64 [E], ceil(chords [E]) (what keeps each within TOLERANCE), at least 1 and at
    most MAX_SEGMENTS, and the padded width: from bound, a host bound on chords (no host sync; one more
    chord for rounding), else the most chords of a curve (one host sync)."""
    segments = torch.ceil(chords)
    if bound is None:
        segments = segments.clamp(1, MAX_SEGMENTS).long()
        return segments, int(segments.max())
    width = min(MAX_SEGMENTS, math.ceil(bound) + 1)
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

    Each link gets the fewest chords that keep it within TOLERANCE of its curve, at most MAX_SEGMENTS,
    their ends spaced by the curve's bend (short chords where it bends most: spiral_spacing,
    wave_spacing; the end chords END_SHARE of an inner one's share), the same spacing for every link of a
    family and curvature, and straddling the curve (_straddle: the inner vertices moved off it, to the
    side it bends away from, so that each chord strays to both sides). max_length: a host bound on
    the links' lengths, which sizes the padding with no host sync (None: the links' own, one sync).
    Returns points float [E, S+1, 2] and lengths int64 [E] (points used per curve).
    """
    if curve not in ("spiral", *WAVE_PEAK):
        raise ValueError(f"curve: expected spiral, elastic or fourier, got {curve!r}")
    delta = end - start
    length = delta.norm(dim=-1)
    if length.numel() == 0:
        return _no_curves(start.device)
    turn = 2 * math.pi * SPIRAL_TURNS * curvature  # the spiral's angle, radians
    if curve == "spiral":  # chords: sqrt(length x per_length) + extra
        per_length, extra = spiral_chords(turn)
        swing = abs(turn) / 4  # the farthest a spiral gets from its link, over the link's length
    else:  # a wave strays from a chord across the link only: by curvature x length x that of f / max |f|
        spread, ends = WAVE_SPACED[curve]
        per_length, extra = abs(curvature) * spread / TOLERANCE, ends if curvature else 0.0
        swing = abs(curvature)
    bound = None if max_length is None else math.sqrt(max(max_length, 0.0) * per_length) + extra
    # a link the curve strays from by TOLERANCE at most is drawn straight: one chord, not `extra`
    chords = torch.where(length * swing <= TOLERANCE, 1.0, torch.sqrt(length * per_length) + extra)
    segments, width = _chord_counts(chords, bound)
    # equal steps over 0 .. 1 but for the end chords' END_SHARE of one (the padding repeats the end)
    short = 1 - END_SHARE
    steps = (torch.arange(width + 1, device=start.device)[None] - short) / (segments[:, None] - 2 * short)
    steps = steps.clamp(0.0, 1.0)  # [E,S+1]
    sign = sign[:, None] if sign is not None else 1.0
    if curve == "spiral":
        u = spiral_spacing(turn, steps)
        angle = (u - 1) * turn * sign
        cos, sin = torch.cos(angle), torch.sin(angle)
        dx, dy = delta[:, None, 0], delta[:, None, 1]
        turned = torch.stack([cos * dx - sin * dy, sin * dx + cos * dy], -1)
        return _straddle(start[:, None] + u[..., None] * turned, segments), segments + 1
    u = wave_spacing(curve, steps)
    across = wave_shape(curve, u) * ((curvature / WAVE_PEAK[curve]) * sign)
    normal = torch.stack([-delta[:, 1], delta[:, 0]], -1)  # length-scaled left normal
    points = start[:, None] + u[..., None] * delta[:, None] + across[..., None] * normal[:, None]
    return _straddle(points, segments, normal), segments + 1


def _straddle(points: torch.Tensor, segments: torch.Tensor, along: torch.Tensor | None = None) -> torch.Tensor:
    """Polylines points [E, S+1, 2] of segments [E] chords each, their vertices on a curve, with each inner
    vertex (1 .. segments - 1) moved away from the line through its two neighbours by STRADDLE x its
    distance to it (measured along the move): along along [E,2], a wave's normal, so a wave stays a graph
    over its link and WAVE_SPACED holds at any curvature; None: square to that line. The ends stay put."""
    before, at, after = points[:, :-2], points[:, 1:-1], points[:, 2:]
    span, back = after - before, before - at
    if along is None:
        direction = torch.stack([-span[..., 1], span[..., 0]], -1)
    else:
        direction = along[:, None].expand_as(span)

    def cross(a, b):
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]

    # at + direction x reach lies on the line; cross(span, direction) >= 0: |span|^2 square to the line,
    # span . delta = the parameter step x length^2 along a wave's normal; 0 only where the points coincide
    reach = cross(span, back) / cross(span, direction).clamp(min=torch.finfo(points.dtype).tiny)
    inner = torch.arange(1, points.shape[1] - 1, device=points.device)[None] < segments[:, None]
    move = direction * torch.where(inner, reach * -STRADDLE, 0.0)[..., None]
    return points + torch.nn.functional.pad(move, (0, 0, 1, 1))


def wave_shape(curve: str, u: torch.Tensor) -> torch.Tensor:
    """The wave's shape f(u) across the chord (WAVE_PEAK's), at u float [...] in 0..1."""
    if curve == "elastic":
        return torch.sin((4 * math.pi) * u) * (1 - u)
    harmonic = torch.arange(1, FOURIER_HARMONICS + 1, device=u.device)
    return (torch.sin((2 * math.pi) * u[..., None] * harmonic) / harmonic).sum(-1)


def wave_spacing(curve: str, steps: torch.Tensor) -> torch.Tensor:
    """The wave's parameters u float [...] (0 .. 1 along the chord) at steps float [...] (equal steps over
    0 .. 1), spaced so that the chords between them stray alike: each spans an equal share of the
    integral of sqrt |f''| (its deviation from f is about |f''| du^2 / 8, half that straddled), |f''| no
    less than BEND_FLOOR x its largest, through a table of SPACING_KNOTS + 1 points made on the device.
    WAVE_SPACED bounds the result, straddled."""
    knots = torch.arange(SPACING_KNOTS + 1, device=steps.device) / SPACING_KNOTS
    if curve == "elastic":  # f'' / (-8 pi)
        bend = torch.sin((4 * math.pi) * knots) * (2 * math.pi) * (1 - knots) + torch.cos((4 * math.pi) * knots)
    else:  # f'' / (-4 pi^2)
        harmonic = torch.arange(1, FOURIER_HARMONICS + 1, device=steps.device)
        bend = (torch.sin((2 * math.pi) * knots[:, None] * harmonic) * harmonic).sum(-1)
    bend = bend.abs()
    density = torch.maximum(bend, bend.max() * BEND_FLOOR).sqrt()
    share = torch.nn.functional.pad(torch.cumsum(density[1:] + density[:-1], 0), (1, 0))  # trapezoids
    share = share / share[-1]
    # the inverse of the piecewise-linear share(u): steps in share's interval i - 1 .. i
    i = torch.searchsorted(share, steps, right=True).clamp(1, SPACING_KNOTS)
    low, high = share[i - 1], share[i]
    return (i - 1 + (steps - low) / (high - low)) / SPACING_KNOTS


def spiral_chords(turn: float) -> tuple[float, float]:
    """(per_length, extra): spiral_spacing's chords of a spiral of `turn` radians and length L, straddled
    (wave_polylines), stay within TOLERANCE with sqrt(L x per_length) + extra of them. On the curve:
    p(u) = L u R(turn (u - 1)) has |p''| = L |turn| sqrt(4 + turn^2 u^2) <= L |turn| h(u), h(u) = 2 + b u
    with b = sqrt(4 + turn^2) - 2 (a convex function lies under its chord); n chords spaced by sqrt(h)
    stray by at most L |turn| J^2 (1 + b J / (2 sqrt 2 n)) / (8 n^2), J the integral of sqrt(h) over 0..1,
    and take sqrt(L |turn| J^2 / (8 TOLERANCE)) + b J / (4 sqrt 2). Straddled they take SPIRAL_SPACED's
    count: per_length scaled by its first, extra halved and its second added."""
    b, rise = _spiral_bend(turn)
    integral = 4 * math.sqrt(2) * rise / (3 * b) if b > 0 else math.sqrt(2)
    share, ends = SPIRAL_SPACED
    per_length = abs(turn) * integral**2 / (8 * TOLERANCE) * share
    return per_length, b * integral / (8 * math.sqrt(2)) + (ends if turn else 0.0)


def spiral_spacing(turn: float, steps: torch.Tensor) -> torch.Tensor:
    """A spiral's parameters u float [...] at steps float [...] (equal steps over 0 .. 1): equal shares of
    the integral of sqrt(h) (spiral_chords' bound on its bend), ((1 + steps x rise)^(2/3) - 1) x 2 / b,
    written with expm1 and log1p to stay exact where b is small."""
    b, rise = _spiral_bend(turn)
    if b == 0:  # no turn: a straight link
        return steps
    u = torch.expm1(torch.log1p(steps * rise) * (2 / 3)) * (2 / b)
    return torch.where(steps < 1, u, 1.0)  # the end exactly on the link's end (u is 1 within a few ulp)


def _spiral_bend(turn: float) -> tuple[float, float]:
    """spiral_chords' b = sqrt(4 + turn^2) - 2 (written without cancelling) and rise = (h(1) / 2)^1.5 - 1."""
    b = turn * turn / (math.sqrt(4 + turn * turn) + 2)
    return b, math.expm1(1.5 * math.log1p(b / 2))


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
    """A bound on a link's arc length over its chord, and on its flattened polyline's (tested): a Bezier's
    control polygon; a wave's 1 + max |slope across the chord|; a spiral's integral of sqrt(1 + w^2 u^2)
    over 0..1, <= 1 + |w| / 2."""
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
