"""Track trails: each tracked point's path over its past (and future) frames, drawn on every frame of a
batch at once as anti-aliased polylines fading with age, with an arrow or a dot at the point, in one
set of primitives for all frames and tracks (what WanMove Visualize Tracks draws, frame by frame, in
PIL).

Points come as xy float [T,N,2] (on the render device) and visible bool [T,N]; a hidden frame ends a
trail there (the path is never drawn across it), and a hidden point has no trail and no head.
"""

from __future__ import annotations

import math

import torch

from . import primitives as R
from .link_styles import GRADIENT_STEP, GRADIENT_STEPS, styled_polylines, trail_paths

HEADS = ("arrow", "dot", "none")
ARROW_ANGLE = math.radians(28.0)  # half the opening of an arrow head's two strokes


def trail_layers(
    xy: torch.Tensor,
    visible: torch.Tensor,
    rgb: torch.Tensor,
    trail_length: int,
    future_length: int = 0,
    width: float = 3.0,
    opacity: float = 0.9,
    fade: float = 1.0,
    head: str = "arrow",
    head_size: float = 8.0,
    arc_bound: float = 0.0,
) -> R.Primitives:
    """The trails' primitives, bottom first: the past trails, the future trails, the heads.

    xy float [T,N,2] on the render device, visible bool [T,N], rgb float [N,3] (each track's colour).
    trail_length, future_length: frames drawn behind and ahead of each frame's point (0: none).
    fade 0..1: a trail's opacity falls linearly with age, from `opacity` at the point to
    opacity * (1 - fade) `trail_length` (`future_length`) frames away; between its points along its
    arc. head one of HEADS, head_size its length (arrow, pointing along the motion from the frame before,
    else to the frame after; a dot where the point does not move) or radius (dot). arc_bound: a host
    bound on every trail's arc length (0: none), which spares a fading trail the colour steps it cannot
    reach (the same pixels).
    """
    if head not in HEADS:
        raise ValueError(f"head: expected one of {', '.join(HEADS)}, got {head!r}")
    device = xy.device
    visible = visible.to(device)
    steps, n = visible.shape
    colour = torch.cat([rgb.to(device, torch.float32), torch.full((n, 1), float(opacity), device=device)], 1)
    layers = []
    for length, reverse in ((trail_length, False), (future_length, True)):
        if length > 0 and steps > 1 and n:
            layers.append(_trails(xy, visible, colour, length, reverse, width, fade, arc_bound))
    if head != "none" and head_size > 0 and n:
        layers.append(_heads(xy, visible, colour, head, head_size, width))
    return R.concat(*layers) if layers else R.empty(device)


def _trails(xy, visible, colour, length: int, reverse: bool, width: float, fade: float, arc_bound: float):
    """Every visible point's path over `length` frames back (reverse: ahead), from the point outwards."""
    if reverse:  # the future is the past of the batch played backwards
        xy, visible = xy.flip(0), visible.flip(0)
    frame, points, lengths = trail_paths(xy, visible, length)
    if reverse:
        frame = xy.shape[0] - 1 - frame
    start = colour.repeat(visible.shape[0], 1)  # [T*N,4], track n of frame t at t * N + n
    if fade <= 0:
        return styled_polylines(frame, points, lengths, width, start)
    age = (lengths.to(start.device) - 1).clamp_min(0).float()
    end = start.clone()
    end[:, 3] *= 1 - fade * (age / length).clamp(max=1)
    bounded = 0 < arc_bound < GRADIENT_STEP * GRADIENT_STEPS  # else any of the steps may be needed
    steps = math.ceil(arc_bound / GRADIENT_STEP) if bounded else GRADIENT_STEPS
    return styled_polylines(frame, points, lengths, width, start, end, max_steps=steps)


def _heads(xy, visible, colour, head: str, size: float, width: float) -> R.Primitives:
    """A dot, or an arrow along the point's motion, at every point of every frame (opacity 0 where hidden)."""
    steps, n = visible.shape
    device = xy.device
    frame = torch.arange(steps, device=device)[:, None].expand(steps, n).reshape(-1)
    rgba = colour.repeat(steps, 1)
    shown = visible.reshape(-1)
    if head == "dot":
        return R.discs(frame, xy.reshape(-1, 2), size / 2, rgba * _alpha_mask(shown))
    zero = torch.zeros_like(xy[:1])
    back = torch.cat([zero, xy[1:] - xy[:-1]])  # motion from the frame before
    ahead = torch.cat([xy[1:] - xy[:-1], zero])  # motion to the frame after
    back_ok = torch.cat([torch.zeros_like(visible[:1]), visible[1:] & visible[:-1]])
    ahead_ok = torch.cat([visible[1:] & visible[:-1], torch.zeros_like(visible[:1])])
    back_ok &= back.norm(dim=-1) > 1e-3
    ahead_ok &= ahead.norm(dim=-1) > 1e-3
    motion = torch.where(back_ok[..., None], back, ahead).reshape(-1, 2)
    moving = (back_ok | ahead_ok).reshape(-1)
    direction = motion / motion.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    tip = xy.reshape(-1, 2) + direction * (size / 2)  # the arrow's middle on the point
    cos, sin = math.cos(ARROW_ANGLE), math.sin(ARROW_ANGLE)
    wings = [
        tip
        - size
        * torch.stack([cos * direction[:, 0] - s * direction[:, 1], s * direction[:, 0] + cos * direction[:, 1]], 1)
        for s in (sin, -sin)
    ]
    count = frame.shape[0]
    arrows = R.segments(
        frame.repeat_interleave(2),
        tip.repeat_interleave(2, 0),
        torch.stack(wings, 1).reshape(-1, 2),
        max(width, 1.0),
        (rgba * _alpha_mask(shown & moving)).repeat_interleave(2, 0),
    )
    arrows.group = torch.arange(count, device=device).repeat_interleave(2)  # one shape: the tip drawn once
    dots = R.discs(frame, xy.reshape(-1, 2), max(width, 1.0), rgba * _alpha_mask(shown & ~moving))
    return R.concat(arrows, dots)


def _alpha_mask(keep: torch.Tensor) -> torch.Tensor:
    """float [P,4]: 1 in RGB, keep (0 or 1) in alpha: RGBA times it hides the primitives not kept."""
    return torch.cat([torch.ones(keep.shape[0], 3, device=keep.device), keep.float()[:, None]], 1)
