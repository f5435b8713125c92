"""k-nearest-neighbour graphs over tracked points, for all frames at once, with caps and
temporal hysteresis.

Points are padded [T,N,2] with visibility [T,N]. Neighbours come from brute-force distances
(torch.cdist and topk over a chunk of frames at a time, sized from free memory): on a GPU this
beats building a spatial index per frame for N up to tens of thousands. Edges are kept sparse,
as (frame, i, j) lists with i < j.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .batching import Ragged
from .device import run_chunked

INF = float("inf")


@dataclass
class GraphOptions:
    k: int = 3                      # neighbours per point
    max_distance: float = INF       # longest edge, pixels
    delta_y_cap: float = INF        # largest |dy| of an edge, pixels
    degree_cap: int = 0             # most edges per point, shortest kept (0: no cap)
    mutual: bool = False            # an edge needs each end among the other's k nearest
    hysteresis: float = 1.0         # >1: an edge of the previous frame stays within this slack


def nearest_neighbours(xy: torch.Tensor, visible: torch.Tensor, k: int, delta_y_cap: float = INF):
    """The k nearest visible points of every point, |dy| within the cap.

    xy float [T,N,2], visible bool [T,N] -> distance float [T,N,k] (inf where there are fewer)
    and index int64 [T,N,k], nearest first; equal distances are taken in index order.
    """
    frames, n = visible.shape
    d = torch.cdist(xy, xy)
    d.masked_fill_(~visible[:, None, :] | ~visible[:, :, None], INF)
    d.diagonal(dim1=1, dim2=2).fill_(INF)
    if math.isfinite(delta_y_cap):
        d.masked_fill_((xy[:, :, None, 1] - xy[:, None, :, 1]).abs() > delta_y_cap, INF)
    k = min(k, n)
    take = min(k + 1, n)
    distance, index = torch.topk(d, take, dim=-1, largest=False, sorted=True)
    if take > k:
        # rows whose k-th and (k+1)-th distances tie: topk may pick either; redo them by index
        tied = (distance[..., k - 1] == distance[..., k]) & torch.isfinite(distance[..., k - 1])
        if bool(tied.any()):
            rows = d[tied]
            order = torch.sort(rows, dim=-1, stable=True).indices[:, :take]
            distance[tied], index[tied] = rows.gather(1, order), order
    return distance[..., :k], index[..., :k]


def _undirected(frame, i, j, distance, n, mutual):
    """Unique undirected edges (i < j) of directed ones; mutual: only those found both ways."""
    low, high = torch.minimum(i, j), torch.maximum(i, j)
    key = (frame * n + low) * n + high
    key, inverse, count = torch.unique(key, return_inverse=True, return_counts=True)
    length = torch.zeros(key.numel(), device=key.device).scatter_(0, inverse, distance)
    keep = count == 2 if mutual else torch.ones_like(count, dtype=torch.bool)
    key, length = key[keep], length[keep]
    return key // (n * n), key // n % n, key % n, length


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


def knn_graph(xy: torch.Tensor, visible: torch.Tensor, options: GraphOptions, device=None) -> Ragged:
    """Undirected edges per frame: Ragged values int64 [T,E,2] (i < j, sorted) and lengths [T].

    xy float [T,N,2] pixels; visible bool [T,N]. Neighbours of every chunk of frames come from one
    batched computation. With hysteresis > 1, frame t also keeps the edges of frame t-1 whose
    ends are still visible and that are still within the slack: distance <= max_distance * slack,
    |dy| <= delta_y_cap * slack, and one end among the other's ceil(k * slack) nearest. Only that
    keep/drop step runs frame by frame, on the edge lists.
    """
    if options.k < 1:
        raise ValueError(f"k: expected at least 1, got {options.k}")
    device = torch.device(device) if device is not None else xy.device
    frames, n = visible.shape
    if n < 2:
        return Ragged(torch.zeros(frames, 0, 2, dtype=torch.long, device=device),
                      torch.zeros(frames, dtype=torch.long, device=device))
    slack = max(1.0, options.hysteresis)
    reach_k = max(options.k, math.ceil(options.k * slack))
    found, previous = [], None

    def chunk_edges(start, stop, dev):
        nonlocal previous
        chunk_xy, chunk_visible = xy[start:stop].to(dev), visible[start:stop].to(dev)
        distance, index = nearest_neighbours(chunk_xy, chunk_visible, reach_k, options.delta_y_cap)
        reach = distance[..., -1]  # [t,N]: distance to the ceil(k * slack)-th nearest
        distance, index = distance[..., :options.k], index[..., :options.k]
        ok = torch.isfinite(distance) & (distance <= options.max_distance)
        frame = torch.arange(stop - start, device=dev)[:, None, None].expand_as(index)[ok]
        source = torch.arange(n, device=dev)[None, :, None].expand_as(index)[ok]
        frame, i, j, length = _undirected(frame, source, index[ok], distance[ok], n, options.mutual)
        if slack == 1:
            if options.degree_cap > 0:
                keep = _cap_degree(frame, i, j, length, n, options.degree_cap)
                frame, i, j = frame[keep], i[keep], j[keep]
            found.append((frame + start, i, j))
            return
        for t in range(stop - start):  # a recurrence over frames, on edge lists
            now = frame == t
            fi, fj, held = i[now], j[now], torch.zeros(int(now.sum()), dtype=torch.bool, device=dev)
            if previous is not None:
                pi, pj = previous
                delta = chunk_xy[t, pj] - chunk_xy[t, pi]
                span = delta.norm(dim=-1)
                stays = (chunk_visible[t, pi] & chunk_visible[t, pj] & (span <= options.max_distance * slack)
                         & (delta[:, 1].abs() <= options.delta_y_cap * slack)
                         & ((span <= reach[t, pi]) | (span <= reach[t, pj])))
                key, inverse = torch.unique(torch.cat([fi * n + fj, (pi * n + pj)[stays]]), return_inverse=True)
                held = torch.zeros(key.numel(), dtype=torch.bool, device=dev).index_fill_(
                    0, inverse[fi.numel():], True)  # held: was an edge of the previous frame
                fi, fj = key // n, key % n
            if options.degree_cap > 0:
                span = (chunk_xy[t, fj] - chunk_xy[t, fi]).norm(dim=-1)
                # held edges rank before new ones, so that a cap does not make links flicker
                keep = _cap_degree(torch.zeros_like(fi), fi, fj, span - held * 1e9, n, options.degree_cap)
                fi, fj = fi[keep], fj[keep]
            previous = (fi, fj)
            found.append((torch.full_like(fi, start + t), fi, fj))

    # per frame: the distance matrix and its masks
    run_chunked(chunk_edges, frames, n * n * 16, device)
    frame, i, j = (torch.cat(parts) for parts in zip(*found)) if found else (torch.zeros(0, dtype=torch.long),) * 3
    return _ragged_edges(frame.to(device), i.to(device), j.to(device), frames)


def _ragged_edges(frame: torch.Tensor, i: torch.Tensor, j: torch.Tensor, frames: int) -> Ragged:
    """Edges listed as (frame, i, j), sorted by frame, packed into Ragged [T, E, 2]."""
    counts = torch.bincount(frame, minlength=frames)
    width = int(counts.max()) if counts.numel() else 0
    slot = torch.arange(frame.numel(), device=frame.device) - (torch.cumsum(counts, 0) - counts)[frame]
    values = torch.zeros(frames, width, 2, dtype=torch.long, device=frame.device)
    values[frame, slot] = torch.stack([i, j], 1)
    return Ragged(values, counts)
