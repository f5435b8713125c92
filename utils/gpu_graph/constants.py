"""What the neighbour searches, the triangulation and the graphs of gpu_graph share: INF (no distance,
no limit) and the edge keys (frame * N + i) * N + j, one int64 per undirected pair i < j of a frame's
N points, whose sorted order is (frame, i, j)."""

from __future__ import annotations

import torch

INF = float("inf")


def split_keys(key: torch.Tensor, n: int):
    """Keys (frame * n + i) * n + j [M] -> frame, i, j [M]."""
    return key // (n * n), key // n % n, key % n
