"""Graphs over tracked points, for all frames at once, with caps and temporal hysteresis: k nearest
neighbours (knn_graph), all pairs within a radius (radius_graph), the Delaunay triangulation
(delaunay_graph) and the Euclidean minimum spanning tree (spanning_tree_graph); GRAPHS names them.
voronoi_graph gives the walls of the Voronoi cells instead of links, one for each Delaunay pair.

Points are padded [T,N,2] with visibility [T,N]; the searches are neighbours.py's, the
triangulations triangulation.py's. Edges are undirected (i < j), listed per frame as a Ragged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.batching import Ragged
from .constants import INF, split_keys
from .neighbours import nearest_neighbours, radius_neighbour_keys
from .triangulation import delaunay_neighbour_keys, spanning_forest, voronoi_segments


@dataclass
class GraphOptions:
    k: int = 3  # neighbours per point
    max_distance: float = INF  # longest edge, pixels
    delta_y_cap: float = INF  # largest |dy| of an edge, pixels
    degree_cap: int = 0  # most edges per point, shortest kept (0: no cap)
    mutual: bool = False  # an edge needs each end among the other's k nearest
    hysteresis: float = 1.0  # >1: an edge of the previous frame stays within this slack


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
    """Edges per frame with hysteresis, listed as frame, i, j, keep [M'] in (frame, i, j) order, and a
    bound on the edges of a frame known to the host (None: unknown).

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
    frame by frame, on [U] vectors, with no host sync. Host syncs: none when every slot of the lists
    (kept or not) fits one window (a chunk of a few frames); else one for the windows, and one a window.
    """
    frames, n = visible.shape
    slots = frame.numel()
    if frames * slots <= HYSTERESIS_ENTRIES:  # the slots bound the distinct edges: one window, no sync
        windows, starts = [(0, frames)], [0] * frames + [slots]
    else:  # per frame: where its new edges start in the lists, and how many there are (one host transfer)
        starts = torch.searchsorted(frame, torch.arange(frames + 1, device=frame.device))
        counts = torch.zeros(frames, dtype=torch.long, device=frame.device).index_add_(0, frame, keep.long())
        host = torch.cat([starts, counts]).tolist()
        starts, counts = host[: frames + 1], host[frames + 1 :]
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
        present, key = _hysteresis_window(
            xy[first:last],
            visible[first:last],
            None if reach is None else reach[first:last],
            frame[rows] - first,
            (i[rows] * n + j[rows]).masked_fill_(~keep[rows], n * n),
            carried,
            options,
            slack,
            n,
            exact=len(windows) > 1,
        )
        carried = key.masked_fill(~present[-1], n * n)  # n * n: none (no host sync)
        parts.append(
            (
                torch.arange(first, last, device=key.device)[:, None].expand_as(present).reshape(-1),
                (key // n).repeat(last - first),
                (key % n).repeat(last - first),
                present.view(-1),
            )
        )
    per_frame = None if len(windows) > 1 else min(slots, n * (n - 1) // 2)
    return *(torch.cat(column) for column in zip(*parts, strict=False)), per_frame


# distinct edges x frames held at once by _hysteresis (~50 bytes each: ~100 MB a window)
HYSTERESIS_ENTRIES = 1 << 21


def _distinct(keys: torch.Tensor, none: int, exact: bool):
    """The distinct keys of keys int64 [M] (none: no edge), sorted, and the place of each key among
    them, inverse int64 [M] (none's: one past the last place). exact: the U distinct keys (torch.unique,
    one host sync); else M places, sized on the host: repeats and none hold none."""
    if exact:
        key, inverse = torch.unique(torch.cat([keys, keys.new_full((1,), none)]), return_inverse=True)
        return key[:-1], inverse[:-1]
    key, order = keys.sort()
    first = F.pad(key[1:] != key[:-1], (1, 0), value=True) & (key != none)
    place = torch.where(first, torch.arange(key.numel(), device=key.device), 0).cummax(0).values
    place.masked_fill_(key == none, key.numel())  # none sorts last: past every place
    return key.masked_fill_(~first, none), torch.empty_like(place).index_put_((order,), place)


def _hysteresis_window(xy, visible, reach, frame, key, carried, options: GraphOptions, slack, n, exact=True):
    """_hysteresis over one window of W frames: xy [W,N,2], visible and reach [W,N], the new edges'
    frame and key i * n + j [M] (n * n: no edge), carried int64 [C] (keys present in the frame
    before, n * n: none). Returns present bool [W,U] and the U places of the distinct keys, sorted:
    exact, the distinct keys only (one host sync); else M + C places, repeats holding n * n (never
    present)."""
    frames = visible.shape[0]
    key, inverse = _distinct(torch.cat([key, carried]), n * n, exact)
    edges = key.numel()
    ends_i, ends_j = key.clamp_max(n * n - 1) // n, key % n  # none's ends: any point
    # flags set by index_fill_ (a Python True in an index_put_ is a tensor made from host data)
    new = torch.zeros(frames, edges + 1, dtype=torch.bool, device=key.device)
    new.view(-1).index_fill_(0, frame * (edges + 1) + inverse[: frame.numel()], True)
    new = new[:, :edges]
    before = torch.zeros(edges + 1, dtype=torch.bool, device=key.device).index_fill_(0, inverse[frame.numel() :], True)
    before = before[:edges]
    delta = xy[:, ends_j] - xy[:, ends_i]
    span = delta.norm(dim=-1)
    holds = (
        visible[:, ends_i]
        & visible[:, ends_j]
        & (span <= options.max_distance * slack)
        & (delta[..., 1].abs() <= options.delta_y_cap * slack)
    )
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


def _stable_edges(xy, visible, reach, frame, i, j, keep, options: GraphOptions, per_frame=None) -> Ragged:
    """The new edges of every frame (frame, i, j, keep [M], sorted) with hysteresis (reach: see
    _hysteresis), else the degree cap, packed. per_frame: the most slots of a frame in the lists, where
    the host knows it (packing then needs no host sync)."""
    frames = visible.shape[0]
    if options.hysteresis > 1:
        frame, i, j, keep, per_frame = _hysteresis(
            xy, visible, reach, frame, i, j, keep, options, float(options.hysteresis)
        )
    elif options.degree_cap > 0:
        keep = _capped_degree(xy, frame, i, j, keep, options.degree_cap)
    return _ragged_edges(frame, i, j, keep, frames, width=per_frame)


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
    distance, index = nearest_neighbours(
        xy, visible, min(reach_k, max(n - 1, 1)), options.delta_y_cap, options.max_distance * slack, on_chunk
    )
    frame, i, j, keep = _new_edges(index[..., : options.k], distance[..., : options.k], options, n)
    # the reach_k-th nearest bounds "still among the nearest"; inf when a frame has fewer points
    reach = None
    if slack > 1:
        reach = distance[..., -1] if reach_k < n else torch.full_like(distance[..., -1], INF)
    return _stable_edges(xy, visible, reach, frame, i, j, keep, options, per_frame=min(n * options.k, n * (n - 1) // 2))


def _finite_points(xy, visible, device):
    """xy float32 [T,N,2] and visible [T,N] on the device, points with a non-finite coordinate hidden."""
    xy = xy.to(device, torch.float32)
    return xy, visible.to(device) & torch.isfinite(xy).all(-1)


def radius_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None, on_chunk=None) -> Ragged:
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
    frame, i, j = split_keys(key, n)
    return _stable_edges(xy, visible, None, frame, i, j, key != frames * n * n - 1, options)


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
        frame, i, j = split_keys(delaunay_neighbour_keys(xy, visible), n)
    else:
        keys, triangles = delaunay_neighbour_keys(xy, visible, triangles=True)
        frame, i, j = split_keys(keys, n)
    delta = xy[frame, j] - xy[frame, i]
    length = delta.norm(dim=-1)
    keep = (length <= options.max_distance) & (delta[:, 1].abs() <= options.delta_y_cap)
    ends = torch.stack([i, j]).add_(frame * n)  # the points' indices over all frames
    if tree and frame.numel():
        keep = spanning_forest(ends, length, keep, frames * n, n)
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


def voronoi_graph(
    xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, size: tuple[int, int], device=None
) -> tuple[Ragged, Ragged]:
    """The edges of each frame's Voronoi diagram inside a frame of size (height, width), as the pairs
    of points whose cells they divide: edges as delaunay_graph's (the same pairs, limits and caps; a
    pair whose cells share no part of the frame is left out), and the edges' segments float [T,E,2,2]
    (end points) in the same Ragged order. See voronoi_segments. Host syncs: those of delaunay_graph."""
    return _triangulated(xy, visible, options, device, size=size)


def _ragged_edges(
    frame: torch.Tensor,
    i: torch.Tensor,
    j: torch.Tensor,
    keep: torch.Tensor,
    frames: int,
    extra: torch.Tensor | None = None,
    width: int | None = None,
):
    """Edges listed as (frame, i, j) [M], sorted by frame, those with keep packed into Ragged
    [T, E, 2]; with extra [M, ...], that too, packed in the same order (a second Ragged). E: width, a
    bound on the edges of a frame that the host knows; else the most edges of a frame (one host sync)."""
    counts = torch.zeros(frames, dtype=torch.long, device=frame.device).index_add_(0, frame, keep.long())
    if width is None:
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
