"""Hunyuan3D-2's `custom_rasterizer` API on the pack's rasterizer, so that code written for it (Hunyuan3D-2's
MeshRender, ComfyUI-Hunyuan3DWrapper) runs without building that CUDA extension. The pack registers this
module as `custom_rasterizer` when the real one cannot be imported (RASTERKIT_NO_CUSTOM_RASTERIZER=1
turns that off). Same arguments, shapes and results as the extension: its screen mapping, pixel centres,
float32 edge functions, depth quantisation, depth prior and tie rule (see raster.py). Checked
bit for bit against its CPU kernel built from source, through Hunyuan3D-2's MeshRender, by
bench/verify_custom_rasterizer.py. Its call-level behaviour too: pos [B,N,4] draws pos[0] as its
wrapper does, a pos in an autograd graph is read as it is, a face with a NaN or infinite corner is
skipped and the rest drawn. Where it differs, an error instead of a read past the end: a clamp_depth
without H x W values with use_depth_prior=1. Two deliberate differences, out of reach of MeshRender's
default cameras: a triangle with a corner at or behind the eye (clip w <= 0) is not drawn, nor
clipped at the near plane (the pack's Mesh Rasterizer clips), where the kernel draws its projection
mirrored through the eye (and, with a corner near w = 0, walks a bounding box millions of pixels wide
for minutes); fragments of depth >= 8192 (NDC z >= ~16383) are drawn at the saturated
depth, as the kernel's CUDA build draws them, where its x86-64 CPU build's float-to-int conversion
overflows and drops them.
"""

from __future__ import annotations

import torch

from . import raster as mesh_rasterizer


def rasterize(
    pos: torch.Tensor,
    tri: torch.Tensor,
    resolution,
    clamp_depth: torch.Tensor = torch.zeros(0),  # noqa: B008  (Hunyuan3D-2's signature, exactly)
    use_depth_prior: int = 0,
):
    """pos float [1,N,4] clip-space vertices (of [B,N,4], pos[0], as Hunyuan3D-2's wrapper takes it; [N,4]
    too; any float dtype, in an autograd graph or not), tri int [M,3] (any integer dtype), resolution
    (H, W); clamp_depth float with H x W values ([H,W]), the NDC depth prior, read only when
    use_depth_prior is 1. A face with a NaN or infinite corner is not drawn, the others are.
    Returns findices int32 [H,W] (face index + 1, 0 = background) and perspective-correct
    barycentric float32 [H,W,3]."""
    height, width = int(resolution[0]), int(resolution[1])
    prior = None
    if use_depth_prior:
        if not isinstance(clamp_depth, torch.Tensor) or clamp_depth.numel() != height * width:
            got = f"shape {tuple(clamp_depth.shape)}" if isinstance(clamp_depth, torch.Tensor) else clamp_depth
            raise ValueError(
                f"clamp_depth: with use_depth_prior=1 it must hold H x W = {height} x {width} values "
                f"([H,W], the NDC depth of each pixel), got {got}"
            )
        prior = clamp_depth
    return mesh_rasterizer.rasterize(pos, tri, width, height, prior, use_depth_prior=int(use_depth_prior))


def interpolate(col: torch.Tensor, findices: torch.Tensor, barycentric: torch.Tensor, tri: torch.Tensor):
    """col float [1,N,C] per-vertex values, findices [H,W], barycentric [H,W,3], tri [M,3] ->
    float [1,H,W,C] (0 on the background)."""
    return mesh_rasterizer.interpolate(col[0], findices, barycentric, tri)[None]
