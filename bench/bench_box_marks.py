"""Box marks (issue 34): the Bounding Box Renderer with each mark option on, against the same render with
every option off, on 4 frames of 1080p with 50 boxes a frame (each with a score and a track id that
moves a little from frame to frame), numba's loop on the CPU. The issue's budget: each option at most
2x the plain render. Timed in turns (each round runs every case once), medians.
    .venv/bin/python bench/bench_box_marks.py
"""

from __future__ import annotations

import json

import numpy as np
import torch

from _common import report, table, timed_together
from demo import load_pack  # noqa: E402  (_common puts the repository root on sys.path)

FRAMES, HEIGHT, WIDTH, BOXES = 4, 1080, 1920, 50
CASES = {
    "plain (every option off)": {},
    "marker circle": {"marker": "circle"},
    "marker triangle": {"marker": "triangle"},
    "bar below": {"bar": "below"},
    "trace_frames 3": {"trace_frames": 3},
    "dim_outside 0.5": {"dim_outside": 0.5},
    "inside blur 15": {"inside": "blur", "inside_size": 15},
    "inside pixelate 15": {"inside": "pixelate", "inside_size": 15},
}


def tracked_boxes(seed=0):
    """50 boxes of 40..300 px a frame (bench_boxes' sizes), each drifting a few px a frame."""
    rng = np.random.default_rng(seed)
    size = rng.uniform(40, 300, (BOXES, 2))
    corner = rng.uniform(0, 1, (BOXES, 2)) * (np.array([WIDTH, HEIGHT]) - size - 40)
    frames = []
    for t in range(FRAMES):
        at = corner + 8 * t
        frames.append(
            [
                {"x": float(x), "y": float(y), "w": float(w), "h": float(h), "id": i, "score": (i % 10 + 1) / 10}
                for i, ((x, y), (w, h)) in enumerate(zip(at, size, strict=True))
            ]
        )
    return json.dumps(frames)


def main():
    load_pack()
    from rasterkit.nodes.boxes import BoundingBoxRenderer as node

    images = torch.rand(FRAMES, HEIGHT, WIDTH, 3)
    boxes = tracked_boxes()
    calls = [lambda kw=kw: node.run(images, boxes=boxes, labels="none", **kw) for kw in CASES.values()]
    times = timed_together(calls, repeat=9, warmup=2)
    plain = times[0]
    rows = [[name, f"{t * 1000:.1f}", f"{t / plain:.2f}x"] for name, t in zip(CASES, times, strict=True)]
    report(
        "box_marks",
        "Box marks (Bounding Box Renderer, issue 34)",
        [
            (
                f"The node, {FRAMES} frames of {WIDTH}x{HEIGHT}, {BOXES} boxes a frame, median ms (numba's loop)",
                table(["case", "node", "/ plain"], rows),
            )
        ],
        ".venv/bin/python bench/bench_box_marks.py",
    )


if __name__ == "__main__":
    main()
