"""Every box source of DESIGN.md (JSON, BBOX, SEGS, MASK) parsed into one flat table.

After parsing there is one code path: `BoxTable` holds all boxes of all frames, in frame order.

A JSON box may be turned about its centre (oriented boxes, e.g. from OBB detectors): an "angle" in
degrees, clockwise on screen, beside any of its forms; or ultralytics' forms, "xywhr": [cx, cy, w, h,
r] (centre, size, r in radians clockwise on screen) or "points": its 4 corners in order around it
([[x, y], ...] or 8 numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .colors import palette, palette_from_hex, parse_hex, stable_index
from .text import coordinates, load_json, short, text_limit

# Bounds on the work one call can ask for: the engine needs up to ~100 KB per box drawn at once (its tile
# pairs), and every box of every frame is a record here.
MAX_BOXES_PER_FRAME = 10_000
MAX_BOXES = 200_000
LABEL_MODES = ("none", "label", "label+score", "id", "label+id", "all")
BBOX_FORMATS = ("xywh", "xyxy")  # KJNodes' BBOX convention first, as its own BboxVisualize and normalize_bboxes
COLOR_BY = ("label", "id", "index")


@dataclass
class BoxTable:
    """N boxes over a batch: frame int64 [N], xyxy float32 [N,4] (x1 <= x2, y1 <= y2: the box before it
    turns), angle float32 [N] (radians, clockwise on screen, about the box's centre; in [-pi, pi]),
    and per box label (str or None), track id (int or None), score (float or None), colour (hex or
    None)."""

    frame: torch.Tensor
    xyxy: torch.Tensor
    label: list = field(default_factory=list)
    id: list = field(default_factory=list)
    score: list = field(default_factory=list)
    color: list = field(default_factory=list)
    angle: torch.Tensor | None = None

    def __post_init__(self):
        if self.angle is None:
            self.angle = torch.zeros(len(self))

    def __len__(self) -> int:
        return int(self.frame.shape[0])

    def bounds(self) -> torch.Tensor:
        """float32 [N,4]: the axis-aligned bounds of the turned boxes (xyxy itself where unturned)."""
        centre, half = (self.xyxy[:, :2] + self.xyxy[:, 2:]) / 2, (self.xyxy[:, 2:] - self.xyxy[:, :2]) / 2
        cos, sin = torch.cos(self.angle).abs(), torch.sin(self.angle).abs()
        extent = torch.stack([cos * half[:, 0] + sin * half[:, 1], sin * half[:, 0] + cos * half[:, 1]], 1)
        turned = torch.cat([centre - extent, centre + extent], 1)
        return torch.where((self.angle == 0)[:, None], self.xyxy, turned)


# How far 4 corners may be from a rectangle's (the midpoints of the diagonals apart, the diagonals'
# lengths apart): a pixel, and 1% of the longer diagonal for corners rounded by a detector's format
RECTANGLE_TOLERANCE_PX = 1.0
RECTANGLE_TOLERANCE = 0.01


def _angle(value, where: str, input_name: str, key: str, full_turn: float) -> float:
    """A finite number as a float reduced into (-full_turn, full_turn) (exactly, for integers of any size)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{input_name}: {where} has a non-numeric {key} {short(value)}")
    if isinstance(value, int) and full_turn == 360.0:
        return float(value % 360)
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{input_name}: {where} has an {key} out of range {short(value)}") from None
    if not math.isfinite(number):
        raise ValueError(f"{input_name}: {where} has a non-finite {key} {short(value)}")
    return math.fmod(number, full_turn)


def _corners(points, where: str, input_name: str) -> tuple[list[float], float]:
    """(xyxy of the box before it turns, angle in radians) of a rectangle given by its 4 corners in order
    around it: [[x, y], ...] or 8 numbers. Its first side (corner 0 to corner 1) gives the width and the
    angle."""
    if (
        isinstance(points, (list, tuple))
        and len(points) == 4
        and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in points)
    ):
        points = [v for p in points for v in p]
    if not isinstance(points, (list, tuple)) or len(points) != 8:
        raise ValueError(
            f"{input_name}: {where} has points {short(points)}; expected 4 corners [[x, y], ...] or 8 numbers"
        )
    p = np.array(coordinates(points, where, input_name)).reshape(4, 2)
    diagonals = np.hypot(*(p[2] - p[0])), np.hypot(*(p[3] - p[1]))
    tolerance = RECTANGLE_TOLERANCE_PX + RECTANGLE_TOLERANCE * max(diagonals)
    if np.hypot(*(p[0] + p[2] - p[1] - p[3])) / 2 > tolerance or abs(diagonals[0] - diagonals[1]) > tolerance:
        raise ValueError(
            f"{input_name}: {where} has points {short(points)} that are not the corners of a "
            f"rectangle in order around it"
        )
    centre = p.mean(0)
    width = (np.hypot(*(p[1] - p[0])) + np.hypot(*(p[2] - p[3]))) / 2
    height = (np.hypot(*(p[3] - p[0])) + np.hypot(*(p[2] - p[1]))) / 2
    angle = math.atan2(p[1, 1] - p[0, 1], p[1, 0] - p[0, 0])
    return [centre[0] - width / 2, centre[1] - height / 2, centre[0] + width / 2, centre[1] + height / 2], angle


def _is_box(item) -> bool:
    if isinstance(item, dict):
        return True
    return (
        isinstance(item, (list, tuple))
        and len(item) == 4
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in item)
    )


def _box_record(item, where: str, input_name: str) -> dict:
    if isinstance(item, dict):
        angle = 0.0
        if "points" in item or "xywhr" in item:
            if "angle" in item or ("points" in item and "xywhr" in item):
                raise ValueError(
                    f"{input_name}: {where} gives its angle twice (points and xywhr carry one; "
                    f"angle goes with x1,y1,x2,y2 or x,y,w,h), got {short(item)}"
                )
        if "points" in item:
            xyxy, angle = _corners(item["points"], where, input_name)
        elif "xywhr" in item:
            form = item["xywhr"]
            if not isinstance(form, (list, tuple)) or len(form) != 5:
                raise ValueError(
                    f"{input_name}: {where} has xywhr {short(form)}; expected [cx, cy, w, h, r] (r in radians)"
                )
            cx, cy, w, h = coordinates(form[:4], where, input_name)
            xyxy = coordinates([cx - abs(w) / 2, cy - abs(h) / 2, cx + abs(w) / 2, cy + abs(h) / 2], where, input_name)
            angle = _angle(form[4], where, input_name, "xywhr angle", 2 * math.pi)
        elif all(k in item for k in ("x1", "y1", "x2", "y2")):
            xyxy = coordinates([item[k] for k in ("x1", "y1", "x2", "y2")], where, input_name)
        elif all(k in item for k in ("x", "y", "w", "h")):
            x, y, w, h = coordinates([item[k] for k in ("x", "y", "w", "h")], where, input_name)
            xyxy = coordinates([x, y, x + w, y + h], where, input_name)
        else:
            raise ValueError(
                f"{input_name}: {where} needs numeric x1,y1,x2,y2 or x,y,w,h (or xywhr, or 4 corner "
                f"points), got {short(item)}"
            )
        if "angle" in item:
            angle = math.radians(_angle(item["angle"], where, input_name, "angle", 360.0))
        record = {
            "xyxy": xyxy,
            "label": item.get("label"),
            "id": item.get("id"),
            "score": item.get("score"),
            "color": item.get("color"),
            "angle": math.remainder(angle, 2 * math.pi),
        }
        if record["id"] is not None and not isinstance(record["id"], int):
            raise ValueError(f"{input_name}: {where} has a non-integer id {record['id']!r}")
        if record["score"] is not None and not isinstance(record["score"], (int, float)):
            raise ValueError(f"{input_name}: {where} has a non-numeric score {record['score']!r}")
        if record["label"] is not None and len(str(record["label"])) > text_limit("label"):
            raise ValueError(
                f"{input_name}: {where} has a label of {len(str(record['label'])):,} characters "
                f"({short(record['label'], 40)}); at most {text_limit('label'):,} are drawn"
            )
    else:
        xyxy = coordinates(item, where, input_name)
        record = {"xyxy": xyxy, "label": None, "id": None, "score": None, "color": None, "angle": 0.0}
    return record


def box_records(data, input_name: str) -> list[dict]:
    """One list of boxes, as parsed from JSON (a box: [x1,y1,x2,y2] or a dict of any form above), as
    records {xyxy: 4 floats as given (x1 > x2 possible), label, id, score, color, angle: radians}."""
    if not isinstance(data, (list, tuple)) or not all(_is_box(item) for item in data):
        raise ValueError(
            f"{input_name}: expected one list of boxes, each [x1,y1,x2,y2] or a dict with x1,y1,x2,y2 (or "
            f"x,y,w,h) and optional label, score; got {short(data)}"
        )
    if len(data) > MAX_BOXES_PER_FRAME:
        raise ValueError(f"{input_name}: {len(data):,} boxes; at most {MAX_BOXES_PER_FRAME:,} per frame are drawn")
    return [_box_record(item, f"box {i}", input_name) for i, item in enumerate(data)]


def _per_frame(data, batch: int, input_name: str) -> list[list]:
    """A list of boxes for every frame, or a list of per-frame lists of length `batch`."""
    if not isinstance(data, (list, tuple)):
        raise ValueError(f"{input_name}: expected a list of boxes or a list of per-frame lists, got {short(data)}")
    if len(data) == 0 or all(_is_box(item) for item in data):
        return [list(data)] * batch
    if all(isinstance(item, (list, tuple)) and all(_is_box(b) for b in item) for item in data):
        if len(data) != batch:
            raise ValueError(
                f"{input_name}: {len(data)} per-frame box lists for a batch of {batch} frames; "
                f"give one list per frame, or one list of boxes for all frames"
            )
        return [list(item) for item in data]
    bad = next(item for item in data if not _is_box(item))
    raise ValueError(f"{input_name}: a box is [x1,y1,x2,y2] or a dict with x1,y1,x2,y2 (or x,y,w,h); got {short(bad)}")


def _table(frames: list[list[dict]]) -> BoxTable:
    records = [(f, r) for f, frame in enumerate(frames) for r in frame]
    frame = torch.tensor([f for f, _ in records], dtype=torch.int64)
    xyxy = torch.tensor([r["xyxy"] for _, r in records], dtype=torch.float32).reshape(-1, 4)
    xyxy = torch.stack(
        [xyxy[:, [0, 2]].amin(1), xyxy[:, [1, 3]].amin(1), xyxy[:, [0, 2]].amax(1), xyxy[:, [1, 3]].amax(1)], dim=1
    )
    angle = torch.tensor([r.get("angle", 0.0) for _, r in records], dtype=torch.float32)
    return BoxTable(frame, xyxy, *([r[key] for _, r in records] for key in ("label", "id", "score", "color")), angle)


def from_lists(data, batch: int, input_name: str) -> BoxTable:
    """Boxes from parsed JSON or a BBOX value (lists/tuples of boxes, per frame or for all)."""
    frames = _per_frame(data, batch, input_name)
    busiest = max(range(len(frames)), key=lambda f: len(frames[f]), default=0)
    if frames and len(frames[busiest]) > MAX_BOXES_PER_FRAME:
        raise ValueError(
            f"{input_name}: {len(frames[busiest]):,} boxes in frame {busiest}; at most "
            f"{MAX_BOXES_PER_FRAME:,} per frame are drawn"
        )
    if sum(map(len, frames)) > MAX_BOXES:
        raise ValueError(
            f"{input_name}: {sum(map(len, frames)):,} boxes over {len(frames)} frames; at most "
            f"{MAX_BOXES:,} per run (split the video into several runs)"
        )
    parsed, index = [], 0
    for f, frame in enumerate(frames):
        rows = []
        for item in frame:
            rows.append(_box_record(item, f"box {index} (frame {f})", input_name))
            index += 1
        parsed.append(rows)
    return _table(parsed)


def from_json(text: str, batch: int, input_name: str = "boxes") -> BoxTable:
    text = (text or "").strip()
    if not text:
        return _table([[] for _ in range(batch)])
    return from_lists(load_json(text, input_name), batch, input_name)


def _plain(value):
    """BBOX values as Python lists and numbers: tensors and arrays as lists, numpy scalars as numbers."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value.item() if isinstance(value, np.generic) else value


def from_bbox(bbox, batch: int, bbox_format: str = "xywh", input_name: str = "bbox") -> BoxTable:
    """A BBOX value (KJNodes, SAM2, Florence2): boxes of 4 numbers in bbox_format, "xywh" (x, y, width,
    height: KJNodes' Batch Crop From Mask) or "xyxy" (corners); a list of boxes for every frame, one
    list per frame, or, as KJNodes' BboxVisualize and BatchUncrop read a batch's BBOX, a list of exactly
    `batch` boxes (batch > 1): one box per frame. A single box serves every frame. Tensors and numpy
    values are read as numbers; dict boxes keep their own keys."""
    if bbox_format not in BBOX_FORMATS:
        raise ValueError(f"bbox_format: expected one of {', '.join(BBOX_FORMATS)}, got {short(bbox_format)}")
    data = _plain(bbox)
    if _is_box(data) and not isinstance(data, dict):
        data = [data]
    if bbox_format == "xywh":
        data = _xywh_to_xyxy(data)
    if isinstance(data, list) and batch > 1 and len(data) == batch and all(_is_box(item) for item in data):
        data = [[item] for item in data]
    return from_lists(data, batch, input_name)


def _xywh_to_xyxy(data):
    """Every box of 4 numbers (x, y, w, h) in nested lists as [x1, y1, x2, y2]; anything else as it is."""
    if isinstance(data, list) and len(data) == 4 and _is_box(data):
        x, y, w, h = data
        return [x, y, x + w, y + h]
    return [_xywh_to_xyxy(item) for item in data] if isinstance(data, list) else data


def from_bounding_box(detections, batch: int, input_name: str = "bounding_box") -> BoxTable:
    """Core ComfyUI's BOUNDING_BOX: per image a list of {x, y, width, height, label, score}; a single
    list (or a list holding one image's list) serves every frame."""

    def box(item, where):
        if not isinstance(item, dict) or not all(k in item for k in ("x", "y", "width", "height")):
            raise ValueError(
                f"{input_name}: {where} should be {{x, y, width, height, label, score}}, got {short(item)}"
            )
        return {
            "x": item["x"],
            "y": item["y"],
            "w": item["width"],
            "h": item["height"],
            "label": item.get("label"),
            "score": item.get("score"),
        }

    if not isinstance(detections, (list, tuple)):
        raise ValueError(f"{input_name}: expected per-image lists of detections, got {short(detections)}")
    if len(detections) == 1 and isinstance(detections[0], (list, tuple)):
        detections = detections[0]
    if all(isinstance(item, dict) for item in detections):
        return from_lists([box(item, f"detection {i}") for i, item in enumerate(detections)], batch, input_name)
    if not all(isinstance(frame, (list, tuple)) for frame in detections):
        raise ValueError(f"{input_name}: expected per-image lists of detections, got {short(detections)}")
    frames = [
        [box(item, f"detection {i} of image {f}") for i, item in enumerate(frame)] for f, frame in enumerate(detections)
    ]
    return from_lists(frames, batch, input_name)


def from_segs(segs, batch: int, input_name: str = "segs") -> BoxTable:
    """Impact Pack SEGS ((H, W), [SEG, ...]); the same boxes on every frame."""
    try:
        _shape, items = segs
        boxes = [
            {
                "x1": s.bbox[0],
                "y1": s.bbox[1],
                "x2": s.bbox[2],
                "y2": s.bbox[3],
                "label": getattr(s, "label", None),
                "score": _scalar(getattr(s, "confidence", None)),
            }
            for s in items
        ]
    except (TypeError, ValueError, AttributeError, IndexError):
        raise ValueError(
            f"{input_name}: expected SEGS ((height, width), [SEG with .bbox, ...]), got {short(segs)}"
        ) from None
    return from_lists(boxes, batch, input_name)


def _scalar(value):
    if value is None:
        return None
    return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])


def from_mask(mask: torch.Tensor, batch: int, input_name: str = "mask") -> BoxTable:
    """One box per 8-connected component of each frame of a MASK [B,H,W] (or [H,W])."""
    import cv2

    if mask.ndim == 2:
        mask = mask[None]
    if mask.ndim != 3:
        raise ValueError(f"{input_name}: expected a MASK [B,H,W] or [H,W], got shape {tuple(mask.shape)}")
    if mask.shape[0] not in (1, batch):
        raise ValueError(f"{input_name}: {mask.shape[0]} mask frames for a batch of {batch} images")
    binary = (torch.nan_to_num(mask.float(), nan=0.0).cpu().numpy() > 0.5).astype(np.uint8)
    frames = []
    for f in range(batch):  # connected components are a per-frame library call
        count, _labels, stats, _ = cv2.connectedComponentsWithStats(binary[min(f, len(binary) - 1)], connectivity=8)
        frames.append(
            [
                {
                    "xyxy": [float(x), float(y), float(x + w), float(y + h)],
                    "label": None,
                    "id": None,
                    "score": None,
                    "color": None,
                }
                for x, y, w, h, _area in stats[1:count]
            ]
        )
    return _table(frames)


def box_table(
    images: torch.Tensor, boxes: str, bbox=None, segs=None, mask=None, bounding_box=None, bbox_format: str = "xywh"
) -> BoxTable:
    """The boxes for images [B,H,W,C] of the one connected socket, else of the `boxes` text (a connected
    socket wins over the text, so that its default never blocks a connection); bbox_format: the BBOX's
    (from_bbox)."""
    batch = images.shape[0]
    sockets = {"bbox": bbox, "segs": segs, "mask": mask, "bounding_box": bounding_box}
    given = [name for name, value in sockets.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"{given[0]}: connect one box source, got {', '.join(given)}")
    if bbox is not None:
        return from_bbox(bbox, batch, bbox_format)
    if segs is not None:
        return from_segs(segs, batch)
    if mask is not None:
        _check_mask(mask, images)
        return from_mask(mask, batch)
    if bounding_box is not None:
        return from_bounding_box(bounding_box, batch)
    return from_json(boxes, batch)


def _check_mask(mask, images, input_name: str = "mask") -> None:
    """A MASK [B,H,W] or [H,W] whose frames are the size of the images [B,H,W,C]: a box source drawn
    on them (a mask of another size would put its boxes at the wrong scale)."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{input_name}: expected a MASK tensor [B,H,W], got {type(mask).__name__}")
    if mask.ndim not in (2, 3) or tuple(mask.shape[-2:]) != tuple(images.shape[1:3]):
        raise ValueError(
            f"{input_name}: expected a MASK of the images' size [B,{images.shape[1]},{images.shape[2]}], "
            f"got shape {tuple(mask.shape)} (resize it to the images first)"
        )


def box_label_texts(table: BoxTable, mode: str) -> list[str]:
    """Each box's label text in `mode` (one of LABEL_MODES but none): its class label, track id (#n)
    and/or score, as present."""
    return [_label_text(table, i, mode) for i in range(len(table))]


def _label_text(table: BoxTable, index: int, mode: str) -> str:
    label, track, score = table.label[index], table.id[index], table.score[index]
    parts = []
    if mode in ("label", "label+score", "label+id", "all") and label is not None:
        parts.append(str(label))
    if mode in ("id", "label+id", "all") and track is not None:
        parts.append(f"#{track}")
    if mode in ("label+score", "all") and score is not None:
        parts.append(f"{score:.2f}")
    return " ".join(parts)


def label_priority(table: BoxTable) -> torch.Tensor:
    """float [N]: each box's score (-inf without one), the order in which overlapping labels keep their place."""
    return torch.tensor([float("-inf") if s is None else float(s) for s in table.score])


def box_colors(table: BoxTable, color: str, palette_name: str, palette_colors: str, color_by: str) -> torch.Tensor:
    """float [N,3]: a box's own colour, else the fixed colour, else the palette slot of its key (in the
    palette of hex colours when there is one, else in the named palette)."""
    fixed = parse_hex(color, "color")[:3] if color.strip() else None
    colours = palette_from_hex(palette_colors) if palette_colors.strip() else palette(palette_name)
    # a box's index within its frame, so that "index" (and boxes without a label or id) keep their colour
    # from frame to frame; the table lists frames in order
    first = torch.searchsorted(table.frame, table.frame, right=False)
    in_frame = (torch.arange(len(table)) - first).tolist()
    rows = []
    for i in range(len(table)):
        if table.color[i] is not None:
            rows.append(parse_hex(table.color[i], f"boxes: box {i} color")[:3])
        elif fixed is not None:
            rows.append(fixed)
        else:
            key = {"label": table.label[i], "id": table.id[i], "index": in_frame[i]}[color_by]
            rows.append(colours[stable_index(in_frame[i] if key is None else key, len(colours))][:3])
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, 3)
