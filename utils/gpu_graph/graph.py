"""Graphs over tracked points, for all frames at once, with caps and temporal hysteresis: k nearest
neighbours (knn_graph), all pairs within a radius (radius_graph), the Delaunay triangulation
(delaunay_graph) and the Euclidean minimum spanning tree (spanning_tree_graph); GRAPHS names them.
voronoi_graph gives the walls of the Voronoi cells instead of links, one for each Delaunay pair.

Points are padded [T,N,2] with visibility [T,N]. Neighbours of every point of every frame come
from one batched search whose sizes the host fixes: a uniform grid over all frames (points sorted
by frame and cell), where every point reads the runs of sorted points that cover the block of
(2 SEARCH_RING + 1)^2 cells around its own, all rows padded to one width, with an exact check
that nothing outside the block can be nearer. The width is one host decision (the first sync);
the few points that fail the check, or whose blocks hold more points than the width, search a
brute-force row (the second). Small frames use brute-force distances directly. Edges are
undirected (i < j). Equal distances are broken by point index everywhere, so results do not
depend on the search path or the device.

The radius search reads the same grid, with cells at least the radius wide. The Delaunay
triangulation has no batched form in torch: OpenCV triangulates each frame on the host. The
minimum spanning tree is a subgraph of it, found for all frames at once by Boruvka's algorithm.
The Voronoi walls come from the same OpenCV calls' triangles (their circumcentres bound each
pair's bisector), for all frames at once.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.batching import Ragged, expand_counts
from ..core.device import run_chunked

INF = float("inf")
BRUTE_FORCE_POINTS = 192  # points per frame up to which an [N,N] distance matrix beats the grid
SEARCH_RING = 2           # cells searched on each side of a point's own
CELL_OCCUPANCY = 0.25     # grid points per cell per neighbour sought (measured: ~0.05% fall back)
RADIUS_BYTES_PER_POINT = 4000  # radius search memory, for ~40 candidates a point (more: run_chunked halves)
# points (x k) searched in one chunk at most on the CPU: ~0.3 s on 2 cores, so that the optional on_chunk
# callback (interrupt checks) runs that often; a GPU searches millions in milliseconds, in chunks sized
# by memory alone (each chunk costs host syncs)
SEARCH_CHUNK_POINTS = 1 << 16


def _search_limit(device: torch.device, points: int) -> int | None:
    """Frames a search chunk takes at most on `device`, for `points` (x k) a frame."""
    return max(1, SEARCH_CHUNK_POINTS // points) if torch.device(device).type == "cpu" else None


@dataclass
class GraphOptions:
    k: int = 3                      # neighbours per point
    max_distance: float = INF       # longest edge, pixels
    delta_y_cap: float = INF        # largest |dy| of an edge, pixels
    degree_cap: int = 0             # most edges per point, shortest kept (0: no cap)
    mutual: bool = False            # an edge needs each end among the other's k nearest
    hysteresis: float = 1.0         # >1: an edge of the previous frame stays within this slack


# -- neighbour search ------------------------------------------------------------------------------

def _sort_pairs(d2: torch.Tensor, ids: torch.Tensor):
    """d2, ids [R,K] with every row sorted by (distance, id)."""
    ids, by_id = ids.sort(1)
    d2, by_distance = d2.gather(1, by_id).sort(dim=1, stable=True)
    return d2, ids.gather(1, by_distance)


def _select(d2: torch.Tensor, ids: torch.Tensor, k: int):
    """The k smallest of d2 [R,C] (inf = no candidate) by (distance, id), nearest first: d2 [R,k]
    and ids [R,k]. ids float32 [R,C] or [C]: point indices (exact in float32).

    Without a host sync: the k-th distance first, then every nearer candidate and, at exactly that
    distance, the lowest ids."""
    rows, width = d2.shape
    if width < k:
        d2 = torch.cat([d2, d2.new_full((rows, k - width), INF)], 1)
        ids = torch.cat([ids.expand(rows, width), ids.new_zeros(rows, k - width)], 1)
    kth = d2.topk(k, 1, largest=False).values[:, k - 1:]
    key = ids.masked_fill(d2 != kth, INF).masked_fill_(d2 < kth, -1.0)
    slot = key.topk(k, 1, largest=False).indices
    return _sort_pairs(d2.gather(1, slot), ids.expand_as(d2).gather(1, slot))


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
    """ids float [...] -> int64, -1 where d2 is inf."""
    return ids.masked_fill(d2 == INF, -1.0).long()


def _brute_force_frames(xy, visible, k, delta_y_cap, within):
    """Neighbours of every point among all points of its frame, as one [T*N,N] distance matrix."""
    frames, n = visible.shape
    hidden = ~visible
    outside = hidden[:, None, :] | hidden[:, :, None] | torch.eye(n, dtype=torch.bool, device=xy.device)
    x, y = xy.unbind(-1)
    d2 = _masked_d2(x[:, None, :] - x[:, :, None], y[:, None, :] - y[:, :, None], outside, delta_y_cap, within)
    d2, ids = _select(d2.view(-1, n), torch.arange(n, dtype=torch.float32, device=xy.device), k)
    return d2.sqrt().view(frames, n, k), _neighbour_ids(d2, ids).view(frames, n, k)


def _brute_force_rows(flat_x, flat_y, flat_hidden, n, rows, k, delta_y_cap, within):
    """Neighbours of the flat points `rows` [R] (frame * n + i) among all points of their frame:
    d2 [R,k], ids float [R,k]."""
    index = torch.arange(n, device=rows.device)
    candidate = (rows - rows % n)[:, None] + index
    outside = flat_hidden[candidate] | (candidate == rows[:, None])
    d2 = _masked_d2(flat_x[candidate] - flat_x[rows, None], flat_y[candidate] - flat_y[rows, None], outside,
                    delta_y_cap, within)
    return _select(d2, index.float(), k)


def _grid_width(total: torch.Tensor, n: int, k: int) -> int:
    """The candidate row width that costs least: every row padded to it, plus a brute-force row
    (n wide) for each point whose block holds more candidates. total int64 [P]. One host sync."""
    widths = total.sort().values
    # padding all P rows to the i-th smallest total leaves at most P - 1 - i for brute force:
    # P * width + (P - 1 - i) * n, less a constant, over P
    cost = torch.add(widths, torch.arange(widths.numel(), dtype=torch.float32, device=total.device),
                     alpha=-n / widths.numel())
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
        flat_xy, flat_visible, hidden, index, n, low, cell, span, ring)
    flat_x, flat_y = flat_xy.unbind(1)
    sorted_xy, sorted_ids = flat_xy.T.index_select(1, order), (order % n).float()  # [2,P]
    sorted_visible = sorted_id < hidden_cell
    # points are searched in sorted order, so that neighbouring searches read neighbouring memory.
    # Their blocks: one run of sorted points per cell row, from `ring` cells left to `ring` right
    run_first_cell = sorted_id[:, None] + torch.arange(-ring * (side + 1), ring * side - ring + 1, side,
                                                       device=xy.device)
    first = (cell_end - counts)[run_first_cell]
    count = cell_end[2 * ring:][run_first_cell] - first
    total = count.sum(1)

    width = _grid_width(total, n, k)
    if width >= n:  # crowded blocks: brute-force rows cost less
        d2 = torch.full((points, k), INF, device=xy.device)
        ids = torch.zeros(points, k, device=xy.device)
        pending = sorted_visible
    else:
        padded = torch.cat([sorted_xy, sorted_xy.new_full((2, width), INF)], 1)
        parts = run_chunked(lambda start, stop, dev: _grid_rows(
            padded, sorted_ids, sorted_xy[:, start:stop], index[start:stop], first[start:stop], count[start:stop],
            total[start:stop], width, k, delta_y_cap, within), points, width * 64, xy.device)
        d2, ids, tied = (torch.cat(part) if len(parts) > 1 else part[0] for part in zip(*parts))
        # exact when the k-th is nearer than the nearest side of the block with points beyond it
        fraction = position - cell_xy  # in cells
        margin = torch.minimum((fraction + ring).masked_fill_(cell_xy <= ring, INF),
                               (ring + 1 - fraction).masked_fill_(cell_xy > extent / cell - (ring + 1), INF))
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


def nearest_neighbours(xy: torch.Tensor, visible: torch.Tensor, k: int, delta_y_cap: float = INF,
                       within: float = INF, on_chunk=None):
    """The k nearest visible points of every point, |dy| within the cap, up to `within` pixels.

    xy float [T,N,2], visible bool [T,N] -> distance float32 [T,N,k] (inf where there are fewer)
    and index int64 [T,N,k] (-1 there), nearest first; equal distances go to the lower index.
    Chunks of frames are searched at once, on xy's device, with at most two host syncs a chunk. (faiss,
    one index per frame, was measured slower than this for N >= 1000 on CPU: bench/bench_links.py.)
    on_chunk(done, total): called after every chunk of frames (interrupt checks; chunks of at most
    SEARCH_CHUNK_POINTS points x k on the CPU).
    """
    frames, n = visible.shape
    brute = n <= BRUTE_FORCE_POINTS
    search = _brute_force_frames if brute else _grid_search
    parts = run_chunked(lambda start, stop, dev: search(
        xy[start:stop].to(dev, torch.float32), visible[start:stop].to(dev), k, delta_y_cap, within),
        frames, n * (n * 40 if brute else 1200 * (k + 1)) + n * 200, xy.device, on_chunk,
        limit=_search_limit(xy.device, n * (k + 1)))
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
    _, _, side, _, _, cell_end, sorted_id, order = _cell_table(flat_xy, flat_visible, hidden, index, n, low, cell,
                                                               span, 1)
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


def radius_neighbour_keys(xy: torch.Tensor, visible: torch.Tensor, within: float, delta_y_cap: float = INF,
                          on_chunk=None):
    """All pairs i < j of visible points of each frame at most `within` pixels apart (|dy| within
    the cap): keys (frame * N + i) * N + j, int64 [M], in order, with T * N * N - 1 (no pair) in
    slots after each chunk's pairs. xy float [T,N,2], visible bool [T,N]. Chunks of frames are
    searched at once, on xy's device, with one host sync a chunk; on_chunk(done, total) after each
    (interrupt checks; chunks of at most SEARCH_CHUNK_POINTS points on the CPU)."""
    frames, n = visible.shape
    none = frames * n * n - 1
    parts = run_chunked(lambda start, stop, dev: _radius_keys(
        xy[start:stop].to(dev, torch.float32), visible[start:stop].to(dev), within, delta_y_cap, start, none
    ).to(xy.device), frames, n * RADIUS_BYTES_PER_POINT, xy.device, on_chunk, limit=_search_limit(xy.device, n))
    return torch.cat(parts) if len(parts) != 1 else parts[0]


# -- edges, caps, hysteresis -----------------------------------------------------------------------
# Edges are fixed-size lists (frame, i, j, keep) in (frame, i, j) order, with slots that hold no
# edge marked keep = False; only packing them into a Ragged asks the host for a size.

def _cap_degree(ends, keep, rank_key, cap, nodes, held=None):
    """bool [E]: kept edges among the `cap` first of both their ends, ordered by held ones first
    (when held [E] is given), then rank_key, then list order. ends int64 [2,E]: the node at each
    end, below `nodes`."""
    edges = keep.numel()
    node = ends.masked_fill(~keep, nodes).view(-1)  # not kept: a node of their own, last
    group = node * 2 + ~held.repeat(2) if held is not None else node
    order = torch.sort(rank_key.repeat(2), stable=True).indices
    order = order[torch.sort(group[order], stable=True).indices]  # by node, then the ranking
    node = node[order]
    place = torch.arange(node.numel(), device=node.device)
    within = place - torch.searchsorted(node, node) < cap  # place among the edges of its node
    return keep & (torch.zeros_like(keep, dtype=torch.long).index_add_(0, order % edges, within.long()) == 2)


def _new_edges(index, distance, options: GraphOptions, n):
    """Undirected edges (frame, i < j) of every frame from the k nearest of each point, listed once
    each, sorted: frame, i, j, keep [T*N*k] (keep False on repeats and where there is no edge)."""
    frames = index.shape[0]
    ok = torch.isfinite(distance)
    if math.isfinite(options.max_distance):
        ok &= distance <= options.max_distance
    source = torch.arange(n, device=index.device)[None, :, None]
    low, high = torch.minimum(source, index), torch.maximum(source, index)
    frame = torch.arange(frames, device=index.device)[:, None, None]
    # no edge: the last key of the last frame, (n - 1, n - 1), after every real edge
    none = frames * n * n - 1
    key = ((frame * n + low) * n + high).masked_fill_(~ok, none).view(-1).sort().values
    if options.mutual:  # found from both ends: a key and the next one equal
        keep = torch.cat([key[1:] == key[:-1], key.new_zeros(1, dtype=torch.bool)])
    else:  # the first of equal keys
        keep = torch.cat([key.new_ones(1, dtype=torch.bool), key[1:] != key[:-1]])
    return key // (n * n), key // n % n, key % n, keep & (key != none)


def _hysteresis(xy, visible, reach, frame, i, j, keep, options: GraphOptions, slack):
    """Edges per frame with hysteresis, listed as frame, i, j, keep [M'] in (frame, i, j) order.

    An edge is present in frame t when it is new there, or present in frame t-1 and still within
    the slack of its limits: both ends visible, length <= max_distance * slack, |dy| <=
    delta_y_cap * slack, and (unless reach is None) within reach [T,N] of one end, the distance of
    its ceil(k * slack)-th nearest (of both ends when mutual).
    Frames go in windows whose state ([frames, distinct edges]) holds about HYSTERESIS_ENTRIES, so
    that memory grows linearly with the frames (distinct edges grow with them: the whole video at
    once was quadratic); each window starts from the edges present at the end of the one before.
    Without a degree cap the recurrence has a closed form within a window (the last frame where the
    edge was new, or carried in, with no slack failure since), evaluated for all its frames at once;
    with a cap, which edges survive depends on the frame before, so only that keep/drop step runs
    frame by frame, on [U] vectors, with no host sync. Host syncs: one for the windows, and one a window.
    """
    frames, n = visible.shape
    # per frame: where its new edges start in the lists, and how many there are (one host transfer)
    starts = torch.searchsorted(frame, torch.arange(frames + 1, device=frame.device))
    counts = torch.zeros(frames, dtype=torch.long, device=frame.device).index_add_(0, frame, keep.long())
    host = torch.cat([starts, counts]).tolist()
    starts, counts = host[:frames + 1], host[frames + 1:]
    windows, first, edges = [], 0, 0  # [first, last) frames: frames x (their new edges) within the bound
    for t in range(frames):
        if t > first and (t + 1 - first) * (edges + counts[t]) > HYSTERESIS_ENTRIES:
            windows.append((first, t))
            first, edges = t, 0
        edges += counts[t]
    windows.append((first, frames))
    carried = i.new_zeros(0)  # keys i * n + j of the edges present in the frame before the window
    parts = []
    for first, last in windows:  # the recurrence carries one frame's edges on
        rows = slice(starts[first], starts[last])
        present, key = _hysteresis_window(xy[first:last], visible[first:last],
                                          None if reach is None else reach[first:last], frame[rows] - first,
                                          (i[rows] * n + j[rows]).masked_fill_(~keep[rows], n * n), carried,
                                          options, slack, n)
        carried = key.masked_fill(~present[-1], n * n)  # n * n: none (no host sync)
        parts.append((torch.arange(first, last, device=key.device)[:, None].expand_as(present).reshape(-1),
                      (key // n).repeat(last - first), (key % n).repeat(last - first), present.view(-1)))
    return tuple(torch.cat(column) for column in zip(*parts))


# distinct edges x frames held at once by _hysteresis (~50 bytes each: ~100 MB a window)
HYSTERESIS_ENTRIES = 1 << 21


def _hysteresis_window(xy, visible, reach, frame, key, carried, options: GraphOptions, slack, n):
    """_hysteresis over one window of W frames: xy [W,N,2], visible and reach [W,N], the new edges'
    frame and key i * n + j [M] (n * n: no edge), carried int64 [C] (keys present in the frame
    before, n * n: none). Returns present bool [W,U] and the U distinct keys, sorted."""
    frames = visible.shape[0]
    # one more key than any edge's, always present, collects the slots with no edge
    key, inverse = torch.unique(torch.cat([key, carried, key.new_full((1,), n * n)]), return_inverse=True)
    key, edges = key[:-1], key.numel() - 1
    ends_i, ends_j = key // n, key % n
    new = torch.zeros(frames, edges + 1, dtype=torch.bool, device=key.device)
    new[frame, inverse[:frame.numel()]] = True
    new = new[:, :edges]
    before = torch.zeros(edges + 1, dtype=torch.bool, device=key.device)
    before[inverse[frame.numel():-1]] = True
    before = before[:edges]
    delta = xy[:, ends_j] - xy[:, ends_i]
    span = delta.norm(dim=-1)
    holds = (visible[:, ends_i] & visible[:, ends_j] & (span <= options.max_distance * slack)
             & (delta[..., 1].abs() <= options.delta_y_cap * slack))
    if reach is not None:
        near_i, near_j = span <= reach[:, ends_i], span <= reach[:, ends_j]
        holds &= (near_i & near_j) if options.mutual else (near_i | near_j)
    if options.degree_cap <= 0:
        time = torch.arange(frames, device=key.device)[:, None]
        # carried edges count as new in the frame before the window (-1); -2: never new
        last_new = torch.cummax(torch.where(new, time, -2), 0).values.maximum(torch.where(before, -1, -2))
        last_break = torch.cummax(torch.where(holds, -2, time), 0).values
        return new | ((last_new >= -1) & (last_break <= last_new)), key
    present = torch.zeros_like(new)
    previous = before
    ends = torch.stack([ends_i, ends_j])
    for t in range(frames):  # the recurrence: a cap decides which held edges exist in frame t
        held = previous & holds[t]
        # held edges rank before new ones, so that a cap does not make links flicker
        previous = present[t] = _cap_degree(ends, new[t] | held, span[t], options.degree_cap, n, held)
    return present, key


def _check(options: GraphOptions):
    if not 1 <= options.k <= 1024:
        raise ValueError(f"k: expected 1 to 1024, got {options.k}")
    if not options.hysteresis >= 1.0:
        raise ValueError(f"hysteresis: expected 1 or more, got {options.hysteresis}")


def _no_edges(frames: int, device) -> Ragged:
    none = torch.zeros(0, dtype=torch.long, device=device)
    return _ragged_edges(none, none, none, none.bool(), frames)


def _capped_degree(xy, frame, i, j, keep, cap):
    """bool [M]: keep, less the edges past the `cap` shortest of either end in their frame."""
    frames, n = xy.shape[:2]
    span = (xy[frame, j] - xy[frame, i]).norm(dim=-1)
    return _cap_degree(torch.stack([i, j]).add_(frame * n), keep, span, cap, frames * n)


def _stable_edges(xy, visible, reach, frame, i, j, keep, options: GraphOptions) -> Ragged:
    """The new edges of every frame (frame, i, j, keep [M], sorted) with hysteresis (reach: see
    _hysteresis), else the degree cap, packed."""
    frames = visible.shape[0]
    if options.hysteresis > 1:
        frame, i, j, keep = _hysteresis(xy, visible, reach, frame, i, j, keep, options, float(options.hysteresis))
    elif options.degree_cap > 0:
        keep = _capped_degree(xy, frame, i, j, keep, options.degree_cap)
    return _ragged_edges(frame, i, j, keep, frames)


def knn_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None, on_chunk=None) -> Ragged:
    """Undirected edges per frame: Ragged values int64 [T,E,2] (i < j, sorted) and lengths [T].

    xy float [T,N,2] pixels; visible bool [T,N]. Each point links to its k nearest visible points
    (|dy| <= delta_y_cap, length <= max_distance; mutual: only pairs that pick each other); a
    degree cap keeps each point's shortest links. hysteresis > 1 keeps an edge of the previous
    frame while it stays within that slack of the limits (see _hysteresis). The neighbour search
    for all frames is one batched computation; so are the edges and caps. Host syncs: those of
    nearest_neighbours, one for the packing, and with hysteresis those of _hysteresis. on_chunk: see
    nearest_neighbours.
    """
    _check(options)
    device = torch.device(device) if device is not None else xy.device
    xy, visible = xy.to(device, torch.float32), visible.to(device)
    frames, n = visible.shape
    if n < 2:
        return _no_edges(frames, device)
    slack = float(options.hysteresis)
    reach_k = max(options.k, math.ceil(options.k * slack)) if slack > 1 else options.k
    distance, index = nearest_neighbours(xy, visible, min(reach_k, max(n - 1, 1)), options.delta_y_cap,
                                         options.max_distance * slack, on_chunk)
    frame, i, j, keep = _new_edges(index[..., :options.k], distance[..., :options.k], options, n)
    # the reach_k-th nearest bounds "still among the nearest"; inf when a frame has fewer points
    reach = None
    if slack > 1:
        reach = distance[..., -1] if reach_k < n else torch.full_like(distance[..., -1], INF)
    return _stable_edges(xy, visible, reach, frame, i, j, keep, options)


def _finite_points(xy, visible, device):
    """xy float32 [T,N,2] and visible [T,N] on the device, points with a non-finite coordinate hidden."""
    xy = xy.to(device, torch.float32)
    return xy, visible.to(device) & torch.isfinite(xy).all(-1)


def _split_keys(key, n):
    """Keys (frame * n + i) * n + j [M] -> frame, i, j [M]."""
    return key // (n * n), key // n % n, key % n


def radius_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None,
                 on_chunk=None) -> Ragged:
    """Undirected edges per frame, as knn_graph: every pair of visible points at most max_distance
    apart (no k limit; required finite and above 0), |dy| <= delta_y_cap, the degree cap keeping
    each point's shortest links. hysteresis > 1 keeps an edge of the previous frame while its
    length and |dy| stay within that slack of the limits (k and mutual have no part). Points with
    a non-finite coordinate are hidden. Host syncs: one a chunk of frames for the candidate count
    (radius_neighbour_keys), one for the packing, and with hysteresis those of _hysteresis. on_chunk:
    see radius_neighbour_keys.
    """
    _check(options)
    if not 0 < options.max_distance < INF:
        got = "no limit" if options.max_distance == INF else f"{options.max_distance:g}"
        raise ValueError(f"max_distance: the radius graph needs a limit above 0 pixels, got {got}")
    device = torch.device(device) if device is not None else xy.device
    xy, visible = _finite_points(xy, visible, device)
    frames, n = visible.shape
    if n < 2 or not frames:
        return _no_edges(frames, device)
    key = radius_neighbour_keys(xy, visible, options.max_distance, options.delta_y_cap, on_chunk)
    frame, i, j = _split_keys(key, n)
    return _stable_edges(xy, visible, None, frame, i, j, key != frames * n * n - 1, options)


DELAUNAY_RECT = 2 ** 29  # half-width of Subdiv2D's rectangle: its outer vertices ~2^32 away, as if at infinity


def _delaunay_pairs(points: np.ndarray, triangles: bool = False):
    """Edges i < j of the Delaunay triangulation of points float32 [n,2] (finite), as sorted keys
    i * n + j, int64 [E]; with `triangles`, its triangles too, as point indices int64 [F,3].
    Coincident points: the first stands for them all in the triangulation, and
    the others link to it alone (edges of length 0, so that a spanning tree spans them). Collinear
    points link in a chain.

    OpenCV's Subdiv2D triangulates the points together with three outer vertices, and misses the
    hull edges whose every empty circle reaches one of them, so the points are scaled by a power of
    two (exact) to [1024, 2048) and the outer vertices sit ~2^32 away. Its tests have absolute
    tolerances: at that scale, points closer than ~1e-4 of the frame's extent (0.4 px in 4K) may
    link in a triangulation that is not exactly Delaunay, and points within ~1e-10 of it merge."""
    import cv2

    shifted = points - points.min(0, initial=INF)
    extent = float(shifted.max(initial=0.0))
    if extent > 0:
        shifted *= np.float32(2.0 ** np.clip(10 - math.floor(math.log2(extent)), -100, 100))
    key = np.ascontiguousarray(shifted).view(np.uint64)[:, 0]  # x and y bits: equal points, equal keys
    distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    own = first[inverse]
    duplicate = np.flatnonzero(own != np.arange(len(points)))
    pairs = [np.stack([own[duplicate], duplicate], 1)]
    corners = np.zeros((0, 3), np.int64)
    if len(distinct) > 1:
        rect = (-DELAUNAY_RECT, -DELAUNAY_RECT, 2 * DELAUNAY_RECT + 2048, 2 * DELAUNAY_RECT + 2048)
        subdiv = cv2.Subdiv2D(rect)
        try:
            subdiv.insert(shifted[first])
        except cv2.error:  # its point location failed (nearly coincident points): again, one at a time
            subdiv = cv2.Subdiv2D(rect)
            for point in shifted[first].tolist():
                with contextlib.suppress(cv2.error):  # a point it cannot place counts as merged
                    subdiv.insert(tuple(point))
        ends = np.ascontiguousarray(subdiv.getEdgeList(), np.float32).reshape(-1, 4).view(np.uint64)
        at = np.searchsorted(distinct, ends).clip(max=len(distinct) - 1)
        real = (distinct[at] == ends).all(1)  # the outer vertices are none of the points
        pairs.append(np.sort(first[at[real]], 1))
        # Subdiv2D merges a point within ~1e-7 of a vertex into it: such points link to the nearest
        # point it kept, as coincident ones do (so do the few it fails to place)
        kept = np.zeros(len(distinct), bool)
        kept[at[real]] = True
        lost, kept = first[~kept], first[kept]
        if len(lost) and len(kept):
            nearest = ((shifted[lost, None] - shifted[None, kept]) ** 2).sum(-1).argmin(1)
            pairs.append(np.sort(np.stack([lost, kept[nearest]], 1), 1))
        if triangles:  # those of the points alone, without the outer vertices
            corner_xy = np.ascontiguousarray(subdiv.getTriangleList(), np.float32).reshape(-1, 3, 2)
            vertices = corner_xy.view(np.uint64)[..., 0]
            at = np.searchsorted(distinct, vertices).clip(max=len(distinct) - 1)
            corners = first[at[(distinct[at] == vertices).all(1)]]
    pairs = np.concatenate(pairs)
    keys = np.unique(pairs[:, 0] * len(points) + pairs[:, 1])
    return (keys, corners) if triangles else keys


def delaunay_neighbour_keys(xy: torch.Tensor, visible: torch.Tensor, triangles: bool = False):
    """The Delaunay triangulation's edges i < j of the visible points of each frame (see
    _delaunay_pairs), as sorted keys (frame * N + i) * N + j: int64 [M], on xy's device. xy float
    [T,N,2] finite where visible, visible bool [T,N]. With `triangles`, its triangles too: frame and
    point indices int64 [F,4]. One copy to the host and one back."""
    n = visible.shape[1]
    host = xy.masked_fill(~visible[..., None], math.nan).cpu().numpy()
    keys, corners = [np.zeros(0, np.int64)], [np.zeros((0, 4), np.int64)]
    for frame, points in enumerate(host):  # no batched Delaunay exists in torch: one OpenCV call a frame
        index = np.flatnonzero(np.isfinite(points[:, 0]))
        if len(index) < 2:
            continue
        pairs = _delaunay_pairs(points[index], triangles)
        if triangles:
            pairs, local = pairs
            corners.append(np.concatenate([np.full((len(local), 1), frame), index[local]], 1))
        keys.append((frame * n + index[pairs // len(index)]) * n + index[pairs % len(index)])
    keys = torch.from_numpy(np.concatenate(keys))
    if not triangles:
        return keys.to(xy.device)
    both = torch.cat([keys, torch.from_numpy(np.concatenate(corners)).view(-1)]).to(xy.device)  # one transfer
    return both[: keys.numel()], both[keys.numel():].view(-1, 4)


def _spanning_forest(ends: torch.Tensor, weight: torch.Tensor, keep: torch.Tensor, nodes: int, size: int):
    """bool [E]: the edges of the minimum spanning forest of the kept edges, ends int64 [2,E] (nodes
    below `nodes`, in connected parts of at most `size`), weight float [E], equal weights ordered
    by list position, so the forest is unique (Kruskal's, with a stable sort).

    Boruvka's algorithm, with no host sync: every component takes its lightest edge to another,
    and components hook onto the one across it (of two that took the same edge, the lower one
    stays a root). Every component that can merge does, so ceil(log2 size) rounds are enough, and
    pointer jumping flattens each round's hooks in ceil(log2 components) steps."""
    edges = weight.numel()
    order = weight.masked_fill(~keep, INF).sort(stable=True).indices
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(edges, device=ends.device))
    rank.masked_fill_(~keep, edges)  # never taken
    node = torch.arange(nodes, device=ends.device)
    label = node  # the root of each node's component
    chosen = torch.zeros(edges, dtype=torch.bool, device=ends.device)
    components = size
    while components > 1:  # the rounds: a fixed count, each batched over all edges and frames
        a, b = label[ends[0]], label[ends[1]]
        outgoing = rank.masked_fill(a == b, edges)
        best = torch.full((nodes,), edges, device=ends.device).scatter_reduce_(0, a, outgoing, "amin")
        best.scatter_reduce_(0, b, outgoing, "amin")
        chosen |= ((best[a] == outgoing) | (best[b] == outgoing)) & (outgoing < edges)
        taken = order[best.clamp_max(edges - 1)]
        parent = torch.where(best < edges, a[taken] + b[taken] - node, node)  # the component across
        parent = torch.where((parent[parent] == node) & (node < parent), node, parent)
        components = (components + 1) // 2
        for _ in range(math.ceil(math.log2(components)) + 1):
            parent = parent[parent]
        label = parent[label]
    return chosen


def _triangulated(xy, visible, options: GraphOptions, device, tree: bool = False, size=None):
    """delaunay_graph, with `tree` spanning_tree_graph, with `size` voronoi_graph."""
    _check(options)
    device = torch.device(device) if device is not None else xy.device
    xy, visible = _finite_points(xy, visible, device)
    frames, n = visible.shape
    if n < 2 or not frames:
        none = _no_edges(frames, device)
        return none if size is None else (none, Ragged(torch.zeros(frames, 0, 2, 2, device=device), none.lengths))
    if size is None:
        frame, i, j = _split_keys(delaunay_neighbour_keys(xy, visible), n)
    else:
        keys, triangles = delaunay_neighbour_keys(xy, visible, triangles=True)
        frame, i, j = _split_keys(keys, n)
    delta = xy[frame, j] - xy[frame, i]
    length = delta.norm(dim=-1)
    keep = (length <= options.max_distance) & (delta[:, 1].abs() <= options.delta_y_cap)
    ends = torch.stack([i, j]).add_(frame * n)  # the points' indices over all frames
    if tree and frame.numel():
        keep = _spanning_forest(ends, length, keep, frames * n, n)
    if options.degree_cap > 0:
        keep = _cap_degree(ends, keep, length, options.degree_cap, frames * n)
    if size is None:
        return _ragged_edges(frame, i, j, keep, frames)
    segments, drawn = voronoi_segments(xy, keys, triangles, size)
    return _ragged_edges(frame, i, j, keep & drawn, frames, segments)


def delaunay_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None) -> Ragged:
    """Undirected edges per frame, as knn_graph: the Delaunay triangulation of each frame's visible
    points (see _delaunay_pairs), less the edges beyond max_distance or delta_y_cap, the degree cap
    keeping each point's shortest links. k, mutual and hysteresis have no part: a triangulation
    changes by flips, and an edge held past its flip would cross the one that replaced it. Points
    with a non-finite coordinate are hidden. Host syncs: the copy to the host, and the packing."""
    return _triangulated(xy, visible, options, device, tree=False)


def spanning_tree_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None) -> Ragged:
    """Undirected edges per frame, as knn_graph: the Euclidean minimum spanning tree of each frame's
    visible points, computed over the Delaunay edges (which hold it) within max_distance and
    delta_y_cap: a forest where the limits cut it (with max_distance alone, the tree's edges up to
    that length). The degree cap then keeps each point's shortest links. k, mutual and hysteresis
    have no part (an edge held past its frame would close a cycle). Points with a non-finite
    coordinate are hidden. Host syncs: those of delaunay_graph."""
    return _triangulated(xy, visible, options, device, tree=True)


GRAPHS = {"knn": knn_graph, "radius": radius_graph, "delaunay": delaunay_graph, "mst": spanning_tree_graph}


def _circumcentres(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Centres float [F,2] of the circles through the triangles' corners a, b, c [F,2] (worked out
    from a, so that float32 keeps the precision of the triangles' sizes); not finite for flat ones."""
    b, c = b - a, c - a
    bb, cc = (b * b).sum(1), (c * c).sum(1)
    twice_area = 2 * (b[:, 0] * c[:, 1] - b[:, 1] * c[:, 0])
    return a + torch.stack([c[:, 1] * bb - b[:, 1] * cc, b[:, 0] * cc - c[:, 0] * bb], 1) / twice_area[:, None]


def voronoi_segments(xy: torch.Tensor, keys: torch.Tensor, triangles: torch.Tensor, size: tuple[int, int]):
    """The Voronoi diagram's edges, one for each Delaunay edge: the part of the points' bisector that
    both points' cells share, clipped to the frame [0, width] x [0, height] (size = (height, width)).

    xy float [T,N,2]; keys int64 [M], the Delaunay edges (frame * N + i) * N + j, sorted; triangles
    int64 [F,4], frame and corners (delaunay_neighbour_keys). On the bisector middle + s normal (the
    edge's midpoint and unit normal), each triangle on the edge bounds s at its circumcentre, from the
    side away from its third corner: two triangles give a segment, one a ray (an edge of the hull),
    none a whole line (frames without triangles: collinear points). Edges of frames with triangles
    that lie on none (points that OpenCV merged) and edges of coincident points are not drawn.
    Returns segments float [M,2,2] and drawn bool [M] (a part longer than 1e-3 px lies in the frame)."""
    frames, n = xy.shape[:2]
    height, width = size
    frame, i, j = _split_keys(keys, n)
    a, b = xy[frame, i], xy[frame, j]
    middle, along = (a + b) / 2, b - a
    length = along.norm(dim=1)
    normal = torch.stack([-along[:, 1], along[:, 0]], 1) / length.clamp_min(1e-30)[:, None]
    # the triangles' three edges (u, v) with their third corners w, located among the keys
    at, corner = triangles[:, 0], triangles[:, 1:]
    count = corner.shape[0]
    centre = _circumcentres(*(xy[at, corner[:, k]] for k in range(3)))[:, None].expand(count, 3, 2).reshape(-1, 2)
    u, v, w = corner.reshape(-1), corner.roll(-1, 1).reshape(-1), corner.roll(-2, 1).reshape(-1)  # [F*3]
    tri_frame = at[:, None].expand(count, 3).reshape(-1)
    tri_key = (tri_frame * n + torch.minimum(u, v)) * n + torch.maximum(u, v)
    edge = torch.searchsorted(keys, tri_key).clamp_max(max(keys.numel() - 1, 0))
    found = keys[edge] == tri_key
    s = ((centre - middle[edge]) * normal[edge]).sum(1)
    side = ((xy[tri_frame, w] - middle[edge]) * normal[edge]).sum(1)
    usable = found & torch.isfinite(s)
    lower = torch.full_like(length, -INF).scatter_reduce_(0, edge, s.masked_fill(~usable | (side > 0), -INF), "amax")
    upper = torch.full_like(length, INF).scatter_reduce_(0, edge, s.masked_fill(~usable | (side <= 0), INF), "amin")
    on_triangle = torch.zeros_like(length).index_add_(0, edge, found.float()) > 0
    has_triangles = torch.zeros(frames, dtype=torch.bool, device=xy.device).index_fill_(0, at, True)
    # clipped to the frame, one axis at a time (Liang-Barsky)
    for axis, extent in ((0, width), (1, height)):
        step, start = normal[:, axis], middle[:, axis]
        enter, leave = (0 - start) / step, (extent - start) / step
        flat = step == 0
        inside = (start >= 0) & (start <= extent)
        lower = torch.maximum(lower, torch.where(flat, torch.where(inside, -INF, INF), torch.minimum(enter, leave)))
        upper = torch.minimum(upper, torch.where(flat, torch.where(inside, INF, -INF), torch.maximum(enter, leave)))
    drawn = (upper - lower > 1e-3) & (length > 0) & (on_triangle | ~has_triangles[frame])
    lower, upper = lower.masked_fill(~drawn, 0.0), upper.masked_fill(~drawn, 0.0)
    segments = torch.stack([middle + lower[:, None] * normal, middle + upper[:, None] * normal], 1)
    return segments, drawn


def voronoi_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, size: tuple[int, int],
                  device=None) -> tuple[Ragged, Ragged]:
    """The edges of each frame's Voronoi diagram inside a frame of size (height, width), as the pairs
    of points whose cells they divide: edges as delaunay_graph's (the same pairs, limits and caps; a
    pair whose cells share no part of the frame is left out), and the edges' segments float [T,E,2,2]
    (end points) in the same Ragged order. See voronoi_segments. Host syncs: those of delaunay_graph."""
    return _triangulated(xy, visible, options, device, size=size)


def _ragged_edges(frame: torch.Tensor, i: torch.Tensor, j: torch.Tensor, keep: torch.Tensor, frames: int,
                  extra: torch.Tensor | None = None):
    """Edges listed as (frame, i, j) [M], sorted by frame, those with keep packed into Ragged
    [T, E, 2]; with extra [M, ...], that too, packed in the same order (a second Ragged). One host
    sync: E."""
    counts = torch.zeros(frames, dtype=torch.long, device=frame.device).index_add_(0, frame, keep.long())
    width = int(counts.max()) if frames and frame.numel() else 0
    slot = keep.cumsum(0) - 1 - (counts.cumsum(0) - counts)[frame]
    at = torch.where(keep, frame * width + slot, frames * width)
    values = torch.zeros(frames * width + 1, 2, dtype=torch.long, device=frame.device)
    values[at] = torch.stack([i, j], 1)
    edges = Ragged(values[:-1].view(frames, width, 2), counts)
    if extra is None:
        return edges
    packed = extra.new_zeros(frames * width + 1, *extra.shape[1:])
    packed[at] = extra
    return edges, Ragged(packed[:-1].view(frames, width, *extra.shape[1:]), counts)
