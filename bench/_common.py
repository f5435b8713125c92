"""Timing and reporting shared by the benchmarks: median wall time (or least CPU time), a markdown table, and the
machine it ran on, written to bench/results/<family>.md (bench/run_all.py joins them)."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def machine() -> str:
    import torch

    cpu = platform.processor() or "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return f"{cpu}, {os.cpu_count()} cores{gpu}; Python {platform.python_version()}, torch {torch.__version__}"


def timed(fn, repeat: int = 5, warmup: int = 1, sync=None) -> float:
    """Median seconds of `repeat` calls of fn() after `warmup` calls."""
    return timed_together([fn], repeat, warmup, sync)[0]


def timed_together(
    fns: list, repeat: int = 5, warmup: int = 1, sync=None, clock=time.perf_counter, before=None, pick=statistics.median
) -> list[float]:
    """Median seconds (or `pick` of its rounds) of each of fns, called in turn in each of `repeat` rounds
    (after `warmup` rounds), so that a machine whose speed drifts during the run slows them alike. clock:
    time.process_time for the CPU time of the process (all its threads; on a machine shared with other
    work, the figure that their load changes least); before: called ahead of each call, untimed (e.g.
    trim_heap)."""
    times = [[] for _ in fns]
    for round_ in range(warmup + repeat):
        for fn, spent in zip(fns, times, strict=True):
            if before:
                before()
            if sync:
                sync()
            start = clock()
            fn()
            if sync:
                sync()
            if round_ >= warmup:
                spent.append(clock() - start)
    return [pick(spent) for spent in times]


def cpu_timed_together(fns: list, repeat: int = 4, warmup: int = 1) -> list[float]:
    """Least CPU seconds (time.process_time: what other processes' load does not add) of each of fns,
    called in turn in each of `repeat` rounds (after `warmup` rounds). CPU work only: with torch (and so
    numba) on one thread it is the work done, where the wall clock of a busy machine swings."""
    return timed_together(fns, repeat, warmup, clock=time.process_time, pick=min)


def output_floor(images, image_only: bool = False):
    """Allocating and writing once the outputs of a draw over images float [B,H,W,3] (the image, and
    unless image_only the alpha and layer): the floor of any path producing them."""
    import torch

    image = torch.empty_like(images).copy_(images)
    if image_only:
        return image
    return image, torch.zeros(images.shape[:3]), torch.zeros(images.shape[:3] + (4,))


def trim_heap() -> None:
    """glibc's free memory given back to the system: the next allocations fault fresh pages, as in a
    process that keeps its earlier outputs (ComfyUI caches each node's)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))


def peak_memory(fn, device) -> tuple[object, str]:
    """fn()'s result and the peak memory it took beyond what was held before: allocated memory on a
    GPU; on Linux the process's peak resident set above its resident set at the call (the kernel's
    high-water mark, reset first through /proc/self/clear_refs, after glibc's malloc_trim gave back
    the free memory earlier calls left, which fn would otherwise reuse unseen), else the growth of
    the peak RSS (a lower bound where an earlier call peaked higher)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        return result, f"{(torch.cuda.max_memory_allocated() - base) / 2**20:,.0f} MiB"
    try:
        trim_heap()
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current RSS
        base = _rss_kib("VmRSS:")
        result = fn()
        return result, f"{(_rss_kib('VmHWM:') - base) / 2**10:,.0f} MiB"
    except OSError:
        import resource

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = fn()
        growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**10
        return result, f"{growth:,.0f} MiB (peak RSS growth)"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def report(family: str, title: str, sections: list[tuple[str, str]], command: str) -> str:
    """Print and save the results of one benchmark family."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"## {title}", "", f"Machine: {machine()}  ", f"Date: {stamp}  ", f"Rerun: `{command}`", ""]
    for heading, text in sections:
        body += [f"### {heading}", "", text, ""]
    markdown = "\n".join(body)
    print(markdown)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"{family}.md").write_text(markdown)
    return markdown
