"""Link styles, point markers and trails, composed from the overlay engine's primitives (segments,
discs, rounded boxes) for every link of every frame at once.

A stroke is a polyline (points float [L,N,2] padded, lengths int64 [L] points used). Styles split
it along its arc length into pieces with one fixed upper bound per polyline, so the host never
waits: pieces that turn out empty get opacity 0, which the engine's binning skips.
"""

from __future__ import annotations

import math

import torch

from ..core.batching import expand_counts
from . import primitives as R

STROKE_STYLES = ("solid", "dashed", "dotted", "pulsing")  # styled_polylines' patterns
LINE_STYLES = (*STROKE_STYLES, "electric")  # electric: electric_polylines' zigzag, drawn solid
POINT_STYLES = ("dot", "ring", "cross", "square", "diamond")
WIDTH_BY_LENGTH = ("none", "shorter_thicker", "longer_thicker")
FALLOFF_TARGETS = ("opacity", "width", "opacity and width")
GRADIENT_STEP = 4.0  # pixels of arc per colour step of a gradient: steps of under 1/32 of the range are invisible
GRADIENT_STEPS = 32  # most colour steps per stroke (longer strokes get longer steps)
# a pulsing stroke: the fewest equal steps of at most wave / PULSE_STEPS px (clamped to 1 .. GRADIENT_STEP),
# each of the width and opacity of the wave at its middle, 0.5 + 0.5 cos(2 pi (s - phase) / wave) of the
# way from the troughs' fractions of the stroke's to all of it
PULSE_STEPS = 6
PULSE_TROUGH_OPACITY, PULSE_TROUGH_WIDTH = 0.25, 0.5
_HASH = 0x45D9F3B  # an odd multiplier below 2^31: a 32-bit value times it fits int64


def _per_line(value, n_lines: int, device) -> torch.Tensor:
    """float32 [L] (a view) of a tensor [L] or a scalar; a Python number is filled in on the device (a
    tensor of host values is an upload)."""
    if isinstance(value, torch.Tensor):
        return value.to(device, torch.float32).expand(n_lines)
    return torch.full((), float(value), device=device).expand(n_lines)


def arc_lengths(points: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Arc length float [L,N] at each point of the polylines (the total from the last used point on)."""
    step = (points[:, 1:] - points[:, :-1]).norm(dim=-1)
    used = torch.arange(points.shape[1] - 1, device=points.device)[None] < (lengths.to(points.device)[:, None] - 1)
    return torch.nn.functional.pad(torch.cumsum(step * used, 1), (1, 0))


def point_at(points: torch.Tensor, arc: torch.Tensor, s: torch.Tensor, segment: torch.Tensor | None = None):
    """Points float [L,K,2] at arc lengths s [L,K] along polylines whose arc lengths at the points are
    arc [L,N]; on segment [L,K] (its index) when given, extrapolated along it past its ends."""
    last = points.shape[1] - 2
    if segment is None:
        segment = (torch.searchsorted(arc, s.contiguous(), right=True) - 1).clamp(0, last)
    a = points.gather(1, segment[..., None].expand(*segment.shape, 2))
    b = points.gather(1, (segment + 1)[..., None].expand(*segment.shape, 2))
    start, stop = arc.gather(1, segment), arc.gather(1, segment + 1)
    fraction = (s - start) / (stop - start).clamp_min(1e-6)
    return a + (b - a) * fraction[..., None]


def seam_overlap(alpha: torch.Tensor) -> torch.Tensor:
    """How far (pixels) two butt-ended pieces of opacity alpha overlap at a seam. Source-over of two
    anti-aliased ends cannot add up exactly: abutting, a pixel half covered by each gets
    c a (1 - c a / 4) of the stroke's c a (c its coverage across the stroke); overlapping adds more to
    every pixel of the seam. The overlap that keeps the worst pixel closest, over every c and every
    position of the seam, is about (0.3 alpha + 0.08) alpha px (found numerically); the worst pixel is
    then within 0.1 alpha, where abutting ends are off by up to alpha^2 / 4."""
    return (0.3 * alpha + 0.08) * alpha


def _pieces(arc, total, first, on, period):
    """The polylines (arc lengths at their points arc [L,N], total [L,1]) cut at their points and at the
    pattern's boundaries: repeat j (0 .. R) of the pattern starts at first [L,R+1] and is "on" for `on`
    [L,1] px of every period [L,1] px. Returns the pieces' arc intervals lo, hi float [L,K], segment int64
    [L,K] (the polyline segment of each), repeat int64 [L,K], inside bool [L,K] (a nonempty piece of an
    "on" part) and joined bool [L,K,2] (its start, its end is an inner point of the polyline). Ends at an
    inner point reach half a pixel into the neighbouring piece (no further than its far end): butt ends
    merged by maximum would leave the joint half covered."""
    n_points = arc.shape[1]
    cuts, order = torch.sort(
        torch.cat([arc, torch.minimum(first, total), torch.minimum(first + on, total)], 1).clamp_min(0),
        dim=1,
        stable=True,
    )
    inner_point = (order < n_points) & (cuts > 0) & (cuts < total)
    lo, hi = cuts[:, :-1], cuts[:, 1:]
    mid = (lo + hi) / 2
    segment = (torch.searchsorted(arc, mid.contiguous(), right=True) - 1).clamp(0, n_points - 2)
    repeat = torch.floor((mid - first[:, :1]) / period).long().clamp(0, first.shape[1] - 1)
    inside = (hi - lo > 1e-4) & (mid - first.gather(1, repeat) < on)
    joined = torch.stack([inner_point[:, :-1], inner_point[:, 1:]], -1)
    before, after = torch.nn.functional.pad(cuts[:, :-2], (1, 0)), torch.nn.functional.pad(cuts[:, 2:], (0, 1))
    lo = torch.where(joined[..., 0], torch.maximum(lo - 0.5, before), lo)
    hi = torch.where(joined[..., 1], torch.minimum(hi + 0.5, after), hi)
    return lo, hi, segment, repeat, inside, joined


def styled_polylines(
    frame,
    points: torch.Tensor,
    lengths: torch.Tensor,
    width,
    start_color: torch.Tensor,
    end_color: torch.Tensor | None = None,
    style: str = "solid",
    dash_length: float = 8.0,
    gap_length: float = 6.0,
    phase=0.0,
    max_length: float = 0.0,
    pattern_width=None,
    gradient_step: float = GRADIENT_STEP,
    max_steps: int = GRADIENT_STEPS,
) -> R.Primitives:
    """Strokes along polylines, each one shape (its overlaps drawn once) unless its colour changes.

    frame int64 [L], points float [L,N,2] (N >= 2), lengths int64 [L], width float [L] or scalar,
    start_color float [L,4] (RGBA), end_color [L,4] or None: the colour at the far end, blended
    along the arc in steps of gradient_step px (at most GRADIENT_STEPS per stroke), the first step
    start_color, the last end_color; the steps meet butt to butt, overlapping by seam_overlap.
    style "solid"; "dashed", dash_length px on and gap_length px off (butt ends), each dash of one
    colour (the gradient's at its middle); "dotted", dots `width` across with gap_length px between
    them; "pulsing", a wave dash_length + gap_length px long along the stroke (crests that many px
    apart), in the fewest equal steps of at most wave / PULSE_STEPS px (clamped to 1 .. GRADIENT_STEP),
    each of the width and opacity that the wave gives at its middle (_pulsing). phase float [L] or
    scalar: the pattern's shift towards the end (px). max_length (host float) bounds every stroke's arc
    length: dashes, dots and pulses need it. pattern_width (default: width) spaces the dots, so that
    wider dots (a glow) sit at the same centres as the line's own. max_steps: the most colour steps a
    solid gradient of these strokes can need (a caller with a host bound on their arc lengths:
    ceil(bound / gradient_step)); only that many are built, the same pixels.
    One-colour solid strokes have round caps and joins; dashes and colour steps butt ends, and round
    joins where a polyline point lies at least half the width inside them.
    """
    n_lines, device = points.shape[0], points.device
    if style not in STROKE_STYLES:
        raise ValueError(f"line_style: expected one of {', '.join(STROKE_STYLES)}, got {style!r}")
    if style != "solid" and not gap_length > 0:
        raise ValueError(f"gap_length: expected more than 0 for {style} lines, got {gap_length!r}")
    if style in ("dashed", "pulsing") and not dash_length > 0:
        raise ValueError(f"dash_length: expected more than 0 for {style} lines, got {dash_length!r}")
    if n_lines == 0:
        return R.empty(device)
    gradient = end_color is not None
    if style == "solid" and not gradient:
        return R.polylines(frame, points, lengths, width, start_color)
    width = _per_line(width, n_lines, device)
    if style == "pulsing":
        wave = dash_length + gap_length
        step = min(max(wave / PULSE_STEPS, 1.0), GRADIENT_STEP)
        phase = _per_line(phase, n_lines, device)
        return _pulsing(frame, points, lengths.to(device), width, start_color, end_color, wave, step, phase, max_length)
    if style == "solid" and points.shape[1] == 2:
        return _straight_gradients(frame, points, lengths.to(device), width, start_color, end_color, gradient_step)
    phase = _per_line(phase, n_lines, device)[:, None]
    lengths = lengths.to(device)
    arc = arc_lengths(points, lengths)
    total = arc.gather(1, (lengths.clamp_min(1) - 1)[:, None])

    def colours(t):  # t float [L,K] in 0..1 along the stroke
        if not gradient:
            return start_color[:, None].expand(*t.shape, 4)
        return torch.lerp(start_color[:, None], end_color[:, None], t[..., None])

    if style == "dotted":
        spacing = width if pattern_width is None else _per_line(pattern_width, n_lines, device)
        period = spacing[:, None] + gap_length
        repeats = math.ceil(max_length / gap_length) + 1
        at = torch.remainder(phase, period) + torch.arange(repeats, device=device)[None] * period  # [L,R]
        centre = point_at(points, arc, torch.minimum(at, total))
        colour = colours(at / total.clamp_min(1e-6)).clone()
        colour[..., 3] *= (at <= total) & (lengths[:, None] >= 2)
        return R.discs(
            frame[:, None].expand_as(at).reshape(-1),
            centre.reshape(-1, 2),
            (width / 2)[:, None].expand_as(at).reshape(-1),
            colour.reshape(-1, 4),
        )
    if style == "dashed":
        on, period = torch.full_like(phase, dash_length), torch.full_like(phase, dash_length + gap_length)
        index = torch.arange(math.ceil(max_length / (dash_length + gap_length)) + 2, device=device)[None]
        first = torch.remainder(phase, period) + (index - 1) * period  # the dash before the stroke first
    else:  # a solid gradient: one shape per colour step
        period = torch.maximum(total / GRADIENT_STEPS, torch.full_like(total, gradient_step))
        on, index = period, torch.arange(max(min(max_steps, GRADIENT_STEPS), 1) + 1, device=device)[None]
        first = index * period
    span_lo, span_hi = torch.minimum(first, total).clamp_min(0), torch.minimum(first + on, total).clamp_min(0)
    if style == "dashed":
        table = colours((span_lo + span_hi) / 2 / total.clamp_min(1e-6))  # [L,R+1,4] per repeat
    else:
        steps = torch.ceil(total / period - 1e-4).clamp_min(1)
        table = colours((index / (steps - 1).clamp_min(1)).clamp(0, 1))
    lo, hi, segment, repeat, inside, joined = _pieces(arc, total, first, on, period)
    colour = table.gather(1, repeat[..., None].expand(*repeat.shape, 4)).clone()
    colour[..., 3] *= inside
    if style == "solid":
        overlap = seam_overlap(colour[..., 3]) / 2  # at the steps' seams
        lo = torch.where((lo > 0) & ~joined[..., 0], lo - overlap, lo)
        hi = torch.where((hi < total) & ~joined[..., 1], hi + overlap, hi)
    a, b = point_at(points, arc, lo, segment), point_at(points, arc, hi, segment)
    count = lo.shape[1]
    per_piece = lambda t: t[:, None].expand(n_lines, count).reshape(-1)  # noqa: E731
    pieces = R.segments(
        per_piece(frame), a.reshape(-1, 2), b.reshape(-1, 2), per_piece(width), colour.reshape(-1, 4), caps="butt"
    )
    line = torch.arange(n_lines, device=device)[:, None] * first.shape[1]
    pieces.group = (line + repeat).reshape(-1)  # the pieces of one dash or colour step are one shape
    # round joins: a disc at each inner point well inside its dash or step, in that dash's shape
    joint_at = arc[:, 1:-1]
    joint = torch.floor((joint_at - first[:, :1]) / period).long().clamp(0, first.shape[1] - 1)
    half = width[:, None] / 2
    inner = torch.arange(1, points.shape[1] - 1, device=device)[None] < (lengths[:, None] - 1)
    keep = (
        inner
        & (joint_at - span_lo.gather(1, joint) >= half)
        & (span_hi.gather(1, joint) - joint_at >= half)
        & (joint_at - first.gather(1, joint) < on)
    )
    joint_colour = table.gather(1, joint[..., None].expand(*joint.shape, 4)).clone()
    joint_colour[..., 3] *= keep
    inner_count = joint.shape[1]
    per_joint = lambda t: t[:, None].expand(n_lines, inner_count).reshape(-1)  # noqa: E731
    joints = R.discs(
        per_joint(frame), points[:, 1:-1].reshape(-1, 2), per_joint(width / 2), joint_colour.reshape(-1, 4)
    )
    joints.group = (line + joint).reshape(-1)
    both = R.Primitives(*(torch.cat(pair) for pair in zip(pieces.fields(), joints.fields(), strict=False)))
    return both.select(torch.sort(both.group, stable=True).indices)  # each shape's primitives consecutive


def _even_steps(total: torch.Tensor, step: float) -> torch.Tensor:
    """The length of the fewest equal steps of at most `step` px that make up strokes of arc length total
    float [...] (no step shorter than half of `step` where a stroke is longer, none of a fraction of a
    pixel: coverage from distance counts a sliver as a whole pixel's width); 1e-3 px for strokes of no
    length (whose pieces are then empty)."""
    return (total / torch.ceil(total / step).clamp_min(1)).clamp_min(1e-3)


def _pulsed(colour: torch.Tensor, width: torch.Tensor, at: torch.Tensor, phase: torch.Tensor, wave: float):
    """Colours float [...,4] and widths [...] of pulsing steps whose middles lie at arc lengths at [...]:
    the wave 0.5 + 0.5 cos(2 pi (at - phase) / wave) takes opacity from PULSE_TROUGH_OPACITY of the
    stroke's to all of it, and width from PULSE_TROUGH_WIDTH of it to all of it (phase broadcasts to at)."""
    crest = 0.5 + 0.5 * torch.cos((at - phase) * (2 * math.pi / wave))
    alpha = colour[..., 3] * (PULSE_TROUGH_OPACITY + (1 - PULSE_TROUGH_OPACITY) * crest)
    thickness = width * (PULSE_TROUGH_WIDTH + (1 - PULSE_TROUGH_WIDTH) * crest)
    return torch.cat([colour[..., :3], alpha[..., None]], -1), thickness


def _straight_gradients(frame, points, lengths, width, start_color, end_color, step) -> R.Primitives:
    """styled_polylines' solid gradients of straight strokes (points float [L,2,2]): the same colour
    steps and seams, one segment a step and no empty ones (one host sync: their count), where the general
    cut at the pattern's and the polyline's points keeps GRADIENT_STEPS + 1 pieces a stroke, most of
    them empty, and sorts them: a plexus' links coloured from their points draw about 3x faster so."""
    n_lines, device = points.shape[0], points.device
    a, b = points[:, 0], points[:, 1]
    total = (b - a).norm(dim=-1)
    period = torch.maximum(total / GRADIENT_STEPS, torch.full_like(total, step))
    steps = torch.ceil(total / period - 1e-4).clamp_min(1)
    drawn = torch.where((lengths >= 2) & (total > 1e-4), steps, 0).long()
    line, index = expand_counts(drawn, int(drawn.sum()))
    total, period, steps = total[line], period[line], steps[line]
    lo, hi = index * period, torch.minimum((index + 1) * period, total)
    colour = torch.lerp(start_color[line], end_color[line], (index / (steps - 1).clamp_min(1)).clamp(0, 1)[:, None])
    overlap = seam_overlap(colour[:, 3]) / 2
    lo = torch.where(lo > 0, lo - overlap, lo)
    hi = torch.where(hi < total, hi + overlap, hi)
    a, direction = a[line], (b - a)[line] / total.clamp_min(1e-6)[:, None]
    frame = torch.as_tensor(frame, device=device).expand(n_lines)[line]
    return R.segments(frame, a + direction * lo[:, None], a + direction * hi[:, None], width[line], colour, caps="butt")


def _pulsing(frame, points, lengths, width, start_color, end_color, wave, step, phase, max_length) -> R.Primitives:
    """styled_polylines' pulsing strokes (points float [L,N,2], lengths [L], width and phase float [L]): each
    in the fewest equal steps of at most `step` px of its arc, each step a butt-ended segment from the
    stroke's point at its start to the point at its end (on a curve, the chord: within step^2 / (8 r) px
    of a curve of radius r), as wide and opaque as _pulsed gives at its middle, in a gradient's colour
    there (end_color None: one colour); the seams overlap by seam_overlap, as a gradient's steps do.
    The steps are worked out for ceil(max_length / step) a stroke, and only those on a stroke kept (one
    host sync: their count), as _straight_gradients keeps its steps."""
    n_lines, device = points.shape[0], points.device
    arc = arc_lengths(points, lengths)
    total = arc.gather(1, (lengths.clamp_min(1) - 1)[:, None])  # [L,1]
    period = _even_steps(total, step)
    steps = torch.ceil(total / period - 1e-4).clamp_min(1)
    index = torch.arange(max(math.ceil(max_length / step), 1), device=device)[None]  # [1,R]
    count = index.shape[1]
    lo = index * period
    hi = torch.minimum(lo + period, total)
    drawn = torch.where((lengths >= 2) & (total[:, 0] > 1e-4), steps[:, 0].clamp_max(count), 0).long()
    line, index = expand_counts(drawn, int(drawn.sum()))
    kept = line * count + index  # the steps on a stroke, in [L,R] order
    if points.shape[1] == 2:  # straight: along the stroke from its start
        start, direction = points[line, 0], (points[:, 1] - points[:, 0])[line] / total[line].clamp_min(1e-6)
        a, b = (start + direction * s.view(-1)[kept, None] for s in (lo, hi))
    else:
        a, b = (point_at(points, arc, s).view(-1, 2)[kept] for s in (lo, hi))
    period, steps = period[line, 0], steps[line, 0]
    if end_color is None:
        colour = start_color[line]
    else:
        colour = torch.lerp(start_color[line], end_color[line], (index / (steps - 1).clamp_min(1)).clamp(0, 1)[:, None])
    colour, widths = _pulsed(colour, width[line], (index + 0.5) * period, phase[line], wave)
    # the seams overlap: each step's ends moved out along its chord
    overlap = seam_overlap(colour[:, 3]) / 2
    direction = (b - a) / (b - a).norm(dim=-1, keepdim=True).clamp_min(1e-6)
    a = torch.where((index > 0)[:, None], a - direction * overlap[:, None], a)
    b = torch.where((index < steps - 1)[:, None], b + direction * overlap[:, None], b)
    frame = torch.as_tensor(frame, device=device).expand(n_lines)[line]
    return R.segments(frame, a, b, widths, colour, caps="butt")


def _mix(h: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of h int64 [...] (values 0 .. 2^32 - 1): the same bits for the same values on
    every device; int64 all along, no product past 2^63."""
    h = ((h ^ (h >> 16)) * _HASH) & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * _HASH) & 0xFFFFFFFF
    return h ^ (h >> 16)


def electric_polylines(
    points: torch.Tensor,
    lengths: torch.Tensor,
    frame: torch.Tensor,
    pairs: torch.Tensor,
    spacing: float,
    amplitude: float,
    seed: int,
    max_length: float,
):
    """The polylines (points float [L,N,2], lengths int64 [L]) as zigzags, for electric links: each cut
    into the fewest equal pieces of at most `spacing` px of arc, and every inner corner between them moved
    across the polyline (along its left normal there) by up to `amplitude` px either way, the ends kept.
    The moves are a hash of seed, the stroke's frame int64 [L] (the batch's frame numbers: a new zigzag
    every frame), its pair of points int64 [L,2] and the corner's number: the same inputs give the same
    zigzags, on any device and in any window of frames. max_length (host float) bounds every polyline's
    arc length: it sizes the padding (no host sync). Returns points float [L,K+1,2] and lengths [L]."""
    if not spacing > 0:
        raise ValueError(f"dash_length: expected more than 0 for electric lines, got {spacing!r}")
    device = points.device
    corners = max(math.ceil(max_length / spacing), 1)
    lengths = lengths.to(device)
    arc = arc_lengths(points, lengths)
    total = arc.gather(1, (lengths.clamp_min(1) - 1)[:, None])  # [L,1]
    pieces = torch.ceil(total / spacing).clamp(1, corners)
    step = torch.arange(corners + 1, device=device)[None]  # [1,K+1]
    s = torch.minimum(step, pieces) * (total / pieces)
    segment = (torch.searchsorted(arc, s.contiguous(), right=True) - 1).clamp(0, points.shape[1] - 2)
    at = point_at(points, arc, s, segment)
    along = points.gather(1, (segment + 1)[..., None].expand(-1, -1, 2)) - points.gather(
        1, segment[..., None].expand(-1, -1, 2)
    )
    normal = torch.stack([-along[..., 1], along[..., 0]], -1) / along.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    h = _mix(frame.to(device)[:, None] ^ (int(seed) & 0xFFFFFFFF))
    h = _mix(_mix(h ^ pairs[:, :1].to(device)) ^ pairs[:, 1:].to(device))
    h = _mix(h ^ step)  # [L,K+1]
    swing = ((h & 0xFFFFFF).float() * (2 * amplitude / (1 << 24)) - amplitude) * ((step > 0) & (step < pieces))
    drawn = torch.where(lengths >= 2, pieces.long()[:, 0] + 1, lengths)
    return at + swing[..., None] * normal, drawn


def markers(
    frame: torch.Tensor, center: torch.Tensor, radius: float, color, style: str = "dot", stroke_width: float = 1.5
) -> R.Primitives:
    """Point markers at center float [P,2] on frame int64 [P]: "dot" (a filled disc), "ring", "cross"
    (+, arms of `radius`), "square" (outline, half side `radius`) or "diamond" (the square turned 45
    degrees, corners `radius` from the centre); outlines `stroke_width` px wide. color [4] or [P,4]."""
    n, device = center.shape[0], center.device
    if not isinstance(color, torch.Tensor):
        color = R.filled([float(c) for c in color], device)  # filled in on the device: no upload
    color = color.to(device, torch.float32).expand(n, 4)
    if style == "dot":
        return R.discs(frame, center, radius, color)
    if style == "ring":
        return R.discs(frame, center, radius, color, ring_width=stroke_width)
    if style == "square":
        box = torch.cat([center - radius, center + radius], 1)
        return R.rounded_boxes(frame, box, stroke_width, 0.0, color, torch.zeros_like(color))
    if style == "cross":
        arms = R.filled([-1.0, 0.0, 1.0, 0.0, 0.0, -1.0, 0.0, 1.0], device).view(2, 2, 2)  # [2 arms, ends, xy]
    elif style == "diamond":
        corner = R.filled([1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0, -1.0], device).view(4, 2)
        arms = torch.stack([corner, corner.roll(-1, 0)], 1)  # the four sides, corner to corner
    else:
        raise ValueError(f"point_style: expected one of {', '.join(POINT_STYLES)}, got {style!r}")
    ends = center[:, None, None] + radius * arms  # [P,S,2,2]
    sides = arms.shape[0]
    prims = R.segments(
        torch.as_tensor(frame, device=device).expand(n)[:, None].expand(n, sides).reshape(-1),
        ends[:, :, 0].reshape(-1, 2),
        ends[:, :, 1].reshape(-1, 2),
        stroke_width,
        color[:, None].expand(n, sides, 4).reshape(-1, 4),
    )
    prims.group = torch.arange(n, device=device).repeat_interleave(sides, output_size=n * sides)  # one shape each
    return prims


def width_by_length(length: torch.Tensor, scale: float, width: float, mode: str) -> torch.Tensor:
    """Per-link width float [E] from link lengths [E] and the length that counts as long (scale):
    "none" width; "shorter_thicker" 1.5 x width for the shortest down to 0.5 x at scale and beyond;
    "longer_thicker" the reverse."""
    if mode not in WIDTH_BY_LENGTH:
        raise ValueError(f"width_by_length: expected one of {', '.join(WIDTH_BY_LENGTH)}, got {mode!r}")
    if mode == "none":
        return torch.full_like(length, width)
    ratio = (length / max(scale, 1e-6)).clamp(0, 1)
    return width * (1.5 - ratio if mode == "shorter_thicker" else 0.5 + ratio)


def length_falloff(length: torch.Tensor, scale: float, amount: float) -> torch.Tensor:
    """Per-link factor float [E] in 0..1 from link lengths [E]: 1 up to (1 - amount) x scale, then
    falling linearly to 0 at scale (and beyond), scale the longest a link may be (max_distance). The
    end is fixed at scale so that a link the graph adds or drops at its limit appears or goes at 0
    (Plexus' fade, no popping); amount (0..1) sets where the fade starts. amount 0: all 1."""
    if not 0 <= amount <= 1:
        raise ValueError(f"length_falloff: expected 0 to 1, got {amount!r}")
    if amount == 0:
        return torch.ones_like(length)
    return ((scale - length) / max(amount * scale, 1e-6)).clamp(0, 1)


def catmull_rom(points: torch.Tensor, lengths: torch.Tensor, subdivisions: int = 4):
    """Uniform Catmull-Rom splines through the polylines' points (float [L,N,2], lengths int64 [L]),
    the end points repeated as their outer neighbours, each span cut into `subdivisions` chords.
    Returns points float [L,(N-1)*subdivisions+1,2] and lengths int64 [L]."""
    n_lines, n_points = points.shape[:2]
    if n_points < 2:
        return points, lengths
    last = (lengths.to(points.device).clamp_min(1) - 1)[:, None]
    span = torch.arange(n_points - 1, device=points.device)[None]

    def at(offset):  # the span's points -1, 0, +1, +2, clamped to the used points
        index = torch.minimum((span + offset).clamp_min(0), last)
        return points.gather(1, index[..., None].expand(n_lines, n_points - 1, 2))[:, :, None]

    p0, p1, p2, p3 = at(-1), at(0), at(1), at(2)
    t = (torch.arange(subdivisions, device=points.device) / subdivisions)[None, None, :, None]
    curve = 0.5 * (
        2 * p1 + (p2 - p0) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t**2 + (3 * p1 - p0 - 3 * p2 + p3) * t**3
    )  # [L,N-1,S,2]
    curve = curve.reshape(n_lines, -1, 2)
    smooth = torch.cat([curve, points[:, -1:]], 1)  # spans past a polyline's end sit on its last point
    lengths = lengths.to(points.device)
    return smooth, torch.where(lengths >= 2, (lengths - 1) * subdivisions + 1, lengths)


def trail_paths(xy: torch.Tensor, visible: torch.Tensor, frames: int):
    """Each point's positions over the current and last `frames` frames, newest first, as polylines:
    xy float [T,N,2], visible bool [T,N]. A trail stops at the first frame where its point is
    hidden (or before the batch). Returns frame int64 [T*N], points float [T*N,F+1,2] and lengths
    int64 [T*N] (0 where the point is hidden now), F = frames, at most T - 1."""
    steps, n = visible.shape
    frames = min(frames, steps - 1)
    back = torch.arange(frames + 1, device=xy.device)
    source = torch.arange(steps, device=xy.device)[:, None] - back[None]  # [T,F+1]
    shown = visible[source.clamp_min(0)] & (source >= 0)[..., None]  # [T,F+1,N]
    lengths = torch.cumprod(shown.long(), 1).sum(1)  # [T,N]
    points = xy[source.clamp_min(0)].permute(0, 2, 1, 3)  # [T,N,F+1,2]
    frame = torch.arange(steps, device=xy.device)[:, None].expand(steps, n)
    return frame.reshape(-1), points.reshape(steps * n, frames + 1, 2), lengths.reshape(-1)
