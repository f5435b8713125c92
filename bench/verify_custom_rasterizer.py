"""utils/custom_rasterizer.py against Hunyuan3D-2's own `custom_rasterizer`, through Hunyuan3D-2's own
MeshRender. Builds that extension's CPU kernel from a Hunyuan3D-2 checkout into a temporary folder
(rasterizer.cpp and grid_neighbor.cpp as they are; rasterizer.h with its CUDA include left out and
__host__/__device__ defined empty; a stub for the CUDA entry point), loads its render.py and
mesh_render.py from the checkout, renders public meshes with MeshRender on each `custom_rasterizer` in
turn, and prints per case the face-id agreement on covered pixels (covered by either), the barycentric
error where the face ids agree, and the largest difference of MeshRender's normal, position and depth
images. Nothing of Hunyuan3D-2 is copied into this repository.

    git clone --depth 1 https://github.com/Tencent-Hunyuan/Hunyuan3D-2 /tmp/Hunyuan3D-2
    .venv/bin/python bench/verify_custom_rasterizer.py /tmp/Hunyuan3D-2 [--quick] [--build-dir DIR] [--cflags ...]

Needs g++ and ninja (torch.utils.cpp_extension), trimesh and opencv-python (MeshRender imports cv2);
--build-dir keeps the compiled kernel for the next run (the build takes minutes). Exits with status 1
when a case misses the bar of issue 17: face ids equal on >= 99.99% of covered pixels and a barycentric
mean error <= 1e-5. --cflags "-O3 -mfma -ffp-contract=fast" builds the kernel with fused multiply-adds,
as nvcc builds its CUDA twin by default (and g++ on aarch64): a view of the kernel's own spread, not of
ours (the pack follows the unfused source arithmetic).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utils.mesh_rasterizer import custom_rasterizer as ours  # noqa: E402

KERNEL = "hy3dgen/texgen/custom_rasterizer/lib/custom_rasterizer_kernel"
RENDER = "hy3dgen/texgen/custom_rasterizer/custom_rasterizer/render.py"
RENDERER = "hy3dgen/texgen/differentiable_renderer"
AGREEMENT, BARYCENTRIC_MEAN = 0.9999, 1e-5
CUDA_STUB = """#include "rasterizer.h"
std::vector<torch::Tensor> rasterize_image_gpu(torch::Tensor V, torch::Tensor F, torch::Tensor D,
    int width, int height, float occlusion_truncation, int use_depth_prior) {
    TORCH_CHECK(false, "custom_rasterizer_kernel: built for the CPU only");
}
"""


def build_kernel(checkout: Path, build_dir: Path, cflags: list[str]):
    """Hunyuan3D-2's custom_rasterizer_kernel, CPU only, compiled as its setup.py compiles the .cpp
    files (g++ without -march: no fused multiply-adds on x86-64)."""
    from torch.utils.cpp_extension import load

    source = checkout / KERNEL
    header = (source / "rasterizer.h").read_text()
    header = header.replace("#include <ATen/cuda/CUDAContext.h>", "")
    (build_dir / "rasterizer.h").write_text("#define __host__\n#define __device__\n" + header)
    for name in ("rasterizer.cpp", "grid_neighbor.cpp"):
        (build_dir / name).write_text((source / name).read_text())
    (build_dir / "cuda_stub.cpp").write_text(CUDA_STUB)
    sources = [str(build_dir / name) for name in ("rasterizer.cpp", "grid_neighbor.cpp", "cuda_stub.cpp")]
    return load("custom_rasterizer_kernel", sources, build_directory=str(build_dir), extra_cflags=cflags)


def load_hunyuan(checkout: Path, build_dir: Path, cflags: list[str]):
    """Hunyuan3D-2's custom_rasterizer module (its render.py on the kernel built here) and its MeshRender
    class, loaded from the checkout without importing hy3dgen (whose __init__ needs diffusers)."""
    sys.modules["custom_rasterizer_kernel"] = build_kernel(checkout, build_dir, cflags)
    spec = importlib.util.spec_from_file_location("hunyuan_custom_rasterizer", checkout / RENDER)
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    package = types.ModuleType("hunyuan_differentiable_renderer")
    package.__path__ = [str(checkout / RENDERER)]
    sys.modules[package.__name__] = package
    from hunyuan_differentiable_renderer.mesh_render import MeshRender

    return real, MeshRender


def uv_torus(rings: int = 64, sides: int = 24):
    """A torus with a seamed UV layout (u around the ring, v around the tube), for MeshRender's UV maps."""
    import trimesh

    u, v = np.meshgrid(np.linspace(0, 1, rings + 1), np.linspace(0, 1, sides + 1), indexing="ij")
    theta, phi = 2 * np.pi * u, 2 * np.pi * v
    tube = 1.0 + 0.4 * np.cos(phi)
    vertices = np.stack([tube * np.cos(theta), tube * np.sin(theta), 0.4 * np.sin(phi)], -1).reshape(-1, 3)
    index = np.arange(u.size).reshape(u.shape)
    a, b, c, d = index[:-1, :-1], index[1:, :-1], index[1:, 1:], index[:-1, 1:]
    faces = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])
    visual = trimesh.visual.TextureVisuals(uv=np.stack([u, v], -1).reshape(-1, 2))
    return trimesh.Trimesh(vertices, faces, visual=visual, process=False)


def public_meshes(checkout: Path, quick: bool) -> dict:
    """trimesh's procedural meshes, a UV-mapped torus and Hunyuan3D-2's demo mesh assets/1.glb."""
    import trimesh

    meshes = {
        "icosphere(4)": trimesh.creation.icosphere(subdivisions=4),
        "torus": trimesh.creation.torus(1.0, 0.4, 64, 32),
        "box": trimesh.creation.box(),
        "uv torus": uv_torus(),
    }
    if not quick:
        meshes["capsule"] = trimesh.creation.capsule(height=1.0, radius=0.4, count=[32, 32])
    demo = checkout / "assets/1.glb"
    if demo.is_file():
        meshes["Hunyuan3D-2 assets/1.glb"] = trimesh.load(demo, force="mesh")
    return meshes


def compare(real_rast: torch.Tensor, our_rast: torch.Tensor) -> dict:
    """MeshRender's rast_out [1,H,W,4] (barycentric, findices) of each rasterizer -> agreement figures."""
    real_faces, our_faces = real_rast[0, ..., 3], our_rast[0, ..., 3]
    covered = (real_faces > 0) | (our_faces > 0)
    agree = covered & (real_faces == our_faces)
    error = (real_rast[0, ..., :3] - our_rast[0, ..., :3]).abs()[agree]
    return {
        "covered": int(covered.sum()),
        "differ": int((covered & ~agree).sum()),
        "mean": float(error.mean()) if error.numel() else 0.0,
        "max": float(error.max()) if error.numel() else 0.0,
    }


def image_difference(real_image: torch.Tensor, our_image: torch.Tensor) -> str:
    return f"{float((real_image - our_image).abs().max()):.1e}"


def mesh_renders(MeshRender, modules: dict, mesh, camera: str, height: int, width: int) -> dict:
    """One MeshRender per custom_rasterizer module, each loaded with the mesh."""
    renderers = {}
    for label, module in modules.items():
        sys.modules["custom_rasterizer"] = module  # what MeshRender.__init__ imports
        renderer = MeshRender(default_resolution=(height, width), texture_size=height, camera_type=camera, device="cpu")
        renderer.load_mesh(mesh)
        renderers[label] = renderer
    return renderers


def compare_view(renderers: dict, elev: float, azim: float, height: int, width: int):
    """rast_out and MeshRender's normal, position and depth images of one view, real against ours."""
    rast, images = {}, {}
    for label, renderer in renderers.items():
        _, clip = renderer.get_pos_from_mvp(elev, azim, None, None)
        rast[label], _ = renderer.raster_rasterize(clip, renderer.pos_idx, (height, width))
        images[label] = torch.cat(
            [
                renderer.render_normal(elev, azim),
                renderer.render_position(elev, azim),
                renderer.render_depth(elev, azim),
            ],
            -1,
        )
    return compare(rast["real"], rast["ours"]), image_difference(images["real"], images["ours"])


def compare_uv_layout(renderers: dict):
    """The UV layout as MeshRender.uv_feature_map rasterizes it (z = 0 everywhere, so the tie rule
    decides every shared edge), and its render_uvpos map."""
    rast = {}
    for label, r in renderers.items():
        layout = torch.cat([r.vtx_uv * 2 - 1, torch.zeros_like(r.vtx_uv[:, :1]), torch.ones_like(r.vtx_uv[:, :1])], 1)
        rast[label], _ = r.raster_rasterize(layout, r.uv_idx, r.texture_size)
    uv_maps = {label: r.render_uvpos() for label, r in renderers.items()}
    return compare(rast["real"], rast["ours"]), image_difference(uv_maps["real"], uv_maps["ours"])


def compare_depth_prior(real, renderer, elev: float, azim: float, height: int, width: int) -> dict:
    """use_depth_prior = 1 (MeshRender leaves it off): the layer behind the first one's NDC depth, with an
    orthographic camera (w = 1: NDC depth is interpolated by the barycentrics as they are)."""
    _, clip = renderer.get_pos_from_mvp(elev, azim, None, None)
    faces = renderer.pos_idx
    first, barycentric = real.rasterize(clip, faces, (height, width))
    prior = real.interpolate(clip[..., 2:3], first, barycentric, faces)[0, ..., 0]
    prior = torch.where(first > 0, prior, -1.0).contiguous()
    rast = []
    for module in (real, ours):
        findices, barycentric = module.rasterize(clip, faces, (height, width), prior, 1)
        rast.append(torch.cat([barycentric, findices[..., None].float()], -1)[None])
    return compare(*rast)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a Hunyuan3D-2 checkout (git clone of Tencent-Hunyuan/Hunyuan3D-2)")
    parser.add_argument("--quick", action="store_true", help="fewer meshes, views and resolutions")
    parser.add_argument("--build-dir", type=Path, help="where to build the kernel (kept); a temporary folder if absent")
    parser.add_argument(
        "--cflags",
        default="-O3",
        help="g++ flags of the kernel's build, e.g. '-O3 -mfma' for fused multiply-adds (default: -O3)",
    )
    args = parser.parse_args()
    if not (args.checkout / KERNEL / "rasterizer.cpp").is_file():
        parser.error(f"checkout: {args.checkout} has no {KERNEL}/rasterizer.cpp; expected a Hunyuan3D-2 checkout")
    build_dir = args.build_dir or Path(tempfile.mkdtemp(prefix="hunyuan_kernel_"))
    build_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    real, MeshRender = load_hunyuan(args.checkout.resolve(), build_dir, args.cflags.split())
    print(
        f"Hunyuan3D-2 custom_rasterizer_kernel (CPU, {args.cflags}) built in {build_dir} "
        f"({time.perf_counter() - start:.0f} s)"
    )

    views = [(0, 0), (20, 45)] if args.quick else [(0, 0), (20, 45), (-30, 200), (60, 130)]
    resolutions = [512] if args.quick else [512, 1024, (480, 640)]
    rows, failures = [], 0

    def record(case, figures, images="-"):
        nonlocal failures
        share = 1 - figures["differ"] / max(figures["covered"], 1)
        ok = share >= AGREEMENT and figures["mean"] <= BARYCENTRIC_MEAN
        failures += not ok
        rows.append(
            case
            + [
                f"{figures['covered']:,}",
                f"{figures['differ']:,}",
                f"{100 * share:.4f}",
                f"{figures['mean']:.1e}",
                f"{figures['max']:.1e}",
                images,
                "" if ok else "FAIL",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)

    print(
        "mesh | faces | camera | elev, azim | H x W | covered px | face ids differ | agree % | bary mean err | "
        "bary max err | MeshRender images max diff"
    )
    for name, mesh in public_meshes(args.checkout, args.quick).items():
        faces = f"{len(mesh.faces):,}"
        for camera in ("orth", "perspective"):
            for resolution in resolutions:
                height, width = (resolution, resolution) if isinstance(resolution, int) else resolution
                renderers = mesh_renders(MeshRender, {"real": real, "ours": ours}, mesh, camera, height, width)
                for elev, azim in views:
                    record(
                        [name, faces, camera, f"{elev}, {azim}", f"{height} x {width}"],
                        *compare_view(renderers, elev, azim, height, width),
                    )
                if camera == "orth" and renderers["real"].vtx_uv is not None:
                    record([name, faces, "uv layout", "-", f"{height} x {height}"], *compare_uv_layout(renderers))
                if camera == "orth" and name == "torus":
                    record(
                        [name, faces, "orth, depth prior", "20, 45", f"{height} x {width}"],
                        compare_depth_prior(real, renderers["real"], 20, 45, height, width),
                    )

    covered = sum(int(row[5].replace(",", "")) for row in rows)
    differ = sum(int(row[6].replace(",", "")) for row in rows)
    print(
        f"\n{len(rows)} cases, {covered:,} covered pixels, face ids differ on {differ:,} "
        f"({100 * (1 - differ / max(covered, 1)):.5f}% agree); {failures} below the bar "
        f"(>= {100 * AGREEMENT:.2f}% face ids, barycentric mean error <= {BARYCENTRIC_MEAN:g}); "
        f"{time.perf_counter() - start:.0f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
