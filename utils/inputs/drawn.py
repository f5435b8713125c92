"""Boxes and points drawn on a reference frame (the Box Editor node's inputs), read from the JSON its
in-node editor writes, and written out in the formats that detectors and the pack's renderers read:
core ComfyUI's BOUNDING_BOX, KJNodes' BBOX, the pack's boxes JSON, SAM-style point lists and tracks_json.

A drawn box is a dict {x1, y1, x2, y2, label, id, score, color} (x1 < x2, y1 < y2 inside the frame; the
others None where the box has none); a drawn point is a tuple (x, y). Coordinates are pixels, as
everywhere in the pack. Whole numbers come out as ints (KJNodes' BBOX consumers slice images with them).
"""

from __future__ import annotations

import json
import math

from .boxes import box_records
from .text import load_json, short
from .tracks import parse_point

CORNERS = ("x1", "y1", "x2", "y2")


def snapped(value: float, snap: int) -> float:
    """`value` at the nearest multiple of `snap` (halves up, as the editor's Math.round); snap 0: as it is."""
    return math.floor(value / snap + 0.5) * snap if snap > 0 else value


def _snap_note(snap: int) -> str:
    return f" (corners snapped to {snap} px)" if snap > 0 else ""


def drawn_boxes(text: str, width: int, height: int, snap: int = 0, input_name: str = "boxes") -> list[dict]:
    """The boxes of `text` on a width x height frame: JSON, one list of upright boxes for every frame, each
    [x1,y1,x2,y2] or a dict with x1,y1,x2,y2 (or x,y,w,h) and optional label, id, score, color (as the
    Bounding Box Renderer's boxes input reads them). Corners snap to multiples of `snap` (0: off), then
    boxes are cut to the frame. ValueError naming the input for malformed JSON, non-finite coordinates, a
    turned box (BOUNDING_BOX and BBOX hold upright boxes) and a box with no area inside the frame."""
    text = (text or "").strip()
    boxes = []
    for i, record in enumerate(box_records(load_json(text, input_name) if text else [], input_name)):
        if record["angle"] != 0:
            raise ValueError(
                f"{input_name}: box {i} is turned ({math.degrees(record['angle']):g} degrees); the box editor's "
                f"outputs (BOUNDING_BOX, BBOX) hold upright boxes"
            )
        x1, y1, x2, y2 = (snapped(v, snap) for v in record["xyxy"])
        x1, x2 = max(min(x1, x2), 0), min(max(x1, x2), width)
        y1, y2 = max(min(y1, y2), 0), min(max(y1, y2), height)
        if x2 <= x1 or y2 <= y1:
            raise ValueError(
                f"{input_name}: box {i} {short(record['xyxy'])} has no area inside the {width} x {height} "
                f"frame{_snap_note(snap)}"
            )
        extras = {key: record[key] for key in ("label", "id", "score", "color")}
        boxes.append({"x1": x1, "y1": y1, "x2": x2, "y2": y2, **extras})
    return boxes


def drawn_points(text: str, width: int, height: int, snap: int = 0, input_name: str = "points") -> list[tuple]:
    """The points of `text` on a width x height frame: JSON, a list of {"x": .., "y": ..} (KJNodes' Points
    Editor, SAM3 Detect) or [x, y]. Points snap to multiples of `snap` (0: off), kept inside the frame.
    ValueError naming the input for malformed JSON, non-finite coordinates and a point outside the frame."""
    text = (text or "").strip()
    data = load_json(text, input_name) if text else []
    if not isinstance(data, list):
        raise ValueError(f'{input_name}: expected a list of points {{"x": .., "y": ..}} or [x, y], got {short(data)}')
    points = []
    for i, item in enumerate(data):
        x, y = parse_point(item, f"point {i}", input_name)
        if not (0 <= x <= width and 0 <= y <= height):
            raise ValueError(f"{input_name}: point {i} ({x:g}, {y:g}) is outside the {width} x {height} frame")
        points.append((min(snapped(x, snap), width), min(snapped(y, snap), height)))
    return points


def whole(value: float) -> int | float:
    """An integral float as an int, any other number as it is."""
    return int(value) if float(value).is_integer() else value


def to_bounding_box(boxes: list[dict], images: int | None) -> list:
    """Core ComfyUI's BOUNDING_BOX (RT-DETR Detect's, SAM3 Detect's and Draw BBoxes' type): dicts {x, y,
    width, height, label, score}, score 1.0 for a box without one (drawn by hand: certain); one list per
    image of `images`, or one list for all (images None)."""
    detections = [
        {
            "x": whole(box["x1"]),
            "y": whole(box["y1"]),
            "width": whole(box["x2"] - box["x1"]),
            "height": whole(box["y2"] - box["y1"]),
            "label": box["label"],
            "score": 1.0 if box["score"] is None else box["score"],
        }
        for box in boxes
    ]
    return detections if images is None else [[dict(d) for d in detections] for _ in range(images)]


def to_bbox(boxes: list[dict], images: int | None) -> list:
    """KJNodes' BBOX: (x, y, width, height) tuples, as its Batch Crop From Mask sends them; one list per
    image of `images`, or one list for all (images None)."""
    tuples = [tuple(whole(v) for v in (b["x1"], b["y1"], b["x2"] - b["x1"], b["y2"] - b["y1"])) for b in boxes]
    return tuples if images is None else [list(tuples) for _ in range(images)]


def to_boxes_json(boxes: list[dict]) -> str:
    """The pack's boxes JSON (the Bounding Box Renderer's boxes input): one list for every frame, each box
    {x1, y1, x2, y2} with its label, id, score and color where it has them."""
    return json.dumps(
        [
            {key: whole(value) if key in CORNERS else value for key, value in box.items() if value is not None}
            for box in boxes
        ]
    )


def to_points_json(points: list[tuple]) -> str:
    """[{"x": .., "y": ..}, ...]: KJNodes' Points Editor's coordinates, SAM3 Detect's point prompts."""
    return json.dumps([{"x": whole(x), "y": whole(y)} for x, y in points])


def to_tracks_json(points: list[tuple]) -> str:
    """tracks_json (the Line Link Renderer's, Track Trails'): each point a track of one point, which holds
    on every frame."""
    return json.dumps([[{"x": whole(x), "y": whole(y)}] for x, y in points])
