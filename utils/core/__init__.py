"""Plumbing under every engine: the device and backend choice and memory checks (device), ragged
batching packed once for one transfer (batching), CuPy launch plumbing (cuda) and numba's (numba).
Used by every engine; no node imports it for more than the device and the memory check."""

from .batching import Ragged, pack, unpack
from .device import check_memory, cupy_usable, free_memory_bytes, numba_usable, torch_device

__all__ = [
    "Ragged",
    "check_memory",
    "cupy_usable",
    "free_memory_bytes",
    "numba_usable",
    "pack",
    "torch_device",
    "unpack",
]
