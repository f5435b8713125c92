"""Mesh rasterization: RasterKit against trimesh ray casting (the compile-free peer) and a brute-force
numpy reference, on spheres of 10K, 100K and 1M triangles at 1024x1024 and 2048x2048, one run.
    .venv/bin/python bench/bench_mesh.py [--quick]
"""
from __future__ import annotations

import sys

import numpy as np
import torch

from _common import report, table, timed

from utils import mesh_rasterizer as M  # noqa: E402  (_common puts the repository root on sys.path)
from utils.device import torch_device  # noqa: E402

QUICK = "--quick" in sys.argv
SIZES = {"10K": (50, 50), "100K": (158, 158), "1M": (500, 500)}  # uv-sphere rows x columns: about 4 rc faces


def sphere(rows_columns):
    import trimesh

    return trimesh.creation.uv_sphere(radius=1.0, count=list(rows_columns))


def clip_space(mesh, device):
    view = M.orbit_cameras([30.0], [20.0], 2.6)[0]
    vertices = torch.tensor(mesh.vertices, dtype=torch.float32)
    homogeneous = torch.cat([vertices, torch.ones(len(vertices), 1)], 1)
    return (homogeneous @ (M.perspective(50, 1.0, 0.1, 10) @ view).T).to(device), torch.tensor(mesh.faces).to(device)


def trimesh_rays(mesh, resolution):
    """The peer: one ray per pixel through trimesh's ray-triangle intersector (first hit)."""
    from trimesh.ray.ray_triangle import RayMeshIntersector

    eye = np.array([2.6 * np.cos(np.radians(20)) * np.sin(np.radians(30)), 2.6 * np.sin(np.radians(20)),
                    2.6 * np.cos(np.radians(20)) * np.cos(np.radians(30))])
    forward = -eye / np.linalg.norm(eye)
    right = np.cross(forward, [0, 1, 0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    t = np.tan(np.radians(25))
    u = (np.arange(resolution) + 0.5) / resolution * 2 - 1
    gx, gy = np.meshgrid(u, -u)
    directions = forward + (gx[..., None] * right + gy[..., None] * up) * t
    directions = directions.reshape(-1, 3)
    RayMeshIntersector(mesh).intersects_first(np.repeat(eye[None], len(directions), 0), directions)


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    rows = []
    cases = [("10K", 1024), ("100K", 1024)] if QUICK else [(s, r) for s in SIZES for r in (1024, 2048)]
    for name, resolution in cases:
        mesh = sphere(SIZES[name])
        clip, faces = clip_space(mesh, device)
        repeat = 3 if name != "1M" else 2
        full = timed(lambda: M.rasterize(clip, faces.int(), resolution, resolution), repeat, sync=sync)
        culled = timed(lambda: M.rasterize_views(clip[None], faces, resolution, resolution, cull_back_faces=True),
                       repeat, sync=sync)
        rows.append([f"{len(mesh.faces):,} triangles, {resolution}x{resolution}", f"{full * 1e3:.0f}",
                     f"{culled * 1e3:.0f}", ""])

    # trimesh tests every ray against every triangle its bounding box meets, which for rays through
    # the whole scene is all of them: its memory grows with rays x triangles, so only a 64x64 image
    mesh = sphere(SIZES["10K"])
    clip, faces = clip_space(mesh, device)
    ours = timed(lambda: M.rasterize(clip, faces.int(), 64, 64), 3, sync=sync)
    ours_culled = timed(lambda: M.rasterize_views(clip[None], faces, 64, 64, cull_back_faces=True), 3, sync=sync)
    peer = timed(lambda: trimesh_rays(mesh, 64), 1, 0)
    rows.append([f"{len(mesh.faces):,} triangles, 64x64", f"{ours * 1e3:.0f}", f"{ours_culled * 1e3:.0f}",
                 f"trimesh rays {peer * 1e3:.0f}"])

    # the brute-force reference of the tests (numpy, per triangle) on a small case
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests"))
    import importlib

    from demo import load_pack

    load_pack()  # the test module imports the pack as `rasterkit`
    reference = importlib.import_module("test_mesh_rasterizer").reference
    mesh = sphere((40, 40))
    clip, faces = clip_space(mesh, torch.device("cpu"))
    ours = timed(lambda: M.rasterize(clip, faces.int(), 256, 256), 3)
    brute = timed(lambda: reference(clip, faces.int(), 256, 256), 1, 0)
    rows.append([f"{len(mesh.faces):,} triangles, 256x256 (vs brute-force numpy)", f"{ours * 1e3:.0f}", "",
                 f"brute force {brute * 1e3:.0f}"])
    report("mesh", "Mesh rasterization (MeshRasterizer engine)", [
        (f"Median ms (RasterKit on {device}); the peer is trimesh's ray-triangle intersector, one ray per pixel",
         table(["case", "RasterKit rasterize (no culling, custom_rasterizer semantics)", "RasterKit, back faces culled",
                "peer"], rows)),
    ], "make bench  # or .venv/bin/python bench/bench_mesh.py")


if __name__ == "__main__":
    main()
