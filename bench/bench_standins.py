"""The compiled 3D extensions' stand-ins on the CPU: utils/nvdiffrast (nvdiffrast.torch's four ops on
six 512x512 views of a ~40K-triangle UV sphere) and utils/mesh_inpaint (Hunyuan3D-2.1's
mesh_inpaint_processor on a 1024^2 texture of the same sphere, 60% of its columns known), with Bake
Texture's mesh inpainting. The real nvdiffrast needs CUDA to build, so it has no CPU figure here;
--hunyuan-inpaint DIR also times Hunyuan3D-2.1's extension built from source in DIR (c++ -O3 -shared
-std=c++14 -fPIC $(python -m pybind11 --includes) mesh_inpaint_processor.cpp -o
mesh_inpaint_processor$(python3-config --extension-suffix)) and checks the stand-in's outputs against it.
    .venv/bin/python bench/bench_standins.py [--hunyuan-inpaint DIR]
"""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import torch

from _common import report, table, timed, timed_together
from utils.mesh_rasterizer import bake as B  # noqa: E402  (_common puts the repository root on sys.path)
from utils.mesh_rasterizer import inpaint as MI  # noqa: E402
from utils.mesh_rasterizer import nvdiffrast as dr  # noqa: E402
from utils.mesh_rasterizer import raster as M  # noqa: E402

VIEW_SIZE, TEXTURE_SIZE = 512, 1024


def sphere():
    """vertices [V,3], uvs [V,2] (longitude, latitude) and faces int32 [F,3] of a trimesh UV sphere."""
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
    return vertices, uvs, torch.tensor(mesh.faces, dtype=torch.int32)


def nvdiffrast_rows(vertices, uvs, faces):
    view = M.orbit_cameras(*zip(*M.STANDARD_VIEWS, strict=False), 3.0)
    projection = M.perspective(40.0, 1.0, 0.1, 10.0)
    homogeneous = torch.cat([vertices, torch.ones_like(vertices[:, :1])], 1)
    pos = torch.einsum("ij,bjk,nk->bni", projection, view, homogeneous).contiguous()
    ctx = dr.RasterizeCudaContext()
    texture = torch.rand(1, 1024, 1024, 3)
    rast, rast_db = dr.rasterize(ctx, pos, faces, (VIEW_SIZE, VIEW_SIZE))
    uv, _ = dr.interpolate(uvs[None], rast, faces)
    colour = dr.texture(texture, uv, filter_mode="linear")
    steps = {
        "rasterize (with rast_db)": lambda: dr.rasterize(ctx, pos, faces, (VIEW_SIZE, VIEW_SIZE)),
        "interpolate (uv)": lambda: dr.interpolate(uvs[None], rast, faces),
        "texture (linear, 1024^2)": lambda: dr.texture(texture, uv, filter_mode="linear"),
        "antialias (rgb)": lambda: dr.antialias(colour, rast, pos, faces),
    }
    seconds = timed_together(list(steps.values()), repeat=3)
    covered = int((rast[..., 3] > 0).sum())
    rows = [[name, f"{s * 1e3:.0f}", "needs CUDA to build"] for name, s in zip(steps, seconds, strict=False)]
    return rows, covered


def inpaint_inputs(vertices, uvs, faces):
    columns = torch.arange(TEXTURE_SIZE)
    texture = torch.rand(TEXTURE_SIZE, TEXTURE_SIZE, 3)
    mask = ((columns < 0.6 * TEXTURE_SIZE)[None].expand(TEXTURE_SIZE, -1) * 255).to(torch.uint8)
    return (texture.numpy(), mask.numpy(), vertices.numpy(), uvs.numpy(), faces.numpy(), faces.numpy())


def real_extension(folder):
    spec = importlib.util.spec_from_file_location(
        "mesh_inpaint_processor", next(iter(__import__("pathlib").Path(folder).glob("mesh_inpaint_processor*.so")))
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    torch.manual_seed(0)
    vertices, uvs, faces = sphere()
    rows, covered = nvdiffrast_rows(vertices, uvs, faces)
    nvdiffrast_text = table(["op (6 views, 512x512)", "stand-in, CPU ms", "nvdiffrast"], rows)
    nvdiffrast_text += f"\n\n{covered} covered pixels; {len(faces)} triangles."
    inputs = inpaint_inputs(vertices, uvs, faces)
    real = None
    if "--hunyuan-inpaint" in sys.argv:
        real = real_extension(sys.argv[sys.argv.index("--hunyuan-inpaint") + 1])
    inpaint_rows, checks = [], []
    for method in ("smooth", "forward"):
        ours = MI.meshVerticeInpaint(*inputs, method=method)
        calls = [lambda m=method: MI.meshVerticeInpaint(*inputs, method=m)]
        if real is not None:
            theirs = real.meshVerticeInpaint(*inputs, method)
            calls.append(lambda m=method: real.meshVerticeInpaint(*inputs, m))
            checks.append(
                f"{method}: masks equal {np.array_equal(ours[1], theirs[1])}, texture max |difference| "
                f"{np.abs(ours[0] - theirs[0]).max():.2e}"
            )
        seconds = timed_together(calls, repeat=3)
        inpaint_rows.append(
            [
                f"meshVerticeInpaint ({method})",
                f"{seconds[0] * 1e3:.0f}",
                f"{seconds[1] * 1e3:.0f}" if real is not None else "not built (--hunyuan-inpaint)",
            ]
        )
    texture, mask = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[1]) > 0
    bake = timed(lambda: B.inpaint_mesh(texture, mask, vertices, uvs, faces), repeat=3)
    inpaint_rows.append(["Bake Texture inpaint=mesh (B.inpaint_mesh)", f"{bake * 1e3:.0f}", "-"])
    inpaint_text = table(
        ["call (1024^2 texture)", "stand-in, CPU ms", "Hunyuan3D-2.1's extension, CPU ms"], inpaint_rows
    )
    if checks:
        inpaint_text += "\n\nAgainst the extension built from source: " + "; ".join(checks) + "."
    report(
        "standins",
        f"Compiled 3D dependencies' stand-ins ({len(faces)}-triangle UV sphere)",
        [
            ("nvdiffrast.torch (utils/nvdiffrast.py)", nvdiffrast_text),
            ("mesh_inpaint_processor (utils/mesh_inpaint.py)", inpaint_text),
        ],
        "python bench/bench_standins.py [--hunyuan-inpaint DIR]",
    )


if __name__ == "__main__":
    main()
