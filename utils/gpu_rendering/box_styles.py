"""Box styles: the mark drawn for each detection of a BoxTable (inputs.boxes), as primitives of the
compositor; its labels are labels.label_primitives'."""

from __future__ import annotations

import torch

from ..inputs.boxes import BoxTable
from . import primitives as R

MARKERS = ("box", "ellipse", "dot", "halo")


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
    radius marker_size at its centre (dot), or its fill and a halo marker_size wide around it (halo)."""
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
    boxes = R.rounded_boxes(table.frame, table.xyxy, 0.0, corner_radius, stroke, fill, angle=table.angle)
    return R.concat(
        boxes,
        R.halos(table.frame[drawn], table.xyxy[drawn], marker_size, corner_radius, stroke[drawn], table.angle[drawn]),
    )
