"""Line Link Renderer's plexus controls against the plain render, one run: each option (length falloff
on opacity, width or both; colours from the points; links between groups; a fixed edge list; the spiral,
elastic and fourier curves; the pulsing and electric line styles) timed
with the node end to end (graph, layers, draw) beside the same node without it, and the ratio (issue
34 allows a style at most 2x the plain render).
    .venv/bin/python bench/bench_plexus.py [--quick]
"""

from __future__ import annotations

import sys

import torch

from _common import report, table, timed_together
from utils.core.device import torch_device  # noqa: E402  (_common puts the repository root on sys.path)

QUICK = "--quick" in sys.argv
FRAMES, POINTS = (4, 150) if QUICK else (16, 300)
HEIGHT, WIDTH = 720, 1280

PLAIN = dict(graph="knn", k=4, max_distance=220.0, width=1.5, point_radius=2.0)
HALVES = f"0-{POINTS // 2 - 1} | {POINTS // 2}-{POINTS - 1}"
CHAIN = ", ".join(f"{i}-{i + 1}" for i in range(POINTS - 1))
# (option, its inputs, the plain render's inputs beside PLAIN)
OPTIONS = [
    ("length_falloff 0.8, opacity", dict(length_falloff=0.8), {}),
    ("length_falloff 0.8, width", dict(length_falloff=0.8, falloff_on="width"), {}),
    ("length_falloff 0.8, opacity and width", dict(length_falloff=0.8, falloff_on="opacity and width"), {}),
    ("color points (blend along each link)", dict(color="points"), {}),
    ("color points + length_falloff 0.8", dict(color="points", length_falloff=0.8), {}),
    ("groups: two halves, knn", dict(groups=HALVES), {}),
    ("groups: two halves, radius", dict(graph="radius", groups=HALVES), dict(graph="radius")),
    ("graph edges: a chain through every point (vs knn k=1)", dict(graph="edges", edges=CHAIN), dict(k=1)),
    # ys-vision-tools' curve families and line styles, against straight solid links
    ("curve bezier (for scale)", dict(curve="bezier"), {}),
    ("curve spiral (0.5 turns)", dict(curve="spiral"), {}),
    ("curve elastic, curvature 0.1", dict(curve="elastic", curvature=0.1), {}),
    ("curve fourier, curvature 0.1", dict(curve="fourier", curvature=0.1), {}),
    ("line_style pulsing, 14 px wave", dict(line_style="pulsing", dash_speed=2.0), {}),
    (
        "line_style pulsing on bezier curves (vs bezier)",
        dict(curve="bezier", line_style="pulsing"),
        dict(curve="bezier"),
    ),
    ("line_style electric, jitter 3", dict(line_style="electric"), {}),
    ("line_style electric + glow 0.5 (vs glow 0.5)", dict(line_style="electric", glow=0.5), dict(glow=0.5)),
]


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    from demo import load_pack

    node = load_pack().nodes.links.LineLinkRenderer
    generator = torch.Generator().manual_seed(0)
    frames = torch.rand(FRAMES, HEIGHT, WIDTH, 3, generator=generator)
    base = torch.rand(1, POINTS, 2, generator=generator) * torch.tensor([WIDTH, HEIGHT])
    xy = base + torch.cumsum(torch.randn(FRAMES, POINTS, 2, generator=generator) * 2, 0)
    tracks = {"xy": xy, "visible": torch.ones(FRAMES, POINTS, dtype=torch.bool)}

    def run(**options):
        return lambda: node.run(frames, tracks_json="", tracks=tracks, **{**PLAIN, **options})

    rows = []
    for name, option, plain in OPTIONS:
        with_option, without = timed_together([run(**{**plain, **option}), run(**plain)], 3 if QUICK else 5, sync=sync)
        rows.append([name, f"{without * 1e3:.0f}", f"{with_option * 1e3:.0f}", f"{with_option / without:.2f}x"])
    report(
        "plexus",
        "Line links: plexus controls against the plain render",
        [
            (
                f"{FRAMES} frames of {WIDTH} x {HEIGHT}, {POINTS} tracked points, knn k=4 within 220 px, on "
                f"{device.type} (node end to end, ms, median)",
                table(["option", "plain (ms)", "with the option (ms)", "ratio"], rows),
            )
        ],
        "bench/bench_plexus.py" + (" --quick" if QUICK else ""),
    )


if __name__ == "__main__":
    main()
