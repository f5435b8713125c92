"""Timing and reporting shared by the benchmarks: median wall time, a markdown table, and the
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
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if sync:
            sync()
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
