"""RasterKit_LoadMesh and RasterKit_MeshRasterizer: meshes into normal, depth, position, mask and
face-id maps and shaded, vertex-colour or textured renders, from one view, the six texture-baking views,
a list of views or core Load3D's camera, with no compiled extension. Parsing is utils/inputs/mesh and
mesh_files', cameras, maps and rendering utils/mesh_rasterizer's."""

from __future__ import annotations

import os

import torch

from ..utils import mesh_rasterizer as M
from ..utils.core.device import check_memory, run_chunked
from ..utils.inputs import mesh_files as files
from ..utils.inputs.mesh import (
    MESH_FIELDS,
    NORMAL_SMOOTHINGS,
    SHADINGS,
    Mesh,
    core_colours,
    log_unread_fields,
    mesh_tensors,
    parse_camera_info,
    parse_model_info,
    parse_view_list,
    shading_inputs,
)
from ._comfy import Progress, comfy_module, intermediate_device, render_device
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String

NORMAL_SMOOTHING = Combo(
    "normal_smoothing",
    NORMAL_SMOOTHINGS,
    tooltip="how the normals are made: auto (the file's normals where the mesh has them, else by_position); "
    "by_position (smooth across vertices that share a position, so UV seams do not show; hard across "
    "edges sharper than smoothing_angle); by_vertex (smooth per vertex of the mesh: its split vertices "
    "are hard edges); flat (each triangle's own); from_file (the mesh's normals)",
    optional=True,  # so that API prompts saved before it still validate
)
SMOOTHING_ANGLE = Float(
    "smoothing_angle",
    60.0,
    0.0,
    180.0,
    1.0,
    tooltip="by_position (and auto without the file's normals): edges whose faces meet at more than this "
    "many degrees stay hard (0: flat but for coplanar faces; 180: everything smooth)",
    optional=True,
)

# Peak memory of MeshRasterizer per pixel of one view (measured: a 2048x2048 view raised the peak RSS by
# ~190 B a pixel): the outputs it returns (68 B, and their concatenation), and the work of a view.
OUTPUT_BYTES_PER_PIXEL = 156
WORK_BYTES_PER_PIXEL = 200
# the render's shading, and the antialias pass's temporaries (per direction, freed after it)
SHADING_BYTES_PER_PIXEL = 100
ANTIALIAS_BYTES_PER_PIXEL = 600
# the rasterizer's set-up of each triangle and vertex of a view (screen corners, edge terms, boxes),
# and the mesh's own arrays (faces, normals, edge partners) once
WORK_BYTES_PER_FACE_VIEW = 150
WORK_BYTES_PER_VERTEX_VIEW = 80
MESH_BYTES_PER_FACE = 200
MESH_BYTES_PER_VERTEX = 100
# the normals' work before the views (normals.corner_normals by position: welding, edge partners,
# smoothing groups), beyond what the mesh's arrays take: measured 250-550 B a triangle at its peak
NORMALS_BYTES_PER_FACE = 250
# Work (pixels + faces + vertices) of the views rendered between two interrupt checks: a pixel or a
# triangle of a view costs ~2-4 us on a 2-core CPU (~15 us when it is busy), so a chunk takes well under
# a second
CHUNK_WORK = 1 << 16
BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "example_workflows", "assets")


def _mesh_class():
    try:  # the core class, so that core nodes (SaveGLB) take our meshes
        from comfy_extras.nodes_hunyuan3d import MESH
    except ImportError:
        return Mesh
    return MESH


def make_mesh(vertices: torch.Tensor, faces: torch.Tensor, **fields) -> object:
    """A MESH of the core class where ComfyUI has one (older cores take vertices and faces only: the
    optional fields are set as attributes), else ours; fields are MESH_FIELDS."""
    mesh = _mesh_class()(vertices, faces)
    for name in MESH_FIELDS:
        setattr(mesh, name, fields.get(name))
    mesh.vertex_colors = mesh.colors  # newer cores' name for them (SaveGLB and Render Mesh read it)
    return mesh


def input_directory() -> str | None:
    """ComfyUI's input folder; None outside ComfyUI (tests, demo), where only the bundled meshes load."""
    folder_paths = comfy_module("folder_paths", "get_input_directory")
    return folder_paths.get_input_directory() if folder_paths is not None else None


def mesh_files() -> list[str]:
    """Mesh files of the input folder and its subfolders, then the bundled ones it does not shadow."""
    return files.mesh_files([input_directory(), BUNDLED])


def resolve_mesh_file(name: str) -> str:
    """The real path of mesh file `name` (relative to ComfyUI's input folder, else bundled with the pack)."""
    return files.resolve_mesh_file(name, [input_directory(), BUNDLED])


def _file_digest(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LoadMesh(RasterKitNode):
    NODE_ID = "RasterKit_LoadMesh"
    DISPLAY_NAME = "Load Mesh (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = (
        "Loads .obj, .glb, .gltf, .ply, .stl or .off (trimesh) from ComfyUI's input folder or its "
        "subfolders as a MESH (and as a TRIMESH); rasterkit_torus.obj is bundled with the pack."
    )
    INPUTS = [
        Combo(
            "mesh_file",
            mesh_files,
            default="rasterkit_torus.obj",
            tooltip="a mesh in ComfyUI's input folder or its subfolders (upload one with the button)",
        ),
        Bool("normalize", True, tooltip="centre the mesh and scale it to fit the cube [-1, 1]"),
    ]
    OUTPUTS = [
        Output(
            "MESH",
            "mesh",
            "vertices and faces (core ComfyUI's MESH: Save GLB and the 3D nodes take it), "
            "with the UVs and base-colour texture, vertex colours and normals the file has",
        ),
        Output("TRIMESH", "trimesh", "the same mesh as a trimesh.Trimesh (ComfyUI-3D-Pack style TRIMESH)"),
    ]

    @classmethod
    def fingerprint(cls, mesh_file="", normalize=True):
        """The file's content hash, so that ComfyUI reruns the node when the file is edited."""
        try:
            return _file_digest(resolve_mesh_file(mesh_file))
        except (ValueError, OSError):
            return ""  # run() names the problem

    @classmethod
    def run(cls, mesh_file="", normalize=True):
        vertices, faces, fields, loaded = files.load_mesh_file(resolve_mesh_file(mesh_file), mesh_file, normalize)
        return make_mesh(vertices, faces, **core_colours(fields)), loaded


class MeshRasterizer(RasterKitNode):
    NODE_ID = "RasterKit_MeshRasterizer"
    DISPLAY_NAME = "Mesh Rasterizer (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = (
        "Rasterizes a mesh into normal, depth, position, mask and face-id maps and a render (Lambert, "
        "matcap, vertex colours or texture, anti-aliased), from one orbit camera, the six texture-baking "
        "views, a list of views or core Load3D's camera. Plain torch: no CUDA extension to build."
    )
    INPUTS = [
        Int("width", 512, 16, 8192, 16, tooltip="width of every map in pixels"),
        Int("height", 512, 16, 8192, 16, tooltip="height of every map in pixels"),
        Combo(
            "views",
            ("single", "six", "list"),
            tooltip="single: one camera at azimuth and elevation; six: front, right, back, left, top and bottom "
            "(the texture-baking views; turned by azimuth and elevation when turn_six_views is on); "
            "list: the views of view_list",
        ),
        Float(
            "azimuth",
            30.0,
            -360.0,
            360.0,
            1.0,
            tooltip="camera angle around the vertical axis in degrees: 0 looks from the front (+z), 90 from the "
            "right (+x). With views=six it turns the whole rig if turn_six_views is on",
        ),
        Float(
            "elevation",
            20.0,
            -90.0,
            90.0,
            1.0,
            tooltip="camera angle above the horizon in degrees: 90 looks from above. With views=six it tilts the "
            "whole rig if turn_six_views is on (e.g. -90 stands a z-up mesh upright)",
        ),
        Float(
            "distance",
            5.5,
            0.1,
            1000.0,
            0.1,
            tooltip="camera distance from the origin (a normalized mesh fits the cube [-1, 1]; from 5.5 on, "
            "every view of it at fov 40 shows all of it)",
        ),
        Combo(
            "projection",
            ("perspective", "orthographic"),
            tooltip="orthographic: parallel rays, sizes do not shrink with depth (the usual texture-baking choice)",
        ),
        Float(
            "fov",
            40.0,
            1.0,
            170.0,
            1.0,
            tooltip="vertical field of view (perspective); orthographic views show the same height at the mesh centre",
        ),
        Bool(
            "cull_back_faces",
            True,
            tooltip="skip triangles facing away from the camera (off: open meshes show their inside)",
        ),
        # after the older widgets, so that saved workflows keep their values (and their standard six views)
        Bool(
            "turn_six_views",
            False,
            tooltip="views=six: turn the whole rig by azimuth and elevation (its front "
            "view is then the single view at those angles); off: the standard "
            "axis views, azimuth and elevation unused",
        ),
        Socket(
            "mesh",
            "MESH",
            optional=True,
            tooltip="core ComfyUI's MESH or ComfyUI-3D-Pack's (.v, .f); the first mesh of a batch",
        ),
        Socket("trimesh", "TRIMESH", optional=True, tooltip="a trimesh.Trimesh, instead of mesh"),
        # after the older widgets, at defaults that keep the older outputs as they were
        Combo(
            "normal_space",
            ("view", "world"),
            tooltip="normal map in view space (x right, y up, z towards the camera) or world space (x, y, z of "
            "the mesh's coordinates)",
        ),
        Combo(
            "depth_mode",
            ("normalized", "distance"),
            tooltip="normalized: white nearest, dark farthest, each view scaled on its own; distance: the "
            "distance along the view axis in scene units as the pixel's value (0 on background)",
        ),
        Combo(
            "shading",
            SHADINGS,
            tooltip="the render output: lambert (white, lit from light_azimuth and light_elevation), none "
            "(flat white), matcap (the matcap image looked up by view-space normal), vertex_color or "
            "texture (the mesh's vertex colours or base-colour texture through its UVs, mipmapped; unlit)",
        ),
        Float(
            "light_azimuth",
            30.0,
            -360.0,
            360.0,
            1.0,
            tooltip="lambert: light direction around the camera's vertical axis in degrees (view space: the "
            "light turns with the camera; 0 is a headlight, 90 from the right)",
        ),
        Float(
            "light_elevation",
            30.0,
            -90.0,
            90.0,
            1.0,
            tooltip="lambert: light direction above the camera's horizon in degrees (view space)",
        ),
        Bool(
            "antialias",
            False,
            tooltip="render and render_alpha: blend pixels across silhouette edges by the "
            "part of each the mesh covers (the other maps stay aliased)",
        ),
        String(
            "view_list",
            "0,0; 90,0; 180,0; 270,0; 0,90; 180,-90",
            tooltip="views=list: 'azimuth,elevation[,weight]; ...' in degrees, one view each (Hy3DCameraConfig "
            "style); weights (default 1) come out in raster's view_weights",
        ),
        Float(
            "ortho_scale",
            0.0,
            0.0,
            1000.0,
            0.01,
            tooltip="orthographic: the height the view shows in scene units; 0 keeps the height a perspective "
            "view with this fov shows at the mesh centre",
        ),
        Socket(
            "matcap",
            "IMAGE",
            optional=True,
            tooltip="shading=matcap: a matcap image (a lit sphere seen from the front; its first image is used)",
        ),
        Socket(
            "camera_info",
            "LOAD3D_CAMERA",
            optional=True,
            tooltip="core Load3D's camera_info: when connected, Load3D's own view of the mesh: from its position "
            "towards its target, its zoom, camera type and fov (where it sends one, else the fov input), with the "
            "mesh fitted as Load3D fits a model (views, azimuth, elevation and distance unused)",
        ),
        Socket(
            "model_3d_info",
            "LOAD3D_MODEL_INFO",
            optional=True,
            tooltip="core Load3D's model_3d_info, with its camera_info: the viewer's model transform, applied to "
            "the mesh instead of Load3D's fit (give the mesh as the file has it: Load Mesh with normalize off)",
        ),
        # after the older widgets: saved workflows keep their values
        NORMAL_SMOOTHING,
        SMOOTHING_ANGLE,
    ]
    OUTPUTS = [
        Output(
            "IMAGE", "normal", "view-space normals as colours (x right, y up, z towards the camera); background #8080FF"
        ),
        Output("IMAGE", "depth", "white nearest, dark farthest, each view scaled on its own; background black"),
        Output("IMAGE", "position", "world position scaled into the mesh's bounding box (0..1 per axis)"),
        Output("MASK", "mask", "1 where the mesh covers the pixel"),
        Output("IMAGE", "face_id", "a distinct colour per triangle"),
        Output(
            "RASTER",
            "raster",
            "findices (0 = background, else face + 1), barycentric, the cameras' "
            "view and projection matrices and view_weights",
        ),
        Output(
            "IMAGE",
            "render",
            "the mesh shaded as shading says, on black (premultiplied: composite it "
            "over a background with render_alpha)",
        ),
        Output("MASK", "render_alpha", "the render's coverage: anti-aliased at silhouettes when antialias is on"),
    ]

    @classmethod
    def run(
        cls,
        width=512,
        height=512,
        views="single",
        azimuth=30.0,
        elevation=20.0,
        distance=5.5,
        projection="perspective",
        fov=40.0,
        cull_back_faces=True,
        turn_six_views=False,
        mesh=None,
        trimesh=None,
        normal_space="view",
        depth_mode="normalized",
        shading="lambert",
        light_azimuth=30.0,
        light_elevation=30.0,
        antialias=False,
        view_list="0,0; 90,0; 180,0; 270,0; 0,90; 180,-90",
        ortho_scale=0.0,
        matcap=None,
        camera_info=None,
        model_3d_info=None,
        normal_smoothing="auto",
        smoothing_angle=60.0,
    ):
        vertices, faces, fields = mesh_tensors(mesh, trimesh)
        log_unread_fields(mesh, cls.DISPLAY_NAME)
        shade = shading_inputs(shading, fields, matcap)
        device = render_device()
        if camera_info is not None:
            vertices, fields, view, proj = _load3d_view(
                vertices, fields, width, height, projection, fov, ortho_scale, camera_info, model_3d_info
            )
            weights = None
        elif model_3d_info is not None:
            raise ValueError(
                "model_3d_info: connect the camera_info of the same Load3D too (the transform places the mesh "
                "in that viewer's scene)"
            )
        else:
            view, proj, weights = _cameras(
                width / height,
                views,
                azimuth,
                elevation,
                distance,
                projection,
                fov,
                turn_six_views,
                view_list,
                ortho_scale,
            )
        # after Load3D's transform, which turns the file's normals with the vertices
        normals = M.corner_normals(vertices, faces, normal_smoothing, smoothing_angle, fields.get("normals"))
        homogeneous = torch.cat([vertices, torch.ones(len(vertices), 1)], 1)
        camera = proj @ view
        count, pixels = len(view), width * height
        # views in chunks of about CHUNK_WORK pixels, faces and vertices, so that an interrupt is seen
        # between them within a second
        views_per_chunk = max(1, CHUNK_WORK // (pixels + len(faces) + len(vertices)))
        per_view = _check_render_memory(
            width, height, count, len(vertices), len(faces), antialias, views_per_chunk, device
        )
        partners = M.edge_partners(faces, vertices) if antialias else None
        light = M.light_direction(light_azimuth, light_elevation)
        progress = Progress(count)
        out = intermediate_device()

        def render(start, stop, on):
            clip = torch.einsum("bij,nj->bni", camera[start:stop], homogeneous)
            maps = M.render_maps(
                clip.to(on),
                view[start:stop].to(on),
                vertices.to(on),
                faces.to(on),
                normals.to(on),
                width,
                height,
                cull_back_faces,
                normal_space,
                depth_mode,
                {name: value.to(on) for name, value in shade.items()},
                light.to(on) if shading == "lambert" else None,
                None if partners is None else partners.to(on),
            )
            return tuple(value.to(out) for value in maps)

        chunks = run_chunked(render, count, per_view, device, on_chunk=progress, limit=views_per_chunk)
        # one chunk (the usual case) is returned as it is: a concatenation would copy every map
        normal, depth, position, mask, face_id, findices, barycentric, shaded, alpha = (
            torch.cat(maps) if len(maps) > 1 else maps[0] for maps in zip(*chunks, strict=True)
        )
        raster = {
            "findices": findices,
            "barycentric": barycentric,
            "view": view,
            "projection": proj,
            "faces": faces,
            "vertices": vertices,
            "view_weights": torch.ones(count) if weights is None else torch.tensor(weights),
        }
        return normal, depth, position, mask, face_id, raster, shaded, alpha


def _load3d_view(vertices, fields, width, height, projection, fov, ortho_scale, info, model_info):
    """Load3D's view of the mesh: vertices [V,3] and fields moved by the viewer's model transform
    (model_3d_info's, else Load3D's fit of a model to its view), the view [1,4,4] and projection [4,4] of
    its camera_info (fov and orthographic height where it sends them, else the fov input and
    ortho_scale, else Load3D's default frustum, 10 tall)."""
    camera = parse_camera_info(info)
    model = M.load3d_fit(vertices) if model_info is None else M.model_matrix(*parse_model_info(model_info))
    vertices, fields = M.moved(model, vertices, fields)
    view = M.look_from(camera.position, camera.target)
    near, far = M.depth_range(view[0], vertices)
    half_height = camera.half_height or (ortho_scale / 2 if ortho_scale > 0 else M.LOAD3D_FRUSTUM_HEIGHT / 2)
    proj = M.load3d_projection(
        camera.camera_type or projection, camera.fov or fov, half_height, camera.zoom, width, height, near, far
    )
    return vertices, fields, view, proj


def _cameras(aspect, views, azimuth, elevation, distance, projection, fov, turn_six_views, view_list, ortho_scale):
    """view [B,4,4], projection [4,4] and the views' weights (None: all 1) of MeshRasterizer's inputs."""
    weights = None
    if views == "six":
        view = M.turned_rig(
            M.orbit_cameras([azimuth], [elevation], distance)[0] if turn_six_views else torch.eye(4), distance
        )
    elif views == "list":
        azimuths, elevations, weights = parse_view_list(view_list)
        view = M.orbit_cameras(azimuths, elevations, distance)
    else:
        view = M.orbit_cameras([azimuth], [elevation], distance)
    return view, M.projection_matrix(projection, fov, distance, aspect, 1.0, ortho_scale), weights


def _check_render_memory(width, height, views, vertices, faces, antialias, views_per_chunk, device) -> int:
    """Refuse a render whose estimate (render_bytes) does not fit: outputs on ComfyUI's intermediate device,
    a chunk of views' work on `device`, the mesh on both. Returns the work of one view in bytes."""
    outputs, per_view, mesh_bytes = render_bytes(width, height, views, vertices, faces, antialias)
    work = per_view * min(views, views_per_chunk)
    what = (
        f"width x height x views ({width} x {height} x {views}) with a mesh of {vertices:,} vertices "
        f"and {faces:,} triangles"
    )
    if device == intermediate_device():
        check_memory(outputs + work + mesh_bytes, what, device)
    else:
        check_memory(outputs + mesh_bytes, what, intermediate_device())
        check_memory(work + mesh_bytes, what, device)
    return per_view


def render_bytes(
    width: int, height: int, views: int, vertices: int, faces: int, antialias: bool
) -> tuple[int, int, int]:
    """MeshRasterizer's estimated peak in bytes, in three parts: its outputs (every view), the work of one
    view (its pixels, triangles and vertices; a chunk of views takes that many times it) and the mesh's
    own arrays."""
    pixels = width * height
    per_view = (
        pixels * (WORK_BYTES_PER_PIXEL + SHADING_BYTES_PER_PIXEL + ANTIALIAS_BYTES_PER_PIXEL * antialias)
        + faces * WORK_BYTES_PER_FACE_VIEW
        + vertices * WORK_BYTES_PER_VERTEX_VIEW
    )
    mesh = (MESH_BYTES_PER_FACE + NORMALS_BYTES_PER_FACE) * faces + MESH_BYTES_PER_VERTEX * vertices
    return OUTPUT_BYTES_PER_PIXEL * pixels * views, per_view, mesh


NODES = [LoadMesh, MeshRasterizer]
