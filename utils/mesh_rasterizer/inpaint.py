"""Hunyuan3D-2.1's `mesh_inpaint_processor` (a C++ extension: meshVerticeInpaint, meshVerticeColor) in
torch, so that its paint pipeline runs without building it. The pack serves this module under that
name (and as any package's `.mesh_inpaint_processor`, the way Hunyuan3D-2.1's MeshRender imports it)
when the real one cannot be imported (RASTERKIT_NO_MESH_INPAINT=1 turns that off). Written from the
extension's behaviour, not its code.

The semantics: a texture float [H,W,C] and a mask uint8 [H,W] (> 0: known texels); each triangle corner
reads the texel at column round(u (W - 1)), row round((1 - v) (H - 1)) of its UV; a vertex (of vtx_pos,
indexed by pos_idx) whose corner lands on a known texel is seen and takes that texel's colour (the last
such corner in face order). The graph: each face corner points to the next corner of its face (k ->
k + 1 mod 3, by pos_idx), weight 1 / max(|p_a - p_b|, 1e-4)^2 between positions.
- method "smooth": the vertices with a corner on an unknown texel (once per such corner) are repeatedly
  set to the weighted mean of the coloured vertices they point to; a sweep colours those with any; the
  sweeps stop as the extension's do (a counter that starts at 2, rises when a sweep's count of
  vertices left without colour changes and falls when it does not, stops at 0). meshVerticeInpaint and
  meshVerticeColor update the vertices one after another within a sweep, in list order, as the
  extension does (numba's loop: its results up to float32 rounding; checked against the extension
  built from source by bench/bench_standins.py); without numba, and in vertex_colors by default (the
  Bake Texture node, on any device), all at once (Jacobi): the same vertices get coloured, by weighted
  means of the same neighbours, over more sweeps, so the colours differ where propagation runs far.
- method "forward": breadth first from the seen vertices: each round, every uncoloured vertex that a
  vertex coloured in the previous round points to takes the weighted mean of those; the same as the
  extension's (up to the order of float additions).
meshVerticeInpaint then writes every coloured vertex's colour at each of its corners' texels and marks
them 255 in the mask (the caller inpaints between those texels, e.g. with cv2.inpaint): it returns
(texture float32 [H,W,C], mask uint8 [H,W]). meshVerticeColor ("smooth" only) returns (colours float32
[V,C], state uint8 [V]: 1 seen, 2 coloured by the sweeps, 0 neither). UVs outside [0, 1] read the
nearest texel (the extension reads outside its buffer).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.device import numba_usable

__all__ = ["meshVerticeInpaint", "meshVerticeColor"]  # the extension's names

SEEN, FILLED = 1, 2


def _array(value, dtype, name: str, shape_text: str, columns: int | None) -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    if tensor.ndim != 2 or (columns is not None and tensor.shape[1] != columns):
        raise ValueError(f"{name}: expected {shape_text}, got shape {tuple(tensor.shape)}")
    return tensor.detach().to(dtype)


def corner_texels(vtx_uv: torch.Tensor, uv_idx: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Flat texel index int64 [F*3] of each face corner under the extension's rule: column round(u (W -
    1)) with u (W - 1) in float32, row round((1 - v) (H - 1)) in double (its C++ types: which texel a
    corner reads turns on that rounding, hence the host's float64 here), halves away from zero, clamped
    to the texture. CPU tensors."""
    uv = vtx_uv.index_select(0, uv_idx.reshape(-1)).numpy()
    x = uv[:, 0] * np.float32(width - 1)
    y = (1.0 - uv[:, 1].astype(np.float64)) * (height - 1)
    column = np.clip(np.floor(x) + (x - np.floor(x) >= 0.5), 0, width - 1).astype(np.int64)
    row = np.clip(np.floor(y) + (y - np.floor(y) >= 0.5), 0, height - 1).astype(np.int64)
    return torch.from_numpy(row * width + column)


def _last_per(target: torch.Tensor, size: int, valid: torch.Tensor) -> torch.Tensor:
    """For each of size slots, the last index i (in order) with valid[i] and target[i] == slot, else -1."""
    order = torch.arange(target.numel(), device=target.device)
    return torch.full((size,), -1, dtype=torch.long, device=target.device).scatter_reduce(
        0, target, torch.where(valid, order, -1), "amax"
    )


def vertex_colors(
    texture: torch.Tensor,
    known: torch.Tensor,
    corner_texel: torch.Tensor,
    vtx_pos: torch.Tensor,
    pos_idx: torch.Tensor,
    method: str = "smooth",
    sequential: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Colours propagated over the mesh: texture float [H,W,C], known bool [H,W], corner_texel int64
    [F*3] (corner_texels), vtx_pos float [V,3], pos_idx int64 [F,3] -> colours float [V,C] and state
    uint8 [V] (SEEN, FILLED or 0), by the module docstring's rule for `method` (propagate)."""
    channels = texture.shape[-1]
    corners = pos_idx.reshape(-1)
    corner_known = known.reshape(-1).index_select(0, corner_texel)
    last = _last_per(corners, vtx_pos.shape[0], corner_known)
    seen = last >= 0
    colours = texture.reshape(-1, channels).index_select(0, corner_texel.index_select(0, last.clamp_min(0)))
    colours = torch.where(seen[:, None], colours, 0.0)
    return propagate(colours, seen, ~corner_known, vtx_pos, pos_idx, method, sequential)


def propagate(
    colours: torch.Tensor,
    seen: torch.Tensor,
    listed: torch.Tensor,
    vtx_pos: torch.Tensor,
    pos_idx: torch.Tensor,
    method: str = "smooth",
    sequential: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """colours float [V,C] of the seen bool [V] vertices spread to the others over the mesh vtx_pos float
    [V,3], pos_idx int64 [F,3]; listed bool [F*3]: the corners whose vertex "smooth" updates (once per
    corner) -> colours float [V,C] and state uint8 [V] (SEEN, FILLED or 0). sequential: in the
    extension's order (numba's loops, on the CPU, where numba is usable; else all at once)."""
    if method not in ("smooth", "forward"):
        raise ValueError(f"method: expected 'smooth' or 'forward', got {method!r}")
    device, count, channels = colours.device, vtx_pos.shape[0], colours.shape[-1]
    corners = pos_idx.reshape(-1)
    source, target = corners, pos_idx.roll(-1, 1).reshape(-1)  # corner k points to corner k + 1 of its face
    distance = (vtx_pos.index_select(0, source) - vtx_pos.index_select(0, target)).norm(dim=-1)
    weight = 1 / distance.clamp_min(1e-4) ** 2
    state = torch.where(seen, SEEN, 0).to(torch.uint8)
    if sequential and numba_usable(device):
        from . import inpaint_cpu as mesh_inpaint_cpu

        order = source.argsort(stable=True)  # each vertex's neighbours in corner order, as the extension lists them
        start = torch.zeros(count + 1, dtype=torch.long).index_add_(0, source + 1, torch.ones_like(source)).cumsum(0)
        first = (corners[listed] if method == "smooth" else seen.nonzero().squeeze(1)).numpy()
        loop = mesh_inpaint_cpu.smooth if method == "smooth" else mesh_inpaint_cpu.forward
        result = loop(
            first, start.numpy(), target[order].numpy(), weight[order].numpy(), colours.numpy(), state.numpy()
        )
        if result is not None:
            return torch.from_numpy(result[0]), torch.from_numpy(result[1])
    if method == "forward":
        active, coloured = seen, seen
        while bool(active.any()):
            edge = active.index_select(0, source) & ~coloured.index_select(0, target)
            w = torch.where(edge, weight, 0.0)
            total = torch.zeros(count, device=device).index_add(0, target, w)
            sums = torch.zeros(count, channels, device=device).index_add(
                0, target, w[:, None] * colours.index_select(0, source)
            )
            active = total > 0
            colours = torch.where(active[:, None], sums / total.clamp_min(1e-30)[:, None], colours)
            coloured = coloured | active
        return colours, torch.where(coloured & ~seen, FILLED, state).to(torch.uint8)
    # "smooth": the vertices listed once per corner on an unknown texel, all at once
    listed = torch.zeros(count, dtype=torch.long, device=device).index_add(0, corners, listed.long())
    pending = listed > 0
    coloured = seen
    budget, last_left = 2, 0
    while budget > 0:
        w = torch.where(coloured.index_select(0, target), weight, 0.0)
        total = torch.zeros(count, device=device).index_add(0, source, w)
        sums = torch.zeros(count, channels, device=device).index_add(
            0, source, w[:, None] * colours.index_select(0, target)
        )
        update = pending & (total > 0)
        colours = torch.where(update[:, None], sums / total.clamp_min(1e-30)[:, None], colours)
        coloured = coloured | update
        state = torch.where(update, FILLED, state).to(torch.uint8)
        left = int(torch.where(pending & ~update, listed, 0).sum())
        budget += -1 if left == last_left else 1
        last_left = left
    return colours, state


def _inputs(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx):
    texture = (
        torch.as_tensor(np.asarray(texture, dtype=np.float32) if not isinstance(texture, torch.Tensor) else texture)
        .detach()
        .float()
    )
    if texture.ndim != 3:
        raise ValueError(f"texture: expected float [H,W,C], got shape {tuple(texture.shape)}")
    mask = torch.as_tensor(np.asarray(mask) if not isinstance(mask, torch.Tensor) else mask).detach()
    if mask.shape != texture.shape[:2]:
        raise ValueError(f"mask: expected uint8 [H,W] = {tuple(texture.shape[:2])}, got shape {tuple(mask.shape)}")
    vtx_pos = _array(vtx_pos, torch.float32, "vtx_pos", "float [V,3]", 3)
    vtx_uv = _array(vtx_uv, torch.float32, "vtx_uv", "float [T,2]", 2)
    pos_idx = _array(pos_idx, torch.long, "pos_idx", "int [F,3]", 3)
    uv_idx = _array(uv_idx, torch.long, "uv_idx", "int [F,3] (as pos_idx)", 3)
    if uv_idx.shape != pos_idx.shape:
        raise ValueError(f"uv_idx: expected the shape of pos_idx {tuple(pos_idx.shape)}, got {tuple(uv_idx.shape)}")
    for name, index, size in (("pos_idx", pos_idx, len(vtx_pos)), ("uv_idx", uv_idx, len(vtx_uv))):
        if index.numel() and not 0 <= int(index.min()) <= int(index.max()) < size:
            raise ValueError(f"{name}: indices must lie in 0..{size - 1}, got {int(index.min())}..{int(index.max())}")
    return texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx


def meshVerticeInpaint(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx, method: str = "smooth"):  # noqa: N802
    """Hunyuan3D-2.1's mesh_inpaint_processor.meshVerticeInpaint: texture float [H,W,C], mask uint8
    [H,W], vtx_pos float [V,3], vtx_uv float [T,2], pos_idx int [F,3], uv_idx int [F,3] (numpy arrays or
    tensors), method "smooth" or "forward" -> (texture float32 [H,W,C], mask uint8 [H,W]) numpy arrays:
    the input with every coloured vertex's colour written at its corners' texels, marked 255."""
    texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx = _inputs(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx)
    height, width, channels = texture.shape
    texel = corner_texels(vtx_uv, uv_idx, height, width)
    colours, state = vertex_colors(texture, mask > 0, texel, vtx_pos, pos_idx, method, sequential=True)
    written = state.index_select(0, pos_idx.reshape(-1)) > 0
    last = _last_per(texel, height * width, written)  # the last corner written at each texel wins
    at = (last >= 0).nonzero().squeeze(1)
    values = colours.index_select(0, pos_idx.reshape(-1).index_select(0, last.index_select(0, at)))
    out = texture.reshape(-1, channels).index_copy(0, at, values).view(height, width, channels)
    out_mask = mask.to(torch.uint8).reshape(-1).index_fill(0, at, 255).view(height, width)
    return out.numpy(), out_mask.numpy()


def meshVerticeColor(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx, method: str = "smooth"):  # noqa: N802
    """Hunyuan3D-2.1's mesh_inpaint_processor.meshVerticeColor: the same inputs -> (colours float32
    [V,C], state uint8 [V]: 1 seen, 2 coloured by propagation, 0 neither) numpy arrays."""
    if method != "smooth":
        raise ValueError(f"method: meshVerticeColor takes only 'smooth', got {method!r}")
    texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx = _inputs(texture, mask, vtx_pos, vtx_uv, pos_idx, uv_idx)
    texel = corner_texels(vtx_uv, uv_idx, *texture.shape[:2])
    colours, state = vertex_colors(texture, mask > 0, texel, vtx_pos, pos_idx, method, sequential=True)
    return colours.numpy(), state.numpy()
