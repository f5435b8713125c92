"""The design card's Bezier flattening: links as quadratic Beziers or cubic S-curves, for all edges of all
frames, flattened into polylines in one batch. Used by nodes/links.py (RasterKit_LineLinkRenderer's curves)."""

from __future__ import annotations

import math

import torch

TOLERANCE = 0.05  # largest distance in pixels between a curve and its flattened polyline
MAX_SEGMENTS = 128  # a 400 px cubic S-curve at curvature 0.4 needs 78


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
    segments = torch.ceil(torch.sqrt(bend.norm(dim=-1) * (degree * degree * (degree - 1) / 8 / TOLERANCE)))
    if segments.numel() == 0:
        return torch.zeros(0, 2, 2, device=start.device), torch.zeros(0, dtype=torch.long, device=start.device)
    if max_length is None:
        segments = segments.clamp(1, MAX_SEGMENTS).long()
        width = int(segments.max())
    else:  # the largest second difference is degree x |curvature| x length; one more segment for rounding
        bound = degree * (degree - 1) / 8 * degree * abs(curvature) * max(max_length, 0.0) / TOLERANCE
        width = min(MAX_SEGMENTS, math.ceil(math.sqrt(bound)) + 1)
        segments = segments.clamp(1, width).long()
    step = torch.arange(width + 1, device=start.device)[None]
    t = (step / segments[:, None]).clamp(max=1.0)[..., None]  # padding repeats the end point
    # Horner's rule, a fused multiply-add a term
    first = torch.add(delta, bend, alpha=degree)[:, None]
    if cubic:
        rest = torch.addcmul(first, bend[:, None], t * (t * 6 - 9))
    else:
        rest = torch.addcmul(first, bend[:, None], t, value=-2)
    return torch.addcmul(start[:, None], t, rest), segments + 1


def control_polygon_length(curve: str, curvature: float) -> float:
    """Length of a link's control polygon over its chord: a bound on the curve's length."""
    if curve == "bezier":
        return 2 * math.hypot(0.5, curvature)
    if curve == "cubic":
        return 2 * math.hypot(1 / 3, curvature) + math.hypot(1 / 3, 2 * curvature)
    return 1.0


def alternating_sign(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """+1 or -1 per edge from its end points, stable from frame to frame."""
    return torch.pow(-1.0, i + j)  # float32 (a Python float base); (-1)^n is exact for whole n
