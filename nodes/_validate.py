"""Input checks shared by the nodes: errors name the input and show what was received."""
from __future__ import annotations

import torch


def check_images(images, input_name: str = "images") -> None:
    """An IMAGE: float tensor [B,H,W,C], C = 3 or 4, B, H, W > 0."""
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"{input_name}: expected an IMAGE tensor [B,H,W,C], got {type(images).__name__}")
    if images.ndim != 4 or images.shape[-1] not in (3, 4) or min(images.shape[:3]) == 0:
        raise ValueError(f"{input_name}: expected an IMAGE [B,H,W,C] with C = 3 or 4 and no empty dimension, "
                         f"got shape {tuple(images.shape)}")
    if not images.is_floating_point():
        raise ValueError(f"{input_name}: expected float values in 0..1, got dtype {images.dtype}")

