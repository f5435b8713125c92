"""The GPU targets of every node family, on GPU-resident data, in one run; CuPy kernels against the
torch path where both exist. Needs a CUDA device (prints a note and writes nothing without one).
    python bench/bench_gpu.py [--quick] [--device cpu]
Times are medians of 5 runs after one warm-up, measured with CUDA events on the current stream.
`--device cpu` runs the same cases on the CPU (wall clock), to check the script without a GPU; it
writes nothing. Issue 28's targets are printed beside their figures and listed at the end as pass/fail
(tools/gpu_check.sh keeps that list in its summary).
"""

from __future__ import annotations

import math
import os
import statistics
import sys

import numpy as np
import torch

from _common import ROOT, report, table, timed
from utils import gpu_rendering as R  # noqa: E402  (_common puts the repository root on sys.path)
from utils import mesh_rasterizer as M  # noqa: E402
from utils.core.device import cupy_usable  # noqa: E402
from utils.gpu_curves import alternating_sign, bezier_polylines  # noqa: E402
from utils.gpu_graph import GraphOptions, knn_graph  # noqa: E402
from utils.gpu_rendering.compositor import _bin  # noqa: E402

QUICK = "--quick" in sys.argv
CUDA = torch.device(sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda")
REPEAT, WARMUP = 5, 1
VERDICTS: list[str] = []  # one line per target of issue 28, in the order measured


def target(figure: str, limit: float, what: str, above: bool = False) -> str:
    """figure (a table cell, "-" where not measured) with its verdict against limit: below it, or above it
    where `above`; the verdict also goes to VERDICTS."""
    if figure == "-":
        verdict = "not measured"
    else:
        value = float(figure.replace(",", ""))
        verdict = "pass" if (value > limit if above else value < limit) else "FAIL"
    VERDICTS.append(f"{verdict}: {what} {'>' if above else '<'} {limit:g}: {figure}")
    return f"{figure} ({'>' if above else '<'} {limit:g}: {verdict})"


def gpu_seconds(fn, repeat=REPEAT, warmup=WARMUP) -> float:
    """Median seconds of fn() over `repeat` runs after `warmup`, timed with CUDA events (wall clock
    on the CPU)."""
    if CUDA.type != "cuda":
        return timed(fn, repeat, warmup)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def paths(fn):
    """(CuPy kernel ms, torch path ms) of fn(); the kernel column is '-' where CuPy is not usable."""
    torch_time = _with_env({"RASTERKIT_DISABLE_CUPY": "1"}, lambda: gpu_seconds(fn))
    kernel_time = gpu_seconds(fn) if cupy_usable(CUDA) else None
    return ("-" if kernel_time is None else ms(kernel_time)), ms(torch_time)


def _with_env(env, fn):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def boxes_xyxy(n, width, height, seed=0):
    g = torch.Generator().manual_seed(seed)
    size = torch.rand(n, 2, generator=g) * 260 + 40
    corner = torch.rand(n, 2, generator=g) * (torch.tensor([width, height]) - size)
    return torch.cat([corner, corner + size], 1)


def bench_boxes():
    rows = []
    images = torch.rand(1, 2160, 3840, 3, device=CUDA)
    for n in (100, 1000):
        prims = R.rounded_boxes(0, boxes_xyxy(n, 3840, 2160).to(CUDA), 3.0, 12.0, (1, 0, 0, 1), (0, 1, 0, 0.25))
        kernel, torch_path = paths(lambda: R.draw(images, prims))
        kernel = target(kernel, 0.3 if n == 100 else 0.5, f"draw() 4K, {n} boxes, kernel path, ms")
        # the compositing kernel alone, on pairs binned beforehand (it writes image, alpha and layer)
        pairs = _bin(prims, 0, 1, 2160, 3840, R.TILE)
        outputs = (
            torch.empty_like(images),
            torch.empty(1, 2160, 3840, device=CUDA),
            torch.empty(1, 2160, 3840, 4, device=CUDA),
        )
        binning = gpu_seconds(lambda: _bin(prims, 0, 1, 2160, 3840, R.TILE))
        only = "-"
        if cupy_usable(CUDA):
            from utils.gpu_rendering.compositor_cuda import composite_tiles_cuda

            only = ms(gpu_seconds(lambda: composite_tiles_cuda(images, *outputs, pairs, prims, None, R.TILE)))
        rows.append(
            [f"{n} rounded boxes (stroke 3, radius 12, fill 0.25), 3840x2160", kernel, torch_path, ms(binning), only]
        )
    a = torch.rand(500, 2, device=CUDA) * torch.tensor([3840.0, 2160.0], device=CUDA)
    prims = R.segments(0, a, a + torch.randn(500, 2, device=CUDA) * 150, 2.0, (1, 1, 1, 0.8))
    rows.append(["500 segments 2 px, 3840x2160", *paths(lambda: R.draw(images, prims)), "", ""])
    clone = gpu_seconds(lambda: images.clone())
    return (
        table(["case", "draw, CuPy kernel", "draw, torch path", "binning", "compositing kernel alone"], rows)
        + f"\n\nimages.clone() of the same frame: {ms(clone)} ms. draw() returns image, alpha and layer (a new "
        "frame, a mask and an RGBA layer), so it writes 2.7x the bytes of a clone."
    )


def bench_links():
    """A 4K frame with 100 points (k-NN links as Bezier curves) and 100 boxes: graph, curves, lines,
    boxes and composite for a batch of GPU-resident frames, per frame."""
    frames = 8 if QUICK else 30
    g = torch.Generator().manual_seed(0)
    base = torch.rand(1, 100, 2, generator=g) * torch.tensor([3840.0, 2160.0])
    xy = (base + torch.cumsum(torch.randn(frames, 100, 2, generator=g) * 3, 0)).to(CUDA)
    visible = torch.ones(frames, 100, dtype=torch.bool, device=CUDA)
    images = torch.rand(frames, 2160, 3840, 3, device=CUDA)
    boxes = torch.cat([boxes_xyxy(100, 3840, 2160, seed=t) for t in range(frames)]).to(CUDA)
    box_frame = torch.arange(frames, device=CUDA).repeat_interleave(100)
    options = GraphOptions(k=8)
    edge_count = []

    def pipeline():
        edges = knn_graph(xy, visible, options, device=CUDA)
        pairs, frame = edges.flat()
        start, end = xy[frame, pairs[:, 0]], xy[frame, pairs[:, 1]]
        points, lengths = bezier_polylines(start, end, 0.2, alternating_sign(pairs[:, 0], pairs[:, 1]))
        prims = R.concat(
            R.rounded_boxes(box_frame, boxes, 3.0, 12.0, (0, 1, 0, 1), (0, 1, 0, 0.2)),
            R.polylines(frame, points, lengths, 2.0, (1, 1, 1, 0.8)),
            R.discs(torch.arange(frames, device=CUDA).repeat_interleave(100), xy.reshape(-1, 2), 3.0, (1, 1, 1, 0.8)),
        )
        edge_count.append(pairs.shape[0] / frames)
        return R.draw(images, prims)

    kernel, torch_path = paths(pipeline)

    def per_frame(text):
        return "-" if text == "-" else f"{float(text) / frames:.2f}"

    rows = [
        [
            f"{frames} frames 3840x2160: 100 points, {edge_count[-1]:.0f} Bezier links per frame, 100 boxes",
            target(per_frame(kernel), 1.0, "4K links frame, kernel path, ms per frame"),
            per_frame(torch_path),
        ]
    ]
    knn_rows = []
    for n in (100, 1000, 5000):
        points = torch.rand(60, n, 2, device=CUDA) * 1000
        shown = torch.ones(60, n, dtype=torch.bool, device=CUDA)
        knn_rows.append(
            [f"N = {n}, 60 frames", ms(gpu_seconds(lambda: knn_graph(points, shown, GraphOptions(k=3), device=CUDA)))]
        )
    return (
        table(["case", "ms per frame, CuPy kernel", "ms per frame, torch path"], rows)
        + "\n\n"
        + table(["kNN graph (k=3) over all frames", "ms"], knn_rows)
    )


def bench_series():
    rows = []
    for count in (5000, 50000):
        values = torch.cumsum(torch.randn(count, 100, device=CUDA), 1)
        for dtype in (torch.uint8, torch.float32):
            seconds = gpu_seconds(lambda: R.render_polylines(values, 224, 224, mode="aliased", dtype=dtype))
            rows.append(
                [
                    f"{count} images 224x224, aliased, {str(dtype)[6:]}",
                    ms(seconds),
                    target(
                        f"{count / seconds:.0f}",
                        1e6,
                        f"line plots, {count} aliased {str(dtype)[6:]}, images/s",
                        above=True,
                    ),
                ]
            )
    values = torch.cumsum(torch.randn(5000, 100, device=CUDA), 1)
    seconds = gpu_seconds(lambda: R.render_polylines(values, 224, 224, mode="antialiased", line_width=2.0))
    rows.append(["5000 images 224x224, anti-aliased 2 px, float32", ms(seconds), f"{5000 / seconds:,.0f}"])
    return table(["case (100-point series)", "ms", "images/s"], rows)


def uv_sphere(rows, columns):
    """A closed sphere of 2 * columns * (rows - 1) triangles: rows - 1 rings of quads, a fan at each pole."""
    theta = torch.linspace(0, math.pi, rows + 1)[1:-1]
    phi = torch.linspace(0, 2 * math.pi, columns + 1)[:-1]
    ring = torch.stack(
        [
            torch.sin(theta)[:, None] * torch.cos(phi),
            torch.cos(theta)[:, None].expand(-1, columns),
            torch.sin(theta)[:, None] * torch.sin(phi),
        ],
        -1,
    ).reshape(-1, 3)
    vertices = torch.cat([torch.tensor([[0.0, 1, 0]]), ring, torch.tensor([[0.0, -1, 0]])])

    def index(r, c):
        return 1 + r * columns + c % columns

    c = torch.arange(columns)
    faces = [torch.stack([torch.zeros_like(c), index(0, c + 1), index(0, c)], 1)]
    for r in range(rows - 2):
        faces += [
            torch.stack([index(r, c), index(r, c + 1), index(r + 1, c)], 1),
            torch.stack([index(r, c + 1), index(r + 1, c + 1), index(r + 1, c)], 1),
        ]
    last = len(vertices) - 1
    faces.append(torch.stack([torch.full_like(c, last), index(rows - 2, c), index(rows - 2, c + 1)], 1))
    return vertices, torch.cat(faces)


def bench_mesh():
    rows = []
    projection = M.perspective(50, 1.0, 0.1, 10) @ M.orbit_cameras([30.0], [20.0], 2.6)[0]
    for name, (r, c) in {"10K": (71, 71), "100K": (224, 224), "1M": (707, 707)}.items():
        vertices, faces = uv_sphere(r, c)
        clip = (torch.cat([vertices, torch.ones(len(vertices), 1)], 1) @ projection.T).to(CUDA)
        faces = faces.to(CUDA)
        for resolution in (1024, 2048):
            full = paths(lambda: M.rasterize(clip, faces, resolution, resolution))
            if name == "1M" and resolution == 2048:
                full = (target(full[0], 2.0, "1M triangles at 2048^2, kernel path, ms"), full[1])
            if name == "10K" and resolution == 1024:  # under 20 ms and within 5x of the kernel path
                limit = min(20.0, 5 * float(full[0])) if full[0] != "-" else 20.0
                full = (full[0], target(full[1], limit, "10K triangles at 1024^2, torch path (20 ms, 5x kernel), ms"))
            culled = paths(lambda: M.rasterize_views(clip[None], faces, resolution, resolution, cull_back_faces=True))
            rows.append([f"{name} ({len(faces):,} triangles), {resolution}x{resolution}", *full, *culled])
    return table(["case", "CuPy kernel", "torch path", "culled, CuPy kernel", "culled, torch path"], rows)


def bench_primitive():
    """The whole node (search and the render at 1024 px), CuPy kernels and torch path, and the RMSE
    (0..255, RGB) of each against the photograph at 256 px; fogleman/primitive's RMSE on the same
    photographs and settings is in the CPU section of bench/RESULTS.md (bench_primitive.py). The kernels'
    time is a median of REPEAT runs after WARMUP; the torch path's, which takes seconds, one run."""
    from PIL import Image

    from demo import load_pack

    node = load_pack().nodes.primitives.PrimitiveMesh
    rows = []
    for photo_path in sorted((ROOT / "bench" / "photos").glob("*.jpg"))[: 1 if QUICK else None]:
        picture = Image.open(photo_path).convert("RGB")
        picture.thumbnail((256, 256), Image.BILINEAR)
        image = torch.from_numpy(np.asarray(picture).astype(np.float32) / 255)[None]
        for shape_type, shapes in (("triangle", 100), ("combo", 100)):

            def run():
                return node.run(
                    image,
                    shapes=shapes,
                    shape_type=shape_type,
                    alpha=128,
                    candidates=1000,
                    mutations=100,
                    working_size=256,
                    output_size=1024,
                    seed=0,
                )

            def measured(repeat=REPEAT, warmup=WARMUP):
                result, *_ = run()
                small = torch.nn.functional.interpolate(result.permute(0, 3, 1, 2), size=image.shape[1:3], mode="area")
                error = ((small[0].permute(1, 2, 0).cpu().numpy() * 255 - np.asarray(picture)) ** 2).mean() ** 0.5
                return f"{gpu_seconds(run, repeat, warmup):.3f}", f"{error:.2f}"

            kernel = measured() if cupy_usable(CUDA) else ("-", "-")
            kernel = (
                target(
                    kernel[0],
                    0.5 if shape_type == "triangle" else 1.0,
                    f"PrimitiveMesh {photo_path.stem} 100 {shape_type}s 256 px -> 1024 px, kernels, s",
                ),
                kernel[1],
            )
            # seconds a run on the torch path: one timed run after the one that measured its error
            torch_path = _with_env({"RASTERKIT_DISABLE_CUPY": "1"}, lambda: measured(1, 0))
            rows.append([photo_path.stem, shape_type, shapes, *kernel, *torch_path])
    return table(
        ["photo", "shape_type", "shapes", "s, CuPy kernels", "RMSE, CuPy kernels", "s, torch path", "RMSE, torch path"],
        rows,
    )


def main():
    if CUDA.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: bench_gpu.py measures GPU targets and writes nothing here")
        return
    sections = []
    for title, fn in (
        ("Rounded boxes and segments (draw, GPU-resident frame), ms", bench_boxes),
        ("Line links on 4K video, GPU-resident frames", bench_links),
        ("Batch line plots (render_polylines, GPU-resident series and images)", bench_series),
        ("Mesh rasterization (rasterize; sphere seen from one camera), ms", bench_mesh),
        ("PrimitiveMesh node, 256 px working size, 1000 candidates, mutations 100", bench_primitive),
    ):
        print(f"== {title}", flush=True)
        sections.append((title, fn()))
        print(sections[-1][1], flush=True)
    sections.append(("Targets of issue 28", "\n".join(f"- {line}" for line in VERDICTS)))
    print(f"== {sections[-1][0]}{'' if CUDA.type == 'cuda' else ' (on the CPU: a check of the script, not figures)'}")
    print(sections[-1][1], flush=True)
    if CUDA.type != "cuda":
        return  # a check of the script, not figures
    kernels = "CuPy kernels: usable" if cupy_usable(CUDA) else "CuPy kernels: not usable (torch path only)"
    report("gpu", f"GPU figures ({kernels})", sections, "python bench/bench_gpu.py  # on a CUDA machine")


if __name__ == "__main__":
    main()
