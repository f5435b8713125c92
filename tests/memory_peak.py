"""Peak resident memory of a call, for the memory-estimate tests (Linux: reads /proc/self)."""

import ctypes
import gc


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def peak_bytes(fn) -> int:
    """Resident memory that fn() adds at its peak: freed memory handed back to the system first
    (malloc_trim), then the high-water mark reset (clear_refs 5) and read after the call."""
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status("VmRSS:")
    result = fn()
    peak = _status("VmHWM:") - base
    del result
    gc.collect()
    return peak
