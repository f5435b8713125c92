"""Box styles: the mark drawn for each detection of a BoxTable (inputs.boxes), as primitives of the
compositor; its labels are labels.label_primitives'."""

from __future__ import annotations

import torch

from ..inputs.boxes import BoxTable
from . import primitives as R
from .track_trails import trail_layers

MARKERS = ("box", "ellipse", "dot", "halo", "circle", "triangle")
BARS = ("none", "below", "above")
BAR_BACKGROUND = 0.25  # a score bar's background: the box's colour at this fraction of the stroke's opacity


def box_markers(
    table: BoxTable,
    marker: str,
    stroke_width,
    corner_radius,
    stroke_opacity,
    fill_opacity,
    corner_length,
    marker_size,
    rgb: torch.Tensor,
) -> R.Primitives:
    """The mark of each of the N boxes of the table (rgb float [N,3] their colours, on the host), turned
    with it: its outline and fill (box), the inscribed ellipse's outline and fill (ellipse), a disc of
    radius marker_size at its centre (dot), its fill and a halo marker_size wide around it (halo), or the
    fill and outline of the circle through its corners about its centre (circle: supervision's
    CircleAnnotator's ring, the box's circumscribed circle, the same for a turned box), or a filled
    triangle pointing down at the top centre of its upright bounds, 2 x marker_size wide and as high
    (triangle: supervision's TriangleAnnotator)."""
    ones = torch.ones(len(table), 1)
    stroke, fill = torch.cat([rgb, ones * stroke_opacity], 1), torch.cat([rgb, ones * fill_opacity], 1)
    if marker == "box":
        return R.rounded_boxes(
            table.frame, table.xyxy, stroke_width, corner_radius, stroke, fill, corner_length, table.angle
        )
    low, high = torch.minimum(table.xyxy[:, :2], table.xyxy[:, 2:]), torch.maximum(table.xyxy[:, :2], table.xyxy[:, 2:])
    centre = (low + high) / 2
    drawn = torch.isfinite(centre).all(1) & torch.isfinite(high - low).all(1)  # host data: no device sync
    if marker == "ellipse":
        return R.ellipses(
            table.frame[drawn],
            centre[drawn],
            (high - low)[drawn] / 2,
            stroke_width,
            stroke[drawn],
            table.angle[drawn],
            fill[drawn],
        )
    if marker == "dot":
        return R.discs(table.frame[drawn], centre[drawn], marker_size, stroke[drawn])
    if marker == "triangle":
        x1, y1, x2, _ = table.bounds()[drawn].unbind(1)
        middle, base = (x1 + x2) / 2, y1 - 2.0 * marker_size  # half the base across, the height up
        return R.triangles(
            table.frame[drawn],
            torch.stack([middle, y1], 1),
            torch.stack([middle + marker_size, base], 1),
            torch.stack([middle - marker_size, base], 1),
            stroke[drawn],
        )
    if marker == "circle":
        return _circles(
            table.frame[drawn],
            centre[drawn],
            (high - low)[drawn].norm(dim=1) / 2,
            stroke_width,
            stroke[drawn],
            fill[drawn],
        )
    boxes = R.rounded_boxes(table.frame, table.xyxy, 0.0, corner_radius, stroke, fill, angle=table.angle)
    return R.concat(
        boxes,
        R.halos(table.frame[drawn], table.xyxy[drawn], marker_size, corner_radius, stroke[drawn], table.angle[drawn]),
    )


def _circles(frame, centre, radius, stroke_width, stroke, fill) -> R.Primitives:
    """Each circle's fill (a disc) then its outline (a ring stroke_width wide centred on the circle)."""
    fills = R.discs(frame, centre, radius, fill)
    rings = R.discs(frame, centre, radius, stroke * (1.0 if stroke_width > 0 else 0.0), ring_width=stroke_width)
    pairs = [torch.stack([f, r], 1).flatten(0, 1) for f, r in zip(fills.fields()[:5], rings.fields()[:5], strict=True)]
    return R.Primitives(*pairs, torch.arange(2 * len(fills)))


def score_bars(table: BoxTable, place: str, height: float, gap: float, opacity: float, rgb: torch.Tensor):
    """A bar under (below) or over (above) each box with a score, as wide as the box's upright bounds and
    `height` px high, `gap` px from them: its background in the box's colour (rgb float [N,3]) at
    BAR_BACKGROUND x opacity, filled from the left to the score (clamped to 0..1) at `opacity`, as
    supervision's PercentageBarAnnotator draws them. place "none": nothing."""
    if place not in BARS:
        raise ValueError(f"bar: expected one of {', '.join(BARS)}, got {place!r}")
    if place == "none" or not len(table) or not height > 0:
        return R.empty()
    score = torch.tensor([float("nan") if s is None else float(s) for s in table.score])
    shown = torch.isfinite(score).float()[:, None]
    x1, y1, x2, y2 = table.bounds().unbind(1)
    top = y2 + gap if place == "below" else y1 - gap - height
    full = torch.stack([x1, top, x2, top + height], 1)
    part = torch.stack([x1, top, x1 + (x2 - x1) * score.nan_to_num(0.0).clamp(0, 1), top + height], 1)
    ones = torch.ones(len(table), 1)
    background = torch.cat([rgb, ones * opacity * BAR_BACKGROUND], 1) * torch.cat([ones.expand(-1, 3), shown], 1)
    bar = torch.cat([rgb, ones * opacity], 1) * torch.cat([ones.expand(-1, 3), shown], 1)
    # each box's background, then its fill
    return R.rounded_boxes(
        table.frame.repeat_interleave(2),
        torch.stack([full, part], 1).flatten(0, 1),
        0.0,
        0.0,
        (0.0, 0.0, 0.0, 0.0),
        torch.stack([background, bar], 1).flatten(0, 1),
    )


def box_traces(table: BoxTable, batch: int, frames: int, width: float, opacity: float, rgb: torch.Tensor):
    """Each track id's path over the last `frames` frames: on every frame, the polyline through the centres
    of its box (its boxes: the table's boxes with that id) in this and the earlier frames, fading from
    `opacity` at this frame's box to nothing `frames` frames back, `width` px wide, in the colour of the
    id's last box (rgb float [N,3]); as supervision's TraceAnnotator, through track_trails. A frame
    without the id ends its path there; boxes without an id have none. frames 0: nothing."""
    has_id = torch.tensor([i is not None for i in table.id], dtype=torch.bool)
    if frames <= 0 or batch < 2 or not has_id.any():
        return R.empty()
    ids = torch.tensor([0 if i is None else int(i) for i in table.id])[has_id]
    tracks, track = torch.unique(ids, return_inverse=True)
    centre = ((table.xyxy[:, :2] + table.xyxy[:, 2:]) / 2)[has_id]
    frame = table.frame[has_id]
    xy = torch.zeros(batch, len(tracks), 2)
    visible = torch.zeros(batch, len(tracks), dtype=torch.bool)
    colour = torch.zeros(len(tracks), 3)
    xy[frame, track] = centre
    visible[frame, track] = torch.isfinite(centre).all(1)
    colour[track] = rgb[has_id]
    moved = (xy[1:] - xy[:-1]).norm(dim=-1)[visible[1:] & visible[:-1]]  # host data: no device sync
    bound = (moved.max().item() if len(moved) else 0.0) * min(frames, batch - 1) + 1.0  # every trail's arc
    trails = trail_layers(xy, visible, colour, frames, 0, width, opacity, 1.0, "none", arc_bound=bound)
    return trails.select(trails.color[:, 3] > 0)  # most of a fading stroke's pieces are empty: left to no bin
