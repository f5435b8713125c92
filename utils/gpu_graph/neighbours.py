"""Neighbour searches over tracked points, for all frames at once: the k nearest visible points of
every point (nearest_neighbours) and every pair within a radius (radius_neighbour_keys).

Points are padded [T,N,2] with visibility [T,N]. Neighbours of every point of every frame come
from one batched search whose sizes the host fixes: a uniform grid over all frames (points sorted
by frame and cell), where every point reads the runs of sorted points that cover the block of
(2 SEARCH_RING + 1)^2 cells around its own, all rows padded to one width, with an exact check
that nothing outside the block can be nearer. The width is one host decision (the first sync);
the few points that fail the check, or whose blocks hold more points than the width, search a
brute-force row (the second). Small frames use brute-force distances directly, with no host sync (up
to BRUTE_FORCE_POINTS a frame on the CPU, BRUTE_FORCE_POINTS_GPU elsewhere). Equal distances
are broken by point index everywhere, so results do not depend on the search path or the device.

The radius search reads the same grid, with cells at least the radius wide.
"""

from __future__ import annotations

import math

import torch

from ..core.batching import expand_counts
from ..core.device import run_chunked
from .constants import INF

BRUTE_FORCE_POINTS = 192  # points per frame up to which an [N,N] distance matrix beats the grid (CPU)
# the same on a GPU, where the grid's ~110 launches and 2 host syncs a chunk outweigh a [T,N,N] matrix
# (sync-free) of a few hundred points a frame: 512 is an estimate from those counts (a GPU measurement is owed)
BRUTE_FORCE_POINTS_GPU = 512
SEARCH_RING = 2  # cells searched on each side of a point's own
CELL_OCCUPANCY = 0.25  # grid points per cell per neighbour sought (measured: ~0.05% fall back)
RADIUS_BYTES_PER_POINT = 4000  # radius search memory, for ~40 candidates a point (more: run_chunked halves)
# points (x k) searched in one chunk at most on the CPU: ~0.3 s on 2 cores, so that the optional on_chunk
# callback (interrupt checks) runs that often; a GPU searches millions in milliseconds, in chunks sized
# by memory alone (each chunk costs host syncs)
SEARCH_CHUNK_POINTS = 1 << 16


def _search_limit(device: torch.device, points: int) -> int | None:
    """Frames a search chunk takes at most on `device`, for `points` (x k) a frame."""
    return max(1, SEARCH_CHUNK_POINTS // points) if torch.device(device).type == "cpu" else None


def _sort_pairs(d2: torch.Tensor, ids: torch.Tensor):
    """d2, ids [R,K] with every row sorted by (distance, id)."""
    ids, by_id = ids.sort(1)
    d2, by_distance = d2.gather(1, by_id).sort(dim=1, stable=True)
    return d2, ids.gather(1, by_distance)


def _select(d2: torch.Tensor, ids: torch.Tensor, k: int):
    """The k smallest of d2 [R,C] (>= 0, inf = no candidate) by (distance, id), nearest first: d2 [R,k]
    and ids int64 [R,k]. ids int64 [R,C] or [C]: point indices (>= 0, < 2^32).

    One int64 key a candidate, the distance's bits (a float >= 0 orders as its bits) above its id: keys
    are unique, so that one topk picks the lowest ids at a tied k-th distance, with no host sync."""
    rows, width = d2.shape
    if width < k:
        d2 = torch.cat([d2, d2.new_full((rows, k - width), INF)], 1)
        ids = torch.cat([ids.expand(rows, width), ids.new_zeros(rows, k - width)], 1)
    key = (d2.view(torch.int32).long() << 32).bitwise_or_(ids)
    key = key.topk(k, 1, largest=False).values
    return (key >> 32).int().view(torch.float32), key.bitwise_and_(0xFFFFFFFF)


def _masked_d2(dx, dy, outside, delta_y_cap: float, within: float) -> torch.Tensor:
    """Squared lengths dx^2 + dy^2 (candidate minus point), inf where outside (None: nowhere) or
    beyond the caps; dx and dy are overwritten. Every search path uses this one formula, so equal
    distances compare equal across paths."""
    if math.isfinite(delta_y_cap):
        beyond = dy.abs() > delta_y_cap
        outside = beyond if outside is None else outside | beyond
    d2 = dx.mul_(dx).add_(dy.mul_(dy))
    if math.isfinite(within):
        beyond = d2 > within * within
        outside = beyond if outside is None else outside | beyond
    return d2 if outside is None else d2.masked_fill_(outside, INF)


def _neighbour_ids(d2: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """ids float or int64 [...] -> int64, -1 where d2 is inf."""
    return ids.masked_fill(d2 == INF, -1).long()


def _brute_force_frames(xy, visible, k, delta_y_cap, within):
    """Neighbours of every point among all points of its frame, as one [T*N,N] distance matrix."""
    frames, n = visible.shape
    outside = (visible[:, None, :] & visible[:, :, None]).logical_not_() | torch.eye(
        n, dtype=torch.bool, device=xy.device
    )
    x, y = xy.unbind(-1)
    d2 = _masked_d2(x[:, None, :] - x[:, :, None], y[:, None, :] - y[:, :, None], outside, delta_y_cap, within)
    d2, ids = _select(d2.view(-1, n), torch.arange(n, device=xy.device), k)
    return d2.sqrt().view(frames, n, k), _neighbour_ids(d2, ids).view(frames, n, k)


def _brute_force_rows(flat_x, flat_y, flat_hidden, n, rows, k, delta_y_cap, within):
    """Neighbours of the flat points `rows` [R] (frame * n + i) among all points of their frame:
    d2 [R,k], ids float [R,k]."""
    index = torch.arange(n, device=rows.device)
    candidate = (rows - rows % n)[:, None] + index
    outside = flat_hidden[candidate] | (candidate == rows[:, None])
    d2 = _masked_d2(
        flat_x[candidate] - flat_x[rows, None], flat_y[candidate] - flat_y[rows, None], outside, delta_y_cap, within
    )
    d2, ids = _select(d2, index, k)
    return d2, ids.float()  # as the grid's ids


def _grid_width(total: torch.Tensor, n: int, k: int) -> int:
    """The candidate row width that costs least: every row padded to it, plus a brute-force row
    (n wide) for each point whose block holds more candidates. total int64 [P]. One host sync."""
    widths = total.sort().values
    # padding all P rows to the i-th smallest total leaves at most P - 1 - i for brute force:
    # P * width + (P - 1 - i) * n, less a constant, over P
    cost = torch.add(
        widths, torch.arange(widths.numel(), dtype=torch.float32, device=total.device), alpha=-n / widths.numel()
    )
    return max(k + 2, int(widths[cost.argmin()[None]]))


def _grid_rows(sorted_xy, sorted_ids, xy, own, first, count, total, width, k, delta_y_cap, within):
    """The k nearest of the points xy [2,R] (sorted positions own [R]) among the sorted points
    sorted_xy [2,P+W] (then W at infinity) of their runs (first, count [R,B]: one run per cell row
    of the block; total [R]), `width` candidates a point: d2 [R,k], ids float [R,k], and whether
    the k-th distance is tied by a point beyond the k + 1 nearest read, which may have a lower id.
    Candidates run down the columns ([W,R]: vectorised scans over points), and large temporaries
    are int32 and updated in place (fresh memory costs more than arithmetic on a CPU)."""
    rows = count.shape[0]
    column = torch.arange(width, dtype=torch.int32, device=xy.device)[:, None]
    # sorted position of every candidate: its column plus its run's offset, a step function of
    # the column that a cumulative sum of the steps at the run starts builds. Past its total a
    # row reads the points at infinity, which need no mask.
    run_start = count.cumsum(1) - count
    offset = torch.cat([first - run_start, (sorted_ids.numel() - total)[:, None]], 1)
    run_start = torch.cat([run_start, total[:, None]], 1)
    steps = torch.zeros(width + 1, rows, dtype=torch.int32, device=xy.device)
    steps.scatter_add_(0, run_start.clamp_max(width).T, torch.cat([offset[:, :1], offset.diff(dim=1)], 1).T.int())
    position = steps.cumsum_(0, dtype=torch.int32)[:width].add_(column).view(-1)
    dx, dy = (sorted_xy[axis].index_select(0, position).view(width, rows).sub_(xy[axis]) for axis in (0, 1))
    d2 = _masked_d2(dx, dy, None, delta_y_cap, within)
    # the point itself is among them, at distance 0: read one more, then drop it
    d2, slot = d2.topk(k + 2, 0, largest=False, sorted=False)
    chosen = position.view(width, rows).gather(0, slot)
    ids = sorted_ids[chosen.clamp_max(sorted_ids.numel() - 1)]  # any id at infinity
    d2, ids = _sort_pairs(d2.masked_fill_(chosen == own, INF).T, ids.T)
    tied = (d2[:, k] == d2[:, k - 1]) & (d2[:, k - 1] < INF)
    return d2[:, :k], ids[:, :k], tied


def _flat_points(xy, visible):
    """Points of all frames in one list: flat_xy [P,2] (hidden points at 0: finite, searching
    nothing), flat_visible [P] and hidden [P], and the low corner [2] and extent [2] of the visible
    points over all frames."""
    flat_visible = visible.reshape(-1)
    hidden = ~flat_visible
    flat_xy = xy.reshape(-1, 2).masked_fill(hidden[:, None], 0.0)
    low = flat_xy.masked_fill(hidden[:, None], INF).amin(0)
    extent = flat_xy.masked_fill(hidden[:, None], -INF).amax(0) - low
    return flat_xy, flat_visible, hidden, low, extent


def _cell_table(flat_xy, flat_visible, hidden, index, n, low, cell, span, ring):
    """The points of all frames sorted by frame and grid cell. flat_xy [P,2] (frame after frame, n
    each; hidden ones finite), flat_visible [P], its negation hidden and index [P] (arange). Cells
    are `cell` wide from `low`, `span` along each axis (the caller sizes `cell` so that every
    visible point falls inside), with `ring` empty cells around each frame's grid so that a block
    of (2 ring + 1)^2 cells never leaves its frame. Returns position [P,2] and cell_xy [P,2] (in
    cells, float), side (cells a grid row), hidden_cell (where hidden points go: past the last
    frame's cells, with blocks inside the table), counts [C] (visible points a cell), cell_end [C]
    (sorted position past each cell's run), sorted_id [P] and order [P] (each sorted point's cell
    and flat index)."""
    position = (flat_xy - low) / cell
    cell_xy = position.floor()
    side = span + 2 * ring
    hidden_cell = flat_visible.numel() // n * side * side + ring * side + ring
    column, row = cell_xy.long().unbind(1)
    cell_id = torch.add(column, row, alpha=side).add_(index // n, alpha=side * side).add_(ring * (side + 1))
    cell_id.masked_fill_(hidden, hidden_cell)
    # cell ends in sorted order, counting visible points only: hidden ones sort last, in no run
    counts = torch.zeros(hidden_cell + ring * side + ring + 1, dtype=torch.long, device=flat_xy.device)
    cell_end = counts.index_add_(0, cell_id, flat_visible.long()).cumsum(0)
    sorted_id, order = cell_id.sort()
    return position, cell_xy, side, hidden_cell, counts, cell_end, sorted_id, order


def _grid_search(xy, visible, k, delta_y_cap, within):
    """nearest_neighbours of one chunk of frames through the grid."""
    frames, n = visible.shape
    ring = SEARCH_RING
    flat_xy, flat_visible, hidden, low, extent = _flat_points(xy, visible)
    points = flat_visible.numel()
    # about CELL_OCCUPANCY * (k + 1) points a cell in an average frame, sized on the device, and
    # at most `span` cells along an axis: a grid of a size known here
    span = math.ceil(2 * math.sqrt(n / (CELL_OCCUPANCY * (k + 1)))) + 1
    area = extent.clamp_min(1.0).prod() / flat_visible.sum()  # of a frame per point, over frames
    cell = (area * (frames * CELL_OCCUPANCY * (k + 1))).sqrt()
    if math.isfinite(within):  # cells just wider than within / ring: every search is exact at once
        cell = cell.clamp_max(within / ring * 1.01 + 1e-3)
    cell = torch.maximum(cell, extent.amax() / (span - 0.5))
    index = torch.arange(points, device=xy.device)
    position, cell_xy, side, hidden_cell, counts, cell_end, sorted_id, order = _cell_table(
        flat_xy, flat_visible, hidden, index, n, low, cell, span, ring
    )
    flat_x, flat_y = flat_xy.unbind(1)
    sorted_xy, sorted_ids = flat_xy.T.index_select(1, order), (order % n).float()  # [2,P]
    sorted_visible = sorted_id < hidden_cell
    # points are searched in sorted order, so that neighbouring searches read neighbouring memory.
    # Their blocks: one run of sorted points per cell row, from `ring` cells left to `ring` right
    run_first_cell = sorted_id[:, None] + torch.arange(
        -ring * (side + 1), ring * side - ring + 1, side, device=xy.device
    )
    first = (cell_end - counts)[run_first_cell]
    count = cell_end[2 * ring :][run_first_cell] - first
    total = count.sum(1)

    width = _grid_width(total, n, k)
    if width >= n:  # crowded blocks: brute-force rows cost less
        d2 = torch.full((points, k), INF, device=xy.device)
        ids = torch.zeros(points, k, device=xy.device)
        pending = sorted_visible
    else:
        padded = torch.cat([sorted_xy, sorted_xy.new_full((2, width), INF)], 1)
        parts = run_chunked(
            lambda start, stop, dev: _grid_rows(
                padded,
                sorted_ids,
                sorted_xy[:, start:stop],
                index[start:stop],
                first[start:stop],
                count[start:stop],
                total[start:stop],
                width,
                k,
                delta_y_cap,
                within,
            ),
            points,
            width * 64,
            xy.device,
        )
        d2, ids, tied = (torch.cat(part) if len(parts) > 1 else part[0] for part in zip(*parts, strict=False))
        # exact when the k-th is nearer than the nearest side of the block with points beyond it
        fraction = position - cell_xy  # in cells
        margin = torch.minimum(
            (fraction + ring).masked_fill_(cell_xy <= ring, INF),
            (ring + 1 - fraction).masked_fill_(cell_xy > extent / cell - (ring + 1), INF),
        )
        if math.isfinite(delta_y_cap):  # points beyond in y are beyond the cap anyway
            margin[:, 1].masked_fill_(margin[:, 1] * cell > delta_y_cap, INF)
        # float rounding may put a point a hair outside the cell it was sorted into: positions
        # are within span * 2^-23 cells of exact
        radius = ((margin.amin(1) - span * 1e-6) * cell)[order]
        inexact = d2[:, k - 1] >= radius * radius
        if math.isfinite(within):
            inexact &= within >= radius
        pending = (inexact | tied | (total > width)) & sorted_visible
    pending = pending.nonzero().squeeze(1)
    if pending.numel():

        def rows_chunk(start, stop, dev):
            rows = pending[start:stop]
            d2[rows], ids[rows] = _brute_force_rows(flat_x, flat_y, hidden, n, order[rows], k, delta_y_cap, within)

        run_chunked(rows_chunk, pending.numel(), n * 64, xy.device)
    d2, ids = torch.empty_like(d2).index_put_((order,), d2), torch.empty_like(ids).index_put_((order,), ids)
    return d2.sqrt().view(frames, n, k), _neighbour_ids(d2, ids).view(frames, n, k)  # in the points' order


def nearest_neighbours(
    xy: torch.Tensor, visible: torch.Tensor, k: int, delta_y_cap: float = INF, within: float = INF, on_chunk=None
):
    """The k nearest visible points of every point, |dy| within the cap, up to `within` pixels.

    xy float [T,N,2], visible bool [T,N] -> distance float32 [T,N,k] (inf where there are fewer)
    and index int64 [T,N,k] (-1 there), nearest first; equal distances go to the lower index.
    Chunks of frames are searched at once, on xy's device, with at most two host syncs a chunk. (faiss,
    one index per frame, was measured slower than this for N >= 1000 on CPU: bench/bench_links.py.)
    on_chunk(done, total): called after every chunk of frames (interrupt checks; chunks of at most
    SEARCH_CHUNK_POINTS points x k on the CPU).
    """
    frames, n = visible.shape
    brute = n <= (BRUTE_FORCE_POINTS if torch.device(xy.device).type == "cpu" else BRUTE_FORCE_POINTS_GPU)
    search = _brute_force_frames if brute else _grid_search
    parts = run_chunked(
        lambda start, stop, dev: search(
            xy[start:stop].to(dev, torch.float32), visible[start:stop].to(dev), k, delta_y_cap, within
        ),
        frames,
        n * (n * 40 if brute else 1200 * (k + 1)) + n * 200,
        xy.device,
        on_chunk,
        limit=_search_limit(xy.device, n * (k + 1)),
    )
    if not parts:
        return torch.zeros(0, n, k, device=xy.device), torch.zeros(0, n, k, dtype=torch.long, device=xy.device)
    if len(parts) == 1:
        return parts[0][0].to(xy.device), parts[0][1].to(xy.device)
    return torch.cat([p[0].to(xy.device) for p in parts]), torch.cat([p[1].to(xy.device) for p in parts])


def _radius_keys(xy, visible, within, delta_y_cap, first_frame, none):
    """The pairs i < j of visible points of each frame (xy float [T,N,2], visible bool [T,N]) at
    most `within` apart, |dy| within the cap, as sorted keys ((first_frame + frame) * N + i) * N + j,
    with `none` in the slots of candidates that are no pair: int64 [M].

    A grid of cells at least `within` wide holds every pair in neighbouring cells. Each point reads
    the points after it in its own cell and the next one in its row (one run of sorted points), and
    the three cells of the next row (another run): every pair of neighbouring cells once. M, the
    candidates read, is the one host sync; the candidate lists are sized from the cell counts."""
    n = visible.shape[1]
    flat_xy, flat_visible, hidden, low, extent = _flat_points(xy, visible)
    span = math.ceil(2 * math.sqrt(n)) + 1  # cells along an axis: about 4 a point at most
    # a hair wider than `within`: float rounding moves positions by up to span * 2^-23 cells
    cell = torch.clamp(extent.amax() / (span - 0.5), min=within * 1.01)
    index = torch.arange(flat_visible.numel(), device=xy.device)
    _, _, side, _, _, cell_end, sorted_id, order = _cell_table(
        flat_xy, flat_visible, hidden, index, n, low, cell, span, 1
    )
    # hidden points sort last, past every run: they read nothing
    count_own = (cell_end[sorted_id + 1] - 1 - index).clamp_min_(0)
    start_next = cell_end[sorted_id + side - 2]
    count = (cell_end[sorted_id + side + 1] - start_next).add_(count_own)
    owner, rank = expand_counts(count, int(count.sum()))
    position = rank + torch.where(rank < count_own[owner], owner + 1, (start_next - count_own)[owner])
    sorted_xy = flat_xy.T.index_select(1, order)  # [2,P]
    dx, dy = (sorted_xy[axis].index_select(0, position).sub_(sorted_xy[axis].index_select(0, owner)) for axis in (0, 1))
    far = _masked_d2(dx, dy, None, delta_y_cap, within) == INF
    a, b = order[owner], order[position]  # flat indices frame * n + i, in the same frame
    low_end, high_end = torch.minimum(a, b), torch.maximum(a, b) % n
    return (low_end + first_frame * n).mul_(n).add_(high_end).masked_fill_(far, none).sort().values


def radius_neighbour_keys(
    xy: torch.Tensor, visible: torch.Tensor, within: float, delta_y_cap: float = INF, on_chunk=None
):
    """All pairs i < j of visible points of each frame at most `within` pixels apart (|dy| within
    the cap): keys (frame * N + i) * N + j, int64 [M], in order, with T * N * N - 1 (no pair) in
    slots after each chunk's pairs. xy float [T,N,2], visible bool [T,N]. Chunks of frames are
    searched at once, on xy's device, with one host sync a chunk; on_chunk(done, total) after each
    (interrupt checks; chunks of at most SEARCH_CHUNK_POINTS points on the CPU)."""
    frames, n = visible.shape
    none = frames * n * n - 1
    parts = run_chunked(
        lambda start, stop, dev: _radius_keys(
            xy[start:stop].to(dev, torch.float32), visible[start:stop].to(dev), within, delta_y_cap, start, none
        ).to(xy.device),
        frames,
        n * RADIUS_BYTES_PER_POINT,
        xy.device,
        on_chunk,
        limit=_search_limit(xy.device, n),
    )
    return torch.cat(parts) if len(parts) != 1 else parts[0]
