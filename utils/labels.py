"""Box labels: each distinct string rendered once into an atlas, drawn as sprites on a rounded
background that stays inside the frame."""
from __future__ import annotations

import functools

import numpy as np
import torch

from . import gpu_rendering as R

PADDING = 3


@functools.lru_cache(maxsize=8)
def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)  # Pillow's bundled font (FreeType when available)


def text_atlas(strings: list[str], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Render distinct strings once. Returns atlas float [Ha,Wa] (coverage 0..1) and rects
    int64 [S,4] (x, y, width, height of each string inside the atlas), strings stacked vertically."""
    from PIL import Image, ImageDraw

    font = _font(size)
    boxes = [font.getbbox(s) for s in strings]
    sizes = [(max(1, r - l), max(1, b - t)) for l, t, r, b in boxes]
    width = max((w for w, _ in sizes), default=1)
    height = max(1, sum(h for _, h in sizes))
    canvas = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    rects, y = [], 0
    for text, (l, t, _r, _b), (w, h) in zip(strings, boxes, sizes):
        draw.text((-l, y - t), text, fill=255, font=font)
        rects.append((0, y, w, h))
        y += h
    atlas = torch.from_numpy(np.asarray(canvas, dtype=np.float32) / 255.0)
    return atlas, torch.tensor(rects, dtype=torch.int64).reshape(-1, 4)


def label_primitives(frame: torch.Tensor, xyxy: torch.Tensor, texts: list[str], colors: torch.Tensor,
                     height: int, width: int, size: int) -> tuple[R.Primitives, torch.Tensor | None]:
    """Labels for N boxes: background then text, placed above each box, or inside its top when
    there is no room above, and shifted to stay inside the frame.

    frame int64 [N], xyxy float [N,4], texts N strings ("" = no label), colors float [N,4]
    (background; the text is black or white, whichever contrasts more).
    Returns the primitives and the atlas they index (None when there is no label).
    """
    keep = torch.tensor([bool(t) for t in texts], dtype=torch.bool)
    if not bool(keep.any()):
        return R.empty(), None
    kept = [t for t in texts if t]
    distinct = sorted(set(kept))
    atlas, rects = text_atlas(distinct, size)
    rect = rects[torch.tensor([distinct.index(t) for t in kept])]
    box, colour, frame = xyxy[keep], colors[keep], frame[keep]
    label_w = rect[:, 2].float() + 2 * PADDING
    label_h = rect[:, 3].float() + 2 * PADDING
    above = box[:, 1] - label_h
    top = torch.where(above >= 0, above, box[:, 1]).clamp_min(0).minimum((height - label_h).clamp_min(0))
    left = box[:, 0].clamp_min(0).minimum((width - label_w).clamp_min(0))
    left, top = left.floor(), top.floor()
    background = R.rounded_boxes(frame, torch.stack([left, top, left + label_w, top + label_h], 1), stroke_width=0,
                                 radius=PADDING, stroke_color=(0, 0, 0, 0), fill_color=colour)
    luminance = colour[:, :3] @ torch.tensor([0.299, 0.587, 0.114])
    ink = torch.where(luminance[:, None] > 0.55, torch.tensor([0.0, 0.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, 1.0, 1.0]))
    ink = ink * torch.cat([torch.ones(len(kept), 3), colour[:, 3:4]], 1)
    text = R.sprites(frame, torch.stack([left + PADDING, top + PADDING], 1), rect, ink)
    return R.concat(background, text), atlas
