"""Input checks shared by the nodes: errors name the input and show what was received."""

from __future__ import annotations

import torch


def check_images(images, input_name: str = "images") -> None:
    """An IMAGE: float tensor [B,H,W,C], C = 3 or 4, B, H, W > 0."""
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"{input_name}: expected an IMAGE tensor [B,H,W,C], got {type(images).__name__}")
    if images.ndim != 4 or images.shape[-1] not in (3, 4) or min(images.shape[:3]) == 0:
        raise ValueError(
            f"{input_name}: expected an IMAGE [B,H,W,C] with C = 3 or 4 and no empty dimension, "
            f"got shape {tuple(images.shape)}"
        )
    if not images.is_floating_point():
        raise ValueError(f"{input_name}: expected float values in 0..1, got dtype {images.dtype}")


# draw()'s memory beside its outputs (bytes, fitted to peaks measured on the CPU, within 2x of them:
# tests/test_memory_estimates.py): per pixel of a frame, per primitive, and per pixel of a primitive's
# tile span on the path that sets up every (tile, primitive) pair of a chunk at once (the torch path)
DRAW_PIXEL_BYTES = 4
DRAW_PRIMITIVE_BYTES = 500
DRAW_PAIR_PIXEL_BYTES = 48
DRAW_CHUNK_PIXELS = 32 << 20  # draw's chunks on the CPU, of frames


def draw_memory(images: torch.Tensor, prims, atlas, image_only: bool, plan=None) -> int:
    """Estimated peak bytes of gpu_rendering.draw(images [B,H,W,C], prims, atlas): its outputs (image;
    alpha and layer unless image_only), the atlas, and the work of its largest chunk of frames; plan:
    gpu_rendering.draw_plan's, where draw takes the torch path (without numba's or CUDA's loop), which
    sets up every tile pair of the busiest frames at once (host data: no read here)."""
    batch, height, width, channels = images.shape
    outputs = batch * height * width * (channels + (0 if image_only else 5)) * 4
    chunk = max(1, min(batch, DRAW_CHUNK_PIXELS // (height * width)))
    work = chunk * height * width * DRAW_PIXEL_BYTES + len(prims) * DRAW_PRIMITIVE_BYTES
    if plan is not None:
        from ..utils.gpu_rendering import TILE

        busiest = sorted((sum(frame) for frame in plan.pairs), reverse=True)[:chunk]
        work += sum(busiest) * TILE * TILE * DRAW_PAIR_PIXEL_BYTES
    return outputs + work + (atlas.numel() * 8 if atlas is not None else 0)
