"""Per-object masks for the mask overlay (gpu_rendering.masks): a MASK batch (SAM3's per-object masks)
or Impact Pack SEGS as `MaskObjects`, the objects' colours and their label texts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from .colors import palette, palette_from_hex, parse_hex, stable_index
from .text import short

LABEL_MODES = ("none", "id", "label", "label+score", "label+id")
COLOR_BY = ("index", "label")


@dataclass
class MaskObjects:
    """K objects over a batch: masks float [M,H,W] (the sources, as given), source int64 [K] (the mask
    each object shows), frame int64 [K], slot int64 [K] (its index within its frame: SAM3's object
    index, a SEG's position), and per object label (str or None) and score (float or None)."""

    masks: torch.Tensor
    source: torch.Tensor
    frame: torch.Tensor
    slot: torch.Tensor
    label: list = field(default_factory=list)
    score: list = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.source.shape[0])


def _as_masks(value, input_name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{input_name}: expected a MASK tensor [N,H,W], got {short(value)}")
    if value.ndim == 2:
        value = value[None]
    if value.ndim != 3 or min(value.shape[1:]) == 0:
        raise ValueError(f"{input_name}: expected a MASK [N,H,W] or [H,W], got shape {tuple(value.shape)}")
    if value.dtype == torch.bool or not value.is_floating_point():
        value = value.float()  # a bool or integer mask: its values as coverage
    return value if value.dtype == torch.float32 else value.float()


def from_masks(masks, batch: int, input_name: str = "masks") -> MaskObjects:
    """A MASK [M,H,W] (or [H,W]) for a batch of `batch` images: M == batch, one object per frame; M == 1,
    one object on every frame; M == k * batch, k objects per frame, frame after frame (SAM3 Video Track's
    [frames * objects] batch); batch == 1, M objects on the one image (SAM3 Detect's individual masks).
    Anything else is a ValueError naming the input. An empty batch (M == 0) has no objects."""
    masks = _as_masks(masks, input_name)
    count = masks.shape[0]
    if count == 0:
        objects = torch.zeros(0, dtype=torch.int64)
        return MaskObjects(masks, objects, objects, objects)
    if count == 1:
        source = torch.zeros(batch, dtype=torch.int64)
    elif count % batch == 0:
        source = torch.arange(count)
    else:
        raise ValueError(
            f"{input_name}: {count} masks for {batch} images; expected 1 (for every frame), "
            f"{batch} (one per frame) or a multiple of {batch} (objects per frame, frame after frame)"
        )
    per_frame = max(1, count // batch)
    frame = source // per_frame if count > 1 else torch.arange(batch)
    slot = source % per_frame
    return MaskObjects(masks, source, frame, slot, [None] * len(source), [None] * len(source))


def from_segs(segs, batch: int, height: int, width: int, input_name: str = "segs") -> MaskObjects:
    """Impact Pack SEGS ((H, W), [SEG, ...]): each SEG's .cropped_mask [h,w] placed at its .crop_region
    (x1, y1, x2, y2) in a frame of (height, width) (resized to the region when their sizes differ), with
    its .label and .confidence; the same objects on every frame."""
    try:
        shape, items = segs
        shape = (int(shape[0]), int(shape[1]))
        items = list(items)
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"{input_name}: expected SEGS ((height, width), [SEG, ...]), got {short(segs)}") from None
    if shape != (height, width):
        raise ValueError(f"{input_name}: SEGS of a {shape[1]}x{shape[0]} image for images of {width}x{height}")
    masks = torch.zeros(len(items), height, width)
    labels, scores = [], []
    for i, seg in enumerate(items):  # each SEG is a Python object with its own array: placed one by one
        try:
            crop = torch.as_tensor(np.asarray(seg.cropped_mask, dtype=np.float32))
            x1, y1, x2, y2 = (int(v) for v in seg.crop_region)
        except (AttributeError, TypeError, ValueError):
            raise ValueError(
                f"{input_name}: SEG {i} lacks a .cropped_mask array and a .crop_region "
                f"(x1, y1, x2, y2), got {short(seg)}"
            ) from None
        if crop.ndim != 2 or x2 <= x1 or y2 <= y1:
            raise ValueError(
                f"{input_name}: SEG {i}: a cropped_mask [h,w] and a non-empty crop_region expected, "
                f"got shape {tuple(crop.shape)} and region {(x1, y1, x2, y2)}"
            )
        if crop.shape != (y2 - y1, x2 - x1):
            crop = F.interpolate(crop[None, None], size=(y2 - y1, x2 - x1), mode="bilinear", align_corners=False)[0, 0]
        top, left = max(y1, 0), max(x1, 0)
        bottom, right = min(y2, height), min(x2, width)
        if bottom > top and right > left:
            masks[i, top:bottom, left:right] = crop[top - y1 : bottom - y1, left - x1 : right - x1]
        labels.append(None if getattr(seg, "label", None) is None else str(seg.label))
        confidence = getattr(seg, "confidence", None)
        scores.append(None if confidence is None else float(np.asarray(confidence, dtype=np.float32).reshape(-1)[0]))
    count = len(items)
    source = torch.arange(count).repeat(batch)
    frame = torch.arange(batch).repeat_interleave(count)
    return MaskObjects(masks, source, frame, source.clone(), labels * batch, scores * batch)


def mask_objects(masks, segs, batch: int, height: int, width: int) -> MaskObjects:
    """The objects of the one connected socket for `batch` images of height x width: the MASK batch
    (`from_masks`, of the images' size), else the SEGS; neither: no objects (the frames pass through)."""
    if masks is not None and segs is not None:
        raise ValueError("masks: connect one of masks (MASK) or segs (SEGS), not both")
    if masks is None and segs is None:
        masks = torch.zeros(0, height, width)
    if segs is not None:
        return from_segs(segs, batch, height, width)
    objects = from_masks(masks, batch)
    if tuple(objects.masks.shape[1:]) != (height, width):
        raise ValueError(
            f"masks: masks of {objects.masks.shape[2]}x{objects.masks.shape[1]} for images of "
            f"{width}x{height}; resize the masks to the images (they are not resized here)"
        )
    return objects


def objects_in_frames(objects: MaskObjects, start: int, stop: int) -> tuple[MaskObjects, torch.Tensor]:
    """The objects of frames start..stop (frames numbered from start, only the source masks they show)
    and their indices int64 [k] among `objects`."""
    index = torch.nonzero((objects.frame >= start) & (objects.frame < stop)).squeeze(1)
    used, source = torch.unique(objects.source[index], return_inverse=True)
    chosen = index.tolist()
    first = int(used[0]) if len(used) else 0
    # consecutive sources (a video's objects, frame after frame) are a view of the masks, not a copy
    consecutive = len(used) == 0 or int(used[-1]) - first + 1 == len(used)
    return MaskObjects(
        objects.masks[first : first + len(used)] if consecutive else objects.masks[used],
        source,
        objects.frame[index] - start,
        objects.slot[index],
        [objects.label[i] for i in chosen],
        [objects.score[i] for i in chosen],
    ), index


def object_colors(
    objects: MaskObjects, color: str, palette_name: str, palette_colors: str, color_by: str
) -> torch.Tensor:
    """float [K,3]: the fixed colour, else the palette slot of each object's index in its frame (or its
    label, where it has one and color_by is label): the same object has the same colour in every frame."""
    if color.strip():
        return torch.tensor(parse_hex(color, "color")[:3]).expand(len(objects), 3)
    colours = palette_from_hex(palette_colors) if palette_colors.strip() else palette(palette_name)
    slots = objects.slot.tolist()
    keys = [
        label if color_by == "label" and label is not None else slot
        for slot, label in zip(slots, objects.label, strict=False)
    ]
    return torch.tensor([colours[stable_index(key, len(colours))][:3] for key in keys], dtype=torch.float32).reshape(
        -1, 3
    )


def object_label_texts(objects: MaskObjects, mode: str, present: torch.Tensor) -> list[str]:
    """Each object's label text in `mode` (LABEL_MODES but none): its slot (#n), its label (else its
    slot), with its slot or its score; "" where present (bool [K], on the host) is False."""
    return [_label_text(objects, i, mode) if present[i] else "" for i in range(len(objects))]


def _label_text(objects: MaskObjects, index: int, mode: str) -> str:
    label, score, slot = objects.label[index], objects.score[index], int(objects.slot[index])
    if mode == "id":
        return f"#{slot}"
    name = str(label) if label is not None else f"#{slot}"
    if mode == "label+id" and label is not None:
        return f"{name} #{slot}"
    if mode == "label+score" and score is not None:
        return f"{name} {score:.2f}"
    return name
