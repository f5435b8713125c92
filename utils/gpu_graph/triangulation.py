"""Triangulations of tracked points, for all frames: the Delaunay triangulation's edges
(delaunay_neighbour_keys), the minimum spanning forest of a weighted edge list (spanning_forest) and
the Voronoi diagram's walls (voronoi_segments).

The Delaunay triangulation has no batched form in torch: OpenCV triangulates each frame on the host.
The minimum spanning tree is a subgraph of it, found for all frames at once by Boruvka's algorithm.
The Voronoi walls come from the same OpenCV calls' triangles (their circumcentres bound each pair's
bisector), for all frames at once.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from .constants import INF, split_keys

DELAUNAY_RECT = 2**29  # half-width of Subdiv2D's rectangle: its outer vertices ~2^32 away, as if at infinity


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
    return both[: keys.numel()], both[keys.numel() :].view(-1, 4)


def spanning_forest(ends: torch.Tensor, weight: torch.Tensor, keep: torch.Tensor, nodes: int, size: int):
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
    frame, i, j = split_keys(keys, n)
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
