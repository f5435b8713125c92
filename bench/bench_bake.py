"""Texture baking: uv_maps and bake (six 512x512 views) at 1K and 4K textures on a UV sphere of ~40K
triangles (trimesh), milliseconds and peak memory (beyond the inputs), one short run (4K takes a while
on a CPU).
    .venv/bin/python bench/bench_bake.py [--quick]
"""

from __future__ import annotations

import math
import sys

import torch

from _common import peak_memory, report, table, timed
from utils import mesh_rasterizer as M  # noqa: E402
from utils.core.device import torch_device  # noqa: E402
from utils.mesh_rasterizer import bake as B  # noqa: E402  (_common puts the repository root on sys.path)

QUICK = "--quick" in sys.argv
TEXTURE_SIZES = (1024,) if QUICK else (1024, 4096)
VIEW_SIZE = 512


def sphere(device):
    """vertices, normals [V,3], uvs [V,2] (longitude, latitude) and faces [F,3] of a trimesh UV sphere."""
    import trimesh

    mesh = trimesh.creation.uv_sphere(radius=1.0, count=[100, 100])
    vertices = torch.tensor(mesh.vertices, dtype=torch.float32)
    uvs = torch.stack(
        [
            torch.atan2(vertices[:, 0], vertices[:, 2]) / (2 * math.pi) + 0.5,
            torch.asin(vertices[:, 1].clamp(-1, 1)) / math.pi + 0.5,
        ],
        -1,
    )
    faces = torch.tensor(mesh.faces)
    return vertices.to(device), vertices.to(device), uvs.to(device), faces.to(device)


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    vertices, normals, uvs, faces = sphere(device)
    view = M.orbit_cameras(*zip(*M.STANDARD_VIEWS, strict=True), 3.0).to(device)
    projection = M.orthographic(1.1, 1.0, 0.1, 10.0).to(device)
    images = torch.rand(len(view), VIEW_SIZE, VIEW_SIZE, 3, device=device)
    rows = []
    for size in TEXTURE_SIZES:

        def maps():
            return B.uv_maps(vertices, normals, uvs, faces, faces, size)

        (position, normal, mask), maps_peak = peak_memory(maps, device)

        def bake():
            return B.bake(images, view, projection, vertices, faces, position, normal, mask)

        _, bake_peak = peak_memory(bake, device)
        repeat = 3 if size <= 1024 else 1
        rows.append(
            [
                f"{size}x{size}",
                f"{timed(maps, repeat, 0, sync) * 1e3:.0f}",
                maps_peak,
                f"{timed(bake, repeat, 0, sync) * 1e3:.0f}",
                bake_peak,
            ]
        )
    text = table(["texture", "uv_maps ms", "uv_maps peak", "bake (6 views) ms", "bake peak"], rows)
    report(
        "bake",
        f"Texture baking ({len(faces)} triangles, six {VIEW_SIZE}x{VIEW_SIZE} views)",
        [("uv_maps and bake", text)],
        "python bench/bench_bake.py",
    )


if __name__ == "__main__":
    main()
