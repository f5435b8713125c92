"""A real caller's nvdiffrast renderer on the CPU through the pack's stand-in: MV-Adapter's mesh renderer
(mvadapter/utils/mesh_utils: camera.py, mesh.py, utils.py, render.py, as ComfyUI-3D-Pack ships it,
unmodified) renders the bundled spot.glb from six orthographic views: mask, position, depth, normal,
texture and antialiased texture, each checked for NaN, its mask against RasterKit's own rasterizer (the
same cameras; nvdiffrast's rows run bottom-up), and timed. The caller's code is not part of the pack:
give its folder.
    .venv/bin/python bench/run_nvdiffrast_caller.py MV_ADAPTER/mvadapter/utils/mesh_utils [OUT.png]
(MV_ADAPTER: ComfyUI-3D-Pack's Gen_3D_Modules/MV_Adapter)
"""

from __future__ import annotations

import importlib
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

from _common import ROOT
from utils.mesh_rasterizer import nvdiffrast  # noqa: E402
from utils.mesh_rasterizer import raster as M  # noqa: E402  (_common puts the repository root on sys.path)


def load_renderer(folder: Path):
    """The caller's mesh_utils modules as a package of their own (its __init__ pulls in the whole
    MV-Adapter pipeline; these four modules need only torch, numpy, trimesh and PIL)."""
    package = types.ModuleType("caller_mesh_utils")
    package.__path__ = [str(folder)]
    sys.modules["caller_mesh_utils"] = package
    return [importlib.import_module(f"caller_mesh_utils.{name}") for name in ("camera", "mesh", "utils", "render")]


def main():
    folder = Path(sys.argv[1])
    package = types.ModuleType("nvdiffrast")
    package.__path__, package.torch = [], nvdiffrast
    sys.modules["nvdiffrast"], sys.modules["nvdiffrast.torch"] = package, nvdiffrast  # as register_standins does
    camera, mesh_module, caller_utils, render = load_renderer(folder)
    mesh = mesh_module.load_mesh(
        str(ROOT / "example_workflows" / "assets" / "spot.glb"), rescale=True, move_to_center=True, device="cpu"
    )
    cameras = camera.get_orthogonal_camera(
        elevation_deg=[0, 0, 0, 0, 89.99, -89.99],
        distance=[1.8] * 6,
        left=-0.55,
        right=0.55,
        bottom=-0.55,
        top=0.55,
        azimuth_deg=[x - 90 for x in [0, 90, 180, 270, 180, 180]],
        device="cpu",
    )
    ctx = render.NVDiffRastContextWrapper(device="cpu", context_type="cuda")
    start = time.perf_counter()
    out = render.render(ctx, mesh, cameras, 512, 512, render_attr=True, antialias_attr=True, render_normal=True)
    seconds = time.perf_counter() - start
    print(f"{len(mesh.t_pos_idx)} triangles, 6 views 512x512: render() took {seconds:.2f} s on the CPU")
    for name in ("mask", "pos", "depth", "normal", "attr"):
        value = getattr(out, name)
        print(
            f"  {name}: shape {tuple(value.shape)}, finite {bool(torch.isfinite(value.float()).all())}, "
            f"range {float(value.float().min()):.3f}..{float(value.float().max()):.3f}"
        )
    clip = caller_utils.get_clip_space_position(mesh.v_pos, cameras.mvp_mtx)
    findices, _ = M.rasterize_views(clip, mesh.t_pos_idx, 512, 512)
    ours = findices > 0  # the engine's rows also grow with NDC y; its pixel centres sit half a pixel apart
    agree = (ours == out.mask).float().mean().item()
    print(
        f"  mask agrees with RasterKit's rasterizer on {agree * 100:.2f}% of pixels "
        f"({int(out.mask.sum())} vs {int(ours.sum())} covered)"
    )
    if len(sys.argv) > 2:
        from PIL import Image

        attr = out.attr.flip(1).clamp(0, 1)  # nvdiffrast's rows run bottom-up: flip to view
        grid = torch.cat(list(attr), 1).numpy()
        Image.fromarray((grid * 255).astype(np.uint8)).save(sys.argv[2])
        print(f"  wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
