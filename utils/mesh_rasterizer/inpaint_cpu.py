"""mesh_inpaint's propagation on the CPU, compiled by numba, in the order of Hunyuan3D-2.1's extension:
"smooth" updates the vertices one after another in list order within a sweep (Gauss-Seidel),
"forward" walks its queue, adding up in its order, so that the stand-in gives its colours (up to
float32 rounding of the weights, which it computes in double).
Compiled on first use and cached beside this file."""

from __future__ import annotations

import numpy as np

from ..core.numba import falls_back
from ..core.numba import jit as _jit


@_jit()
def _sweeps(listed, start, neighbour, weight, colours, state):
    """In place on colours float32 [V,C] and state uint8 [V] (> 0: coloured; 2 set here): the vertices
    listed int64 [L] (with repeats) each set to the weighted mean of their coloured neighbours (CSR:
    start int64 [V+1], neighbour int64 [E], weight float32 [E]), sweep after sweep until the counter
    of mesh_inpaint's docstring runs out."""
    channels = colours.shape[1]
    sums = np.zeros(channels, np.float32)
    budget, last_left = 2, 0
    while budget > 0:
        left = 0
        for i in range(listed.shape[0]):
            vertex = listed[i]
            sums[:] = 0
            total = np.float32(0)
            for edge in range(start[vertex], start[vertex + 1]):
                other = neighbour[edge]
                if state[other] > 0:
                    w = weight[edge]
                    for c in range(channels):
                        sums[c] += colours[other, c] * w
                    total += w
            if total > 0:
                for c in range(channels):
                    colours[vertex, c] = sums[c] / total
                state[vertex] = 2
            else:
                left += 1
        budget += -1 if left == last_left else 1
        last_left = left


@falls_back
def smooth(listed, start, neighbour, weight, colours, state):
    """_sweeps on numpy arrays (see there); returns (colours, state), or None where numba failed."""
    colours, state = colours.copy(), state.copy()
    _sweeps(listed, start, neighbour, weight, colours, state)
    return colours, state


@_jit()
def _forward(seen, start, neighbour, weight, colours, state):
    """In place on colours float32 [V,C] and state uint8 [V] (2 set here): breadth first from the seen
    int64 [S] vertices (in order), each round adding w * colour of the previous round's vertices into
    their uncoloured neighbours, then dividing by the sum of the weights."""
    count, channels = colours.shape
    total = np.zeros(count, np.float32)  # minus the extension's vtx_mask while a vertex is pending
    active = np.empty(count, np.int64)
    pending = np.empty(count, np.int64)
    active[: seen.shape[0]] = seen
    active_count = seen.shape[0]
    while active_count > 0:
        pending_count = 0
        for i in range(active_count):
            vertex = active[i]
            for edge in range(start[vertex], start[vertex + 1]):
                other = neighbour[edge]
                if state[other] > 0:
                    continue
                w = weight[edge]
                for c in range(channels):
                    colours[other, c] += colours[vertex, c] * w
                if total[other] == 0:
                    pending[pending_count] = other
                    pending_count += 1
                total[other] += w
        for i in range(pending_count):
            vertex = pending[i]
            for c in range(channels):
                colours[vertex, c] /= total[vertex]
            state[vertex] = 2
            active[i] = vertex
        active_count = pending_count


@falls_back
def forward(seen, start, neighbour, weight, colours, state):
    """_forward on numpy arrays (see there); returns (colours, state), or None where numba failed."""
    colours, state = colours.copy(), state.copy()
    _forward(seen, start, neighbour, weight, colours, state)
    return colours, state
