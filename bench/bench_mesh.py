"""Mesh rasterization: RasterKit against trimesh ray casting (the compile-free peer) and a brute-force
numpy reference, on spheres of 10K, 100K and 1M triangles at 1024x1024 and 2048x2048, one run.
    .venv/bin/python bench/bench_mesh.py [--quick] [--hunyuan CHECKOUT]

--hunyuan: also Hunyuan3D-2's own CPU kernel (custom_rasterizer), built from a checkout's sources
with -O3 as its setup.py builds it (bench/verify_custom_rasterizer.py's build; needs g++ and ninja;
kept in bench/peers/custom_rasterizer_build, git-ignored, never shipped), against RasterKit's
custom_rasterizer on one thread (the kernel is single-threaded) and on torch's threads, on spheres
and Hunyuan3D-2's assets/1.glb at 1024x1024 and 2048x2048, with peak memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from _common import ROOT, peak_memory, report, table, timed
from utils import mesh_rasterizer as M  # noqa: E402  (_common puts the repository root on sys.path)
from utils.core.device import torch_device  # noqa: E402

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

    eye = np.array(
        [
            2.6 * np.cos(np.radians(20)) * np.sin(np.radians(30)),
            2.6 * np.sin(np.radians(20)),
            2.6 * np.cos(np.radians(20)) * np.cos(np.radians(30)),
        ]
    )
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


def hunyuan_section(checkout: str) -> tuple[str, str]:
    """Hunyuan3D-2's CPU kernel against RasterKit's custom_rasterizer (the same call, the same
    semantics), medians of 3, with each call's peak memory."""
    import trimesh

    from utils.mesh_rasterizer import custom_rasterizer as ours
    from verify_custom_rasterizer import load_hunyuan

    build = ROOT / "bench" / "peers" / "custom_rasterizer_build"
    build.mkdir(parents=True, exist_ok=True)
    real, _ = load_hunyuan(Path(checkout), build, ["-O3"])
    demo = trimesh.load(Path(checkout) / "assets" / "1.glb", force="mesh")
    vertices = np.asarray(demo.vertices, dtype=np.float32)
    vertices = (vertices - (vertices.max(0) + vertices.min(0)) / 2) / (vertices.max(0) - vertices.min(0)).max() * 2
    meshes = [
        ("sphere", sphere(SIZES["10K"])),
        ("sphere", sphere(SIZES["100K"])),
        ("Hunyuan3D-2 assets/1.glb", trimesh.Trimesh(vertices, demo.faces, process=False)),
    ]
    threads = torch.get_num_threads()
    rows = []
    for name, mesh in meshes:
        clip, faces = clip_space(mesh, torch.device("cpu"))
        for resolution in (1024, 2048):

            def peer():
                return real.rasterize(clip[None], faces.int(), (resolution, resolution))

            def rasterkit():
                return ours.rasterize(clip[None], faces.int(), (resolution, resolution))

            figures = {}
            for label, fn, count in (("peer", peer, 1), ("one", rasterkit, 1), ("all", rasterkit, threads)):
                torch.set_num_threads(count)
                _, memory = peak_memory(fn, "cpu")
                figures[label] = (timed(fn, 3), memory)
            torch.set_num_threads(threads)
            peer_ms = figures["peer"][0] * 1e3
            rows.append(
                [
                    f"{name}, {len(mesh.faces):,} triangles, {resolution}x{resolution}",
                    f"{peer_ms:.0f} ({figures['peer'][1]})",
                ]
                + [
                    f"{figures[k][0] * 1e3:.0f} ({figures[k][1]}), {peer_ms / (figures[k][0] * 1e3):.2f}x"
                    for k in ("one", "all")
                ]
            )
    return (
        "custom_rasterizer.rasterize: Hunyuan3D-2's CPU kernel (g++ -O3) against RasterKit, median ms "
        "(peak memory), RasterKit's speed as a multiple of the kernel's",
        table(
            ["case", "Hunyuan3D-2 CPU kernel (1 thread)", "RasterKit, 1 thread", f"RasterKit, {threads} threads"], rows
        ),
    )


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
        culled = timed(
            lambda: M.rasterize_views(clip[None], faces, resolution, resolution, cull_back_faces=True),
            repeat,
            sync=sync,
        )
        rows.append(
            [
                f"{len(mesh.faces):,} triangles, {resolution}x{resolution}",
                f"{full * 1e3:.0f}",
                f"{culled * 1e3:.0f}",
                "",
            ]
        )

    # trimesh tests every ray against every triangle its bounding box meets, which for rays through
    # the whole scene is all of them: its memory grows with rays x triangles, so only a 64x64 image
    mesh = sphere(SIZES["10K"])
    clip, faces = clip_space(mesh, device)
    ours = timed(lambda: M.rasterize(clip, faces.int(), 64, 64), 3, sync=sync)
    ours_culled = timed(lambda: M.rasterize_views(clip[None], faces, 64, 64, cull_back_faces=True), 3, sync=sync)
    peer = timed(lambda: trimesh_rays(mesh, 64), 1, 0)
    rows.append(
        [
            f"{len(mesh.faces):,} triangles, 64x64",
            f"{ours * 1e3:.0f}",
            f"{ours_culled * 1e3:.0f}",
            f"trimesh rays {peer * 1e3:.0f}",
        ]
    )

    # the brute-force reference of the tests (numpy, per triangle) on a small case
    tests = __import__("pathlib").Path(__file__).resolve().parents[1] / "tests"
    sys.path[:0] = [str(tests / "mesh_rasterizer"), str(tests)]
    import importlib

    from demo import load_pack

    load_pack()  # the test module imports the pack as `rasterkit`
    reference = importlib.import_module("test_mesh_rasterizer").reference
    mesh = sphere((40, 40))
    clip, faces = clip_space(mesh, torch.device("cpu"))
    ours = timed(lambda: M.rasterize(clip, faces.int(), 256, 256), 3)
    brute = timed(lambda: reference(clip, faces.int(), 256, 256), 1, 0)
    rows.append(
        [
            f"{len(mesh.faces):,} triangles, 256x256 (vs brute-force numpy)",
            f"{ours * 1e3:.0f}",
            "",
            f"brute force {brute * 1e3:.0f}",
        ]
    )
    sections = [
        (
            f"Median ms (RasterKit on {device}); the peer is trimesh's ray-triangle intersector, one ray per pixel",
            table(
                [
                    "case",
                    "RasterKit rasterize (no culling, custom_rasterizer semantics)",
                    "RasterKit, back faces culled",
                    "peer",
                ],
                rows,
            ),
        )
    ]
    if "--hunyuan" in sys.argv:
        sections.append(hunyuan_section(sys.argv[sys.argv.index("--hunyuan") + 1]))
    report(
        "mesh",
        "Mesh rasterization (MeshRasterizer engine)",
        sections,
        "make bench  # or .venv/bin/python bench/bench_mesh.py [--hunyuan <Hunyuan3D-2 checkout>]",
    )


if __name__ == "__main__":
    main()
