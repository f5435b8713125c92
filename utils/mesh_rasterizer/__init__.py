"""The design card's triangle rasterizer: rasterize (torch path, CUDA kernels, numba loops), cameras, the
Mesh Rasterizer's maps, shading, UV maps and texture baking, and Hunyuan3D-2's custom_rasterizer API
(custom_rasterizer.py, which the pack registers under that name when the real extension is missing).
Used by the nodes RasterKit_MeshRasterizer (nodes/mesh.py), RasterKit_UVMaps and RasterKit_BakeTexture
(nodes/bake.py).

Modules: raster (torch path and backend choice), raster_cuda (kernels and launch), raster_cpu (numba),
constants (shared by those three), cameras, maps, normals, shading, bake, custom_rasterizer.
"""

from . import bake, custom_rasterizer, shading
from .bake import camera_matrices, dilate, uv_maps, view_weights
from .cameras import (
    LOAD3D_FIT_SIZE,
    LOAD3D_FRUSTUM_HEIGHT,
    STANDARD_VIEWS,
    depth_range,
    load3d_fit,
    load3d_projection,
    look_at,
    look_from,
    model_matrix,
    moved,
    orbit_cameras,
    orthographic,
    perspective,
    projection_matrix,
    turned_rig,
)
from .maps import face_colours, render_maps
from .normals import corner_normals
from .raster import interpolate, rasterize, rasterize_views
from .shading import edge_partners, light_direction


def cpu_loops():
    """The module of numba's loops (raster_cpu), imported on call: numba is slow to import."""
    from . import raster_cpu

    return raster_cpu


__all__ = [
    "LOAD3D_FIT_SIZE",
    "LOAD3D_FRUSTUM_HEIGHT",
    "STANDARD_VIEWS",
    "bake",
    "camera_matrices",
    "corner_normals",
    "cpu_loops",
    "custom_rasterizer",
    "depth_range",
    "dilate",
    "edge_partners",
    "face_colours",
    "interpolate",
    "light_direction",
    "load3d_fit",
    "load3d_projection",
    "look_at",
    "look_from",
    "model_matrix",
    "moved",
    "orbit_cameras",
    "orthographic",
    "perspective",
    "projection_matrix",
    "rasterize",
    "rasterize_views",
    "render_maps",
    "shading",
    "turned_rig",
    "uv_maps",
    "view_weights",
]
