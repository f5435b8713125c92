"""Quadratic Bezier links for all edges of all frames, flattened into polylines in one batch."""
from __future__ import annotations

import torch

TOLERANCE = 0.05  # largest distance in pixels between a curve and its flattened polyline
MAX_SEGMENTS = 64


def bezier_polylines(start: torch.Tensor, end: torch.Tensor, curvature: float, sign: torch.Tensor | None = None):
    """Quadratic Beziers from start to end (float [E,2] each), bent along the left normal by
    curvature x length (times sign [E] of +1/-1, default +1), as padded polylines.

    Each curve gets the fewest segments that keep it within TOLERANCE of the true curve: a
    quadratic's deviation from n equal-parameter chords is |p0 - 2 p1 + p2| / (4 n^2).
    Returns points float [E, S+1, 2] and lengths int64 [E] (points used per curve).
    """
    delta = end - start
    normal = torch.stack([-delta[:, 1], delta[:, 0]], -1)  # length-scaled left normal
    bend = curvature * (sign[:, None] if sign is not None else 1.0)
    control = (start + end) / 2 + normal * bend
    second_difference = (start + end - 2 * control).norm(dim=-1)
    segments = torch.ceil(torch.sqrt(second_difference / (4 * TOLERANCE))).clamp(1, MAX_SEGMENTS).long()
    if segments.numel() == 0:
        return torch.zeros(0, 2, 2, device=start.device), torch.zeros(0, dtype=torch.long, device=start.device)
    width = int(segments.max())
    step = torch.arange(width + 1, device=start.device)[None]
    t = (step / segments[:, None]).clamp(max=1.0)[..., None]  # padding repeats the end point
    points = (1 - t) ** 2 * start[:, None] + 2 * (1 - t) * t * control[:, None] + t ** 2 * end[:, None]
    return points, segments + 1


def alternating_sign(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """+1 or -1 per edge from its end points, stable from frame to frame."""
    return 1.0 - 2.0 * ((i + j) % 2).float()
