"""Peak memory and time of the mesh rasterizer at ~1M triangles (a 500 x 500 uv sphere, 996,000
triangles) at 1024x1024 and 2048x2048: custom_rasterizer.rasterize (Hunyuan3D-2's call, tri int32) and
the engine's rasterize_views (tri int64, near-plane clipping on, as the nodes call it), on torch's
threads. Peak memory as bench/_common.peak_memory measures it (the process's peak RSS above its RSS at
the call, after malloc_trim; the inputs exist before the call and are not counted); time: the median
of --repeat calls after one warm-up.
    .venv/bin/python bench/bench_mesh_memory.py [--repeat 7] [--faces 500]
"""

from __future__ import annotations

import argparse

import torch

from _common import machine, peak_memory, table, timed
from bench_mesh import clip_space, sphere
from utils.mesh_rasterizer import custom_rasterizer, raster  # noqa: E402  (_common puts the root on sys.path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--faces", type=int, default=500, help="uv-sphere rows and columns (500: 996,000 triangles)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    args = parser.parse_args()
    mesh = sphere((args.faces, args.faces))
    clip, faces = clip_space(mesh, torch.device("cpu"))
    tri = faces.int()
    rows = []
    for resolution in args.sizes:
        calls = {
            "custom_rasterizer.rasterize": lambda r=resolution: custom_rasterizer.rasterize(clip[None], tri, (r, r)),
            "rasterize_views": lambda r=resolution: raster.rasterize_views(clip[None], faces, r, r),
        }
        for name, fn in calls.items():
            fn()  # compiles or loads numba's loops
            _, memory = peak_memory(fn, "cpu")
            seconds = timed(fn, args.repeat)
            case = f"{name}, {len(mesh.faces):,} triangles, {resolution}x{resolution}"
            rows.append([case, f"{seconds * 1e3:.0f}", memory])
    print(machine())
    print(table(["case", "median ms", "peak memory"], rows))


if __name__ == "__main__":
    main()
