"""Every box source of DESIGN.md (JSON, BBOX, SEGS, MASK) parsed into one flat table.

After parsing there is one code path: `BoxTable` holds all boxes of all frames, in frame order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .text_input import coordinates, load_json, short


# Bounds on the work one call can ask for: the engine needs up to ~100 KB per box drawn at once (its tile
# pairs), and every box of every frame is a record here.
MAX_BOXES_PER_FRAME = 10_000
MAX_BOXES = 200_000


@dataclass
class BoxTable:
    """N boxes over a batch: frame int64 [N], xyxy float32 [N,4] (x1 <= x2, y1 <= y2), and per box
    label (str or None), track id (int or None), score (float or None), colour (hex or None)."""

    frame: torch.Tensor
    xyxy: torch.Tensor
    label: list = field(default_factory=list)
    id: list = field(default_factory=list)
    score: list = field(default_factory=list)
    color: list = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.frame.shape[0])


def _is_box(item) -> bool:
    if isinstance(item, dict):
        return True
    return isinstance(item, (list, tuple)) and len(item) == 4 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in item)


def _box_record(item, where: str, input_name: str) -> dict:
    if isinstance(item, dict):
        if all(k in item for k in ("x1", "y1", "x2", "y2")):
            xyxy = coordinates([item[k] for k in ("x1", "y1", "x2", "y2")], where, input_name)
        elif all(k in item for k in ("x", "y", "w", "h")):
            x, y, w, h = coordinates([item[k] for k in ("x", "y", "w", "h")], where, input_name)
            xyxy = coordinates([x, y, x + w, y + h], where, input_name)
        else:
            raise ValueError(f"{input_name}: {where} needs numeric x1,y1,x2,y2 or x,y,w,h, got {short(item)}")
        record = {"xyxy": xyxy, "label": item.get("label"), "id": item.get("id"), "score": item.get("score"),
                  "color": item.get("color")}
        if record["id"] is not None and not isinstance(record["id"], int):
            raise ValueError(f"{input_name}: {where} has a non-integer id {record['id']!r}")
        if record["score"] is not None and not isinstance(record["score"], (int, float)):
            raise ValueError(f"{input_name}: {where} has a non-numeric score {record['score']!r}")
    else:
        xyxy = coordinates(item, where, input_name)
        record = {"xyxy": xyxy, "label": None, "id": None, "score": None, "color": None}
    return record


def _per_frame(data, batch: int, input_name: str) -> list[list]:
    """A list of boxes for every frame, or a list of per-frame lists of length `batch`."""
    if not isinstance(data, (list, tuple)):
        raise ValueError(f"{input_name}: expected a list of boxes or a list of per-frame lists, got {short(data)}")
    if len(data) == 0 or all(_is_box(item) for item in data):
        return [list(data)] * batch
    if all(isinstance(item, (list, tuple)) and all(_is_box(b) for b in item) for item in data):
        if len(data) != batch:
            raise ValueError(f"{input_name}: {len(data)} per-frame box lists for a batch of {batch} frames; "
                             f"give one list per frame, or one list of boxes for all frames")
        return [list(item) for item in data]
    bad = next(item for item in data if not _is_box(item))
    raise ValueError(f"{input_name}: a box is [x1,y1,x2,y2] or a dict with x1,y1,x2,y2 (or x,y,w,h); "
                     f"got {short(bad)}")


def _table(frames: list[list[dict]]) -> BoxTable:
    records = [(f, r) for f, frame in enumerate(frames) for r in frame]
    frame = torch.tensor([f for f, _ in records], dtype=torch.int64)
    xyxy = torch.tensor([r["xyxy"] for _, r in records], dtype=torch.float32).reshape(-1, 4)
    xyxy = torch.stack([xyxy[:, [0, 2]].amin(1), xyxy[:, [1, 3]].amin(1),
                        xyxy[:, [0, 2]].amax(1), xyxy[:, [1, 3]].amax(1)], dim=1)
    return BoxTable(frame, xyxy, *([r[key] for _, r in records] for key in ("label", "id", "score", "color")))


def from_lists(data, batch: int, input_name: str) -> BoxTable:
    """Boxes from parsed JSON or a BBOX value (lists/tuples of boxes, per frame or for all)."""
    frames = _per_frame(data, batch, input_name)
    busiest = max(range(len(frames)), key=lambda f: len(frames[f]), default=0)
    if frames and len(frames[busiest]) > MAX_BOXES_PER_FRAME:
        raise ValueError(f"{input_name}: {len(frames[busiest]):,} boxes in frame {busiest}; at most "
                         f"{MAX_BOXES_PER_FRAME:,} per frame are drawn")
    if sum(map(len, frames)) > MAX_BOXES:
        raise ValueError(f"{input_name}: {sum(map(len, frames)):,} boxes over {len(frames)} frames; at most "
                         f"{MAX_BOXES:,} per run (split the video into several runs)")
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


def from_bounding_box(detections, batch: int, input_name: str = "bounding_box") -> BoxTable:
    """Core ComfyUI's BOUNDING_BOX: per image a list of {x, y, width, height, label, score}; a single
    list (or a list holding one image's list) serves every frame."""
    def box(item, where):
        if not isinstance(item, dict) or not all(k in item for k in ("x", "y", "width", "height")):
            raise ValueError(f"{input_name}: {where} should be {{x, y, width, height, label, score}}, got {short(item)}")
        return {"x": item["x"], "y": item["y"], "w": item["width"], "h": item["height"],
                "label": item.get("label"), "score": item.get("score")}

    if not isinstance(detections, (list, tuple)):
        raise ValueError(f"{input_name}: expected per-image lists of detections, got {short(detections)}")
    if len(detections) == 1 and isinstance(detections[0], (list, tuple)):
        detections = detections[0]
    if all(isinstance(item, dict) for item in detections):
        return from_lists([box(item, f"detection {i}") for i, item in enumerate(detections)], batch, input_name)
    if not all(isinstance(frame, (list, tuple)) for frame in detections):
        raise ValueError(f"{input_name}: expected per-image lists of detections, got {short(detections)}")
    frames = [[box(item, f"detection {i} of image {f}") for i, item in enumerate(frame)]
              for f, frame in enumerate(detections)]
    return from_lists(frames, batch, input_name)


def from_segs(segs, batch: int, input_name: str = "segs") -> BoxTable:
    """Impact Pack SEGS ((H, W), [SEG, ...]); the same boxes on every frame."""
    try:
        _shape, items = segs
        boxes = [{"x1": s.bbox[0], "y1": s.bbox[1], "x2": s.bbox[2], "y2": s.bbox[3],
                  "label": getattr(s, "label", None), "score": _scalar(getattr(s, "confidence", None))}
                 for s in items]
    except (TypeError, ValueError, AttributeError, IndexError):
        raise ValueError(f"{input_name}: expected SEGS ((height, width), [SEG with .bbox, ...]), got {short(segs)}") from None
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
        frames.append([{"xyxy": [float(x), float(y), float(x + w), float(y + h)], "label": None, "id": None,
                        "score": None, "color": None} for x, y, w, h, _area in stats[1:count]])
    return _table(frames)
