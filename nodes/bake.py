"""RasterKit_UVMaps and RasterKit_BakeTexture: a mesh's surface in its texture's layout, and views of it
(from MeshRasterizer's cameras) baked into a texture, with no compiled extension."""
from __future__ import annotations

import torch

from ..utils import mesh_bake as B
from ..utils.device import check_memory
from ._comfy import Progress, intermediate_device, render_device
from ._schema import Combo, Float, Int, Output, RasterKitNode, Socket
from ._validate import check_images
from .mesh import _mesh_tensors, _vertex_normals, make_mesh

# Peak memory of the UV maps per texel (the rasterizer's work: measured ~390 B at 1024^2 on the CPU) and of
# a bake per texel and view in a chunk (projected positions, screen coordinates, samples, weights and
# their temporaries: measured ~110 B with six views at 1024^2)
MAPS_BYTES_PER_TEXEL = 400
BAKE_BYTES_PER_TEXEL_VIEW = 160

TEXTURE_SIZE = Int("texture_size", 1024, 2, 8192, tooltip="the texture's width and height in texels")
DILATION = Int("dilation", 4, 0, 256, tooltip="seam padding: texels outside the UV islands within this many "
                                             "texels are filled from the nearest inside ones, so that "
                                             "bilinear and mipmapped lookups do not bleed in the background")
INPAINT_MODES = ("dilation", "mesh", "none")
INPAINT_TOOLTIP = ("texels no view sees: dilation fills those within `dilation` texels of seen ones (and pads the "
                   "islands); mesh fills every one inside the UV islands by propagating the seen colours over the "
                   "mesh's surface (Hunyuan3D-2.1's mesh inpainting), then pads; none leaves them black, unpadded")


def _uv_surface(mesh, texture_size: int, device: torch.device):
    """vertices [V,3], faces [F,3], the other MESH fields, and uv_maps' position, normal, mask on device."""
    vertices, faces, fields = _mesh_tensors(mesh, None)
    if "uvs" not in fields:
        raise ValueError("mesh: has no UVs (a texture layout); load a mesh with UVs (e.g. a textured .obj or "
                         ".glb) or unwrap it in a 3D tool first")
    normals = fields["normals"] if "normals" in fields else _vertex_normals(vertices, faces)
    check_memory(MAPS_BYTES_PER_TEXEL * texture_size ** 2, f"texture_size ({texture_size})", device)
    vertices, faces = vertices.to(device), faces.to(device)
    maps = B.uv_maps(vertices, normals.to(device), fields["uvs"].to(device), faces, faces, texture_size)
    return vertices, faces, fields, maps


class UVMaps(RasterKitNode):
    NODE_ID = "RasterKit_UVMaps"
    DISPLAY_NAME = "UV Maps (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = ("The mesh's surface in its texture's layout: world positions and normals at every texel "
                   "its UV islands cover (the maps texture-baking and inpainting in UV space work on).")
    INPUTS = [Socket("mesh", "MESH", tooltip="a MESH with UVs (LoadMesh keeps a file's UVs)"),
              TEXTURE_SIZE, DILATION]
    OUTPUTS = [Output("IMAGE", "position", "world position scaled into the mesh's bounding box (0..1 per axis); "
                                           "black outside the UV islands (and their padding)"),
               Output("IMAGE", "normal", "world-space normals as colours (n * 0.5 + 0.5); #8080FF outside"),
               Output("MASK", "mask", "1 on texels the UV islands cover (before padding)")]

    @classmethod
    def run(cls, mesh=None, texture_size=1024, dilation=4):
        device = render_device()
        vertices, _, _, (position, normal, mask) = _uv_surface(mesh, texture_size, device)
        low, high = vertices.amin(0), vertices.amax(0)
        scaled = torch.where(mask[..., None], (position - low) / (high - low).clamp_min(1e-12), 0.0)
        colours = torch.where(mask[..., None], normal * 0.5 + 0.5, torch.tensor([0.5, 0.5, 1.0], device=device))
        padded, _ = B.dilate(torch.cat([scaled, colours], -1), mask, dilation)
        out = intermediate_device()
        return padded[None, ..., :3].to(out), padded[None, ..., 3:].to(out), mask[None].float().to(out)


class BakeTexture(RasterKitNode):
    NODE_ID = "RasterKit_BakeTexture"
    DISPLAY_NAME = "Bake Texture (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = ("Projects views of a mesh (e.g. generated from MeshRasterizer's normal or position maps) "
                   "back onto it and blends them into its texture: each texel takes the views that see it "
                   "(a depth test), weighted by the view's weight and how squarely it faces the camera.")
    INPUTS = [Socket("mesh", "MESH", tooltip="the MESH the views show, with UVs"),
              Socket("images", "IMAGE", tooltip="one image per view of raster, in its order (any size of the "
                                                "same aspect ratio as the rasterized views)"),
              Socket("raster", "RASTER", tooltip="MeshRasterizer's raster output: its cameras (view and "
                                                 "projection matrices) and view_weights"),
              TEXTURE_SIZE, DILATION,
              Float("exponent", 4.0, 0.0, 32.0, 0.1,
                    tooltip="a view's weight at a texel is its view weight x cos(normal, direction to the "
                            "camera) ^ exponent: higher favours the view that faces the surface most squarely"),
              Float("depth_tolerance", 0.01, 0.0001, 1.0, 0.001,
                    tooltip="a texel is seen by a view where its depth is within this fraction of the mesh's "
                            "bounding-box diagonal of the view's depth buffer"),
              Combo("inpaint", INPAINT_MODES, "dilation", tooltip=INPAINT_TOOLTIP)]
    OUTPUTS = [Output("IMAGE", "texture", "the baked texture (row 0 is v = 1, OpenGL's UVs); black where no "
                                          "view sees the surface, beyond the padding"),
               Output("MASK", "mask", "1 on texels some view saw (before padding): inpaint the rest"),
               Output("MESH", "mesh", "the mesh with the baked texture attached (Save GLB writes it)")]

    @classmethod
    def run(cls, mesh=None, images=None, raster=None, texture_size=1024, dilation=4, exponent=4.0,
            depth_tolerance=0.01, inpaint="dilation"):
        check_images(images)
        if inpaint not in INPAINT_MODES:
            raise ValueError(f"inpaint: expected one of {', '.join(INPAINT_MODES)}, got {inpaint!r}")
        if not isinstance(raster, dict) or not {"view", "projection"} <= raster.keys():
            raise ValueError("raster: expected MeshRasterizer's raster output (with its view and projection "
                             "matrices)")
        view = torch.as_tensor(raster["view"]).float()
        findices = raster.get("findices")
        if len(images) != len(view):
            raise ValueError(f"images: {len(images)} images, but raster has {len(view)} views (one image per "
                             f"view, in the raster's order)")
        if findices is not None:
            raster_height, raster_width = findices.shape[-2:]
            if abs(images.shape[2] / images.shape[1] - raster_width / raster_height) > 0.01:
                raise ValueError(f"images: {images.shape[2]}x{images.shape[1]} has another aspect ratio than "
                                 f"raster's views ({raster_width}x{raster_height})")
        device = render_device()
        # the bake works on the texture's rows in chunks of B.BAKE_CHUNK_TEXEL_VIEWS texel-views at most
        texel_views = min(texture_size ** 2 * len(view), B.BAKE_CHUNK_TEXEL_VIEWS + texture_size * len(view))
        check_memory(BAKE_BYTES_PER_TEXEL_VIEW * texel_views + MAPS_BYTES_PER_TEXEL * texture_size ** 2,
                     f"texture_size x views ({texture_size}^2 x {len(view)})", device)
        vertices, faces, fields, (position, normal, mask) = _uv_surface(mesh, texture_size, device)
        weights = raster.get("view_weights")
        texture, weight = B.bake(images[..., :3].to(device), view.to(device),
                                 torch.as_tensor(raster["projection"]).float().to(device), vertices, faces,
                                 position, normal, mask, None if weights is None else torch.as_tensor(weights),
                                 exponent, depth_tolerance, on_chunk=Progress(texture_size))
        seen = weight > 0
        filled = seen
        if inpaint == "mesh":
            texture, filled = B.inpaint_mesh(texture, seen, vertices, fields["uvs"].to(device), faces)
        if inpaint != "none":
            texture, _ = B.dilate(texture, filled, dilation)
        out = intermediate_device()
        texture = texture.clamp(0, 1).to(out)
        fields["texture"] = texture
        baked = make_mesh(vertices[None].to(out), faces[None].to(out),
                          **{name: value[None].to(out) for name, value in fields.items()})
        return texture[None], seen[None].float().to(out), baked


NODES = [UVMaps, BakeTexture]
