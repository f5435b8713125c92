"""Edits of the frames inside and outside their boxes, made before the overlay is drawn: the image inside
every box blurred or pixelated (privacy, as supervision's BlurAnnotator and PixelateAnnotator), and the
pixels outside every box of a frame dimmed. Batched over all boxes and frames: one mask per frame (the
union of its boxes), one blurred or pixelated copy of the frames, one blend.

A pixel is inside a box when its centre is (x1 <= x + 0.5 < x2, y1 <= y + 0.5 < y2), the box given by its
upright bounds [N,4] (an oriented box: the bounds of the turned box). Only the colour channels change: an
alpha channel is kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core.device import numba_usable

INSIDE_EDITS = ("none", "blur", "pixelate")


def pixel_rects(bounds: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """int64 [N,4]: the first column, first row, stop column and stop row of the pixels whose centres lie in
    each box (bounds float [N,4] x1, y1, x2, y2), cut to the frame; an empty rect for a box not finite."""
    limit = torch.tensor([width, height, width, height], dtype=torch.float32, device=bounds.device)
    rects = torch.minimum(torch.ceil(bounds.float() - 0.5).clamp_min(0), limit)
    rects = torch.where(torch.isfinite(bounds).all(1, keepdim=True), rects, 0.0).long()
    return torch.where((rects[:, 2:] > rects[:, :2]).all(1, keepdim=True), rects, 0)


def box_union_mask(frame: torch.Tensor, rects: torch.Tensor, batch: int, height: int, width: int) -> torch.Tensor:
    """bool [batch,H,W]: the pixels in some box of their frame (frame int64 [N], rects int64 [N,4] from
    pixel_rects). Each box adds +1/-1 at its four corners of a count grid whose running sums over both
    axes count the boxes over each pixel: O(N + B*H*W), whatever the boxes' sizes."""
    counts = torch.zeros(batch, height + 1, width + 1, dtype=torch.int32, device=rects.device)
    frame = frame.to(rects.device)
    x0, y0, x1, y1 = rects.unbind(1)
    one = torch.ones_like(x0, dtype=torch.int32)
    for ys, xs, sign in ((y0, x0, 1), (y0, x1, -1), (y1, x0, -1), (y1, x1, 1)):
        counts.index_put_((frame, ys, xs), one * sign, accumulate=True)
    return counts.cumsum_(1).cumsum_(2)[:, :height, :width] > 0


def box_blur(images: torch.Tensor, size: int) -> torch.Tensor:
    """images [B,H,W,C] each pixel the mean of the size x size window around it (cv2.blur's box filter;
    an even size reaches one pixel further up and left), the window cut to the frame (the mean of the
    pixels inside it). Two running sums: the same work for any size."""
    before = size // 2
    after = size - 1 - before
    out = images
    for axis, length in ((1, images.shape[1]), (2, images.shape[2])):
        index = torch.arange(length, device=images.device)
        start, stop = (index - before).clamp_min(0), (index + after + 1).clamp_max(length)
        sums = F.pad(out.cumsum(axis), (0, 0) * (3 - axis) + (1, 0))  # [..., length + 1 along axis, ...]
        shape = [1, 1, 1, 1]
        shape[axis] = length
        count = (stop - start).to(images.dtype).view(shape)
        out = (sums.index_select(axis, stop) - sums.index_select(axis, start)) / count
    return out


def pixelated(images: torch.Tensor, size: int) -> torch.Tensor:
    """images [B,H,W,C] in blocks of size x size pixels from the frame's top left corner, each the mean of
    its pixels (blocks at the right and bottom edges cut to the frame)."""
    _, height, width, _ = images.shape
    means = F.avg_pool2d(images.permute(0, 3, 1, 2), size, ceil_mode=True).permute(0, 2, 3, 1)
    rows = torch.arange(height, device=images.device) // size
    columns = torch.arange(width, device=images.device) // size
    return means[:, rows][:, :, columns]


def edit_regions(
    images: torch.Tensor, frame: torch.Tensor, bounds: torch.Tensor, inside: str, size: int, dim_outside: float
) -> torch.Tensor:
    """images [B,H,W,C] (never modified) with the image inside the boxes (frame int64 [N] in order, upright
    bounds float [N,4]) blurred (box_blur) or pixelated (pixelated) at `size` px, and the colour outside
    every box of a frame scaled by 1 - dim_outside; `images` itself when there is nothing to do. On the
    CPU numba's loop blurs within the bounds of each frame's boxes only, pixelates the boxes' blocks only
    (box_regions_cpu.py), elsewhere the torch path whole frames."""
    if inside not in INSIDE_EDITS:
        raise ValueError(f"inside: expected one of {', '.join(INSIDE_EDITS)}, got {inside!r}")
    if not 0 <= dim_outside <= 1:
        raise ValueError(f"dim_outside: expected 0 to 1, got {dim_outside!r}")
    edit = INSIDE_EDITS.index(inside) if size > 1 else 0
    if not edit and dim_outside == 0:
        return images
    batch, height, width, _ = images.shape
    rects = pixel_rects(bounds.to(images.device), height, width)
    if numba_usable(images.device) and images.dtype == torch.float32:
        from . import box_regions_cpu  # numba: imported on first use (slow to import)

        first = torch.searchsorted(frame, torch.arange(batch + 1))
        edited = box_regions_cpu.edit_regions(
            images.contiguous().numpy(), rects.numpy(), first.numpy(), edit, size, dim_outside
        )
        if edited is not None:
            return torch.from_numpy(edited)
    inside_mask = box_union_mask(frame, rects, batch, height, width)[..., None]
    colour = images[..., :3]
    if edit:
        changed = (box_blur if inside == "blur" else pixelated)(colour.float(), size).to(images.dtype)
        colour = torch.where(inside_mask, changed, colour)
    if dim_outside > 0:
        colour = torch.where(inside_mask, colour, colour * (1 - dim_outside))
    return torch.cat([colour, images[..., 3:]], -1) if images.shape[-1] == 4 else colour
