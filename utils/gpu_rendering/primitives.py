"""The 2D renderer's primitives: P anti-aliased shapes over a batch of frames (segments, polylines, ellipses,
rounded boxes, halos, discs, sprites, triangles), built batched on the device, each with the bounds that binning
lists it by. Their geometry is in params [P, N_PARAMS], columns named per kind in constants.py; `draw`
(compositor.py) renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .constants import (
    BOX_FILL,
    BOX_STROKE,
    DISC,
    DISC_RING_FLAG,
    ELLIPSE,
    HALO,
    N_PARAMS,
    SEGMENT,
    SEGMENT_BUTT_FLAG,
    SPRITE,
    TRIANGLE,
)


@dataclass
class Primitives:
    """P primitives over a batch of frames, drawn in index order (later ones over earlier ones).

    frame  int64   [P]     frame index in the batch
    kind   int64   [P]     SEGMENT, BOX_FILL, BOX_STROKE, DISC, SPRITE, ELLIPSE, HALO or TRIANGLE
    params float32 [P,N_PARAMS]  geometry: the columns of its kind (constants.py)
    color  float32 [P,4]   straight RGB in 0..1 and opacity (the same within a group)
    bounds float32 [P,4]   x0, y0, x1, y1: pixels outside have zero coverage
    group  int64   [P]     consecutive primitives with equal group are one shape
    """

    frame: torch.Tensor
    kind: torch.Tensor
    params: torch.Tensor
    color: torch.Tensor
    bounds: torch.Tensor
    group: torch.Tensor

    def fields(self) -> tuple[torch.Tensor, ...]:
        return self.frame, self.kind, self.params, self.color, self.bounds, self.group

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def to(self, device) -> Primitives:
        return Primitives(*(t.to(device) for t in self.fields()))

    def select(self, keep: torch.Tensor) -> Primitives:
        return Primitives(*(t[keep] for t in self.fields()))

    def window(self, start: int, stop: int) -> Primitives:
        """The primitives of frames start..stop, their frames numbered from start."""
        kept = self.select((self.frame >= start) & (self.frame < stop))
        kept.frame = kept.frame - start
        return kept


def concat(*parts: Primitives) -> Primitives:
    """Primitives of `parts` in that order (the later parts are drawn over the earlier ones). One part's
    fields are its own tensors, not copies (at 1080p a mask overlay's 16k primitives took ~0.2 ms to copy)."""
    fields = zip(*(p.fields() for p in parts), strict=False)
    *merged, group = [ts[0] if len(parts) == 1 else torch.cat(ts) for ts in fields]
    # groups renumbered as runs of equal consecutive values (0, 1, 2, ...: the same shapes, ids < P),
    # where no run goes on from one part into the next
    change = F.pad(group[1:] != group[:-1], (1, 0))[: len(group)]  # none before the first: its id is 0
    start = 0
    for part in parts[:-1]:
        start += len(part)
        if start:  # fill_: a Python True assigned is a tensor of host data
            change[start : start + 1].fill_(True)
    return Primitives(*merged, torch.cumsum(change, 0))


def empty(device=None) -> Primitives:
    return Primitives(
        torch.zeros(0, dtype=torch.int64, device=device),
        torch.zeros(0, dtype=torch.int64, device=device),
        torch.zeros(0, N_PARAMS, device=device),
        torch.zeros(0, 4, device=device),
        torch.zeros(0, 4, device=device),
        torch.zeros(0, dtype=torch.int64, device=device),
    )


def _column(value, n: int, like: torch.Tensor) -> torch.Tensor:
    """A per-primitive float [n] from a scalar or a tensor of n values (a view: read it, do not write).
    A Python number is filled in on the device: no upload of host data."""
    if isinstance(value, torch.Tensor):
        return value.to(like.device, torch.float32).expand(n)
    return like.new_full((), float(value), dtype=torch.float32).expand(n)


def filled(values, device, dtype=torch.float32) -> torch.Tensor:
    """A tensor [k] of k Python numbers filled in on the device, with no upload of host data (on CUDA a
    tensor made from a list is a pageable copy that waits for the stream): the most common value, then a
    fill for each run of another value."""
    base = max(values, key=values.count)
    out = torch.full((len(values),), base, dtype=dtype, device=device)
    start = 0
    while start < len(values):
        stop = start + 1
        while stop < len(values) and values[stop] == values[start]:
            stop += 1
        if values[start] != base:
            out[start:stop].fill_(values[start])
        start = stop
    return out


def _rows(value, n: int, width: int, device) -> torch.Tensor:
    """float32 [n,width] (a view) of a tensor [width] or [n,width], or of `width` Python numbers."""
    if isinstance(value, torch.Tensor):
        return value.to(device, torch.float32).expand(n, width)
    return filled([float(v) for v in value], device).expand(n, width)


def _columns(values, n: int, like: torch.Tensor) -> list[torch.Tensor]:
    """float32 [n] views of each of `values`: tensors as _column gives them, the Python numbers among them
    filled in at once (one `filled`)."""
    numbers = [float(v) for v in values if not isinstance(v, torch.Tensor)]
    on_device = iter(filled(numbers, like.device).unbind() if numbers else ())
    return [_column(v, n, like) if isinstance(v, torch.Tensor) else next(on_device).expand(n) for v in values]


def _colors(color, n: int, like: torch.Tensor) -> torch.Tensor:
    return _rows(color, n, 4, like.device).clone()


def _frames(frame, device) -> torch.Tensor:
    """int64 frame indices on the device from a tensor or a Python int (filled in: no upload)."""
    if isinstance(frame, torch.Tensor):
        return frame.to(device, torch.int64)
    return torch.full((), int(frame), dtype=torch.int64, device=device)


def _make(frame, kind: int, params: list[torch.Tensor], color, bounds) -> Primitives:
    """Primitives of one kind; params: float [n] columns in the order of the kind's columns in constants.py."""
    n = bounds.shape[0]
    if params:  # the columns not given hold 0
        packed = torch.stack(params, dim=1)
        packed = F.pad(packed, (0, N_PARAMS - len(params))) if len(params) < N_PARAMS else packed
    else:
        packed = torch.zeros(n, N_PARAMS, dtype=torch.float32, device=bounds.device)
    frame = _frames(frame, bounds.device).expand(n).clone()
    return Primitives(
        frame,
        torch.full((n,), kind, dtype=torch.int64, device=bounds.device),
        packed,
        _colors(color, n, bounds),
        bounds.float(),
        torch.arange(n, device=bounds.device),
    )


def segments(frame, a: torch.Tensor, b: torch.Tensor, width, color, caps: str = "round") -> Primitives:
    """Line segments a->b (float [P,2] each) of `width` pixels with round or butt caps.

    params: the SEGMENT_ columns of constants.py (ax, ay, bx, by, half width, butt 0/1, and that again as
    SEGMENT_BUTT_FLAG).
    """
    n = a.shape[0]
    half = _column(width, n, a) / 2
    butt = torch.full((n,), float(caps == "butt"), device=a.device)
    reach = torch.maximum(half, torch.full_like(half, 0.5)) + 1.0
    bounds = torch.stack(
        [
            torch.minimum(a[:, 0], b[:, 0]) - reach,
            torch.minimum(a[:, 1], b[:, 1]) - reach,
            torch.maximum(a[:, 0], b[:, 0]) + reach,
            torch.maximum(a[:, 1], b[:, 1]) + reach,
        ],
        dim=1,
    )
    zero = a.new_zeros(()).expand(n)
    params = [a[:, 0], a[:, 1], b[:, 0], b[:, 1], half, butt, *[zero] * (SEGMENT_BUTT_FLAG - 6), butt]
    return _make(frame, SEGMENT, params, color, bounds)


def polylines(frame, points: torch.Tensor, lengths: torch.Tensor, width, color) -> Primitives:
    """Open polylines with round caps and joins: one group of segments per polyline, so that
    a translucent polyline is drawn once where its segments overlap.

    frame int64 [L] (or scalar), points float [L, N, 2] padded, lengths int64 [L] (points used,
    >= 2 to draw anything), width scalar or [L], color [4] or [L, 4] (a tensor or 4 numbers).
    Returns the L * (N-1) segments, line after line. Segments past a length or with a non-finite end
    get opacity 0, which draws nothing (no pair), so a NaN point makes a gap: no mask picks the others
    (a host wait on a GPU).
    """
    n_lines, n_points = points.shape[:2]
    if n_points < 2:
        return empty(points.device)
    device, n = points.device, n_lines * (n_points - 1)
    a, b = points[:, :-1], points[:, 1:]
    usable = finite(points).all(-1)
    ends = torch.arange(1, n_points, device=device)  # each segment's far point: used where below the length
    valid = (ends < lengths.to(device)[:, None]) & usable[:, :-1] & usable[:, 1:]
    if isinstance(width, torch.Tensor):
        half = _column(width, n_lines, points)[:, None, None].expand(n_lines, n_points - 1, 1) / 2
        reach = half.clamp_min(0.5) + 1.0
    else:  # a Python number: its half filled in, the reach worked out on the host
        half = points.new_full((), width / 2).expand(n_lines, n_points - 1, 1)
        reach = max(width / 2, 0.5) + 1.0
    # params: ax, ay, bx, by, half width, then zeros (round caps)
    params = torch.cat([a, b, half, points.new_zeros(()).expand(n_lines, n_points - 1, N_PARAMS - 5)], -1)
    bounds = torch.cat([torch.minimum(a, b) - reach, torch.maximum(a, b) + reach], -1)
    colour = _rows(color, n_lines, 4, device)[:, None].expand(n_lines, n_points - 1, 4)
    colour = torch.cat([colour[..., :3], (colour[..., 3] * valid)[..., None]], -1)
    if isinstance(frame, torch.Tensor):
        frame = frame.to(device, torch.int64).expand(n_lines)[:, None].expand(n_lines, n_points - 1).reshape(n)
    else:
        frame = torch.full((n,), int(frame), dtype=torch.int64, device=device)
    return Primitives(
        frame,
        torch.full((n,), SEGMENT, dtype=torch.int64, device=device),
        params.view(n, N_PARAMS),
        colour.view(n, 4),
        bounds.view(n, 4),
        torch.arange(n, device=device) // (n_points - 1),
    )


def _turn(angle, n: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin float [n] of `angle` (radians, scalar or [n])."""
    turn = _column(angle, n, like)
    return torch.cos(turn), torch.sin(turn)


def ellipses(frame, center: torch.Tensor, radii: torch.Tensor, width, color, angle=0.0, fill_color=None) -> Primitives:
    """Ellipse outlines of `width` pixels centred on the curve, center and radii (x, y) float [P,2],
    turned by `angle` (radians, clockwise on screen, scalar or [P]) about their centres; with
    fill_color ([4] or [P,4]), each ellipse's fill under its outline (2P primitives, fill then outline).
    Semi-axes under 0.5 px are drawn 0.5 px; an outline of zero width draws nothing.
    params: the ELLIPSE_ columns (cx, cy, radius x, radius y, ring half width (0: the fill), cos, sin).
    """
    n = center.shape[0]
    center, radii = center.float(), radii.float().abs().clamp_min(0.5)
    cos, sin = _turn(angle, n, center)
    ring_half = _column(width, n, center) / 2
    reach = torch.stack(
        [torch.hypot(radii[:, 0] * cos, radii[:, 1] * sin), torch.hypot(radii[:, 0] * sin, radii[:, 1] * cos)], 1
    )  # the turned ellipse's half extents
    grow = (ring_half.clamp_min(0.5) + 1.0)[:, None]  # the outline and the anti-aliasing margin
    bounds = torch.cat([center - reach - grow, center + reach + grow], 1)
    bounds[:, 1].masked_fill_(ring_half <= 0, -1.0)  # no outline: no tile is listed
    zero = torch.zeros((), device=center.device).expand(n)
    params = [center[:, 0], center[:, 1], radii[:, 0], radii[:, 1], ring_half, zero, zero, zero, cos, sin]
    outlines = _make(frame, ELLIPSE, params, color, bounds)
    if fill_color is None:
        return outlines
    fills = _make(
        frame,
        ELLIPSE,
        params[:4] + [zero] * 4 + params[8:],
        fill_color,
        torch.cat([center - reach - 1.0, center + reach + 1.0], 1),
    )
    pairs = [
        torch.stack([f, o], 1).flatten(0, 1) for f, o in zip(fills.fields()[:5], outlines.fields()[:5], strict=False)
    ]
    return Primitives(*pairs, torch.arange(2 * n, device=center.device))


def rounded_boxes(
    frame,
    xyxy: torch.Tensor,
    stroke_width=2.0,
    radius=0.0,
    stroke_color=(1, 1, 1, 1),
    fill_color=(1, 1, 1, 0),
    corner_length=0.0,
    angle=0.0,
) -> Primitives:
    """Boxes [P,4] (x1,y1,x2,y2, any order) with a stroke centred on the outline and a fill, turned by
    `angle` (radians, clockwise on screen, scalar or [P]) about their centres.

    Each box gives its fill then its stroke: 2P primitives. A zero-opacity part, or a stroke of
    zero width (its bounds are empty), draws nothing.
    corner_length > 0 draws only the corners of the outline, each arm that long.
    params: the BOX_ columns (cx, cy, half width, half height, radius, stroke half width, corner length,
    cos, sin; sin 0: the box is drawn along the axes).
    """
    n = xyxy.shape[0]
    device = xyxy.device
    xyxy = xyxy.float()
    low, high = torch.minimum(xyxy[:, :2], xyxy[:, 2:]), torch.maximum(xyxy[:, :2], xyxy[:, 2:])
    centre, half_size = (low + high) / 2, (high - low) / 2
    if isinstance(radius, torch.Tensor):
        r = torch.minimum(_column(radius, n, xyxy).clamp_min(0), half_size.amin(1))
    else:  # the same values in fewer ops
        r = half_size.amin(1).clamp_max(max(float(radius), 0.0))
    host_colours = not (isinstance(fill_color, torch.Tensor) or isinstance(stroke_color, torch.Tensor))
    # stroke_width / 2: exact for a number and for a tensor
    stroke_half, corner_length, zero, one, *colours = _columns(
        [stroke_width / 2, corner_length, 0.0, 1.0, *((*fill_color, *stroke_color) if host_colours else ())], n, xyxy
    )
    if isinstance(angle, (int, float)) and angle == 0:
        cos, sin = one, zero
    else:
        cos, sin = _turn(angle, n, xyxy)
        # the turned box's bounds: its half extents along the axes less its half size
        spread = (torch.stack([cos, sin], 1).abs()[:, None, :] * torch.stack([half_size, half_size.flip(1)], 1)).sum(2)
        spread = spread - half_size
        low, high = low - spread, high + spread
    params = torch.stack(
        [centre[:, 0], centre[:, 1], half_size[:, 0], half_size[:, 1], r, stroke_half, corner_length, zero, cos, sin], 1
    )
    # the box grown by the anti-aliasing margin (fill), and by half the stroke too (stroke)
    grow = F.pad((stroke_half.clamp_min(0.5) + 1.0)[:, None], (1, 0), value=1.0)
    bounds = torch.cat([low[:, None] - grow[..., None], high[:, None] + grow[..., None]], 2)
    bounds[:, 1].masked_fill_((stroke_half <= 0)[:, None], -1.0)  # empty: no tile is listed
    if host_colours:
        colors = torch.stack(colours, 1)
    else:
        colors = torch.stack([_rows(fill_color, n, 4, device), _rows(stroke_color, n, 4, device)], 1)
    if isinstance(frame, torch.Tensor):
        frame = frame.to(device, torch.int64).expand(n)[:, None].expand(n, 2)
    else:
        frame = torch.full((2 * n,), int(frame), dtype=torch.int64, device=device)
    return Primitives(
        frame.reshape(2 * n),
        torch.arange(BOX_FILL, BOX_STROKE + 1, device=device).repeat(n),
        params[:, None].expand(n, 2, N_PARAMS).reshape(2 * n, N_PARAMS),
        colors.reshape(2 * n, 4),
        bounds.reshape(2 * n, 4),
        torch.arange(2 * n, device=device),
    )


def halos(frame, xyxy: torch.Tensor, width, radius, color, angle=0.0) -> Primitives:
    """Soft rings `width` pixels wide (scalar or [P]) around boxes [P,4] (x1,y1,x2,y2, any order) whose
    corners have `radius` (at most half the box's smaller side, as rounded_boxes draws them): at a distance
    d outside its box, a halo's opacity is color's opacity * (1 - smoothstep(d / width)), a smooth fall to
    0 at its width with no bands at 8 bits; none inside the box. color [4] or [P,4]; angle turns the boxes
    as in rounded_boxes. An empty width draws nothing.
    params: the HALO_ columns (cx, cy, half width, half height, radius, width, cos, sin)."""
    n = xyxy.shape[0]
    xyxy = xyxy.float()
    low, high = torch.minimum(xyxy[:, :2], xyxy[:, 2:]), torch.maximum(xyxy[:, :2], xyxy[:, 2:])
    centre, half_size = (low + high) / 2, (high - low) / 2
    r = torch.minimum(_column(radius, n, xyxy).clamp_min(0), half_size.amin(1))
    reach = _column(width, n, xyxy)
    cos, sin = _turn(angle, n, xyxy)
    # the turned box's half extents along the axes, grown by the halo and the anti-aliasing margin
    extent = (torch.stack([cos, sin], 1).abs()[:, None, :] * torch.stack([half_size, half_size.flip(1)], 1)).sum(2)
    grow = extent + (reach.clamp_min(0) + 1.0)[:, None]
    bounds = torch.cat([centre - grow, centre + grow], 1)
    bounds[:, 1].masked_fill_(~(reach > 0), -1.0)  # no width (or NaN): no tile is listed
    zero = torch.zeros((), device=xyxy.device).expand(n)
    params = [centre[:, 0], centre[:, 1], half_size[:, 0], half_size[:, 1], r, reach, zero, zero, cos, sin]
    return _make(frame, HALO, params, color, bounds)


def discs(frame, center: torch.Tensor, radius, color, ring_width=0.0) -> Primitives:
    """Filled discs (ring_width 0) or rings of `ring_width` centred on the circle, center [P,2].

    params: the DISC_ columns (cx, cy, radius, ring half width, and that again as DISC_RING_FLAG).
    """
    n = center.shape[0]
    if isinstance(radius, torch.Tensor) or isinstance(ring_width, torch.Tensor):
        r, ring_half = _column(radius, n, center), _column(ring_width, n, center) / 2
        reach = (r + ring_half + 1.0)[:, None]
    else:  # Python numbers: the columns filled in, the reach worked out on the host
        r, ring_half = _column(radius, n, center), _column(ring_width / 2, n, center)
        reach = radius + ring_width / 2 + 1.0
    bounds = torch.cat([center - reach, center + reach], 1)
    zero = center.new_zeros(()).expand(n)
    params = [center[:, 0], center[:, 1], r, ring_half, *[zero] * (DISC_RING_FLAG - 4), ring_half]
    return _make(frame, DISC, params, color, bounds)


def triangles(frame, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, color) -> Primitives:
    """Filled triangles with corners a, b, c (float [P,2] each, in any order). A pixel's coverage is the
    product of its coverages by the three edges' half-planes (each clamp(0.5 - d), d its signed distance
    to the edge's line): exact along the edges as for other straight edges; at a corner, where it counts a
    pixel that reaches past both edges twice over, within about 0.15 of the pixel's covered area for
    corners of 50 degrees and more (0.2 at 25 degrees). A triangle of no area (or with a non-finite corner)
    draws nothing. params: the TRIANGLE_ columns (the corners, turned clockwise on screen).
    """
    a, b, c = a.float(), b.float(), c.float()
    ab, ac = b - a, c - a
    turn = ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0]  # > 0: a, b, c clockwise on screen (y down)
    b, c = torch.where((turn < 0)[:, None], c, b), torch.where((turn < 0)[:, None], b, c)
    corners = torch.stack([a, b, c], 1)  # [P,3,2]
    # coverage reaches past a corner where the half-planes grown by 0.5 px meet: at most 0.5 / sin(angle / 2)
    # px beyond it; the bounds hold the triangle grown about its incentre by that much over its inradius
    sides = (corners.roll(-1, 1) - corners.roll(1, 1)).norm(dim=-1)  # [P,3]: the side opposite each corner
    perimeter = sides.sum(1, keepdim=True)
    incentre = (corners * sides[..., None]).sum(1) / perimeter.clamp_min(1e-12)
    inradius = turn.abs()[:, None] / perimeter.clamp_min(1e-12)  # area x 2 / perimeter
    scale = ((inradius + 0.5) / inradius.clamp_min(1e-12))[..., None]
    grown = incentre[:, None] + (corners - incentre[:, None]) * scale
    bounds = torch.cat([grown.amin(1) - 1.0, grown.amax(1) + 1.0], 1)
    bounds.masked_fill_(~(inradius > 1e-4), -1.0)  # no area (or NaN): an empty span, no tile is listed
    params = [a[:, 0], a[:, 1], b[:, 0], b[:, 1], c[:, 0], c[:, 1]]
    return _make(frame, TRIANGLE, params, color, bounds)


def sprites(frame, origin: torch.Tensor, atlas_rect: torch.Tensor, color) -> Primitives:
    """Alpha bitmaps from an atlas (glyph runs of labels), placed at integer pixel `origin` [P,2].

    atlas_rect int [P,4]: x, y, width, height inside the atlas passed to `draw`; the atlas value
    is the coverage, `color` tints it. params: the SPRITE_ columns (x0, y0, width, height, atlas x, atlas y).
    """
    origin = origin.float().floor()
    rect = atlas_rect.float()
    bounds = torch.cat([origin, origin + rect[:, 2:4]], 1)
    return _make(
        frame, SPRITE, [origin[:, 0], origin[:, 1], rect[:, 2], rect[:, 3], rect[:, 0], rect[:, 1]], color, bounds
    )


def finite(values: torch.Tensor) -> torch.Tensor:
    """isfinite in two elementwise operations (x - x is 0 only for finite x)."""
    return (values - values) == 0


def tile_spans(bounds: torch.Tensor, height: int, width: int, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last tile column and row int64 [P,4] of bounds float [P,4], clamped to the frame, and
    the span's columns and rows int64 [P,2] (0 for bounds past the frame, NaN or infinite)."""
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)
    span = torch.nan_to_num(bounds, nan=-1.0, posinf=-1.0, neginf=-1.0).floor_divide_(tile)
    for column, (low, high) in enumerate(((0, tiles_x), (0, tiles_y), (-1, tiles_x - 1), (-1, tiles_y - 1))):
        span[:, column].clamp_(low, high)  # Python bounds: no upload of host data
    span = span.long()
    return span, (span[:, 2:] - span[:, :2] + 1).clamp_min_(0)
