"""Line Link Renderer's plexus controls against the plain render, one run: each option (length falloff
on opacity, width or both; colours from the points; links between groups; a fixed edge list; the spiral,
elastic and fourier curves; the pulsing and electric line styles) timed
with the node end to end (graph, layers, draw) beside the same node without it, and the ratio (issue
34 allows a style at most 2x the plain render): by wall clock (median, torch's threads), then by CPU
time on one thread (least of 4, what a busy machine does not add), with a curve's drawn length over the
straight link's and the ratio per unit of drawn length. --against REV adds the spirals and waves
flattened by utils/gpu_curves.py as it was at git revision REV, timed in the same turns.
    .venv/bin/python bench/bench_plexus.py [--quick] [--against REV]
"""

from __future__ import annotations

import subprocess
import sys
import types

import torch

from _common import ROOT, cpu_timed_together, report, table, timed_together
from utils.core.device import torch_device  # noqa: E402  (_common puts the repository root on sys.path)

QUICK = "--quick" in sys.argv
AGAINST = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
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
    ("curve bezier (for scale)", dict(curve="bezier", curvature=0.2), {}),
    ("curve spiral (0.5 turns)", dict(curve="spiral", curvature=0.2), {}),
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


def drawn_length(option: dict, plain: dict) -> float | None:
    """A curve's drawn length over the straight link's (the same at any length: its polyline's for a link
    of 200 px), for an option that curves straight links; else None."""
    from utils.gpu_curves import curve_polylines

    curve = option.get("curve", "straight")
    if curve == "straight" or plain.get("curve", "straight") != "straight":
        return None
    points, count = curve_polylines(torch.zeros(1, 2), torch.tensor([[200.0, 0.0]]), curve, option["curvature"])
    return float((points[0, 1 : count[0]] - points[0, : count[0] - 1]).norm(dim=-1).sum()) / 200


def curves_at(revision: str) -> types.ModuleType:
    """utils/gpu_curves.py as it was at a git revision (it imports only math and torch), as a module."""
    path = f"{revision}:utils/gpu_curves.py"
    source = subprocess.run(["git", "show", path], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"gpu_curves_at_{revision}")
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    from demo import load_pack

    pack = load_pack()
    node = pack.nodes.links.LineLinkRenderer
    layers = sys.modules[f"{pack.__name__}.utils.gpu_rendering.link_layers"]
    before = curves_at(AGAINST) if AGAINST else None
    generator = torch.Generator().manual_seed(0)
    frames = torch.rand(FRAMES, HEIGHT, WIDTH, 3, generator=generator)
    base = torch.rand(1, POINTS, 2, generator=generator) * torch.tensor([WIDTH, HEIGHT])
    xy = base + torch.cumsum(torch.randn(FRAMES, POINTS, 2, generator=generator) * 2, 0)
    tracks = {"xy": xy, "visible": torch.ones(FRAMES, POINTS, dtype=torch.bool)}

    def run(curves=None, **options):
        """The node with options; with curves (a gpu_curves module), its curve_polylines in the layers'."""

        def call():
            now = layers.curve_polylines
            layers.curve_polylines = now if curves is None else curves.curve_polylines
            try:
                node.run(frames, tracks_json="", tracks=tracks, **{**PLAIN, **options})
            finally:
                layers.curve_polylines = now

        return call

    wall = []
    for name, option, plain in OPTIONS:
        with_option, without = timed_together([run(**{**plain, **option}), run(**plain)], 3 if QUICK else 5, sync=sync)
        wall.append([name, f"{without * 1e3:.0f}", f"{with_option * 1e3:.0f}", f"{with_option / without:.2f}x"])
    sections = [
        (
            f"{FRAMES} frames of {WIDTH} x {HEIGHT}, {POINTS} tracked points, knn k=4 within 220 px, on "
            f"{device.type} (node end to end, ms, median)",
            table(["option", "plain (ms)", "with the option (ms)", "ratio"], wall),
        )
    ]
    if device.type == "cpu":
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # numba's loops follow torch's count
        cpu, repeat = [], 2 if QUICK else 4
        for name, option, plain in OPTIONS:
            cases = [run(**{**plain, **option}), run(**plain)]
            then = before is not None and option.get("curve") in ("spiral", "elastic", "fourier")
            with_option, without, *at_revision = cpu_timed_together(
                cases + ([run(before, **{**plain, **option})] if then else []), repeat
            )
            ratio, drawn = with_option / without, drawn_length(option, plain)
            ink = ["", ""] if drawn is None else [f"{drawn:.2f}x", f"{ratio / drawn:.2f}x"]
            row = [name, f"{without * 1e3:.0f}", f"{with_option * 1e3:.0f}", f"{ratio:.2f}x", *ink]
            if before is not None:
                row += [f"{at_revision[0] * 1e3:.0f}", f"{at_revision[0] / without:.2f}x"] if then else ["", ""]
            cpu.append(row)
        torch.set_num_threads(threads)
        header = ["option", "plain (ms CPU)", "with the option (ms CPU)", "ratio", "drawn length", "ratio / length"]
        if before is not None:
            header += [f"with the option at {AGAINST} (ms CPU)", f"ratio at {AGAINST}"]
        sections.append(
            (
                f"The same by CPU time, one thread (least of {repeat}, each case and its plain render in turns)",
                table(header, cpu),
            )
        )
    report(
        "plexus",
        "Line links: plexus controls against the plain render",
        sections,
        "bench/bench_plexus.py" + (" --quick" if QUICK else "") + (f" --against {AGAINST}" if AGAINST else ""),
    )


if __name__ == "__main__":
    main()
