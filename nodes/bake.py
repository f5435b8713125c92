"""RasterKit_UVMaps and RasterKit_BakeTexture: a mesh's surface in its texture's layout, and views of it
(from MeshRasterizer's cameras) baked into a texture, with no compiled extension."""

from __future__ import annotations

import torch

from ..utils.core.device import check_memory
from ..utils.inputs.mesh import mesh_tensors
from ..utils.mesh_rasterizer import bake as B
from ..utils.mesh_rasterizer import corner_normals
from ._comfy import Progress, intermediate_device, render_device
from ._schema import Combo, Float, Int, Output, RasterKitNode, Socket
from ._validate import check_images
from .mesh import NORMAL_SMOOTHING, NORMALS_BYTES_PER_FACE, SMOOTHING_ANGLE, make_mesh

# Peak memory (measured on the CPU at three sizes each: tests/nodes/test_mesh_memory.py) of the UV maps per
# texel (the rasterizer's work, the maps, their seam padding double-buffered: ~140-170 B), of a bake per
# texel of its maps and padding, per texel and view in a chunk (projected positions, screen
# coordinates, samples, weights and their temporaries: ~110 B), per pixel of the views (depth buffers)
# and of a chunk of them being rasterized, and per triangle of the mesh
MAPS_BYTES_PER_TEXEL = 200
BAKE_BYTES_PER_TEXEL = 100
BAKE_BYTES_PER_TEXEL_VIEW = 110
BAKE_BYTES_PER_PIXEL = 8
DEPTH_BYTES_PER_PIXEL = 80
MESH_BYTES_PER_FACE = 100

TEXTURE_SIZE = Int("texture_size", 1024, 2, 8192, tooltip="the texture's width and height in texels")
DILATION = Int(
    "dilation",
    4,
    0,
    256,
    tooltip="seam padding: texels outside the UV islands within this many "
    "texels are filled from the nearest inside ones, so that "
    "bilinear and mipmapped lookups do not bleed in the background",
)
INPAINT_MODES = ("dilation", "mesh", "none")
INPAINT_TOOLTIP = (
    "texels no view sees: dilation fills those within `dilation` texels of seen ones (and pads the "
    "islands); mesh fills every one inside the UV islands by propagating the seen colours over the "
    "mesh's surface (Hunyuan3D-2.1's mesh inpainting), then pads; none leaves them black, unpadded"
)


def _uv_mesh(mesh):
    """vertices [V,3], faces [F,3] and the other MESH fields of a mesh with UVs."""
    vertices, faces, fields = mesh_tensors(mesh, None)
    if "uvs" not in fields:
        raise ValueError(
            "mesh: has no UVs (a texture layout); load a mesh with UVs (e.g. a textured .obj or "
            ".glb) or unwrap it in a 3D tool first"
        )
    return vertices, faces, fields


def maps_bytes(texture_size: int, faces: int) -> int:
    """UV Maps' estimated peak in bytes: the maps, their seam padding and the mesh."""
    return MAPS_BYTES_PER_TEXEL * texture_size**2 + (MESH_BYTES_PER_FACE + NORMALS_BYTES_PER_FACE) * faces


def _uv_surface(
    vertices, faces, fields, texture_size: int, device: torch.device, progress, smoothing="auto", angle=60.0
):
    """vertices, faces on device and uv_maps' position, normal, mask there; normals by corner_normals'
    smoothing and angle."""
    normals = corner_normals(vertices, faces, smoothing, angle, fields.get("normals"))
    vertices, faces = vertices.to(device), faces.to(device)
    maps = B.uv_maps(
        vertices, normals.to(device), fields["uvs"].to(device), faces, faces, texture_size, on_band=progress
    )
    return vertices, faces, maps


class UVMaps(RasterKitNode):
    NODE_ID = "RasterKit_UVMaps"
    DISPLAY_NAME = "UV Maps (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = (
        "The mesh's surface in its texture's layout: world positions and normals at every texel "
        "its UV islands cover (the maps texture-baking and inpainting in UV space work on)."
    )
    INPUTS = [
        Socket("mesh", "MESH", tooltip="a MESH with UVs (LoadMesh keeps a file's UVs)"),
        TEXTURE_SIZE,
        DILATION,
        NORMAL_SMOOTHING,
        SMOOTHING_ANGLE,
    ]
    OUTPUTS = [
        Output(
            "IMAGE",
            "position",
            "world position scaled into the mesh's bounding box (0..1 per axis); "
            "black outside the UV islands (and their padding)",
        ),
        Output("IMAGE", "normal", "world-space normals as colours (n * 0.5 + 0.5); #8080FF outside"),
        Output("MASK", "mask", "1 on texels the UV islands cover (before padding)"),
    ]

    @classmethod
    def run(cls, mesh=None, texture_size=1024, dilation=4, normal_smoothing="auto", smoothing_angle=60.0):
        device = render_device()
        vertices, faces, fields = _uv_mesh(mesh)
        check_memory(
            maps_bytes(texture_size, len(faces)),
            f"texture_size ({texture_size}) with a mesh of {len(faces):,} triangles",
            device,
        )
        progress = Progress(texture_size)
        vertices, _, (position, normal, mask) = _uv_surface(
            vertices, faces, fields, texture_size, device, progress, normal_smoothing, smoothing_angle
        )
        low, high = vertices.amin(0), vertices.amax(0)
        scaled = torch.where(mask[..., None], (position - low) / (high - low).clamp_min(1e-12), 0.0)
        colours = torch.where(mask[..., None], normal * 0.5 + 0.5, torch.tensor([0.5, 0.5, 1.0], device=device))
        padded, _ = B.dilate(torch.cat([scaled, colours], -1), mask, dilation, on_band=progress)
        out = intermediate_device()
        return padded[None, ..., :3].to(out), padded[None, ..., 3:].to(out), mask[None].float().to(out)


class BakeTexture(RasterKitNode):
    NODE_ID = "RasterKit_BakeTexture"
    DISPLAY_NAME = "Bake Texture (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = (
        "Projects views of a mesh (e.g. generated from MeshRasterizer's normal or position maps) "
        "back onto it and blends them into its texture: each texel takes the views that see it "
        "(a depth test), weighted by the view's weight and how squarely it faces the camera."
    )
    INPUTS = [
        Socket("mesh", "MESH", tooltip="the MESH the views show, with UVs"),
        Socket(
            "images",
            "IMAGE",
            tooltip="one image per view of raster, in its order (any size of the "
            "same aspect ratio as the rasterized views)",
        ),
        Socket(
            "raster",
            "RASTER",
            tooltip="MeshRasterizer's raster output: its cameras (view and projection matrices) and view_weights",
        ),
        TEXTURE_SIZE,
        DILATION,
        Float(
            "exponent",
            4.0,
            0.0,
            32.0,
            0.1,
            tooltip="a view's weight at a texel is its view weight x cos(normal, direction to the "
            "camera) ^ exponent: higher favours the view that faces the surface most squarely",
        ),
        Float(
            "depth_tolerance",
            0.01,
            0.0001,
            1.0,
            0.001,
            tooltip="a texel is seen by a view where its depth is within this fraction of the mesh's "
            "bounding-box diagonal of the view's depth buffer",
        ),
        Combo("inpaint", INPAINT_MODES, "dilation", tooltip=INPAINT_TOOLTIP),
    ]
    OUTPUTS = [
        Output(
            "IMAGE",
            "texture",
            "the baked texture (row 0 is v = 1, OpenGL's UVs); black where no "
            "view sees the surface, beyond the padding",
        ),
        Output("MASK", "mask", "1 on texels some view saw (before padding): inpaint the rest"),
        Output("MESH", "mesh", "the mesh with the baked texture attached (Save GLB writes it)"),
    ]

    @classmethod
    def run(
        cls,
        mesh=None,
        images=None,
        raster=None,
        texture_size=1024,
        dilation=4,
        exponent=4.0,
        depth_tolerance=0.01,
        inpaint="dilation",
    ):
        check_images(images)
        if inpaint not in INPAINT_MODES:
            raise ValueError(f"inpaint: expected one of {', '.join(INPAINT_MODES)}, got {inpaint!r}")
        if not isinstance(raster, dict) or not {"view", "projection"} <= raster.keys():
            raise ValueError("raster: expected MeshRasterizer's raster output (with its view and projection matrices)")
        view, projection, weights = _cameras(raster)
        findices = raster.get("findices")
        if len(images) != len(view):
            raise ValueError(
                f"images: {len(images)} images, but raster has {len(view)} views (one image per "
                f"view, in the raster's order)"
            )
        if findices is not None:
            raster_height, raster_width = findices.shape[-2:]
            if abs(images.shape[2] / images.shape[1] - raster_width / raster_height) > 0.01:
                raise ValueError(
                    f"images: {images.shape[2]}x{images.shape[1]} has another aspect ratio than "
                    f"raster's views ({raster_width}x{raster_height})"
                )
        device = render_device()
        vertices, faces, fields = _uv_mesh(mesh)
        count, height, width = images.shape[:3]
        check_memory(
            bake_bytes(texture_size, count, height, width, len(faces)),
            f"texture_size x views ({texture_size}^2 x {count} of {width}x{height}) with a mesh of "
            f"{len(faces):,} triangles",
            device,
        )
        progress = Progress(texture_size)
        # the normals weigh the views: smooth across UV seams, so that both sides of a seam take the same views
        vertices, faces, (position, normal, mask) = _uv_surface(vertices, faces, fields, texture_size, device, progress)
        texture, weight = B.bake(
            images[..., :3].to(device),
            view.to(device),
            projection.to(device),
            vertices,
            faces,
            position,
            normal,
            mask,
            weights,
            exponent,
            depth_tolerance,
            on_chunk=progress,
        )
        seen = weight > 0
        filled = seen
        if inpaint == "mesh":
            texture, filled = B.inpaint_mesh(texture, seen, vertices, fields["uvs"].to(device), faces)
        if inpaint != "none":
            texture, _ = B.dilate(texture, filled, dilation, on_band=progress)
        out = intermediate_device()
        texture = texture.clamp(0, 1).to(out)
        fields["texture"] = texture
        baked = make_mesh(
            vertices[None].to(out), faces[None].to(out), **{name: value[None].to(out) for name, value in fields.items()}
        )
        return texture[None], seen[None].float().to(out), baked


def _cameras(raster: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """view [N,4,4], projection [N,4,4] or [4,4] and view_weights [N] (or None) of a raster output, checked:
    a ValueError naming raster (and the field) unless finite, of the right shapes, and weights >= 0."""
    try:
        view = B.camera_matrices(raster["view"], "view")
        projection = B.camera_matrices(raster["projection"], "projection", len(view))
        weights = raster.get("view_weights")
        weights = None if weights is None else B.view_weights(weights, len(view), torch.device("cpu"))
    except ValueError as error:
        raise ValueError(f"raster: {error}") from None
    return view, projection, weights


def bake_bytes(texture_size: int, views: int, height: int, width: int, faces: int) -> int:
    """Bake Texture's estimated peak in bytes: the UV maps and their padding, a chunk of texel-views, the
    views' depth buffers (and the rasterizer's work on a chunk of them) and the mesh."""
    texel_views = min(texture_size**2 * views, B.BAKE_CHUNK_TEXEL_VIEWS + texture_size * views)
    pixels = height * width
    depth_chunk = min(views, max(1, B.CHUNK_WORK // (pixels + faces)))
    return (
        BAKE_BYTES_PER_TEXEL * texture_size**2
        + BAKE_BYTES_PER_TEXEL_VIEW * texel_views
        + BAKE_BYTES_PER_PIXEL * pixels * views
        + DEPTH_BYTES_PER_PIXEL * pixels * depth_chunk
        + MESH_BYTES_PER_FACE * faces * (1 + depth_chunk)
        + NORMALS_BYTES_PER_FACE * faces
    )


NODES = [UVMaps, BakeTexture]
