"""PrimitiveMesh's issue-34 options, each against the option off, on the three photos of
bench_primitive.py (bench/photos, shrunk to 256 px as there; 100 shapes, alpha 128, 1000 candidates,
mutations 100: fogleman/primitive's defaults):

- edge_weight: RMSE over the whole picture and over its edge pixels (the strongest 10% of the photo's
  Sobel magnitudes, as the engine's edge_weights ranks them), against edge_weight 0: lower on the
  edges at a total RMSE within 2%.
- coarse (coarse to fine): half and 80% of the shapes searched at half size first: RMSE and time.
- line kind, passes ('triangle:50:128, line:50:128'): RMSE and wall time against 100 triangles; the
  polyline (a stroke, as the Bezier: the torch path's slots on the CPU, no numba loop) against the
  quadratic kind on one photo at 128 px, 30 shapes.
- the render of lines and polylines at 512 px against the render of as many triangles (a style may
  cost at most 2x the plain render), and shapes_json against svg.
Each search runs twice, interleaved with the option off, and the faster is kept: other jobs share the
machine.

fogleman/primitive's RMSE on the same photos and settings is bench_primitive.py's (bench/results/
primitive.md): it has no lines, polylines, passes in one run or edge weighting to compare with.
    .venv/bin/python bench/bench_primitive_features.py [--quick]
"""

from __future__ import annotations

import importlib
import os
import sys
import time

import numpy as np
import torch
from PIL import Image

from _common import ROOT, report, table, timed_together
from demo import load_pack  # noqa: E402  (_common puts the repository root on sys.path)

QUICK = "--quick" in sys.argv
PHOTOS = sorted((ROOT / "bench" / "photos").glob("*.jpg"))[: 1 if QUICK else None]
SIZE, SHAPES = 256, 30 if QUICK else 100
EDGE_WEIGHTS = (0.5, 1.0, 2.0)
# fogleman/primitive, 100 triangles, same photos and settings (bench/results/primitive.md)
PRIMITIVE_RMSE = {"astronaut": 28.55, "chelsea": 13.92, "coffee": 17.14}


def rmse(image: np.ndarray, reference: np.ndarray, mask: np.ndarray | None = None) -> float:
    difference = (image[..., :3].astype(np.float64) - reference[..., :3]) ** 2
    if mask is not None:
        difference = difference[mask]
    return float(np.sqrt(difference.mean()))


def main():
    pack = load_pack()
    node = pack.nodes.primitives.PrimitiveMesh
    shapes_module = importlib.import_module(f"{pack.__name__}.utils.color_optimizer.shapes")
    engine = pack.utils.color_optimizer
    quality, costs = [], []
    for photo_path in PHOTOS:
        picture = Image.open(photo_path).convert("RGB")
        picture.thumbnail((SIZE, SIZE), Image.BILINEAR)
        photo = np.asarray(picture)
        image = torch.from_numpy(photo.astype(np.float32) / 255)[None]

        def reference(height: int, width: int):
            """The photo at the drawing's size (shrunk as above) and its edge pixels: the strongest 10%
            of its Sobel magnitudes (edge_weights clamps them to 1)."""
            shrunk = photo if photo.shape[:2] == (height, width) else np.asarray(picture.resize((width, height)))
            weights = shapes_module.edge_weights(torch.from_numpy(shrunk.astype(np.float32) / 255)[None], 1.0)
            return shrunk, (weights >= 2.0)[0].numpy()

        def run(**options):
            settings = dict(
                shapes=SHAPES,
                shape_type="triangle",
                alpha=128,
                candidates=1000,
                mutations=100,
                working_size=SIZE,
                output_size=SIZE,
                seed=0,
                frames=0,
            )
            start = time.perf_counter()
            result = node.run(image, **{**settings, **options})
            seconds = time.perf_counter() - start
            drawn = result[0][0].numpy() * 255
            target, edges = reference(*drawn.shape[:2])
            return seconds, rmse(drawn, target), rmse(drawn, target, edges)

        variants = [("triangle (off)", {})]
        variants += [(f"triangle, edge_weight {weight:g}", {"edge_weight": weight}) for weight in EDGE_WEIGHTS]
        variants += [("triangle, coarse 0.5", {"coarse": 0.5}), ("triangle, coarse 0.8", {"coarse": 0.8})]
        variants += [
            ("line", {"shape_type": "line"}),
            (f"passes triangle:{SHAPES // 2}, line:{SHAPES // 2}", {"passes": "triangle, line", "shapes": SHAPES // 2}),
        ]
        if photo_path == PHOTOS[0]:
            small = {"working_size": 128, "output_size": 128, "shapes": 30}
            variants += [("quadratic, 128 px, 30", {**small, "shape_type": "quadratic"})]
            variants += [("polyline, 128 px, 30", {**small, "shape_type": "polyline"})]
        measured = {}
        for _ in range(2):  # each variant twice, in turn: the faster time of each (same shapes both times)
            for name, options in variants:
                seconds, total, on_edges = run(**options)
                measured[name] = (min(seconds, measured.get(name, (seconds,))[0]), total, on_edges)
        for name, _ in variants:
            seconds, total, on_edges = measured[name]
            base = measured["quadratic, 128 px, 30" if "128 px" in name else "triangle (off)"]
            row = [
                photo_path.stem,
                name,
                f"{total:.2f} ({100 * (total / base[1] - 1):+.1f}%)",
                f"{on_edges:.2f} ({100 * (on_edges / base[2] - 1):+.1f}%)",
                f"{seconds:.2f} ({seconds / base[0]:.2f}x)",
                "-" if "128 px" in name else f"{PRIMITIVE_RMSE.get(photo_path.stem, float('nan')):.2f}",
            ]
            quality.append(row)
            print(" | ".join(row), flush=True)

    # the render alone: as many lines / polylines as triangles at 512 px, and the JSON against the SVG
    g = torch.Generator().manual_seed(0)
    for kinds in ((engine.TRIANGLE,), (engine.LINE,), (engine.POLYLINE,)):
        search = importlib.import_module(f"{pack.__name__}.utils.color_optimizer.search")
        kind, params = search.random_shapes(kinds, 100, 256, 256, g, "cpu")
        result = engine.Approximation(
            kind=kind.view(1, 100),
            params=params.view(1, 100, 8),
            color=torch.rand(1, 100, 3, generator=g),
            alpha=torch.full((1, 100), 0.5),
            count=torch.tensor([100]),
            error=torch.zeros(1, 101),
            background=torch.rand(1, 3, generator=g),
            height=256,
            width=256,
        )
        render, svg, json_list = timed_together(
            [
                lambda r=result: engine.render(r, 512, 512, 2.0),
                lambda r=result: engine.svg(r, 0, 512, 512, 2.0),
                lambda r=result: engine.shape_list(r, 0, 512, 512, 2.0),
            ],
            repeat=3,
        )
        costs.append([engine.KINDS[kinds[0]], f"{render * 1000:.0f}", f"{svg * 1000:.1f}", f"{json_list * 1000:.1f}"])
        print(" | ".join(costs[-1]), flush=True)
    base = float(costs[0][1])
    for row in costs:
        row[1] += f" ({float(row[1]) / base:.2f}x)"

    load = os.getloadavg()
    note = (
        f"{SHAPES} shapes at {SIZE} px, alpha 128, 1000 candidates, mutations 100, seed 0, on the CPU (numba's "
        "coverage sums; torch on one thread). RMSE 0..255 RGB against the photo shrunk to 256 px; edge RMSE over "
        "its edge pixels (the strongest 10% of its Sobel magnitudes); in brackets the change against triangles "
        "with every option off (the polyline: against the quadratic kind at the same size). fogleman/primitive: 100 "
        "triangles, bench_primitive.py's figure. Wall time of one node call (search and render), the faster of "
        "two interleaved with the option off, on a 2-core machine shared with other jobs (load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end): the ratios are rough."
    )
    header = ["photo", "option", "RMSE", "edge RMSE", "seconds", "primitive RMSE"]
    render_note = (
        "100 random shapes of one kind (drawn as the search draws them at 256 px) rendered at 512 px, scale 2, "
        "torch path on the CPU: median ms of 3 (render; SVG text; shapes_json's list). The cost ratio of the "
        "render is against triangles."
    )
    report(
        "primitive_features",
        "PrimitiveMesh's issue-34 options against the option off",
        [
            ("Quality and time", note + "\n\n" + table(header, quality)),
            ("Render and exports", render_note + "\n\n" + table(["kind", "render ms", "svg ms", "json ms"], costs)),
        ],
        ".venv/bin/python bench/bench_primitive_features.py" + (" --quick" if QUICK else ""),
    )


if __name__ == "__main__":
    main()
