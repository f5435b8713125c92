"""Graphs over tracked points, for all frames at once, with caps and temporal hysteresis: k nearest
neighbours (knn_graph), all pairs within a radius (radius_graph), the Delaunay triangulation
(delaunay_graph) and the Euclidean minimum spanning tree (spanning_tree_graph); GRAPHS names them.
voronoi_graph gives the walls of the Voronoi cells instead of links, one for each Delaunay pair;
edge_list_graph a fixed list of pairs (a skeleton: parse_edges, SKELETONS). GraphOptions.groups
(parse_groups) limits every graph to links between points of different groups.

Points are padded [T,N,2] with visibility [T,N]; the searches are neighbours.py's, the
triangulations triangulation.py's. Edges are undirected (i < j), listed per frame as a Ragged.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.batching import Ragged
from ..core.device import run_chunked
from ..inputs.text import check_size, load_json, short
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
    # int64 [N] or [T,N], each point's group (-1: none); None: every pair may link. Given, only
    # points of two different groups link (group to group), and points of no group take no link
    groups: torch.Tensor | None = None


def _across(options: GraphOptions, frame, i, j, device):
    """bool [M]: the edges (frame, i, j [M]) whose ends lie in two different groups (all: no groups)."""
    if options.groups is None:
        return torch.ones_like(frame, dtype=torch.bool)
    groups = options.groups.to(device)
    g_i, g_j = (groups[i], groups[j]) if groups.ndim == 1 else (groups[frame, i], groups[frame, j])
    return (g_i != g_j) & (g_i >= 0) & (g_j >= 0)


def _unlinkable(options: GraphOptions) -> int:
    """The most points of a frame that one grouped point may not link to, itself included: those of its
    own group and of none (0 without groups; a host sync where the groups are on a device: the node's
    are host data)."""
    if options.groups is None:
        return 0
    groups = options.groups.reshape(-1, options.groups.shape[-1]) + 1  # 0: no group
    top = int(groups.max()) + 1 if groups.numel() else 0
    if top <= 1:
        return 0
    frame = torch.arange(groups.shape[0], device=groups.device)[:, None].expand_as(groups)
    counts = torch.zeros(groups.shape[0], top, dtype=torch.long, device=groups.device)
    counts.view(-1).index_add_(0, (frame * top + groups).view(-1), torch.ones_like(groups).view(-1))
    return int((counts[:, 1:] + counts[:, :1]).max())


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
    # within max_distance and finite (distances are >= 0, inf where there is no neighbour): one comparison
    ok = distance <= options.max_distance if math.isfinite(options.max_distance) else distance < INF
    source = torch.arange(n, device=index.device)[None, :, None]
    low, high = torch.minimum(source, index), torch.maximum(source, index)
    frame = torch.arange(frames, device=index.device)[:, None, None]
    # no edge: the last key of the last frame, (n - 1, n - 1), after every real edge
    none = frames * n * n - 1
    key = torch.add(high, low, alpha=n).add_(frame, alpha=n * n).masked_fill_(~ok, none).view(-1).sort().values
    if options.mutual:  # found from both ends: a key and the next one equal
        keep = F.pad(key[1:] == key[:-1], (0, 1), value=False)
    else:  # the first of equal keys
        keep = F.pad(key[1:] != key[:-1], (1, 0), value=True)
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
    carried = None  # keys i * n + j of the edges present in the frame before the window (None: the first)
    parts = []
    for first, last in windows:  # the recurrence carries one frame's edges on
        rows = slice(starts[first], starts[last])
        present, key, ends = _hysteresis_window(
            xy[first:last],
            visible[first:last],
            None if reach is None else reach[first:last],
            frame[rows] - first if first else frame[rows],
            torch.add(j[rows], i[rows], alpha=n).masked_fill_(~keep[rows], n * n),
            carried,
            options,
            slack,
            n,
            exact=len(windows) > 1,
        )
        if last < frames:  # the next window's: n * n for none (no host sync)
            carried = key.masked_fill(~present[-1], n * n)
        parts.append(
            (
                torch.arange(first, last, device=key.device)[:, None].expand_as(present).reshape(-1),
                ends[0].repeat(last - first),
                ends[1].repeat(last - first),
                present.view(-1),
            )
        )
    per_frame = None if len(windows) > 1 else min(slots, n * (n - 1) // 2)
    columns = zip(*parts, strict=False)
    return *(torch.cat(column) if len(parts) > 1 else column[0] for column in columns), per_frame


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
    repeat = F.pad(key[1:] == key[:-1], (1, 0), value=False)  # the first none too: its place is overwritten
    place = torch.arange(key.numel(), device=key.device).masked_fill_(repeat, 0).cummax(0).values
    place.masked_fill_(key == none, key.numel())  # none sorts last: past every place
    return key.masked_fill_(repeat, none), torch.empty_like(place).index_put_((order,), place)


def _hysteresis_window(xy, visible, reach, frame, key, carried, options: GraphOptions, slack, n, exact=True):
    """_hysteresis over one window of W frames: xy [W,N,2], visible and reach [W,N], the new edges'
    frame and key i * n + j [M] (n * n: no edge), carried int64 [C] (keys present in the frame
    before, n * n: none; None: the first window, none). Returns present bool [W,U], the U places of the
    distinct keys, sorted: exact, the distinct keys only (one host sync); else M + C places, repeats
    holding n * n (never present), and their ends i, j int64 [2,U] (any point for n * n)."""
    frames = visible.shape[0]
    key, inverse = _distinct(key if carried is None else torch.cat([key, carried]), n * n, exact)
    edges = key.numel()
    ends_i, ends_j = key.clamp_max(n * n - 1) // n, key % n  # none's ends: any point
    # flags set by index_fill_ (a Python bool in an index_put_ is a tensor made from host data); the edges
    # not new in a frame, as the closed form reads them
    not_new = torch.ones(frames, edges + 1, dtype=torch.bool, device=key.device)
    not_new.view(-1).index_fill_(0, torch.add(inverse[: frame.numel()], frame, alpha=edges + 1), False)
    not_new = not_new[:, :edges]
    before = None  # the carried edges, bool [U]
    if carried is not None:
        before = torch.zeros(edges + 1, dtype=torch.bool, device=key.device)
        before = before.index_fill_(0, inverse[frame.numel() :], True)[:edges]
    delta = xy[:, ends_j] - xy[:, ends_i]
    span = delta.norm(dim=-1)
    holds = visible[:, ends_i] & visible[:, ends_j]
    # an infinite limit holds every span (a NaN span fails the reach test, or a radius graph's finite limit)
    if math.isfinite(options.max_distance) or reach is None:
        holds &= span <= options.max_distance * slack
    if math.isfinite(options.delta_y_cap) or reach is None:
        holds &= delta[..., 1].abs() <= options.delta_y_cap * slack
    if reach is not None:
        near_i, near_j = span <= reach[:, ends_i], span <= reach[:, ends_j]
        holds &= (near_i & near_j) if options.mutual else (near_i | near_j)
    if options.degree_cap <= 0:
        time = torch.arange(frames, device=key.device)[:, None]
        # carried edges count as new in the frame before the window (-1); -3: never new, before any break
        # (-2: none yet), so that it is never present (a Python number in torch.where is one more op)
        last_new = torch.cummax(time.expand_as(not_new).masked_fill(not_new, -3), 0).values
        if before is not None:
            last_new = last_new.maximum(before * 2 - 3)
        last_break = torch.cummax(time.expand_as(holds).masked_fill(holds, -2), 0).values
        # a new edge is present: its last break is at most its frame, where it was last new
        return last_break <= last_new, key, (ends_i, ends_j)
    new = ~not_new
    present = torch.zeros_like(new)
    previous = before if before is not None else torch.zeros_like(new[0])
    ends = torch.stack([ends_i, ends_j])
    for t in range(frames):  # the recurrence: a cap decides which held edges exist in frame t
        held = previous & holds[t]
        # held edges rank before new ones, so that a cap does not make links flicker
        previous = present[t] = _cap_degree(ends, new[t] | held, span[t], options.degree_cap, n, held)
    return present, key, ends


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
    if options.groups is not None and n <= GROUP_BRUTE_FORCE_POINTS:
        distance, index = _group_neighbours(xy, visible, options, min(reach_k, n - 1), slack, on_chunk)
    else:
        # with groups: the reach_k nearest of other groups are among the reach_k + (own group and none,
        # less the point itself) nearest
        searched = min(reach_k + max(_unlinkable(options) - 1, 0), max(n - 1, 1))
        distance, index = nearest_neighbours(
            xy, visible, searched, options.delta_y_cap, options.max_distance * slack, on_chunk
        )
    if (
        options.groups is not None and n > GROUP_BRUTE_FORCE_POINTS
    ):  # the neighbours of the same group (or none) out, the others nearest first
        frame = torch.arange(frames, device=device)[:, None, None].expand_as(index)
        source = torch.arange(n, device=device)[None, :, None].expand_as(index)
        other = _across(options, frame, source, index.clamp_min(0), device) & (index >= 0)
        distance, order = distance.masked_fill(~other, INF).sort(dim=-1, stable=True)
        distance, index = distance[..., :reach_k], index.gather(-1, order)[..., :reach_k]
        index = index.masked_fill(~torch.isfinite(distance), -1)
    frame, i, j, keep = _new_edges(index[..., : options.k], distance[..., : options.k], options, n)
    # the reach_k-th nearest bounds "still among the nearest"; inf when a frame has fewer points
    reach = None
    if slack > 1:
        reach = distance[..., -1] if reach_k < n else torch.full_like(distance[..., -1], INF)
    return _stable_edges(xy, visible, reach, frame, i, j, keep, options, per_frame=min(n * options.k, n * (n - 1) // 2))


# points per frame up to which knn between groups compares every pair of a frame (a [N,N] matrix): the
# search below needs the nearest k + (a group's size) of each point, ~4x slower with two groups of 150
GROUP_BRUTE_FORCE_POINTS = 2048


def _group_neighbours(xy, visible, options: GraphOptions, k: int, slack: float, on_chunk):
    """The k nearest visible points of another group of every point, as nearest_neighbours gives them
    (distance float32 [T,N,k], inf where there are fewer, index int64 [T,N,k], -1 there; ties to the
    lower index), within the slack of the limits, from each frame's [N,N] distances."""
    frames, n = visible.shape
    groups = options.groups.to(xy.device).expand(frames, n)
    ids = torch.arange(n, device=xy.device)

    def search(start, stop, device):
        group, shown = groups[start:stop].to(device), visible[start:stop].to(device)
        x, y = xy[start:stop].to(device).unbind(-1)
        dx, dy = x[:, None, :] - x[:, :, None], y[:, None, :] - y[:, :, None]  # [F,N,N]: candidate - point
        d2 = dx * dx + dy * dy
        shown = shown & (group >= 0)
        outside = ~shown[:, None, :] | ~shown[:, :, None] | (group[:, None, :] == group[:, :, None])
        outside |= (dy.abs() > options.delta_y_cap * slack) | (d2 > (options.max_distance * slack) ** 2)
        d2, order = d2.masked_fill_(outside, INF).sort(dim=-1, stable=True)  # ties: the lower index first
        d2, index = d2[..., :k], ids.to(device)[order[..., :k]]
        return d2.sqrt(), index.masked_fill(d2 == INF, -1)

    parts = run_chunked(search, frames, n * n * 40 + n * 200, xy.device, on_chunk)
    if not parts:
        return torch.zeros(0, n, k, device=xy.device), torch.zeros(0, n, k, dtype=torch.long, device=xy.device)
    return torch.cat([part[0].to(xy.device) for part in parts]), torch.cat([part[1].to(xy.device) for part in parts])


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
    keep = (key != frames * n * n - 1) & _across(options, frame, i, j, device)
    return _stable_edges(xy, visible, None, frame, i, j, keep, options)


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
    keep &= _across(options, frame, i, j, device)
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

# Fixed edge lists by name. coco17: the 19 limbs of COCO's 17 person keypoints (nose, eyes, ears,
# shoulders, elbows, wrists, hips, knees, ankles; the dataset's "skeleton", from 1-based to 0-based
# ids), what pose models (YOLO-pose, RTMPose, ViTPose) output and supervision's EdgeAnnotator draws
SKELETONS = {
    "coco17": (
        (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
        (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
    ),
}  # fmt: skip


def _track_id(value) -> int | None:
    """A track id (an int >= 0, or its digits) or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    return int(value) if isinstance(value, str) and value.isdigit() else None


def parse_edges(text: str, input_name: str = "edges") -> np.ndarray:
    """A fixed edge list -> int64 [P,2] (host), pairs as given: a name of SKELETONS ("coco17"), pairs
    "i-j" separated by commas, semicolons or spaces ("0-1, 1-2"), or JSON pairs ([[0, 1], [1, 2]]);
    ids are track numbers from 0. Empty: no edges. ValueError naming the input otherwise."""
    check_size(text, input_name)
    text = text.strip()
    if text.lower() in SKELETONS:
        return np.array(SKELETONS[text.lower()], np.int64)
    if text.startswith("["):
        pairs = load_json(text, input_name)
        if not isinstance(pairs, list):
            raise ValueError(f"{input_name}: expected a list of [i, j] pairs, got {short(pairs)}")
        shown = pairs
    else:
        shown = [token for token in re.split(r"[\s,;]+", text) if token]
        pairs = [token.split("-") for token in shown]
    table = []
    for pair, as_given in zip(pairs, shown, strict=True):
        ends = [_track_id(end) for end in pair] if isinstance(pair, (list, tuple)) and len(pair) == 2 else [None]
        if None in ends or ends[0] == ends[1]:
            raise ValueError(
                f"{input_name}: expected pairs of two different track ids like 0-1, 1-2 (or JSON [[0, 1], "
                f"[1, 2]], or {', '.join(SKELETONS)}), got {short(as_given)}"
            )
        table.append(ends)
    return np.array(table, np.int64).reshape(-1, 2)


def parse_groups(text: str, n: int, input_name: str = "groups") -> torch.Tensor | None:
    """Groups of track ids, separated by | ("0-9 | 10-19": ids and ranges a-b within a group, separated
    by commas or spaces) -> each of the n points' group int64 [N] (host; -1: in none), or None for an
    empty text. ValueError naming the input for fewer than two groups, ids past the n tracks, ids in
    two groups or anything else."""
    check_size(text, input_name)
    if not text.strip():
        return None
    parts = text.split("|")
    if len(parts) < 2:
        raise ValueError(f"{input_name}: expected two or more groups of track ids separated by |, got {short(text)}")
    group = np.full(n, -1, np.int64)
    for index, part in enumerate(parts):
        for token in (t for t in re.split(r"[\s,;]+", part) if t):
            match = re.fullmatch(r"(\d+)(?:-(\d+))?", token)
            if match is None:
                raise ValueError(f"{input_name}: expected track ids or ranges like 0-9, got {short(token)}")
            low, high = int(match.group(1)), int(match.group(2) or match.group(1))
            if low > high or high >= n:
                raise ValueError(
                    f"{input_name}: {token} is not a range of the tracks' ids (0 to {n - 1}: {n} tracks)"
                    if n
                    else f"{input_name}: {token} names a track, but there are no tracks"
                )
            taken = group[low : high + 1]
            if (taken >= 0).any():
                raise ValueError(f"{input_name}: track {low + int(np.argmax(taken >= 0))} is in two groups")
            taken[:] = index
    return torch.from_numpy(group)


def edge_list_graph(
    xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, edges: np.ndarray, device=None
) -> Ragged:
    """Undirected edges per frame, as knn_graph: the pairs of edges int64 [P,2] (host; parse_edges)
    whose two points are visible, less those beyond max_distance or delta_y_cap or within a group; the
    degree cap keeps each point's shortest. k, mutual and hysteresis have no part. ValueError naming
    `edges` for an id past the N points. Host syncs: the packing needs none (one upload: the pairs)."""
    device = torch.device(device) if device is not None else xy.device
    xy, visible = _finite_points(xy, visible, device)
    frames, n = visible.shape
    if edges.size and int(edges.max()) >= n:
        a, b = edges[(edges >= n).any(1)][0]
        raise ValueError(
            f"edges: the pair {a}-{b} names a track past the {n} tracks (ids 0 to {n - 1})"
            if n
            else f"edges: the pair {a}-{b} names a track, but there are no tracks"
        )
    pairs = np.unique(np.sort(edges, 1), axis=0)  # i < j, sorted, once each: the order of every graph
    count = len(pairs)
    if not count or not frames:
        return _no_edges(frames, device)
    table = torch.from_numpy(pairs).to(device)
    frame = torch.arange(frames, device=device)[:, None].expand(frames, count).reshape(-1)
    i, j = table[:, 0].repeat(frames), table[:, 1].repeat(frames)
    delta = xy[frame, j] - xy[frame, i]
    length = delta.norm(dim=-1)
    keep = visible[frame, i] & visible[frame, j] & (length <= options.max_distance)
    keep &= (delta[:, 1].abs() <= options.delta_y_cap) & _across(options, frame, i, j, device)
    if options.degree_cap > 0:
        keep = _cap_degree(torch.stack([i, j]).add_(frame * n), keep, length, options.degree_cap, frames * n)
    return _ragged_edges(frame, i, j, keep, frames, width=count)


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
    at = torch.where(keep, torch.add(slot, frame, alpha=width), frames * width)
    values = torch.zeros(frames * width + 1, 2, dtype=torch.long, device=frame.device)
    values[at] = torch.stack([i, j], 1)
    edges = Ragged(values[:-1].view(frames, width, 2), counts)
    if extra is None:
        return edges
    packed = extra.new_zeros(frames * width + 1, *extra.shape[1:])
    packed[at] = extra
    return edges, Ragged(packed[:-1].view(frames, width, *extra.shape[1:]), counts)
