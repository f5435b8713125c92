"""Hunyuan3D-2's `custom_rasterizer` API on the pack's rasterizer, so that code written for it (Hunyuan3D-2's
MeshRender, ComfyUI-Hunyuan3DWrapper) runs without building that CUDA extension. The pack registers this
module as `custom_rasterizer` when the real one cannot be imported (RASTERKIT_NO_CUSTOM_RASTERIZER=1
turns that off). Same arguments, shapes and results as the extension: its screen mapping, pixel centres,
float32 edge functions, depth quantisation, depth prior and tie rule (see mesh_rasterizer.py). Checked
bit for bit against its CPU kernel built from source, through Hunyuan3D-2's MeshRender, by
bench/verify_custom_rasterizer.py. Two deliberate differences, out of reach of MeshRender's default
cameras: a triangle with a corner at or behind the eye (clip w <= 0) is not drawn, where the kernel
draws its projection mirrored through the eye (and, with a corner near w = 0, walks a bounding box
millions of pixels wide); fragments of depth >= 8192 (NDC z >= ~16383) are drawn at the saturated
depth, as the kernel's CUDA build draws them, where its x86-64 CPU build's float-to-int conversion
overflows and drops them.
"""
from __future__ import annotations

import torch

from . import mesh_rasterizer


def rasterize(pos: torch.Tensor, tri: torch.Tensor, resolution, clamp_depth: torch.Tensor = torch.zeros(0),
              use_depth_prior: int = 0):
    """pos float [1,N,4] (or [N,4]) clip-space vertices, tri int32 [M,3], resolution (H, W);
    clamp_depth float [H,W], the NDC depth prior used when use_depth_prior is 1.
    Returns findices int32 [H,W] (face index + 1, 0 = background) and perspective-correct
    barycentric float32 [H,W,3]."""
    height, width = int(resolution[0]), int(resolution[1])
    prior = clamp_depth if use_depth_prior and clamp_depth.numel() else None
    return mesh_rasterizer.rasterize(pos, tri, width, height, prior, use_depth_prior=int(use_depth_prior))


def interpolate(col: torch.Tensor, findices: torch.Tensor, barycentric: torch.Tensor, tri: torch.Tensor):
    """col float [1,N,C] per-vertex values, findices [H,W], barycentric [H,W,3], tri [M,3] ->
    float [1,H,W,C] (0 on the background)."""
    return mesh_rasterizer.interpolate(col[0], findices, barycentric, tri)[None]
