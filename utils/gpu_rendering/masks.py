"""Mask overlays: per-object masks of every frame as filled regions, anti-aliased outlines and halos.

The masks are parsed into `MaskObjects` (inputs.masks): source masks [M,H,W] as given (never copied whole) and, per
object drawn, the source mask it shows, its frame and its slot (its index in its frame, the key that
keeps its colour from frame to frame). Everything after that is batched over all objects and frames:

  1. one pass over the masks: each 8x8 tile's maximum (max_pool2d); the tiles with mask in them, and
     the tiles whose marching-squares cells cross the threshold, are listed as (source, tile) pairs;
     only those tiles' pixels are read again (one gather, padded by one pixel up and left);
  2. fill: each listed tile is an 8x8 sprite of the shared engine whose atlas value is the mask itself
     (soft masks stay soft, NaN counts as 0), tinted by the object's colour at the fill opacity;
  3. outline: marching squares on the threshold level, every cell of every listed tile at once, with
     the crossing interpolated linearly along the cell's edges (sub-pixel); a tile's runs of pieces along
     one horizontal, vertical or diagonal line joined into one; the pieces of one object are one group
     of the engine's segments, so their coverages merge by maximum: one anti-aliased polyline per
     contour, joints drawn once, and no chaining of pieces in Python;
  4. halo: the mask averaged onto a grid of f x f pixels (f grows with the halo width), blurred by a
     separable Gaussian, sampled bilinearly in the tiles it reaches, and cut by the mask: a smooth
     falloff outside the object (sprites again).
The result is one list of primitives (halos, fills, outlines) and the atlas its sprites index, drawn by
`gpu_rendering.draw` in one call with any labels.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.device import numba_usable
from ..inputs.masks import MaskObjects
from .constants import SPRITE, TILE
from .labels import PADDING, label_primitives
from .primitives import Primitives, concat, empty, segments, sprites

# tiles of the mask read are the engine's tiles (constants.TILE): each sprite is one tile pair

# Marching squares: a cell's corners are top-left (bit 1), top-right (2), bottom-right (4), bottom-left
# (8); its edges top (0), right (1), bottom (2), left (3). Each case lists up to two pieces, each joining
# the crossings on two edges (-1: none). Cases 16 and 17 are the saddles 5 and 10 whose centre is inside.
_CASES = [
    [(-1, -1), (-1, -1)],
    [(3, 0), (-1, -1)],
    [(0, 1), (-1, -1)],
    [(3, 1), (-1, -1)],
    [(1, 2), (-1, -1)],
    [(3, 0), (1, 2)],
    [(0, 2), (-1, -1)],
    [(2, 3), (-1, -1)],
    [(2, 3), (-1, -1)],
    [(0, 2), (-1, -1)],
    [(0, 1), (2, 3)],
    [(1, 2), (-1, -1)],
    [(3, 1), (-1, -1)],
    [(0, 1), (-1, -1)],
    [(3, 0), (-1, -1)],
    [(-1, -1), (-1, -1)],
    [(0, 1), (2, 3)],
    [(3, 0), (1, 2)],
]
_NO_PIECES = (np.zeros(0, np.int64), np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32))
HALO_REACH = 3.0  # the halo's Gaussian sigma is its width / HALO_REACH: 0.3% of its edge value at its width
HALO_VISIBLE = 1 / 1024  # blurred values below this are left out (under half an 8-bit step)
LABEL_PLACES = ("top", "center")  # above each object's bounds, or on its centroid


# -- tiles ------------------------------------------------------------------------------------------


@dataclass
class _Tiles:
    """The listed (source, tile) pairs: source, ty, tx int64 [P]; values float [P,T+1,T+1]: the mask from
    pixel (ty*T - 1, tx*T - 1) on (0 outside the frame, NaN as 0, clamped to 0..1); fill bool [P]: the
    tile has mask in it; cells bool [P]: its cells may cross the threshold."""

    source: torch.Tensor
    ty: torch.Tensor
    tx: torch.Tensor
    values: torch.Tensor
    fill: torch.Tensor
    cells: torch.Tensor


def tile_peaks(masks: torch.Tensor) -> torch.Tensor:
    """The maximum of each T x T tile of masks [M,H,W]: float [M,ceil(H/T),ceil(W/T)] (NaN where a tile holds
    a NaN). Rows first: the T rows of a tile reduce elementwise along contiguous memory (the one pass over
    every pixel, about 1.5x faster than max_pool2d on the CPU), then the T times narrower result. On the CPU
    numba's loop (masks_cpu.py) reads each band of rows once, without the rows' maxima in memory."""
    count, height, width = masks.shape
    if count == 0:
        return masks.new_zeros(0, -(-height // TILE), -(-width // TILE))
    cpu = _cpu_loops(masks)
    peak = cpu and cpu.tile_peaks(masks.contiguous().numpy())
    if peak is not None:
        return torch.from_numpy(peak)
    whole = height - height % TILE
    rows = [masks[:, :whole].reshape(count, whole // TILE, TILE, width).amax(2)] if whole else []
    if whole < height:
        rows.append(masks[:, whole:].amax(1, keepdim=True))
    rows = torch.cat(rows, 1) if len(rows) > 1 else rows[0]
    rows = F.pad(rows, (0, -width % TILE), mode="replicate") if width % TILE else rows
    return rows.reshape(count, rows.shape[1], -1, TILE).amax(3)


def _cpu_loops(masks: torch.Tensor):
    """masks_cpu (numba's loops) where they run for these masks (float32 on the CPU), else None."""
    if masks.dtype != torch.float32 or not numba_usable(masks.device):
        return None
    from . import masks_cpu  # numba: imported on first use (slow to import)

    return masks_cpu


def _near(side: torch.Tensor, edge: bool) -> torch.Tensor:
    """side bool [M,Y,X] of the tile or of those above, to the left and above-left (`edge` beyond the grid):
    the tiles a tile's cells reach (they start one pixel up and left)."""
    return (
        side
        | F.pad(side, (0, 0, 1, 0), value=edge)[:, :-1]
        | F.pad(side, (1, 0), value=edge)[:, :, :-1]
        | F.pad(side, (1, 0, 1, 0), value=edge)[:, :-1, :-1]
    )


def _list_tiles(masks: torch.Tensor, threshold: float, outlines: bool, peak: torch.Tensor | None = None) -> _Tiles:
    count, height, width = masks.shape
    grid_y, grid_x = height // TILE + 1, width // TILE + 1  # one more: the cells on the bottom and right edges
    peak = tile_peaks(masks) if peak is None else peak.to(masks.device)
    cpu = _cpu_loops(masks)
    listed = cpu and cpu.list_tiles(masks.contiguous().numpy(), peak.float().contiguous().numpy(), threshold, outlines)
    if listed is not None:
        return _Tiles(*(torch.from_numpy(field) for field in listed))
    unknown = torch.isnan(peak)  # NaN wins the maximum: such a tile is read to see what else it holds
    pad = (0, grid_x - peak.shape[2], 0, grid_y - peak.shape[1])
    fill = F.pad(unknown | (peak > 0), pad)
    above = F.pad(unknown | (peak > threshold), pad)
    reach = _near(above, False) if outlines else torch.zeros_like(fill)
    source, ty, tx = torch.nonzero(fill | reach, as_tuple=True)
    offsets = torch.arange(TILE + 1, device=masks.device) - 1
    y = (ty * TILE)[:, None] + offsets  # [P,T+1]
    x = (tx * TILE)[:, None] + offsets
    inside = ((y >= 0) & (y < height))[:, :, None] & ((x >= 0) & (x < width))[:, None, :]
    flat = (source * height)[:, None, None] + y.clamp(0, height - 1)[:, :, None]
    values = masks.reshape(count * height, width)[flat, x.clamp(0, width - 1)[:, None, :]]
    values = torch.nan_to_num(values, nan=0.0, posinf=1.0, neginf=0.0).clamp_(0, 1) * inside
    cells = reach[source, ty, tx]
    if outlines:
        # a cell crosses the level only where its tiles hold values on both sides of it: not inside an
        # object (the tiles not listed lie below it; partial tiles read zeros beyond the frame's edge)
        below = torch.ones_like(fill)
        below[source, ty, tx] = (values[:, 1:, 1:] <= threshold).flatten(1).any(1)
        cells &= _near(below, True)[source, ty, tx]
    return _Tiles(source, ty, tx, values, fill[source, ty, tx], cells)


def _per_object(objects: MaskObjects, pair_source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For pairs listed per source (sorted by source), the pairs of every object in object order:
    (object int64 [Q], pair int64 [Q]). A source shown by several objects (one mask on every frame)
    gives its pairs to each of them: they are listed once and drawn in each frame."""
    sources = objects.masks.shape[0]
    counts = torch.bincount(pair_source, minlength=sources)
    start = torch.cumsum(counts, 0) - counts
    reps = counts[objects.source]
    obj = torch.repeat_interleave(torch.arange(len(objects), device=reps.device), reps)
    offset = torch.arange(int(reps.sum()), device=reps.device) - torch.repeat_interleave(
        torch.cumsum(reps, 0) - reps, reps
    )
    return obj, start[objects.source][obj] + offset


def _tile_sprites(
    frame, ty, tx, plane: torch.Tensor, row0: int, height: int, width: int, color, stride: int = TILE, column: int = 0
) -> Primitives:
    """One sprite per tile, showing plane int64 [S] of the planes that lie in the atlas from row `row0`
    (plane p's first pixel at row row0 + p*stride, column `column`): objects that show the same source share
    its planes. Their bounds end at their last pixels' centres (x0 + w - 0.5): pixels past them have no
    coverage, and a sprite of a tile reaches only that tile (to x0 + w it reached the three after it too,
    which drew nothing)."""
    x0, y0 = tx * TILE, ty * TILE
    rect = torch.stack(
        [
            torch.full_like(x0, column),
            row0 + plane * stride,
            (width - x0).clamp(max=TILE),
            (height - y0).clamp(max=TILE),
        ],
        1,
    )
    tiles = sprites(frame, torch.stack([x0, y0], 1), rect, color)
    tiles.bounds[:, 2:] -= 0.5
    return tiles


# -- outlines ---------------------------------------------------------------------------------------


def _contour_pieces(tiles: _Tiles, threshold: float, check=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Marching squares on every cell of the tiles with cells: (pair int64 [S], a float [S,2], b float
    [S,2]), the pieces of the threshold level in pixel coordinates, pair after pair. check(bytes), where
    given, is called with what the pieces will take on their way to primitives (PIECE_BYTES each), once
    they are counted and before they are made: it raises to refuse them."""

    def counted(pieces: int):  # numba's loop counts them exactly
        if check:
            check(pieces * PIECE_BYTES)

    cpu = _cpu_loops(tiles.values)
    pieces = cpu and cpu.contour_pieces(
        tiles.values.numpy(), tiles.ty.numpy(), tiles.tx.numpy(), tiles.cells.numpy(), threshold, counted
    )
    if pieces is not None:
        return tuple(torch.from_numpy(field) for field in pieces)
    keep = torch.nonzero(tiles.cells).squeeze(1)
    v = tiles.values[keep]
    c00, c01, c10, c11 = v[:, :-1, :-1], v[:, :-1, 1:], v[:, 1:, :-1], v[:, 1:, 1:]
    case = (c00 > threshold).long() + 2 * (c01 > threshold) + 4 * (c11 > threshold) + 8 * (c10 > threshold)
    centre = (c00 + c01 + c10 + c11) / 4 > threshold
    case = torch.where(((case == 5) | (case == 10)) & centre, case // 5 + 15, case)  # saddles: 16, 17
    pair, cy, cx = torch.nonzero((case > 0) & (case < 15) | (case > 15), as_tuple=True)
    if check:  # the cells with pieces are counted (nonzero read their number): two pieces each at most
        check(2 * pair.shape[0] * PIECE_BYTES)
    a00, a01, a10, a11 = (c[pair, cy, cx] for c in (c00, c01, c10, c11))

    def cross(lo, hi):  # where the level crosses an edge from lo to hi, 0..1 along it
        return ((threshold - lo) / torch.where(hi == lo, torch.ones_like(hi), hi - lo)).clamp(0, 1)

    x = (tiles.tx[keep][pair] * TILE - 1 + cx).float() + 0.5  # the cell's top-left pixel centre
    y = (tiles.ty[keep][pair] * TILE - 1 + cy).float() + 0.5
    edges = torch.stack(
        [
            torch.stack([x + cross(a00, a01), y], 1),
            torch.stack([x + 1, y + cross(a01, a11)], 1),
            torch.stack([x + cross(a10, a11), y + 1], 1),
            torch.stack([x, y + cross(a00, a10)], 1),
        ],
        1,
    )
    table = torch.tensor(_CASES, device=edges.device)[case[pair, cy, cx]]  # [S,2 pieces,2 edges]
    has = table[:, :, 0] >= 0
    ends = torch.gather(edges, 1, table.clamp_min(0).reshape(-1, 4, 1).expand(-1, 4, 2)).reshape(-1, 2, 2, 2)
    owner = keep[pair][:, None].expand(-1, 2)[has]
    return owner, ends[:, :, 0][has], ends[:, :, 1][has]


def _joined(owner: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pieces (owner int64 [S], a, b float [S,2], in _contour_pieces' order) with each run of consecutive
    pieces of one tile that lie along one horizontal, vertical or diagonal line, end to end, joined into one
    piece from the run's first far end to its last: the same capsules' union (an outline's pieces merge by
    maximum coverage), drawn as fewer segments. A binary mask's pieces are all of these three directions
    (a tile's straight edge: 8 pieces, 1 joined). Found by comparisons and subtractions only (exact, the
    same in numba's loop), not products: soft masks' pieces at other angles stay as they are. On a GPU,
    one host read (the runs' count)."""
    cpu = _cpu_loops(a)
    joined = cpu and cpu.joined(owner.numpy(), a.numpy(), b.numpy())
    if joined is not None:
        return tuple(torch.from_numpy(field) for field in joined)
    if owner.shape[0] < 2:
        return owner, a, b
    d = b - a
    # the line's direction: 1 horizontal, 2 vertical, 3 and 4 diagonal; 0 none of them, or no length
    line = torch.where(d[:, 0] == -d[:, 1], 4, 0)
    line = torch.where(d[:, 0] == d[:, 1], 3, line)
    line = torch.where(d[:, 0] == 0, 2, line)
    line = torch.where(d[:, 1] == 0, 1, line)
    line = torch.where((d == 0).all(1), 0, line)
    prev_a, prev_b, cur_a, cur_b = a[:-1], b[:-1], a[1:], b[1:]
    # the end each of two neighbours shares (0: a, 1: b), the first match of: prev b = cur a, prev b = cur b,
    # prev a = cur a, prev a = cur b
    bb, ba = (prev_b == cur_a).all(1), (prev_b == cur_b).all(1)
    ab, aa = (prev_a == cur_a).all(1), (prev_a == cur_b).all(1)
    prev_shares_b = bb | ba
    shared = prev_shares_b | ab | aa
    prev_end = prev_shares_b.long()
    cur_end = torch.where(bb, 0, torch.where(ba, 1, torch.where(ab, 0, 1)))
    point = torch.where(prev_shares_b[:, None], prev_b, prev_a)
    prev_far = torch.where(prev_shares_b[:, None], prev_a, prev_b)
    cur_far = torch.where((cur_end == 0)[:, None], cur_b, cur_a)
    axis = (line[1:] == 2).long()  # along y for vertical lines, x for the others
    before = (prev_far - point).gather(1, axis[:, None])[:, 0]
    after = (cur_far - point).gather(1, axis[:, None])[:, 0]
    join = (owner[1:] == owner[:-1]) & (line[1:] == line[:-1]) & (line[1:] > 0) & shared
    join &= ((before < 0) & (after > 0)) | ((before > 0) & (after < 0))  # the far ends on either side
    # a piece joined on both sides through the same end would fold back: its second join is dropped
    join[1:] &= ~(join[:-1] & (cur_end[:-1] == prev_end[1:]))
    join = F.pad(join, (1, 0))  # the piece before joins this one
    first = torch.nonzero(~join).squeeze(1)
    last = F.pad(first[1:] - 1, (0, 1), value=owner.shape[0] - 1)
    alone = (first == last)[:, None]
    # a run's far ends: its first piece's end not shared with the next, its last's not shared with the previous
    first_far = torch.where((prev_end[first.clamp(max=owner.shape[0] - 2)] == 1)[:, None], a[first], b[first])
    last_far = torch.where((cur_end[(last - 1).clamp(min=0)] == 0)[:, None], b[last], a[last])
    return owner[first], torch.where(alone, a[first], first_far), torch.where(alone, b[last], last_far)


def _extents(tiles: _Tiles, sources: int, height: int, width: int, threshold: float):
    """The pixels above the threshold of each source: low float [M,2] (their smallest x and y; past the
    frame where there are none), high [M,2] (their largest x and y + 1) and sums [M,3] (the mask's sum
    there, and that sum weighted by the pixel centres' x and y), from the filled tiles."""
    far = float(max(height, width) + 1)
    cpu = _cpu_loops(tiles.values)
    found = cpu and cpu.extents(
        *(field.numpy() for field in (tiles.values, tiles.fill, tiles.source, tiles.ty, tiles.tx)),
        sources,
        threshold,
        far,
    )
    if found is not None:
        return tuple(torch.from_numpy(field) for field in found)
    device = tiles.values.device
    filled = torch.nonzero(tiles.fill).squeeze(1)
    inner = tiles.values[filled, 1:, 1:]
    g = torch.arange(TILE, device=device)
    ys = (tiles.ty[filled] * TILE)[:, None, None] + g[:, None]
    xs = (tiles.tx[filled] * TILE)[:, None, None] + g[None, :]
    above = inner > threshold
    weight = inner * above
    big = torch.tensor(far, device=device)
    low = torch.stack(
        [torch.where(above, xs.float(), big).amin((1, 2)), torch.where(above, ys.float(), big).amin((1, 2))], 1
    )
    high = torch.stack(
        [torch.where(above, xs + 1.0, -big).amax((1, 2)), torch.where(above, ys + 1.0, -big).amax((1, 2))], 1
    )
    sums = torch.stack([weight.sum((1, 2)), (weight * (xs + 0.5)).sum((1, 2)), (weight * (ys + 0.5)).sum((1, 2))], 1)
    src = tiles.source[filled]
    low_s = torch.full((sources, 2), far, device=device).scatter_reduce(0, src[:, None].expand(-1, 2), low, "amin")
    high_s = torch.full((sources, 2), -far, device=device).scatter_reduce(0, src[:, None].expand(-1, 2), high, "amax")
    return low_s, high_s, torch.zeros(sources, 3, device=device).index_add_(0, src, sums)


# -- halos ------------------------------------------------------------------------------------------


def _blurred(grid: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """grid float32 [S,R,C] convolved with taps [2r+1] along its columns, then its rows (_blur twice); on
    the CPU numba's loop (the same sums in the same order, without a pass over the grid per tap)."""
    cpu = _cpu_loops(grid)
    blurred = cpu and cpu.blurred(grid.contiguous().numpy(), taps.contiguous().numpy())
    if blurred is not None:
        return torch.from_numpy(blurred)
    return _blur(_blur(grid, taps, 2), taps, 1)


def _blur(grid: torch.Tensor, taps: torch.Tensor, dim: int) -> torch.Tensor:
    """grid [S,R,C] convolved with taps [2r+1] along dim (1 or 2), zeros beyond its edges: a sum of shifted
    copies, tap after tap, so that each value is the same wherever the grid starts and however large it is
    (conv2d's CPU kernels took seconds on frame-sized grids of one channel)."""
    radius, size = (len(taps) - 1) // 2, grid.shape[dim]
    padded = F.pad(grid, (radius, radius) if dim == 2 else (0, 0, radius, radius))
    out = padded.narrow(dim, 0, size) * taps[0]
    for k in range(1, len(taps)):
        out = out + padded.narrow(dim, k, size) * taps[k]
    return out


def _halo_scale(halo_width: float) -> tuple[int, int, int]:
    """The halo's grid: f (pixels a grid cell spans, >= 6 cells across the halo), its blur's radius in
    cells, and the margin in tiles that the blur reaches past the filled tiles (and one more, which it
    does not reach)."""
    f = max(s for s in (1, 2, 4, 8) if s <= max(1.0, halo_width / 6))
    radius = max(1, math.ceil(3 * halo_width / HALO_REACH / f))
    return f, radius, -(-radius // (TILE // f)) + 1


def _halo_planes(tiles: _Tiles, sources: int, height: int, width: int, halo_width: float):
    """The halo of each source: (source, ty, tx int64 [P'], planes float [P',T,T]) in the tiles it reaches:
    min(1, 2 g) * (1 - mask), g the mask averaged on f x f pixels and blurred by a Gaussian of sigma
    halo_width / HALO_REACH, sampled bilinearly at the pixel centres. The grid of each source spans its
    filled tiles' bounds and the margin the blur reaches (all sources' grids of the largest size), not
    the frame."""
    device = tiles.values.device
    f, radius, margin = _halo_scale(halo_width)
    per_tile = TILE // f
    sigma = halo_width / HALO_REACH / f
    filled = torch.nonzero(tiles.fill).squeeze(1)
    inner = tiles.values[filled, 1:, 1:]
    src, fty, ftx = tiles.source[filled], tiles.ty[filled], tiles.tx[filled]
    # each source's grid starts `margin` tiles above and left of its filled tiles' bounds
    big = height + width
    top = torch.full((sources,), big, device=device).scatter_reduce(0, src, fty, "amin") - margin
    left = torch.full((sources,), big, device=device).scatter_reduce(0, src, ftx, "amin") - margin
    if len(filled) == 0:
        none = torch.zeros(0, dtype=torch.int64, device=device)
        return none, none, none, torch.zeros(0, TILE, TILE, device=device)
    spans = torch.stack([(fty - top[src]).max(), (ftx - left[src]).max()]) + 1 + margin
    grid_y, grid_x = spans.tolist()  # in tiles (one host read of both)
    grid = torch.zeros(sources, grid_y, per_tile, grid_x, per_tile, device=device)
    grid[src, fty - top[src], :, ftx - left[src], :] = inner.reshape(-1, per_tile, f, per_tile, f).mean((2, 4))
    grid = grid.reshape(sources, grid_y * per_tile, grid_x * per_tile)
    taps = torch.exp(-0.5 * (torch.arange(-radius, radius + 1, device=device, dtype=torch.float32) / sigma) ** 2)
    grid = _blurred(grid, taps / taps.sum())
    # the tiles the halo reaches (bilinear sampling reads one grid cell beyond a tile's own)
    reach = F.max_pool2d(grid[:, None], per_tile)[:, 0] > HALO_VISIBLE
    reach = F.max_pool2d(reach[:, None].float(), 3, stride=1, padding=1)[:, 0] > 0
    source, cy, cx = torch.nonzero(reach, as_tuple=True)
    ty, tx = cy + top[source], cx + left[source]
    inside = (ty >= 0) & (ty < (height + TILE - 1) // TILE) & (tx >= 0) & (tx < (width + TILE - 1) // TILE)
    source, cy, cx, ty, tx = source[inside], cy[inside], cx[inside], ty[inside], tx[inside]
    g = torch.arange(TILE, device=device, dtype=torch.float32)
    # grid coordinates of the pixel centres: cell i spans pixels i*f .. (i+1)*f, its centre at (i + 0.5) f
    gy = (cy * TILE)[:, None] + g  # pixels from the grid's origin
    gx = (cx * TILE)[:, None] + g
    fy, fx = (gy + 0.5) / f - 0.5, (gx + 0.5) / f - 0.5
    y0, x0 = fy.floor().long(), fx.floor().long()
    wy, wx = (fy - y0)[:, :, None], (fx - x0)[:, None, :]
    rows, cols = grid.shape[1], grid.shape[2]
    flat = grid.reshape(-1)

    def at(yy, xx):
        return flat[
            (source * rows)[:, None, None] * cols
            + (yy.clamp(0, rows - 1) * cols)[:, :, None]
            + xx.clamp(0, cols - 1)[:, None, :]
        ]

    blurred = (at(y0, x0) * (1 - wx) + at(y0, x0 + 1) * wx) * (1 - wy) + (
        at(y0 + 1, x0) * (1 - wx) + at(y0 + 1, x0 + 1) * wx
    ) * wy
    # the mask under each halo tile, from the listed fill tiles (0 where none is listed)
    lookup = torch.full((sources, grid_y, grid_x), -1, dtype=torch.int64, device=device)
    lookup[src, fty - top[src], ftx - left[src]] = torch.arange(len(filled), device=device)
    under = lookup[source, cy, cx]
    mask = torch.where((under >= 0)[:, None, None], inner[under.clamp_min(0)], torch.zeros((), device=device))
    return source, ty, tx, (2 * blurred).clamp_(0, 1) * (1 - mask)


# -- memory -----------------------------------------------------------------------------------------

# Bytes of overlay()'s work, measured (tests/nodes/test_memory_estimates.py): per listed tile (its pixels
# read, which the fills' sprites show in place, indices, outline pieces), per halo tile (its bilinear
# samples and plane), per primitive (a tile or piece of one object; twice that with a halo, whose primitives
# concat copies with the others), per halo grid cell (the blur's passes). A binary mask's outline pieces
# are joined into runs (_joined): its outlines take fewer of those. Per outline piece, past those: its
# ends, its joined run and primitive (numba's loops ~150 B, the torch path's temporaries ~330 B a cell of
# one or two pieces; masks of noise, where the tiles' count is ~15x short, 1.2-1.4x measured). The torch
# path's listed tiles (the GPU's, or the CPU's without numba) take ~2 KB each: its gather of their pixels
# broadcasts int64 indices and makes temporaries of the values
LISTED_TILE_BYTES = 350
TORCH_LISTED_TILE_BYTES = 2200
HALO_TILE_BYTES = 1500
PRIMITIVE_BYTES = 100
HALO_GRID_BYTES = 28
PIECE_BYTES = 200


def _longest_run(marked: torch.Tensor) -> int:
    """The largest extent over the rows of marked bool [S,N] from its first True to its last (0: none)."""
    if marked.shape[1] == 0:
        return 0
    index = torch.arange(marked.shape[1], device=marked.device)
    last = torch.where(marked, index, -1).amax(1)
    first = torch.where(marked, index, marked.shape[1]).amin(1)
    return int((last - first + 1).clamp_min(0).max()) if marked.shape[0] else 0


def overlay_memory(
    objects: MaskObjects,
    height: int,
    width: int,
    threshold: float,
    outlines: bool,
    halo_width: float,
    peak: torch.Tensor | None = None,
    budget: int | None = None,
) -> int:
    """Estimated peak bytes of `overlay` for these objects, before it runs: the tiles it will list, and
    those a halo of halo_width may reach, from the masks' tile peaks (tile_peaks(objects.masks), read here
    when not given; give overlay the same ones, so that the masks are read once). budget: the bytes the
    caller allows; where every tile of every mask listed (and reached by the halo, its grid as large as
    the frame) would fit in it, that bound is returned and the tiles are not counted (at 1080p, ~0.4 ms;
    with a halo ~10 ms, its reach's pooling)."""
    masks = objects.masks
    if len(objects) == 0 or masks.shape[0] == 0:
        return 0
    count, grid_y, grid_x = masks.shape[0], height // TILE + 1, width // TILE + 1
    work = count * -(-height // TILE) * width * 4 * 2  # the rows' maxima and their padding
    per_tile = LISTED_TILE_BYTES if _cpu_loops(masks) is not None else TORCH_LISTED_TILE_BYTES
    per_primitive = PRIMITIVE_BYTES * (2 if halo_width > 0 else 1)
    if budget is not None:  # the bound: every tile listed (and a halo tile), the halo grid the frame's size
        every = grid_y * grid_x  # a grid's tiles
        bound = work + every * (count * per_tile + len(objects) * (1 + outlines) * per_primitive)
        if halo_width > 0:
            f, _radius, margin = _halo_scale(halo_width)
            cells = count * (grid_y + 2 * margin) * (grid_x + 2 * margin) * (TILE // f) ** 2
            bound += every * (count * HALO_TILE_BYTES + len(objects) * per_primitive) + cells * HALO_GRID_BYTES
        if bound <= budget:
            return bound
    peak = tile_peaks(masks) if peak is None else peak
    pad = (0, grid_x - peak.shape[2], 0, grid_y - peak.shape[1])
    # per source, the tiles with mask in them, or with the cells reaching those (a superset of the listed)
    cpu = _cpu_loops(peak)
    per_source = cpu and cpu.listed_counts(peak.contiguous().numpy(), grid_y, grid_x, outlines)
    if per_source is None:
        fill = F.pad(torch.isnan(peak) | (peak > 0), pad)
        per_source = (_near(fill, False) if outlines else fill).flatten(1).sum(1)
    else:
        per_source = torch.from_numpy(per_source)
    tiles, prims = int(per_source.sum()), int(per_source[objects.source].sum()) * (1 + outlines)
    if halo_width > 0:
        fill = F.pad(torch.isnan(peak) | (peak > 0), pad)
        reach = math.ceil(halo_width / TILE) + 1  # tiles: the blur's 3 sigma = halo_width, and bilinear reads
        near = F.max_pool2d(fill[:, None].float(), 2 * reach + 1, stride=1, padding=reach)[:, 0] > 0
        halo = near.flatten(1).sum(1)
        f, _radius, margin = _halo_scale(halo_width)
        # the blur's grids: every source's of the largest filled bounds, grown by the margin on each side
        spans = [_longest_run(fill.any(axis)) + 2 * margin for axis in (2, 1)]
        work += int(halo.sum()) * HALO_TILE_BYTES + count * spans[0] * spans[1] * (TILE // f) ** 2 * HALO_GRID_BYTES
        prims += int(halo[objects.source].sum())
    return work + tiles * per_tile + prims * per_primitive


# -- the overlay ------------------------------------------------------------------------------------


class Overlay:
    """What `overlay` returns: the primitives and the atlas their sprites index (float [Ha,T]); per
    object, bounds float [K,4] (x1, y1, x2, y2 of its pixels above the threshold), centroid float [K,2]
    (mask-weighted, of those pixels) and present bool [K] (any pixel above the threshold). Those three are
    found on first use (`find` returns them): an overlay drawn without labels never reads them."""

    def __init__(self, prims: Primitives, atlas: torch.Tensor, find) -> None:
        self.prims, self.atlas, self._find = prims, atlas, find

    @functools.cached_property
    def _found(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        found, self._find = self._find(), None  # the listed tiles it reads are let go
        return found

    @property
    def bounds(self) -> torch.Tensor:
        return self._found[0]

    @property
    def centroid(self) -> torch.Tensor:
        return self._found[1]

    @property
    def present(self) -> torch.Tensor:
        return self._found[2]


def overlay(
    objects: MaskObjects,
    height: int,
    width: int,
    colors: torch.Tensor,
    opacity: float = 0.5,
    outline_width: float = 2.0,
    outline_opacity: float = 1.0,
    halo_width: float = 0.0,
    halo_opacity: float = 0.6,
    threshold: float = 0.5,
    peak: torch.Tensor | None = None,
    check=None,
) -> Overlay:
    """The overlay of K objects whose source masks are [M,H,W] (height x width), colors float [K,3]:
    halos (halo_width > 0), fills (mask * opacity) and outlines (outline_width > 0, on the threshold
    level), each part for every object in object order. Everything is on the masks' device. peak: the
    masks' tile_peaks where they are known already (overlay_memory's), else read here. check(bytes): see
    _contour_pieces (overlay_memory counts tiles: a mask of noise has a piece in each pixel's cell)."""
    masks = objects.masks
    device = masks.device
    count = len(objects)
    colors = colors.to(device).float().reshape(count, 3)
    outlines = outline_width > 0 and outline_opacity > 0
    if count == 0 or masks.shape[0] == 0:
        none = torch.zeros(count, 4, device=device)
        nothing = (none, none[:, :2], torch.zeros(count, dtype=torch.bool, device=device))
        return Overlay(empty(device), torch.zeros(1, TILE, device=device), lambda: nothing)
    tiles = _list_tiles(masks, threshold, outlines, peak)
    frame = objects.frame.to(device)
    parts, halo_rows, rows = [], None, 0  # halo_rows: the halos' planes as atlas rows (T wide)

    if halo_width > 0 and halo_opacity > 0:
        source, ty, tx, halo = _halo_planes(tiles, masks.shape[0], height, width, halo_width)
        obj, pair = _per_object(objects, source)
        color = F.pad(colors[obj], (0, 1), value=float(halo_opacity))
        parts.append(_tile_sprites(frame[obj], ty[pair], tx[pair], pair, rows, height, width, color))
        halo_rows = halo.reshape(-1, TILE)
        rows = halo_rows.shape[0]

    pieces = _joined(*_contour_pieces(tiles, threshold, check)) if outlines else None
    cpu = _cpu_loops(masks)
    built = cpu and cpu.fills_and_outlines(
        tuple(field.numpy() for field in (tiles.source, tiles.ty, tiles.tx, tiles.values, tiles.fill)),
        tuple(field.numpy() for field in pieces) if outlines else _NO_PIECES,
        objects.source.numpy(),
        frame.numpy(),
        colors.contiguous().numpy(),
        opacity,
        outline_opacity if outlines else 0.0,
        outline_width / 2,
        rows,
        height,
        width,
    )
    if built is not None:  # numba's loop: what _fills_and_outlines makes, in one pass
        parts.append(Primitives(*(torch.from_numpy(field) for field in built)))
    else:
        _fills_and_outlines(objects, tiles, pieces, frame, colors, opacity, outline_width, outline_opacity, rows, parts)
    # the fills' sprites show the listed tiles' values where they are (not copied): atlas rows of T + 1
    fill_rows = tiles.values.reshape(-1, TILE + 1) if opacity > 0 else None

    def find():  # the pixels above the threshold of each object: its bounds, centroid and presence
        low, high, sums = _extents(tiles, masks.shape[0], height, width, threshold)
        source = objects.source.to(device)
        centroid = sums[source, 1:] / sums[source, :1].clamp_min(1e-12)
        return torch.cat([low[source], high[source]], 1), centroid, sums[source, 0] > 0

    if halo_rows is not None and fill_rows is not None:  # the halos' rows (a column of 0 after them), the values'
        atlas = halo_rows.new_zeros(rows + fill_rows.shape[0], TILE + 1)
        atlas[:rows, :TILE] = halo_rows
        atlas[rows:] = fill_rows
    else:
        atlas = fill_rows if halo_rows is None else halo_rows
        atlas = torch.zeros(1, TILE, device=device) if atlas is None else atlas
    return Overlay(concat(*parts) if parts else empty(device), atlas, find)


def _fills_and_outlines(objects, tiles, pieces, frame, colors, opacity, outline_width, outline_opacity, rows, parts):
    """The torch path of the fills (a sprite per filled tile of each object, showing its tile's values:
    the atlas holds tiles.values [P,T+1,T+1] as rows of T + 1 from row `rows` on) and outlines (pieces: the
    tiles' contour pieces, or None), appended to parts."""
    filled = torch.nonzero(tiles.fill).squeeze(1)
    if opacity > 0:
        obj, nth = _per_object(objects, tiles.source[filled])
        color = F.pad(colors[obj], (0, 1), value=float(opacity))
        height, width = objects.masks.shape[1:]
        pair = filled[nth]
        parts.append(
            # a tile's pixels from its values' second row and column (the first are its one-pixel border)
            _tile_sprites(frame[obj], tiles.ty[pair], tiles.tx[pair], pair, rows + 1, height, width, color, TILE + 1, 1)
        )
    if pieces is not None:
        owner, a, b = pieces
        obj_o, piece = _per_object(objects, tiles.source[owner])
        color = F.pad(colors[obj_o], (0, 1), value=float(outline_opacity))
        lines = segments(frame[obj_o], a[piece], b[piece], float(outline_width), color)
        lines.group = obj_o  # an object's pieces are one shape: drawn once where they meet
        parts.append(lines)


def with_labels(drawn: Overlay, tags: Primitives, label_atlas: torch.Tensor | None) -> tuple[Primitives, torch.Tensor]:
    """The overlay's primitives then the labels' (`labels.label_primitives`), and one atlas for both:
    the overlay's rows, then the label atlas below them (its sprites moved down to it)."""
    if label_atlas is None or len(tags) == 0:
        return drawn.prims, drawn.atlas
    device = drawn.atlas.device
    tags, label_atlas = tags.to(device), label_atlas.to(device).float()
    wide = max(drawn.atlas.shape[1], label_atlas.shape[1])
    atlas = torch.cat(
        [F.pad(drawn.atlas, (0, wide - drawn.atlas.shape[1])), F.pad(label_atlas, (0, wide - label_atlas.shape[1]))]
    )
    params = tags.params.clone()
    params[:, 5] += torch.where(tags.kind == SPRITE, float(drawn.atlas.shape[0]), 0.0)  # atlas row of a sprite
    moved = Primitives(tags.frame, tags.kind, params, tags.color, tags.bounds, tags.group)
    return concat(drawn.prims, moved), atlas


def labelled(
    drawn: Overlay,
    frame: torch.Tensor,
    texts: list[str],
    colors: torch.Tensor,
    height: int,
    width: int,
    size: int,
    font: str,
    place: str = "top",
) -> tuple[Primitives, torch.Tensor]:
    """The overlay with a label per object (frame int64 [K] and colors float [K,3] on the host, texts K
    strings, "" for none): centred above the object's bounds (place "top", inside the frame) or on its
    centroid ("center"). Returns the primitives and the one atlas (`with_labels`)."""
    if place == "center":
        spot = drawn.centroid.cpu()
        where, anchor = torch.cat([spot, spot], 1), "center"
    else:
        where, anchor = drawn.bounds.cpu(), "top_center"
    tags, label_atlas = label_primitives(
        frame,
        where,
        texts,
        torch.cat([colors, torch.ones(len(texts), 1)], 1),
        height,
        width,
        size,
        font,
        anchor,
        PADDING,
    )
    return with_labels(drawn, tags, label_atlas)
