"""Ragged per-frame data (boxes, tracks, series of different lengths) as one padded tensor.

Packing happens on the host in one numpy array, so moving a whole batch to the device is one
transfer instead of one per frame; results are split back once, after one device-to-host copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Ragged:
    """B variable-length sequences: `values` [B, L, *F] padded past each length, `lengths` [B] int64."""

    values: torch.Tensor
    lengths: torch.Tensor

    @property
    def batch(self) -> int:
        return int(self.lengths.shape[0])

    def to(self, device: torch.device, dtype: torch.dtype | None = None) -> Ragged:
        return Ragged(
            self.values.to(device=device, dtype=dtype or self.values.dtype, non_blocking=True),
            self.lengths.to(device, non_blocking=True),
        )

    def mask(self) -> torch.Tensor:
        """bool [B, L]: True where an entry is real, False where it is padding."""
        steps = torch.arange(self.values.shape[1], device=self.values.device)
        return steps[None, :] < self.lengths.to(self.values.device)[:, None]

    def flat(self, total: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The real entries only: values [sum(lengths), *F] and their batch index [sum(lengths)]. A
        caller that knows sum(lengths) passes it as total, which spares the host syncs of a mask."""
        if total is not None:
            batch_index, rank = expand_counts(self.lengths.to(self.values.device), total)
            return self.values[batch_index, rank], batch_index
        mask = self.mask()
        batch_index = torch.arange(self.batch, device=mask.device)[:, None].expand_as(mask)
        return self.values[mask], batch_index[mask]


def pack(
    sequences: Sequence, feature_shape: tuple[int, ...] = (), pad_value: float = 0.0, dtype: torch.dtype = torch.float32
) -> Ragged:
    """Pack B sequences (each array-like [L_i, *feature_shape]) into one padded CPU tensor.

    Empty sequences are allowed; the result has L = max(L_i) (0 when all are empty).
    """
    host_dtype = np.dtype(str(dtype).removeprefix("torch."))  # read straight into `dtype`: no float64 tensor
    arrays = [np.asarray(s, dtype=host_dtype).reshape((-1, *feature_shape)) for s in sequences]
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    width = int(lengths.max()) if len(arrays) else 0
    out = np.full((len(arrays), width, *feature_shape), pad_value, dtype=host_dtype)
    for row, a in enumerate(arrays):  # host-side copy into one buffer, before any transfer
        out[row, : len(a)] = a
    return Ragged(torch.from_numpy(out), torch.from_numpy(lengths))


def unpack(ragged: Ragged) -> list[torch.Tensor]:
    """Split back into B CPU tensors [L_i, *F] with one device-to-host copy."""
    values = ragged.values.cpu()
    lengths = ragged.lengths.cpu().tolist()
    return [values[b, :n] for b, n in enumerate(lengths)]


def expand_counts(counts: torch.Tensor, total: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """N items owning counts [N] (int64, >= 0) entries each, listed item after item: owner int64 [M]
    (the item of each entry) and rank int64 [M] (0 .. count - 1 within its item), M = sum(counts).
    A caller that knows M passes it as total, which spares a host sync."""
    owner = torch.repeat_interleave(counts, output_size=total)  # each index i counts[i] times
    rank = torch.arange(owner.numel(), device=counts.device) - (torch.cumsum(counts, 0) - counts)[owner]
    return owner, rank


def size_class(counts: torch.Tensor) -> torch.Tensor:
    """Each positive count [N] rounded up to 1, 2, 3, 4, 6, 8, 12, 16, ...: items padded to their
    class waste at most a third, and a batch holds few distinct classes (one dense computation each)."""
    # the largest power of two <= count, from a float32 estimate that may be one power off either way
    power = torch.exp2(torch.floor(torch.log2(counts.float()))).long()
    power = torch.where(power > counts, power // 2, torch.where(2 * power <= counts, 2 * power, power))
    return torch.where(counts <= power, power, torch.where(2 * counts <= 3 * power, 3 * power // 2, 2 * power))
