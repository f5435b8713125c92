"""k-nearest-neighbour graphs over tracked points, for all frames at once, with caps and
temporal hysteresis.

Points are padded [T,N,2] with visibility [T,N]. Neighbours of every point of every frame come
from one batched search: a uniform grid over all frames (points sorted by frame and cell; the
candidates of a point are the runs of the sorted array that cover the cells around it), with an
exact check that nothing outside those cells can be nearer; the few points that fail it search a
wider ring, and the rest a brute-force row. Small frames use brute-force distances directly.
Edges are undirected (i < j). Equal distances are broken by point index everywhere, so results
do not depend on the search path or the device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .batching import Ragged, size_class
from .device import run_chunked

INF = float("inf")
BRUTE_FORCE_POINTS = 192  # points per frame up to which an [N,N] distance matrix beats the grid
CELL_OCCUPANCY = 0.4     # grid points per cell per neighbour sought (measured: ~5% need ring 2)
RINGS = (1, 2)            # cell rings searched around a point before falling back to brute force


@dataclass
class GraphOptions:
    k: int = 3                      # neighbours per point
    max_distance: float = INF       # longest edge, pixels
    delta_y_cap: float = INF        # largest |dy| of an edge, pixels
    degree_cap: int = 0             # most edges per point, shortest kept (0: no cap)
    mutual: bool = False            # an edge needs each end among the other's k nearest
    hysteresis: float = 1.0         # >1: an edge of the previous frame stays within this slack


# -- neighbour search ------------------------------------------------------------------------------

def _select(d2: torch.Tensor, candidate: torch.Tensor, k: int, ids: torch.Tensor | None = None):
    """The k smallest of d2 [R,C] (inf = no candidate) and their ids, ordered by (distance, id).

    candidate [R,C] int64: ids, or positions in `ids` [M] when given (looked up only where needed).
    Rows with equal distances among their k+1 nearest are sorted in full, so ties go to the lower id.
    Returns d2 [R,k] and ids [R,k] (-1 where inf)."""
    rows, width = d2.shape
    if width < k + 1:
        d2 = torch.cat([d2, d2.new_full((rows, k + 1 - width), INF)], 1)
        candidate = torch.cat([candidate, candidate.new_zeros(rows, k + 1 - width)], 1)
    value, slot = torch.topk(d2, k + 1, dim=1, largest=False, sorted=True)
    chosen = candidate.gather(1, slot)
    chosen = ids[chosen] if ids is not None else chosen
    tied = ((value[:, 1:] == value[:, :-1]) & torch.isfinite(value[:, 1:])).any(1).nonzero().squeeze(1)
    if tied.numel():
        tied_ids = ids[candidate[tied]] if ids is not None else candidate[tied]
        by_id = torch.sort(tied_ids, dim=1, stable=True).indices
        by_distance = torch.sort(d2[tied].gather(1, by_id), dim=1, stable=True).indices
        order = by_id.gather(1, by_distance[:, :k + 1])
        value[tied], chosen[tied] = d2[tied].gather(1, order), tied_ids.gather(1, order)
    chosen = torch.where(torch.isfinite(value), chosen, -1)
    return value[:, :k], chosen[:, :k]


def _squared_distances(query_xy, candidate_x, candidate_y, ok, delta_y_cap, within):
    """d2 [...,R,C] from query_xy [...,R,2] to candidates at candidate_x, candidate_y [...,R,C]
    (or broadcastable); inf where not ok or beyond the caps. Every search path uses this one
    formula, so equal distances compare equal across paths."""
    dx = candidate_x - query_xy[..., None, 0]
    dy = candidate_y - query_xy[..., None, 1]
    d2 = dx * dx + dy * dy
    if math.isfinite(delta_y_cap):
        ok = ok & (dy.abs() <= delta_y_cap)
    if math.isfinite(within):
        ok = ok & (d2 <= within * within)
    return d2.masked_fill_(~ok, INF)


def _brute_force_rows(flat_xy, flat_visible, n, rows, k, delta_y_cap, within):
    """Neighbours of the flat points `rows` [R] (frame * n + i) among all points of their frame."""
    candidate = (rows // n * n)[:, None] + torch.arange(n, device=rows.device)
    ok = flat_visible[candidate] & (candidate != rows[:, None])
    x, y = (flat_xy[:, axis].index_select(0, candidate.view(-1)).view(candidate.shape) for axis in (0, 1))
    d2 = _squared_distances(flat_xy[rows], x, y, ok, delta_y_cap, within)
    return _select(d2, candidate, k)


class _Grid:
    """Visible points of a chunk of frames sorted by (frame, cell row, cell column, index)."""

    def __init__(self, flat_xy, flat_visible, frames, cell):
        ids = flat_visible.nonzero().squeeze(1)
        xy = flat_xy[ids]
        self.origin, self.cell = xy.min(0).values, cell
        cell_xy = ((xy - self.origin) / cell).floor().long()
        self.columns, self.rows = int(cell_xy[:, 0].max()) + 1, int(cell_xy[:, 1].max()) + 1
        self.n = flat_xy.shape[0] // frames
        cell_id = ((ids // self.n) * self.rows + cell_xy[:, 1]) * self.columns + cell_xy[:, 0]
        cell_id, order = torch.sort(cell_id, stable=True)
        # sorted points, padded so that a run starting at any of them can read `n` entries
        self.sorted_ids = ids[order]
        pad = torch.zeros(flat_xy.shape[0] // frames, device=xy.device)
        self.padded_x, self.padded_y = torch.cat([xy[order, 0], pad]), torch.cat([xy[order, 1], pad])
        self.padded_ids = torch.cat([self.sorted_ids, self.sorted_ids.new_zeros(pad.numel())])
        counts = torch.bincount(cell_id, minlength=frames * self.rows * self.columns)
        self.cell_start = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        self.cell_of = torch.full((flat_xy.shape[0], 2), -1, dtype=torch.long, device=flat_xy.device)
        self.cell_of[ids] = cell_xy
        self.position_of = torch.zeros(flat_xy.shape[0], dtype=torch.long, device=flat_xy.device)
        self.position_of[self.sorted_ids] = torch.arange(ids.numel(), device=ids.device)

    def search(self, flat_xy, rows, ring, k, delta_y_cap, within):
        """Neighbours of the flat points `rows` [R] among the cells within `ring` cells of theirs,
        and whether they are exact: the k-th is nearer than any point outside those cells could be
        (or every point outside is beyond `within` or the |dy| cap). Rows whose cells are so crowded
        that a brute-force row is cheaper are left inexact."""
        cell_xy = self.cell_of[rows]
        column, row = cell_xy[:, 0], cell_xy[:, 1]
        cell_rows = row[:, None] + torch.arange(-ring, ring + 1, device=rows.device)
        inside = (cell_rows >= 0) & (cell_rows < self.rows)
        base = ((rows // self.n)[:, None] * self.rows + cell_rows.clamp(0, self.rows - 1)) * self.columns
        first = self.cell_start[base + (column - ring).clamp(min=0)[:, None]]
        count = torch.where(inside, self.cell_start[base + (column + ring).clamp(max=self.columns - 1)[:, None] + 1]
                            - first, 0)  # [R, 2 ring + 1]: the runs of sorted points, one per cell row
        d2 = flat_xy.new_full((rows.numel(), k), INF)
        neighbour = torch.full((rows.numel(), k), -1, dtype=torch.long, device=rows.device)
        searched = torch.zeros(rows.numel(), dtype=torch.bool, device=rows.device)
        # rows grouped by their longest run, so that one crowded cell does not widen every row
        run_class = size_class(count.max(1).values.clamp_min(1))
        for run in torch.unique(run_class).tolist():  # a few run lengths, not points
            if run * (2 * ring + 1) >= self.n:  # crowded cells: a brute-force row costs less
                continue
            part = (run_class == run).nonzero().squeeze(1)
            d2[part], neighbour[part] = self._nearest(flat_xy, rows[part], first[part], count[part], run, ring, k,
                                                      delta_y_cap, within)
            searched[part] = True
        # distance from the point to the nearest side of the searched block that has points beyond it
        xy = flat_xy[rows]
        low = self.origin + (cell_xy - ring) * self.cell
        high = self.origin + (cell_xy + ring + 1) * self.cell
        limit = torch.tensor([self.columns, self.rows], device=rows.device)
        margin = torch.minimum(torch.where(cell_xy - ring > 0, xy - low, INF),
                               torch.where(cell_xy + ring < limit - 1, high - xy, INF))
        margin[:, 1] = torch.where(margin[:, 1] > delta_y_cap, INF, margin[:, 1])  # beyond the cap anyway
        # float rounding may put a point a hair outside the cell it was sorted into
        radius = margin.min(1).values - 1e-4 * (self.cell + 1)
        exact = searched & ((d2[:, k - 1] < radius * radius) | (within < radius))
        return d2, neighbour, exact

    def _nearest(self, flat_xy, rows, first, count, run, ring, k, delta_y_cap, within):
        """The k nearest of `rows` [R] among their runs of sorted points: first, count [R, 2 ring + 1]
        (each count <= run)."""
        steps = torch.arange(run, device=rows.device)
        position = (first[..., None] + steps).view(-1)  # may run past the end: the arrays are padded
        ok = (steps < count[..., None]).view(rows.numel(), -1)
        candidate_x = self.padded_x.index_select(0, position).view(rows.numel(), -1)
        candidate_y = self.padded_y.index_select(0, position).view(rows.numel(), -1)
        d2 = _squared_distances(flat_xy[rows], candidate_x, candidate_y, ok, delta_y_cap, within)
        # the point itself: in the middle cell row, at its own position
        d2[torch.arange(rows.numel(), device=rows.device), ring * run + self.position_of[rows] - first[:, ring]] = INF
        return _select(d2, position.view(rows.numel(), -1), k, self.padded_ids)


def _brute_force_frames(xy, visible, k, delta_y_cap, within):
    """Neighbours of every point among all points of its frame, as one [T*N,N] distance matrix."""
    frames, n = visible.shape
    ok = visible[:, None, :] & visible[:, :, None] & ~torch.eye(n, dtype=torch.bool, device=xy.device)
    d2 = _squared_distances(xy, xy[:, None, :, 0], xy[:, None, :, 1], ok, delta_y_cap, within)
    d2, neighbour = _select(d2.view(-1, n), torch.arange(n, device=xy.device).expand(frames * n, n), k)
    return d2.sqrt().view(frames, n, k), neighbour.view(frames, n, k)


def _neighbours_in_chunk(xy, visible, k, delta_y_cap, within):
    """nearest_neighbours on one chunk of frames, all on xy's device."""
    frames, n = visible.shape
    if n <= BRUTE_FORCE_POINTS:
        return _brute_force_frames(xy, visible, k, delta_y_cap, within)
    flat_xy, flat_visible = xy.reshape(-1, 2), visible.reshape(-1)
    d2 = torch.full((frames * n, k), INF, device=xy.device)
    neighbour = torch.full((frames * n, k), -1, dtype=torch.long, device=xy.device)
    pending = flat_visible.nonzero().squeeze(1)
    if pending.numel():
        extent = (flat_xy[pending].max(0).values - flat_xy[pending].min(0).values).clamp_min(1.0)
        per_frame = pending.numel() / frames
        cell = math.sqrt(float(extent.prod()) * CELL_OCCUPANCY * (k + 1) / per_frame)
        if math.isfinite(within):  # cells just wider than `within`: every search is exact at once
            cell = min(cell, within * 1.01 + 1e-3)
        cell = max(cell, math.sqrt(float(extent.prod()) / (4 * per_frame)))  # at most ~4 cells a point
        grid = _Grid(flat_xy, flat_visible, frames, cell)
        for ring in RINGS:
            if not pending.numel():
                break
            found_d2, found, exact = grid.search(flat_xy, pending, ring, k, delta_y_cap, within)
            d2[pending[exact]], neighbour[pending[exact]] = found_d2[exact], found[exact]
            pending = pending[~exact]
    if pending.numel():
        def rows_chunk(start, stop, dev):
            rows = pending[start:stop]
            d2[rows], neighbour[rows] = _brute_force_rows(flat_xy, flat_visible, n, rows, k, delta_y_cap, within)
        run_chunked(rows_chunk, pending.numel(), n * 40, xy.device)
    neighbour = torch.where(neighbour >= 0, neighbour % n, -1)
    return d2.sqrt().view(frames, n, k), neighbour.view(frames, n, k)


def nearest_neighbours(xy: torch.Tensor, visible: torch.Tensor, k: int, delta_y_cap: float = INF,
                       within: float = INF):
    """The k nearest visible points of every point, |dy| within the cap, up to `within` pixels.

    xy float [T,N,2], visible bool [T,N] -> distance float [T,N,k] (inf where there are fewer)
    and index int64 [T,N,k] (-1 there), nearest first; equal distances go to the lower index.
    Chunks of frames are searched at once, on xy's device. (faiss, one index per frame, was
    measured slower than this for N >= 1000 on CPU: bench/bench_links.py.)
    """
    frames, n = visible.shape
    parts = run_chunked(lambda start, stop, dev: _neighbours_in_chunk(
        xy[start:stop].to(dev), visible[start:stop].to(dev), k, delta_y_cap, within),
        frames, min(n, 512) * n * 40 + n * 200, xy.device)
    if not parts:
        return torch.zeros(0, n, k, device=xy.device), torch.zeros(0, n, k, dtype=torch.long, device=xy.device)
    return torch.cat([p[0].to(xy.device) for p in parts]), torch.cat([p[1].to(xy.device) for p in parts])


# -- edges, caps, hysteresis -----------------------------------------------------------------------

def _cap_degree(frame, i, j, rank_key, n, cap):
    """bool [E]: edges among the `cap` smallest rank_key edges of both their ends (ties: i, j order)."""
    node = torch.cat([frame * n + i, frame * n + j])
    key = torch.cat([rank_key, rank_key])
    edge = torch.arange(i.numel(), device=i.device).repeat(2)
    order = torch.sort(key, stable=True).indices
    order = order[torch.sort(node[order], stable=True).indices]  # by node, then key, then edge order
    node, edge = node[order], edge[order]
    first = torch.ones_like(node, dtype=torch.bool)
    first[1:] = node[1:] != node[:-1]
    start = torch.cummax(torch.where(first, torch.arange(node.numel(), device=node.device), 0), 0).values
    within = (torch.arange(node.numel(), device=node.device) - start) < cap
    return torch.zeros(i.numel(), dtype=torch.long, device=i.device).index_add_(0, edge, within.long()) == 2


def _new_edges(index, distance, options: GraphOptions, n):
    """Undirected edges (frame, i < j) of every frame from the k nearest of each point, sorted."""
    ok = torch.isfinite(distance) & (distance <= options.max_distance)
    frame = torch.arange(index.shape[0], device=index.device)[:, None, None].expand_as(index)[ok]
    source = torch.arange(n, device=index.device)[None, :, None].expand_as(index)[ok]
    target = index[ok]
    low, high = torch.minimum(source, target), torch.maximum(source, target)
    key, count = torch.unique((frame * n + low) * n + high, return_counts=True)
    if options.mutual:  # found from both ends
        key = key[count == 2]
    return key // (n * n), key // n % n, key % n


def _hysteresis(xy, visible, reach, frame, i, j, options: GraphOptions, slack):
    """Edges per frame with hysteresis: bool [T,U] presence of the U distinct edges (ends i_u, j_u).

    An edge is present in frame t when it is new there, or present in frame t-1 and still within
    the slack of its limits: both ends visible, length <= max_distance * slack, |dy| <=
    delta_y_cap * slack, and among the ceil(k * slack) nearest of one end (of both when mutual).
    Without a degree cap this recurrence has a closed form (the last frame where the edge was new,
    with no slack failure since), evaluated for all frames at once; with a cap, which edges survive
    depends on the frame before, so only that keep/drop step runs frame by frame, on [U] vectors.
    """
    frames, n = visible.shape
    key, inverse = torch.unique(i * n + j, return_inverse=True)
    ends_i, ends_j = key // n, key % n
    new = torch.zeros(frames, key.numel(), dtype=torch.bool, device=key.device)
    new[frame, inverse] = True
    delta = xy[:, ends_j] - xy[:, ends_i]
    span = delta.norm(dim=-1)
    near_i, near_j = span <= reach[:, ends_i], span <= reach[:, ends_j]
    holds = (visible[:, ends_i] & visible[:, ends_j] & (span <= options.max_distance * slack)
             & (delta[..., 1].abs() <= options.delta_y_cap * slack)
             & ((near_i & near_j) if options.mutual else (near_i | near_j)))
    if options.degree_cap <= 0:
        time = torch.arange(frames, device=key.device)[:, None]
        last_new = torch.cummax(torch.where(new, time, -1), 0).values
        last_break = torch.cummax(torch.where(holds, -1, time), 0).values
        return new | ((last_new >= 0) & (last_break <= last_new)), ends_i, ends_j
    present = torch.zeros_like(new)
    previous = torch.zeros(key.numel(), dtype=torch.bool, device=key.device)
    for t in range(frames):  # the recurrence: a cap decides which held edges exist in frame t
        held = previous & holds[t]
        candidate = (new[t] | held).nonzero().squeeze(1)
        # held edges rank before new ones, so that a cap does not make links flicker
        rank = span[t, candidate] - held[candidate] * 1e9
        keep = candidate[_cap_degree(torch.zeros_like(candidate), ends_i[candidate], ends_j[candidate],
                                     rank, n, options.degree_cap)]
        present[t, keep] = True
        previous = present[t]
    return present, ends_i, ends_j


def knn_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None) -> Ragged:
    """Undirected edges per frame: Ragged values int64 [T,E,2] (i < j, sorted) and lengths [T].

    xy float [T,N,2] pixels; visible bool [T,N]. Each point links to its k nearest visible points
    (|dy| <= delta_y_cap, length <= max_distance; mutual: only pairs that pick each other); a
    degree cap keeps each point's shortest links. hysteresis > 1 keeps an edge of the previous
    frame while it stays within that slack of the limits (see _hysteresis). The neighbour search
    for all frames is one batched computation; so are the edges and caps.
    """
    if not 1 <= options.k <= 1024:
        raise ValueError(f"k: expected 1 to 1024, got {options.k}")
    if not options.hysteresis >= 1.0:
        raise ValueError(f"hysteresis: expected 1 or more, got {options.hysteresis}")
    device = torch.device(device) if device is not None else xy.device
    xy, visible = xy.to(device), visible.to(device)
    frames, n = visible.shape
    if n < 2:
        return _ragged_edges(*torch.zeros(3, 0, dtype=torch.long, device=device), frames)
    slack = float(options.hysteresis)
    reach_k = max(options.k, math.ceil(options.k * slack)) if slack > 1 else options.k
    distance, index = nearest_neighbours(xy, visible, min(reach_k, max(n - 1, 1)), options.delta_y_cap,
                                         options.max_distance * slack)
    frame, i, j = _new_edges(index[..., :options.k], distance[..., :options.k], options, n)
    if slack > 1 and frame.numel():
        # the reach_k-th nearest bounds "still among the nearest"; inf when a frame has fewer points
        reach = distance[..., -1] if reach_k < n else torch.full_like(distance[..., -1], INF)
        present, ends_i, ends_j = _hysteresis(xy, visible, reach, frame, i, j, options, slack)
        frame, edge = present.nonzero(as_tuple=True)
        i, j = ends_i[edge], ends_j[edge]
    elif options.degree_cap > 0:
        span = (xy[frame, j] - xy[frame, i]).norm(dim=-1)
        keep = _cap_degree(frame, i, j, span, n, options.degree_cap)
        frame, i, j = frame[keep], i[keep], j[keep]
    return _ragged_edges(frame, i, j, frames)


def _ragged_edges(frame: torch.Tensor, i: torch.Tensor, j: torch.Tensor, frames: int) -> Ragged:
    """Edges listed as (frame, i, j), sorted by frame, packed into Ragged [T, E, 2]."""
    counts = torch.bincount(frame, minlength=frames)
    width = int(counts.max()) if counts.numel() else 0
    slot = torch.arange(frame.numel(), device=frame.device) - (torch.cumsum(counts, 0) - counts)[frame]
    values = torch.zeros(frames, width, 2, dtype=torch.long, device=frame.device)
    values[frame, slot] = torch.stack([i, j], 1)
    return Ragged(values, counts)
